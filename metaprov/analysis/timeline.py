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
        queue_wait: the longest queue wait of the run's batch jobs (seconds; None unknown).
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
    queue_wait: float | None = None

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
        queue_wait=queue_wait(records),
    )


def queue_wait(records: RunRecords) -> float | None:
    """The longest time one of the run's batch jobs waited in the queue (start minus
    submission, seconds): part of its startup (None when no job states both)."""
    jobs = records.jobs
    wait = (jobs["started"] - jobs["submitted"]).dt.total_seconds().dropna()
    return float(wait.max()) if len(wait) else None


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
    """Share out the makespan of one run (see the module text).

    The steps: keep the timed execution attempts; when each became ready, its inputs arrived
    and its previous attempt ended (:func:`_readiness`); the intervals it was pending, waiting
    or receiving (:func:`_pending`); the thread slots of the workers alive (:func:`_capacity`);
    the sweep that shares every instant of the window out (:func:`_sweep`); each attempt's
    linked Darshan seconds (:func:`_io_seconds`).
    """
    notes = list(tl.notes)
    ex = tl.executions
    timed = (ex["start"].to_numpy() != NAT_US) & (ex["end"].to_numpy() != NAT_US)
    timed &= ex["end"].to_numpy() >= ex["start"].to_numpy()
    untimed = int((~timed).sum())
    if untimed:
        notes.append(f"{untimed:,} execution attempt(s) without a start or end are not shared out")
    ex = ex[timed].reset_index(drop=True)
    if not len(ex):
        return _empty_blame(tl, ex, untimed, notes)
    s = ex["start"].to_numpy(dtype="int64")
    e = ex["end"].to_numpy(dtype="int64")
    ws, we = int(s.min()), int(e.max())
    run_s = ws if tl.start == NAT_US or tl.start > ws else tl.start
    run_e = we if tl.end == NAT_US or tl.end < we else tl.end
    attempt = ex["attempt"].to_numpy(dtype="int64")
    codes = _key_codes(tl, ex)
    ready = _readiness(tl, ex, codes, s, e, attempt)
    pend = _pending(ready, s, ws, we)
    cap = _capacity(tl, ex, s, e, ws, we, notes)
    sw = _sweep(s, e, pend, cap, ws, we)
    share = sw.integral(sw.run, s, e, np.ones(len(ex), bool))
    wait = sw.integral(sw.wait, pend.wa, pend.wb, pend.wok)
    xfer = sw.integral(sw.xfer, pend.xa, pend.xb, pend.xok)
    out = ex.assign(
        duration=(e - s) / 1e6,
        share=share,
        wait=wait,
        xfer=xfer,
        io_s=_io_seconds(tl, codes, attempt),
        incoming=ready.incoming,
        capacity=sw.capacity_at(s),
        retry_wait=~ready.first,
    )
    pending = wait + xfer
    total_dt = float(sw.dt.sum())
    return Blame(
        timeline=tl,
        makespan=(run_e - run_s) / 1e6,
        startup=(ws - run_s) / 1e6,
        tail=(run_e - we) / 1e6,
        window=(we - ws) / 1e6,
        gap=sw.gap,
        executions=out,
        capacity_known=cap.known,
        untimed=untimed,
        concurrency=float((sw.b * sw.dt).sum() / total_dt) if total_dt else 0.0,
        slots=float((sw.P * sw.dt).sum() / total_dt) if total_dt else 0.0,
        notes=notes,
        latency=float(pending.sum() / max(1, int((pending > 0).sum()))),
    )


def _empty_blame(tl: Timeline, ex: pd.DataFrame, untimed: int, notes: list[str]) -> Blame:
    """A run without a timed execution: its whole span is startup."""
    run_s, run_e = tl.start, tl.end
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


@dataclass
class _Codes:
    """Every key of the run's tables as one integer code (hashed once: joins are then integer
    lookups): ``ck`` of the executions, ``cdk``/``cdd`` of the dependencies' keys and
    dependencies, ``ctk`` of the finished transfers (``tr``), ``csk`` of the submitted keys,
    ``cik`` of the linked I/O; ``U`` codes in all."""

    ck: np.ndarray
    cdk: np.ndarray
    cdd: np.ndarray
    ctk: np.ndarray
    csk: np.ndarray
    cik: np.ndarray
    U: int
    tr: pd.DataFrame


