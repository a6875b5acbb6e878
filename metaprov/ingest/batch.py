"""Every batch job the run's processes ran in: ``records.jobs``.

Input: the capture's ``batch-jobs.json`` (what ``scontrol -o show job`` and ``sacct -P`` printed,
see :mod:`metaprov.capture.batch`) and each process's job variables in ``records.environments``
(the ``job`` column, with the fields of its environment record). Output: ``records.jobs``, one row
per job id, and the run's own job (``records.job``: the client's or scheduler's) given the times,
partition and state the batch system states for it.

Rules (nothing guessed): the latest query that answered for a job wins, the controller's
(``scontrol``) answer before the accounting database's (``sacct``) within one query; a time the
batch system prints as ``Unknown``/``None`` is empty; a start is kept only once the job left
``PENDING``, an end only in a final state (a running job's ``EndTime`` is its time limit, not
its end); times are read as UTC only because the query ran with ``TZ=UTC`` and says so. A job
the batch system never answered for is still a row, from its processes' variables
(``source`` = ``environment``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from metaprov.hostlist import expand_nodelist
from metaprov.records import RunRecords, conform

BATCH_JSON = "batch-jobs.json"
_MAX_JSON = 64 << 20
_KEY = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=")
_FINAL = {
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
    "SPECIAL_EXIT",
}
_NO_TIME = {"", "Unknown", "None", "N/A", "(null)"}


def read_batch_jobs(
    run: Path, records: RunRecords, process_jobs: dict[str, dict[str, Any]] | None = None
) -> None:
    """Fill ``records.jobs`` (and the run's own job's facts) from the batch answers and the
    processes' job variables (``process_jobs``: per job id, the variables of its first process
    record, from :func:`metaprov.ingest.environment.read_environment`)."""
    answers = _answers(run, records)
    rows = _from_environment(records, process_jobs or {})
    for jid, facts in answers.items():
        row = rows.setdefault(jid, {"job": jid})
        row.update({k: v for k, v in facts.items() if v is not None})
    env = records.environments
    if len(env) and "job" in env:
        counts = env["job"].dropna().value_counts()
        for jid, row in rows.items():
            row["processes"] = int(counts.get(jid, 0))
    df = pd.DataFrame(sorted(rows.values(), key=lambda r: _id_order(str(r["job"]))))
    records.jobs = conform("jobs", df)
    _own_job(records)


def job_state(value: Any) -> str | None:
    """The state word of a batch system's state text (``CANCELLED by 0`` -> ``CANCELLED``)."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    word = str(value).strip().split(" ")[0]
    return word or None


