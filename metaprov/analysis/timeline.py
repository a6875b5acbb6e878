"""Where the time of one run went: every second of its makespan blamed on a task, a wait or a gap.

Input: a :class:`Timeline`, the few tables a comparison needs from one run, made from its records
(:func:`timeline_from_records`) or read out of a store (:mod:`metaprov.queries.compare`): the
same columns either way, so both give the same numbers. Output: a :class:`Blame`, the run's
makespan cut into parts that add up to it exactly (see ``docs/compare.md``):

``makespan = startup + window + tail`` where the window runs from the first task's start to the
last task's end, and every instant of the window is shared out as follows. The cluster has
``P(t)`` thread slots (threads of the workers alive; never fewer than the tasks running, so a
run whose thread counts are unknown still adds up). ``b(t)`` slots run a task; the idle slots
``I = P - b`` are blamed first on tasks that were ready but not running (*waiting*, as many as
there are such tasks), then on tasks whose inputs were still moving between workers
(*transfers*), and the remaining idle slots (*starvation*: nothing was ready to use them) on the
tasks that were running, which held everything else up; when nothing runs they go to the waiting
and receiving tasks, and when nothing runs or waits either, to the *gap*. Each slot is worth
``1/P`` seconds of wall time, so at every instant the parts add up to the instant and over the
window to the window. Per task this gives its *share* of the makespan; summed by prefix, the
compute of a prefix and the share it held the run up (``share = compute x kappa`` with ``kappa``
its effective 1/concurrency), which :mod:`metaprov.analysis.compare` telescopes between runs.

The sweep is vectorised: the interval ends are sorted once, the counts per segment are running
sums, and each task's share is a difference of a running integral looked up at its two ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from metaprov.analysis.environment import software_table
from metaprov.timeutil import NAT_US, utc_to_us

if TYPE_CHECKING:
    from metaprov.records import RunRecords

#: Columns of :attr:`Timeline.executions` (times are int64 microseconds since the epoch, UTC).
EXECUTION_COLUMNS = ["key", "prefix", "attempt", "worker", "thread", "start", "end", "ok"]
TRANSFER_COLUMNS = ["key", "source", "destination", "start", "stop", "nbytes"]
WORKER_COLUMNS = ["address", "host", "threads", "added", "removed"]
IO_COLUMNS = ["key", "attempt", "path", "op", "bytes", "seconds"]


@dataclass
class Timeline:
    """What a comparison needs from one run.

    Attributes:
        label: how the run is named in answers (its directory name or run name).
        run_id: the run's id.
        start, end: the run's span (int64 microseconds since the epoch, UTC).
        executions: one row per execution attempt: key, prefix, attempt, worker, thread
            (UInt64, NA when unknown), start, end (int64 µs), ok (the attempt gave a result).
        dependencies: key, dependency (both keys).
        transfers: key, source, destination, start, stop (int64 µs), nbytes.
        workers: address, host, threads (NA unknown), added, removed (int64 µs, NAT_US unknown).
        submitted: key -> when its graph reached the scheduler (int64 µs), for tasks without
            dependencies (their readiness).
        io: linked Darshan I/O per execution: key, attempt, path, op, bytes, seconds.
        has_io: Darshan I/O was linked for this run.
        has_transitions: the run has worker transitions (readiness and waiting are measured).
        notes: what the timeline could not hold, and why.
        software: the run's packages, one row per process and package: process, role,
            manager, name, version (None: the run recorded no environment).
    """

    label: str
    run_id: str
    start: int
    end: int
    executions: pd.DataFrame
    dependencies: pd.DataFrame
    transfers: pd.DataFrame
    workers: pd.DataFrame
    submitted: pd.Series
    io: pd.DataFrame
    has_io: bool = False
    has_transitions: bool = True
    notes: list[str] = field(default_factory=list)
    software: pd.DataFrame | None = None

    @property
    def makespan(self) -> float:
        return (self.end - self.start) / 1e6


def _host(address: pd.Series) -> pd.Series:
    s = address.astype(object).where(address.notna(), "").astype(str)
    return s.str.replace(r"^[a-z]+://", "", regex=True).str.replace(r":\d+$", "", regex=True)


def timeline_from_records(records: RunRecords, label: str | None = None) -> Timeline:
    """The :class:`Timeline` of a run's records (linked Darshan I/O included when present)."""
    from pathlib import Path

    notes: list[str] = []
    tasks = records.tasks.dropna(subset=["key"]).drop_duplicates("key")
    prefix_of = pd.Series(
        tasks["prefix"].astype(object).to_numpy(), index=tasks["key"].astype(str).to_numpy()
    )
    ex = records.executions.dropna(subset=["key"])
    keys = ex["key"].astype(str)
    prefix = pd.Series(prefix_of.reindex(keys.to_numpy()).to_numpy(), dtype=object)
    prefix = prefix.where(prefix.notna(), "?")
    start, end = utc_to_us(ex["start"]), utc_to_us(ex["end"])
    outcome = ex["outcome"].astype(object).where(ex["outcome"].notna(), "")
    executions = pd.DataFrame(
        {
            "key": keys.to_numpy(dtype=object),
            "prefix": prefix.to_numpy(dtype=object),
            "attempt": ex["attempt"].fillna(0).astype("int64").to_numpy(),
            "worker": ex["worker"].astype(object).where(ex["worker"].notna(), "").to_numpy(),
            "thread": ex["thread"].astype("UInt64").to_numpy(),
            "start": start,
            "end": end,
            "ok": (outcome == "memory").to_numpy(),
        }
    )
    dep = records.dependencies.dropna(subset=["key", "dependency"])
    dependencies = pd.DataFrame(
        {
            "key": dep["key"].astype(str).to_numpy(),
            "dependency": dep["dependency"].astype(str).to_numpy(),
        }
    ).drop_duplicates(ignore_index=True)
    tr = records.transfers.dropna(subset=["key"])
    transfers = pd.DataFrame(
        {
            "key": tr["key"].astype(str).to_numpy(),
            "source": tr["source"].astype(object).to_numpy(),
            "destination": tr["destination"].astype(object).to_numpy(),
            "start": utc_to_us(tr["start"]),
            "stop": utc_to_us(tr["stop"]),
            "nbytes": tr["nbytes"].fillna(0).astype("int64").to_numpy(),
        }
    )
    w = records.workers.dropna(subset=["address"]).drop_duplicates("address")
    workers = pd.DataFrame(
        {
            "address": w["address"].astype(str).to_numpy(),
            "host": _host(w["address"]).to_numpy(),
            "threads": w["threads"].astype("Int64").to_numpy(),
            "added": utc_to_us(w["added"]),
            "removed": utc_to_us(w["removed"]),
        }
    )
    gtime = pd.Series(utc_to_us(records.graphs["time"]), index=records.graphs["graph"].to_numpy())
    has_graph = tasks["graph"].notna().to_numpy()
    submitted = pd.Series(
        gtime.reindex(tasks["graph"][has_graph].astype("int64").to_numpy()).to_numpy(),
        index=tasks["key"][has_graph].astype(str).to_numpy(),
        dtype="float64",
    ).dropna()
    submitted = submitted.astype("int64")
    submitted = submitted[submitted != NAT_US]
    io, has_io = _io_of(records)
    first, last = records.span
    s_us = (
        int(utc_to_us(pd.Series([first], dtype="datetime64[us, UTC]"))[0])
        if first is not None
        else NAT_US
    )
    e_us = (
        int(utc_to_us(pd.Series([last], dtype="datetime64[us, UTC]"))[0])
        if last is not None
        else NAT_US
    )
    # worker times come from worker transitions (ready -> executing -> memory)
    has_transitions = bool((records.executions["time_source"].astype(object) == "worker").any())
    if not has_transitions:
        notes.append(
            "no worker transitions: task times are the scheduler's begins/ends and readiness is "
            "not known, so waiting cannot be told from compute"
        )
    if len(executions) and executions["thread"].isna().all():
        notes.append(
            "no thread ids: per-thread lanes are unknown; capacity comes from the workers' "
            "thread counts or, without them, the most tasks seen running at once"
        )
    name = label or Path(str(records.path)).name or records.run_id
    # one order whatever the source (the store's answers come in no particular order)
    executions = executions.sort_values(["key", "attempt", "start"], kind="stable").reset_index(
        drop=True
    )
    return Timeline(
        label=name,
        run_id=str(records.run_id),
        start=s_us,
        end=e_us,
        executions=executions,
        dependencies=dependencies,
        transfers=transfers,
        workers=workers,
        submitted=submitted,
        io=io,
        has_io=has_io and len(io) > 0,
        has_transitions=has_transitions,
        notes=notes,
        software=software_table(records) if len(records.packages) else None,
    )


