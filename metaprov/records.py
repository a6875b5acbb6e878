"""RunRecords: the typed, columnar tables every stage passes on.

Input: produced by :func:`metaprov.ingest.read_run` (and extended by :func:`metaprov.link.link_io`).
Output: consumed by mapping, inspection and the store.

Each table is a :class:`pandas.DataFrame` whose columns and dtypes are fixed by :data:`SCHEMAS`
(documented in ``docs/records.md``). Times are ``datetime64[us, UTC]``; thread ids are exact
``UInt64`` (never through float); counts are nullable ``Int64``; text is pandas ``str``.

Row accounting (:class:`Accounting`) says for every input file how many rows were read and used,
and why any row was not used, with its location: nothing is dropped silently.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from metaprov.timeutil import UTC_US

log = logging.getLogger("metaprov")

STR = pd.StringDtype(na_value=np.nan) if hasattr(pd, "StringDtype") else object
TIME = UTC_US

# name -> [(column, dtype, description)]
SCHEMAS: dict[str, list[tuple[str, Any, str]]] = {
    "tasks": [
        ("key", STR, "Dask key, normalised to str(key) (tuple keys as their repr)"),
        ("prefix", STR, "task prefix (function name part of the key), e.g. 'array'"),
        ("group", STR, "task group name (key without the index part)"),
        ("graph", "Int64", "index of the first submitted graph (graph.csv row) holding the key"),
        ("client", STR, "client that submitted that graph"),
        ("state", STR, "last state seen (scheduler's if it saw the key, else a worker's)"),
        ("worker", STR, "address of the worker that ran the final execution"),
        ("thread", "UInt64", "threading.get_ident() of the executing thread (exact 64-bit)"),
        ("start", TIME, "compute start (UTC)"),
        ("end", TIME, "compute end (UTC)"),
        (
            "time_source",
            STR,
            "'worker' (ready->executing .. executing->memory|error) or 'scheduler' (startstops)",
        ),
        ("duration", "float64", "end - start in seconds"),
        ("sched_begins", TIME, "scheduler's first startstops entry: begin (may be a transfer)"),
        ("sched_ends", TIME, "scheduler's first startstops entry: end"),
        ("nbytes", "Int64", "size of the result in bytes as reported by the scheduler"),
        ("n_transitions", "Int64", "transitions seen for the key (scheduler + workers)"),
        ("n_executions", "Int64", "its rows in executions (more than 1: retried)"),
        ("erred", "boolean", "the task ended in error at least once"),
        ("retried", "boolean", "the task has more than one execution (n_executions > 1)"),
        (
            "never_ran",
            "boolean",
            "no execution, no result size and no transfer observed (e.g. only in a submitted graph)",
        ),
        ("wanted", "boolean", "a client asked for this key's result"),
    ],
    "executions": [
        ("key", STR, "Dask key"),
        ("attempt", "Int64", "0-based attempt number of the key"),
        ("worker", STR, "worker address"),
        ("thread", "UInt64", "executing thread id when known"),
        ("start", TIME, "compute start (UTC)"),
        ("end", TIME, "compute end (UTC); NaT if never seen"),
        ("outcome", STR, "state left executing into: memory, error, cancelled, ..."),
        ("time_source", STR, "'worker' or 'scheduler'"),
        (
            "window",
            STR,
            "what start/end are: 'hook' (worker transition-hook times, around the function), "
            "'exact' (the capture's compute interval) or 'scheduler' (begins/ends)",
        ),
        (
            "record_lost",
            "boolean",
            "seen by the scheduler only: the run has worker-side records, but not of this "
            "execution (its worker was lost or its file cut); times from the scheduler",
        ),
    ],
    # The largest table (~7 rows per task): text columns are Categorical to keep memory low.
    "transitions": [
        ("key", "category", "Dask key"),
        ("observer", "category", "'scheduler' or 'worker'"),
        ("address", "category", "address of the observer (called_from)"),
        ("from_state", "category", "state before"),
        ("to_state", "category", "state after"),
        ("time", TIME, "when the plugin saw it (UTC)"),
        ("stimulus_id", "category", "cause (scheduler only)"),
        ("line", "Int64", "line number in the source file"),
    ],
    "transfers": [
        ("transfer", "Int64", "transfer id, stable within a run"),
        ("key", STR, "key moved (normalised)"),
        ("nbytes", "Int64", "bytes of this key"),
        ("source", STR, "worker that sent it"),
        ("destination", STR, "worker that received it (NA: a client, e.g. gather)"),
        ("start", TIME, "start (receiving side's clock when logged there)"),
        ("stop", TIME, "stop"),
        ("duration", "float64", "seconds"),
        ("total", "Int64", "bytes of the whole transfer (all keys)"),
        ("bandwidth", "float64", "bytes/s as logged"),
        ("compressed", "Int64", "compressed bytes when logged"),
        ("n_keys", "Int64", "keys in the whole transfer"),
        ("logged_by", STR, "'both', 'incoming' or 'outgoing'"),
    ],
    "dependencies": [
        ("graph", "Int64", "graph index"),
        ("key", STR, "dependent task"),
        ("dependency", STR, "task it depends on"),
    ],
    "graphs": [
        ("graph", "Int64", "index (row order in graph.csv)"),
        ("client", STR, "submitting client"),
        ("time", TIME, "when the scheduler received it"),
        ("n_wanted", "Int64", "keys the client asked for"),
        ("n_tasks", "Int64", "tasks in the submitted graph"),
        ("n_edges", "Int64", "dependency edges"),
    ],
    "workers": [
        ("address", STR, "worker address, e.g. tcp://10.0.0.1:33783"),
        ("host", STR, "host part of the address"),
        ("hostname", STR, "node name when known"),
        ("name", STR, "worker name when known"),
        ("nanny", STR, "nanny address when known"),
        ("pid", "Int64", "worker process id when known"),
        ("added", TIME, "when the scheduler added it"),
        ("removed", TIME, "when the scheduler removed it"),
        ("threads", "Int64", "threads per worker (nthreads)"),
        ("memory_limit", "Int64", "memory limit in bytes"),
        ("local_directory", STR, "scratch directory"),
        ("lost", "boolean", "the scheduler lost it while the run went on (see worker_events)"),
        (
            "unrecorded",
            "Int64",
            "its executions known from the scheduler only (its own records are missing)",
        ),
    ],
    # --- workers arriving and leaving (worker.csv; metaprov.capture's worker_loss.csv) ---------
    "worker_events": [
        ("worker", STR, "worker address"),
        ("event", STR, "'added' or 'removed' (by the scheduler)"),
        ("time", TIME, "when the scheduler recorded it (UTC)"),
        (
            "stimulus_id",
            STR,
            "the scheduler's stimulus id (removals), e.g. handle-worker-cleanup-<t>",
        ),
        (
            "reason",
            STR,
            "why it was removed: connection closed, heartbeat missed, communication failed, "
            "retired, closed, or the stimulus name",
        ),
        ("expected", "boolean", "Dask expected the removal (capture only; NA: not recorded)"),
        (
            "lost",
            "boolean",
            "a loss: removed unexpectedly, or taking running tasks or results held only there",
        ),
        ("n_processing", "Int64", "tasks it was running, sent back to be run elsewhere"),
        ("n_results", "Int64", "results held only there, to be computed again"),
        ("n_data", "Int64", "data held only there that cannot be computed again (scattered)"),
        ("source", STR, "what the counts are from: worker_loss.csv or scheduler_transition.csv"),
    ],
    "lost_tasks": [
        ("worker", STR, "the worker removed"),
        ("time", TIME, "when it was removed (UTC)"),
        ("key", STR, "Dask key"),
        ("kind", STR, "'processing' (was running), 'result' (held only there) or 'data'"),
        ("redone", "boolean", "an execution of the key ended after the removal"),
    ],
    "clients": [
        ("client", STR, "client id"),
        ("added", TIME, "connected"),
        ("removed", TIME, "disconnected"),
    ],
    "configs": [
        ("name", STR, "file name"),
        ("kind", STR, "darshan, mofka-bedrock, dask, job-output, ..."),
        ("sha256", STR, "content hash"),
        ("size", "Int64", "bytes"),
        ("text", STR, "content (text files up to 1 MiB; else empty)"),
    ],
    "threads": [
        ("worker", STR, "worker address"),
        ("thread", "UInt64", "thread id"),
        ("n_tasks", "Int64", "tasks executed on it"),
    ],
    # --- Darshan tables (metaprov.ingest.darshan) and linked I/O (metaprov.link); docs/darshan.md
    "darshan_logs": [
        ("log", STR, "log file name"),
        ("path", STR, "log file path as read"),
        ("pid", "Int64", "process id (from the log file name <user>_<exe>_id<jobid>-<pid>_...)"),
        ("jobid", "Int64", "job id recorded by Darshan (the pid when not run under a batch job)"),
        ("uid", "Int64", "user id"),
        ("exe", STR, "executable: first word of the command line"),
        ("cmdline", STR, "full command line"),
        ("role", STR, "launcher, nanny, worker, resource_tracker, scheduler, other, unknown"),
        ("start", TIME, "process start as recorded by Darshan (UTC)"),
        ("end", TIME, "process end as recorded by Darshan (UTC)"),
        ("start_sec", "Int64", "raw job start: seconds (segment times are relative to it)"),
        ("start_nsec", "Int64", "raw job start: nanoseconds"),
        ("runtime", "float64", "end - start in seconds"),
        ("nprocs", "Int64", "number of MPI processes (1 without MPI)"),
        ("partial", "boolean", "log not finalised (.darshan_partial or header never written)"),
        ("partial_modules", STR, "modules that ran out of memory (comma-separated)"),
        ("compression", STR, "zlib, bzip2 or none"),
        ("version", STR, "log format version, e.g. 3.41"),
        ("hostname", STR, "host name from the DXT records"),
        ("mounts", STR, "mount table: one 'type<TAB>path' line per mount point"),
        ("metadata", STR, "job metadata text (lib_ver=..., hints)"),
        ("layout", "Int64", "DXT segment size in bytes: 32, 40, 96 or 104 (NA: no DXT)"),
        ("n_segments", "Int64", "DXT segments read"),
        ("size", "Int64", "file size in bytes"),
        ("status", STR, "ok, partial, damaged (a region unreadable) or unreadable"),
        ("in_run", "boolean", "False: another user's or a disjoint-in-time program's log"),
        ("problems", STR, "what could not be read, '; '-separated (empty: nothing)"),
    ],
    "darshan_names": [
        ("log", STR, "log file name"),
        ("record_id", "UInt64", "Darshan record id (hash of the name)"),
        ("path", STR, "file path or pseudo-name (<STDIN>, heatmap:POSIX, ...)"),
    ],
    "darshan_counters": [
        ("log", STR, "log file name"),
        ("module", STR, "POSIX, STDIO or MPI-IO"),
        ("record_id", "UInt64", "Darshan record id"),
        ("rank", "Int64", "MPI rank (-1: shared record)"),
        ("path", STR, "file path from the name map"),
        ("counter", STR, "counter name as in darshan-parser, e.g. POSIX_BYTES_READ"),
        ("value", "float64", "value (integer counters exact below 2**53); zero values are omitted"),
    ],
    "darshan_segments": [
        ("log", STR, "log file name"),
        ("module", STR, "DXT_POSIX or DXT_MPIIO"),
        ("rank", "Int64", "MPI rank"),
        ("record_id", "UInt64", "Darshan record id of the file"),
        ("path", STR, "file path from the name map"),
        ("hostname", STR, "host that issued the call"),
        ("op", STR, "'read' or 'write'"),
        ("offset", "Int64", "file offset in bytes"),
        ("length", "Int64", "bytes requested"),
        ("start", TIME, "start (UTC): job start + start_rel, not offset-corrected"),
        ("end", TIME, "end (UTC)"),
        ("start_rel", "float64", "raw start: seconds since the job start"),
        ("end_rel", "float64", "raw end: seconds since the job start"),
        ("pthread", "UInt64", "pthread id of the calling thread (NA: not recorded)"),
    ],
    "darshan_links": [
        ("segment", "Int64", "row number in darshan.segments"),
        ("log", STR, "log file name"),
        ("pthread", "UInt64", "calling thread"),
        ("status", STR, "linked, process, ambiguous or unlinked"),
        ("rule", STR, "rule that decided (see docs/darshan.md), e.g. worker-window"),
        ("reason", STR, "why (process, ambiguous, unlinked rows; empty: linked exactly)"),
        ("key", STR, "task key when linked"),
        ("attempt", "Int64", "execution attempt of that key when linked"),
        ("worker", STR, "worker address of the process when known"),
        ("pid", "Int64", "process id"),
        ("host", STR, "host name"),
        ("start", TIME, "start corrected by the process's estimated clock offset (UTC)"),
        ("end", TIME, "end corrected by the process's estimated clock offset (UTC)"),
        (
            "clock",
            STR,
            "clock that decided a link: worker-hook, worker-exact, scheduler or thread-order",
        ),
        ("clock_offset", "float64", "fitted offset of Darshan's clock against that clock (s)"),
        ("offset_uncertainty", "float64", "half-width of the offsets the data allow (s)"),
        ("candidates", STR, "ambiguous: JSON list of the candidate task keys, in run order"),
    ],
    "darshan_processes": [
        ("log", STR, "log file name"),
        ("role", STR, "process role (see darshan_logs)"),
        ("pid", "Int64", "process id"),
        ("host", STR, "host name"),
        ("worker", STR, "worker address mapped by thread-id membership (NA: none)"),
        ("votes", "Int64", "task executions whose thread id is in this log (for its worker)"),
        ("clock_offset", "float64", "seconds Darshan's clock is late (subtracted); NA: none"),
        ("offset_low", "float64", "lowest offset equally consistent with the data"),
        ("offset_high", "float64", "highest offset equally consistent with the data"),
        ("offset_note", STR, "how the offset was found, or why not"),
        ("n_segments", "Int64", "segments of the log"),
        ("n_linked", "Int64", "segments linked to a task"),
        ("n_process", "Int64", "segments attributed to the process (threads that ran no task)"),
        ("n_ambiguous", "Int64", "segments that fit several tasks"),
        ("n_unlinked", "Int64", "segments neither linked nor attributed"),
    ],
    # --- task facts (metaprov.capture's extra files; metaprov.ingest.facts) ----------------
    "results": [
        ("key", STR, "Dask key"),
        ("attempt", "Int64", "execution attempt (matched on key, worker and start time)"),
        ("outcome", STR, "'memory' (a result) or 'error'"),
        ("type", STR, "type of the result, module.qualname (e.g. numpy.ndarray)"),
        ("nbytes", "Int64", "size of the result in bytes as measured by the worker"),
        ("exception_type", STR, "type of the exception of an erred attempt (module.qualname)"),
        ("exception_message", STR, "str() of that exception (capped)"),
        ("traceback", STR, "its traceback when recorded (opt-in)"),
    ],
    "functions": [
        ("group", STR, "task group"),
        ("prefix", STR, "task prefix"),
        ("key", STR, "a single task, where the tasks of its group run different functions"),
        ("module", STR, "module of the callable (of the producing operation for a fused task)"),
        ("qualname", STR, "qualified name of the callable (its type for a callable object)"),
        ("kind", STR, "function, partial, callable, compose, fused, data, alias or unknown"),
        ("n_ops", "Int64", "operations fused into the task (1 when not fused)"),
        ("n_tasks", "Int64", "tasks of the group (or the key) running it"),
    ],
    "submissions": [
        ("graph", "Int64", "graph index (row of graph.csv)"),
        ("client", STR, "submitting client"),
        ("file", STR, "file of the client code that called compute/persist/submit"),
        ("line", "Int64", "line of that call in the file (in the cell for a notebook)"),
        ("cell", "Int64", "IPython execution count of the notebook cell, when known"),
        ("sha256", STR, "SHA-256 of the source the client sent (file or cell)"),
        ("cell_source", STR, "source of the notebook cell (interactive code only)"),
        ("frames", "Int64", "code frames the client sent"),
    ],
    "arguments": [
        ("key", STR, "Dask key"),
        ("position", STR, "0, 1, ... or keyword; partial.<n> bound in a partial; <op>.<n> fused"),
        ("type", STR, "type of the value (module.qualname)"),
        ("size", "Int64", "size in bytes (len for text, dask sizeof otherwise)"),
        ("value", STR, "repr of the value when status is 'ok'"),
        ("status", STR, "'ok', 'too large' or 'repr failed: <error>'"),
    ],
    "fused_ops": [
        ("group", STR, "task group of the fused tasks"),
        ("position", "Int64", "position of the operation, dependencies first"),
        ("name", STR, "operation name (prefix of its inner key)"),
        ("module", STR, "module of its callable"),
        ("qualname", STR, "qualified name of its callable"),
        ("kind", STR, "kind of callable (see functions)"),
        ("inputs", STR, "positions of the operations whose results it uses, space-separated"),
    ],
    # --- where the workers' time went (metaprov.capture; metaprov.ingest.activity) ------------
    "activity": [
        ("worker", STR, "address of the worker that measured it"),
        ("key", STR, "the execution's Dask key (per-execution rows); NA: summed over an interval"),
        ("attempt", "Int64", "the execution attempt (executions.attempt) of a per-execution row"),
        ("prefix", STR, "task prefix of an execute row (as Dask names it); NA in other contexts"),
        ("span_id", STR, "Dask span id (dask.distributed.span) of execute rows"),
        ("span", STR, "that span's name: its tags joined by '/' (e.g. 'default')"),
        (
            "context",
            STR,
            "what the worker was doing, as Dask names it: execute, gather-dep, get-data, "
            "memory-monitor, ...",
        ),
        (
            "activity",
            STR,
            "Dask's activity: thread-cpu, thread-noncpu, executor, other, serialize, deserialize, "
            "compress, decompress, network, disk-read, disk-write, memory-read, ...",
        ),
        ("unit", STR, "seconds, bytes or count"),
        ("start", TIME, "start of what was measured (the execution, or the interval)"),
        ("end", TIME, "its end"),
        ("value", "float64", "the amount, in unit"),
    ],
    "memory": [
        ("worker", STR, "worker address"),
        ("time", TIME, "when the scheduler saw these figures (UTC)"),
        ("process", "Int64", "bytes of the worker process (RSS) at its last heartbeat"),
        ("managed", "Int64", "bytes of task results held in memory (Dask's managed memory)"),
        ("unmanaged", "Int64", "process - managed: interpreter, libraries, leaks, recent peaks"),
        ("unmanaged_old", "Int64", "the part of unmanaged that lasted (Dask's unmanaged_old)"),
        ("spilled", "Int64", "bytes of task results spilled to disk"),
        ("memory_limit", "Int64", "the worker's memory limit (NA: none)"),
        ("status", STR, "the worker's status: running, paused, closing, ..."),
        ("paused", "boolean", "status is paused (memory above the pause threshold)"),
    ],
    # --- what produced the run (metaprov.capture.environment; metaprov.ingest.environment) ----
    "environments": [
        ("process", STR, "the record: <role>-<pid>-<token> (capture), darshan:<log>, spack:<env>"),
        ("role", STR, "client, scheduler, worker; a Darshan process role; job (Spack environment)"),
        ("source", STR, "capture, or the job file it was read from"),
        ("pid", "Int64", "process id"),
        ("address", STR, "Dask address of the scheduler or worker"),
        ("worker", STR, "worker address (workers only)"),
        ("client", STR, "Dask client id (the client that recorded)"),
        ("job", STR, "batch job id the process ran in (its job variables; jobs.job)"),
        ("environment", STR, "content id of interpreter + venv/conda/container + package list"),
        ("python_executable", STR, "interpreter path (sys.executable; Darshan: the executable)"),
        ("python_version", STR, "Python version"),
        ("python_implementation", STR, "CPython, PyPy, ..."),
        ("venv", STR, "virtual environment path"),
        ("conda_name", STR, "conda environment name"),
        ("conda_prefix", STR, "conda environment prefix"),
        ("spack_environment", STR, "Spack environment named by the job output"),
        ("container_runtime", STR, "apptainer, singularity, docker, podman, shifter, charliecloud"),
        ("container_image", STR, "container image (path or reference)"),
        ("container_id", STR, "container id"),
        ("hostname", STR, "host name (left out by the anonymous option)"),
        ("os", STR, "operating system (os-release PRETTY_NAME)"),
        ("kernel", STR, "kernel release"),
        ("machine", STR, "CPU architecture"),
        ("cpu_model", STR, "CPU model name"),
        ("cpus", "Int64", "logical CPUs"),
        ("memory_bytes", "Int64", "total memory of the host"),
        ("gpus", STR, "GPUs as a JSON list (index, name, memory_bytes, driver, uuid)"),
        ("mounts", "Int64", "mount points in the Darshan header's mount table"),
        ("script", STR, "client script or notebook path"),
        ("script_kind", STR, "script, notebook or interactive"),
        ("script_sha256", STR, "SHA-256 of the script or notebook file"),
        ("cell", "Int64", "IPython execution count when recorded"),
        ("git_root", STR, "git work tree holding the script"),
        ("git_commit", STR, "its commit"),
        ("git_branch", STR, "its branch"),
        ("git_dirty", "boolean", "tracked files changed (NA: git not available)"),
        ("n_packages", "Int64", "packages listed for the process"),
        ("recorded", STR, "when the record was taken (ISO 8601, UTC)"),
        ("errors", STR, "parts of the record that could not be read"),
    ],
    # --- the batch jobs the processes ran in (metaprov.capture.batch; metaprov.ingest.batch) --
    "jobs": [
        (
            "job",
            STR,
            "batch job id as the batch system prints it (Slurm: 1234, 1234_7 in an array)",
        ),
        ("system", STR, "Slurm, PBS, LSF, Flux"),
        ("name", STR, "job name"),
        ("user", STR, "user the job ran as (user(uid) as Slurm prints it)"),
        ("account", STR, "account charged"),
        ("partition", STR, "partition (Slurm) or queue"),
        ("state", STR, "last state known: PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, ..."),
        ("reason", STR, "the batch system's reason for the state"),
        ("exit_code", STR, "exit code:signal"),
        ("submitted", TIME, "when the job was submitted (UTC)"),
        ("eligible", TIME, "when it became eligible to start (UTC)"),
        ("started", TIME, "when it started (UTC; empty while pending)"),
        ("ended", TIME, "when it ended (UTC; only in a final state, never the time limit)"),
        ("time_limit_s", "Int64", "time limit in seconds"),
        ("nodes", STR, "hosts allocated, space-separated"),
        ("node_count", "Int64", "nodes allocated"),
        ("cpus", "Int64", "CPUs allocated"),
        ("script", STR, "the batch script (secret-looking lines replaced by a marker)"),
        ("script_sha256", STR, "SHA-256 of the script as the batch system returned it"),
        ("source", STR, "scontrol, sacct, or environment (the job's variables only)"),
        ("observed", TIME, "when the batch system was asked (UTC)"),
        ("processes", "Int64", "client, scheduler and worker processes recorded in the job"),
    ],
    "packages": [
        ("process", STR, "the process record (environments.process)"),
        ("manager", STR, "pip (installed distribution), conda or spack"),
        ("name", STR, "distribution or package name"),
        ("version", STR, "its version"),
        ("detail", STR, "pip: sys.path entry; conda: build and channel; spack: namespace"),
    ],
}

TABLES = tuple(SCHEMAS)


def empty_table(name: str) -> pd.DataFrame:
    """An empty table with the schema's columns and dtypes (a copy of one built once per
    table: building it costs ~15 ms, a tiny run's read builds dozens)."""
    return _empty_template(name).copy()


