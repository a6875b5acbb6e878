"""The batch jobs a run's processes ran in, as the batch system states them (Slurm).

Input: the capture's environment records (``environment/<role>-<pid>-<token>.json``: each names
the batch job of its process from the job's own variables) and the batch system's commands on
this machine: ``scontrol -o show job <id>`` (the controller's view: state, partition, nodes,
submit/eligible/start/end times), ``sacct -P -X`` (the accounting database, when the site has
one) and ``scontrol write batch_script <id> -`` (the job's script).
Output: ``batch-jobs.json`` in the run directory: every query appended (a later one, after the
jobs ended, adds their end), each command's argv, exit status and output as the command printed
it (secret-looking words replaced by ``***``), so the reader parses what the batch system
said, never a summary of it. The commands run with ``TZ=UTC`` and ``SLURM_TIME_FORMAT=standard``:
the times they print are UTC.

Nothing here raises into Dask: a command that is missing, fails or times out is recorded as such.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from metaprov.capture._files import BATCH_JSON
from metaprov.capture.environment import looks_secret

#: Version of its layout.
BATCH_LAYOUT = "metaprov-batch/1"
#: ``sacct`` columns asked for (``-P``: ``|``-separated, a header line first).
SACCT_FORMAT = (
    "JobIDRaw,JobID,JobName,Partition,State,ExitCode,Submit,Eligible,Start,End,"
    "NodeList,NNodes,AllocCPUS,Timelimit,User,Account"
)
_TIMEOUT = 20.0
_MAX_OUTPUT = 1 << 20
_JOB_ID = re.compile(r"^\d+(?:_\d+)?(?:\.\w+)?$")


def job_ids(run_dir: Path) -> dict[str, list[str]]:
    """The batch job ids the run's environment records name, per batch system (sorted)."""
    out: dict[str, set[str]] = {}
    env_dir = Path(run_dir) / "environment"
    if not env_dir.is_dir():
        return {}
    for p in sorted(env_dir.glob("*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        job = data.get("job") if isinstance(data, dict) else None
        if isinstance(job, dict) and job.get("system") and job.get("id"):
            jid = str(job["id"])
            if _JOB_ID.match(jid):
                out.setdefault(str(job["system"]), set()).add(jid)
    return {k: sorted(v, key=_id_order) for k, v in sorted(out.items())}


def record_jobs(
    run_dir: str | os.PathLike[str], ids: Iterable[str] | None = None, *, settle: float = 0.0
) -> dict[str, Any]:
    """Ask the batch system about the run's jobs now and append its answers to ``batch-jobs.json``.

    The capture calls this when it finishes (the worker jobs are then still running); call it
    again once the cluster has closed to record how the jobs ended::

        with SLURMCluster(...) as cluster, Client(cluster) as client:
            with metaprov.capture.record(client, "runs/r1"):
                ...
        metaprov.capture.record_jobs("runs/r1")   # the jobs' end and final state

    Args:
        run_dir: the run directory.
        ids: Slurm job ids to ask about (default: the ones the environment records name).
        settle: wait up to this many seconds for every job to reach a final state
            (``COMPLETING`` jobs are still ending) before asking.

    Returns:
        The query appended (``{"queried", "system", "jobs", "commands", "scripts"}``), or ``{}``
        when no Slurm job is known.
    """
    run = Path(run_dir)
    wanted = sorted(set(ids), key=_id_order) if ids is not None else job_ids(run).get("slurm", [])
    wanted = [j for j in wanted if _JOB_ID.match(str(j))]
    if not wanted:
        return {}
    deadline = time.monotonic() + settle
    while settle > 0 and time.monotonic() < deadline and not _all_final(wanted):
        time.sleep(0.5)
    query = _query_slurm(wanted)
    _append(run / BATCH_JSON, query)
    return query


def _all_final(ids: list[str]) -> bool:
    """Whether the controller states every job in a final state (or no longer knows it)."""
    for jid in ids:
        res = _run(["scontrol", "-o", "show", "job", jid])
        m = re.search(r"\bJobState=(\S+)", res["stdout"])
        if res["returncode"] == 0 and m and m.group(1) in _ACTIVE:
            return False
    return True


_ACTIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING"}


def _query_slurm(ids: list[str]) -> dict[str, Any]:
    queried = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    commands = [_run(["scontrol", "-o", "show", "job", jid]) for jid in ids]
    commands.append(_run(["sacct", "-P", "-X", "-j", ",".join(ids), f"--format={SACCT_FORMAT}"]))
    scripts: dict[str, Any] = {}
    for jid in ids:
        res = _run(["scontrol", "write", "batch_script", jid, "-"], words=False)
        if res["returncode"] == 0 and res["stdout"]:
            text, removed = scrub_script(res["stdout"])
            scripts[jid] = {
                "text": text,
                "sha256": hashlib.sha256(res["stdout"].encode("utf-8", "replace")).hexdigest(),
                "scrubbed_lines": removed,
            }
        else:
            scripts[jid] = {"error": (res["stderr"] or res.get("error") or "no script")[:500]}
    return {
        "queried": queried,
        "system": "slurm",
        "timezone": "UTC",
        "jobs": ids,
        "commands": commands,
        "scripts": scripts,
    }


def _run(argv: list[str], *, words: bool = True) -> dict[str, Any]:
    """One command's answer: argv, exit status, output (scrubbed), or why it did not run."""
    out: dict[str, Any] = {"argv": argv, "returncode": None, "stdout": "", "stderr": ""}
    exe = shutil.which(argv[0])
    if exe is None:
        out["error"] = f"{argv[0]} not found"
        return out
    env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
    try:
        proc = subprocess.run(
            [exe, *argv[1:]],
            capture_output=True,
            timeout=_TIMEOUT,
            env=env,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:500]
        return out
    out["returncode"] = proc.returncode
    stdout = proc.stdout[:_MAX_OUTPUT].decode("utf-8", "replace")
    out["stdout"] = scrub_words(stdout) if words else stdout
    out["stderr"] = scrub_words(proc.stderr[:4096].decode("utf-8", "replace").strip())
    return out


def scrub_words(text: str) -> str:
    """``text`` with every word that looks like a secret replaced by ``***`` (the value only of
    a ``NAME=value`` word whose name or value looks secret).

    Example:
        >>> scrub_words("JobName=x Comment=ghp_0123456789abcdefABCDEF export API_TOKEN=abc")
        'JobName=x Comment=*** export API_TOKEN=***'
    """
    return re.sub(r"\S+", lambda m: _scrub_word(m.group(0)), text)


def _scrub_word(word: str) -> str:
    name, sep, value = word.partition("=")
    if sep and re.fullmatch(r"[A-Za-z_][\w.-]*", name):
        return f"{name}=***" if value and looks_secret(value, name) else word
    return "***" if looks_secret(word) else word


def scrub_script(text: str) -> tuple[str, int]:
    """A batch script with its secret-looking words replaced by ``***`` (see
    :func:`scrub_words`); also returns how many lines lost a word."""
    lines = text.split("\n")
    changed = 0
    for i, line in enumerate(lines):
        clean = scrub_words(line)
        if clean != line:
            lines[i] = clean
            changed += 1
    return "\n".join(lines), changed


def _append(path: Path, query: dict[str, Any]) -> None:
    data: dict[str, Any] = {"layout": BATCH_LAYOUT, "queries": []}
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(old, dict) and isinstance(old.get("queries"), list):
                data["queries"] = old["queries"]
        except (OSError, ValueError, RecursionError):
            pass  # an unreadable earlier file is replaced by a good one
    data["queries"].append(query)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _id_order(jid: str) -> tuple[int, str]:
    m = re.match(r"\d+", jid)
    return (int(m.group(0)) if m else -1, jid)
