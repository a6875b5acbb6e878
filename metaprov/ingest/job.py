"""What a run directory says about the batch job: node files, PBS output, configs, Dask logs.

Input: the non-CSV files of a run directory (``SchedulerNode``, ``WorkerNodes``, ...,
``<jobid>.<server>.OU``, ``config.txt``, ``config.json``, ``scheduler.e``, ``worker.e``, and the
capture's ``metaprov-run.json`` / ``workers_info.csv`` / ``dask-config.json`` when present).
Output: ``records.job``, ``records.scheduler``, ``records.software``, ``records.configs`` and
per-worker facts merged into ``records.workers``.

Log lines of several workers interleave in one file, so a per-worker fact (threads, memory, local
directory) is attached to a worker only when the log says it unambiguously; otherwise it is kept at
job level. Nothing is guessed.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from metaprov.ingest.smallfiles import read_head, read_small
from metaprov.records import Accounting, RunRecords, conform

_NODE_FILE = re.compile(r"^([A-Za-z]+)Nodes?$")
_PBS_OUT = re.compile(r"^(?P<jobid>\d+)\.(?P<server>[^/]+)\.(?P<kind>OU|ER)$")
_DARSHAN_NAME = re.compile(r"^(?P<user>[^_]+)_(?P<exe>.+)_id(?P<jobid>\d+)-(?P<pid>\d+)_")
_MEM_UNITS = {
    "B": 1,
    "kiB": 2**10,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "kB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}
_MAX_TEXT = 1 << 20
#: Largest configuration file or metaprov-run.json read (real ones: kilobytes).
_MAX_CONFIG = 16 << 20
#: Most bytes read of a job log (scheduler.e, worker.e, *.OU): the facts are near its start.
_MAX_LOG = 64 << 20

_RE_SCHED_AT = re.compile(r"Scheduler at:\s+(\S+)")
_RE_DASH_AT = re.compile(r"dashboard at:\s+(\S+)")
_RE_WORKER_AT = re.compile(r"Start worker at:\s+(\S+)")
_RE_NANNY_AT = re.compile(r"Start Nanny at:\s+'?([^'\s]+)'?")
_RE_THREADS = re.compile(r"Threads:\s+(\d+)")
_RE_MEMORY = re.compile(r"Memory:\s+([\d.]+)\s*([A-Za-z]+)")
_RE_LOCALDIR = re.compile(r"Local Directory:\s+(\S+)")
_RE_LOGTIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


def _read_text(path: Path, acct: Accounting) -> str | None:
    """A job log's text: its first :data:`_MAX_LOG` bytes (a larger log is named in the
    accounting); a FIFO, a device, an unreadable file: None, with a warning."""
    try:
        data, size = read_head(path, _MAX_LOG)
    except OSError as exc:
        acct.warn(path.name, f"cannot read: {exc.strerror or exc}")
        return None
    if size > len(data):
        acct.warn(path.name, f"larger than {_MAX_LOG:,} bytes ({size:,}): only its start read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        acct.warn(path.name, "not UTF-8 text; undecodable bytes replaced for parsing")
        return data.decode("utf-8", errors="replace")


def _memory_bytes(value: str, unit: str) -> int | None:
    mult = _MEM_UNITS.get(unit)
    return None if mult is None else int(round(float(value) * mult))


def _configs(run: Path, acct: Accounting) -> pd.DataFrame:
    rows = []
    for p in sorted(run.iterdir()):
        if not p.is_file():
            continue
        name = p.name
        kind = None
        if name == "config.txt":
            kind = "darshan"
        elif name == "config.json":
            kind = "mofka-bedrock"
        elif name in ("dask-config.json", "dask-config.yaml"):
            kind = "dask"
        elif _PBS_OUT.match(name) and name.endswith(".OU"):
            kind = "job-output"
        elif name.endswith((".yaml", ".yml")):
            kind = "yaml"
        if kind is None:
            continue
        try:
            data = read_small(p, _MAX_CONFIG)
        except OSError as exc:
            acct.warn(name, f"cannot read the file: {exc.strerror or exc}; left out")
            continue
        text = ""
        if len(data) <= _MAX_TEXT:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                acct.warn(name, "configuration file is not UTF-8; stored by hash only")
        rows.append(
            {
                "name": name,
                "kind": kind,
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "text": text,
            }
        )
    return conform("configs", pd.DataFrame(rows))


def read_job(run: Path, records: RunRecords) -> None:
    """Fill job, scheduler, software and config facts from the run directory's non-CSV files."""
    acct = records.accounting
    job: dict[str, Any] = records.job
    nodes: dict[str, list[str]] = {}
    darshan: list[tuple[str, str, str]] = []  # (user, job id, pid) of each Darshan log's name
    for p in sorted(run.iterdir()):
        if not p.is_file():
            continue
        m = _NODE_FILE.match(p.name)
        if m and p.stat().st_size < _MAX_TEXT:
            text = _read_text(p, acct) or ""
            hosts = [h.strip() for h in text.splitlines() if h.strip()]
            nodes[m.group(1).lower()] = hosts
            continue
        m = _PBS_OUT.match(p.name)
        if m:
            job["id"] = m.group("jobid")
            job["server"] = m.group("server")
            job["scheduler_system"] = "PBS"
            if m.group("kind") == "OU":
                text = _read_text(p, acct) or ""
                env = re.search(r"==> In environment (\S+)", text)
                if env:
                    job["spack_environment"] = env.group(1)
        m = _DARSHAN_NAME.match(p.name)
        if m and ".darshan" in p.name:
            darshan.append((m.group("user"), m.group("jobid"), m.group("pid")))
    if nodes:
        job["nodes"] = nodes
    job.setdefault("name", run.name)
    records.configs = _configs(run, acct)

    sched_log = run / "scheduler.e"
    if sched_log.is_file():
        text = _read_text(sched_log, acct) or ""
        m = _RE_SCHED_AT.search(text)
        if m:
            records.scheduler.setdefault("address", m.group(1))
        m = _RE_DASH_AT.search(text)
        if m:
            records.scheduler["dashboard"] = m.group(1)
        ver = re.search(r"distributed/utils\.py|python(\d+\.\d+)/site-packages/distributed", text)
        if ver and ver.group(1):
            records.software.setdefault("python", ver.group(1))
    _worker_log(run / "worker.e", records)
    _capture_info(run, records)
    _darshan_identity(darshan, job)