@functools.cache
def _empty_template(name: str) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t, _ in SCHEMAS[name]})


def conform(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """Return ``df`` with exactly the schema's columns (missing ones as NA) and dtypes (a new
    table, indexed 0..n-1, built from the columns' arrays: from Series, pandas would align
    their indexes, ~8 ms a table)."""
    cols: dict[str, Any] = {}
    n = len(df)
    present = set(df.columns)
    for c, t, _ in SCHEMAS[name]:
        if c in present:
            s = df[c]
            if str(s.dtype) != str(t):
                s = _cast(s, t)
            cols[c] = s.array
        elif n:
            cols[c] = pd.array([None] * n, dtype=t)
        else:
            cols[c] = _empty_template(name)[c].array
    return pd.DataFrame(cols, index=pd.RangeIndex(n), copy=True)


def _cast(s: pd.Series, t: Any) -> pd.Series:
    if isinstance(t, pd.DatetimeTZDtype):
        if isinstance(s.dtype, pd.DatetimeTZDtype):
            return s.dt.tz_convert("UTC").astype(t)
        if pd.api.types.is_datetime64_dtype(s.dtype):
            return s.dt.tz_localize("UTC").astype(t)
        return pd.to_datetime(s, utc=True).astype(t)
    if str(t) == "boolean" and s.dtype == object:
        return s.astype("boolean")
    return s.astype(t)


@dataclass
class FileAccount:
    """Accounting for one input file."""

    file: str
    present: bool = True
    rows_read: int = 0
    not_used: dict[str, int] = field(default_factory=dict)

    @property
    def rows_used(self) -> int:
        return self.rows_read - sum(self.not_used.values())


ISSUE_COLUMNS = ["file", "line", "column", "reason", "detail"]

#: ``extra`` of a log message whose content ``metaprov inspect`` reports itself (it filters them
#: out while reading, so a finding is printed once).
REPORTED = {"metaprov_reported": True}


class Accounting:
    """Per input file: rows read, rows used, rows not used with their reason and location."""

    def __init__(self) -> None:
        self.files: dict[str, FileAccount] = {}
        self._issues: list[pd.DataFrame] = []
        self._pending: list[tuple[str, int | None, str | None, str, str]] = []
        self.notes: list[str] = []

    def file(self, name: str) -> FileAccount:
        if name not in self.files:
            self.files[name] = FileAccount(name)
        return self.files[name]

    def missing(self, name: str) -> None:
        self.files[name] = FileAccount(name, present=False)

    def read(self, name: str, rows: int) -> None:
        self.file(name).rows_read += int(rows)

    def drop(
        self,
        name: str,
        reason: str,
        lines: Iterable[int] | np.ndarray,
        *,
        column: str | None = None,
        detail: str | Iterable[str] = "",
        counts_as_row: bool = True,
    ) -> None:
        """Record rows of ``name`` not used for ``reason`` (lines are 1-based file line numbers)."""
        lines_arr = np.asarray(list(lines) if not isinstance(lines, np.ndarray) else lines)
        if lines_arr.size == 0:
            return
        if counts_as_row:
            acct = self.file(name)
            acct.not_used[reason] = acct.not_used.get(reason, 0) + int(lines_arr.size)
        det = detail if isinstance(detail, str) else list(detail)
        self._flush()
        self._issues.append(
            pd.DataFrame(
                {
                    "file": name,
                    "line": pd.array(lines_arr, dtype="Int64"),
                    "column": column,
                    "reason": reason,
                    "detail": det,
                }
            )
        )
        log.info("%s: %d row(s) not used: %s", name, lines_arr.size, reason)

    def warn(
        self,
        name: str,
        reason: str,
        *,
        line: int | None = None,
        column: str | None = None,
        detail: str = "",
    ) -> None:
        """Record a finding that does not remove a row (kept with a warning)."""
        # Kept as a plain row until the next drop() or read of the findings: a DataFrame per
        # warning made 10^4 warnings (one per empty Darshan log) cost minutes.
        self._pending.append((name, line, column, reason, detail))
        log.warning(
            "%s%s: %s%s",
            name,
            f" line {line}" if line else "",
            reason,
            f": {detail}" if detail else "",
            extra=REPORTED,
        )

    def _flush(self) -> None:
        """Move the pending warnings into one findings table (keeps the order of the calls)."""
        if not self._pending:
            return
        name, line, column, reason, detail = zip(*self._pending, strict=True)
        self._pending = []
        self._issues.append(
            pd.DataFrame(
                {
                    "file": list(name),
                    "line": pd.array(list(line), dtype="Int64"),
                    "column": list(column),
                    "reason": list(reason),
                    "detail": list(detail),
                }
            )
        )

    def note(self, text: str) -> None:
        self.notes.append(text)
        log.info(text)

    @property
    def issues(self) -> pd.DataFrame:
        """Every finding: file, line, column, reason, detail."""
        self._flush()
        if not self._issues:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in ISSUE_COLUMNS})
        return pd.concat(self._issues, ignore_index=True)

    def to_dict(self, max_examples: int = 5) -> dict[str, Any]:
        """JSON-ready summary: per file counts and reasons, with a few example locations."""
        issues = self.issues
        out: dict[str, Any] = {"files": {}, "notes": list(self.notes)}
        # a file with findings but no rows (a configuration file that is not UTF-8, a
        # workers_info.csv that cannot be parsed) is listed too: no finding goes unreported
        names = set(self.files) | {str(n) for n in issues["file"].dropna().unique()}
        findings = _findings_by_file(issues, max_examples)
        for name in sorted(names):
            acct = self.files.get(name) or FileAccount(name)
            entry: dict[str, Any] = {
                "present": acct.present,
                "rows_read": acct.rows_read,
                "rows_used": acct.rows_used,
                "not_used": dict(sorted(acct.not_used.items())),
            }
            if name in findings:
                entry["findings"] = findings[name]
            out["files"][name] = entry
        return out