def _key_codes(tl: Timeline, ex: pd.DataFrame) -> _Codes:
    deps = tl.dependencies
    tr = tl.transfers
    if len(tr):
        tr = tr[(tr["stop"].to_numpy() != NAT_US) & tr["destination"].notna().to_numpy()]
    keys = ex["key"].to_numpy(dtype=object)
    dk, dd = _obj(deps["key"]), _obj(deps["dependency"])
    tk = _obj(tr["key"])
    sk = np.asarray(tl.submitted.index, dtype=object)
    ik = _obj(tl.io["key"]) if tl.has_io and len(tl.io) else np.zeros(0, dtype=object)
    codes, uniq = pd.factorize(np.concatenate([keys, dk, dd, tk, sk, ik]))
    cuts = np.cumsum([len(keys), len(dk), len(dd), len(tk), len(sk)])
    ck, cdk, cdd, ctk, csk, cik = np.split(codes, cuts)
    return _Codes(ck, cdk, cdd, ctk, csk, cik, len(uniq), tr)


@dataclass
class _Ready:
    """Per execution attempt: ``ready`` (the last end of its dependencies; a root's graph
    submission; NAT_US when unknown), ``arrival`` (the last of its inputs moved to its worker),
    ``incoming`` (bytes moved to it), ``first`` (the key's first attempt) and ``prev_end`` (a
    retry's previous attempt's end)."""

    ready: np.ndarray
    arrival: np.ndarray
    incoming: np.ndarray
    first: np.ndarray
    prev_end: np.ndarray


def _readiness(
    tl: Timeline, ex: pd.DataFrame, c: _Codes, s: np.ndarray, e: np.ndarray, attempt: np.ndarray
) -> _Ready:
    n = len(ex)
    last_end = np.full(c.U, NAT_US, dtype="int64")
    np.maximum.at(last_end, c.ck, e)
    # the first attempt of each key (smallest attempt number, then earliest start)
    order = np.lexsort((s, attempt, c.ck))
    ks = c.ck[order]
    is_first = np.r_[True, ks[1:] != ks[:-1]] if n else np.zeros(0, bool)
    first = np.zeros(n, bool)
    first[order[is_first]] = True
    first_row = np.full(c.U, -1, dtype="int64")
    first_row[c.ck[first]] = np.flatnonzero(first)
    ready = np.full(n, NAT_US, dtype="int64")
    arrival = np.full(n, NAT_US, dtype="int64")
    incoming = np.zeros(n, dtype="int64")
    if tl.has_transitions:
        if len(c.cdk):
            ok = (last_end[c.cdd] != NAT_US) & (first_row[c.cdk] >= 0)
            rows, dep_c = first_row[c.cdk[ok]], c.cdd[ok]
            np.maximum.at(ready, rows, last_end[dep_c])
            if len(c.ctk):
                _arrivals(ex, c, rows, dep_c, arrival, incoming)
        roots = first & (ready == NAT_US)
        if len(c.csk):
            sub_t = np.full(c.U, NAT_US, dtype="int64")
            sub_t[c.csk] = tl.submitted.to_numpy(dtype="int64")
            idx = np.flatnonzero(roots)
            ready[idx] = sub_t[c.ck[idx]]
    # later attempts wait from the previous attempt's end (a retry)
    prev_end = np.full(n, NAT_US, dtype="int64")
    if (~first).any():
        same = np.r_[False, ks[1:] == ks[:-1]]
        pe = e[order]
        prev = np.r_[NAT_US, pe[:-1]]
        prev_end[order[same]] = prev[same]
    return _Ready(ready, arrival, incoming, first, prev_end)