def parse_scontrol(line: str) -> dict[str, str]:
    """One ``scontrol -o show job`` line as ``{field: value}`` (a value may hold spaces or ``=``).

    Example:
        >>> parse_scontrol("JobId=7 JobName=dask worker JobState=RUNNING TRES=cpu=1,node=1")
        {'JobId': '7', 'JobName': 'dask worker', 'JobState': 'RUNNING', 'TRES': 'cpu=1,node=1'}
    """
    keys = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def parse_sacct(text: str) -> list[dict[str, str]]:
    """``sacct -P`` output (a header line, then ``|``-separated rows) as dicts."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    return [dict(zip(header, ln.split("|"), strict=False)) for ln in lines[1:]]


# -- the batch system's answers ---------------------------------------------------------------


def _answers(run: Path, records: RunRecords) -> dict[str, dict[str, Any]]:
    path = run / BATCH_JSON
    if not path.is_file():
        return {}
    acct = records.accounting
    try:
        if path.stat().st_size > _MAX_JSON:
            acct.warn(BATCH_JSON, f"larger than {_MAX_JSON} bytes; not used")
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        acct.warn(BATCH_JSON, f"not readable JSON: {exc}; the jobs come from the job variables")
        return {}
    queries = data.get("queries") if isinstance(data, dict) else None
    if not isinstance(queries, list):
        acct.warn(BATCH_JSON, "no 'queries' list; not used")
        return {}
    out: dict[str, dict[str, Any]] = {}
    used = 0
    for n, q in enumerate(queries, start=1):
        if not isinstance(q, dict) or q.get("system") != "slurm":
            acct.warn(BATCH_JSON, f"query {n}: not a Slurm query; not used")
            continue
        if q.get("timezone") != "UTC":
            acct.warn(BATCH_JSON, f"query {n}: times not stated in UTC; not used")
            continue
        observed = _time(q.get("queried"), iso=True)
        found = _query_rows(q, n, records)
        scripts = q.get("scripts") if isinstance(q.get("scripts"), dict) else {}
        for jid, facts in found.items():
            facts["observed"] = observed
            script = scripts.get(jid)
            if isinstance(script, dict) and isinstance(script.get("text"), str):
                facts["script"] = script["text"]
                facts["script_sha256"] = str(script.get("sha256") or "") or None
            elif jid in out and out[jid].get("script"):  # a purged job's script stays known
                facts["script"] = out[jid]["script"]
                facts["script_sha256"] = out[jid].get("script_sha256")
            out[jid] = facts
        used += 1
    acct.read(BATCH_JSON, used)
    return out


def _query_rows(q: dict[str, Any], n: int, records: RunRecords) -> dict[str, dict[str, Any]]:
    """The jobs one query answered for: ``scontrol`` lines first, ``sacct`` rows for the rest."""
    found: dict[str, dict[str, Any]] = {}
    sacct: dict[str, dict[str, Any]] = {}
    for cmd in q.get("commands") or []:
        if not isinstance(cmd, dict) or cmd.get("returncode") != 0:
            continue
        argv = cmd.get("argv") or []
        text = str(cmd.get("stdout") or "")
        if argv[:1] == ["scontrol"]:
            for line in text.splitlines():
                if line.startswith("JobId="):
                    facts = _from_scontrol(parse_scontrol(line))
                    if facts:
                        found[facts["job"]] = facts
        elif argv[:1] == ["sacct"]:
            for row in parse_sacct(text):
                facts = _from_sacct(row)
                if facts:
                    sacct[facts["job"]] = facts
    for jid, facts in sacct.items():
        found.setdefault(jid, facts)
    if not found and q.get("jobs"):
        records.accounting.warn(
            BATCH_JSON, f"query {n}: the batch system answered for none of its jobs"
        )
    return found


def _from_scontrol(f: dict[str, str]) -> dict[str, Any] | None:
    jid = f.get("JobId")
    if not jid:
        return None
    if f.get("ArrayJobId") and f.get("ArrayTaskId") and f["ArrayTaskId"] != "N/A":
        jid = f"{f['ArrayJobId']}_{f['ArrayTaskId']}"
    state = job_state(f.get("JobState"))
    return _facts(
        jid,
        source="scontrol",
        name=f.get("JobName"),
        user=f.get("UserId"),
        account=f.get("Account"),
        partition=f.get("Partition"),
        state=state,
        reason=f.get("Reason"),
        exit_code=f.get("ExitCode"),
        submitted=f.get("SubmitTime"),
        eligible=f.get("EligibleTime"),
        started=f.get("StartTime"),
        ended=f.get("EndTime"),
        time_limit=f.get("TimeLimit"),
        nodes=f.get("NodeList"),
        node_count=f.get("NumNodes"),
        cpus=f.get("NumCPUs"),
    )


def _from_sacct(r: dict[str, str]) -> dict[str, Any] | None:
    jid = r.get("JobID") or r.get("JobIDRaw")
    if not jid:
        return None
    return _facts(
        jid,
        source="sacct",
        name=r.get("JobName"),
        user=r.get("User"),
        account=r.get("Account"),
        partition=r.get("Partition"),
        state=job_state(r.get("State")),
        reason=None,
        exit_code=r.get("ExitCode"),
        submitted=r.get("Submit"),
        eligible=r.get("Eligible"),
        started=r.get("Start"),
        ended=r.get("End"),
        time_limit=r.get("Timelimit"),
        nodes=r.get("NodeList"),
        node_count=r.get("NNodes"),
        cpus=r.get("AllocCPUS"),
    )


def _facts(jid: str, **f: Any) -> dict[str, Any]:
    state = f["state"]
    started = _time(f["started"]) if state not in (None, "PENDING") else None
    ended = _time(f["ended"]) if state in _FINAL else None
    nodes = f["nodes"]
    hosts = expand_nodelist(nodes) if nodes and nodes not in ("(null)", "None assigned") else []
    return {
        "job": str(jid),
        "system": "Slurm",
        "name": _text(f["name"]),
        "user": _text(f["user"]),
        "account": _text(f["account"]),
        "partition": _text(f["partition"]),
        "state": state,
        "reason": _text(f["reason"]),
        "exit_code": _text(f["exit_code"]),
        "submitted": _time(f["submitted"]),
        "eligible": _time(f["eligible"]),
        "started": started,
        "ended": ended,
        "time_limit_s": _limit_seconds(f["time_limit"]),
        "nodes": " ".join(hosts) or None,
        "node_count": _int(f["node_count"]),
        "cpus": _int(f["cpus"]),
        "source": f["source"],
    }


# -- the processes' own job variables ---------------------------------------------------------------


_SYSTEM_NAMES = {"slurm": "Slurm", "pbs": "PBS", "lsf": "LSF", "flux": "Flux"}


def _from_environment(
    records: RunRecords, process_jobs: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for jid, f in process_jobs.items():
        jid = str(jid)
        system = str(f.get("system") or "")
        hosts = [str(h) for h in f.get("hosts") or [] if h]
        rows[jid] = {
            "job": jid,
            "system": _SYSTEM_NAMES.get(system, system or None),
            "name": _text(f.get("name")),
            "account": _text(f.get("account")),
            "partition": _text(f.get("queue")),
            "nodes": " ".join(hosts) or None,
            "node_count": _int(f.get("nodes")),
            "cpus": _int(f.get("cores")),
            "source": "environment",
        }
    return rows


def _own_job(records: RunRecords) -> None:
    """The run's own job (``records.job``) gains the times and state its batch answer states."""
    jid = records.job.get("id")
    jobs = records.jobs
    if not jid or not len(jobs):
        return
    row = jobs[jobs["job"] == str(jid)]
    if not len(row) or row["source"].iloc[0] == "environment":
        return
    r = row.iloc[0]
    for key, col in (("start", "started"), ("end", "ended")):
        if pd.notna(r[col]):
            records.job.setdefault(key, r[col])