def _findings_by_file(issues: pd.DataFrame, max_examples: int) -> dict[str, list[dict[str, Any]]]:
    """Per file, its findings grouped by reason (sorted), each with its count and the first
    ``max_examples`` locations in the order found. One pass over the table for all files (a
    scan per file made 10^4 Darshan logs cost minutes)."""
    iss = issues[issues["file"].notna()]
    if not len(iss):
        return {}
    iss = iss.assign(_f=iss["file"].astype(str)).reset_index(drop=True)
    groups = iss.groupby(["_f", "reason"], sort=True)
    sizes = groups.size()
    ex = iss[groups.cumcount().to_numpy() < max_examples]
    ex = ex.sort_values(["_f", "reason"], kind="stable")
    line = ex["line"].astype(object).where(ex["line"].notna(), None).tolist()
    examples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for f, r, ln, col, det in zip(
        ex["_f"].tolist(),
        ex["reason"].tolist(),
        line,
        ex["column"].tolist(),
        ex["detail"].tolist(),
        strict=True,
    ):
        if isinstance(col, float) and np.isnan(col):
            col = None
        examples.setdefault((f, r), []).append(
            {"line": None if ln is None else int(ln), "column": col, "detail": det}
        )
    out: dict[str, list[dict[str, Any]]] = {}
    for (f, r), count in sizes.items():
        out.setdefault(f, []).append(
            {"reason": r, "count": int(count), "examples": examples[(f, r)]}
        )
    return out