def _io_of(records: RunRecords) -> tuple[pd.DataFrame, bool]:
    """Linked Darshan segments as (key, attempt, path, op, bytes, seconds)."""
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in IO_COLUMNS})
    if records.io is None or records.darshan is None:
        return empty, False
    links = records.io.segments
    segs = records.darshan.segments
    if not len(links) or not len(segs):
        return empty, True
    ok = (links["status"].astype(object) == "linked").to_numpy().copy()
    rows = links["segment"].to_numpy(dtype="int64", na_value=-1)
    ok &= (rows >= 0) & (rows < len(segs))
    lk = links[ok]
    sg = segs.iloc[rows[ok]]
    s, e = utc_to_us(lk["start"]), utc_to_us(lk["end"])
    secs = np.where((s != NAT_US) & (e != NAT_US), (e - s) / 1e6, 0.0)
    return (
        pd.DataFrame(
            {
                "key": lk["key"].astype(str).to_numpy(),
                "attempt": lk["attempt"].fillna(0).astype("int64").to_numpy(),
                "path": sg["path"].astype(object).to_numpy(),
                "op": sg["op"].astype(object).to_numpy(),
                "bytes": sg["length"].fillna(0).astype("int64").to_numpy(),
                "seconds": secs,
            }
        ),
        True,
    )


