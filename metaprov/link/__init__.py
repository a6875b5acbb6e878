"""Darshan I/O <-> task executions: every clock of the run, one decision per segment.

Input: :class:`~metaprov.records.RunRecords` with ``darshan`` (from
:func:`metaprov.ingest.darshan.read_darshan_logs`) and the ``executions`` / ``tasks`` tables.
Output: ``records.io``, a :class:`LinkedIO` holding ``segments`` (one row per Darshan segment,
schema ``darshan_links``: the task execution it belongs to, or the process, or why neither, with
the rule, the clock that decided and its fitted offset), ``processes`` (schema
``darshan_processes``: role, worker address, clock offsets, counts) and ``accounting``.

How (details and measurements in ``docs/darshan.md``):

1. Each log is a process; its role comes from the command line.
2. Worker address -> log by thread-id membership: every task's ``thread`` appears as a pthread id
   in the log of the worker process that ran it (majority vote over the worker's executions).
3. Per process, the offsets of Darshan's clock against the worker's clock that fit the most
   task-thread segments into windows of their own thread (exact sweep,
   :func:`~metaprov.link.clocks.estimate_offset`). Darshan is late by tens of milliseconds.
4. Per process, :func:`~metaprov.link.assign.assign` keeps for each segment the executions
   that can have issued it under every clock: the worker windows (hook times, or the capture's
   exact compute windows), the scheduler's ``begins``/``ends`` (the compute interval on the
   task's thread, shifted by the worker's scheduler delay: fitted per delay epoch), and the
   order of tasks on a thread and of calls within it. One left: linked, with the clock that
   decided; several: ambiguous, with its candidates; none: ambiguous (the clocks disagree).
5. Segments on threads that ran no task belong to the process (``process``). Segments without a
   thread id in a worker process, or in a log outside the run, are ``unlinked`` with the reason.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from metaprov.link.assign import ORDER, SCHEDULER, WORKER, Windows, assign
from metaprov.link.clocks import estimate_offset, expand, scheduler_epochs
from metaprov.records import REPORTED, STR, RunRecords, conform, empty_table
from metaprov.timeutil import utc_to_us

log = logging.getLogger("metaprov")

__all__ = ["LinkedIO", "link_io", "estimate_offset", "STATUSES", "RULES", "CLOCKS"]

STATUSES = ("linked", "process", "ambiguous", "unlinked")

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

_US = 1_000_000
_SCHED_SLACK = 20  # µs around scheduler windows when finding delay epochs


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
    n_ran = int(ex["start"].notna().sum())
    task_threads_known = int((ex["thread"].notna() & ex["start"].notna()).sum())
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
    ex_exact = (
        (ex["window"].astype(str) == "exact").to_numpy()
        if "window" in ex
        else np.zeros(len(ex), bool)
    )
    ex_sb, ex_se, ex_epoch, ep_lo, ep_hi = _scheduler_windows(
        records.tasks, ex, ex_start, ex_end, ex_sched
    )

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
    clock = _Labels(n, default="")
    ev_off = np.full(n, np.nan)
    ev_unc = np.full(n, np.nan)
    cand_seg: list[np.ndarray] = []
    cand_ex: list[np.ndarray] = []
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
        elif task_threads_known == 0 and n_ran:
            # the run records no thread of any task: which task issued the I/O of a worker
            # process cannot be decided at all (said once, below)
            status.set(idx, "unlinked")
            rule.set(idx, "no-task-threads")
            reason.set(idx, "the run records no thread ids of its tasks")
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
        o = np.lexsort((seg_end[sidx], seg_start[sidx], sg))
        sidx, sg = sidx[o], sg[o]
        wk_group = np.searchsorted(task_threads, ex_thread[ex_w])
        order_w = np.lexsort((ex_end[ex_w], ex_start[ex_w], wk_group))
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
        if est.get("low") is not None:
            dlo, dhi = int(round(est["low"] * _US)), int(round(est["high"] * _US))
        else:
            dlo = dhi = off_us
        offset_of_seg[idx] = off_us / _US
        sched_note = ""
        decided = np.zeros(len(sidx), bool)

        # ---- every clock at once: worker windows (or, without them, the scheduler's), the
        # scheduler windows per delay epoch, the thread order ----
        prim = ex_sorted[is_wk] if is_wk.any() else ex_sorted
        if len(sidx) and len(prim):
            prim_group = grp_sorted[is_wk] if is_wk.any() else grp_sorted
            if is_wk.any():
                eps = ex_epoch[prim]
                uniq = np.unique(eps[eps >= 0])
                loc = np.where(eps >= 0, np.searchsorted(uniq, np.maximum(eps, 0)), -1)
                d_lo, d_hi = ep_lo[uniq], ep_hi[uniq]
            else:  # scheduler windows are the primary ones: no second scheduler stage
                loc = np.full(len(prim), -1, np.int64)
                uniq = d_lo = d_hi = np.zeros(0, np.int64)
            wins = Windows(
                group=prim_group,
                start=ex_start[prim],
                end=ex_end[prim],
                sched_start=ex_sb[prim],
                sched_end=ex_se[prim],
                epoch=loc,
            )
            res = assign(sg, seg_start[sidx], seg_end[sidx], wins, dlo, dhi, d_lo, d_hi)
            primary_clock = (
                np.where(ex_exact[prim], "worker-exact", "worker-hook")
                if is_wk.any()
                else np.full(len(prim), "scheduler", dtype=object)
            )
            first_rule = "worker-window" if is_wk.any() else "scheduler-window"
            half = (dhi - dlo) / 2 / _US
            mid = (dlo + dhi) / 2 / _US
            sel = res.stage > 0
            got = prim[res.window[sel]]
            link_ex[sidx[sel]] = got
            for stg, rname in (
                (WORKER, first_rule),
                (SCHEDULER, "scheduler-window"),
                (ORDER, "thread-order"),
            ):
                m = res.stage == stg
                status.set(sidx[m], "linked")
                rule.set(sidx[m], rname)
            m = res.stage == WORKER
            clock.set_each(sidx[m], primary_clock[res.window[m]])
            ev_off[sidx[m]] = mid
            ev_unc[sidx[m]] = half
            m = res.stage == SCHEDULER
            if m.any():
                e_of = loc[res.window[m]]
                clock.set(sidx[m], "scheduler")
                ev_off[sidx[m]] = (res.sched_lo[e_of] + res.sched_hi[e_of]) / 2 / _US
                ev_unc[sidx[m]] = (res.sched_hi[e_of] - res.sched_lo[e_of]) / 2 / _US
            m = res.stage == ORDER
            clock.set(sidx[m], "thread-order")
            ev_off[sidx[m]] = mid
            ev_unc[sidx[m]] = half
            amb = res.n_left > 1
            status.set(sidx[amb], "ambiguous")
            rule.set(sidx[amb], "several-windows")
            reason.set(sidx[amb], "several tasks of this thread fit under every clock")
            conf = (res.n_left == 0) & (res.n_worker > 0)
            status.set(sidx[conf], "ambiguous")
            rule.set(sidx[conf], "clocks-disagree")
            reason.set(
                sidx[conf], "inside worker windows, but the scheduler windows and order leave none"
            )
            cand_seg.append(sidx[res.cand_seg])
            cand_ex.append(prim[res.cand_win])
            decided = sel | amb | conf
            fitted = res.sched_fit > 0
            if fitted.any():
                sched_note = (
                    f"; scheduler clock: {int(fitted.sum())} delay epoch(s) fitted, Darshan - "
                    "scheduler = "
                    + ", ".join(
                        f"{lo_ / _US:+.6f}..{hi_ / _US:+.6f} s ({f} segments)"
                        for lo_, hi_, f in zip(
                            res.sched_lo[fitted][:5],
                            res.sched_hi[fitted][:5],
                            res.sched_fit[fitted][:5],
                            strict=True,
                        )
                    )
                    + (" ..." if fitted.sum() > 5 else "")
                )
            elif len(uniq):
                sched_note = f"; scheduler clock: {len(uniq)} delay epoch(s), none fitted"

        # ---- what no window holds: the tolerance rule, then the scheduler's nearest window ----
        seg_b = np.searchsorted(sg, np.arange(len(task_threads) + 1))
        win_b = np.searchsorted(grp_sorted, np.arange(len(task_threads) + 1))
        for g in np.unique(sg[~decided]):
            lo_i, hi_i = seg_b[g], seg_b[g + 1]
            todo_g = ~decided[lo_i:hi_i]
            gi = sidx[lo_i:hi_i][todo_g]
            wins_g = ex_sorted[win_b[g] : win_b[g + 1]]
            wk = is_wk[win_b[g] : win_b[g + 1]]
            ss0, se0 = seg_start[gi], seg_end[gi]
            done = np.zeros(len(gi), bool)
            wsel = wins_g[wk]
            if len(wsel):
                ws, we = ex_start[wsel], ex_end[wsel]
                cm = np.maximum.accumulate(we)
                a, b = _near(ss0 - off_us, se0 - off_us, ws, cm, tol)
                k = b - a
                one = k == 1
                status.set(gi[one], "linked")
                rule.set(gi[one], "worker-window-tolerance")
                reason.set(gi[one], f"outside the window by at most {tol_ms}")
                clock.set_each(
                    gi[one], np.where(ex_exact[wsel[a[one]]], "worker-exact", "worker-hook")
                )
                ev_off[gi[one]] = off_us / _US
                ev_unc[gi[one]] = tolerance
                link_ex[gi[one]] = wsel[a[one]]
                many = k > 1
                status.set(gi[many], "ambiguous")
                rule.set(gi[many], "several-windows")
                reason.set(gi[many], f"within {tol_ms} of several task windows")
                mseg, mwin = _pairs(np.flatnonzero(many), a[many], b[many])
                cand_seg.append(gi[mseg])
                cand_ex.append(wsel[mwin])
                done = k >= 1
            ssel = wins_g[~wk]
            todo = np.flatnonzero(~done)
            if len(ssel) and len(todo):
                ws, we = ex_start[ssel], ex_end[ssel]
                cm = np.maximum.accumulate(we)
                t0_, t1_ = ss0[todo] - off_us, se0[todo] - off_us
                a, b = _near(t0_, t1_, ws, cm, stol)
                best, clear = _nearest(t0_, t1_, ws, we, a, b, tol)
                tg = gi[todo]
                okn = (best >= 0) & clear
                status.set(tg[okn], "linked")
                rule.set(tg[okn], "scheduler-nearest")
                clock.set(tg[okn], "scheduler")
                ev_off[tg[okn]] = off_us / _US
                ev_unc[tg[okn]] = scheduler_tolerance
                link_ex[tg[okn]] = ssel[best[okn]]
                amb = (best >= 0) & ~clear
                status.set(tg[amb], "ambiguous")
                rule.set(tg[amb], "several-windows")
                reason.set(tg[amb], "several scheduler windows about equally near")
                mseg, mwin = _pairs(np.flatnonzero(amb), a[amb], b[amb])
                cand_seg.append(tg[mseg])
                cand_ex.append(ssel[mwin])
                done[todo[best >= 0]] = True
            rest = gi[~done]
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
            "offset_note": est.get("note", "") + sched_note,
        }

    # what this run's data cannot decide at all, said once
    wk_log = np.isin(seg_log, [li for li in range(len(logs)) if roles[li] == "worker"])
    no_id = int((wk_log & ~has_pt).sum()) if n else 0
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
    if n and task_threads_known == 0 and n_ran:
        undecidable.append(
            "the run records no thread id for any task (no scheduler 'thread' column): the I/O "
            "of worker processes cannot be linked to tasks; it is unlinked (rule no-task-threads)"
        )
    for text in undecidable:
        log.warning("Darshan I/O: %s", text)
    notes.extend(undecidable)

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
    # A segment linked to an execution happened during it; its corrected times can still lie a
    # little outside the window (the tolerance rule accepts up to `tolerance`, and an offset is
    # an estimate within its uncertainty): they are clipped into the window, so an I/O usage
    # never ends after its execution, and the note says by how much (issue 25).
    if has_link.any() and len(ex):
        li = link_ex[has_link]
        lo = ex_start[li]
        hi = np.where(ex_end_raw.isna().to_numpy()[li], np.iinfo(np.int64).max, ex_end[li])
        s0, e0 = start_c[has_link], end_c[has_link]
        s1, e1 = np.clip(s0, lo, hi), np.clip(e0, lo, hi)
        moved = np.maximum(np.abs(s1 - s0), np.abs(e1 - e0))
        if (moved > 0).any():
            notes.append(
                f"{int((moved > 0).sum())} linked segment(s) lay partly outside their "
                f"execution's window after the clock correction (by at most "
                f"{int(moved.max())} µs, within the linking tolerance or the offset's "
                "uncertainty): their times are clipped into the window"
            )
        start_c[has_link], end_c[has_link] = s1, e1
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
            "clock": clock.column(),
            "clock_offset": ev_off,
            "offset_uncertainty": ev_unc,
            "candidates": _candidates(n, cand_seg, cand_ex, ex, status),
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


def _pairs(rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, window) for every window in [a, b) of each row."""
    r, w = expand(a, b)
    return rows[r], w


