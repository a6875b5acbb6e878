"""Where a campaign runs: in this process, on a LocalCluster, or on a running Dask scheduler.

Input: the runs to convert and what the user asked for. Output: a :class:`Backend` (its name,
its size and why it was chosen) and, with :func:`run_tasks`, the results of one function called
on every job, in completion order.

The rule (:func:`choose_backend`) is the one Dask users know from their own pipelines: a small
job runs in-process (a cluster's start-up costs more than it saves), a campaign or a large run
gets a ``LocalCluster`` sized to the machine's cores and memory (one export keeps ~1.3 cores
busy, so a machine with fewer than 2.6 cores runs the jobs in-process, one after the other), and
a scheduler the user names (``--scheduler``: a dask-jobqueue cluster, or any other) is used as
it is. ``--backend`` and ``--local-workers`` override.

Only paths and small dicts travel through the scheduler: each task reads its run and writes its
own shard; records and graphs never leave the worker that made them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metaprov.errors import MissingDependency, UsageError

log = logging.getLogger("metaprov")

BACKENDS = ("in-process", "local", "scheduler")

#: A single run smaller than this (its files' bytes) runs in-process: ~10^5 tasks, a few seconds.
SMALL_RUN_BYTES = 64 << 20
#: Peak memory of converting a run, per byte of its files (measured: a 10^6-task synthetic run,
#: ~1.3 GB of CSV, peaks at ~2.5 GB in one process; docs/benchmarks.md), rounded up.
PEAK_PER_INPUT_BYTE = 2.5
#: Cores one export keeps busy, for sizing a LocalCluster: ``cores // CORES_PER_EXPORT`` workers
#: (at least 1); when that is 1, the jobs run in-process. What was measured (docs/benchmarks.md):
#: one export's own CPU is 1.0-1.1 x its wall on a quiet machine (it maps, formats and writes
#: in three threads, and the kernel writes its pages back besides), and on 2 cores a LocalCluster
#: of 2 ran a 20-run campaign 13 % (quiet) to 30 % (loaded) slower than one process: two exports
#: need more than 2 cores. That bounds the constant above 1.0; 1.3 keeps 2 cores in-process and
#: gives 3 cores 2 workers, 4 cores 3, 8 cores 6 (not measured beyond 2 cores).
CORES_PER_EXPORT = 1.3
#: Memory never handed to workers: the driver, the scheduler, the operating system.
RESERVED_BYTES = 1 << 30
MIN_WORKER_BYTES = 512 << 20


def partition_share(partitions: int | None) -> float:
    """A partition's peak memory as a share of its whole run's (one process each).

    A partition reads its own keys' rows and their dependencies' (at P = 4 about 2.5 times its
    own), and ``graph.csv`` and ``worker_transfer.csv`` whole, so its peak does not fall as
    1 / P: measured at 10^5 tasks (``benchmarks/bench_partition_memory.py``, read and map one
    partition against the single export, above the interpreter) 0.49 at P = 2, 0.45 at P = 4,
    0.36 at P = 8, 0.33 at P = 16; at 10^6 tasks on a LocalCluster (``bench_campaign.py``) 0.51
    and 0.54 at P = 4 (the whole ``graph.csv`` parse weighs more there). This is
    ``0.4 + 0.6 / P``, at or above every measurement.
    """
    p = partitions or 1
    return 1.0 if p <= 1 else min(1.0, 0.4 + 0.6 / p)


@dataclass
class Backend:
    """The engine a campaign runs on.

    Attributes:
        name: ``in-process``, ``local`` (a LocalCluster started here) or ``scheduler``.
        why: one sentence saying why (printed to the user).
        workers: worker processes (LocalCluster) or 1 (in-process); None: the scheduler's.
        address: the scheduler's address (``scheduler``).
        memory_limit: bytes per LocalCluster worker.
    """

    name: str
    why: str
    workers: int | None = 1
    address: str | None = None
    memory_limit: int | None = None

    def describe(self) -> str:
        """``backend: local (2 workers): why``."""
        size = ""
        if self.name == "local":
            size = f" ({self.workers} worker{'s' if self.workers != 1 else ''} x 1 thread)"
        elif self.name == "scheduler":
            size = f" ({self.address})"
        return f"backend: {self.name}{size}: {self.why}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "why": self.why,
            "workers": self.workers,
            "address": self.address,
            "memory_limit": self.memory_limit,
        }


def peak_rss() -> int:
    """Peak resident memory of this process so far, in bytes (the worker's, inside a task)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def run_bytes(run: str | Path) -> int:
    """Bytes of the files of a run directory (what reading it costs)."""
    root = Path(run)
    try:
        return sum(p.stat().st_size for p in root.iterdir() if p.is_file())
    except OSError:
        return 0


def machine() -> tuple[int, int]:
    """(usable cores, available memory in bytes) of this machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    try:
        import psutil

        avail = int(psutil.virtual_memory().available)
    except ImportError:  # pragma: no cover - psutil comes with distributed
        avail = 4 << 30
    return max(1, cores), avail


def export_slots(cores: int) -> int:
    """How many exports the machine runs at once at full speed: ``cores // CORES_PER_EXPORT``
    (at least 1): 1 on 2 cores, 3 on 4, 6 on 8, 12 on 16."""
    return max(1, int(cores // CORES_PER_EXPORT))


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def choose_backend(
    runs: Sequence[str | Path],
    *,
    backend: str | None = None,
    scheduler: str | None = None,
    local_workers: int | None = None,
    partitions: int | None = None,
    sizes: Sequence[int] | None = None,
    cores: int | None = None,
    memory: int | None = None,
) -> Backend:
    """Choose where to convert ``runs`` (see the module docstring for the rule).

    Args:
        runs: the run directories.
        backend: ``in-process``, ``local`` or ``scheduler`` to override the rule.
        scheduler: address of a running Dask scheduler (implies ``scheduler``).
        local_workers: LocalCluster size (implies ``local`` unless a backend is given).
        partitions: the run is split into this many partitions (counts as that many jobs).
        sizes, cores, memory: run sizes in bytes and the machine (default: measured).

    Raises:
        UsageError: contradictory options.
    """
    if backend is not None and backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}", hint=f"use one of: {', '.join(BACKENDS)}")
    if scheduler and backend not in (None, "scheduler"):
        raise UsageError(
            f"--scheduler names a cluster but --backend is {backend!r}",
            hint="drop one of them",
        )
    if backend == "scheduler" and not scheduler:
        raise UsageError(
            "--backend scheduler needs --scheduler ADDRESS",
            hint="e.g. --scheduler tcp://10.0.0.1:8786 (the address the scheduler prints)",
        )
    if local_workers is not None and local_workers < 1:
        raise UsageError("--local-workers must be at least 1")
    if scheduler:
        return Backend(
            "scheduler",
            "--scheduler given: the jobs run on that cluster",
            workers=None,
            address=scheduler,
        )
    sizes = list(sizes) if sizes is not None else [run_bytes(r) for r in runs]
    jobs = max(len(runs), partitions or 1)
    largest = max(sizes, default=0)
    if cores is None or memory is None:
        c, m = machine()
        cores = c if cores is None else cores
        memory = m if memory is None else memory
    slots = export_slots(cores)
    chosen = backend is None and local_workers is None
    if backend == "in-process" or (chosen and jobs == 1 and largest < SMALL_RUN_BYTES):
        why = (
            "--backend in-process"
            if backend == "in-process"
            else f"one run of {largest / 1e6:.1f} MB: starting a cluster would cost more than it saves"
        )
        return Backend("in-process", why, workers=1)
    if chosen and slots == 1:
        why = (
            f"{cores} core{'s' if cores != 1 else ''}: one export keeps ~{CORES_PER_EXPORT:g} "
            "busy (mapping, formatting and writing threads), so a LocalCluster would run one "
            "job at a time at a cluster's cost; the jobs run one after the other here "
            "(--local-workers N or --backend local to choose otherwise)"
        )
        return Backend("in-process", why, workers=1)
    budget = max(memory - RESERVED_BYTES, MIN_WORKER_BYTES)
    peak = max(int(largest * PEAK_PER_INPUT_BYTE * partition_share(partitions)), MIN_WORKER_BYTES)
    fit = max(1, budget // peak)
    if local_workers is not None:
        n = local_workers
        why = f"--local-workers {n}"
    else:
        n = int(max(1, min(jobs, slots, fit)))
        what = (
            f"{len(runs)} runs"
            if len(runs) > 1
            else (
                f"one run split in {partitions} partitions"
                if (partitions or 1) > 1
                else "one large run"
            )
        )
        bound = "cores" if n == min(jobs, slots) and n <= fit else "memory"
        if n == jobs and jobs <= min(slots, fit):
            bound = "jobs"
        why = (
            f"{what} ({largest / 1e6:.0f} MB largest, ~{_gib(peak)} peak each) on {cores} cores "
            f"(~{CORES_PER_EXPORT:g} per export: {slots} at once) and {_gib(memory)} available: "
            f"LocalCluster of {n} (limited by {bound})"
        )
        if backend == "local":
            why = "--backend local; " + why
    return Backend("local", why, workers=n, memory_limit=int(max(budget // n, MIN_WORKER_BYTES)))


@contextmanager
def open_backend(b: Backend) -> Iterator[Any]:
    """A ``distributed.Client`` for ``b`` (None in-process); a LocalCluster is closed on exit."""
    if b.name == "in-process":
        yield None
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - distributed is in the cluster extra
        raise MissingDependency(
            "the Dask backends need dask.distributed, which is not installed",
            hint="pip install 'metaprov[cluster]', or use --backend in-process",
        ) from exc
    if b.name == "scheduler":
        try:
            client = Client(b.address, timeout="20s")
        except (OSError, TimeoutError) as exc:
            raise UsageError(
                f"cannot reach the Dask scheduler at {b.address}: {exc}",
                hint="start it (dask scheduler / dask-jobqueue) or check the address",
            ) from exc
        except Exception as exc:  # noqa: BLE001 - whatever a stranger's bytes make Dask raise
            # Not Dask's protocol: a frame length read from garbage makes numpy allocate
            # exabytes (MemoryError) or refuse the shape (ValueError), and so on.
            raise UsageError(
                f"the server at {b.address} does not speak Dask's protocol "
                f"({type(exc).__name__}: {str(exc)[:200]})",
                hint="give the address the Dask scheduler prints (tcp://HOST:8786 by default)",
            ) from exc
        try:
            yield client
        finally:
            client.close()
        return
    cluster = LocalCluster(
        n_workers=b.workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=b.memory_limit,
        # the scheduler's HTTP server starts whatever the dashboard: on this machine only, on
        # any free port (never "port 8787 is already in use" warnings)
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    )
    try:
        with Client(cluster) as client:
            yield client
    finally:
        cluster.close()


def run_tasks(
    client: Any,
    fn: Callable[[dict[str, Any]], dict[str, Any]],
    jobs: Sequence[dict[str, Any]],
    keys: Sequence[str],
    lost: Callable[[dict[str, Any], BaseException], dict[str, Any]],
) -> Iterator[dict[str, Any]]:
    """``fn(job)`` for every job, one Dask task each (in this process when ``client`` is None),
    yielding the results as they complete. ``fn`` reports its own failures; a task that dies
    with its worker (killed, out of memory) is reported by ``lost(job, error)``."""
    if client is None:
        for job in jobs:
            yield fn(job)
        return
    from distributed import as_completed

    futures = {
        client.submit(fn, job, key=key, pure=False, retries=0): job
        for job, key in zip(jobs, keys, strict=True)
    }
    for fut in as_completed(list(futures)):
        job = futures.pop(fut)
        try:
            result = fut.result()
        except Exception as exc:  # noqa: BLE001 - the worker died; the other runs go on
            result = lost(job, exc)
        fut.release()
        yield result
