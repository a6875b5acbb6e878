"""Darshan I/O <-> task executions: the interval join.

Input: :class:`~metaprov.records.RunRecords` with ``darshan`` (from
:func:`metaprov.ingest.darshan.read_darshan_logs`) and the ``executions`` / ``tasks`` tables.
Output: ``records.io``, a :class:`LinkedIO` holding ``segments`` (one row per Darshan segment,
schema ``darshan_links``: the task execution it belongs to, or the process, or why neither),
``processes`` (schema ``darshan_processes``: role, worker address, estimated clock offset, counts)
and ``accounting`` (counts by status, rule and reason).

How (details and measurements in ``docs/darshan.md``):

1. Each log is a process; its role comes from the command line.
2. Worker address -> log by thread-id membership: every task's ``thread`` appears as a pthread id
   in the log of the worker process that ran it (majority vote over the worker's executions).
3. Per process, Darshan's clock offset is estimated from the data: the shift that puts the most
   task-thread segments inside a compute window of their own thread (an exact sweep over the
   feasible shift intervals, not a grid). Darshan starts its clock before it records the start
   time, so its times are late by tens of milliseconds: a fixed tolerance cannot link
   millisecond tasks.
4. Each segment on a thread that ran tasks is joined (``numpy.searchsorted`` per thread, never a
   per-task scan) to the window that contains it after the offset correction; windows on one
   thread do not overlap because a thread runs one task at a time. Worker-clock windows use a
   10 ms tolerance; scheduler-clock windows (no worker transitions) use the nearest window within
   2 s. A segment that fits several windows, or whose window changes within the range of
   offsets the data allow, is *ambiguous*: reported, never guessed.
5. Segments on threads that ran no task belong to the process (``process``). Segments without a
   thread id in a worker process, or in a log outside the run, are ``unlinked`` with the reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from metaprov.records import REPORTED, STR, RunRecords, conform, empty_table
from metaprov.timeutil import utc_to_us

log = logging.getLogger("metaprov")

__all__ = ["LinkedIO", "link_io", "estimate_offset", "STATUSES", "RULES"]

STATUSES = ("linked", "process", "ambiguous", "unlinked")

# rule -> what it means (docs/darshan.md repeats this table)
RULES: dict[str, str] = {
    "worker-window": "inside the task's worker-clock compute window on the same thread, after "
    "the process's clock-offset correction",
    "worker-window-tolerance": "outside every window but within the tolerance (10 ms) of exactly "
    "one window on the same thread",
    "scheduler-nearest": "no worker transitions: the nearest scheduler begins/ends window on the "
    "same thread, within 2 s, clearly nearer than any other",
    "thread-ran-no-task": "the thread ran no task of this worker: I/O of the worker process itself",
    "process-role": "the process runs no tasks (launcher, nanny, resource tracker, ...)",
    "unmapped-process": "no worker's task threads appear in this log: I/O of the process",
    "no-thread-id": "the segment carries no thread id (32-byte DXT layout or missing text)",
    "outside-run": "the log belongs to a program outside the run",
    "no-window": "on a task thread, but outside every task window",
    "several-windows": "fits more than one task window",
    "offset-uncertain": "the task it falls in changes within the range of clock offsets the data "
    "allow",
}

_US = 1_000_000


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


# --------------------------------------------------------------------------------------------
# clock offset


def _candidate_ranges(
    s: np.ndarray, e: np.ndarray, starts: np.ndarray, cmax_ends: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """Index range [a, b) of the windows that can hold [s - hi, e - lo] (integer µs)."""
    a = np.searchsorted(cmax_ends, s - hi, side="left")
    b = np.searchsorted(starts, e - lo, side="right")
    return a, np.maximum(a, b)


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
    """The clock offset (seconds to subtract from segment times) that fits the most segments.

    For a segment [s, e] and a window [ws, we] of the same thread, the offsets d that put
    [s - d, e - d] inside the window form the interval [e - we, s - ws]. A sweep over those
    intervals (clipped to [low, high]) finds where the most segments fit: the *plateaus* of
    maximum coverage. It is exact (no grid), and uses a deterministic subsample of segments
    when the number of (segment, window) pairs would exceed ``max_pairs``.

    Args:
        seg_start, seg_end: segment times in integer µs.
        seg_group, win_group: thread group of each segment / window (windows sorted by group,
            then start).
        win_start, win_end: window times in integer µs.
        low, high: the offsets considered, in seconds.
        max_pairs: bound on the work.

    Returns:
        dict with ``offset`` (chosen, s), ``low``/``high`` (the chosen plateau), ``plateaus``
        (all plateaus of maximum coverage as (low, high) pairs), ``fit`` (segments that fit at
        the optimum), ``used`` (segments considered) and ``note``.
    """
    lo_us, hi_us = int(round(low * _US)), int(round(high * _US))
    n = len(seg_start)
    if n == 0 or len(win_start) == 0:
        return {
            "offset": None,
            "low": None,
            "high": None,
            "plateaus": [],
            "fit": 0,
            "used": 0,
            "note": "no task-thread segments to estimate from",
        }
    # Windows of all groups in one sorted array: shift each group far apart on the time axis
    # so one searchsorted serves every thread at once.
    base = int(max(win_end.max(), seg_end.max())) - int(min(win_start.min(), seg_start.min()))
    span = np.int64(base + 4 * (hi_us - lo_us) + 10 * _US)
    t0 = np.int64(min(win_start.min(), seg_start.min()))
    ws = (win_start - t0) + win_group.astype(np.int64) * span
    we = (win_end - t0) + win_group.astype(np.int64) * span
    cmax = np.maximum.accumulate(we)
    ss = (seg_start - t0) + seg_group.astype(np.int64) * span
    se = (seg_end - t0) + seg_group.astype(np.int64) * span
    a, b = _candidate_ranges(ss, se, ws, cmax, lo_us, hi_us)
    counts = b - a
    total = int(counts.sum())
    used = np.arange(n)
    if total > max_pairs:
        step = int(np.ceil(total / max_pairs))
        used = np.arange(0, n, step)
        a, b, counts = a[used], b[used], counts[used]
    seg_of_pair = np.repeat(used, counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    win_of_pair = np.repeat(a, counts) + (np.arange(int(counts.sum())) - first)
    lo_d = np.maximum(se[seg_of_pair] - we[win_of_pair], lo_us)
    hi_d = np.minimum(ss[seg_of_pair] - ws[win_of_pair], hi_us)
    ok = lo_d <= hi_d
    lo_d, hi_d = lo_d[ok], hi_d[ok]
    if len(lo_d) == 0:
        return {
            "offset": None,
            "low": None,
            "high": None,
            "plateaus": [],
            "fit": 0,
            "used": int(len(used)),
            "note": f"no segment fits a task window at any offset in [{low}, {high}] s",
        }
    # Sweep over the µs grid of [low, high]: +1 where an interval opens, -1 just after it
    # closes (closed intervals). Counting per grid point replaces a sort of the events.
    nbin = hi_us - lo_us + 2
    delta = np.bincount(lo_d - lo_us, minlength=nbin) - np.bincount(
        hi_d + 1 - lo_us, minlength=nbin
    )
    cov = np.cumsum(delta[:-1])
    best = int(cov.max())
    at_best = np.r_[False, cov == best, False]
    edges = np.flatnonzero(at_best[1:] != at_best[:-1])
    plateaus = [
        (int(a0) + lo_us, int(a1) - 1 + lo_us)
        for a0, a1 in zip(edges[::2], edges[1::2], strict=True)
    ]

    # Choose: the plateau nearest to no correction; inside it, the point nearest to 0 that keeps
    # a margin from its edges (the midpoint when it is narrow).
    def dist0(p: tuple[int, int]) -> int:
        return 0 if p[0] <= 0 <= p[1] else min(abs(p[0]), abs(p[1]))

    chosen = min(plateaus, key=lambda p: (dist0(p), p[0]))
    margin = min(5_000, (chosen[1] - chosen[0]) // 2)
    off = int(np.clip(0, chosen[0] + margin, chosen[1] - margin))
    note = (
        f"{best} of {len(used)} task-thread segments fit one window at offsets "
        f"{chosen[0] / _US:+.6f} .. {chosen[1] / _US:+.6f} s"
    )
    if len(plateaus) > 1:
        note += f"; {len(plateaus)} separate offset ranges fit equally well"
    return {
        "offset": off / _US,
        "low": chosen[0] / _US,
        "high": chosen[1] / _US,
        "plateaus": [(p0 / _US, p1 / _US) for p0, p1 in plateaus],
        "fit": best,
        "used": int(len(used)),
        "note": note,
    }


# --------------------------------------------------------------------------------------------
# the join


def _contained(
    ss: np.ndarray, se: np.ndarray, ws: np.ndarray, we: np.ndarray, cmax: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Index of the window containing each segment (-1: none) and whether another one does too."""
    idx = np.searchsorted(ws, ss, side="right") - 1
    has = idx >= 0
    safe = np.maximum(idx, 0)
    inside = has & (se <= we[safe]) & (len(we) > 0)
    # an earlier window (start <= s) also contains it iff the running max of ends reaches e
    prev = np.maximum(safe - 1, 0)
    twice = inside & (safe >= 1) & (cmax[prev] >= se)
    return np.where(inside, idx, -1), twice


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
    seg = np.repeat(np.arange(n), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    win = np.repeat(a, counts) + (np.arange(int(counts.sum())) - first)
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
        records.io = LinkedIO(accounting=_accounting(empty_table("darshan_links"), 0))
        return records
    seg = dr.segments
    logs = dr.logs
    n = len(seg)
    tol = int(round(tolerance * _US))
    stol = int(round(scheduler_tolerance * _US))

    # ---- per-log facts ----
    log_names = logs["log"].astype(str).tolist()
    log_index = {name: i for i, name in enumerate(log_names)}
    if n:
        codes, uniques = pd.factorize(seg["log"], sort=False)
        seg_log = np.array([log_index[str(u)] for u in uniques], dtype=np.int64)[codes]
    else:
        seg_log = np.zeros(0, np.int64)
    roles = logs["role"].astype(str).to_numpy()
    in_run = logs["in_run"].fillna(True).to_numpy(dtype=bool)
    has_pt = seg["pthread"].notna().to_numpy() if n else np.zeros(0, bool)
    pt = seg["pthread"].fillna(0).to_numpy(dtype=np.uint64) if n else np.zeros(0, np.uint64)

    # ---- executions usable as windows ----
    ex = records.executions
    ex = ex[ex["thread"].notna() & ex["start"].notna() & ex["worker"].notna()].reset_index(
        drop=True
    )
    ex_start = utc_to_us(ex["start"]) if len(ex) else np.zeros(0, np.int64)
    ex_end_raw = ex["end"]
    ex_end = np.where(
        ex_end_raw.isna().to_numpy(), ex_start, utc_to_us(ex_end_raw.fillna(ex["start"]))
    )
    ex_thread = ex["thread"].to_numpy(dtype=np.uint64) if len(ex) else np.zeros(0, np.uint64)
    ex_worker = ex["worker"].astype(str).to_numpy()
    ex_sched = (ex["time_source"].astype(str) == "scheduler").to_numpy()

    # ---- 2. worker -> log by thread-id membership ----
    worker_of_log: dict[int, str] = {}
    votes_of_log: dict[int, int] = {}
    notes: list[str] = []
    if n and len(ex):
        lt = pd.DataFrame({"li": seg_log[has_pt], "thread": pt[has_pt]}).drop_duplicates()
        et = pd.DataFrame({"worker": ex_worker, "thread": ex_thread})
        m = et.merge(lt, on="thread", how="inner")
        m = m[in_run[m["li"].to_numpy()]] if len(m) else m
        if len(m):
            v = m.groupby(["worker", "li"]).size().rename("votes").reset_index()
            v = v.sort_values(["worker", "votes", "li"], ascending=[True, False, True])
            for w, grp in v.groupby("worker", sort=True):
                top = grp.iloc[0]
                if len(grp) > 1 and grp.iloc[1]["votes"] == top["votes"]:
                    notes.append(
                        f"worker {w}: its task threads appear equally often in "
                        f"{len(grp)} logs; no process assigned"
                    )
                    continue
                li = int(top["li"])
                if li in worker_of_log and votes_of_log[li] >= int(top["votes"]):
                    notes.append(f"worker {w}: log {log_names[li]} already taken by another worker")
                    continue
                worker_of_log[li] = str(w)
                votes_of_log[li] = int(top["votes"])
    # fallback: pid known for a worker (capture plugin) and not mapped by membership
    wk = records.workers
    if len(wk) and "pid" in wk and wk["pid"].notna().any():
        pid_to_worker = dict(
            zip(
                wk.loc[wk["pid"].notna(), "pid"].astype(int),
                wk.loc[wk["pid"].notna(), "address"].astype(str),
                strict=True,
            )
        )
        mapped = set(worker_of_log.values())
        for li, pid in enumerate(logs["pid"].tolist()):
            if li in worker_of_log or pd.isna(pid):
                continue
            w = pid_to_worker.get(int(pid))
            if w is not None and w not in mapped and roles[li] == "worker":
                worker_of_log[li] = w
                votes_of_log[li] = 0

    # ---- output arrays (integer codes into short lists of texts: fast at 10^6 rows) ----
    status = _Labels(n)
    rule = _Labels(n)
    reason = _Labels(n, default="")
    link_ex = np.full(n, -1, np.int64)
    offset_of_seg = np.zeros(n, np.float64)
    seg_start = utc_to_us(seg["start"]) if n else np.zeros(0, np.int64)
    seg_end = utc_to_us(seg["end"]) if n else np.zeros(0, np.int64)
    # segments grouped by log once: index arrays instead of full-length masks per process
    by_log = np.argsort(seg_log, kind="stable")
    log_bounds = np.searchsorted(seg_log[by_log], np.arange(len(logs) + 1))

    def of_log(li: int) -> np.ndarray:
        return by_log[log_bounds[li] : log_bounds[li + 1]]

    # ---- 5. what cannot be linked: outside the run, processes that run no task ----
    for li in range(len(logs)):
        idx = of_log(li)
        if not len(idx) or li in worker_of_log:
            continue
        if not in_run[li]:
            status.set(idx, "unlinked")
            rule.set(idx, "outside-run")
            reason.set(idx, "log from a program outside the run (other user, or disjoint in time)")
        elif roles[li] != "worker":
            status.set(idx, "process")
            rule.set(idx, "process-role")
            reason.set(idx, f"process runs no tasks: role {roles[li]}")
        else:
            with_pt = idx[has_pt[idx]]
            status.set(with_pt, "process")
            rule.set(with_pt, "unmapped-process")
            reason.set(with_pt, "worker process whose threads ran none of the recorded tasks")
            no_pt = idx[~has_pt[idx]]
            status.set(no_pt, "unlinked")
            rule.set(no_pt, "no-thread-id")
            reason.set(no_pt, "no thread id recorded, and the process is not matched to a worker")

    # ---- 3./4. mapped worker processes ----
    proc_rows: dict[int, dict[str, Any]] = {}
    ex_by_worker = pd.Series(np.arange(len(ex))).groupby(ex_worker, sort=False).indices
    tol_ms = f"{tolerance * 1e3:g} ms"
    for li in sorted(worker_of_log):
        w = worker_of_log[li]
        idx = of_log(li)
        ex_w = np.asarray(ex_by_worker.get(w, np.zeros(0, np.int64)), dtype=np.int64)
        task_threads = np.unique(ex_thread[ex_w])
        hp = has_pt[idx]
        on = hp & np.isin(pt[idx], task_threads)
        no_task = idx[hp & ~on]
        status.set(no_task, "process")
        rule.set(no_task, "thread-ran-no-task")
        reason.set(no_task, "thread ran no task: I/O of the worker process")
        nopt = idx[~hp]
        status.set(nopt, "unlinked")
        rule.set(nopt, "no-thread-id")
        reason.set(nopt, "no thread id recorded: cannot tell which task (or the process) issued it")

        # task-thread segments sorted by (thread, start): each thread is then one slice, and
        # searchsorted gets sorted queries
        sidx = idx[on]
        sg = np.searchsorted(task_threads, pt[sidx])
        o = np.lexsort((seg_start[sidx], sg))
        sidx, sg = sidx[o], sg[o]
        wk_group = np.searchsorted(task_threads, ex_thread[ex_w])
        order_w = np.lexsort((ex_start[ex_w], wk_group))
        ex_sorted = ex_w[order_w]
        grp_sorted = wk_group[order_w]
        is_wk = ~ex_sched[ex_sorted]

        est: dict[str, Any] = {"offset": None, "low": None, "high": None, "plateaus": []}
        if not estimate_offsets:
            est["note"] = "offset estimation turned off"
        elif not len(sidx):
            est["note"] = "no task-thread segments"
        else:
            # Worker-clock windows give Darshan's lateness; without them the scheduler's windows
            # give the (larger) scheduler-vs-process clock difference, searched over +-2 s.
            use = is_wk if is_wk.any() else ~is_wk
            rng = offset_range if is_wk.any() else (-scheduler_tolerance, scheduler_tolerance)
            wsel = ex_sorted[use]
            est = estimate_offset(
                seg_start[sidx],
                seg_end[sidx],
                sg,
                ex_start[wsel],
                ex_end[wsel],
                grp_sorted[use],
                low=rng[0],
                high=rng[1],
            )
            if not is_wk.any():
                est["note"] = "scheduler-clock windows: " + est["note"]
        off_us = int(round((est["offset"] or 0.0) * _US))
        offset_of_seg[idx] = off_us / _US

        # Representative offsets: the chosen one, and the edges and middle of every range of
        # offsets that fits the data as well (the 32 nearest the chosen one). A segment whose
        # task changes between them is ambiguous.
        plats = sorted(
            est.get("plateaus") or [],
            key=lambda p: min(abs(p[0] * _US - off_us), abs(p[1] * _US - off_us)),
        )[:32]
        reps_set = {off_us}
        for p0, p1 in plats:
            reps_set |= {
                int(round(p0 * _US)),
                int(round(p1 * _US)),
                int(round((p0 + p1) / 2 * _US)),
            }
        reps = sorted(reps_set - {off_us})

        seg_b = np.searchsorted(sg, np.arange(len(task_threads) + 1))
        win_b = np.searchsorted(grp_sorted, np.arange(len(task_threads) + 1))
        for g in range(len(task_threads)):
            gi = sidx[seg_b[g] : seg_b[g + 1]]
            if not len(gi):
                continue
            wins = ex_sorted[win_b[g] : win_b[g + 1]]
            wk = is_wk[win_b[g] : win_b[g + 1]]
            ss0, se0 = seg_start[gi], seg_end[gi]
            decided = np.zeros(len(gi), bool)
            # worker-clock windows of this thread
            wsel = wins[wk]
            if len(wsel):
                ws, we = ex_start[wsel], ex_end[wsel]
                cm = np.maximum.accumulate(we)
                ss, se = ss0 - off_us, se0 - off_us
                cidx, twice = _contained(ss, se, ws, we, cm)
                a, b = _near(ss, se, ws, cm, tol)
                k = b - a
                # stability over the offsets the data allow
                unstable = np.zeros(len(gi), bool)
                for r in reps:
                    idx_r, _ = _contained(ss0 - r, se0 - r, ws, we, cm)
                    unstable |= (idx_r >= 0) & (idx_r != cidx)
                inside = cidx >= 0
                ok_in = inside & ~twice & ~unstable
                status.set(gi[ok_in], "linked")
                rule.set(gi[ok_in], "worker-window")
                link_ex[gi[ok_in]] = wsel[cidx[ok_in]]
                amb_off = inside & ~twice & unstable
                status.set(gi[amb_off], "ambiguous")
                rule.set(gi[amb_off], "offset-uncertain")
                reason.set(gi[amb_off], "its task changes within the clock offsets the data allow")
                amb2 = inside & twice
                status.set(gi[amb2], "ambiguous")
                rule.set(gi[amb2], "several-windows")
                reason.set(gi[amb2], "inside overlapping windows of several tasks on this thread")
                one = ~inside & (k == 1)
                status.set(gi[one], "linked")
                rule.set(gi[one], "worker-window-tolerance")
                reason.set(gi[one], f"outside the window by at most {tol_ms}")
                link_ex[gi[one]] = wsel[a[one]]
                many = ~inside & (k > 1)
                status.set(gi[many], "ambiguous")
                rule.set(gi[many], "several-windows")
                reason.set(gi[many], f"within {tol_ms} of several task windows")
                decided = inside | (k >= 1)
            # scheduler-clock windows: only for what worker windows did not decide
            ssel = wins[~wk]
            todo = np.flatnonzero(~decided)
            if len(ssel) and len(todo):
                ws, we = ex_start[ssel], ex_end[ssel]
                cm = np.maximum.accumulate(we)
                t0, t1 = ss0[todo], se0[todo]
                a, b = _near(t0 - off_us, t1 - off_us, ws, cm, stol)
                best, clear = _nearest(t0 - off_us, t1 - off_us, ws, we, a, b, tol)
                moved = np.zeros(len(todo), bool)
                for r in reps:
                    a_r, b_r = _near(t0 - r, t1 - r, ws, cm, stol)
                    best_r, _ = _nearest(t0 - r, t1 - r, ws, we, a_r, b_r, tol)
                    moved |= (best_r >= 0) & (best >= 0) & (best_r != best)
                tg = gi[todo]
                unsure = (best >= 0) & clear & moved
                status.set(tg[unsure], "ambiguous")
                rule.set(tg[unsure], "offset-uncertain")
                reason.set(
                    tg[unsure], "its nearest task changes within the clock offsets the data allow"
                )
                okn = (best >= 0) & clear & ~moved
                status.set(tg[okn], "linked")
                rule.set(tg[okn], "scheduler-nearest")
                link_ex[tg[okn]] = ssel[best[okn]]
                amb = (best >= 0) & ~clear
                status.set(tg[amb], "ambiguous")
                rule.set(tg[amb], "several-windows")
                reason.set(tg[amb], "several scheduler windows about equally near")
                decided[todo[best >= 0]] = True
            rest = gi[~decided]
            status.set(rest, "unlinked")
            rule.set(rest, "no-window")
            reason.set(
                rest,
                f"on a task thread but outside every task window (by more than {tol_ms}"
                + (
                    f", or {scheduler_tolerance:g} s for scheduler windows)" if (~wk).any() else ")"
                ),
            )
        proc_rows[li] = {
            "worker": w,
            "votes": votes_of_log.get(li, 0),
            "clock_offset": est.get("offset"),
            "offset_low": est.get("low"),
            "offset_high": est.get("high"),
            "offset_note": est.get("note", ""),
        }

    # every segment must have been decided; anything left is a bug, reported not hidden
    undecided = status.codes < 0
    if undecided.any():  # pragma: no cover - defensive
        status.set(undecided, "unlinked")
        rule.set(undecided, "no-window")
        reason.set(undecided, "not decided (internal): please report")

    # ---- assemble ----
    has_link = link_ex >= 0
    key_arr = pa.array(ex["key"].astype(STR).array)  # Arrow-backed: no Python strings
    if isinstance(key_arr, pa.ChunkedArray):
        key_arr = key_arr.combine_chunks()
    take = pa.array(np.where(has_link, link_ex, 0), mask=~has_link)
    attempts = ex["attempt"].to_numpy(dtype="float64", na_value=np.nan)
    att = np.full(n, np.nan)
    att[has_link] = attempts[link_ex[has_link]]
    worker_col = np.full(len(logs), None, dtype=object)
    for li, w in worker_of_log.items():
        worker_col[li] = w
    pid_arr = logs["pid"].to_numpy(dtype="float64", na_value=np.nan)
    host_list = [None if pd.isna(h) else str(h) for h in logs["hostname"].tolist()]
    corr = np.rint(offset_of_seg * _US).astype(np.int64)
    start_c = seg_start - corr
    end_c = seg_end - corr
    pid_seg = pid_arr[seg_log] if n else np.zeros(0)
    links = pd.DataFrame(
        {
            "segment": np.arange(n, dtype=np.int64),
            "log": seg["log"].reset_index(drop=True),
            "pthread": seg["pthread"].reset_index(drop=True),
            "status": status.column(),
            "rule": rule.column(),
            "reason": reason.column(),
            "key": pd.Series(pd.array(key_arr.take(take), dtype=STR)),
            "attempt": pd.array(att, dtype="Float64").astype("Int64"),
            "worker": _codes_to_str(seg_log, list(worker_col)),
            "pid": pd.array(pid_seg, dtype="Float64").astype("Int64"),
            "host": _codes_to_str(seg_log, host_list),
            "start": pd.Series(start_c.view("datetime64[us]")).dt.tz_localize("UTC"),
            "end": pd.Series(end_c.view("datetime64[us]")).dt.tz_localize("UTC"),
        }
    )
    links = conform("darshan_links", links)
    procs = _processes(logs, seg_log, status, proc_rows, worker_col)
    acct = _accounting(links, len(logs))
    acct["notes"] = notes
    records.io = LinkedIO(segments=links, processes=procs, accounting=acct)
    for text in notes:
        records.accounting.note(f"Darshan link: {text}")
    bs = acct["by_status"]
    records.accounting.note(
        f"Darshan link: {n} segment(s): {bs['linked']} linked to tasks, {bs['process']} to "
        f"processes, {bs['ambiguous']} ambiguous, {bs['unlinked']} unlinked"
    )
    if bs["ambiguous"] or bs["unlinked"]:
        log.warning(
            "Darshan I/O: %d ambiguous and %d unlinked segment(s); see `metaprov inspect`",
            bs["ambiguous"],
            bs["unlinked"],
            extra=REPORTED,
        )
    return records


def _codes_to_str(codes: np.ndarray, texts: list[str | None]) -> pd.Series:
    """A string column from integer codes into ``texts`` (None: missing)."""
    dictionary = pa.array(texts, type=pa.string())
    arr = pa.DictionaryArray.from_arrays(pa.array(np.asarray(codes, dtype=np.int32)), dictionary)
    return pd.Series(pd.array(arr.dictionary_decode(), dtype=STR))


class _Labels:
    """One text label per segment, kept as integer codes (a few distinct texts, 10^6 rows)."""

    def __init__(self, n: int, default: str | None = None) -> None:
        self.texts: list[str] = []
        self._code: dict[str, int] = {}
        self.codes = np.full(n, -1, np.int32)
        if default is not None:
            self.codes[:] = self.code(default)

    def code(self, text: str) -> int:
        if text not in self._code:
            self._code[text] = len(self.texts)
            self.texts.append(text)
        return self._code[text]

    def set(self, where: np.ndarray, text: str) -> None:
        if np.size(where):
            self.codes[where] = self.code(text)

    def column(self) -> pd.Series:
        return _codes_to_str(np.where(self.codes < 0, 0, self.codes), self.texts or [""])


def _processes(
    logs: pd.DataFrame,
    seg_log: np.ndarray,
    status: _Labels,
    proc_rows: dict[int, dict[str, Any]],
    worker_col: np.ndarray,
) -> pd.DataFrame:
    nlog = len(logs)
    counts = {}
    for s in STATUSES:
        mask = status.codes == status.code(s)
        counts[s] = np.bincount(seg_log[mask], minlength=nlog) if len(seg_log) else np.zeros(nlog)
    total = np.bincount(seg_log, minlength=nlog) if len(seg_log) else np.zeros(nlog, int)
    df = pd.DataFrame(
        {
            "log": logs["log"],
            "role": logs["role"],
            "pid": logs["pid"],
            "host": logs["hostname"],
            "worker": pd.array(worker_col, dtype=STR),
            "votes": [proc_rows.get(i, {}).get("votes") for i in range(nlog)],
            "clock_offset": [proc_rows.get(i, {}).get("clock_offset") for i in range(nlog)],
            "offset_low": [proc_rows.get(i, {}).get("offset_low") for i in range(nlog)],
            "offset_high": [proc_rows.get(i, {}).get("offset_high") for i in range(nlog)],
            "offset_note": [proc_rows.get(i, {}).get("offset_note", "") for i in range(nlog)],
            "n_segments": total,
            "n_linked": counts["linked"],
            "n_process": counts["process"],
            "n_ambiguous": counts["ambiguous"],
            "n_unlinked": counts["unlinked"],
        }
    )
    for c in ("votes",):
        df[c] = pd.array(df[c].tolist(), dtype="Int64")
    for c in ("clock_offset", "offset_low", "offset_high"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return conform("darshan_processes", df)


def _accounting(links: pd.DataFrame, n_logs: int) -> dict[str, Any]:
    st = links["status"].astype(str)
    by_status = {s: int((st == s).sum()) for s in STATUSES}
    by_rule = {
        str(k): int(v) for k, v in links["rule"].astype(str).value_counts().sort_index().items()
    }
    rs = links.loc[st.isin(["ambiguous", "unlinked"]), "reason"].astype(str)
    by_reason = {str(k): int(v) for k, v in rs.value_counts().sort_index().items()}
    task_thread = int(
        links["rule"]
        .astype(str)
        .isin(
            [
                "worker-window",
                "worker-window-tolerance",
                "scheduler-nearest",
                "no-window",
                "several-windows",
                "offset-uncertain",
            ]
        )
        .sum()
    )
    return {
        "logs": n_logs,
        "segments": int(len(links)),
        "by_status": by_status,
        "by_rule": by_rule,
        "by_reason": by_reason,
        "task_thread_segments": task_thread,
    }
