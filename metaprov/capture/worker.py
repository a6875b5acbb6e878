"""Worker side of the capture: a Dask ``WorkerPlugin`` writing this process's part files.

Input: the worker's task state transitions, its transfer logs and its task states.
Output, under ``<run>/metaprov-parts/`` (one set per worker, named by process id and a token),
each table a part file of Arrow chunks (:class:`metaprov.capture._files.PartSink`: rows kept as
Python values, written at each flush as typed columns, made CSV text once at the merge; read by
:mod:`metaprov.ingest.parts`):

- ``worker_transition.<part>.arrows`` — Mofka schema ``key,start,finish,called_from,time``.
  The ``ready->executing`` and ``executing->memory|error`` rows carry the *exact* compute start
  and stop of the task (worker clock), not the time the hook ran, so these rows give the true
  compute window;
- ``worker_transfer.<part>.arrows`` — every entry of the worker's incoming and outgoing
  transfer logs, written exactly once when Dask appends it (no polling, no re-sent duplicates);
- ``worker_execution.<part>.arrows`` — one row per execution attempt: thread id, compute
  window, outcome (closes the gap of failed-then-retried attempts, whose thread the scheduler
  never sees);
- ``worker_result.<part>.arrows`` — the task facts: each result's type and size, each error;
- ``worker_metric.<part>.arrows`` — Dask's fine performance metrics as the worker digests them:
  per execution for the ``execute`` context (thread CPU and non-CPU time, executor, other,
  memory reads, spill, ...), summed per flush interval for the other contexts (``gather-dep``,
  ``get-data``, ``memory-monitor``);
- ``worker_info.<part>.json`` — address, name, pid, host name, threads, memory limit, versions,
  hash of the effective Dask config; rewritten with ``closed`` at teardown.

The scheduler plugin (or :func:`metaprov.capture.merge_parts`) merges the parts into the single
files of the Mofka schema. Every hook runs on the worker's event-loop thread, and each worker
writes only its own files, so concurrent workers never share a file handle.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from metaprov.capture._files import (
    METADATA_KEY,
    PARTS_DIR,
    WORKER_EXECUTION,
    WORKER_METRIC,
    WORKER_RESULT,
    WORKER_TRANSFER,
    PartSink,
    TransitionPart,
    arrow_chunk,
    arrow_column,
    compute_entry,
    configured_directory,
    dask_config_snapshot,
    key_text,
    now,
    text_cell,
    versions,
    write_json_atomic,
)
from metaprov.capture.facts import (
    MESSAGE_CHARS,
    TRACEBACK_CHARS,
    exception_facts,
    json_text,
    qualified_type,
)

log = logging.getLogger("metaprov.capture")

# States in which a task's function may still be running on a worker thread.
_RUNNING = frozenset({"executing", "long-running", "cancelled", "resumed"})


class _TapDeque(deque):  # type: ignore[type-arg]
    """A ``deque`` that also hands every appended entry to a callback.

    Dask appends one dict per transfer to ``Worker.transfer_incoming_log`` /
    ``transfer_outgoing_log`` (bounded deques). Tapping ``append`` records each entry exactly
    once, even when more entries arrive between two hooks than the deque can hold.
    """

    def __init__(self, items: Any, maxlen: int | None, sink: Callable[[dict[str, Any]], None]):
        super().__init__(items, maxlen)
        self._sink = sink

    def append(self, item: Any) -> None:
        super().append(item)
        try:
            self._sink(item)
        except Exception:  # capture must never break a transfer
            log.debug("metaprov capture: transfer entry not recorded", exc_info=True)


class WorkerCapture(WorkerPlugin):
    """Record a worker's transitions, transfers and executions into the capture directory.

    Args:
        directory: the run directory. ``None``: ask the scheduler (where
            :class:`~metaprov.capture.SchedulerCapture` publishes it), then
            ``$METAPROV_CAPTURE_DIR`` / dask config ``metaprov.capture.directory``.
            It must be on a file system the worker can write and the scheduler can read.
        flush_rows: rows buffered per file before a batch is written.
        flush_interval: seconds between periodic flushes (bounds what a crash can lose).
        results: record each attempt's result type and size, or its exception type and message
            (``worker_result.csv``; a dictionary lookup per task).
        tracebacks: also record the traceback of erred attempts.
        metrics: record Dask's fine performance metrics (``worker_metric.csv``): per
            execution in the ``execute`` context, per flush interval in the others.

    Example:
        >>> client.register_plugin(WorkerCapture("runs/my-run"), name="metaprov-capture")  # doctest: +SKIP
    """

    idempotent = False
    name = "metaprov-capture"

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        flush_rows: int = 10_000,
        flush_interval: float = 2.0,
        results: bool = True,
        tracebacks: bool = False,
        metrics: bool = True,
        environment: bool | None = None,
        anonymous: bool | None = None,
    ) -> None:
        self.directory = None if directory is None else str(Path(directory).expanduser().absolute())
        self.environment = environment
        self.anonymous = anonymous
        self._env_job: Any = None
        self.flush_rows = flush_rows
        self.flush_interval = flush_interval
        self.results = results
        self.tracebacks = tracebacks
        self.metrics = metrics
        #: an execution's metrics are being finalised (its ``execute`` rows are its own)
        self._executing = False
        self._interval: dict[tuple[Any, ...], float] = {}
        self._interval_start = 0.0
        self._type_names: dict[type, str] = {}
        self._sinks: dict[str, PartSink] = {}
        self._pending: dict[Any, tuple[list[Any], float]] = {}
        self._closed = True

    # -- lifecycle ---------------------------------------------------------------------------

    async def setup(self, worker: Any) -> None:
        """Open this worker's part files and start recording (called by Dask)."""
        directory = self.directory
        meta = None
        if directory is None or self.environment is None:
            try:
                meta = await worker.scheduler.get_metadata(keys=[METADATA_KEY], default=None)
            except Exception:
                meta = None
        meta = meta if isinstance(meta, dict) else {}
        if directory is None:
            directory = meta.get("directory") or configured_directory()
        if directory is None:
            log.warning(
                "metaprov capture: no directory for worker %s (start the scheduler with "
                "SchedulerCapture or set $METAPROV_CAPTURE_DIR); nothing is recorded",
                worker.address,
            )
            return
        self.worker = worker
        self.run_dir = Path(directory)
        self.parts = self.run_dir / PARTS_DIR
        self.parts.mkdir(parents=True, exist_ok=True)
        # Several workers can share a process (processes=False) and a pid can be reused.
        self.part_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.address = str(worker.address)
        self._pending = {}
        # rows kept as Python values, written as typed columns at each flush (numbers stay
        # binary; the CSV text is made once, at the merge)
        self._sinks = {
            "worker_transition": TransitionPart(
                self._part("worker_transition"), self.address, flush_rows=self.flush_rows
            ),
            "worker_transfer": PartSink(
                self._part("worker_transfer"), WORKER_TRANSFER, flush_rows=self.flush_rows
            ),
            "worker_execution": PartSink(
                self._part("worker_execution"), WORKER_EXECUTION, flush_rows=self.flush_rows, key=0
            ),
        }
        if self.results:
            self._sinks["worker_result"] = PartSink(
                self._part("worker_result"), WORKER_RESULT, flush_rows=self.flush_rows, key=0
            )
        if self.metrics:
            self._sinks["worker_metric"] = MetricSink(
                self._part("worker_metric"), self.address, flush_rows=self.flush_rows
            )
        self._result_rows = self._sinks["worker_result"].append if self.results else None
        self._execution_append = self._sinks["worker_execution"].append
        self._transition_rows = self._sinks["worker_transition"].append
        # a plain transition's key, states and time go straight to the part's column buffers
        self._add_key, self._add_start, self._add_finish, self._add_time = self._sinks[
            "worker_transition"
        ].adders  # type: ignore[attr-defined]
        self._closed = False
        self._setup_time = now()
        self._tap_transfer_logs(worker)
        if self.metrics:
            self._tap_metrics(worker)
        self._write_info(closed=None)
        environment = (
            self.environment if self.environment is not None else meta.get("environment", True)
        )
        # anonymous: no host name in workers_info.csv either (as in the environment records)
        self.anonymous = bool(
            self.anonymous if self.anonymous is not None else meta.get("anonymous")
        )
        if environment:
            from metaprov.capture.environment import Background

            # on a thread: listing the installed distributions stays off the start-up path
            self._env_job = Background(
                self.run_dir,
                "worker",
                anonymous=self.anonymous,
                process={
                    "address": self.address,
                    "name": None if worker.name is None else str(worker.name),
                },
            )
        self._timer = None
        if self.flush_interval and self.flush_interval > 0:
            from tornado.ioloop import PeriodicCallback

            self._timer = PeriodicCallback(self.flush, self.flush_interval * 1000)
            self._timer.start()

    def teardown(self, worker: Any) -> None:
        """Write everything buffered, restore the worker's logs, mark this part closed."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.stop()
        t = now()
        # Executions still open (worker closing mid-task): keep what was observed.
        for row, _ in self._pending.values():
            self._transition_rows(tuple(row))
        self._pending.clear()
        if self.metrics:
            self._untap_metrics(worker)
            self._interval_rows(t)
        for sink in self._flush_order():
            sink.close()
        self._untap_transfer_logs(worker)
        if self._env_job is not None:
            self._env_job.join()
        self._write_info(closed=t)

    def flush(self) -> None:
        """Write the buffered rows of every part file (and the metrics of the interval)."""
        if self.metrics and not self._closed:
            self._interval_rows(now())
        for sink in self._flush_order():
            sink.flush()

    def _flush_order(self) -> list[PartSink]:
        """The sinks, transitions last: formatting a task's ``forgotten`` row drops its key's
        cached text, which its execution, transfer and metric rows of the interval still use."""
        sinks = self._sinks
        return [s for n, s in sinks.items() if n != "worker_transition"] + [
            sinks["worker_transition"]
        ]

    # -- hooks -------------------------------------------------------------------------------

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        """Record one worker-side transition (called by Dask on every state change)."""
        if self._closed:
            return
        t = now()
        if finish == "executing" and start not in _RUNNING:
            # Held back until the task leaves execution: then the row gets the true start.
            self._pending[key] = ([key, start, finish, self.address, t], self._delay())
            return
        if start in _RUNNING and finish not in _RUNNING:
            self._end_execution(key, start, finish, t)
            return
        # the key as Dask gave it (its text is made at the flush, in one batch), no tuple: four
        # appends to the part's columns (its size is looked at when an execution ends)
        self._add_key(key)
        self._add_start(start)
        self._add_finish(finish)
        self._add_time(t)

    def _delay(self) -> float:
        return float(getattr(self.worker, "scheduler_delay", 0.0) or 0.0)

    def _end_execution(self, key: Any, start: str, finish: str, t: float) -> None:
        pending = self._pending.pop(key, None)
        opened, d0 = (None, None) if pending is None else pending
        begin = stop = None
        thread = run_id = None
        state = self.worker.state
        ts = state.tasks.get(key)
        if ts is not None:
            run_id = getattr(ts, "run_id", None)
            thread = state.threads.get(key)
            # Dask appends {"action": "compute", start, stop} when the function returns, shifted
            # to the scheduler's clock by the worker's scheduler_delay *as it was when the task
            # started*. That estimate moves by 10-20 ms at heartbeats, so undo the shift with the
            # value seen at ready->executing (d0) unless only the current one (d1) puts the window
            # between the two hooks, where it must lie.
            entry = compute_entry(ts.startstops)
            if entry is not None:
                lo = -float("inf") if opened is None else opened[4]
                first, last = entry["start"], entry["stop"]
                d1 = self._delay()
                if d0 is not None and first - d0 >= lo - 1e-4 and last - d0 <= t + 1e-4:
                    begin, stop = first - d0, last - d0
                elif first - d1 >= lo - 1e-4 and last - d1 <= t + 1e-4:
                    begin, stop = first - d1, last - d1
                else:
                    d = d1 if d0 is None else d0
                    if opened is None or last - d >= lo - 0.001:
                        begin, stop = first - d, last - d
        if opened is not None:
            if begin is not None:
                opened[4] = begin
            self._transition_rows(tuple(opened))
        self._transition_rows((key, start, finish, self.address, t if stop is None else stop))
        if opened is not None or begin is not None:
            start_t = begin if begin is not None else (opened[4] if opened else None)
            self._execution_append(
                (
                    key,
                    self.address,
                    thread,
                    start_t,
                    stop if stop is not None else t,
                    finish,
                    run_id,
                    t,
                )
            )
            if self._result_rows is not None and ts is not None:
                if finish == "memory":
                    self._result(key, start_t, ts, t)
                elif finish == "error":
                    self._error(key, start_t, ts, t)

    def _result(self, key: Any, start: float | None, ts: Any, t: float) -> None:
        typ = getattr(ts, "type", None)
        name = self._type_names.get(typ)
        if name is None:
            name = self._type_names[typ] = "" if typ is None else qualified_type(typ)
        self._result_rows(  # type: ignore[misc]
            (
                key,  # its text made at the flush
                self.address,
                start,
                "memory",
                name,
                getattr(ts, "nbytes", None),
                None,
                None,
                None,
                t,
            )
        )

    def _error(self, key: Any, start: float | None, ts: Any, t: float) -> None:
        etype, message = exception_facts(
            getattr(ts, "exception", None), getattr(ts, "exception_text", "")
        )
        tb = (
            json_text(getattr(ts, "traceback_text", ""), TRACEBACK_CHARS)
            if self.tracebacks
            else None
        )
        self._result_rows(  # type: ignore[misc]
            (
                key,  # its text made at the flush
                self.address,
                start,
                "error",
                None,
                None,
                etype,
                json_text(message, MESSAGE_CHARS),
                tb,
                t,
            )
        )

    # -- transfers ---------------------------------------------------------------------------

    def _tap_transfer_logs(self, worker: Any) -> None:
        for attr, kind in (
            ("transfer_incoming_log", "incoming_transfer"),
            ("transfer_outgoing_log", "outgoing_transfer"),
        ):
            old = getattr(worker, attr, None)
            if old is None or isinstance(old, _TapDeque):
                continue
            setattr(worker, attr, _TapDeque(old, old.maxlen, self._transfer_sink(kind)))

    def _untap_transfer_logs(self, worker: Any) -> None:
        for attr in ("transfer_incoming_log", "transfer_outgoing_log"):
            cur = getattr(worker, attr, None)
            if isinstance(cur, _TapDeque):
                setattr(worker, attr, deque(cur, cur.maxlen))

    def _transfer_sink(self, kind: str) -> Callable[[dict[str, Any]], None]:
        append = self._sinks["worker_transfer"].append
        address = self.address

        def record(e: dict[str, Any]) -> None:
            if self._closed:
                return
            append(
                (
                    e.get("start"),
                    e.get("stop"),
                    e.get("middle"),
                    e.get("duration"),
                    str(e.get("keys")),
                    e.get("total"),
                    e.get("bandwidth"),
                    e.get("who"),
                    kind,
                    address,
                    now(),
                    e.get("compressed"),
                )
            )

        return record

    # -- fine performance metrics -------------------------------------------------------------

    def _tap_metrics(self, worker: Any) -> None:
        """Wrap the worker's ``digest_metric`` (every metric Dask digests passes through it)
        and ``_finalize_metrics`` (Dask's per-stimulus ledger: which execution the ``execute``
        metrics belong to), as instance attributes restored at teardown."""
        if "digest_metric" in vars(worker) or not hasattr(worker, "_finalize_metrics"):
            return  # another capture already wraps them, or a Dask without fine metrics
        digest = worker.digest_metric
        finalize = worker._finalize_metrics
        self._interval = {}
        self._interval_start = now()

        sink = self._sinks["worker_metric"]
        ids, name_id = sink._ids, sink._name_id  # type: ignore[attr-defined]
        names, values = sink._names.append, sink._values.append  # type: ignore[attr-defined]

        def digest_metric(name: Any, value: float) -> None:
            digest(name, value)
            if name.__class__ is not tuple or self._closed:
                return
            if self._executing and name[0] == "execute":
                # one row of the execution being finalised: its name's id and value, as numbers
                i = ids.get(name)
                names(name_id(name) if i is None else i)
                values(value)
            else:
                interval = self._interval
                interval[name] = interval.get(name, 0) + value

        def finalize_metrics(stim: Any, ledger: Any, *args: Any, **kwargs: Any) -> None:
            key = getattr(stim, "key", None)
            if key is None or self._closed:
                finalize(stim, ledger, *args, **kwargs)
                return
            # The ledger meters on its own clock (perf_counter): its start on the epoch clock.
            t = now()
            try:
                start = t - (ledger.func() - ledger.start)
            except Exception:
                start = None
            self._executing = True
            mark = sink.waiting  # type: ignore[attr-defined]
            try:
                finalize(stim, ledger, *args, **kwargs)
            finally:
                self._executing = False
                try:
                    self._execution_rows(key, start, mark)
                except Exception:  # the capture must never break the worker
                    log.debug("metaprov capture: metrics not recorded", exc_info=True)

        worker.digest_metric = digest_metric
        worker._finalize_metrics = finalize_metrics

    def _untap_metrics(self, worker: Any) -> None:
        for attr in ("digest_metric", "_finalize_metrics"):
            vars(worker).pop(attr, None)

    def _execution_rows(self, key: Any, start: Any, mark: int) -> None:
        """Close one execution: its metric rows are those digested since ``mark`` (kept as
        numbers by the wrapped ``digest_metric``, summed per name when Dask digests the same
        activity twice, e.g. two memory reads); :class:`MetricSink` formats them at the next
        flush, in one batch off the worker's hot path."""
        self._sinks["worker_metric"].close_execution(key, start, now(), mark)  # type: ignore[attr-defined]

    def _interval_rows(self, t: float) -> None:
        """The metrics digested outside executions since the previous flush, one row each."""
        interval, self._interval = self._interval, {}
        start, self._interval_start = self._interval_start, t
        append = self._sinks["worker_metric"].append
        # Dask digests on the event loop (as this runs); a copy all the same, should a metric
        # ever come from another thread
        for name, value in list(interval.items()):
            context, span, prefix, activity, unit = metric_fields(name)
            append((self.address, None, span, context, prefix, activity, unit, value, start, t, t))

    # -- info --------------------------------------------------------------------------------

    def _part(self, table: str) -> Path:
        return self.parts / f"{table}.{self.part_id}.arrows"

    def _write_info(self, *, closed: float | None) -> None:
        w = self.worker
        _, config_sha = dask_config_snapshot()
        memory_limit = getattr(getattr(w, "memory_manager", None), "memory_limit", None)
        nanny = getattr(w, "nanny", None)
        info = {
            "worker": self.address,
            "name": None if w.name is None else str(w.name),
            "pid": os.getpid(),
            "hostname": None if self.anonymous else socket.gethostname(),
            "nthreads": int(w.state.nthreads),
            "memory_limit": None if memory_limit is None else int(memory_limit),
            "local_directory": str(w.local_directory),
            "nanny": None if nanny is None else str(nanny),
            **versions(),
            "config_sha256": config_sha,
            "part": self.part_id,
            "setup_time": self._setup_time,
            "closed_time": closed,
            "rows": {name: sink.rows for name, sink in self._sinks.items()},
        }
        write_json_atomic(self.parts / f"worker_info.{self.part_id}.json", info)


