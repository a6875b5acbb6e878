"""Assign the task-thread segments of one worker process to its task executions.

Input: the process's task-thread segments (raw Darshan times, integer µs, sorted by thread
then start), its execution windows on the worker's clock (sorted by thread, then start) with
each execution's scheduler window and scheduler-delay epoch, and the range of Darshan clock
offsets the worker windows allow.
Output: per segment the execution it belongs to, the stage (clock) that decided it, or its
candidates when nothing decides.

Every stage only *removes* executions that cannot have issued a segment, so a segment is
linked only when exactly one execution is left under every offset the data allow:

1. **worker clock** (same clock as Darshan, one offset per process): executions whose window
   holds the segment for some offset in ``[dlo, dhi]``;
2. **scheduler clock** (``begins``/``ends``: the compute interval measured around the function
   on the worker's thread, shifted by the worker's scheduler delay): per delay epoch, the
   Darshan-vs-scheduler offset is fitted to the segments (exact sweep); executions whose
   scheduler window cannot hold the segment go; when one window holds it at every fitted
   offset, the thread ran that task at that moment, so executions without a usable scheduler
   window go too;
3. **order**: a thread runs its tasks one after another and Darshan keeps the order of its
   calls, so the executions of a thread's segments never go backwards: a segment's candidates
   are bounded by the executions of the decided segments before and after it (repeated until
   nothing changes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metaprov.link.clocks import expand, feasible, merge_per_row, pair_ranges, sweep_blocks

# stage that decided a segment
WORKER, SCHEDULER, ORDER = 1, 2, 3

_BIG = np.iinfo(np.int64).max


@dataclass
class Windows:
    """One worker process's execution windows, sorted by (group, start)."""

    group: np.ndarray  # thread group 0..T-1
    start: np.ndarray  # worker clock, µs
    end: np.ndarray
    sched_start: np.ndarray  # scheduler clock, µs; used where epoch >= 0
    sched_end: np.ndarray
    epoch: np.ndarray  # scheduler-delay epoch 0..E-1 (-1: no usable scheduler window)


@dataclass
class Assignment:
    """Result of :func:`assign` (per segment unless said otherwise)."""

    window: np.ndarray  # the execution window (index into Windows), -1: none
    stage: np.ndarray  # WORKER / SCHEDULER / ORDER, 0: not linked
    n_left: np.ndarray  # executions left (> 1: ambiguous; 0 with n_worker > 0: conflict)
    n_worker: np.ndarray  # executions whose worker window holds the segment
    cand_seg: np.ndarray  # candidate pairs of the segments not linked (left, or the worker
    cand_win: np.ndarray  # clock's when nothing is left)
    sched_lo: np.ndarray  # per epoch: Darshan-vs-scheduler offsets that fit (µs), hi < lo: none
    sched_hi: np.ndarray
    sched_fit: np.ndarray  # per epoch: segments that fit