# ---------------------------------------------------------------------------------------------


@dataclass
class Blame:
    """One run's makespan shared out (see the module text); every part in seconds.

    Attributes:
        timeline: the run.
        makespan, startup, tail, window, gap: seconds (``makespan = startup + window + tail``,
            ``window = sum of shares + gap``).
        executions: the timed execution attempts with ``duration``, ``share`` (seconds of the
            window blamed on the attempt while it ran), ``wait`` (blamed on it while it was ready
            and not running), ``xfer`` (while its inputs moved to its worker), ``io_s`` (linked
            Darshan seconds), ``incoming`` (bytes moved to it), ``capacity`` (thread slots when
            it started).
        capacity_known: the thread counts of every worker were known.
        untimed: execution attempts without a start or end (not shared out).
        concurrency: mean tasks running at once over the window.
        slots: mean thread slots over the window.
        latency: mean seconds of the makespan a dispatch cost (waiting and transfer shares over
            the executions that had any): how sluggish the scheduler and workers were, the unit
            of the noise of single intervals (startup, tail, gap).
    """

    timeline: Timeline
    makespan: float
    startup: float
    tail: float
    window: float
    gap: float
    executions: pd.DataFrame
    capacity_known: bool
    untimed: int
    concurrency: float
    slots: float
    notes: list[str] = field(default_factory=list)
    latency: float = 0.0

    @property
    def parts_total(self) -> float:
        """startup + tail + gap + every share, wait and transfer (= makespan up to rounding)."""
        ex = self.executions
        return float(
            self.startup
            + self.tail
            + self.gap
            + ex["share"].sum()
            + ex["wait"].sum()
            + ex["xfer"].sum()
        )