def text_columns(df: pd.DataFrame, *, digits: int | None = None) -> pd.DataFrame:
    """A copy of ``df`` ready for text output (CSV): UTC times as ISO 8601 with ``Z``, floats in
    Python's shortest round-trip form, missing values as None.

    ``digits`` (e.g. 15) first rounds floats to that many significant digits, which drops the
    noise of sums of decimal values (``0.23572099999999999`` is written ``0.235721``); None
    writes every float exactly (record tables: epochs and counters keep all their digits).
    """
    out = df.copy()
    for col in out.columns:
        s = out[col]
        if isinstance(s.dtype, pd.DatetimeTZDtype):
            text = s.dt.tz_convert("UTC").dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            out[col] = text.astype(object).where(s.notna(), None)
        elif s.dtype.kind == "f":
            out[col] = pd.Series(float_texts(s, digits=digits), index=s.index, dtype=object)
    return out


def _text_like(s: pd.Series) -> bool:
    """Whether a column may hold text (object, string or category dtypes)."""
    return s.dtype == object or isinstance(s.dtype, (pd.StringDtype, pd.CategoricalDtype))


def csv_quote(text: str) -> str:
    """One CSV cell as ``csv.QUOTE_MINIMAL`` with ``\\n`` line ends (pandas ``to_csv``) writes it,
    and a cell holding a carriage return quoted too (the csv module leaves ``\\r`` bare when the
    line end is ``\\n``, and every CSV reader then ends the row there)."""
    if '"' in text or "," in text or "\n" in text or "\r" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_cell(value: Any) -> str:
    """One cell of a text-like column as pandas writes it (missing values empty, a float its
    ``repr``), quoted by :func:`csv_quote`."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return ""
    return csv_quote(repr(value) if isinstance(value, float) else str(value))


def csv_text(
    df: pd.DataFrame,
    target: str | os.PathLike[str] | None = None,
    *,
    index: bool = False,
    date_format: str | None = None,
) -> str | None:
    """``df.to_csv(target, index=index, lineterminator="\\n", date_format=date_format)``, the one
    way metaprov writes CSV, with a cell holding a carriage return quoted.

    pandas (the csv module) leaves a bare ``\\r`` unquoted when lines end in ``\\n``, and every
    CSV reader then ends the row there: a task key with a carriage return would break its rows.
    A frame without one is written by pandas itself, byte for byte; a frame with one is written
    here: its text columns cell by cell (:func:`csv_cell`), its other columns (numbers, times,
    booleans: never a quote, comma or line break) as pandas formats them. Returns the text when
    ``target`` is None.
    """
    # pandas first: a carriage return in its output can only come from a cell (lines end in
    # ``\\n``), and one byte is cheap to look for; only then is the frame written here
    kwargs = {"index": index, "lineterminator": "\n", "date_format": date_format}
    if target is None:
        text = df.to_csv(None, **kwargs)
        if "\r" not in text:
            return text  # type: ignore[no-any-return]
    else:
        df.to_csv(target, **kwargs)
        if not _holds_carriage_return(target):
            return None
    columns: list[list[str]] = []
    if index:
        columns.append([csv_cell(v) for v in df.index.tolist()])
    for i in range(df.shape[1]):
        s = df.iloc[:, i]
        if _text_like(s):
            columns.append([csv_cell(v) for v in s.astype(object).tolist()])
        else:
            text = s.to_frame().to_csv(
                index=False, header=False, lineterminator="\n", date_format=date_format
            )
            columns.append(text.split("\n")[: len(s)])
    header = [csv_cell(str(c)) for c in df.columns]
    if index:
        header.insert(0, "" if df.index.name is None else csv_cell(str(df.index.name)))
    lines = [",".join(header)]
    lines += [",".join(row) for row in zip(*columns, strict=True)]
    text = "\n".join(lines) + "\n"
    if target is None:
        return text
    with open(target, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    return None


def _holds_carriage_return(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            if b"\r" in chunk:
                return True
    return False


def float_texts(values: Any, *, digits: int | None = None) -> list[str | None]:
    """Floats as Python writes them (shortest round trip), after rounding to ``digits``
    significant digits when given; NaN/NA as None."""
    arr = np.asarray(pd.Series(values, dtype="float64"), dtype="float64")
    if digits is not None:
        fmt = f"{{:.{int(digits)}g}}"
        return [None if v != v else repr(float(fmt.format(v))) for v in arr.tolist()]
    return [None if v != v else repr(v) for v in arr.tolist()]


@dataclass
class RunRecords:
    """Everything metaprov knows about one run, as columnar tables.

    Attributes:
        path: the run directory.
        run_id: content-derived identifier (same input, same id).
        tasks ... threads: tables with the schemas of :data:`SCHEMAS`.
        results ... fused_ops: what each task was (function, arguments, result, exception,
            call site), from the capture's extra files (see :mod:`metaprov.ingest.facts`).
        environments, packages: what each process ran in and its installed packages (see
            :mod:`metaprov.ingest.environment`).
        jobs: every batch job a process of the run ran in, as the batch system stated it (see
            :mod:`metaprov.ingest.batch`); ``job`` is the run's own one.
        activity, memory: where the workers' time went (Dask's fine performance metrics) and
            their memory over time (see :mod:`metaprov.ingest.activity`); empty when the run
            did not record them (Mofka runs, older captures).
        job: facts about the batch job (id, server, user, nodes per role, ...).
        missing: expected inputs that were absent.
        accounting: row accounting for every input file.
        darshan: Darshan tables (see :mod:`metaprov.ingest.darshan`) when logs were read.
        io: linked I/O tables (see :mod:`metaprov.link`) once :func:`metaprov.link_io` ran.
    """

    path: str
    run_id: str = ""
    tasks: pd.DataFrame = field(default_factory=lambda: empty_table("tasks"))
    executions: pd.DataFrame = field(default_factory=lambda: empty_table("executions"))
    transitions: pd.DataFrame = field(default_factory=lambda: empty_table("transitions"))
    transfers: pd.DataFrame = field(default_factory=lambda: empty_table("transfers"))
    dependencies: pd.DataFrame = field(default_factory=lambda: empty_table("dependencies"))
    graphs: pd.DataFrame = field(default_factory=lambda: empty_table("graphs"))
    workers: pd.DataFrame = field(default_factory=lambda: empty_table("workers"))
    worker_events: pd.DataFrame = field(default_factory=lambda: empty_table("worker_events"))
    lost_tasks: pd.DataFrame = field(default_factory=lambda: empty_table("lost_tasks"))
    clients: pd.DataFrame = field(default_factory=lambda: empty_table("clients"))
    configs: pd.DataFrame = field(default_factory=lambda: empty_table("configs"))
    threads: pd.DataFrame = field(default_factory=lambda: empty_table("threads"))
    results: pd.DataFrame = field(default_factory=lambda: empty_table("results"))
    functions: pd.DataFrame = field(default_factory=lambda: empty_table("functions"))
    submissions: pd.DataFrame = field(default_factory=lambda: empty_table("submissions"))
    arguments: pd.DataFrame = field(default_factory=lambda: empty_table("arguments"))
    fused_ops: pd.DataFrame = field(default_factory=lambda: empty_table("fused_ops"))
    environments: pd.DataFrame = field(default_factory=lambda: empty_table("environments"))
    packages: pd.DataFrame = field(default_factory=lambda: empty_table("packages"))
    jobs: pd.DataFrame = field(default_factory=lambda: empty_table("jobs"))
    activity: pd.DataFrame = field(default_factory=lambda: empty_table("activity"))
    memory: pd.DataFrame = field(default_factory=lambda: empty_table("memory"))
    job: dict[str, Any] = field(default_factory=dict)
    scheduler: dict[str, Any] = field(default_factory=dict)
    software: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    accounting: Accounting = field(default_factory=Accounting)
    darshan: Any = None
    io: Any = None

    @property
    def span(self) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
        """First and last event time of the run (UTC)."""
        cols = [
            self.transitions["time"],
            self.graphs["time"],
            self.transfers["start"],
            self.transfers["stop"],
            self.workers["added"],
            self.workers["removed"],
            self.clients["added"],
            self.clients["removed"],
            self.tasks["start"],
            self.tasks["end"],
        ]
        vals = (
            pd.concat([c for c in cols if len(c)], ignore_index=True)
            if any(len(c) for c in cols)
            else pd.Series([], dtype=TIME)
        )
        vals = vals.dropna()
        if vals.empty:
            return None, None
        return vals.min(), vals.max()