def assign(
    seg_group: np.ndarray,
    seg_start: np.ndarray,
    seg_end: np.ndarray,
    win: Windows,
    dlo: np.ndarray,
    dhi: np.ndarray,
    delay_lo: np.ndarray,
    delay_hi: np.ndarray,
    *,
    tol: int = 0,
    sched_tol: int = 5,
) -> Assignment:
    """Segments -> execution windows of one process (see the module docstring).

    Args:
        seg_group, seg_start, seg_end: task-thread segments, sorted by (group, start), µs.
        win: the process's windows.
        dlo, dhi: the ranges of Darshan-vs-worker clock offsets consistent with the data (µs;
            usually one range; several when one offset does not explain every segment).
        delay_lo, delay_hi: per scheduler epoch, the scheduler delays the worker windows allow.
        tol: slack around worker windows (µs; they bracket the function).
        sched_tol: slack around scheduler windows (µs; timer granularity).
    """
    n = len(seg_start)
    dlo = np.atleast_1d(np.asarray(dlo, np.int64))
    dhi = np.atleast_1d(np.asarray(dhi, np.int64))
    ax = _axis(seg_group, seg_start, seg_end, win, dlo, dhi)
    # 1. worker clock
    pseg, pwin = _by_worker_clock(ax, dlo, dhi, tol)
    n_worker = np.bincount(pseg, minlength=n)
    stage = np.where(n_worker == 1, WORKER, 0)
    worker_seg, worker_win = pseg, pwin
    # 2. scheduler clock, per delay epoch
    ne = len(delay_lo)
    sched_lo = np.zeros(ne, np.int64)
    sched_hi = np.full(ne, -1, np.int64)
    sched_fit = np.zeros(ne, np.int64)
    if ne and (win.epoch >= 0).any() and n:
        elo = int(dlo.min()) - delay_hi - sched_tol  # e = d - delay
        ehi = int(dhi.max()) - delay_lo + sched_tol
        fitted = _fit_scheduler_epochs(ax, win, elo, ehi)
        if fitted is not None:
            sched_fit, sched_lo, sched_hi = fitted
        pseg, pwin = _by_scheduler_clock(
            ax, win, pseg, pwin, sched_lo, sched_hi, sched_fit, sched_tol
        )
        stage = np.where((stage == 0) & (np.bincount(pseg, minlength=n) == 1), SCHEDULER, stage)
    # 3. order of tasks on a thread and of calls within it
    pseg, pwin, stage = _by_order(pseg, pwin, n, stage)

    left = np.bincount(pseg, minlength=n)
    window = np.full(n, -1, np.int64)
    one = left == 1
    window[one] = pwin[(np.cumsum(left) - left)[one]]
    stage = np.where(one, stage, 0)
    amb = left[pseg] > 1
    gone = (left == 0)[worker_seg]
    return Assignment(
        window=window,
        stage=stage,
        n_left=left,
        n_worker=n_worker,
        cand_seg=np.r_[pseg[amb], worker_seg[gone]],
        cand_win=np.r_[pwin[amb], worker_win[gone]],
        sched_lo=sched_lo,
        sched_hi=sched_hi,
        sched_fit=sched_fit,
    )


@dataclass
class _Axis:
    """Every thread on one time axis, far apart (one searchsorted serves them all): segment and
    worker-window times shifted by ``t0`` plus ``group * span``."""

    t0: np.int64
    wg: np.ndarray  # per window: its group's shift
    gs: np.ndarray  # segments
    ge: np.ndarray
    ws: np.ndarray  # worker windows
    we: np.ndarray
    cm: np.ndarray  # running maximum of we


def _axis(
    seg_group: np.ndarray,
    seg_start: np.ndarray,
    seg_end: np.ndarray,
    win: Windows,
    dlo: np.ndarray,
    dhi: np.ndarray,
) -> _Axis:
    n, nw = len(seg_start), len(win.start)
    lo_t = min(int(seg_start.min()) if n else 0, int(win.start.min()) if nw else 0)
    hi_t = max(int(seg_end.max()) if n else 0, int(win.end.max()) if nw else 0)
    if nw and (win.epoch >= 0).any():
        s_ok = win.epoch >= 0
        lo_t = min(lo_t, int(win.sched_start[s_ok].min()))
        hi_t = max(hi_t, int(win.sched_end[s_ok].max()))
    span = np.int64(hi_t - lo_t + 4 * int(np.abs(np.r_[dlo, dhi]).max()) + 100_000_000)
    t0 = np.int64(lo_t)
    sg = seg_group.astype(np.int64) * span
    wg = win.group.astype(np.int64) * span
    we = win.end - t0 + wg
    return _Axis(
        t0=t0,
        wg=wg,
        gs=seg_start - t0 + sg,
        ge=seg_end - t0 + sg,
        ws=win.start - t0 + wg,
        we=we,
        cm=np.maximum.accumulate(we) if nw else we,
    )


def _by_worker_clock(
    ax: _Axis, dlo: np.ndarray, dhi: np.ndarray, tol: int
) -> tuple[np.ndarray, np.ndarray]:
    """(segment, window) pairs whose worker window holds the segment for some offset in one of
    the ranges ``[dlo, dhi]``."""
    a, b = pair_ranges(ax.gs, ax.ge, ax.ws, ax.cm, int(dlo.min()) - tol, int(dhi.max()) + tol)
    pseg, pwin = expand(a, b)
    ok = np.zeros(len(pseg), bool)
    for r_lo, r_hi in zip(dlo.tolist(), dhi.tolist(), strict=True):
        ok |= feasible(ax.gs[pseg], ax.ge[pseg], ax.ws[pwin], ax.we[pwin], r_lo, r_hi, tol)[2]
    return pseg[ok], pwin[ok]