def _darshan_identity(names: list[tuple[str, str, str]], job: dict[str, Any]) -> None:
    """The job id and user the Darshan log names give, by the identity rules of docs/model.md.

    A log is named ``<user>_<exe>_id<jobid>-<pid>_...``. Darshan takes ``<jobid>`` from the
    batch system's variable (``PBS_JOBID``, ``SLURM_JOB_ID``, ... as it was built) and, when no
    such variable is set, writes the process id there: a job id equal to the log's pid is no
    batch job. So the Darshan job id is the run's batch job only when it differs from the pid in
    every log that names one, and all of them agree; a job file (PBS output) or the capture
    says so first. ``<user>`` is the account name, or the numeric uid when Darshan could not
    resolve the name: a number is kept as ``uid``, never as the user's name, and the name the
    run's own files give (``metaprov-run.json``) wins over the log name's.
    """
    if not names:
        return
    batch = {jobid for _, jobid, pid in names if jobid != pid}
    if "id" not in job and len(batch) == 1 and all(j != p for _, j, p in names):
        job["id"] = batch.pop()
    users = sorted({u for u, _, _ in names})
    if len(users) == 1:
        (user,) = users
        if user.isdigit():
            job.setdefault("uid", user)
        else:
            job.setdefault("user", user)


def _worker_log(path: Path, records: RunRecords) -> None:
    if not path.is_file():
        return
    text = _read_text(path, records.accounting) or ""
    workers = _RE_WORKER_AT.findall(text)
    nannies = _RE_NANNY_AT.findall(text)
    threads = [int(t) for t in _RE_THREADS.findall(text)]
    mems = [_memory_bytes(v, u) for v, u in _RE_MEMORY.findall(text)]
    dirs = _RE_LOCALDIR.findall(text)
    info = records.job.setdefault("worker_log", {})
    if nannies:
        info["nannies"] = sorted(set(nannies))
    if dirs:
        info["local_directories"] = sorted(set(dirs))
    w = records.workers
    if not len(w):
        return
    in_log = w["address"].isin(workers)
    # A value shared by every worker block applies to every worker that started in this log.
    if threads and len(set(threads)) == 1 and len(threads) == len(workers):
        w.loc[in_log & w["threads"].isna(), "threads"] = threads[0]
    elif threads:
        info["threads"] = threads
    if mems and len(set(mems)) == 1 and len(mems) == len(workers) and mems[0] is not None:
        w.loc[in_log & w["memory_limit"].isna(), "memory_limit"] = mems[0]
    elif mems:
        info["memory_limits"] = mems
    if len(workers) == 1 and len(dirs) == 1:
        w.loc[in_log, "local_directory"] = dirs[0]
    if len(workers) == 1 and len(nannies) == 1:
        w.loc[in_log, "nanny"] = nannies[0]
    records.workers = w


