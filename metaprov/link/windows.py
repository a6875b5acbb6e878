"""The link's inputs as arrays: the Darshan segments, and the task executions usable as windows.

:class:`Segments`: per segment its log (an index into ``darshan.logs``), thread id and times on
Darshan's clock (int64 µs), grouped by log once. :class:`Executions`: the executions that ran on a
known thread and worker, with their windows on the worker's clock (µs), their scheduler
``begins``/``ends`` and the scheduler-delay epoch each belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from metaprov.link.clocks import scheduler_epochs
from metaprov.records import RunRecords
from metaprov.timeutil import utc_to_us

SCHED_SLACK = 20  # µs around scheduler windows when finding delay epochs


@dataclass
class Segments:
    """Darshan segments as arrays (row ``i`` is ``darshan.segments`` row ``i``)."""

    log: np.ndarray  # index into the logs table
    has_pthread: np.ndarray
    pthread: np.ndarray  # uint64 (0 where missing)
    start: np.ndarray  # Darshan's clock, µs
    end: np.ndarray
    by_log: np.ndarray  # segment rows sorted by log
    log_bounds: np.ndarray  # log li spans by_log[log_bounds[li]:log_bounds[li + 1]]

    @property
    def n(self) -> int:
        return len(self.log)

    def of_log(self, li: int) -> np.ndarray:
        """The segment rows of log ``li``."""
        return self.by_log[self.log_bounds[li] : self.log_bounds[li + 1]]

    @classmethod
    def of(cls, segments: pd.DataFrame, logs: pd.DataFrame) -> Segments:
        n = len(segments)
        log_index = {name: i for i, name in enumerate(logs["log"].astype(str).tolist())}
        if n:
            codes, uniques = pd.factorize(segments["log"], sort=False)
            seg_log = np.array([log_index[str(u)] for u in uniques], dtype=np.int64)[codes]
        else:
            seg_log = np.zeros(0, np.int64)
        # segments grouped by log once: index arrays instead of full-length masks per process
        by_log = np.argsort(seg_log, kind="stable")
        return cls(
            log=seg_log,
            has_pthread=segments["pthread"].notna().to_numpy() if n else np.zeros(0, bool),
            pthread=(
                segments["pthread"].fillna(0).to_numpy(dtype=np.uint64)
                if n
                else np.zeros(0, np.uint64)
            ),
            start=utc_to_us(segments["start"]) if n else np.zeros(0, np.int64),
            end=utc_to_us(segments["end"]) if n else np.zeros(0, np.int64),
            by_log=by_log,
            log_bounds=np.searchsorted(seg_log[by_log], np.arange(len(logs) + 1)),
        )


@dataclass
class Executions:
    """The executions usable as windows: ran (have a start) on a known thread and worker."""

    table: pd.DataFrame  # those rows of records.executions, renumbered 0..
    start: np.ndarray  # worker clock, µs
    end: np.ndarray
    thread: np.ndarray  # uint64
    worker: np.ndarray  # address (str)
    sched: np.ndarray  # bool: the times come from the scheduler, not the worker
    exact: np.ndarray  # bool: exact compute window (the capture's), not hook times
    sched_begins: np.ndarray  # the scheduler's begins/ends, µs (NaT: none)
    sched_ends: np.ndarray
    epoch: np.ndarray  # scheduler-delay epoch (-1: not usable)
    epoch_lo: np.ndarray  # per epoch: the lowest and highest scheduler delay, µs
    epoch_hi: np.ndarray
    n_ran: int  # executions of the run that ran (before filtering)
    task_threads_known: int  # of those, how many have a thread
    by_worker: dict[str, np.ndarray]

    def of_worker(self, worker: str) -> np.ndarray:
        return np.asarray(self.by_worker.get(worker, np.zeros(0, np.int64)), dtype=np.int64)

    @classmethod
    def of(cls, records: RunRecords) -> Executions:
        ex = records.executions
        n_ran = int(ex["start"].notna().sum())
        task_threads_known = int((ex["thread"].notna() & ex["start"].notna()).sum())
        ex = ex[ex["thread"].notna() & ex["start"].notna() & ex["worker"].notna()].reset_index(
            drop=True
        )
        start = utc_to_us(ex["start"]) if len(ex) else np.zeros(0, np.int64)
        end_raw = ex["end"]
        end = np.where(end_raw.isna().to_numpy(), start, utc_to_us(end_raw.fillna(ex["start"])))
        worker = ex["worker"].astype(str).to_numpy()
        sched = (ex["time_source"].astype(str) == "scheduler").to_numpy()
        sb, se, epoch, ep_lo, ep_hi = scheduler_windows(records.tasks, ex, start, end, sched)
        return cls(
            table=ex,
            start=start,
            end=end,
            thread=ex["thread"].to_numpy(dtype=np.uint64) if len(ex) else np.zeros(0, np.uint64),
            worker=worker,
            sched=sched,
            exact=(
                (ex["window"].astype(str) == "exact").to_numpy()
                if "window" in ex
                else np.zeros(len(ex), bool)
            ),
            sched_begins=sb,
            sched_ends=se,
            epoch=epoch,
            epoch_lo=ep_lo,
            epoch_hi=ep_hi,
            n_ran=n_ran,
            task_threads_known=task_threads_known,
            by_worker=pd.Series(np.arange(len(ex))).groupby(worker, sort=False).indices,
        )


def scheduler_windows(
    tasks: pd.DataFrame,
    ex: pd.DataFrame,
    ex_start: np.ndarray,
    ex_end: np.ndarray,
    ex_sched: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each worker-clock execution's scheduler ``begins``/``ends`` (the scheduler reports them
    for a task's final attempt) and the scheduler-delay epochs of each worker.

    Returns (begins µs, ends µs, epoch per execution (-1: not usable), each epoch's lowest and
    highest delay µs).
    """
    n = len(ex)
    nat = np.iinfo(np.int64).min
    sb = np.full(n, nat, np.int64)
    se = np.full(n, nat, np.int64)
    if n and len(tasks) and tasks["sched_begins"].notna().any():
        tt = tasks[tasks["sched_begins"].notna() & tasks["sched_ends"].notna()]
        left = pd.DataFrame(
            {
                "key": ex["key"].astype(str).to_numpy(),
                "worker": ex["worker"].astype(str).to_numpy(),
                "attempt": ex["attempt"].astype("float64").to_numpy(),
                "pos": np.arange(n),
            }
        )
        right = pd.DataFrame(
            {
                "key": tt["key"].astype(str).to_numpy(),
                "worker": tt["worker"].astype(str).to_numpy(),
                "last": tt["n_executions"].astype("float64").to_numpy() - 1,
                "b": utc_to_us(tt["sched_begins"]),
                "e": utc_to_us(tt["sched_ends"]),
            }
        )
        m = left.merge(right, on=["key", "worker"])
        m = m[(m["attempt"] == m["last"]) | m["last"].isna()]
        pos = m["pos"].to_numpy()
        sb[pos] = m["b"].to_numpy()
        se[pos] = m["e"].to_numpy()
    use = (sb != nat) & ~ex_sched & (se >= sb)
    # the delays that put the scheduler window inside the worker window (a few µs of timer slack)
    lo = np.where(use, se - ex_end - SCHED_SLACK, 1)
    hi = np.where(use, sb - ex_start + SCHED_SLACK, 0)
    wcode = pd.factorize(ex["worker"].astype(str))[0] if n else np.zeros(0, np.int64)
    o = np.lexsort((ex_start, wcode))
    ep_o, ep_lo, ep_hi = scheduler_epochs(lo[o], hi[o], wcode[o])
    epoch = np.full(n, -1, np.int64)
    epoch[o] = ep_o
    return sb, se, epoch, ep_lo, ep_hi