class MetricSink(PartSink):
    """The ``worker_metric`` part file: execution metrics kept as numbers, written as columns.

    An execution's metrics wait in flat columns: per metric row, a small id of its Dask metric
    name and its value (appended by the wrapped ``digest_metric``); per execution, the key (as
    Dask gave it), start, time and number of rows. No container the garbage collector must
    visit, and the worker's event loop pays a few ``list.append``. :meth:`flush` (periodic, when
    ``flush_rows`` rows wait, at close) turns the waiting executions into one chunk of columns:
    each name's cells taken by id, each execution's cells repeated over its rows (in Arrow,
    not per row in Python), the values of a name digested twice in one execution summed from 0
    in their order. Rows given as values (the interval rows) come after the executions closed
    before them, in chunks of their own.
    """

    def __init__(self, path: Path, address: str, *, flush_rows: int = 10_000) -> None:
        super().__init__(path, WORKER_METRIC, flush_rows=flush_rows)
        self._address = address
        #: Dask metric name -> small id; per id, the name's ``span, context, prefix, activity,
        #: unit`` (text or None, made once per distinct name)
        self._ids: dict[tuple[Any, ...], int] = {}
        self._name_cells: list[tuple[str | None, ...]] = []
        # per waiting row: name id, value (lists kept: the digest wrapper holds their append)
        self._names: list[int] = []
        self._values: list[Any] = []
        # per waiting execution: key (as Dask gave it), start, time, rows
        self._keys: list[Any] = []
        self._starts: list[Any] = []
        self._times: list[float] = []
        self._counts: list[int] = []
        self._pending = 0
        #: chunks made, in order, not yet written
        self._chunks: list[list[Any]] = []

    @property
    def rows(self) -> int:
        """Rows appended so far (written or still waiting)."""
        return self._written + self._pending + len(self._rows)

    @property
    def waiting(self) -> int:
        """Metric rows appended so far and not yet formatted (a mark for :meth:`close_execution`)."""
        return len(self._names)

    def append(self, row: tuple[Any, ...]) -> None:
        """Buffer one row given as values (an interval row), after the executions waiting."""
        if self._keys:
            self._chunks.append(self._executions_chunk())
        super().append(row)

    def append_execution(
        self, key: Any, start: Any, t: float, metrics: dict[tuple[Any, ...], float]
    ) -> None:
        """One execution's metrics given at once (one row per name)."""
        mark = len(self._names)
        for name, value in metrics.items():
            self._names.append(self._name_id(name))
            self._values.append(value)
        self.close_execution(key, start, t, mark)

    def close_execution(self, key: Any, start: Any, t: float, mark: int) -> None:
        """The rows appended since ``mark`` are one execution's (key, start, time)."""
        n = len(self._names) - mark
        if n <= 0:
            return
        if self._rows:  # interval rows given before this execution closed come first
            rows, self._rows = self._rows, []
            self._chunks.append(self._chunk(rows))
        self._keys.append(key)  # as Dask gave it: its text is made at the flush
        self._starts.append(start)
        self._times.append(t)
        self._counts.append(n)
        self._pending += n
        if self._pending >= self._flush_rows:
            self.flush()

    def _name_id(self, name: tuple[Any, ...]) -> int:
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self._name_cells)
            self._name_cells.append(_name_cells(name))
        return i

    def flush(self) -> None:
        """Write the waiting executions and rows as chunks, flush the file to the OS."""
        with self._lock:
            if self._keys:
                self._chunks.append(self._executions_chunk())
            rows, self._rows = self._rows, []
            if rows:
                self._chunks.append(self._chunk(rows))
            chunks, self._chunks = self._chunks, []
            if self._fh.closed:
                return
            for chunk in chunks:
                self._write(chunk)
            self._fh.flush()

    def _executions_chunk(self) -> list[Any]:
        import numpy as np
        import pyarrow as pa

        keys, starts, times, counts = self._keys, self._starts, self._times, self._counts
        self._keys, self._starts, self._times, self._counts = [], [], [], []
        # the rows of closed executions (rows of one still open, if any, stay)
        total = sum(counts)
        names, values = self._names[:total], self._values[:total]
        del self._names[:total], self._values[:total]
        self._pending -= total
        texts = [k if k.__class__ is str else key_text(k) for k in keys]
        ids = np.array(names, dtype=np.int64)
        runs = np.repeat(np.arange(len(keys), dtype=np.int64), counts)
        width = max(len(self._name_cells), 1)
        pairs = runs * width + ids  # ascending by execution: sorted in one near-linear pass
        pairs.sort()
        if total > 1 and bool((pairs[1:] == pairs[:-1]).any()):
            ids, runs, values = _summed_executions(ids, runs, values, len(keys))
        bad: set[int] = set()
        for e, text in enumerate(texts):
            if text is None:  # a key without text: its rows only, never the worker
                log.warning("metaprov capture: the metrics of an execution not recorded")
                bad.update(np.flatnonzero(runs == e).tolist())
        take_runs = pa.array(runs)
        take_ids = pa.array(ids)
        cells = list(zip(*self._name_cells, strict=True))
        stamps = pa.array(times, pa.float64()).take(take_runs)
        names = ["worker", "key", "span", "context", "prefix", "activity", "unit"]
        arrays = [
            pa.array([self._address], pa.string()).take(pa.array(np.zeros(len(ids), np.int64))),
            pa.array(texts, pa.string()).take(take_runs),
            *(pa.array(c, pa.string()).take(take_ids) for c in cells),
        ]
        for suffix, array in _value_column(values, bad):
            names.append("value" + suffix)
            arrays.append(array)
        for suffix, array in arrow_column(starts, set()):
            names.append("start" + suffix)
            arrays.append(array.take(take_runs))
        names += ["stop", "time"]
        arrays += [stamps, stamps]
        self._written += len(ids) - len(bad)
        return arrow_chunk(arrays, names, bad)


