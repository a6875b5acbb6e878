"""Where the time of one run went: every second of its makespan blamed on a task, a wait or a gap.

Input: a :class:`Timeline`, the few tables a comparison needs from one run, made from its records
(:func:`timeline_from_records`) or read out of a store (:mod:`metaprov.queries.compare`): the
same columns either way, so both give the same numbers. Output: a :class:`Blame`, the run's
makespan cut into parts that add up to it exactly (see ``docs/compare.md``):

``makespan = startup + window + tail`` where the window runs from the first task's start to the
last task's end, and every instant of the window is shared out as follows. The cluster has
``P(t)`` thread slots (threads of the workers alive; never fewer than the tasks running, so a
run whose thread counts are unknown still adds up). ``b(t)`` slots run a task; the idle slots
``I = P - b`` are blamed first on tasks whose inputs were still moving between workers
(*transfers*, as many as there are such tasks), then on ready tasks the scheduler had not yet
handed to a worker (*dispatch*), then on tasks that were ready but not running (*waiting*), and
the remaining idle slots (*starvation*: nothing was ready to use them) on the
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
        dispatched: key -> when the scheduler first handed the task to a worker (its first
            ``-> processing`` transition; int64 µs): from its readiness to then, ready work
            waited for the scheduler (empty: not known).
        lost: key -> when the scheduler took the task back from a worker that was lost
            (int64 µs; empty: no loss seen).
        activity: Dask's fine performance metrics: worker, prefix (NA outside task
            execution), context, activity, unit, value (None: not recorded).
        memory: worker memory samples: worker, time (int64 µs), managed, unmanaged, spilled
            (bytes), paused (None: not recorded).
        scheduler_transitions: transitions the scheduler made (0: not known).
        scheduler_first: when the scheduler made its first transition of a task (int64 µs;
            NAT_US: not known): from then on it had work to hand out.
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
    dispatched: pd.Series = field(default_factory=lambda: pd.Series(dtype="int64"))
    lost: pd.Series = field(default_factory=lambda: pd.Series(dtype="int64"))
    activity: pd.DataFrame | None = None
    memory: pd.DataFrame | None = None
    scheduler_transitions: int = 0
    scheduler_first: int = NAT_US

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
    dispatched, lost, n_sched, first_sched = _dispatch_and_losses(records)
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
        dispatched=dispatched,
        lost=lost,
        activity=_activity_of(records),
        memory=_memory_of(records),
        scheduler_transitions=n_sched,
        scheduler_first=first_sched,
    )


def queue_wait(records: RunRecords) -> float | None:
    """The longest time one of the run's batch jobs waited in the queue (start minus
    submission, seconds): part of its startup (None when no job states both)."""
    jobs = records.jobs
    wait = (jobs["started"] - jobs["submitted"]).dt.total_seconds().dropna()
    return float(wait.max()) if len(wait) else None


#: Scheduler stimuli of a worker's removal (Dask: Scheduler.remove_worker).
_LOSS_STIMULI = ("handle-worker-cleanup", "remove-worker")


def dispatch_and_losses(tr: pd.DataFrame) -> tuple[pd.Series, pd.Series, int, int]:
    """From the transitions (key, observer, from_state, to_state, time in µs, stimulus_id):
    when the scheduler first handed each key to a worker (``-> processing``), the keys it took
    back from a lost worker (``memory|processing ->`` under a removal stimulus), how many
    transitions the scheduler made and when it made its first (NAT_US: none)."""
    empty = pd.Series(dtype="int64")
    if not len(tr):
        return empty, empty, 0, NAT_US
    obs = tr["observer"].astype(object).to_numpy()
    sched = obs == "scheduler"
    frm = tr["from_state"].astype(object).to_numpy()
    to = tr["to_state"].astype(object).to_numpy()
    t = tr["time"].to_numpy(dtype="int64")
    keys = tr["key"].astype(object).to_numpy()
    ok = sched & (to == "processing") & (t != NAT_US)
    dispatched = pd.Series(t[ok], index=keys[ok]).groupby(level=0, sort=True).min().astype("int64")
    stim = tr["stimulus_id"].astype(object).where(tr["stimulus_id"].notna(), "").astype(str)
    gone = (
        sched
        & np.isin(frm, ("memory", "processing"))
        & stim.str.startswith(_LOSS_STIMULI).to_numpy()
        & (t != NAT_US)
    )
    lost = pd.Series(t[gone], index=keys[gone]).groupby(level=0, sort=True).min().astype("int64")
    ts = t[sched & (t != NAT_US)]
    return dispatched, lost, int(sched.sum()), int(ts.min()) if len(ts) else NAT_US


def _dispatch_and_losses(records: RunRecords) -> tuple[pd.Series, pd.Series, int, int]:
    tr = records.transitions.dropna(subset=["key"])
    cols = ["key", "observer", "from_state", "to_state", "stimulus_id"]
    frame = pd.DataFrame({c: tr[c].astype(object).to_numpy() for c in cols})
    frame["key"] = frame["key"].astype(str)
    frame["time"] = utc_to_us(tr["time"])
    return dispatch_and_losses(frame)


def _activity_of(records: RunRecords) -> pd.DataFrame | None:
    """Dask's fine performance metrics (``records.activity`` when the capture recorded them)."""
    act = getattr(records, "activity", None)
    if act is None or not len(act):
        return None
    out = pd.DataFrame(
        {
            c: (act[c].astype(object).to_numpy() if c in act else None)
            for c in ("worker", "prefix", "context", "activity", "unit")
        }
    )
    out["value"] = pd.to_numeric(act["value"], errors="coerce").fillna(0.0).to_numpy()
    return out


