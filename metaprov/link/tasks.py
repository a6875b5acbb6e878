"""Stages 2 and 3 of the link, per mapped worker process: which thread, then which task.

Stage 2, :func:`task_thread_segments`: a segment on a thread that ran no task of the worker is
the process's own I/O; one without a thread id cannot be told apart. What is left is on a task
thread. Stage 3, :func:`link_task_segments`: those segments are narrowed to the executions of
their thread by every clock, in this order:

1. :func:`by_thread` sorts the segments and the worker's windows by (thread, start);
2. :func:`fit_offset` finds the offsets of Darshan's clock against the worker's clock that put
   the most segments inside a window of their own thread (:func:`~metaprov.link.clocks.estimate_offset`);
3. :func:`link_by_clocks` keeps, per segment, the executions every clock allows (worker windows,
   scheduler windows per delay epoch, the thread's order: :func:`~metaprov.link.assign.assign`);
4. :func:`link_outside_windows` decides what no window holds: within the tolerance of exactly one
   worker window, else the scheduler's clearly nearest window, else ``no-window``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from metaprov.link.assign import ORDER, SCHEDULER, WORKER, Assignment, Windows, assign
from metaprov.link.clocks import estimate_offset, expand
from metaprov.link.decisions import US, Decisions
from metaprov.link.windows import Executions, Segments


@dataclass(frozen=True)
class LinkParams:
    """The options of :func:`metaprov.link.link_io`, in seconds."""

    tolerance: float = 0.010
    scheduler_tolerance: float = 2.0
    offset_range: tuple[float, float] = (-0.02, 0.2)
    estimate_offsets: bool = True

    @property
    def tol_us(self) -> int:
        return int(round(self.tolerance * US))

    @property
    def stol_us(self) -> int:
        return int(round(self.scheduler_tolerance * US))


@dataclass
class ByThread:
    """One worker process's task-thread segments and execution windows, both sorted by
    (thread, start): each thread is one slice, and searchsorted gets sorted queries."""

    threads: np.ndarray  # the worker's task threads, sorted; a thread's group is its index
    seg: np.ndarray  # segment rows
    seg_group: np.ndarray
    ex: np.ndarray  # execution rows
    ex_group: np.ndarray
    worker_clock: np.ndarray  # per execution: a worker-clock window (else a scheduler one)


@dataclass
class Offset:
    """Darshan's clock against the worker's: the estimate and the range kept (µs)."""

    estimate: dict[str, Any]
    mid_us: int
    lo_us: int
    hi_us: int


def task_thread_segments(
    idx: np.ndarray, seg: Segments, task_threads: np.ndarray, d: Decisions
) -> np.ndarray:
    """Stage 2: the segments of a worker process (``idx``) that are on one of its task threads;
    the others are decided (the process's own I/O, or no thread id)."""
    hp = seg.has_pthread[idx]
    on = hp & np.isin(seg.pthread[idx], task_threads)
    d.decide(
        idx[hp & ~on],
        "process",
        "thread-ran-no-task",
        "thread ran no task: I/O of the worker process",
    )
    d.decide(
        idx[~hp],
        "unlinked",
        "no-thread-id",
        "no thread id recorded: cannot tell which task (or the process) issued it",
    )
    return idx[on]


def link_task_segments(
    sidx: np.ndarray,
    seg: Segments,
    ex: Executions,
    ex_w: np.ndarray,
    task_threads: np.ndarray,
    params: LinkParams,
    d: Decisions,
) -> tuple[Offset, str]:
    """Stage 3: link the task-thread segments ``sidx`` of one worker process to the worker's
    executions ``ex_w``. Returns the clock offset found and a note on the scheduler epochs."""
    bt = by_thread(sidx, seg, ex_w, ex, task_threads)
    off = fit_offset(bt, seg, ex, params)
    decided, sched_note = link_by_clocks(bt, seg, ex, off, d)
    link_outside_windows(bt, decided, seg, ex, off.mid_us, params, d)
    return off, sched_note


def by_thread(
    sidx: np.ndarray, seg: Segments, ex_w: np.ndarray, ex: Executions, task_threads: np.ndarray
) -> ByThread:
    sg = np.searchsorted(task_threads, seg.pthread[sidx])
    o = np.lexsort((seg.end[sidx], seg.start[sidx], sg))
    wk_group = np.searchsorted(task_threads, ex.thread[ex_w])
    order_w = np.lexsort((ex.end[ex_w], ex.start[ex_w], wk_group))
    ex_sorted = ex_w[order_w]
    return ByThread(
        threads=task_threads,
        seg=sidx[o],
        seg_group=sg[o],
        ex=ex_sorted,
        ex_group=wk_group[order_w],
        worker_clock=~ex.sched[ex_sorted],
    )


def fit_offset(bt: ByThread, seg: Segments, ex: Executions, params: LinkParams) -> Offset:
    """The offsets of Darshan's clock that fit the most segments into windows of their thread.

    Worker-clock windows give Darshan's lateness; without them the scheduler's windows give the
    (larger) scheduler-vs-process clock difference, searched over +-``scheduler_tolerance``.
    """
    est: dict[str, Any] = {"offset": None, "low": None, "high": None, "plateaus": []}
    is_wk = bt.worker_clock
    if not params.estimate_offsets:
        est["note"] = "offset estimation turned off"
    elif not len(bt.seg):
        est["note"] = "no task-thread segments"
    else:
        use = is_wk if is_wk.any() else ~is_wk
        rng = (
            params.offset_range
            if is_wk.any()
            else (-params.scheduler_tolerance, params.scheduler_tolerance)
        )
        wsel = bt.ex[use]
        est = estimate_offset(
            seg.start[bt.seg],
            seg.end[bt.seg],
            bt.seg_group,
            ex.start[wsel],
            ex.end[wsel],
            bt.ex_group[use],
            low=rng[0],
            high=rng[1],
        )
        if not is_wk.any():
            est["note"] = "scheduler-clock windows: " + est["note"]
    off_us = int(round((est["offset"] or 0.0) * US))
    if est.get("low") is not None:
        dlo, dhi = int(round(est["low"] * US)), int(round(est["high"] * US))
    else:
        dlo = dhi = off_us
    return Offset(estimate=est, mid_us=off_us, lo_us=dlo, hi_us=dhi)


def link_by_clocks(
    bt: ByThread, seg: Segments, ex: Executions, off: Offset, d: Decisions
) -> tuple[np.ndarray, str]:
    """Every clock at once: the worker windows (or, without them, the scheduler's), the scheduler
    windows per delay epoch, the thread order. Returns which segments it decided (linked or
    ambiguous) and a note on the scheduler epochs fitted."""
    sidx, is_wk = bt.seg, bt.worker_clock
    decided = np.zeros(len(sidx), bool)
    prim = bt.ex[is_wk] if is_wk.any() else bt.ex
    if not (len(sidx) and len(prim)):
        return decided, ""
    prim_group = bt.ex_group[is_wk] if is_wk.any() else bt.ex_group
    if is_wk.any():
        eps = ex.epoch[prim]
        uniq = np.unique(eps[eps >= 0])
        loc = np.where(eps >= 0, np.searchsorted(uniq, np.maximum(eps, 0)), -1)
        d_lo, d_hi = ex.epoch_lo[uniq], ex.epoch_hi[uniq]
    else:  # scheduler windows are the primary ones: no second scheduler stage
        loc = np.full(len(prim), -1, np.int64)
        uniq = d_lo = d_hi = np.zeros(0, np.int64)
    wins = Windows(
        group=prim_group,
        start=ex.start[prim],
        end=ex.end[prim],
        sched_start=ex.sched_begins[prim],
        sched_end=ex.sched_ends[prim],
        epoch=loc,
    )
    res = assign(
        bt.seg_group, seg.start[sidx], seg.end[sidx], wins, off.lo_us, off.hi_us, d_lo, d_hi
    )
    primary_clock = (
        np.where(ex.exact[prim], "worker-exact", "worker-hook")
        if is_wk.any()
        else np.full(len(prim), "scheduler", dtype=object)
    )
    half = (off.hi_us - off.lo_us) / 2 / US
    mid = (off.lo_us + off.hi_us) / 2 / US
    m = res.stage == WORKER
    w = res.window[m]
    rule = "worker-window" if is_wk.any() else "scheduler-window"
    d.link(sidx[m], prim[w], rule, primary_clock[w], mid, half)
    m = res.stage == SCHEDULER
    e_of = loc[res.window[m]]
    d.link(
        sidx[m],
        prim[res.window[m]],
        "scheduler-window",
        "scheduler",
        (res.sched_lo[e_of] + res.sched_hi[e_of]) / 2 / US,
        (res.sched_hi[e_of] - res.sched_lo[e_of]) / 2 / US,
    )
    m = res.stage == ORDER
    d.link(sidx[m], prim[res.window[m]], "thread-order", "thread-order", mid, half)
    amb = res.n_left > 1
    d.decide(
        sidx[amb],
        "ambiguous",
        "several-windows",
        "several tasks of this thread fit under every clock",
    )
    conf = (res.n_left == 0) & (res.n_worker > 0)
    d.decide(
        sidx[conf],
        "ambiguous",
        "clocks-disagree",
        "inside worker windows, but the scheduler windows and order leave none",
    )
    d.candidates(sidx[res.cand_seg], prim[res.cand_win])
    return (res.stage > 0) | amb | conf, _epochs_note(res, len(uniq))


def _epochs_note(res: Assignment, n_epochs: int) -> str:
    fitted = res.sched_fit > 0
    if fitted.any():
        return (
            f"; scheduler clock: {int(fitted.sum())} delay epoch(s) fitted, Darshan - "
            "scheduler = "
            + ", ".join(
                f"{lo_ / US:+.6f}..{hi_ / US:+.6f} s ({f} segments)"
                for lo_, hi_, f in zip(
                    res.sched_lo[fitted][:5],
                    res.sched_hi[fitted][:5],
                    res.sched_fit[fitted][:5],
                    strict=True,
                )
            )
            + (" ..." if fitted.sum() > 5 else "")
        )
    if n_epochs:
        return f"; scheduler clock: {n_epochs} delay epoch(s), none fitted"
    return ""


def link_outside_windows(
    bt: ByThread,
    decided: np.ndarray,
    seg: Segments,
    ex: Executions,
    off_us: int,
    params: LinkParams,
    d: Decisions,
) -> None:
    """What no window holds, thread by thread: within the tolerance of exactly one worker window
    (``worker-window-tolerance``), else the scheduler's clearly nearest window
    (``scheduler-nearest``), else ``no-window``."""
    n_threads = len(bt.threads)
    seg_b = np.searchsorted(bt.seg_group, np.arange(n_threads + 1))
    win_b = np.searchsorted(bt.ex_group, np.arange(n_threads + 1))
    for g in np.unique(bt.seg_group[~decided]):
        lo_i, hi_i = seg_b[g], seg_b[g + 1]
        gi = bt.seg[lo_i:hi_i][~decided[lo_i:hi_i]]
        wins_g = bt.ex[win_b[g] : win_b[g + 1]]
        wk = bt.worker_clock[win_b[g] : win_b[g + 1]]
        done = _near_worker_window(gi, wins_g[wk], seg, ex, off_us, params, d)
        done |= _nearest_scheduler_window(gi, done, wins_g[~wk], seg, ex, off_us, params, d)
        tol_ms = f"{params.tolerance * 1e3:g} ms"
        d.decide(
            gi[~done],
            "unlinked",
            "no-window",
            f"on a task thread but outside every task window (by more than {tol_ms}"
            + (
                f", or {params.scheduler_tolerance:g} s for scheduler windows)"
                if (~wk).any()
                else ")"
            ),
        )


def _near_worker_window(
    gi: np.ndarray,
    wsel: np.ndarray,
    seg: Segments,
    ex: Executions,
    off_us: int,
    params: LinkParams,
    d: Decisions,
) -> np.ndarray:
    """Segments ``gi`` of one thread within the tolerance of its worker windows ``wsel``: one
    window, linked; several, ambiguous. Returns which of ``gi`` it decided."""
    if not len(wsel):
        return np.zeros(len(gi), bool)
    ws, we = ex.start[wsel], ex.end[wsel]
    a, b = _near(
        seg.start[gi] - off_us, seg.end[gi] - off_us, ws, np.maximum.accumulate(we), params.tol_us
    )
    k = b - a
    one = k == 1
    tol_ms = f"{params.tolerance * 1e3:g} ms"
    d.link(
        gi[one],
        wsel[a[one]],
        "worker-window-tolerance",
        np.where(ex.exact[wsel[a[one]]], "worker-exact", "worker-hook"),
        off_us / US,
        params.tolerance,
        reason=f"outside the window by at most {tol_ms}",
    )
    many = k > 1
    d.decide(gi[many], "ambiguous", "several-windows", f"within {tol_ms} of several task windows")
    mseg, mwin = _pairs(np.flatnonzero(many), a[many], b[many])
    d.candidates(gi[mseg], wsel[mwin])
    return k >= 1


def _nearest_scheduler_window(
    gi: np.ndarray,
    done: np.ndarray,
    ssel: np.ndarray,
    seg: Segments,
    ex: Executions,
    off_us: int,
    params: LinkParams,
    d: Decisions,
) -> np.ndarray:
    """Segments ``gi`` not ``done``: the clearly nearest of the thread's scheduler windows
    ``ssel`` within ``scheduler_tolerance``. Returns which of ``gi`` it decided."""
    out = np.zeros(len(gi), bool)
    todo = np.flatnonzero(~done)
    if not (len(ssel) and len(todo)):
        return out
    ws, we = ex.start[ssel], ex.end[ssel]
    t0_, t1_ = seg.start[gi][todo] - off_us, seg.end[gi][todo] - off_us
    a, b = _near(t0_, t1_, ws, np.maximum.accumulate(we), params.stol_us)
    best, clear = _nearest(t0_, t1_, ws, we, a, b, params.tol_us)
    tg = gi[todo]
    okn = (best >= 0) & clear
    d.link(
        tg[okn],
        ssel[best[okn]],
        "scheduler-nearest",
        "scheduler",
        off_us / US,
        params.scheduler_tolerance,
    )
    amb = (best >= 0) & ~clear
    d.decide(
        tg[amb], "ambiguous", "several-windows", "several scheduler windows about equally near"
    )
    mseg, mwin = _pairs(np.flatnonzero(amb), a[amb], b[amb])
    d.candidates(tg[mseg], ssel[mwin])
    out[todo[best >= 0]] = True
    return out


def _pairs(rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, window) for every window in [a, b) of each row."""
    r, w = expand(a, b)
    return rows[r], w


def _near(
    ss: np.ndarray, se: np.ndarray, ws: np.ndarray, cmax: np.ndarray, tol: int
) -> tuple[np.ndarray, np.ndarray]:
    """Range [a, b) of windows within ``tol`` µs of each segment."""
    a = np.searchsorted(cmax, ss - tol, side="left")
    b = np.searchsorted(ws, se + tol, side="right")
    return a, np.maximum(a, b)


def _nearest(
    ss: np.ndarray,
    se: np.ndarray,
    ws: np.ndarray,
    we: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    sep: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The nearest window in [a, b) per segment, and whether it is clearly nearest (by ``sep``)."""
    counts = b - a
    n = len(ss)
    best = np.full(n, -1, np.int64)
    clear = np.zeros(n, bool)
    if counts.sum() == 0:
        return best, clear
    seg, win = expand(a, b)
    dist = np.maximum(np.maximum(ws[win] - se[seg], ss[seg] - we[win]), 0)
    order = np.lexsort((dist, seg))
    seg_o, win_o, dist_o = seg[order], win[order], dist[order]
    head = np.r_[True, seg_o[1:] != seg_o[:-1]]
    hi = np.flatnonzero(head)
    best[seg_o[hi]] = win_o[hi]
    second = hi + 1
    has2 = (second < len(seg_o)) & np.r_[~head[1:], False][hi]
    d1 = dist_o[hi]
    d2 = np.where(has2, dist_o[np.minimum(second, len(seg_o) - 1)], np.iinfo(np.int64).max)
    clear[seg_o[hi]] = (d2 - d1) > sep
    return best, clear