def blame(tl: Timeline) -> Blame:
    """Share out the makespan of one run (see the module text)."""
    notes = list(tl.notes)
    ex = tl.executions
    timed = (ex["start"].to_numpy() != NAT_US) & (ex["end"].to_numpy() != NAT_US)
    timed &= ex["end"].to_numpy() >= ex["start"].to_numpy()
    untimed = int((~timed).sum())
    if untimed:
        notes.append(f"{untimed:,} execution attempt(s) without a start or end are not shared out")
    ex = ex[timed].reset_index(drop=True)
    run_s, run_e = tl.start, tl.end
    if not len(ex):
        span = max(0.0, (run_e - run_s) / 1e6) if run_s != NAT_US and run_e != NAT_US else 0.0
        empty = ex.assign(
            duration=np.zeros(0),
            share=np.zeros(0),
            wait=np.zeros(0),
            xfer=np.zeros(0),
            io_s=np.zeros(0),
            incoming=np.zeros(0, dtype="int64"),
            capacity=np.zeros(0),
        )
        return Blame(tl, span, span, 0.0, 0.0, 0.0, empty, False, untimed, 0.0, 0.0, notes)
    s = ex["start"].to_numpy(dtype="int64")
    e = ex["end"].to_numpy(dtype="int64")
    ws, we = int(s.min()), int(e.max())
    if run_s == NAT_US or run_s > ws:
        run_s = ws
    if run_e == NAT_US or run_e < we:
        run_e = we
    n = len(ex)
    keys = ex["key"].to_numpy(dtype=object)
    attempt = ex["attempt"].to_numpy(dtype="int64")

    # -- readiness: the last end of every dependency; a root's graph submission -----------------
    # every key as an integer code (hash once; joins are then integer lookups)
    deps = tl.dependencies
    tr = tl.transfers
    if len(tr):
        tr = tr[(tr["stop"].to_numpy() != NAT_US) & tr["destination"].notna().to_numpy()]
    dk, dd = _obj(deps["key"]), _obj(deps["dependency"])
    tk = _obj(tr["key"])
    sk = np.asarray(tl.submitted.index, dtype=object)
    ik = _obj(tl.io["key"]) if tl.has_io and len(tl.io) else np.zeros(0, dtype=object)
    codes, uniq = pd.factorize(np.concatenate([keys, dk, dd, tk, sk, ik]))
    cuts = np.cumsum([n, len(dk), len(dd), len(tk), len(sk)])
    ck, cdk, cdd, ctk, csk, cik = np.split(codes, cuts)
    U = len(uniq)
    last_end = np.full(U, NAT_US, dtype="int64")
    np.maximum.at(last_end, ck, e)
    # the first attempt of each key (smallest attempt number, then earliest start)
    order = np.lexsort((s, attempt, ck))
    ks = ck[order]
    is_first = np.r_[True, ks[1:] != ks[:-1]] if n else np.zeros(0, bool)
    first = np.zeros(n, bool)
    first[order[is_first]] = True
    first_row = np.full(U, -1, dtype="int64")
    first_row[ck[first]] = np.flatnonzero(first)
    ready = np.full(n, NAT_US, dtype="int64")
    arrival = np.full(n, NAT_US, dtype="int64")
    incoming = np.zeros(n, dtype="int64")
    if tl.has_transitions:
        if len(dk):
            ok = (last_end[cdd] != NAT_US) & (first_row[cdk] >= 0)
            rows, dep_c = first_row[cdk[ok]], cdd[ok]
            np.maximum.at(ready, rows, last_end[dep_c])
            # data moved to the task's worker: transfers of its dependencies to that worker
            if len(tk):
                wcodes, _ = pd.factorize(
                    np.concatenate([_obj(ex["worker"]), _obj(tr["destination"])])
                )
                W = int(wcodes.max()) + 1
                ex_w, tr_w = wcodes[:n], wcodes[n:]
                pair_tr = ctk.astype("int64") * W + tr_w
                g = (
                    pd.DataFrame(
                        {
                            "pair": pair_tr,
                            "stop": tr["stop"].to_numpy(),
                            "nbytes": tr["nbytes"].to_numpy(),
                        }
                    )
                    .groupby("pair", sort=True)
                    .agg(stop=("stop", "max"), nbytes=("nbytes", "sum"))
                )
                keys_sorted = g.index.to_numpy()
                pair_dep = dep_c.astype("int64") * W + ex_w[rows]
                pos = np.searchsorted(keys_sorted, pair_dep)
                pos = np.clip(pos, 0, max(len(keys_sorted) - 1, 0))
                hit = keys_sorted[pos] == pair_dep if len(keys_sorted) else np.zeros(0, bool)
                if hit.any():
                    np.maximum.at(arrival, rows[hit], g["stop"].to_numpy()[pos[hit]])
                    np.add.at(incoming, rows[hit], g["nbytes"].to_numpy()[pos[hit]])
        roots = first & (ready == NAT_US)
        if len(sk):
            sub_t = np.full(U, NAT_US, dtype="int64")
            sub_t[csk] = tl.submitted.to_numpy(dtype="int64")
            idx = np.flatnonzero(roots)
            ready[idx] = sub_t[ck[idx]]
    # later attempts wait from the previous attempt's end (a retry)
    prev_end = np.full(n, NAT_US, dtype="int64")
    if (~first).any():
        ord_e = order
        same = np.r_[False, ks[1:] == ks[:-1]]
        pe = e[ord_e]
        prev = np.r_[NAT_US, pe[:-1]]
        prev_end[ord_e[same]] = prev[same]

    # pending intervals, clipped to the window: [ready, arrival) transfer, [.., start) waiting
    def clip(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ok = (a != NAT_US) & (b != NAT_US)
        a2 = np.where(ok, np.clip(a, ws, we), 0)
        b2 = np.where(ok, np.clip(b, ws, we), 0)
        ok &= b2 > a2
        return ok, a2, b2

    xa, xb = ready, np.minimum(np.where(arrival == NAT_US, ready, arrival), s)
    xok, xa, xb = clip(xa, xb)
    wa = np.where(first, np.where(arrival != NAT_US, np.maximum(ready, arrival), ready), prev_end)
    wok, wa, wb = clip(wa, s)
    retry_wait = ~first

    # -- capacity: threads of the workers alive -------------------------------------------------
    workers = tl.workers
    exw = ex["worker"].to_numpy(dtype=object)
    addrs = pd.unique(np.concatenate([workers["address"].to_numpy(dtype=object), exw]))
    wt = workers.set_index("address")["threads"].reindex(addrs)
    known = wt.notna().to_numpy()
    capacity_known = bool(known.all()) and len(workers) > 0
    if not known.all():
        # the most tasks seen running at once on each such worker
        code = pd.Index(addrs).get_indexer(exw)
        t_all = np.concatenate([s, e])
        d_all = np.concatenate([np.ones(n, "int64"), -np.ones(n, "int64")])
        c_all = np.concatenate([code, code])
        o = np.lexsort((d_all, t_all, c_all))  # ends before starts at the same time
        cs = pd.Series(d_all[o]).groupby(c_all[o]).cumsum()
        peak = cs.groupby(c_all[o]).max().reindex(range(len(addrs))).fillna(0).to_numpy()
        fill = np.maximum(peak, 1).astype("int64")
        vals = wt.to_numpy(dtype="float64", na_value=np.nan)
        vals = np.where(np.isnan(vals), fill, vals)
        wt = pd.Series(vals, index=addrs)
        missing = int((~known).sum())
        notes.append(
            f"{missing} worker(s) without a thread count: their capacity is the most tasks "
            "seen running on them at once"
        )
    threads = wt.to_numpy(dtype="float64").astype("int64")
    wa_ = workers.set_index("address").reindex(addrs)
    added = wa_["added"].to_numpy(dtype="float64", na_value=np.nan)
    removed = wa_["removed"].to_numpy(dtype="float64", na_value=np.nan)
    added = np.where(np.isnan(added) | (added == NAT_US), ws, added).astype("int64")
    removed = np.where(np.isnan(removed) | (removed == NAT_US), we, removed).astype("int64")
    added, removed = np.clip(added, ws, we), np.clip(removed, ws, we)
    # a worker that ran tasks is alive while it ran them, whatever its added/removed say
    if n:
        code = pd.Index(addrs).get_indexer(exw)
        lo = pd.Series(s).groupby(code).min().reindex(range(len(addrs))).to_numpy(dtype="float64")
        hi = pd.Series(e).groupby(code).max().reindex(range(len(addrs))).to_numpy(dtype="float64")
        has = ~np.isnan(lo)
        added[has] = np.minimum(added[has], lo[has].astype("int64"))
        removed[has] = np.maximum(removed[has], hi[has].astype("int64"))

    # -- the sweep ------------------------------------------------------------------------------
    times = np.unique(
        np.concatenate([[ws, we], s, e, xa[xok], xb[xok], wa[wok], wb[wok], added, removed])
    )
    times = times[(times >= ws) & (times <= we)]
    dt = np.diff(times).astype("float64") / 1e6
    run_ = _count(times, s, e, None)
    wait_ = _count(times, wa[wok], wb[wok], None)
    xfer_ = _count(times, xa[xok], xb[xok], None)
    cap = _count(times, added, removed, threads)
    P = np.maximum(cap, run_).astype("float64")
    b = run_.astype("float64")
    nw, nx = wait_.astype("float64"), xfer_.astype("float64")
    zero = P == 0
    P[zero] = 1.0
    idle = P - b
    w_slots = np.minimum(idle, nw)
    x_slots = np.minimum(idle - w_slots, nx)
    starve = idle - w_slots - x_slots
    running = b > 0
    pending = nw + nx
    to_pending = (~running) & (pending > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r_run = np.where(running, (1.0 + np.where(running, starve / b, 0.0)) / P, 0.0)
        spread = np.where(to_pending, starve / np.where(pending > 0, pending, 1.0), 0.0)
        r_wait = np.where(nw > 0, (w_slots / np.where(nw > 0, nw, 1.0) + spread) / P, 0.0)
        r_xfer = np.where(nx > 0, (x_slots / np.where(nx > 0, nx, 1.0) + spread) / P, 0.0)
    gap_rate = np.where((~running) & (pending == 0), 1.0, 0.0)
    R_run = np.r_[0.0, np.cumsum(r_run * dt)]
    R_wait = np.r_[0.0, np.cumsum(r_wait * dt)]
    R_xfer = np.r_[0.0, np.cumsum(r_xfer * dt)]
    gap = float((gap_rate * dt).sum())

    def integral(R: np.ndarray, a: np.ndarray, bb: np.ndarray, ok: np.ndarray) -> np.ndarray:
        out = np.zeros(n)
        if ok.any():
            out[ok] = R[np.searchsorted(times, bb[ok])] - R[np.searchsorted(times, a[ok])]
        return out

    share = integral(R_run, s, e, np.ones(n, bool))
    wait = integral(R_wait, wa, wb, wok)
    xfer = integral(R_xfer, xa, xb, xok)
    io_s = np.zeros(n)
    if len(cik):
        # seconds per (key, attempt): pair codes, then a lookup for each execution
        A = int(max(attempt.max(initial=0), tl.io["attempt"].max())) + 1
        per = (
            pd.Series(tl.io["seconds"].to_numpy(dtype="float64"))
            .groupby(cik.astype("int64") * A + tl.io["attempt"].to_numpy(dtype="int64"))
            .sum()
        )
        pk = per.index.to_numpy()
        want = ck.astype("int64") * A + attempt
        pos = np.clip(np.searchsorted(pk, want), 0, len(pk) - 1)
        hit = pk[pos] == want
        io_s[hit] = per.to_numpy()[pos[hit]]
    cap_at = np.r_[P, P[-1:]] if len(P) else np.ones(1)
    capacity = cap_at[np.clip(np.searchsorted(times, s, side="right") - 1, 0, max(len(P) - 1, 0))]
    out = ex.assign(
        duration=(e - s) / 1e6,
        share=share,
        wait=wait,
        xfer=xfer,
        io_s=io_s,
        incoming=incoming,
        capacity=capacity if len(P) else np.ones(n),
        retry_wait=retry_wait,
    )
    window = (we - ws) / 1e6
    total_dt = float(dt.sum())
    pend = wait + xfer
    latency = float(pend.sum() / max(1, int((pend > 0).sum())))
    return Blame(
        timeline=tl,
        makespan=(run_e - run_s) / 1e6,
        startup=(ws - run_s) / 1e6,
        tail=(run_e - we) / 1e6,
        window=window,
        gap=gap,
        executions=out,
        capacity_known=capacity_known,
        untimed=untimed,
        concurrency=float((b * dt).sum() / total_dt) if total_dt else 0.0,
        slots=float((P * dt).sum() / total_dt) if total_dt else 0.0,
        notes=notes,
        latency=latency,
    )


def _obj(s: pd.Series) -> np.ndarray:
    """A text column as a numpy object array (hashing it is then fast, whatever its dtype)."""
    return s.to_numpy(dtype=object, na_value=None)


def _count(
    times: np.ndarray, a: np.ndarray, b: np.ndarray, weight: np.ndarray | None
) -> np.ndarray:
    """How many intervals [a, b) (weighted) cover each segment between consecutive ``times``."""
    m = len(times)
    if not len(a):
        return np.zeros(max(m - 1, 0), dtype="int64")
    w = None if weight is None else np.asarray(weight, "float64")
    d = np.bincount(np.searchsorted(times, a), weights=w, minlength=m + 1)
    d = d - np.bincount(np.searchsorted(times, b), weights=w, minlength=m + 1)
    return np.rint(np.cumsum(d)[: max(m - 1, 0)]).astype("int64")


__all__ = ["Blame", "Timeline", "blame", "timeline_from_records"]