def _memory_of(records: RunRecords) -> pd.DataFrame | None:
    """Worker memory samples (``records.memory`` when the capture recorded them)."""
    mem = getattr(records, "memory", None)
    if mem is None or not len(mem):
        return None
    out = pd.DataFrame({"worker": mem["worker"].astype(object).to_numpy()})
    out["time"] = utc_to_us(mem["time"])
    for c in ("managed", "unmanaged", "spilled"):
        out[c] = pd.to_numeric(mem[c], errors="coerce").fillna(0).to_numpy() if c in mem else 0
    out["paused"] = (
        mem["paused"].astype("boolean").fillna(False).to_numpy(dtype=bool)
        if "paused" in mem
        else False
    )
    return out


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
            it started), ``sched`` (blamed on it while it was ready and the scheduler had not
            yet handed it to its worker), ``lost`` (the scheduler took its key back from a lost
            worker), ``redone`` (a successful attempt whose result was computed again later).
        capacity_known: the thread counts of every worker were known.
        untimed: execution attempts without a start or end (not shared out).
        concurrency: mean tasks running at once over the window.
        slots: mean thread slots over the window.
        latency: mean seconds of the makespan a dispatch cost (waiting and transfer shares over
            the executions that had any): how sluggish the scheduler and workers were, the unit
            of the noise of single intervals (startup, tail, gap).
        startup_sched: of the startup, the seconds ready tasks waited for the scheduler while a
            worker was up (``startup`` excludes them).
        lost_slot_s: thread-slot seconds of the window lost with workers removed mid-run.
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
    startup_sched: float = 0.0
    lost_slot_s: float = 0.0

    @property
    def parts_total(self) -> float:
        """startup + tail + gap + every share, wait, transfer and dispatch (= makespan up to
        rounding)."""
        ex = self.executions
        return float(
            self.startup
            + self.startup_sched
            + self.tail
            + self.gap
            + ex["share"].sum()
            + ex["wait"].sum()
            + ex["xfer"].sum()
            + ex["sched"].sum()
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
    sched = sw.integral(sw.sched, pend.da, pend.db, pend.dok)
    startup_sched = _startup_sched(tl, ready, run_s, ws)
    out = ex.assign(
        duration=(e - s) / 1e6,
        share=share,
        wait=wait,
        xfer=xfer,
        io_s=_io_seconds(tl, codes, attempt),
        incoming=ready.incoming,
        capacity=sw.capacity_at(s),
        retry_wait=~ready.first,
        sched=sched,
        lost=_lost(tl, ex, s),
        redone=_redone(ex, codes, s),
    )
    pending = wait + xfer + sched
    total_dt = float(sw.dt.sum())
    return Blame(
        timeline=tl,
        makespan=(run_e - run_s) / 1e6,
        startup=(ws - run_s) / 1e6 - startup_sched,
        startup_sched=startup_sched,
        lost_slot_s=_lost_slots(cap, ws, we),
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
        retry_wait=np.zeros(0, bool),
        sched=np.zeros(0),
        lost=np.zeros(0, bool),
        redone=np.zeros(0, bool),
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
    ``incoming`` (bytes moved to it), ``first`` (the key's first attempt), ``prev_end`` (a
    retry's previous attempt's end) and ``dispatch`` (a first attempt: when it reached its
    worker; NAT_US when unknown)."""

    ready: np.ndarray
    arrival: np.ndarray
    incoming: np.ndarray
    first: np.ndarray
    prev_end: np.ndarray
    dispatch: np.ndarray


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
    dispatch = np.full(n, NAT_US, dtype="int64")
    if tl.has_transitions and len(tl.dispatched):
        d = tl.dispatched.reindex(ex["key"].to_numpy(dtype=object)).to_numpy(dtype="float64")
        has = first & ~np.isnan(d)
        dispatch[has] = d[has].astype("int64")
    return _Ready(ready, arrival, incoming, first, prev_end, dispatch)


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
    ``[da, db)`` it waited for the scheduler to hand it to its worker (where ``dok``),
    ``[xa, xb)`` its inputs were moving (``xok``), ``[wa, wb)`` it waited (``wok``)."""

    xok: np.ndarray
    xa: np.ndarray
    xb: np.ndarray
    wok: np.ndarray
    wa: np.ndarray
    wb: np.ndarray
    dok: np.ndarray
    da: np.ndarray
    db: np.ndarray


def _pending(r: _Ready, s: np.ndarray, ws: int, we: int) -> _Pending:
    def clip(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ok = (a != NAT_US) & (b != NAT_US)
        a2 = np.where(ok, np.clip(a, ws, we), 0)
        b2 = np.where(ok, np.clip(b, ws, we), 0)
        ok &= b2 > a2
        return ok, a2, b2

    ready, arrival, disp = r.ready, r.arrival, r.dispatch
    known = (disp != NAT_US) & (ready != NAT_US)
    dok, da, db = clip(np.where(known, ready, NAT_US), np.where(known, np.minimum(disp, s), NAT_US))
    got = np.where(known, np.maximum(ready, disp), ready)  # on its worker from then
    xok, xa, xb = clip(got, np.minimum(np.where(arrival == NAT_US, got, arrival), s))
    wa = np.where(r.first, np.where(arrival != NAT_US, np.maximum(got, arrival), got), r.prev_end)
    wok, wa, wb = clip(wa, s)
    return _Pending(xok, xa, xb, wok, wa, wb, dok, da, db)


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
    running, waiting, receiving and undispatched attempt is blamed (``run``, ``wait``, ``xfer``,
    ``sched``), and the ``gap`` (seconds when nothing ran, waited or received)."""

    times: np.ndarray
    dt: np.ndarray
    P: np.ndarray
    b: np.ndarray
    run: np.ndarray
    wait: np.ndarray
    xfer: np.ndarray
    sched: np.ndarray
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
    wok, xok, dok = pd_.wok, pd_.xok, pd_.dok
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
                pd_.da[dok],
                pd_.db[dok],
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
    sched_ = _count(times, pd_.da[dok], pd_.db[dok], None)
    slots = _count(times, cap.added, cap.removed, cap.threads)
    P = np.maximum(slots, run_).astype("float64")
    b = run_.astype("float64")
    nw, nx, nd = wait_.astype("float64"), xfer_.astype("float64"), sched_.astype("float64")
    P[P == 0] = 1.0
    idle = P - b
    # idle slots: on tasks whose inputs are moving, then on ready tasks the scheduler has not
    # handed out, then on ready tasks waiting on their worker (the evidence first: waiting is
    # what no record explains); what is left (starvation) on the running tasks
    x_slots = np.minimum(idle, nx)
    d_slots = np.minimum(idle - x_slots, nd)
    w_slots = np.minimum(idle - x_slots - d_slots, nw)
    starve = idle - w_slots - d_slots - x_slots
    running = b > 0
    pending = nw + nx + nd
    to_pending = (~running) & (pending > 0)

    def rate(n: np.ndarray, slots_: np.ndarray, spread: np.ndarray) -> np.ndarray:
        return np.where(n > 0, (slots_ / np.where(n > 0, n, 1.0) + spread) / P, 0.0)

    with np.errstate(divide="ignore", invalid="ignore"):
        r_run = np.where(running, (1.0 + np.where(running, starve / b, 0.0)) / P, 0.0)
        spread = np.where(to_pending, starve / np.where(pending > 0, pending, 1.0), 0.0)
        r_wait = rate(nw, w_slots, spread)
        r_xfer = rate(nx, x_slots, spread)
        r_sched = rate(nd, d_slots, spread)
    gap_rate = np.where((~running) & (pending == 0), 1.0, 0.0)
    return _Sweep(
        times=times,
        dt=dt,
        P=P,
        b=b,
        run=np.r_[0.0, np.cumsum(r_run * dt)],
        wait=np.r_[0.0, np.cumsum(r_wait * dt)],
        xfer=np.r_[0.0, np.cumsum(r_xfer * dt)],
        sched=np.r_[0.0, np.cumsum(r_sched * dt)],
        gap=float((gap_rate * dt).sum()),
    )


def _startup_sched(tl: Timeline, r: _Ready, run_s: int, ws: int) -> float:
    """Of the startup ``[run_s, ws)``: the seconds from when the scheduler had a task (its first
    transition of one; else the first task's readiness) and a worker was up, to when it handed
    the first task out (the scheduler held ready work back)."""
    if not len(r.dispatch):
        return 0.0
    disp = r.dispatch[r.dispatch != NAT_US]
    ready = r.ready[(r.ready != NAT_US) & r.first]
    if not len(disp):
        return 0.0
    if tl.scheduler_first != NAT_US:
        had = tl.scheduler_first
    elif len(ready):
        had = int(ready.min())
    else:
        return 0.0
    added = tl.workers["added"].to_numpy(dtype="float64", na_value=np.nan)
    added = added[~np.isnan(added) & (added != NAT_US)]
    if not len(added):
        return 0.0
    a = max(had, int(added.min()), run_s)
    b = min(int(disp.min()), ws)
    return max(0.0, (b - a) / 1e6)


def _lost(tl: Timeline, ex: pd.DataFrame, s: np.ndarray) -> np.ndarray:
    """Attempts of a key the scheduler took back from a lost worker, started after the loss."""
    if not len(tl.lost):
        return np.zeros(len(ex), bool)
    t = tl.lost.reindex(ex["key"].to_numpy(dtype=object)).to_numpy(dtype="float64")
    return ~np.isnan(t) & (s >= np.nan_to_num(t, nan=0.0))


def _redone(ex: pd.DataFrame, c: _Codes, s: np.ndarray) -> np.ndarray:
    """Successful attempts of a key that succeeded again later (its result was lost)."""
    ok = ex["ok"].to_numpy(dtype=bool)
    if ok.sum() <= len(np.unique(c.ck[ok])):
        return np.zeros(len(ex), bool)
    last = np.full(c.U, -1, dtype="int64")
    rows = np.flatnonzero(ok)
    order = rows[np.lexsort((s[rows], c.ck[rows]))]
    last[c.ck[order]] = order  # the latest start wins
    out = ok.copy()
    out[last[last >= 0]] = False
    return out


def _lost_slots(cap: _Capacity, ws: int, we: int) -> float:
    """Thread-slot seconds lost with workers removed inside the window, less the slots of the
    workers that joined after the first loss (a nanny's restart)."""
    gone = (cap.removed > ws) & (cap.removed < we)
    if not gone.any():
        return 0.0
    lost = float((cap.threads[gone] * (we - cap.removed[gone])).sum())
    came = cap.added > int(cap.removed[gone].min())
    back = float((cap.threads[came] * (we - cap.added[came])).sum())
    return max(0.0, lost - back) / 1e6


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
