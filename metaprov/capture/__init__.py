"""Record a Dask distributed run yourself, without a Mofka deployment.

Input: a running Dask cluster (scheduler and workers).
Output: a run directory in the same CSV schema the Mofka-Dask plugins produce
(``scheduler_transition.csv``, ``worker_transition.csv``, ``worker_transfer.csv``, ``graph.csv``,
``worker.csv``, ``client.csv``), so every metaprov reader works unchanged, plus extra files that
close the gaps of those plugins: ``worker_execution.csv`` (thread and exact compute window of
every execution attempt), ``workers_info.csv`` (pid, host name, threads, memory, versions per
worker), ``dask-config.json`` (effective Dask configuration) and ``metaprov-run.json``.

Ways to switch it on (see ``docs/capture.md``)::

    # 1. around a block of work
    with metaprov.capture.record(client, "runs/my-run"):
        client.compute(...).result()

    # 2. from a script, for the client's lifetime
    client.register_plugin(SchedulerCapture("runs/my-run"), name="metaprov-capture")
    client.register_plugin(WorkerCapture(), name="metaprov-capture")

    # 3. on a cluster
    #   METAPROV_CAPTURE_DIR=runs/my-run dask scheduler --preload metaprov.capture
    #   dask worker tcp://... --preload metaprov.capture

    # 4. a whole script, unchanged: every cluster it starts is recorded
    #   metaprov capture -o runs/my-run my_pipeline.py --its-args
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import dask
    import distributed  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "metaprov.capture needs dask.distributed: pip install 'metaprov[capture]'"
    ) from exc

from metaprov.capture._files import (
    EXTRA_FILES,
    MOFKA_FILES,
    NFRAMES,
    PLUGIN_NAME,
    configured_directory,
    existing_outputs,
)
from metaprov.capture.batch import record_jobs
from metaprov.capture.merge import merge_parts, merge_run
from metaprov.capture.scheduler import SchedulerCapture
from metaprov.capture.worker import WorkerCapture
from metaprov.errors import UsageError

log = logging.getLogger("metaprov.capture")

__all__ = [
    "SchedulerCapture",
    "WorkerCapture",
    "Capture",
    "record",
    "dask_setup",
    "merge_parts",
    "merge_run",
    "record_jobs",
    "MOFKA_FILES",
    "EXTRA_FILES",
    "PLUGIN_NAME",
]


@dataclass
class Capture:
    """Handle returned by :func:`record`: where the run goes and, after the block, what was written.

    Attributes:
        directory: the run directory (absolute).
        summary: contents of ``metaprov-run.json`` once the block has exited (rows per file,
            workers, incomplete parts, notes); empty inside the block.
    """

    directory: Path
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def files(self) -> dict[str, int]:
        """Rows written per file (after the block)."""
        return dict(self.summary.get("files", {}))


def _ready_on_scheduler(dask_scheduler: Any, name: str) -> None:
    plugin = dask_scheduler.plugins.get(name)
    if plugin is not None and hasattr(plugin, "ready"):
        plugin.ready()


async def _finalize_on_scheduler(dask_scheduler: Any, name: str) -> dict[str, Any]:
    plugin = dask_scheduler.plugins.get(name)
    if plugin is None:
        return {}
    try:
        return await plugin.finalize()
    finally:
        dask_scheduler.plugins.pop(name, None)


@contextmanager
def record(
    client: Any,
    directory: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    workers: bool = True,
    flush_interval: float = 2.0,
    facts: bool = True,
    arguments: bool = False,
    argument_limit: int = 256,
    tracebacks: bool = False,
    fused_ops: bool = False,
    metrics: bool = True,
    memory_interval: float = 0.5,
    environment: bool = True,
    anonymous: bool = False,
) -> Iterator[Capture]:
    """Capture everything the cluster does while the block runs.

    Registers :class:`SchedulerCapture` and :class:`WorkerCapture` (also on workers that join
    later); on exit, even after an exception, the workers flush, the parts are merged, and the
    files are complete and consistent when the ``with`` statement ends.

    Args:
        client: a connected, synchronous ``distributed.Client``.
        directory: the run directory (created); it must be writable by the workers and readable
            by the scheduler (same machine, or a shared file system).
        overwrite: replace an earlier capture in ``directory`` (default: refuse with an error).
        workers: also record on the workers (transitions, transfers, executions).
        flush_interval: seconds between periodic flushes of buffered rows.
        facts: record what each task was: the function per task group, the result type and
            size or the exception of every attempt, and where the client submitted each graph
            (this sets ``distributed.diagnostics.computations.nframes`` to 1 in this process
            for the block, so the client sends its call site).
        arguments: also record the literal arguments of every task (opt-in).
        argument_limit: longest argument ``repr`` kept (characters); larger ones are
            summarised by type and size.
        tracebacks: also record the traceback of every erred attempt (opt-in).
        fused_ops: also record the inner operations of fused tasks (opt-in).
        metrics: record where the workers' time went: Dask's fine performance metrics per
            execution and per interval (``worker_metric.csv``).
        memory_interval: seconds between two looks at the workers' memory (``worker_memory.csv``)
            and spans (``span.csv``); 0: neither.
        environment: record what each process ran in (interpreter, installed distributions,
            venv/conda, container, batch job, host; for this client also its script and git
            state) under ``<directory>/environment/`` (see ``docs/capture.md``, *Environment*).
        anonymous: leave host names and user names out of those records, and out of
            ``metaprov-run.json`` and ``workers_info.csv``.

    Yields:
        A :class:`Capture`; its ``summary`` is filled when the block exits.

    Example:
        >>> with record(client, "runs/my-run") as cap:  # doctest: +SKIP
        ...     client.compute(graph).result()
        >>> cap.files["scheduler_transition.csv"]  # doctest: +SKIP
        412
    """
    if getattr(client, "asynchronous", False):
        raise UsageError(
            "record() needs a synchronous Client",
            hint="with an asynchronous client: await client.register_plugin(SchedulerCapture(dir)) "
            "and WorkerCapture(); await the scheduler plugin's finalize() at the end",
        )
    run_dir = Path(directory).expanduser().absolute()
    cap = Capture(run_dir)
    client.register_plugin(
        SchedulerCapture(
            run_dir,
            overwrite=overwrite,
            flush_interval=flush_interval,
            functions=facts,
            call_sites=facts,
            arguments=arguments,
            argument_limit=argument_limit,
            fused_ops=fused_ops,
            memory_interval=memory_interval,
            environment=environment,
            anonymous=anonymous,
            await_ready=True,
        ),
        name=PLUGIN_NAME,
    )
    client_env = None
    if environment:
        from metaprov.capture.environment import Background

        client_env = Background(
            run_dir, "client", anonymous=anonymous, process={"client": str(client.id)}
        )
    config = {NFRAMES: 1} if facts and (dask.config.get(NFRAMES, default=0) or 0) < 1 else {}
    try:
        if workers:
            client.register_plugin(
                WorkerCapture(
                    run_dir,
                    flush_interval=flush_interval,
                    results=facts,
                    tracebacks=tracebacks,
                    metrics=metrics,
                    environment=environment,
                    anonymous=anonymous,
                ),
                name=PLUGIN_NAME,
            )
        # the run starts once every plugin is in place (the set-up is the capture's, not the run's)
        client.run_on_scheduler(_ready_on_scheduler, name=PLUGIN_NAME)
        with dask.config.set(config):
            yield cap
    finally:
        if client_env is not None:
            client_env.join()
        try:
            if workers:
                # Runs teardown on every worker: buffered rows are on disk when this returns.
                client.unregister_worker_plugin(PLUGIN_NAME)
        finally:
            cap.summary = client.run_on_scheduler(_finalize_on_scheduler, name=PLUGIN_NAME) or {}


def _free_directory(directory: Path) -> Path:
    """``directory``, or ``directory-2``, ``-3``, ... when it already holds a capture.

    A preloaded scheduler must never fail to start (nor mix two runs) because an earlier
    scheduler of the same job recorded into the configured directory.
    """
    candidate, n = directory, 1
    while existing_outputs(candidate):
        n += 1
        candidate = directory.with_name(f"{directory.name}-{n}")
    if candidate != directory:
        log.warning("metaprov capture: %s holds a capture; recording into %s", directory, candidate)
    return candidate


def dask_setup(dask_object: Any) -> Any:
    """``--preload metaprov.capture`` entry point for ``dask scheduler`` and ``dask worker``.

    The directory comes from ``$METAPROV_CAPTURE_DIR`` or the dask config key
    ``metaprov.capture.directory``; workers without either use the scheduler's directory.

    Args:
        dask_object: the ``Scheduler`` or ``Worker`` being started.

    Returns:
        For a worker, the awaitable that installs the plugin (Dask awaits it).
    """
    from distributed import Scheduler, Worker

    if isinstance(dask_object, Scheduler):
        directory = configured_directory()
        if directory is not None:
            directory = str(_free_directory(Path(directory)))
        dask_object.add_plugin(SchedulerCapture(directory), name=PLUGIN_NAME)
        return None
    if isinstance(dask_object, Worker):
        # No directory: the worker asks its scheduler first, so both write the same run.
        return dask_object.plugin_add(WorkerCapture(None), name=PLUGIN_NAME)
    raise TypeError(
        f"metaprov.capture preload expects a Scheduler or a Worker, not {type(dask_object).__name__} "
        "(use --preload, not --preload-nanny)"
    )