def _fit_scheduler_epochs(
    ax: _Axis, win: Windows, elo: np.ndarray, ehi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per delay epoch, the Darshan-vs-scheduler offsets (within ``[elo, ehi]``) that put the
    most segments inside scheduler windows (exact sweep, all epochs at once): (segments fitted,
    lowest, highest offset), or None when no segment fits any."""
    si = np.flatnonzero(win.epoch >= 0)
    si = si[np.lexsort((win.sched_start[si], win.group[si]))]
    sbs = win.sched_start[si] - ax.t0 + ax.wg[si]
    ses = win.sched_end[si] - ax.t0 + ax.wg[si]
    a2, b2 = pair_ranges(ax.gs, ax.ge, sbs, np.maximum.accumulate(ses), elo.min(), ehi.max())
    qseg, qwin = expand(a2, b2)
    ep = win.epoch[si[qwin]]
    dl, dh, ok2 = feasible(ax.gs[qseg], ax.ge[qseg], sbs[qwin], ses[qwin], elo[ep], ehi[ep], 0)
    _, mdl, mdh, mep = merge_per_row(qseg[ok2], dl[ok2], dh[ok2], ep[ok2])
    if mep is None or not len(mep):
        return None
    sched_fit, sched_lo, sched_hi, _ = sweep_blocks(mdl, mdh, mep, elo, ehi)
    return sched_fit, sched_lo, sched_hi


def _by_scheduler_clock(
    ax: _Axis,
    win: Windows,
    pseg: np.ndarray,
    pwin: np.ndarray,
    sched_lo: np.ndarray,
    sched_hi: np.ndarray,
    sched_fit: np.ndarray,
    sched_tol: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs left once the scheduler windows of fitted epochs have spoken: a window whose
    scheduler window cannot hold the segment at any fitted offset goes; a segment that one
    scheduler window holds at every fitted offset keeps only windows the scheduler places."""
    n = len(ax.gs)
    pe = np.maximum(win.epoch[pwin], 0)
    usable = (win.epoch[pwin] >= 0) & (sched_fit[pe] > 0)
    psb = win.sched_start[pwin] - ax.t0 + ax.wg[pwin]
    pse = win.sched_end[pwin] - ax.t0 + ax.wg[pwin]
    el, eh = sched_lo[pe], sched_hi[pe]
    gs, ge = ax.gs[pseg], ax.ge[pseg]
    fits = feasible(gs, ge, psb, pse, el, eh, sched_tol)[2]
    certain = (gs - eh >= psb - sched_tol) & (ge - el <= pse + sched_tol)
    # inside one task's compute interval at every fitted offset: the thread ran nothing
    # else then, so candidates the scheduler clock cannot place go too
    held = np.bincount(pseg[usable & certain], minlength=n) > 0
    keep = ~((usable & ~fits) | (held[pseg] & ~usable))
    return pseg[keep], pwin[keep]


def _by_order(
    pseg: np.ndarray, pwin: np.ndarray, n: int, stage: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A thread's executions never go backwards along its segments: a segment's candidates lie
    between the executions of the decided segments before and after it. Repeated until nothing
    changes (at most 16 rounds); segments left with one execution get stage ORDER."""
    left = np.bincount(pseg, minlength=n)
    for _ in range(16):
        one = left == 1
        if not one.any():
            break
        first = np.cumsum(left) - left
        dec = np.full(n, -1, np.int64)
        dec[one] = pwin[first[one]]
        before = np.r_[-1, np.maximum.accumulate(dec)[:-1]]
        after_ = np.where(dec >= 0, dec, _BIG)
        after = np.r_[np.minimum.accumulate(after_[::-1])[::-1][1:], _BIG]
        keep = (pwin >= before[pseg]) & (pwin <= after[pseg])
        if keep.all():
            break
        pseg, pwin = pseg[keep], pwin[keep]
        new = np.bincount(pseg, minlength=n)
        stage = np.where((stage == 0) & (new == 1), ORDER, stage)
        left = new
    return pseg, pwin, stage