def _value_column(values: list[Any], bad: set[int]) -> list[tuple[str, Any]]:
    """The metric values as Dask summed them from 0 (-0.0 as 0.0): binary when all are floats
    and ints (see :func:`arrow_column`), else the text the csv module writes of each (a value
    without text: its row in ``bad``, logged)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if set(map(type, values)) <= {float, int}:
        columns = arrow_column(values, bad)
        first = columns[0][1]
        if first.type == pa.float64():
            return [("", pc.add(first, 0.0)), *columns[1:]]
        if first.type == pa.int64():
            return columns
        # an int beyond 64 bits: as text, below
    texts: list[str | None] = []
    for i, value in enumerate(values):
        try:
            try:
                value = 0 + value
            except TypeError:
                pass
            texts.append(None if value is None else text_cell(value))
        except Exception:
            texts.append(None)
            bad.add(i)
            log.warning("metaprov capture: a metric row not recorded")
    return [("", pa.array(texts, pa.string()))]


def _summed_executions(
    ids: Any, runs: Any, values: list[Any], n: int
) -> tuple[Any, Any, list[Any]]:
    """Rows of executions where a name was digested twice, each name's values summed from 0 in
    their order (first appearance first); unsummed when they are not numbers."""
    import numpy as np

    out_ids: list[int] = []
    out_runs: list[int] = []
    out_values: list[Any] = []
    bounds = np.searchsorted(runs, np.arange(n + 1))
    for e in range(n):
        lo, hi = int(bounds[e]), int(bounds[e + 1])
        rows = _summed(zip(ids[lo:hi].tolist(), values[lo:hi], strict=True))
        for i, value in rows:
            out_ids.append(i)
            out_runs.append(e)
            out_values.append(value)
    return np.array(out_ids, np.int64), np.array(out_runs, np.int64), out_values


def _summed(rows: Any) -> Any:
    """``(name id, value)`` pairs with the values of each id summed from 0 in their order
    (first appearance first); unsummed when the values are not numbers."""
    rows = list(rows)
    summed: dict[int, Any] = {}
    try:
        for i, value in rows:
            summed[i] = summed.get(i, 0) + value
    except TypeError:
        return rows
    return list(summed.items())


def _name_cells(name: tuple[Any, ...]) -> tuple[str | None, str, str | None, str, str]:
    """The ``span,context,prefix,activity,unit`` cells of one of Dask's metric names."""
    context, span, prefix, activity, unit = metric_fields(name)
    return span, context, prefix, activity, unit


