"""Darshan I/O <-> task executions: every clock of the run, one decision per segment.

Input: :class:`~metaprov.records.RunRecords` with ``darshan`` (from
:func:`metaprov.ingest.darshan.read_darshan_logs`) and the ``executions`` / ``tasks`` tables.
Output: ``records.io``, a :class:`LinkedIO` holding ``segments`` (one row per Darshan segment,
schema ``darshan_links``: the task execution it belongs to, or the process, or why neither, with
the rule, the clock that decided and its fitted offset), ``processes`` (schema
``darshan_processes``: role, worker address, clock offsets, counts) and ``accounting``.

:func:`link_io` narrows each segment down in three stages (details and measurements in
``docs/darshan.md``):

1. **Process** (:mod:`.processes`): each log is a process, its role from the command line; each
   worker takes the log in which its tasks' thread ids appear (majority vote over its
   executions). Segments of the other logs are decided: outside the run (``unlinked``), a
   process that runs no task, or a worker process none of whose threads ran a recorded task
   (``process``).
2. **Thread** (:func:`.tasks.task_thread_segments`): in a worker's process, a segment on a
   thread that ran no task is the process's own I/O (``process``); one without a thread id is
   ``unlinked``.
3. **Task** (:func:`.tasks.link_task_segments`): a task-thread segment keeps the executions of
   its thread that every clock allows: the worker windows at the offsets of Darshan's clock
   that fit best (:func:`~metaprov.link.clocks.estimate_offset`), the scheduler's
   ``begins``/``ends`` fitted per delay epoch, the order of tasks on the thread
   (:func:`~metaprov.link.assign.assign`). One left: linked, with the clock that decided;
   several: ambiguous, with its candidates; none: ambiguous (the clocks disagree), or, when no
   window holds it, the tolerance rules, else ``unlinked``.

The inputs as arrays are in :mod:`.windows`, the decisions and the output tables in
:mod:`.decisions`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from metaprov.link.clocks import estimate_offset
from metaprov.link.decisions import (
    STATUSES,
    US,
    Decisions,
    accounting,
    links_table,
    processes_table,
)
from metaprov.link.processes import WorkerLogs, decide_other_logs, map_workers
from metaprov.link.tasks import LinkParams, link_task_segments, task_thread_segments
from metaprov.link.windows import Executions, Segments
from metaprov.records import REPORTED, RunRecords, empty_table

log = logging.getLogger("metaprov")

__all__ = ["LinkedIO", "link_io", "estimate_offset", "STATUSES", "RULES", "CLOCKS"]

# rule -> what it means (docs/darshan.md repeats this table)
RULES: dict[str, str] = {
    "worker-window": "the only task whose worker-clock window on the same thread holds the "
    "segment at every Darshan clock offset the data allow",
    "scheduler-window": "several worker windows hold it; the scheduler's begins/ends (the "
    "compute interval on the thread), fitted per scheduler-delay epoch, leave one task",
    "thread-order": "several tasks are left; the order of the thread's tasks and of its calls "
    "(decided calls before and after it) leaves one",
    "worker-window-tolerance": "outside every window but within the tolerance (10 ms) of "
    "exactly one window on the same thread",
    "scheduler-nearest": "no worker windows: the nearest scheduler begins/ends window on the "
    "same thread, within 2 s, clearly nearer than any other",
    "thread-ran-no-task": "the thread ran no task of this worker: I/O of the worker process itself",
    "process-role": "the process runs no tasks (launcher, nanny, resource tracker, ...)",
    "unmapped-process": "no worker's task threads appear in this log: I/O of the process",
    "no-thread-id": "the segment carries no thread id (32-byte DXT layout or missing text)",
    "outside-run": "the log belongs to a program outside the run",
    "no-task-threads": "the run records no thread id of any task: no task can be told apart",
    "no-window": "on a task thread, but outside every task window",
    "several-windows": "more than one task is left after every clock and the thread order",
    "clocks-disagree": "the worker windows hold it, but the scheduler windows and the thread "
    "order leave no task",
}

# clock -> what it is (the ``clock`` column of a link)
CLOCKS: dict[str, str] = {
    "worker-hook": "the worker's transition-hook times (ready->executing .. executing->memory), "
    "on the worker's clock: they bracket the function",
    "worker-exact": "the capture's exact compute windows (worker_execution.csv), worker clock",
    "scheduler": "the scheduler's begins/ends: the compute interval measured on the task's "
    "thread, shifted by the worker's scheduler delay (fitted per delay epoch)",
    "thread-order": "the order of tasks on the thread and of the thread's calls",
}


@dataclass
class LinkedIO:
    """Darshan I/O linked to task executions (see :func:`link_io`).

    Attributes:
        segments: one row per ``records.darshan.segments`` row, same order (``segment`` is that
            row number); schema ``darshan_links``.
        processes: one row per log; schema ``darshan_processes``.
        accounting: counts: segments, by status, by rule, by reason, task-thread segments.
    """

    segments: pd.DataFrame = field(default_factory=lambda: empty_table("darshan_links"))
    processes: pd.DataFrame = field(default_factory=lambda: empty_table("darshan_processes"))
    accounting: dict[str, Any] = field(default_factory=dict)


def link_io(
    records: RunRecords,
    *,
    tolerance: float = 0.010,
    scheduler_tolerance: float = 2.0,
    offset_range: tuple[float, float] = (-0.02, 0.2),
    estimate_offsets: bool = True,
) -> RunRecords:
    """Link every Darshan segment to the task execution that issued it, or say why not.

    Args:
        records: a run read with Darshan logs (``records.darshan`` set).
        tolerance: slack around worker-clock windows, seconds (10 ms: the window edges are
            recorded just before/after the function runs, plus timer noise).
        scheduler_tolerance: how far the nearest scheduler-clock window may be (the scheduler's
            begins/ends can be 0.4-2 s off the worker's clock, or be a transfer interval).
        offset_range: clock offsets considered for each process, seconds (Darshan is late by
            up to tens of ms; a little negative slack absorbs timer noise).
        estimate_offsets: estimate each process's offset; False applies none.

    Returns:
        ``records`` with ``records.io`` set to a :class:`LinkedIO`.

    Example:
        >>> records = metaprov.read_run("runs/R1")                # doctest: +SKIP
        >>> metaprov.link_io(records).io.accounting["by_status"]  # doctest: +SKIP
        {'linked': 3125, 'process': 2074, 'ambiguous': 0, 'unlinked': 0}
    """
    dr = records.darshan
    if dr is None:
        records.io = LinkedIO(accounting=accounting(empty_table("darshan_links"), 0))
        return records
    params = LinkParams(tolerance, scheduler_tolerance, offset_range, estimate_offsets)
    logs = dr.logs
    seg = Segments.of(dr.segments, logs)
    ex = Executions.of(records)
    d = Decisions(seg.n)

    # 1. which process is which
    mapped = map_workers(seg, logs, ex, records.workers)
    decide_other_logs(seg, logs, mapped.worker_of_log, ex, d)
    proc_rows: dict[int, dict[str, Any]] = {}
    for li in sorted(mapped.worker_of_log):
        w = mapped.worker_of_log[li]
        idx = seg.of_log(li)
        ex_w = ex.of_worker(w)
        task_threads = np.unique(ex.thread[ex_w])
        # 2. which thread
        sidx = task_thread_segments(idx, seg, task_threads, d)
        # 3. which task
        off, sched_note = link_task_segments(sidx, seg, ex, ex_w, task_threads, params, d)
        d.shift[idx] = off.mid_us / US
        proc_rows[li] = {
            "worker": w,
            "votes": mapped.votes_of_log.get(li, 0),
            "clock_offset": off.estimate.get("offset"),
            "offset_low": off.estimate.get("low"),
            "offset_high": off.estimate.get("high"),
            "offset_note": off.estimate.get("note", "") + sched_note,
        }

    notes = mapped.notes + _undecidable(seg, logs, ex)
    # every segment must have been decided; anything left is a bug, reported not hidden
    undecided = d.undecided()
    if undecided.any():  # pragma: no cover - defensive
        d.decide(undecided, "unlinked", "no-window", "not decided (internal): please report")
    records.io = _linked_io(records, seg, ex, d, mapped, proc_rows, notes)
    return records


def _undecidable(seg: Segments, logs: pd.DataFrame, ex: Executions) -> list[str]:
    """What this run's data cannot decide at all, said once (and logged)."""
    roles = logs["role"].astype(str).to_numpy()
    wk_log = np.isin(seg.log, [li for li in range(len(logs)) if roles[li] == "worker"])
    no_id = int((wk_log & ~seg.has_pthread).sum()) if seg.n else 0
    undecidable: list[str] = []
    if no_id:
        layouts = (
            sorted({int(x) for x in logs["layout"].dropna().tolist()}) if "layout" in logs else []
        )
        undecidable.append(
            f"{no_id} segment(s) of worker processes carry no thread id"
            + (f" (DXT layout {'/'.join(map(str, layouts))} bytes)" if layouts else "")
            + ": no clock can tell which task issued them; they are unlinked. Record with a "
            "Darshan that keeps pthread ids (40- or 96-byte DXT segments) to link them."
        )
    if seg.n and ex.task_threads_known == 0 and ex.n_ran:
        undecidable.append(
            "the run records no thread id for any task (no scheduler 'thread' column): the I/O "
            "of worker processes cannot be linked to tasks; it is unlinked (rule no-task-threads)"
        )
    for text in undecidable:
        log.warning("Darshan I/O: %s", text)
    return undecidable


def _linked_io(
    records: RunRecords,
    seg: Segments,
    ex: Executions,
    d: Decisions,
    mapped: WorkerLogs,
    proc_rows: dict[int, dict[str, Any]],
    notes: list[str],
) -> LinkedIO:
    """The decisions as tables, their counts, and the notes in the run's accounting."""
    logs = records.darshan.logs
    worker_col = np.full(len(logs), None, dtype=object)
    for li, w in mapped.worker_of_log.items():
        worker_col[li] = w
    links = links_table(
        records.darshan.segments,
        seg.log,
        seg.start,
        seg.end,
        logs,
        worker_col,
        ex.table,
        d,
        notes=notes,
    )
    procs = processes_table(logs, seg.log, d.status, proc_rows, worker_col)
    acct = accounting(links, len(logs))
    acct["notes"] = notes
    for text in notes:
        records.accounting.note(f"Darshan link: {text}")
    bs = acct["by_status"]
    records.accounting.note(
        f"Darshan link: {seg.n} segment(s): {bs['linked']} linked to tasks, {bs['process']} to "
        f"processes, {bs['ambiguous']} ambiguous, {bs['unlinked']} unlinked"
    )
    if bs["ambiguous"] or bs["unlinked"]:
        log.warning(
            "Darshan I/O: %d ambiguous and %d unlinked segment(s); see `metaprov inspect`",
            bs["ambiguous"],
            bs["unlinked"],
            extra=REPORTED,
        )
    return LinkedIO(segments=links, processes=procs, accounting=acct)