def _candidates(
    n: int,
    cand_seg: list[np.ndarray],
    cand_ex: list[np.ndarray],
    ex: pd.DataFrame,
    status: _Labels,
) -> pd.Series:
    """For each ambiguous segment, its candidate task executions as a JSON list of keys (with
    ``#attempt`` when the key ran more than once), in the order they ran."""
    out = pd.Series(pd.array([None] * n, dtype=STR))
    if not cand_seg or not n:
        return out
    sg = np.concatenate(cand_seg)
    ce = np.concatenate(cand_ex)
    amb = status.codes[sg] == status.code("ambiguous")
    sg, ce = sg[amb], ce[amb]
    if not len(sg):
        return out
    pairs = pd.DataFrame({"seg": sg, "ex": ce}).drop_duplicates()
    start = ex["start"].to_numpy()[pairs["ex"].to_numpy()]
    pairs = pairs.assign(start=start).sort_values(["seg", "start", "ex"], kind="stable")
    keys = ex["key"].astype(str).to_numpy()[pairs["ex"].to_numpy()]
    att = ex["attempt"].fillna(0).astype("int64").to_numpy()[pairs["ex"].to_numpy()]
    label = np.where(
        att > 0, np.char.add(np.char.add(keys.astype(str), "#"), att.astype(str)), keys
    )
    texts = (
        pd.Series(label, index=pairs["seg"].to_numpy())
        .groupby(level=0, sort=True)
        .agg(lambda v: json.dumps(list(v), ensure_ascii=False))
    )
    out.iloc[texts.index.to_numpy()] = texts.to_numpy()
    return out


