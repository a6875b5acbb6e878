"""Clock fits for the Darshan link: exact coverage sweeps and scheduler-delay epochs.

Input: integer-µs times of segments and windows (numpy arrays).
Output: the ranges of clock offsets consistent with the data (:func:`estimate_offset`,
:func:`sweep_blocks`) and the epochs of a worker's scheduler delay (:func:`scheduler_epochs`).

A segment ``[s, e]`` fits a window ``[ws, we]`` after subtracting an offset ``d`` for every
``d`` in ``[e - we, s - ws]``. Counting, over a µs grid, how many *segments* fit some window at
each ``d`` (a ``bincount`` of interval openings and closings; a segment that fits several
windows at once counts once) gives the offsets where the most segments fit: exact, no sorting,
no grid search.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_US = 1_000_000

__all__ = [
    "estimate_offset",
    "expand",
    "feasible",
    "merge_per_row",
    "pair_ranges",
    "scheduler_epochs",
    "sweep_blocks",
]


def pair_ranges(
    ss: np.ndarray,
    se: np.ndarray,
    ws: np.ndarray,
    cmax: np.ndarray,
    lo: np.ndarray | int,
    hi: np.ndarray | int,
) -> tuple[np.ndarray, np.ndarray]:
    """Index range ``[a, b)`` of the windows (sorted by start; ``cmax`` the running maximum of
    their ends) that can hold ``[ss - d, se - d]`` for some ``d`` in ``[lo, hi]``."""
    a = np.searchsorted(cmax, se - hi, side="left")
    b = np.searchsorted(ws, ss - lo, side="right")
    return a, np.maximum(a, b)


def expand(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All ``(row, index)`` pairs with ``a[row] <= index < b[row]``, by row then index."""
    counts = b - a
    total = int(counts.sum())
    row = np.repeat(np.arange(len(a)), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    idx = np.repeat(a, counts) + (np.arange(total) - first)
    return row, idx


def feasible(
    ss: np.ndarray,
    se: np.ndarray,
    ws: np.ndarray,
    we: np.ndarray,
    lo: np.ndarray | int,
    hi: np.ndarray | int,
    tol: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair, the offsets ``[dl, dh]`` within ``[lo, hi]`` that put ``[ss - d, se - d]``
    inside ``[ws - tol, we + tol]``, and whether there are any."""
    dl = np.maximum(lo, se - we - tol)
    dh = np.minimum(hi, ss - ws + tol)
    return dl, dh, dl <= dh


def merge_per_row(
    row: np.ndarray, dl: np.ndarray, dh: np.ndarray, block: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The union of each row's (and block's) intervals ``[dl, dh]``, as disjoint intervals.

    A segment that fits two overlapping windows must count once in a coverage sweep; counting
    pairs instead favours offsets that put segments where windows overlap.
    """
    if not len(row):
        return row, dl, dh, block
    o = np.lexsort((dl, row) if block is None else (dl, block, row))
    row, dl, dh = row[o], dl[o], dh[o]
    blk = None if block is None else block[o]
    key = row if blk is None else row * (int(blk.max()) + 1) + blk
    newkey = np.r_[True, key[1:] != key[:-1]]
    # running maximum of the ends within a key: keys shifted apart on one axis
    shift = (np.cumsum(newkey) - 1).astype(np.int64)
    base = int(dl.min())
    big = np.int64(int(dh.max()) - base + 2)
    run = np.maximum.accumulate(dh - base + shift * big) - shift * big + base
    start = newkey | np.r_[True, dl[1:] > run[:-1] + 1]
    first = np.flatnonzero(start)
    return (
        row[start],
        dl[start],
        np.maximum.reduceat(dh, first),
        (None if blk is None else blk[start]),
    )


def sweep_blocks(
    dl: np.ndarray,
    dh: np.ndarray,
    block: np.ndarray,
    block_lo: np.ndarray,
    block_hi: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per block (one process, or one scheduler-delay epoch), the offsets where most intervals
    overlap.

    Args:
        dl, dh: each interval (already merged per segment), inside its block's range.
        block: block of each interval.
        block_lo, block_hi: each block's range of offsets (µs).

    Returns:
        per block: the best coverage, the lowest and highest offset reaching it (the hull of
        the best ranges; high < low when nothing fits) and the number of separate best ranges.
    """
    nb = len(block_lo)
    width = (block_hi - block_lo + 2).astype(np.int64)
    base = np.r_[0, np.cumsum(width)[:-1]].astype(np.int64)
    total = int(width.sum()) if nb else 0
    best = np.zeros(nb, np.int64)
    low = np.zeros(nb, np.int64)
    high = np.full(nb, -1, np.int64)
    nplat = np.zeros(nb, np.int64)
    if not len(dl) or not total:
        return best, low, high, nplat
    if total > 8 * len(dl) + (1 << 22):
        # many wide blocks, few intervals: sort the interval ends instead of a grid
        return _sweep_events(dl, dh, block, nb)
    opens = base[block] + (dl - block_lo[block])
    closes = base[block] + (dh + 1 - block_lo[block])
    delta = np.bincount(opens, minlength=total + 1) - np.bincount(closes, minlength=total + 1)
    cov = np.cumsum(delta[:total])  # each block's openings and closings balance inside it
    best = np.maximum.reduceat(cov, base)
    blk = np.repeat(np.arange(nb), width)
    at = (cov == best[blk]) & (best[blk] > 0)
    idx = np.flatnonzero(at)
    if len(idx):
        b_of = blk[idx]
        first = np.r_[True, b_of[1:] != b_of[:-1]]
        last = np.r_[b_of[1:] != b_of[:-1], True]
        low[b_of[first]] = idx[first] - base[b_of[first]] + block_lo[b_of[first]]
        high[b_of[last]] = idx[last] - base[b_of[last]] + block_lo[b_of[last]]
        run_start = at & ~np.r_[False, at[:-1]]
        nplat = np.bincount(blk[run_start], minlength=nb)
    return np.maximum(best, 0), low, high, nplat


def _sweep_events(
    dl: np.ndarray, dh: np.ndarray, block: np.ndarray, nb: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sweep_blocks` by sorting the openings and closings (memory ~ intervals)."""
    pos = np.r_[dl, dh + 1]
    step = np.r_[np.ones(len(dl), np.int64), -np.ones(len(dh), np.int64)]
    blk = np.r_[block, block]
    o = np.lexsort((pos, blk))
    pos, step, blk = pos[o], step[o], blk[o]
    cov = np.cumsum(step)  # blocks balance, so the running sum restarts at 0 in each block
    # coverage holds from an event position to the next one: keep the last event per position
    last = np.r_[(pos[1:] != pos[:-1]) | (blk[1:] != blk[:-1]), True]
    p, c, b = pos[last], cov[last], blk[last]
    nxt = np.r_[p[1:], p[-1] + 1]
    best = np.zeros(nb, np.int64)
    np.maximum.at(best, b, c)
    at = (c == best[b]) & (c > 0)
    low = np.zeros(nb, np.int64)
    high = np.full(nb, -1, np.int64)
    idx = np.flatnonzero(at)
    if len(idx):
        bo = b[idx]
        first = np.r_[True, bo[1:] != bo[:-1]]
        lst = np.r_[bo[1:] != bo[:-1], True]
        low[bo[first]] = p[idx[first]]
        high[bo[lst]] = nxt[idx[lst]] - 1
    run_start = at & ~np.r_[False, at[:-1] & (b[1:] == b[:-1])]
    nplat = np.bincount(b[run_start], minlength=nb)
    return best, low, high, nplat


def estimate_offset(
    seg_start: np.ndarray,
    seg_end: np.ndarray,
    seg_group: np.ndarray,
    win_start: np.ndarray,
    win_end: np.ndarray,
    win_group: np.ndarray,
    *,
    low: float = -0.02,
    high: float = 0.2,
    max_pairs: int = 1_000_000,
) -> dict[str, Any]:
    """The clock offsets (seconds to subtract from segment times) that fit the most segments.

    For a segment [s, e] and a window [ws, we] of the same thread group, the offsets that put
    [s - d, e - d] inside the window form [e - we, s - ws]. A sweep over those intervals
    (clipped to [low, high], merged per segment) finds where the most segments fit: the
    *plateaus* of maximum coverage. It is exact (no grid search), and uses a regular subsample
    of segments when the (segment, window) pairs would exceed ``max_pairs``.

    Args:
        seg_start, seg_end: segment times in integer µs.
        seg_group, win_group: thread group of each segment / window (windows sorted by group,
            then start).
        win_start, win_end: window times in integer µs.
        low, high: the offsets considered, in seconds.
        max_pairs: bound on the work.

    Returns:
        dict with ``offset`` (a point of the best plateau, s), ``low``/``high`` (the hull of all
        best plateaus: every offset the data allow equally well), ``plateaus`` (the best
        plateaus as (low, high) pairs), ``fit`` (segments that fit at the optimum), ``used``
        (segments considered) and ``note``.
    """
    lo_us, hi_us = int(round(low * _US)), int(round(high * _US))
    n = len(seg_start)
    none = {"offset": None, "low": None, "high": None, "plateaus": [], "fit": 0, "used": 0}
    if n == 0 or len(win_start) == 0:
        return {**none, "note": "no task-thread segments to estimate from"}
    t0 = np.int64(min(win_start.min(), seg_start.min()))
    base = int(max(win_end.max(), seg_end.max())) - int(t0)
    span = np.int64(base + 4 * (hi_us - lo_us) + 10 * _US)
    ws = (win_start - t0) + win_group.astype(np.int64) * span
    we = (win_end - t0) + win_group.astype(np.int64) * span
    cmax = np.maximum.accumulate(we)
    ss = (seg_start - t0) + seg_group.astype(np.int64) * span
    se = (seg_end - t0) + seg_group.astype(np.int64) * span
    a, b = pair_ranges(ss, se, ws, cmax, lo_us, hi_us)
    used = np.arange(n)
    total = int((b - a).sum())
    if total > max_pairs:
        used = np.arange(0, n, int(np.ceil(total / max_pairs)))
        a, b = a[used], b[used]
    row, win = expand(a, b)
    seg = used[row]
    dl, dh, ok = feasible(ss[seg], se[seg], ws[win], we[win], lo_us, hi_us, 0)
    if not ok.any():
        return {
            **none,
            "used": int(len(used)),
            "note": f"no segment fits a task window at any offset in [{low}, {high}] s",
        }
    _, mdl, mdh, _ = merge_per_row(seg[ok], dl[ok], dh[ok])
    blk = np.zeros(len(mdl), np.int64)
    best, p_lo, p_hi, nplat = sweep_blocks(
        mdl, mdh, blk, np.array([lo_us], np.int64), np.array([hi_us], np.int64)
    )
    fit = int(best[0])
    # the separate best plateaus (needed for the note and for callers that list them)
    grid_lo, grid_hi = int(p_lo[0]), int(p_hi[0])
    nbin = grid_hi - grid_lo + 2
    inside = (mdh >= grid_lo) & (mdl <= grid_hi)
    o = np.clip(mdl[inside], grid_lo, grid_hi + 1) - grid_lo
    c = np.clip(mdh[inside] + 1, grid_lo, grid_hi + 1) - grid_lo
    cov = np.cumsum(np.bincount(o, minlength=nbin) - np.bincount(c, minlength=nbin))[:-1]
    at = np.r_[False, cov == fit, False]
    edges = np.flatnonzero(at[1:] != at[:-1])
    plateaus = [
        (int(e0) + grid_lo, int(e1) - 1 + grid_lo)
        for e0, e1 in zip(edges[::2], edges[1::2], strict=True)
    ]

    # a representative point: the plateau nearest to no correction, 5 ms inside its edges
    # (its middle when narrower)
    def dist0(p: tuple[int, int]) -> int:
        return 0 if p[0] <= 0 <= p[1] else min(abs(p[0]), abs(p[1]))

    chosen = min(plateaus, key=lambda p: (dist0(p), p[0]))
    margin = min(5_000, (chosen[1] - chosen[0]) // 2)
    off = int(np.clip(0, chosen[0] + margin, chosen[1] - margin))
    note = (
        f"{fit} of {len(used)} task-thread segments fit a window at offsets "
        f"{grid_lo / _US:+.6f} .. {grid_hi / _US:+.6f} s"
    )
    if int(nplat[0]) > 1:
        note += f" ({int(nplat[0])} separate ranges fit equally well)"
    return {
        "offset": off / _US,
        "low": grid_lo / _US,
        "high": grid_hi / _US,
        "plateaus": [(p0 / _US, p1 / _US) for p0, p1 in plateaus],
        "fit": fit,
        "used": int(len(used)),
        "note": note,
    }


def scheduler_epochs(
    lo: np.ndarray, hi: np.ndarray, group: np.ndarray, *, min_size: int = 3
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of executions of one worker that share one scheduler delay.

    A worker reports each compute interval shifted to the scheduler's clock by its current
    ``scheduler_delay``, an estimate it renews at heartbeats (and which then moves by
    milliseconds). Between heartbeats the shift is one value: the *epoch*. ``lo``/``hi`` are
    each execution's feasible shifts (those that put its scheduler window inside its worker
    window; ``lo > hi``: none, e.g. a transfer recorded as the task's first startstops entry),
    in time order within each ``group`` (worker).

    An execution whose shifts miss the running epoch while the next usable one still fits it
    is an outlier (not used); otherwise it opens a new epoch. Epochs of fewer than
    ``min_size`` executions are not used: one or two windows do not confirm a shift.

    Returns:
        (epoch per execution, -1: not used; each epoch's lowest and highest shift).
    """
    n = len(lo)
    ep = np.full(n, -1, np.int64)
    e_lo: list[int] = []
    e_hi: list[int] = []
    size: list[int] = []
    lo_l, hi_l, g_l = lo.tolist(), hi.tolist(), group.tolist()
    cur, cl, ch, cg = -1, 0, 0, None
    for i in range(n):
        a, b = lo_l[i], hi_l[i]
        if a > b:
            continue
        if cur >= 0 and g_l[i] == cg:
            if max(cl, a) <= min(ch, b):
                cl, ch = max(cl, a), min(ch, b)
                ep[i] = cur
                size[cur] += 1
                e_lo[cur], e_hi[cur] = cl, ch
                continue
            j = i + 1
            while j < n and g_l[j] == cg and lo_l[j] > hi_l[j]:
                j += 1
            if j < n and g_l[j] == cg and max(cl, lo_l[j]) <= min(ch, hi_l[j]):
                continue  # outlier
        cur = len(size)
        cl, ch, cg = a, b, g_l[i]
        e_lo.append(a)
        e_hi.append(b)
        size.append(1)
        ep[i] = cur
    sz = np.asarray(size, np.int64)
    keep = np.flatnonzero(sz >= min_size)
    remap = np.full(len(sz) + 1, -1, np.int64)
    remap[keep] = np.arange(len(keep))
    ep = np.where(ep >= 0, remap[np.maximum(ep, 0)], -1)
    return ep, np.asarray(e_lo, np.int64)[keep], np.asarray(e_hi, np.int64)[keep]
