"""Scheduler side of the capture: a Dask ``SchedulerPlugin`` writing the scheduler's files.

Input: the scheduler's task transitions, submitted graphs, workers and clients coming and going.
Output, in the run directory (Mofka-Dask schema, written directly: only the scheduler writes them):
``scheduler_transition.csv``, ``graph.csv``, ``worker.csv``, ``client.csv``; plus
``dask-config.json`` (the scheduler's effective Dask configuration) and ``metaprov-run.json``
(versions, scheduler address/pid/host, per-file row counts, what is incomplete: ``status``
is ``complete``, or ``incomplete`` when a worker was lost or a worker's records were not all
written), and ``worker_loss.csv`` (each worker the scheduler removed: why, and the tasks it took). At the end
(:meth:`SchedulerCapture.finalize`, run by :func:`metaprov.capture.record` or at scheduler close)
it makes the workers flush and merges their part files (see :mod:`metaprov.capture.merge`).

Differences from the Mofka-Dask scheduler plugin, all inside the same columns:
``begins``/``ends``/``duration`` hold the task's *compute* interval (the ``compute`` entry of
``startstops``), not the first entry (which is a dependency transfer for about a fifth of the
tasks of a large run); ``thread``/``worker``/``size`` are kept when they are 0; ``graph.csv``'s
``dependencies`` is rebuilt from the scheduler's task states (recent ``distributed`` no longer
passes it to ``update_graph``).
"""

from __future__ import annotations

import asyncio
import contextvars
import getpass
import json
import logging
import os
import platform
import socket
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from metaprov.capture._files import (
    CLIENT,
    CONFIG_JSON,
    ENV_ANONYMOUS,
    GRAPH,
    GRAPH_SUBMISSION,
    LAYOUT,
    METADATA_KEY,
    PARTS_DIR,
    RUN_JSON,
    SPAN,
    TASK_ARGUMENT,
    TASK_FUNCTION,
    TASK_FUSED_OP,
    WORKER,
    WORKER_LOSS,
    WORKER_MEMORY,
    CsvSink,
    SchedulerTransitionSink,
    compute_entry,
    configured_directory,
    dask_config_snapshot,
    default_directory,
    existing_outputs,
    now,
    remove_outputs,
    utc_stamp,
    versions,
    write_json_atomic,
)
from metaprov.capture.facts import (
    call_site,
    fused_operations,
    is_fused,
    literal_arguments,
    task_function,
)
from metaprov.errors import UsageError

log = logging.getLogger("metaprov.capture")

#: The code frames the client sent with the graph being submitted (set around the scheduler's
#: ``update-graph`` handler, read by :meth:`SchedulerCapture.update_graph` in the same task).
_SUBMITTED_CODE: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "metaprov_submitted_code", default=None
)