def _capture_info(run: Path, records: RunRecords) -> None:
    """Facts the metaprov capture writes beside the CSVs (pid, host, threads, versions)."""
    meta = run / "metaprov-run.json"
    if meta.is_file():
        try:
            data = json.loads(read_small(meta, _MAX_CONFIG).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            records.accounting.warn(meta.name, f"not valid JSON: {exc}")
            data = {}
        except RecursionError:
            records.accounting.warn(meta.name, "not usable JSON: nested too deeply")
            data = {}
        except OSError as exc:
            records.accounting.warn(meta.name, f"cannot read the file: {exc.strerror or exc}")
            data = {}
        if isinstance(data, dict):
            for k in ("dask", "distributed", "python", "platform", "metaprov"):
                if k in data.get("versions", {}):
                    records.software[k] = data["versions"][k]
            sched = data.get("scheduler")
            if isinstance(sched, dict):
                for k, v in sched.items():
                    records.scheduler.setdefault(k, v)
            for k in ("user", "hostname", "name"):
                if k in data and k not in records.job:
                    records.job[k] = data[k]
    info = run / "workers_info.csv"
    if info.is_file() and info.stat().st_size:
        try:
            df = pd.read_csv(info, dtype=str, keep_default_na=False)
        except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
            records.accounting.warn(info.name, f"cannot parse: {exc}")
            return
        df = df.drop(
            columns=[c for c in df.columns if c.startswith("Unnamed") or c == ""], errors="ignore"
        )
        if "address" not in df.columns:
            records.accounting.warn(info.name, "no 'address' column", line=1)
            return
        records.accounting.read(info.name, len(df))
        df = df.drop_duplicates("address", keep="last").set_index("address")
        w = records.workers.set_index("address")
        new = df.index.difference(w.index)
        if len(new):
            w = pd.concat([w, pd.DataFrame(index=new)])
        mapping = {
            "pid": "pid",
            "hostname": "hostname",
            "nthreads": "threads",
            "threads": "threads",
            "memory_limit": "memory_limit",
            "local_directory": "local_directory",
            "nanny": "nanny",
            "name": "name",
        }
        for src, dst in mapping.items():
            if src in df.columns:
                vals = df[src].replace("", np.nan).reindex(w.index)
                if dst in ("pid", "threads", "memory_limit"):
                    vals = pd.to_numeric(vals, errors="coerce")
                w[dst] = w[dst].where(w[dst].notna(), vals) if dst in w else vals
        w = w.reset_index().rename(columns={"index": "address"})
        if "host" in w:
            w["host"] = w["host"].fillna(
                w["address"].str.extract(r"^[a-z]+://\[?([^\]/]+?)\]?:\d+$", expand=False)
            )
        records.workers = conform("workers", w.sort_values("address"))