#: Metric contexts whose second element is a span id (``distributed.spans``).
_SPAN_CONTEXTS = frozenset({"execute", "p2p"})


def metric_fields(name: tuple[Any, ...]) -> tuple[str, str | None, str | None, str, str]:
    """``(context, span, prefix, activity, unit)`` of one of Dask's metric names.

    Dask names a fine performance metric ``(context, [span id,] [prefix,] *label, unit)``:
    ``("execute", span, prefix, "thread-cpu", "seconds")``, ``("gather-dep", "network",
    "seconds")``, ``("memory-monitor", "disk-write", "bytes")``. A label of several parts (also
    one passed as a tuple inside the name) is kept with its parts joined by ``/``.

    >>> metric_fields(("execute", "s1", "inc", "thread-cpu", "seconds"))
    ('execute', 's1', 'inc', 'thread-cpu', 'seconds')
    >>> metric_fields(("gather-dep", "network", "seconds"))
    ('gather-dep', None, None, 'network', 'seconds')
    """
    context = str(name[0])
    unit = str(name[-1]) if len(name) > 1 else ""
    rest = name[1:-1]
    span = prefix = None
    if context in _SPAN_CONTEXTS and rest:
        span = None if rest[0] is None else str(rest[0])
        rest = rest[1:]
    if context == "execute" and rest:
        prefix = str(rest[0])
        rest = rest[1:]
    parts: list[str] = []
    for part in rest:  # a label Dask passed as a tuple inside the name: its parts
        parts.extend(map(str, part) if isinstance(part, tuple) else (str(part),))
    return context, span, prefix, "/".join(parts), unit