# -- values ---------------------------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    if value is None:
        return None
    s = str(value).strip()
    return None if s in ("", "(null)", "N/A") else s


def _int(value: Any) -> int | None:
    m = re.match(r"\d+", str(value)) if value is not None else None
    return int(m.group(0)) if m else None


def _time(value: Any, *, iso: bool = False) -> pd.Timestamp | None:
    """A time the batch system printed with ``TZ=UTC`` (``2026-11-28T18:17:47``), or the ISO
    text of the query's own clock (with its offset)."""
    if value is None or str(value).strip() in _NO_TIME:
        return None
    text = str(value).strip()
    if not iso and not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", text):
        return None
    try:
        t = pd.Timestamp(text)
    except (ValueError, TypeError, OverflowError):
        return None
    if pd.isna(t):
        return None
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


def _limit_seconds(value: Any) -> int | None:
    """Slurm's time limit (``[days-]hours:minutes:seconds``, ``minutes``, ``UNLIMITED``)."""
    text = _text(value)
    if not text or not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", text):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(x) for x in text.split(":")] + [0, 0]
        h, m, s = parts[:3]
    else:
        parts = [int(x) for x in text.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        else:
            h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def _id_order(jid: str) -> tuple[int, str]:
    m = re.match(r"\d+", jid)
    return (int(m.group(0)) if m else -1, jid)