def _scheduler_windows(
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
    lo = np.where(use, se - ex_end - _SCHED_SLACK, 1)
    hi = np.where(use, sb - ex_start + _SCHED_SLACK, 0)
    wcode = pd.factorize(ex["worker"].astype(str))[0] if n else np.zeros(0, np.int64)
    o = np.lexsort((ex_start, wcode))
    ep_o, ep_lo, ep_hi = scheduler_epochs(lo[o], hi[o], wcode[o])
    epoch = np.full(n, -1, np.int64)
    epoch[o] = ep_o
    return sb, se, epoch, ep_lo, ep_hi


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

    def set_each(self, where: np.ndarray, texts: np.ndarray) -> None:
        """One text per position (a few distinct ones)."""
        if np.size(where):
            uniq, inv = np.unique(np.asarray(texts, dtype=str), return_inverse=True)
            codes = np.array([self.code(str(u)) for u in uniq], dtype=np.int32)
            self.codes[where] = codes[inv]

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
                "scheduler-window",
                "thread-order",
                "worker-window-tolerance",
                "scheduler-nearest",
                "no-window",
                "several-windows",
                "clocks-disagree",
            ]
        )
        .sum()
    )
    linked = st == "linked"
    by_clock = {
        str(k): int(v)
        for k, v in links.loc[linked, "clock"].astype(str).value_counts().sort_index().items()
    }
    return {
        "logs": n_logs,
        "segments": int(len(links)),
        "by_clock": by_clock,
        "by_status": by_status,
        "by_rule": by_rule,
        "by_reason": by_reason,
        "task_thread_segments": task_thread,
    }
