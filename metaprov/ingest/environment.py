"""What produced a run: the software environment, host and batch job of each process.

Input, in this order of trust:

- the capture's ``environment/<role>-<pid>-<token>.json`` (one per client, scheduler and worker
  process; schema in ``docs/capture.md``, *Environment*);
- for runs without them (Mofka-Dask), what the job's own files say: the Spack environment and
  its installed packages listed in the PBS output file (``<jobid>.<server>.OU``), and per traced
  process the executable and the mount table of its Darshan log header.

Output: ``records.environments`` (one row per process), ``records.packages`` (one row per
package of a process, or of the job's Spack environment) and the batch job's variables merged into
``records.job`` (a batch job only when a job file or a job variable says so; the job files win,
a disagreement is reported).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from metaprov.ingest.smallfiles import read_small
from metaprov.records import RunRecords, conform
from metaprov.redact import scrub

ENV_DIR = "environment"
_ENV_FILE = re.compile(r"^(client|scheduler|worker)-\d+-[0-9a-f]+\.json$")
_MAX_JSON = 16 << 20
_SPACK_LINE = re.compile(r"^(?:(?P<ns>[\w.-]+)\.)?(?P<name>[\w][\w.+-]*)@(?P<version>[^%\s]+)")
_SYSTEM_NAMES = {"slurm": "Slurm", "pbs": "PBS", "lsf": "LSF", "flux": "Flux"}


def environment_id(python: Any, packages: list[tuple[str, str, str]], place: list[Any]) -> str:
    """A content id of an environment: interpreter, venv/conda/container and package list.

    Two processes with the same id ran the same software; one package more or another version
    gives another id.
    """
    h = hashlib.sha256()
    h.update(json.dumps([python, place], sort_keys=True, default=str).encode())
    for row in sorted(packages):
        h.update(("\0".join(row) + "\n").encode())
    return h.hexdigest()[:16]


def read_environment(run: Path, records: RunRecords) -> dict[str, dict[str, Any]]:
    """Fill ``environments`` and ``packages`` (and job facts) from the run directory.

    Returns:
        Per batch job id a process named, the job variables of its first record (for
        :func:`metaprov.ingest.batch.read_batch_jobs`).
    """
    env_rows: list[dict[str, Any]] = []
    pkg_rows: list[dict[str, Any]] = []
    process_jobs: dict[str, dict[str, Any]] = {}
    d = run / ENV_DIR
    if d.is_dir():
        _read_captured(d, records, env_rows, pkg_rows, process_jobs)
    if not env_rows:
        _from_job_files(run, records, env_rows, pkg_rows)
        env_rows, pkg_rows, withheld = _scrubbed(env_rows, pkg_rows)
        if withheld:
            records.accounting.warn(
                "job files", f"{len(withheld)} value(s) withheld: they look like secrets"
            )
    records.environments = conform("environments", pd.DataFrame(env_rows))
    pkgs = pd.DataFrame(pkg_rows)
    if len(pkgs):
        pkgs = pkgs.sort_values(["process", "manager", "name", "version"], kind="stable")
    records.packages = conform("packages", pkgs)
    return process_jobs


#: Columns of the job-file rows that name a record, not what it says: the process a row is of
#: (``darshan:<log file name>``, ``spack:<name>``) and the file it was read from. They are the
#: keys that link a row to its process agent and its packages (the PROV names those files
#: anyway: ``mp:darshanLog``); withholding one would unlink the row, not hide a secret (a
#: Darshan log name holds a long run of digits and letters the filter takes for a key).
_KEY_COLUMNS = ("process", "source")


def _scrubbed(
    env_rows: list[dict[str, Any]], pkg_rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The job-file rows with every value that looks like a secret withheld (None), their
    keys (:data:`_KEY_COLUMNS`) kept; and the places withheld."""

    def split(rows: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
        keys = [{k: r[k] for k in _KEY_COLUMNS if k in r} for r in rows]
        rest = [{k: v for k, v in r.items() if k not in _KEY_COLUMNS} for r in rows]
        return keys, rest

    env_keys, env_rest = split(env_rows)
    pkg_keys, pkg_rest = split(pkg_rows)
    (env_rest, pkg_rest), withheld = scrub([env_rest, pkg_rest])
    return (
        [{**k, **r} for k, r in zip(env_keys, env_rest, strict=True)],
        [{**k, **r} for k, r in zip(pkg_keys, pkg_rest, strict=True)],
        withheld,
    )


def _read_captured(
    d: Path,
    records: RunRecords,
    env_rows: list[dict],
    pkg_rows: list[dict],
    process_jobs: dict[str, dict[str, Any]],
) -> None:
    acct = records.accounting
    worker_jobs: list[tuple[Any, str]] = []
    for p in sorted(d.iterdir()):
        name = f"{ENV_DIR}/{p.name}"
        if p.name.endswith(".tmp"):
            acct.warn(name, "an environment record never finished writing; not used")
            continue
        if not _ENV_FILE.match(p.name) or not p.is_file():
            acct.warn(name, "not an environment record (<role>-<pid>-<token>.json); not used")
            continue
        try:
            if p.stat().st_size > _MAX_JSON:
                acct.warn(name, f"larger than {_MAX_JSON} bytes; not used")
                continue
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            acct.warn(name, f"not readable JSON: {exc}")
            continue
        if not isinstance(data, dict) or data.get("role") not in ("client", "scheduler", "worker"):
            acct.warn(name, "no 'role' of client, scheduler or worker; not used")
            continue
        # a record written by an older capture (or by hand) passes the same secret filter as a
        # new one: no string that looks like a secret reaches the records, the PROV or a crate
        data, withheld = scrub(data)
        if withheld:
            acct.warn(name, f"{len(withheld)} value(s) withheld: they look like secrets")
            data["errors"] = [
                *(data.get("errors") if isinstance(data.get("errors"), list) else []),
                *(f"{w}: withheld (looks like a secret)" for w in withheld),
            ]
        try:
            row, pkgs = _row(p.stem, data)
        except (TypeError, ValueError, AttributeError) as exc:
            acct.warn(name, f"unexpected field types ({exc}); not used")
            continue
        acct.read(name, 1 + len(pkgs))
        job = _d(data.get("job"))
        if job.get("id") and job.get("system"):
            row["job"] = str(job["id"])
            process_jobs.setdefault(str(job["id"]), job)
        env_rows.append(row)
        pkg_rows.extend(pkgs)
        # the run's own job is its client's or scheduler's; a worker's job is one of its jobs
        # (dask-jobqueue starts every worker in a batch job of its own)
        if row["role"] == "worker":
            worker_jobs.append((data.get("job"), name))
        else:
            _job_from(data.get("job"), records, name)
    own = {str(r["job"]) for r in env_rows if r["role"] != "worker" and r.get("job")}
    named = {str(_d(j).get("id")) for j, _ in worker_jobs if _d(j).get("id")}
    if not own and len(named) == 1 and all(_d(j).get("id") for j, _ in worker_jobs):
        for job, name in worker_jobs:  # only workers were recorded, all in one job: the run's
            _job_from(job, records, name)


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _s(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _row(process: str, data: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    py, venv, conda, cont = (_d(data.get(k)) for k in ("python", "venv", "conda", "container"))
    hostd, script, git, proc = (_d(data.get(k)) for k in ("host", "script", "git", "process"))
    pkgs: list[dict[str, Any]] = []
    for item in data.get("packages") or []:
        item = _d(item)
        if item.get("name") and item.get("version") is not None:
            pkgs.append(
                {
                    "process": process,
                    "manager": "pip",
                    "name": str(item["name"]),
                    "version": str(item["version"]),
                    "detail": _s(item.get("location")),
                }
            )
    for item in conda.get("packages") or []:
        item = _d(item)
        if item.get("name"):
            pkgs.append(
                {
                    "process": process,
                    "manager": "conda",
                    "name": str(item["name"]),
                    "version": str(item.get("version") or ""),
                    "detail": " ".join(
                        x for x in (_s(item.get("build")), _s(item.get("channel"))) if x
                    )
                    or None,
                }
            )
    place = [venv.get("path"), conda.get("prefix"), cont.get("runtime"), cont.get("image")]
    env_id = environment_id(
        [py.get("executable"), py.get("version")],
        [(p["manager"], p["name"], p["version"]) for p in pkgs],
        place,
    )
    gpus = [g for g in (hostd.get("gpus") or []) if isinstance(g, dict)]
    address = _s(proc.get("address"))
    row = {
        "process": process,
        "role": str(data["role"]),
        "source": "capture",
        "pid": proc.get("pid"),
        "address": address,
        "worker": address if data["role"] == "worker" else None,
        "client": _s(proc.get("client")),
        "environment": env_id,
        "python_executable": _s(py.get("executable")),
        "python_version": _s(py.get("version")),
        "python_implementation": _s(py.get("implementation")),
        "venv": _s(venv.get("path")),
        "conda_name": _s(conda.get("name")),
        "conda_prefix": _s(conda.get("prefix")),
        "container_runtime": _s(cont.get("runtime")),
        "container_image": _s(cont.get("image")),
        "container_id": _s(cont.get("id")),
        "hostname": _s(hostd.get("hostname")),
        "os": _s(hostd.get("os")),
        "kernel": _s(hostd.get("kernel")),
        "machine": _s(hostd.get("machine")),
        "cpu_model": _s(hostd.get("cpu_model")),
        "cpus": hostd.get("cpus"),
        "memory_bytes": hostd.get("memory_bytes"),
        "gpus": json.dumps(gpus, sort_keys=True) if gpus else None,
        "script": _s(script.get("path")),
        "script_kind": _s(script.get("kind")),
        "script_sha256": _s(script.get("sha256")),
        "cell": script.get("cell"),
        "git_root": _s(git.get("root")),
        "git_commit": _s(git.get("commit")),
        "git_branch": _s(git.get("branch")),
        "git_dirty": git.get("dirty"),
        "n_packages": len(pkgs),
        "recorded": _s(data.get("recorded")),
        "errors": "; ".join(str(e) for e in data.get("errors") or []) or None,
    }
    return row, pkgs


def _job_from(job: Any, records: RunRecords, name: str) -> None:
    """A batch job a process's own job variables name, merged into ``records.job``."""
    job = _d(job)
    if not job.get("id") or not job.get("system"):
        return
    target = records.job
    system = _SYSTEM_NAMES.get(str(job["system"]), str(job["system"]))
    jid = str(job["id"])
    known = target.get("id")
    if known and str(known) != jid and not jid.startswith(f"{known}."):
        records.accounting.warn(
            name, f"job variables name job {jid}, the job files name {known}; the files kept"
        )
        return
    target.setdefault("id", jid)
    target.setdefault("scheduler_system", system)
    for src, dst in (
        ("name", "job_name"),
        ("queue", "queue"),
        ("account", "account"),
        ("cluster", "cluster"),
        ("nodes", "node_count"),
        ("cores", "cores_per_node"),
        ("tasks", "tasks"),
        ("memory_bytes", "memory_bytes"),
        ("submit_dir", "submit_dir"),
        ("array_index", "array_index"),
    ):
        if job.get(src) not in (None, ""):
            target.setdefault(dst, job[src])
    hosts = [str(h) for h in job.get("hosts") or [] if h]
    if hosts:
        nodes = target.setdefault("nodes", {})
        if isinstance(nodes, dict):
            nodes.setdefault("job", hosts)


# -- Mofka-Dask runs: the job's own files ----------------------------------------------------------


def spack_packages(text: str) -> tuple[str | None, list[tuple[str, str, str]]]:
    """The Spack environment and its installed packages listed in a job's output file.

    Returns:
        ``(environment name, [(name, version, namespace), ...])`` from the ``==> In
        environment NAME`` line and the ``==> Installed packages`` section
        (``namespace.name@version%compiler`` lines).

    Example:
        >>> spack_packages("==> In environment e\\n==> Installed packages\\n-- x --\\nbuiltin.py-numpy@1.26.4%gcc\\n")
        ('e', [('py-numpy', '1.26.4', 'builtin')])
    """
    env = re.search(r"==> In environment (\S+)", text)
    out: list[tuple[str, str, str]] = []
    section = False
    for line in text.splitlines():
        if line.startswith("==>"):
            section = line.strip().startswith("==> Installed packages")
            continue
        if not section or line.startswith("--") or not line.strip():
            continue
        m = _SPACK_LINE.match(line.strip())
        if m:
            out.append((m.group("name"), m.group("version"), m.group("ns") or ""))
        else:
            section = False  # the list ended: the script's own output follows
    return (env.group(1) if env else None), out


def _from_job_files(
    run: Path, records: RunRecords, env_rows: list[dict], pkg_rows: list[dict]
) -> None:
    spack_env = None
    for p in sorted(run.glob("*.OU")):
        if not re.match(r"^\d+\..+\.OU$", p.name):
            continue
        try:
            # a regular file of at most 64 MiB (not a FIFO or a link to a device: never a hang)
            text = read_small(p, 64 << 20).decode("utf-8", errors="replace")
        except OSError:
            continue
        name, pkgs = spack_packages(text)
        if name or pkgs:
            spack_env = f"spack:{name or p.name}"
            for n, v, ns in pkgs:
                pkg_rows.append(
                    {
                        "process": spack_env,
                        "manager": "spack",
                        "name": n,
                        "version": v,
                        "detail": ns or None,
                    }
                )
            records.accounting.read(p.name, len(pkgs))
            env_rows.append(
                {
                    "process": spack_env,
                    "role": "job",
                    "source": f"job-output {p.name}",
                    "environment": environment_id(
                        None, [("spack", n, v) for n, v, _ in pkgs], [name]
                    ),
                    "spack_environment": name,
                    "python_version": next((v for n, v, _ in pkgs if n == "python"), None),
                    "n_packages": len(pkgs),
                }
            )
            break
    logs = getattr(records.darshan, "logs", None)
    if logs is None or not len(logs):
        return
    spack_id = env_rows[0]["environment"] if env_rows else None
    spack_name = env_rows[0]["spack_environment"] if env_rows else None
    for r in logs.itertuples(index=False):
        exe = _s(getattr(r, "exe", None))
        if not exe:
            continue
        mounts = _s(getattr(r, "mounts", None)) or ""
        # a process ran in the Spack environment only when its executable lives in it
        in_spack = bool(spack_name) and f"/environments/{spack_name}/" in exe
        row = {
            "process": f"darshan:{r.log}",
            "role": _s(getattr(r, "role", None)) or "unknown",
            "source": f"darshan {r.log}",
            "pid": getattr(r, "pid", None),
            "python_executable": exe,
            "python_version": _python_version(exe),
            "hostname": _s(getattr(r, "hostname", None)),
            "container_runtime": _container_from_mounts(mounts),
            "spack_environment": spack_name if in_spack else None,
            "environment": spack_id if in_spack else None,
            "mounts": len([m for m in mounts.splitlines() if m.strip()]) or None,
            "n_packages": 0,
        }
        env_rows.append(row)


def _python_version(exe: str) -> str | None:
    m = re.search(r"python(\d+\.\d+)$", exe)
    return m.group(1) if m else None


def _container_from_mounts(mounts: str) -> str | None:
    """A container runtime a Darshan mount table names (an overlay or squashfs root is not
    enough: only mount types the runtimes own count)."""
    types = {line.split("\t", 1)[0].strip() for line in mounts.splitlines() if line.strip()}
    for t, runtime in (("shifterfs", "shifter"), ("fuse.squashfuse", "apptainer")):
        if t in types:
            return runtime
    return None