def _arrivals(
    ex: pd.DataFrame,
    c: _Codes,
    rows: np.ndarray,
    dep_c: np.ndarray,
    arrival: np.ndarray,
    incoming: np.ndarray,
) -> None:
    """Data moved to a task's worker: the transfers of its dependencies (``dep_c``, for the
    attempts ``rows``) to that worker set ``arrival`` (their last stop) and ``incoming``."""
    n, tr = len(ex), c.tr
    wcodes, _ = pd.factorize(np.concatenate([_obj(ex["worker"]), _obj(tr["destination"])]))
    W = int(wcodes.max()) + 1
    ex_w, tr_w = wcodes[:n], wcodes[n:]
    pair_tr = c.ctk.astype("int64") * W + tr_w
    g = (
        pd.DataFrame(
            {"pair": pair_tr, "stop": tr["stop"].to_numpy(), "nbytes": tr["nbytes"].to_numpy()}
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


@dataclass
class _Pending:
    """The intervals an attempt was pending, clipped to the window ``[ws, we]``:
    ``[xa, xb)`` its inputs were moving (where ``xok``), ``[wa, wb)`` it waited (``wok``)."""

    xok: np.ndarray
    xa: np.ndarray
    xb: np.ndarray
    wok: np.ndarray
    wa: np.ndarray
    wb: np.ndarray


def _pending(r: _Ready, s: np.ndarray, ws: int, we: int) -> _Pending:
    def clip(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ok = (a != NAT_US) & (b != NAT_US)
        a2 = np.where(ok, np.clip(a, ws, we), 0)
        b2 = np.where(ok, np.clip(b, ws, we), 0)
        ok &= b2 > a2
        return ok, a2, b2

    ready, arrival = r.ready, r.arrival
    xok, xa, xb = clip(ready, np.minimum(np.where(arrival == NAT_US, ready, arrival), s))
    wa = np.where(
        r.first, np.where(arrival != NAT_US, np.maximum(ready, arrival), ready), r.prev_end
    )
    wok, wa, wb = clip(wa, s)
    return _Pending(xok, xa, xb, wok, wa, wb)


@dataclass
class _Capacity:
    """The workers' thread slots: ``threads`` of each worker alive from ``added`` to
    ``removed`` (clipped to the window); ``known``: every worker's thread count was recorded."""

    threads: np.ndarray
    added: np.ndarray
    removed: np.ndarray
    known: bool


def _capacity(
    tl: Timeline,
    ex: pd.DataFrame,
    s: np.ndarray,
    e: np.ndarray,
    ws: int,
    we: int,
    notes: list[str],
) -> _Capacity:
    n = len(ex)
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
    return _Capacity(threads, added, removed, capacity_known)


@dataclass
class _Sweep:
    """The window cut at every interval end: ``times``, segment lengths ``dt`` (seconds), slots
    ``P`` and running tasks ``b`` per segment, the running integrals of the rates at which a
    running, waiting and receiving attempt is blamed (``run``, ``wait``, ``xfer``), and the
    ``gap`` (seconds when nothing ran, waited or received)."""

    times: np.ndarray
    dt: np.ndarray
    P: np.ndarray
    b: np.ndarray
    run: np.ndarray
    wait: np.ndarray
    xfer: np.ndarray
    gap: float

    def integral(self, R: np.ndarray, a: np.ndarray, b: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """Per interval ``[a, b)`` (where ``ok``): the integral of the rate ``R`` over it."""
        out = np.zeros(len(a))
        if ok.any():
            t = self.times
            out[ok] = R[np.searchsorted(t, b[ok])] - R[np.searchsorted(t, a[ok])]
        return out

    def capacity_at(self, s: np.ndarray) -> np.ndarray:
        """The thread slots when each attempt started."""
        P = self.P
        if not len(P):
            return np.ones(len(s))
        cap_at = np.r_[P, P[-1:]]
        return cap_at[np.clip(np.searchsorted(self.times, s, side="right") - 1, 0, len(P) - 1)]


def _sweep(s: np.ndarray, e: np.ndarray, pd_: _Pending, cap: _Capacity, ws: int, we: int) -> _Sweep:
    wok, xok = pd_.wok, pd_.xok
    times = np.unique(
        np.concatenate(
            [
                [ws, we],
                s,
                e,
                pd_.xa[xok],
                pd_.xb[xok],
                pd_.wa[wok],
                pd_.wb[wok],
                cap.added,
                cap.removed,
            ]
        )
    )
    times = times[(times >= ws) & (times <= we)]
    dt = np.diff(times).astype("float64") / 1e6
    run_ = _count(times, s, e, None)
    wait_ = _count(times, pd_.wa[wok], pd_.wb[wok], None)
    xfer_ = _count(times, pd_.xa[xok], pd_.xb[xok], None)
    slots = _count(times, cap.added, cap.removed, cap.threads)
    P = np.maximum(slots, run_).astype("float64")
    b = run_.astype("float64")
    nw, nx = wait_.astype("float64"), xfer_.astype("float64")
    P[P == 0] = 1.0
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
    return _Sweep(
        times=times,
        dt=dt,
        P=P,
        b=b,
        run=np.r_[0.0, np.cumsum(r_run * dt)],
        wait=np.r_[0.0, np.cumsum(r_wait * dt)],
        xfer=np.r_[0.0, np.cumsum(r_xfer * dt)],
        gap=float((gap_rate * dt).sum()),
    )


def _io_seconds(tl: Timeline, c: _Codes, attempt: np.ndarray) -> np.ndarray:
    """Per execution attempt: the seconds of Darshan I/O linked to it."""
    io_s = np.zeros(len(c.ck))
    if not len(c.cik):
        return io_s
    # seconds per (key, attempt): pair codes, then a lookup for each execution
    A = int(max(attempt.max(initial=0), tl.io["attempt"].max())) + 1
    per = (
        pd.Series(tl.io["seconds"].to_numpy(dtype="float64"))
        .groupby(c.cik.astype("int64") * A + tl.io["attempt"].to_numpy(dtype="int64"))
        .sum()
    )
    pk = per.index.to_numpy()
    want = c.ck.astype("int64") * A + attempt
    pos = np.clip(np.searchsorted(pk, want), 0, len(pk) - 1)
    hit = pk[pos] == want
    io_s[hit] = per.to_numpy()[pos[hit]]
    return io_s


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
