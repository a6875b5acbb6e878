"""Seeded synthetic Mofka-Dask runs: the benchmark workload and a large test input.

Input: the shape of a run (number of tasks, workers, threads, share of transfers, ...) and a seed.
Output: a run directory holding ``scheduler_transition.csv``, ``worker_transition.csv``,
``worker_transfer.csv``, ``graph.csv``, ``worker.csv`` and ``client.csv`` with the exact column
schemas the Mofka-Dask plugins write (``pandas.DataFrame.to_csv``: unnamed index column, float epoch
times in full ``repr`` precision, thread ids as exact integers, tuple keys as their ``repr``), and
``truth.json`` with the ground-truth counts a reader must reproduce. With ``io_fraction > 0`` it
also writes one Darshan DXT log per worker process (tasks' file I/O on their own thread ids,
inside their compute windows, plus the processes' own I/O), and ``truth.json`` gains the I/O
truth; :func:`expected_io` lists every intended segment with its task.

The run is causally consistent, so that linking and consolidation can be checked against it:

* tasks on one (worker, thread) run back to back and never overlap;
* a task starts after its dependencies finished; a dependency held by another worker is fetched
  first (an incoming transfer, logged twice by the receiver as the real plugin does, plus the
  outgoing row logged by the sender on its own clock);
* per key, scheduler transitions (``released -> waiting -> processing -> memory``) and worker
  transitions (``released -> waiting -> ready -> executing -> memory``) are in time order;
* the scheduler's ``begins``/``ends`` are the first ``startstops`` entry: the incoming transfer for
  tasks that fetched a dependency (as in real runs), else the compute interval shifted by a
  per-worker clock offset of a few milliseconds.

Everything is built column-wise with numpy and written with pyarrow string kernels in chunks:
10^6 tasks (~7.3 million CSV rows) take ~10 s on an idle 2-core machine, and memory is a few
numeric arrays per task plus one chunk of strings (~0.55 GB at 10^6). The same seed and parameters
give byte-identical files.

Example::

    from metaprov.synthetic import generate_run, load_truth
    run = generate_run("/tmp/run-1e5", 100_000, seed=1)
    truth = load_truth(run)   # {"tasks": 100000, "scheduler_transitions": 300000, ...}
    run = generate_run("/tmp/run-io", 100_000, seed=1, io_fraction=0.1, io_files=100)
    load_truth(run)["io"]["link"]  # {"linked": 17302, "process": 143, "ambiguous": 0, ...}

The modules, in the order :func:`generate_run` uses them: :mod:`.schedule` (the timeline) and
:mod:`.graph` (keys, dependencies) make the run plan (:mod:`.plan`); :mod:`.csvfiles` writes the
CSV files from it (formatting in :mod:`.csvtext`); :mod:`.io_plan` adds the Darshan I/O, whose
logs :mod:`.darshan` writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.errors import UsageError
from metaprov.synthetic.csvfiles import (
    COLUMNS,
    _release,
    _replica_uses,
    _write_clients,
    _write_graph,
    _write_scheduler,
    _write_transfers,
    _write_worker_transitions,
    _write_workers,
)
from metaprov.synthetic.csvtext import _take, format_floats
from metaprov.synthetic.io_plan import IO_FILES, _io_plan, _io_truth, _write_darshan
from metaprov.synthetic.plan import _Events, _events, _Plan, _plan

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "generate_run",
    "load_truth",
    "expected_io",
    "format_floats",
    "COLUMNS",
    "TRUTH_FILE",
    "IO_FILES",
]

TRUTH_FILE = "truth.json"
GENERATOR_VERSION = 1


# Rows formatted and written per batch: bounds the memory of the string columns.
CHUNK_ROWS = 100_000


def generate_run(
    path: str | Path,
    n_tasks: int,
    *,
    seed: int = 0,
    workers: int = 8,
    threads: int = 8,
    transfer_fraction: float = 0.10,
    tuple_key_fraction: float = 0.5,
    with_worker_transitions: bool = True,
    with_scheduler_transitions: bool = True,
    graphs: int = 1,
    clients: int = 1,
    erred_fraction: float = 0.0,
    retried_fraction: float = 0.0,
    wide_thread_ids: bool = False,
    fetch_transitions: bool = False,
    io_fraction: float = 0.0,
    io_files: int = IO_FILES,
    chunk_rows: int = CHUNK_ROWS,
) -> Path:
    """Write a synthetic Mofka-Dask run directory and its ``truth.json``.

    Per task: 3 scheduler transitions (``released->waiting``, ``waiting->processing``,
    ``processing->memory`` with thread, worker, begins, ends, duration, size), 4 worker transitions
    (``released->waiting->ready->executing->memory``); ``transfer_fraction`` of the tasks fetch one
    dependency from another worker (3 transfer rows: the incoming row twice, differing only in
    ``time``, and the sender's outgoing row). ``graph.csv`` holds the dependency DAG. With worker
    transitions, ``truth.json`` says in ``replica_uses`` how many executions read a copy of a
    dependency that a transfer had brought to their worker by their start (``mp:usedReplica``).

    Args:
        path: run directory to create (existing files of the same names are overwritten).
        n_tasks: number of tasks (N).
        seed: random seed; same seed and arguments give byte-identical files.
        workers: worker processes.
        threads: threads per worker.
        transfer_fraction: share of tasks that fetch a dependency from another worker.
        tuple_key_fraction: share of tasks with tuple keys ``('<prefix>-<md5>', i)``.
        with_worker_transitions: write ``worker_transition.csv`` (real runs often lack it).
        with_scheduler_transitions: write ``scheduler_transition.csv``.
        graphs: number of submitted graphs (run one after the other).
        clients: number of clients; graph ``g`` is submitted by client ``g % clients``.
        erred_fraction: share of tasks that end in error (chosen among tasks nobody depends on).
        retried_fraction: share of tasks whose first attempt failed and that ran a second time
            (scheduler: ``processing->released->waiting->processing``; worker: the first attempt
            ends ``executing->error``, ``error->released``).
        wide_thread_ids: make thread ids larger than 2^63 and odd, so that any float conversion in
            a reader changes them (real Linux ids are < 2^47).
        fetch_transitions: also write the receiving worker's ``released->fetch->flight->memory``
            transitions of each transferred key (real runs have them; off in the reference workload).
        io_fraction: share of the tasks that do file I/O. Above 0, one Darshan DXT log per worker
            process is written too (see "Darshan I/O" below); 0 (the default) writes none and
            leaves every other file byte-identical to a run generated without the option.
        io_files: size of the pool of data files the I/O tasks read and write
            (``/lus/grand/projects/DaskProv/data/part-0001.h5`` ...).
        chunk_rows: rows formatted per batch (bounds memory).

    Darshan I/O (``io_fraction > 0``): ``round(io_fraction * n_tasks)`` tasks, drawn at random
    among those lasting at least 0.5 ms, each issue 1-4 DXT segments (55/25/12/8 %) on one file of
    the pool, one after another, on the task's own thread id and strictly inside its compute
    window (``ready->executing`` .. ``executing->memory|error`` of its final attempt), at least
    10 % of the task's duration (at most 1 ms, at least 50 us) from both edges. Tasks of the
    ``load`` and ``array`` prefixes read; the graph's sinks (the "save/store" step) write; the
    others read or write at random. Lengths follow the segment's duration at ~0.8 GB/s; offsets
    are sequential per (file, read|write) in time order. Each worker process also has
    process-level I/O on threads that run no task: 10-20 startup reads (site-packages modules,
    configuration) on its main thread before the worker registers, 0-3 spill writes on an offload
    thread during the run and 2-4 writes to its log file after the last task. Each log is
    written with :func:`metaprov.synthetic.darshan.write_darshan_log` in the 96-byte DXT
    layout of the Dask-run Darshan build (``pthread_id=<n>`` in ``extra_info``) with POSIX
    counters, a worker command line (``--multiprocessing-fork``), the worker's host and its own
    pid, and a Darshan clock 12-58 ms late against the worker's clock (as measured on real
    runs): :func:`metaprov.link_io` has to estimate that offset. ``truth.json`` gains ``io``:
    per log (worker, pid, true lateness, segment counts), the link counts ``link_io`` must report
    (every task segment ``linked``, every other one ``process``, none ambiguous or unlinked),
    reads, writes, bytes and files of task and process I/O, and per prefix and per data file;
    :func:`expected_io` lists every intended segment with its task. The exact link counts hold
    with worker transitions (the default) and enough I/O per worker to pin each process's clock
    offset (tens of task segments per worker).

    Returns:
        The run directory.

    Raises:
        UsageError: a parameter is out of range.
    """
    fractions = {
        "transfer_fraction": transfer_fraction,
        "tuple_key_fraction": tuple_key_fraction,
        "erred_fraction": erred_fraction,
        "retried_fraction": retried_fraction,
        "io_fraction": io_fraction,
    }
    _check(n_tasks, workers, threads, graphs, clients, io_files, fractions)
    run = Path(path)
    run.mkdir(parents=True, exist_ok=True)
    params: dict[str, Any] = dict(
        n_tasks=n_tasks,
        seed=seed,
        workers=workers,
        threads=threads,
        transfer_fraction=transfer_fraction,
        tuple_key_fraction=tuple_key_fraction,
        with_worker_transitions=with_worker_transitions,
        with_scheduler_transitions=with_scheduler_transitions,
        graphs=graphs,
        clients=clients,
        erred_fraction=erred_fraction,
        retried_fraction=retried_fraction,
        wide_thread_ids=wide_thread_ids,
        fetch_transitions=fetch_transitions,
    )
    if io_fraction > 0:  # absent otherwise: truth.json of runs without I/O is unchanged
        params.update(io_fraction=io_fraction, io_files=io_files)
    p = _plan_of(params)
    # A second stream for latencies, so the plan does not depend on which files are written.
    rng = np.random.Generator(np.random.PCG64([seed, 1]))
    ev = _events(p, rng)
    _release()
    rows = _write_csv_files(run, p, ev, rng, params, chunk_rows)
    io_truth: dict[str, Any] | None = None
    if io_fraction > 0:
        io = _io_plan(p, seed, io_fraction, io_files)
        _write_darshan(run, p, io)
        io_truth = _io_truth(p, io, io_fraction, io_files)
        del io
    truth = _truth(run, p, ev, params, rows, io_truth)
    (run / TRUTH_FILE).write_text(json.dumps(truth, indent=2, sort_keys=True) + "\n")
    return run


def _check(
    n_tasks: int,
    workers: int,
    threads: int,
    graphs: int,
    clients: int,
    io_files: int,
    fractions: dict[str, float],
) -> None:
    """Raise :class:`UsageError` for a parameter out of range."""
    if not 1 <= n_tasks < 2**31:
        raise UsageError(f"n_tasks must be within [1, 2^31), got {n_tasks}")
    if not 1 <= workers <= 192 or threads < 1:
        raise UsageError(f"need 1 <= workers <= 192 and threads >= 1, got {workers} and {threads}")
    if graphs < 1 or graphs > n_tasks or clients < 1:
        raise UsageError(
            f"need 1 <= graphs <= n_tasks and clients >= 1, got {graphs} and {clients}"
        )
    for name, v in fractions.items():
        if not 0.0 <= v <= 1.0:
            raise UsageError(f"{name} must be within [0, 1], got {v}")
    if fractions["retried_fraction"] > 0.5:
        raise UsageError(f"retried_fraction must be <= 0.5, got {fractions['retried_fraction']}")
    if io_files < 1:
        raise UsageError(f"io_files must be >= 1, got {io_files}")


def _plan_of(params: dict[str, Any]) -> _Plan:
    """The run plan of the parameters recorded in ``truth.json``."""
    return _plan(
        params["n_tasks"],
        seed=params["seed"],
        workers=params["workers"],
        threads=params["threads"],
        transfer_fraction=params["transfer_fraction"],
        tuple_key_fraction=params["tuple_key_fraction"],
        graphs=params["graphs"],
        clients=params["clients"],
        erred_fraction=params["erred_fraction"],
        retried_fraction=params["retried_fraction"],
        wide_thread_ids=params["wide_thread_ids"],
    )


@dataclass
class _Rows:
    """What the CSV writers wrote: rows per file, transfers, wanted keys."""

    files: dict[str, int]
    transfers: int
    wanted: int


def _write_csv_files(
    run: Path,
    p: _Plan,
    ev: _Events,
    rng: np.random.Generator,
    params: dict[str, Any],
    chunk_rows: int,
) -> _Rows:
    """The six CSV files (a transition file not asked for is removed, as are the Darshan logs
    an earlier run left in ``run``)."""
    files: dict[str, int] = {}
    for stale in ("scheduler_transition.csv", "worker_transition.csv", *_old_logs(run)):
        (run / stale).unlink(missing_ok=True)
    if params["with_scheduler_transitions"]:
        files["scheduler_transition.csv"] = _write_scheduler(
            run / "scheduler_transition.csv", p, ev, chunk_rows
        )
    _release()
    if params["with_worker_transitions"]:
        files["worker_transition.csv"] = _write_worker_transitions(
            run / "worker_transition.csv", p, ev, chunk_rows, params["fetch_transitions"]
        )
    _release()
    transfer_rows, n_transfers = _write_transfers(
        run / "worker_transfer.csv", p, ev, rng, chunk_rows
    )
    files["worker_transfer.csv"] = transfer_rows
    files["graph.csv"], n_wanted = _write_graph(run / "graph.csv", p, chunk_rows)
    files["worker.csv"] = _write_workers(run / "worker.csv", p)
    files["client.csv"] = _write_clients(run / "client.csv", p)
    return _Rows(files, n_transfers, n_wanted)


def _truth(
    run: Path,
    p: _Plan,
    ev: _Events,
    params: dict[str, Any],
    rows: _Rows,
    io_truth: dict[str, Any] | None,
) -> dict[str, Any]:
    """The ground truth a reader must reproduce (``truth.json``)."""
    files = rows.files
    n_edges = int((p.dep1 >= 0).sum() + (p.dep2 >= 0).sum())
    truth: dict[str, Any] = {
        "generator": "metaprov.synthetic",
        "generator_version": GENERATOR_VERSION,
        "params": params,
        "tasks": p.n,
        "executions": p.n + len(p.retry_task),
        "retried": len(p.retry_task),
        "erred": int(p.erred.sum()),  # final state erred (scheduler processing->erred)
        # executions that ended executing->error: erred tasks plus failed first attempts
        "failed_executions": int(p.erred.sum()) + len(p.retry_task),
        "tuple_keys": p.n_tuple,
        "scheduler_transitions": files.get("scheduler_transition.csv", 0),
        "worker_transitions": files.get("worker_transition.csv", 0),
        "transfer_rows": files["worker_transfer.csv"],
        "transfers": rows.transfers,
        "transfer_rows_distinct": 2 * rows.transfers,
        "duplicate_transfer_rows": rows.transfers,
        "edges": n_edges,
        "wanted": rows.wanted,
        "workers": p.workers,
        "threads": p.workers * p.threads,
        "clients": p.clients,
        "graphs": p.graphs,
        "rows": files,
        "rows_total": int(sum(files.values())),
        "bytes": {name: (run / name).stat().st_size for name in files},
    }
    if params["with_worker_transitions"]:
        # Without them, executions are the scheduler's startstops, which for a fetching task
        # start with its transfer: the count would be another one (not written).
        truth["replica_uses"] = _replica_uses(p, ev)
    if io_truth is not None:
        truth["io"] = io_truth
    return truth


def load_truth(path: str | Path) -> dict[str, Any]:
    """Read the ``truth.json`` that :func:`generate_run` wrote into ``path``."""
    return json.loads((Path(path) / TRUTH_FILE).read_text())


def _old_logs(run: Path) -> list[str]:
    """Darshan logs an earlier generate_run wrote into ``run`` (listed in its truth.json)."""
    try:
        old = json.loads((run / TRUTH_FILE).read_text())
        return [str(entry["log"]) for entry in old.get("io", {}).get("logs", [])]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []


def expected_io(path: str | Path) -> pd.DataFrame:
    """Every DXT segment a synthetic run's Darshan logs hold, with the task that issued it.

    Rebuilds the generator's plan from the parameters in ``truth.json`` (as long as generating
    the run's numbers takes, without writing anything).

    Args:
        path: a run directory written by :func:`generate_run` with ``io_fraction > 0``.

    Returns:
        One row per segment: ``log``, ``worker`` (address), ``pid``, ``pthread`` (UInt64),
        ``level`` (``task`` or ``process``), ``key`` (``str(key)``, as in the CSV files; missing
        for process-level I/O), ``attempt`` (0, or 1 for a retried task's final attempt),
        ``path``, ``op`` (``read``/``write``), ``offset``, ``length``, ``start``/``end`` (float
        epoch seconds on the worker's clock; Darshan's own times are later by the log's
        ``clock_late_s`` in ``truth.json``). ``(log, path, op, offset)`` identifies a segment.

    Raises:
        UsageError: the run was generated without I/O.
    """
    import pandas as pd

    truth = load_truth(path)
    prm = dict(truth["params"])
    if "io_fraction" not in prm:
        raise UsageError(f"{path}: generated without I/O (io_fraction = 0): no Darshan logs")
    p = _plan_of(prm)
    io = _io_plan(p, prm["seed"], prm["io_fraction"], prm["io_files"])
    on_task = io.task >= 0
    tk = np.maximum(io.task, 0)
    keys = pc.if_else(pa.array(on_task), _take(p.key_csv, tk), pa.scalar(None, pa.string()))
    # A CSV field quoted for its commas is a tuple repr: str(key) is what is inside the quotes.
    keys = pc.if_else(pc.starts_with(keys, '"'), pc.utf8_slice_codeunits(keys, 1, -1), keys)
    retried = np.zeros(p.n, dtype=bool)
    retried[p.retry_task] = True
    attempt = pd.array(np.where(on_task, retried[tk].astype(np.int64), 0), dtype="Int64")
    attempt[~on_task] = pd.NA
    from metaprov.records import STR

    return pd.DataFrame(
        {
            "log": np.asarray(io.log_names, dtype=object)[io.worker],
            "worker": np.asarray(p.addresses.to_pylist(), dtype=object)[io.worker],
            "pid": io.pid[io.worker],
            "pthread": pd.array(io.pthread, dtype="UInt64"),
            "level": np.where(on_task, "task", "process").astype(object),
            "key": pd.Series(pd.array(keys, dtype=STR)),
            "attempt": attempt,
            "path": np.asarray(io.paths, dtype=object)[io.path],
            "op": np.where(io.write, "write", "read").astype(object),
            "offset": io.offset,
            "length": io.length,
            "start": io.start,
            "end": io.end,
        }
    )