class SchedulerCapture(SchedulerPlugin):
    """Record the scheduler's view of a Dask run into a run directory.

    Args:
        directory: the run directory (created). ``None``: ``$METAPROV_CAPTURE_DIR``, then the
            dask config key ``metaprov.capture.directory``, then ``./metaprov-run-<UTC time>``.
            Workers running :class:`~metaprov.capture.WorkerCapture` without a directory use
            this one (published in the scheduler's metadata).
        overwrite: replace the capture files already in ``directory`` (default: refuse).
        flush_rows: rows buffered per file before a batch is written.
        flush_interval: seconds between periodic flushes.
        close_timeout: seconds :meth:`finalize` waits for workers to flush their parts.
        functions: record the function each task group runs (``task_function.csv``).
        call_sites: record where the client submitted each graph (``graph_submission.csv``),
            from the code frames the client sends (Dask config
            ``distributed.diagnostics.computations.nframes`` >= 1 in the client process;
            :func:`metaprov.capture.record` sets it).
        arguments: record the literal arguments of every task (``task_argument.csv``).
        argument_limit: longest argument ``repr`` recorded (characters); larger arguments are
            summarised by type and size.
        fused_ops: record the inner operations of fused tasks, once per task group
            (``task_fused_op.csv``).
        memory_interval: seconds between two looks at the workers' memory and status
            (``worker_memory.csv``: a row per worker whenever a figure changed); 0: none.
            The spans (``span.csv``) are written with it.
        await_ready: the capture starts when :meth:`ready` is called (``record`` calls it once
            the workers' plugin is in place), not when this plugin starts.

    Example:
        >>> client.register_plugin(SchedulerCapture("runs/my-run"), name="metaprov-capture")  # doctest: +SKIP
    """

    idempotent = False
    name = "metaprov-capture"

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        overwrite: bool = False,
        flush_rows: int = 10_000,
        flush_interval: float = 2.0,
        close_timeout: float = 30.0,
        functions: bool = True,
        call_sites: bool = True,
        arguments: bool = False,
        argument_limit: int = 256,
        fused_ops: bool = False,
        memory_interval: float = 0.5,
        environment: bool = True,
        anonymous: bool | None = None,
        await_ready: bool = False,
    ) -> None:
        self.await_ready = await_ready
        self.directory = None if directory is None else str(Path(directory).expanduser().absolute())
        self.environment = environment
        if anonymous is None:  # preloaded (``metaprov capture --anonymous``): from the variable
            anonymous = os.environ.get(ENV_ANONYMOUS, "").lower() in ("1", "true", "yes")
        self.anonymous = anonymous
        self._env_job: Any = None
        self.overwrite = overwrite
        self.flush_rows = flush_rows
        self.flush_interval = flush_interval
        self.close_timeout = close_timeout
        self.functions = functions
        self.call_sites = call_sites
        self.arguments = arguments
        self.argument_limit = max(1, int(argument_limit))
        self.fused_ops = fused_ops
        self.memory_interval = memory_interval
        self._started = False
        self._summary: dict[str, Any] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, scheduler: Any) -> None:
        """Create the run directory and the scheduler's files (called by Dask)."""
        if self._started:
            return
        run_dir = Path(self.directory or configured_directory() or default_directory())
        run_dir = run_dir.expanduser().absolute()
        run_dir.mkdir(parents=True, exist_ok=True)
        present = existing_outputs(run_dir)
        if present:
            if not self.overwrite:
                raise UsageError(
                    f"{run_dir} already holds a capture ({', '.join(present[:4])}"
                    f"{', ...' if len(present) > 4 else ''})",
                    hint="record into a new directory, or pass overwrite=True to replace it",
                )
            remove_outputs(run_dir, present)
        self.scheduler = scheduler
        self.run_dir = run_dir
        self.directory = str(run_dir)
        self._address = str(scheduler.address)
        self._tasks = scheduler.tasks
        self._t0 = now()
        fr = self.flush_rows
        self._sinks = {
            "scheduler_transition": SchedulerTransitionSink(
                run_dir / "scheduler_transition.csv", self._address, flush_rows=fr
            ),
            "graph": CsvSink(run_dir / "graph.csv", GRAPH, index=True, flush_rows=1),
            "worker": CsvSink(run_dir / "worker.csv", WORKER, index=True, flush_rows=fr),
            "client": CsvSink(run_dir / "client.csv", CLIENT, index=True, flush_rows=fr),
            "worker_loss": CsvSink(
                run_dir / "worker_loss.csv", WORKER_LOSS, index=True, flush_rows=1
            ),
        }
        for name, columns, wanted in (
            ("task_function", TASK_FUNCTION, self.functions),
            ("graph_submission", GRAPH_SUBMISSION, self.call_sites),
            ("task_argument", TASK_ARGUMENT, self.arguments),
            ("task_fused_op", TASK_FUSED_OP, self.fused_ops),
        ):
            if wanted:
                self._sinks[name] = CsvSink(
                    run_dir / f"{name}.csv", columns, index=True, flush_rows=fr
                )
        if self.memory_interval and self.memory_interval > 0:
            self._sinks["worker_memory"] = CsvSink(
                run_dir / "worker_memory.csv", WORKER_MEMORY, index=True, flush_rows=fr
            )
            self._sinks["span"] = CsvSink(run_dir / "span.csv", SPAN, index=True, flush_rows=fr)
        self._memory_seen: dict[str, tuple[Any, ...]] = {}
        self._spans_seen: set[str] = set()
        self._fused_groups: set[str] = set()
        self._code_handler = self._tap_submitted_code(scheduler) if self.call_sites else None
        self._transition_rows = self._sinks["scheduler_transition"].append
        self._workers: dict[str, dict[str, Any]] = {}
        self._losses: list[dict[str, Any]] = []
        text, sha = dask_config_snapshot()
        (run_dir / CONFIG_JSON).write_text(text, encoding="utf-8")
        self._config_sha = sha
        self._preexisting: dict[str, list[str]] = {"workers": [], "clients": []}
        # Components that joined before the capture started get an "add" row at capture start
        # (written by ``ready``, or by the first worker/client event or flush if it never comes).
        self._preexisting_written = False
        for client in sorted(scheduler.clients):
            if client != "fire-and-forget":
                self._preexisting["clients"].append(client)
        for address in sorted(scheduler.workers):
            self._preexisting["workers"].append(address)
            self._remember_worker(address, added=self._t0)
        scheduler.set_metadata(keys=[METADATA_KEY], value=self._metadata())
        if self.environment:
            from metaprov.capture.environment import Background

            # on a thread: listing the installed distributions stays off the start-up path
            self._env_job = Background(
                run_dir,
                "scheduler",
                anonymous=self.anonymous,
                process={"address": self._address},
                script=_runs_user_script(),
            )
        self._started = True
        self._write_run_json(status="recording")
        self._timer = None
        if self.flush_interval and self.flush_interval > 0:
            from tornado.ioloop import PeriodicCallback

            self._timer = PeriodicCallback(self.flush, self.flush_interval * 1000)
            self._timer.start()
        self._memory_timer = None
        if "worker_memory" in self._sinks:
            from tornado.ioloop import PeriodicCallback

            self._memory_timer = PeriodicCallback(self.sample, self.memory_interval * 1000)
            self._memory_timer.start()
        log.info("metaprov capture: recording into %s", run_dir)

    def ready(self) -> None:
        """Every plugin of the capture is in place: the capture starts now.

        :func:`metaprov.capture.record` calls this once the workers' plugin is registered, so
        the capture's own set-up (a round trip to every worker, each opening its files: 0.05 s
        to over 1 s, more on a loaded machine) is not counted in the run: the workers and clients
        present before the capture get their ``add`` rows, and ``metaprov-run.json`` its
        ``started``, at this moment. Without it (a preloaded scheduler) they keep the time the
        scheduler's plugin started."""
        self.await_ready = False
        if self._started and self._summary is None and not self._preexisting_written:
            self._t0 = now()
            self.scheduler.set_metadata(keys=[METADATA_KEY], value=self._metadata())
            self._write_preexisting()

    def _write_preexisting(self) -> None:
        """The ``add`` rows of the workers and clients present when the capture started."""
        if self._preexisting_written:
            return
        self._preexisting_written = True
        for client in self._preexisting["clients"]:
            self._sinks["client"].append((client, "add", self._t0))
        for address in self._preexisting["workers"]:
            self._sinks["worker"].append((address, "add", None, self._t0))
            self._workers.setdefault(address, {"address": address})["added"] = self._t0

    async def close(self) -> None:
        """Finalize when the scheduler shuts down (preload use)."""
        if self._started:
            await self.finalize()

    def flush(self) -> None:
        """Write the buffered rows of the scheduler's files, then ``metaprov-run.json`` with the
        rows written so far and the time (``updated``): a reader following the run sees the
        capture alive (``status: recording``) until it writes ``complete``."""
        if self._started and self._summary is None:
            if not self.await_ready:  # else ``ready`` writes them (or finalize, if it never came)
                self._write_preexisting()
            for sink in self._sinks.values():
                sink.flush()
            try:
                self._write_run_json(status="recording")
            except OSError:  # a full disk must not stop the scheduler; the rows are what count
                log.warning("metaprov capture: metaprov-run.json not updated", exc_info=True)

    async def finalize(self) -> dict[str, Any]:
        """Stop recording; make workers flush; merge their parts; write ``metaprov-run.json``.

        Returns:
            The summary also written to ``metaprov-run.json`` (rows per file, workers,
            incomplete parts). Calling it again returns the same summary.
        """
        if self._summary is not None:
            return self._summary
        if not self._started:
            raise UsageError("the capture was never started", hint="register the plugin first")
        if self._timer is not None:
            self._timer.stop()
        if self._memory_timer is not None:
            self._memory_timer.stop()
            self.sample()
        self._untap_submitted_code()
        self._write_preexisting()
        t_end = now()
        for sink in self._sinks.values():
            sink.close()
        await self._flush_workers()
        from metaprov.capture.merge import merge_parts

        merged = merge_parts(self.run_dir, scheduler_workers=self._workers)
        # a run that lost a worker, or a worker's records, is finished but not complete
        whole = not self._losses and not merged.get("incomplete_workers")
        self._summary = self._write_run_json(
            status="complete" if whole else "incomplete", stopped=t_end, merged=merged
        )
        if self._env_job is not None:
            self._env_job.join()
        if self.environment and not self.anonymous:
            await self._record_jobs()
        try:
            self.scheduler.set_metadata(
                keys=[METADATA_KEY], value={**self._metadata(), "stopped": t_end}
            )
        except Exception:
            pass
        log.info("metaprov capture: run written to %s", self.run_dir)
        return self._summary

    async def _record_jobs(self) -> None:
        """The batch system's view of the jobs the processes ran in (``batch-jobs.json``)."""
        from metaprov.capture.batch import record_jobs

        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.run_in_executor(None, record_jobs, self.run_dir), self.close_timeout + 60
            )
        except Exception:
            log.warning("metaprov capture: the batch jobs were not recorded", exc_info=True)

    async def _flush_workers(self) -> None:
        """Ask live workers whose part is still open to tear the capture plugin down."""
        from metaprov.capture.merge import read_part_infos

        live = set(self.scheduler.workers)
        open_parts = [
            i["worker"]
            for i in read_part_infos(self.run_dir / PARTS_DIR)
            if i.get("closed_time") is None
        ]
        targets = sorted(set(open_parts) & live)
        if not targets:
            return
        try:
            await asyncio.wait_for(
                self.scheduler.broadcast(
                    msg={"op": "plugin-remove", "name": self.name},
                    workers=targets,
                    on_error="return",
                ),
                self.close_timeout,
            )
        except Exception:
            log.warning(
                "metaprov capture: workers %s did not flush in time", targets, exc_info=True
            )

    def sample(self) -> None:
        """Write each worker's memory and status when they changed, and the new spans."""
        if not self._started or self._summary is not None:
            return
        try:
            self._sample_memory()
            self._sample_spans()
        except Exception:  # a sample must never stop the scheduler
            log.debug("metaprov capture: memory sample not recorded", exc_info=True)

    def _sample_memory(self) -> None:
        append = self._sinks["worker_memory"].append
        seen = self._memory_seen
        t = now()
        for address, ws in self.scheduler.workers.items():
            m = ws.memory
            status = getattr(ws.status, "name", None)
            row = (
                m.process,
                m.managed,
                m.unmanaged,
                m.unmanaged_old,
                m.spilled,
                ws.memory_limit,
                status,
            )
            if seen.get(address) != row:
                seen[address] = row
                append((address, *row, t))

    def _sample_spans(self) -> None:
        ext = getattr(self.scheduler, "extensions", {}).get("spans")
        spans = getattr(ext, "spans", None)
        if not spans or len(spans) == len(self._spans_seen):
            return
        append = self._sinks["span"].append
        t = now()
        for sid, span in list(spans.items()):
            if sid in self._spans_seen:
                continue
            self._spans_seen.add(sid)
            parent = getattr(span, "parent", None)
            name = json.dumps([str(tag) for tag in span.name], ensure_ascii=False)
            append((str(sid), name, None if parent is None else str(parent.id), t))

    # -- hooks -------------------------------------------------------------------------------

    def transition(
        self,
        key: Any,
        start: str,
        finish: str,
        *args: Any,
        stimulus_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Record one scheduler transition (called by Dask on every state change)."""
        if self._summary is not None:
            return
        if kwargs:  # an execution's details (one transition in five)
            self._detailed(key, start, finish, stimulus_id, kwargs)
            return
        # most transitions carry nothing but the states: seven cells (``scheduler_row``), all
        # text or numbers (a cell holding the task's state would keep every buffered row in
        # the garbage collector's sight); the task's own key object: Dask passes an equal one
        # decoded from a worker's message at ``processing -> memory`` (the key's text is cached
        # by identity, made at the flush)
        ts = self._tasks.get(key)
        if ts is None:
            self._transition_rows((key, None, None, start, finish, stimulus_id, now()))
        else:
            self._transition_rows(
                (ts.key, ts.prefix.name, ts.group.name, start, finish, stimulus_id, now())
            )

    def _detailed(
        self, key: Any, start: str, finish: str, stimulus_id: str | None, kwargs: dict[str, Any]
    ) -> None:
        ts = self._tasks.get(key)
        prefix = group = None
        if ts is not None:
            key = ts.key
            prefix, group = ts.prefix.name, ts.group.name
        thread, worker, nbytes = kwargs.get("thread"), kwargs.get("worker"), kwargs.get("nbytes")
        begins = ends = duration = None
        entry = compute_entry(kwargs.get("startstops"))
        if entry is not None:
            begins, ends = entry["start"], entry["stop"]
            duration = ends - begins
        # the key as Dask gave it: its text is made at the flush, in one batch
        self._transition_rows(
            (
                key,
                thread,
                worker,
                prefix,
                group,
                start,
                finish,
                stimulus_id,
                self._address,
                begins,
                ends,
                duration,
                nbytes,
                now(),
            )
        )

    def update_graph(
        self,
        scheduler: Any,
        *,
        client: str,
        keys: set[Any],
        tasks: list[Any],
        **kwargs: Any,
    ) -> None:
        """Record a submitted graph: wanted keys and the dependencies of every task in it."""
        if self._summary is not None:
            return
        graph = self._sinks["graph"].rows
        t = now()
        self._sinks["graph"].append((client, str(set(keys)), self._dependencies(tasks), t))
        try:
            if self.call_sites:
                site = call_site(_SUBMITTED_CODE.get())
                if site is not None:
                    self._sinks["graph_submission"].append((graph, client, *site, t))
            if self.functions or self.arguments or self.fused_ops:
                self._task_facts(graph, client, tasks, t)
        except Exception:  # the facts must never cost the run its core rows
            log.warning(
                "metaprov capture: task facts of graph %d not recorded", graph, exc_info=True
            )

    def _dependencies(self, tasks: list[Any]) -> str:
        """``str`` of ``{key: {dependency keys}}`` for the graph's tasks, each task's set made
        and dropped in turn: a large graph leaves no thousands of live sets behind for the
        garbage collector (whose full passes would then land in this hook)."""
        get = self._tasks.get
        if len(set(tasks)) != len(tasks):  # a key listed twice: as a dict keeps it
            tasks = list(dict.fromkeys(tasks))
        parts = []
        for key in tasks:
            ts = get(key)
            deps = set() if ts is None else {d.key for d in ts.dependencies}
            parts.append(f"{key!r}: {deps!r}")
        return "{" + ", ".join(parts) + "}"

    # -- task facts --------------------------------------------------------------------------

    def _task_facts(self, graph: int, client: str, tasks: list[Any], t: float) -> None:
        """Functions per task group (per key where a group mixes them), arguments, fused ops."""
        get = self._tasks.get
        labels: dict[Any, tuple[str, str, str, int]] = {}
        groups: dict[str, dict[tuple[str, str, str, int], list[Any]]] = {}
        prefix_of: dict[str, str] = {}
        arg_rows = self._sinks["task_argument"].append if self.arguments else None
        limit = self.argument_limit
        for key in tasks:
            ts = get(key)
            if ts is None:
                continue
            rs = ts.run_spec
            group = ts.group.name
            if self.functions:
                ident = _spec_identity(rs)
                label = labels.get(ident)
                if label is None:
                    label = labels[ident] = task_function(rs)
                per = groups.get(group)
                if per is None:
                    per = groups[group] = {}
                    prefix_of[group] = ts.prefix.name
                entry = per.get(label)
                if entry is None:
                    per[label] = [1, key]
                else:
                    entry[0] += 1
            if arg_rows is not None:
                skey = str(key)
                for row in literal_arguments(rs, limit):
                    arg_rows((skey, *row, t))
            if self.fused_ops and group not in self._fused_groups and is_fused(rs):
                self._fused_groups.add(group)
                fused = self._sinks["task_fused_op"].append
                for i, op in enumerate(fused_operations(rs)):
                    fused((group, i, *op, t))
        if not groups:
            return
        rows = self._sinks["task_function"].append
        mixed = set()
        for group, per in groups.items():
            for (module, qualname, kind, n_ops), (n, _) in per.items():
                rows(
                    (
                        graph,
                        client,
                        group,
                        prefix_of[group],
                        None,
                        module,
                        qualname,
                        kind,
                        n_ops,
                        n,
                        t,
                    )
                )
            if len(per) > 1:
                mixed.add(group)
        if mixed:  # which task runs which function, where tasks of one group differ
            for key in tasks:
                ts = get(key)
                if ts is not None and ts.group.name in mixed:
                    m, q, kind, n_ops = labels[_spec_identity(ts.run_spec)]
                    g = ts.group.name
                    rows((graph, client, g, prefix_of[g], str(key), m, q, kind, n_ops, 1, t))

    def _tap_submitted_code(self, scheduler: Any) -> Any:
        """Wrap the scheduler's ``update-graph`` handler so :meth:`update_graph` sees the code
        frames the client sent with that very graph (a context variable: exact even when
        several graphs are being received at once)."""
        handlers = getattr(scheduler, "stream_handlers", None)
        original = handlers.get("update-graph") if isinstance(handlers, dict) else None
        if original is None or getattr(original, "_metaprov_tap", False):
            return None

        async def update_graph(*args: Any, code: Any = (), **kwargs: Any) -> Any:
            token = _SUBMITTED_CODE.set(code)
            try:
                return await original(*args, code=code, **kwargs)
            finally:
                _SUBMITTED_CODE.reset(token)

        update_graph._metaprov_tap = True  # type: ignore[attr-defined]
        update_graph._metaprov_original = original  # type: ignore[attr-defined]
        handlers["update-graph"] = update_graph
        return update_graph

    def _untap_submitted_code(self) -> None:
        tap = getattr(self, "_code_handler", None)
        handlers = getattr(self.scheduler, "stream_handlers", None)
        if tap is not None and isinstance(handlers, dict) and handlers.get("update-graph") is tap:
            handlers["update-graph"] = tap._metaprov_original
        self._code_handler = None

    def add_worker(self, scheduler: Any, worker: str) -> None:
        """Record a worker joining."""
        if self._summary is not None:
            return
        self._write_preexisting()
        t = now()
        self._sinks["worker"].append((worker, "add", None, t))
        self._remember_worker(worker, added=t)

    def remove_worker(
        self, scheduler: Any, worker: str, *, stimulus_id: str | None = None, **kwargs: Any
    ) -> None:
        """Record a worker leaving: a ``worker.csv`` row, and in ``worker_loss.csv`` why and
        what it took along, from the ``remove-worker`` event Dask logged just before."""
        if self._summary is not None:
            return
        self._write_preexisting()
        t = now()
        self._sinks["worker"].append((worker, "remove", stimulus_id, t))
        self._workers.setdefault(worker, {"address": worker})["removed"] = t
        try:
            event = _removal_event(scheduler, worker, stimulus_id)
        except Exception:  # the record of a loss must never cost the scheduler
            log.warning("metaprov capture: removal of %s not detailed", worker, exc_info=True)
            event = {}
        lost = {
            name: len(event.get(f) or ())
            for name, f in (
                ("processing", "processing-tasks"),
                ("recomputed", "lost-computed-tasks"),
                ("lost_data", "lost-scattered-tasks"),
            )
        }
        if any(lost.values()) or (event.get("expected") is not True and _has_work(scheduler)):
            self._losses.append(
                {"worker": worker, "stimulus_id": stimulus_id, "expected": event.get("expected")}
                | lost
            )
        self._sinks["worker_loss"].append(
            (
                worker,
                stimulus_id,
                event.get("expected"),
                _key_list(event.get("processing-tasks")),
                _key_list(event.get("lost-computed-tasks")),
                _key_list(event.get("lost-scattered-tasks")),
                t,
            )
        )

    def add_client(self, scheduler: Any, client: str) -> None:
        """Record a client connecting."""
        if self._summary is None:
            self._write_preexisting()
            self._sinks["client"].append((client, "add", now()))

    def remove_client(self, scheduler: Any, client: str) -> None:
        """Record a client disconnecting."""
        if self._summary is None:
            self._write_preexisting()
            self._sinks["client"].append((client, "remove", now()))

    # -- info --------------------------------------------------------------------------------

    def _metadata(self) -> dict[str, Any]:
        """What workers read from the scheduler: the directory and the environment options."""
        return {
            "directory": str(self.run_dir),
            "started": self._t0,
            "environment": self.environment,
            "anonymous": self.anonymous,
        }

    def _remember_worker(self, address: str, *, added: float) -> None:
        ws = self.scheduler.workers.get(address)
        info: dict[str, Any] = {"address": address, "added": added}
        if ws is not None:
            pkgs = (getattr(ws, "versions", None) or {}).get("packages", {})
            info.update(
                name=None if ws.name is None else str(ws.name),
                pid=getattr(ws, "pid", None),
                nthreads=getattr(ws, "nthreads", None),
                memory_limit=getattr(ws, "memory_limit", None),
                local_directory=getattr(ws, "local_directory", None),
                nanny=getattr(ws, "nanny", None),
                python=pkgs.get("python"),
                dask=pkgs.get("dask"),
                distributed=pkgs.get("distributed"),
            )
        self._workers[address] = info

    def _write_run_json(
        self, *, status: str, stopped: float | None = None, merged: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        merged = merged or {}
        data: dict[str, Any] = {
            "layout": LAYOUT,
            "status": status,
            "directory": str(self.run_dir),
            "started": utc_stamp(self._t0),
            "started_epoch": self._t0,
            "stopped": None if stopped is None else utc_stamp(stopped),
            "stopped_epoch": stopped,
            "updated": utc_stamp(updated := now()),
            "updated_epoch": updated,
            "user": None if self.anonymous else _user(),
            # Versions of the scheduler's process; each worker's are in workers_info.csv.
            "versions": {**versions(), "platform": platform.platform()},
            "scheduler": {
                "address": self._address,
                "pid": os.getpid(),
                "hostname": None if self.anonymous else socket.gethostname(),
                **versions(),
                "config_sha256": self._config_sha,
            },
            "clock": {
                "scheduler_transition.csv": "scheduler (begins/ends: scheduler clock, as in Mofka)",
                "worker_transition.csv": "each worker's own clock",
                "worker_execution.csv": "each worker's own clock",
                "worker_transfer.csv": "start/stop shifted to the scheduler clock by Dask; time: worker clock",
                "worker_metric.csv": "each worker's own clock",
                "worker_memory.csv": "scheduler clock",
            },
            "preexisting": self._preexisting,
            "files": {
                **{f"{n}.csv": s.rows for n, s in self._sinks.items()},
                **merged.get("files", {}),
            },
            "workers": merged.get("workers", []),
            "incomplete_workers": merged.get("incomplete_workers", []),
            # workers removed unexpectedly or with work (running tasks, results held only
            # there): what each took along; ``status`` is ``incomplete`` when this is not empty
            "lost_workers": list(self._losses),
            "notes": merged.get("notes", []),
        }
        write_json_atomic(self.run_dir / RUN_JSON, data)
        return data


def _removal_event(scheduler: Any, worker: str, stimulus_id: str | None) -> dict[str, Any]:
    """Dask's ``remove-worker`` event for this removal (logged under the worker's topic by
    ``Scheduler.remove_worker`` before the plugins are called), or {} when there is none."""
    get_events = getattr(scheduler, "get_events", None)
    if get_events is None:
        return {}
    for _, msg in reversed(get_events(worker) or ()):
        if isinstance(msg, dict) and msg.get("action") == "remove-worker":
            if stimulus_id is None or msg.get("stimulus_id") in (None, stimulus_id):
                return msg
            break
    return {}


def _has_work(scheduler: Any) -> bool:
    """The run goes on: a worker is running tasks, or tasks wait for a worker (queued, or no
    worker can run them). A worker closed at the end of a run is not a loss."""
    try:
        workers = getattr(scheduler, "workers", {}) or {}
        return bool(
            any(getattr(ws, "processing", None) for ws in workers.values())
            or len(getattr(scheduler, "queued", ()) or ())
            or len(getattr(scheduler, "unrunnable", ()) or ())
        )
    except Exception:
        return False


def _key_list(keys: Any) -> str | None:
    """Keys as a JSON list of their text (sorted), or None when Dask did not say."""
    if keys is None:
        return None
    import json

    return json.dumps(sorted(str(k) for k in keys))


def _spec_identity(run_spec: Any) -> Any:
    """A cache key for :func:`task_function`: equal for tasks running the same callable.

    Valid within one ``update_graph`` call (the run specs, hence their ids, are alive).
    """
    func = getattr(run_spec, "func", None)
    if func is None:
        return type(run_spec)
    if is_fused(run_spec):
        try:
            inner = run_spec.args[0]
            out = inner[run_spec.args[1]]
            return ("fused", id(getattr(out, "func", out)), len(inner))
        except Exception:
            return ("fused",)
    inner = getattr(func, "func", None)
    if inner is not None and hasattr(func, "keywords"):  # functools.partial: one per task
        return ("partial", id(inner))
    return id(func)


def _runs_user_script() -> bool:
    """True when this scheduler runs inside the user's own script (a ``LocalCluster`` started by
    it, e.g. under ``metaprov capture script.py``), not under an installed entry point
    (``dask scheduler``): the script is then recorded with the scheduler's environment."""
    import sys

    main = sys.modules.get("__main__")
    file = getattr(main, "__file__", None)
    if not file:
        return False
    try:
        path = Path(file).resolve()
        return path.is_file() and not path.is_relative_to(Path(sys.prefix).resolve())
    except (OSError, ValueError):
        return False


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return None
