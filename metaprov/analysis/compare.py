"""Why was one run slower than another: align two runs and explain their makespan difference.

Input: two :class:`~metaprov.analysis.timeline.Blame` (each run's makespan shared out over its
tasks, waits and gaps). Output: a :class:`Explanation` of typed tables:

- ``alignment``: the tasks matched across the runs, by key (Dask keys are deterministic for the
  same graph), else by prefix and tuple-key index, else by prefix (in start order), and what
  exists in one run only;
- ``causes``: the difference in makespan cut into named causes whose seconds add up to it
  exactly: ``compute``, ``io``, ``worker`` and ``retries`` per prefix, ``waiting`` and
  ``transfers`` per prefix, the run-wide causes of sick runs (``scheduler``, ``serialisation``,
  ``spill``, ``lost-workers``), ``parallelism``, ``startup``, ``tail`` and ``unexplained``; each
  with its noise (what the same comparison of two runs without a change would give) and
  evidence;
- ``tasks``: the matched tasks whose duration changed most; ``workers``, ``hosts`` and ``files``.

The method (docs/compare.md): per prefix ``p`` the seconds a run was held up by ``p``'s compute
are ``S = C x k`` (``C`` its compute seconds, ``k`` the share of a compute second in the
makespan, 1 for a task alone on the cluster, 1/4 for four tasks side by side). Between a
baseline ``b`` and another run ``o``:
``S_o - S_b = (C_o - C_b) k_b + C_o (k_o - k_b)``: the first term is the prefix's *compute*
(of which the change in linked Darshan seconds is *io* and the change in the largest excess of
one worker over the prefix's median is *worker*), the second *parallelism*. Failed attempts'
shares and the waits before retries are *retries*; the waiting and transfer shares are compared
per prefix; startup, tail and the gap (nothing running, nothing ready) directly. Before that,
each run's pending shares give up what the evidence explains (:class:`_RunSide`): spilling
(fine metrics: the workers' disk seconds), (de)serialising data moved between workers (fine
metrics), and the scheduler's dispatch delays (its transitions); work redone and capacity lost
with workers removed mid-run are *lost-workers*. The terms telescope, so they add up to the
difference; *unexplained* holds the gap's change and what rounding leaves, and is never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from metaprov.analysis.timeline import Blame
from metaprov.errors import InputError
from metaprov.timeutil import NAT_US

#: Names of the causes, in the order used when two have the same seconds.
CAUSES = (
    "compute",
    "parallelism",
    "waiting",
    "transfers",
    "serialisation",
    "spill",
    "scheduler",
    "lost-workers",
    "io",
    "retries",
    "worker",
    "startup",
    "tail",
    "unexplained",
)
#: Relative floor of the noise: a cause smaller than this share of the baseline makespan...
NOISE_FLOOR_REL = 0.02
#: ... or than this many seconds is within the noise (clocks, scheduler ticks).
NOISE_FLOOR_S = 0.01
#: Startup, tail and the gap are single intervals (no replicate inside a pair): their noise is
#: this share of the larger makespan (the spread measured between identical runs, docs/compare.md)
#: or NOISE_ROUND_TRIPS dispatch latencies of the slower run (see Blame.latency), if more.
NOISE_INTERVAL_REL = 0.05
NOISE_ROUND_TRIPS = 3
#: A cause is named when it exceeds this many standard deviations of its noise (and the floor).
NOISE_SIGMAS = 3.0
#: Mean thread slots within this share of each other: the same capacity (waits are jitter).
SLOTS_SAME_REL = 0.1

CAUSE_COLUMNS = [
    "cause",
    "seconds",
    "noise",
    "significant",
    "prefix",
    "worker",
    "file",
    "evidence",
]


@dataclass
class Alignment:
    """Tasks matched across two runs.

    Attributes:
        pairs: key_b, key_o, prefix, rule ('key', 'index' or 'prefix').
        counts: tasks matched per rule, and tasks in one run only.
        added: prefixes only in the other run; removed: only in the baseline.
        same_graph: every executed key of each run is in the other.
    """

    pairs: pd.DataFrame
    counts: dict[str, int]
    added: list[str]
    removed: list[str]
    same_graph: bool


@dataclass
class Explanation:
    """Why ``other`` took longer (or shorter) than ``baseline``.

    Attributes:
        baseline, other: the two runs' labels.
        difference_s: other's makespan minus baseline's (seconds).
        causes: one row per cause (and prefix, worker or file where it applies), ranked: the
            columns of :data:`CAUSE_COLUMNS`; ``seconds`` add up to ``difference_s``.
        totals: seconds per cause name (every name of :data:`CAUSES`).
        alignment: see :class:`Alignment`.
        tasks: the matched tasks whose duration changed most.
        workers: per run and worker: tasks, compute, share, slowness against the prefix medians.
        hosts: per host: tasks and compute in each run.
        files: per file: Darshan bytes and seconds in each run (both runs have linked I/O).
        runs: per run: makespan, startup, window, tail, compute, concurrency, slots.
        evidence: further evidence rows (kind, detail), e.g. a software environment difference.
        notes: what could not be attributed, and why.
    """

    baseline: str
    other: str
    difference_s: float
    causes: pd.DataFrame
    totals: dict[str, float]
    alignment: Alignment
    tasks: pd.DataFrame
    workers: pd.DataFrame
    hosts: pd.DataFrame
    files: pd.DataFrame
    runs: pd.DataFrame
    evidence: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def top(self) -> pd.Series | None:
        """The first significant cause, or None when nothing is above the noise."""
        sig = self.causes[self.causes["significant"]]
        return sig.iloc[0] if len(sig) else None


# -- alignment ---------------------------------------------------------------------------------

_TUPLE = r"^\((['\"])(?P<name>.*?)\1,\s*(?P<index>.*)\)$"


def _obj(values: Any) -> np.ndarray:
    """Text as a numpy object array (hashing and taking are then fast, whatever the dtype)."""
    if isinstance(values, pd.Series):
        return values.to_numpy(dtype=object, na_value=None)
    return np.asarray(values, dtype=object)


@dataclass
class _Keys:
    """One row per executed key of a run, as numpy arrays (position = row)."""

    key: np.ndarray
    prefix: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    wait: np.ndarray
    xfer: np.ndarray
    sched: np.ndarray
    attempts: np.ndarray
    worker: np.ndarray
    thread: np.ndarray


def _tasks(bl: Blame) -> _Keys:
    """One row per executed key: prefix, first start, compute, waits and transfers of all
    attempts, worker and thread of the last attempt (computed once per run)."""
    cached = bl.__dict__.get("_keys")
    if cached is not None:
        return cached
    ex = bl.executions
    codes, uniq = pd.factorize(_obj(ex["key"]))
    m = len(uniq)
    order = np.lexsort((ex["start"].to_numpy(), ex["attempt"].to_numpy(), codes))
    c = codes[order]
    first = np.r_[True, c[1:] != c[:-1]] if len(c) else np.zeros(0, bool)
    last = np.r_[c[1:] != c[:-1], True] if len(c) else np.zeros(0, bool)
    start = np.full(m, np.iinfo(np.int64).max, dtype="int64")
    np.minimum.at(start, codes, ex["start"].to_numpy(dtype="int64"))
    out = _Keys(
        key=np.asarray(uniq, dtype=object),
        prefix=_obj(ex["prefix"])[order[first]],
        start=start,
        duration=np.bincount(codes, weights=ex["duration"].to_numpy(), minlength=m),
        wait=np.bincount(codes, weights=ex["wait"].to_numpy(), minlength=m),
        xfer=np.bincount(codes, weights=ex["xfer"].to_numpy(), minlength=m),
        sched=np.bincount(
            codes,
            weights=ex["sched"].to_numpy() if "sched" in ex else np.zeros(len(ex)),
            minlength=m,
        ),
        attempts=np.bincount(codes, minlength=m),
        worker=_obj(ex["worker"])[order[last]],
        thread=ex["thread"].to_numpy(dtype=object, na_value=None)[order[last]],
    )
    bl.__dict__["_keys"] = out
    return out


def _tuple_index(keys: np.ndarray) -> np.ndarray:
    """The index part of tuple keys ("('x-1f3a', 3, 2)" -> "3,2"); None for other keys."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(keys):
        return np.zeros(0, dtype=object)
    arr = pa.array(keys.tolist(), type=pa.large_string())
    found = pc.extract_regex(arr, r"^\((?:'[^']*'|\"[^\"]*\"),\s*(?P<index>.*)\)$")
    idx = pc.struct_field(found, [0])
    idx = pc.replace_substring(idx, " ", "")
    return np.asarray(idx.to_numpy(zero_copy_only=False), dtype=object)


def _pair_by(
    b_rows: np.ndarray, o_rows: np.ndarray, b_label: np.ndarray, o_label: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows matched by an int64 label that is unique on each side (labels < 0 never match)."""
    both = np.concatenate([b_label, o_label]).astype("int64")
    codes, _ = pd.factorize(both)
    codes[both < 0] = -1
    cb, co = codes[: len(b_label)], codes[len(b_label) :]
    k = int(codes.max()) + 1 if len(codes) else 0
    if k <= 0:
        return b_rows[:0], o_rows[:0]
    nb = np.bincount(cb[cb >= 0], minlength=k)
    no = np.bincount(co[co >= 0], minlength=k)
    ok = (nb == 1) & (no == 1)
    pos_o = np.full(len(ok), -1, dtype="int64")
    sel_o = (co >= 0) & ok[np.maximum(co, 0)] if len(co) else np.zeros(0, bool)
    pos_o[co[sel_o]] = np.flatnonzero(sel_o)
    sel_b = (cb >= 0) & ok[np.maximum(cb, 0)] if len(cb) else np.zeros(0, bool)
    sel_b &= pos_o[np.maximum(cb, 0)] >= 0
    ib = np.flatnonzero(sel_b)
    return b_rows[ib], o_rows[pos_o[cb[ib]]]


def align(base: Blame, other: Blame) -> Alignment:
    """Match the executed tasks of two runs (see the module text).

    Raises:
        InputError: the runs have no task prefix in common (nothing can be compared).
    """
    for bl in (base, other):
        if not len(bl.executions):
            raise InputError(
                f"run {bl.timeline.label} has no timed task execution"
                + (f" ({bl.untimed:,} without a start or end)" if bl.untimed else "")
                + ", so where its time went cannot be told",
                hint="a run needs worker or scheduler transitions with execution times "
                "(metaprov inspect RUN shows what it holds)",
            )
    tb, to = _tasks(base), _tasks(other)
    pb, po = set(tb.prefix), set(to.prefix)
    common = pb & po
    if not common:
        raise InputError(
            f"runs {base.timeline.label} and {other.timeline.label} have no task prefix in "
            f"common ({len(pb)} vs {len(po)} prefixes, e.g. "
            f"{', '.join(sorted(map(str, pb))[:3]) or 'none'} vs "
            f"{', '.join(sorted(map(str, po))[:3]) or 'none'}), so there is nothing to compare",
            hint="compare runs of the same workflow",
        )
    nb, no = len(tb.key), len(to.key)
    rows_b, rows_o, rules = [], [], []
    # 1. by key
    codes, _ = pd.factorize(np.concatenate([tb.key, to.key]))
    cb, co = codes[:nb], codes[nb:]
    pos_o = np.full(codes.max() + 1 if len(codes) else 0, -1, dtype="int64")
    pos_o[co] = np.arange(no)
    hit = pos_o[cb] >= 0
    rows_b.append(np.flatnonzero(hit))
    rows_o.append(pos_o[cb[hit]])
    rules.append(np.full(int(hit.sum()), "key", dtype=object))
    left_b = ~hit
    left_o = np.ones(no, bool)
    left_o[pos_o[cb[hit]]] = False
    in_common_b = np.isin(tb.prefix, list(common))
    in_common_o = np.isin(to.prefix, list(common))
    rb = np.flatnonzero(left_b & in_common_b)
    ro = np.flatnonzero(left_o & in_common_o)
    # prefixes as integer codes shared by both runs
    pcodes, _ = pd.factorize(np.concatenate([tb.prefix, to.prefix]))
    pc_b, pc_o = pcodes[:nb].astype("int64"), pcodes[nb:].astype("int64")
    # 2. by prefix and tuple index (unique on each side)
    if len(rb) and len(ro):
        ib, io_ = _tuple_index(tb.key[rb]), _tuple_index(to.key[ro])
        icodes, iuniq = pd.factorize(np.concatenate([ib, io_]))  # None -> -1
        k = max(len(iuniq), 1)
        ic_b, ic_o = icodes[: len(rb)], icodes[len(rb) :]
        lb = np.where(ic_b >= 0, pc_b[rb] * k + ic_b, -1)
        lo = np.where(ic_o >= 0, pc_o[ro] * k + ic_o, -1)
        mb, mo = _pair_by(rb, ro, lb, lo)
        rows_b.append(mb)
        rows_o.append(mo)
        rules.append(np.full(len(mb), "index", dtype=object))
        rb = np.setdiff1d(rb, mb)
        ro = np.setdiff1d(ro, mo)
    # 3. by prefix, in start order
    if len(rb) and len(ro):
        k = int(max(len(rb), len(ro))) + 1

        def ranks(rows: np.ndarray, keys: _Keys, pc: np.ndarray) -> np.ndarray:
            order = np.lexsort((keys.key[rows].astype(str), keys.start[rows], pc[rows]))
            p = pc[rows][order]
            startpos = np.r_[0, np.flatnonzero(p[1:] != p[:-1]) + 1]
            r = np.arange(len(p)) - np.repeat(startpos, np.diff(np.r_[startpos, len(p)]))
            out = np.empty(len(p), dtype="int64")
            out[order] = p * k + r
            return out

        mb, mo = _pair_by(rb, ro, ranks(rb, tb, pc_b), ranks(ro, to, pc_o))
        rows_b.append(mb)
        rows_o.append(mo)
        rules.append(np.full(len(mb), "prefix", dtype=object))
    row_b = np.concatenate(rows_b)
    row_o = np.concatenate(rows_o)
    rule = np.concatenate(rules)
    pairs = pd.DataFrame(
        {
            "key_b": pd.Series(tb.key[row_b], dtype=object),
            "key_o": pd.Series(to.key[row_o], dtype=object),
            "prefix": pd.Series(tb.prefix[row_b], dtype=object),
            "rule": pd.Series(rule, dtype=object),
            "row_b": row_b,
            "row_o": row_o,
        }
    )
    counts = {r: int((rule == r).sum()) for r in ("key", "index", "prefix")}
    counts["baseline_only"] = int(nb - len(pairs))
    counts["other_only"] = int(no - len(pairs))
    return Alignment(
        pairs=pairs,
        counts=counts,
        added=sorted(map(str, po - pb)),
        removed=sorted(map(str, pb - po)),
        same_graph=counts["key"] == nb == no,
    )


# -- the decomposition -------------------------------------------------------------------------


def _per_prefix(bl: Blame) -> pd.DataFrame:
    """Per prefix: compute and share of the successful attempts (less those redone after a
    worker loss), failed attempts, waits, transfers, dispatch, and what a lost worker cost."""
    ex = bl.executions
    ok = ex["ok"].to_numpy()
    first = ~ex["retry_wait"].to_numpy()
    redone = ex["redone"].to_numpy() if "redone" in ex else np.zeros(len(ex), bool)
    lost = ex["lost"].to_numpy() if "lost" in ex else np.zeros(len(ex), bool)
    sched = ex["sched"].to_numpy() if "sched" in ex else np.zeros(len(ex))
    # a redo after a loss: a later attempt of a key whose earlier result was lost
    redo_keys = set(ex["key"].to_numpy()[redone]) if redone.any() else set()
    redo = lost | (~first & ex["key"].isin(redo_keys).to_numpy()) if redo_keys else lost
    good = ok & ~redone
    pend = ex["wait"].to_numpy() + ex["xfer"].to_numpy() + sched
    d = ex.assign(
        c_ok=np.where(good, ex["duration"], 0.0),
        s_ok=np.where(good, ex["share"], 0.0),
        io_ok=np.where(good, np.minimum(ex["io_s"], ex["duration"]), 0.0),
        s_fail=np.where(ok, 0.0, ex["share"]),
        c_fail=np.where(ok, 0.0, ex["duration"]),
        n_fail=(~ok).astype("int64"),
        w_first=np.where(first & ~redo, ex["wait"], 0.0),
        w_retry=np.where(first | redo, 0.0, ex["wait"]),
        x_ok=np.where(redo, 0.0, ex["xfer"]),
        d_ok=np.where(redo, 0.0, sched),
        s_lost=np.where(redone, ex["share"], 0.0) + np.where(redo, pend, 0.0),
        c_lost=np.where(redone, ex["duration"], 0.0),
        n_lost=(redone | lost).astype("int64"),
        n_ok=good.astype("int64"),
        n_wait=(ex["wait"] > 0).astype("int64"),
        n_recv=(ex["xfer"] > 0).astype("int64"),
    )
    return d.groupby("prefix").agg(
        compute=("c_ok", "sum"),
        share=("s_ok", "sum"),
        io=("io_ok", "sum"),
        fail_share=("s_fail", "sum"),
        fail_compute=("c_fail", "sum"),
        failed=("n_fail", "sum"),
        wait=("w_first", "sum"),
        retry_wait=("w_retry", "sum"),
        xfer=("x_ok", "sum"),
        sched=("d_ok", "sum"),
        lost_share=("s_lost", "sum"),
        lost_compute=("c_lost", "sum"),
        lost_tasks=("n_lost", "sum"),
        incoming=("incoming", "sum"),
        executions=("n_ok", "sum"),
        waiters=("n_wait", "sum"),
        receivers=("n_recv", "sum"),
    )


def _median_of_others(prefix: np.ndarray, med: np.ndarray) -> np.ndarray:
    """For each (prefix, worker) row (sorted by prefix): the median of the other workers' values
    of the same prefix (the per-worker medians, without the row's own)."""
    order = np.lexsort((med, prefix))
    p, m = prefix[order], med[order]
    start = np.r_[0, np.flatnonzero(p[1:] != p[:-1]) + 1]
    size = np.diff(np.r_[start, len(p)])
    first = np.repeat(start, size)
    k = np.repeat(size, size)  # workers of the prefix
    r = np.arange(len(p)) - first  # rank of the row within its prefix
    n_left = k - 1

    lo = np.clip((n_left - 1) // 2, 0, None)
    hi = np.clip(n_left // 2, 0, None)
    out = np.full(len(p), np.nan)
    ok = n_left >= 1
    idx = np.flatnonzero(ok)  # the j-th value without the row's own is m[first + j + (j >= r)]
    if len(idx):
        jl, jh = lo[idx], hi[idx]
        f, rr = first[idx], r[idx]
        out[idx] = (m[f + jl + (jl >= rr)] + m[f + jh + (jh >= rr)]) / 2
    res = np.empty(len(p))
    res[order] = out
    return res


def _worker_excess(bl: Blame) -> pd.DataFrame:
    """Per prefix: the worker whose tasks ran longest past the other workers' median, by how much.

    Only prefixes that ran on two workers or more. The excess of a worker at a prefix is the sum
    over its successful executions of (duration - linked I/O - the median of the other workers'
    median durations of that prefix); ``sd`` is the spread of its own durations (its noise).
    """
    cols = ["worker", "excess", "tasks", "ratio", "sd"]
    ex = bl.executions[bl.executions["ok"]]
    if not len(ex):
        return pd.DataFrame(columns=cols)
    d = (ex["duration"] - np.minimum(ex["io_s"], ex["duration"])).astype("float64")
    x = pd.DataFrame(
        {"prefix": ex["prefix"].to_numpy(), "worker": ex["worker"].to_numpy(), "d": d.to_numpy()}
    )
    nw = x.groupby("prefix")["worker"].nunique()
    x = x[x["prefix"].isin(nw[nw >= 2].index)]
    if not len(x):
        return pd.DataFrame(columns=cols)
    g = x.groupby(["prefix", "worker"])["d"].agg(["sum", "size", "median", "std"]).reset_index()
    ref = _median_of_others(
        g["prefix"].to_numpy(dtype=object), g["median"].to_numpy(dtype="float64")
    )
    g["excess"] = g["sum"] - g["size"] * ref
    g["ratio"] = g["median"] / np.where(ref > 0, ref, np.nan)
    g["sd"] = g["std"].fillna(0.0) * np.sqrt(g["size"])
    g["tasks"] = g["size"]
    g = g.sort_values(["prefix", "excess", "worker"], ascending=[True, False, True])
    top = g.groupby("prefix").head(1).set_index("prefix")
    return top[cols]


def _paired_sd(
    al: Alignment, tb: _Keys, to: _Keys, col: str, fb: float = 1.0, fo: float = 1.0
) -> pd.Series:
    """Per prefix: sqrt(n) x standard deviation of the matched tasks' differences in ``col``
    (each run's values x its factor ``fb``/``fo``: the part of them its row keeps)."""
    p = al.pairs
    if not len(p):
        return pd.Series(dtype="float64")
    rb, ro = p["row_b"].to_numpy(), p["row_o"].to_numpy()
    diff = getattr(to, col)[ro] * fo - getattr(tb, col)[rb] * fb
    codes, uniq = pd.factorize(_obj(p["prefix"]))
    n = np.bincount(codes, minlength=len(uniq)).astype("float64")
    s1 = np.bincount(codes, weights=diff, minlength=len(uniq))
    s2 = np.bincount(codes, weights=diff * diff, minlength=len(uniq))
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.where(n > 1, (s2 - s1 * s1 / n) / (n - 1), 0.0)
    return pd.Series(
        np.sqrt(np.maximum(var, 0.0)) * np.sqrt(n), index=np.asarray(uniq, dtype=object)
    )


def explain(base: Blame, other: Blame, *, alignment: Alignment | None = None) -> Explanation:
    """The difference in makespan between two runs, cut into named causes (module text).

    The steps: align the tasks; per prefix, the compute, io, worker, retries, waiting and
    transfers rows (:func:`_prefix_rows`), whose parallelism terms add up to one parallelism
    row; the run's startup and tail; what is left is unexplained; then noise and rank
    (:func:`_rank_causes`).

    Raises:
        InputError: the runs have nothing in common.
    """
    al = alignment or align(base, other)
    diff = other.makespan - base.makespan
    sides = _sides(base, other, al)
    rows: list[dict[str, Any]] = []
    par = _Parallelism()
    for p in sides.prefixes:
        rows.extend(_prefix_rows(p, sides, al, par))
    par_row = par.row(base, other, sides)
    rows.extend(_run_rows(base, other, sides, par_row))
    rows.append(par_row)
    rows.extend(_interval_rows(base, other))
    causes = _rank_causes(rows, diff, base, other)
    wt_ = worker_table(base, other)
    return Explanation(
        baseline=base.timeline.label,
        other=other.timeline.label,
        difference_s=float(diff),
        causes=causes,
        totals={c: float(causes.loc[causes["cause"] == c, "seconds"].sum()) for c in CAUSES},
        alignment=al,
        tasks=changed_tasks(base, other, al),
        workers=wt_,
        hosts=host_table(base, other, wt_),
        files=file_table(base, other),
        runs=run_table(base, other),
        notes=_notes(base, other),
    )


@dataclass
class _Sides:
    """Both runs' per-prefix tables on the union of their prefixes, and their noise.

    Attributes:
        prefixes: every prefix of either run, sorted.
        pb, po: :func:`_per_prefix` of the baseline and the other run (0 where absent).
        sd_dur, sd_wait, sd_xfer: per prefix, the spread of the matched tasks' differences.
        we_b, we_o: :func:`_worker_excess` of each run.
        both_io: both runs have linked Darshan I/O (else I/O time counts as compute).
        rb, ro: :class:`_RunSide` of each run (spill, serialisation, dispatch, losses).
        sd_sched: the spread of the matched tasks' differences in dispatch shares (all tasks).
    """

    prefixes: list[str]
    pb: pd.DataFrame
    po: pd.DataFrame
    sd_dur: pd.Series
    sd_wait: pd.Series
    sd_xfer: pd.Series
    we_b: pd.DataFrame
    we_o: pd.DataFrame
    both_io: bool
    rb: _RunSide
    ro: _RunSide
    sd_sched: float


def _sides(base: Blame, other: Blame, al: Alignment) -> _Sides:
    pb, po = _per_prefix(base), _per_prefix(other)
    prefixes = sorted(set(pb.index) | set(po.index))
    kb, ko = _tasks(base), _tasks(other)

    pb, po = pb.reindex(prefixes).fillna(0.0), po.reindex(prefixes).fillna(0.0)
    rb, ro = _run_side(base, pb), _run_side(other, po)

    def sd(col: str) -> pd.Series:
        # in the units of the rows: the pending shares less what spill and serialisation
        # took out of them (a transfer row's noise must not keep the serialising it lost)
        f = (rb.factor(col), ro.factor(col))
        return _paired_sd(al, kb, ko, col, *f).reindex(prefixes).fillna(0.0)

    return _Sides(
        prefixes=prefixes,
        pb=rb.attribute(pb),
        po=ro.attribute(po),
        sd_dur=sd("duration"),
        sd_wait=sd("wait"),
        sd_xfer=sd("xfer"),
        we_b=_worker_excess(base),
        we_o=_worker_excess(other),
        both_io=base.timeline.has_io and other.timeline.has_io,
        rb=rb,
        ro=ro,
        sd_sched=float(np.sqrt((sd("sched") ** 2).sum())),
    )


#: Fine-metric activities of (de)serialisation; contexts of data moved between workers.
SERIALISATION = ("serialize", "deserialize", "compress", "decompress")
TRANSFER_CONTEXTS = ("gather-dep", "get-data")
#: Fine-metric activities of spilled data (read back, written out).
SPILL_DISK = ("disk-read", "disk-write")


@dataclass
class _RunSide:
    """What one run's records say beyond its timeline's shares, and how much of its pending
    shares (waiting, transfers, dispatch) it explains.

    ``spill_share``: seconds of the makespan the workers' spilling held up (their seconds of
    disk reads and writes and of (de)serialising outside transfers, x their threads / the
    run's slots: a worker busy spilling leaves its threads idle), at most the run's pending
    shares; ``ser_fraction``: the share of the time data moved between
    workers that was spent (de)serialising and (de)compressing it (fine metrics)."""

    pending: float = 0.0
    spill_share: float = 0.0
    ser_fraction: float = 0.0
    ser_share: float = 0.0
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def keep(self) -> float:
        """The share of every pending share left once spill is taken out."""
        return 1.0 - (self.spill_share / self.pending if self.pending > 0 else 0.0)

    def factor(self, col: str) -> float:
        """What :meth:`attribute` leaves of a task's ``col`` share (its noise scales alike)."""
        if col == "xfer":
            return self.keep * (1.0 - self.ser_fraction)
        return self.keep if col in ("wait", "sched") else 1.0

    def attribute(self, pp: pd.DataFrame) -> pd.DataFrame:
        """``pp`` with spill taken out of every pending share, then serialisation out of the
        transfer shares (proportionally: the parts still add up)."""
        out = pp.copy()
        keep = self.keep
        for c in ("wait", "xfer", "sched"):
            out[c] = out[c] * keep
        self.ser_share = float(out["xfer"].sum() * self.ser_fraction)
        out["xfer"] = out["xfer"] * (1.0 - self.ser_fraction)
        return out


def _run_side(bl: Blame, pp: pd.DataFrame) -> _RunSide:
    tl = bl.timeline
    pending = float(pp["wait"].sum() + pp["xfer"].sum() + pp["sched"].sum())
    tr = tl.transfers
    moved = tr[tr["destination"].notna()] if len(tr) else tr
    ok = (moved["stop"].to_numpy() != NAT_US) & (moved["start"].to_numpy() != NAT_US)
    xraw = (
        float(((moved["stop"] - moved["start"]).to_numpy()[ok]).sum() / 1e6) if len(moved) else 0.0
    )
    ev: dict[str, Any] = {
        "bytes_moved": int(moved["nbytes"].sum()) if len(moved) else 0,
        "transfer_s": xraw,
        "transfers": int(len(moved)),
    }
    side = _RunSide(pending=pending, evidence=ev)
    act = tl.activity
    if act is not None and len(act):
        secs = act[act["unit"].astype(str) == "seconds"]
        ctx = secs["context"].astype(str)
        kind = secs["activity"].astype(str)
        ser = float(secs.loc[kind.isin(SERIALISATION) & ctx.isin(TRANSFER_CONTEXTS), "value"].sum())
        ev["serialisation_s"] = ser
        side.ser_fraction = min(1.0, ser / xraw) if xraw > 0 else 0.0
        # spilled data is serialised before it is written and deserialised when read back:
        # (de)serialising outside data moved between workers is spilling's too
        disk = secs[
            kind.isin(SPILL_DISK) | (kind.isin(SERIALISATION) & ~ctx.isin(TRANSFER_CONTEXTS))
        ]
        ev["spill_disk_s"] = float(disk["value"].sum())
        by = act[act["unit"].astype(str) == "bytes"]
        ev["spilled_bytes"] = int(by.loc[by["activity"].astype(str) == "disk-write", "value"].sum())
        if len(disk) and bl.slots > 0:
            per_w = disk.groupby(disk["worker"].astype(str))["value"].sum()
            thr = tl.workers.set_index("address")["threads"].astype("float64")
            t = thr.reindex(per_w.index).fillna(1.0).to_numpy()
            side.spill_share = min(pending, float((per_w.to_numpy() * t).sum() / bl.slots))
    mem = tl.memory
    if mem is not None and len(mem):
        ev["spilled_bytes_peak"] = int(mem.groupby("worker")["spilled"].max().sum())
        ev["paused_samples"] = int(mem["paused"].sum())
    ev["dispatch_s"] = float(pp["sched"].sum()) + bl.startup_sched
    ev["scheduler_transitions"] = int(tl.scheduler_transitions)
    ev["lost_workers"] = (
        int(
            (
                (tl.workers["removed"].to_numpy() != NAT_US)
                & (tl.workers["removed"].to_numpy() < tl.end)
                & (tl.workers["removed"].to_numpy() > tl.start)
            ).sum()
        )
        if len(tl.workers) and bl.lost_slot_s > 0
        else 0
    )
    ev["lost_tasks"] = int(len(tl.lost))
    ev["lost_slot_s"] = bl.lost_slot_s
    return side


def _more_tasks_dispatch(b: pd.DataFrame, o: pd.DataFrame) -> pd.Series:
    """Per prefix: the dispatch seconds of the tasks it gained, at the baseline's dispatch
    seconds per task (``D = n x d``: the change of ``n`` is more work, the change of ``d`` a
    slower scheduler)."""
    nb = b["executions"].astype("float64")
    per = (b["sched"] / nb.where(nb > 0)).fillna(0.0)
    return (o["executions"] - b["executions"]).astype("float64") * per


def _run_rows(
    base: Blame, other: Blame, s: _Sides, par_row: dict[str, Any]
) -> list[dict[str, Any]]:
    """The run-wide causes: scheduler, serialisation, spill, lost workers (whose capacity part
    is taken out of ``par_row``)."""
    eb, eo = s.rb.evidence, s.ro.evidence

    def both(k: str) -> list[Any]:
        return [eb.get(k, 0), eo.get(k, 0)]

    rows = []
    # the dispatch of the tasks a prefix gained (or lost) is that prefix's compute row's
    sched = (
        float(s.po["sched"].sum() - s.pb["sched"].sum())
        - float(_more_tasks_dispatch(s.pb, s.po).sum())
        + other.startup_sched
        - base.startup_sched
    )
    # the jitter of a sum of n dispatch delays: sqrt(n) x the delay of the faster run (the
    # slower one's is what is measured: a slow scheduler must not widen its own noise)
    nb, no = int((_tasks(base).sched > 0).sum()), int((_tasks(other).sched > 0).sum())
    per = min(eb["dispatch_s"] / max(nb, 1), eo["dispatch_s"] / max(no, 1))
    noise = s.sd_sched + float(np.sqrt(max(nb, no)) * per / NOISE_SIGMAS * 2)
    if sched != 0.0 or eb["dispatch_s"] or eo["dispatch_s"]:
        ev = {
            "dispatch_s": both("dispatch_s"),
            "startup_dispatch_s": [base.startup_sched, other.startup_sched],
            "scheduler_transitions": both("scheduler_transitions"),
            "transitions_per_s": [
                eb["scheduler_transitions"] / base.makespan if base.makespan else 0.0,
                eo["scheduler_transitions"] / other.makespan if other.makespan else 0.0,
            ],
        }
        rows.append(_row("scheduler", sched, noise, evidence=ev))
    if "serialisation_s" in eb or "serialisation_s" in eo:
        ev = {
            "serialisation_s": both("serialisation_s"),
            "transfer_s": both("transfer_s"),
            "bytes_moved": both("bytes_moved"),
        }
        rows.append(_row("serialisation", s.ro.ser_share - s.rb.ser_share, 0.0, evidence=ev))
    if any(k in e for e in (eb, eo) for k in ("spill_disk_s", "spilled_bytes_peak")):
        ev = {
            "spill_disk_s": both("spill_disk_s"),
            "spilled_bytes": both("spilled_bytes"),
            "spilled_bytes_peak": both("spilled_bytes_peak"),
            "paused_samples": both("paused_samples"),
        }
        rows.append(_row("spill", s.ro.spill_share - s.rb.spill_share, 0.0, evidence=ev))
    lost = float(s.po["lost_share"].sum() - s.pb["lost_share"].sum())
    # capacity lost with the workers, in seconds of the whole cluster, out of parallelism
    cap = other.lost_slot_s / max(other.slots, 1e-9) - base.lost_slot_s / max(base.slots, 1e-9)
    par = par_row["seconds"]
    take = float(np.sign(par) * min(abs(par), abs(cap))) if par * cap > 0 else 0.0
    par_row["seconds"] = par - take
    if (
        lost != 0.0
        or take != 0.0
        or eb["lost_tasks"]
        or eo["lost_tasks"]
        or eb["lost_workers"]
        or eo["lost_workers"]
    ):
        ev = {
            "workers_lost": both("lost_workers"),
            "tasks_lost": both("lost_tasks"),
            "redone_s": [float(s.pb["lost_compute"].sum()), float(s.po["lost_compute"].sum())],
            "redone_or_lost_attempts": [
                int(s.pb["lost_tasks"].sum()),
                int(s.po["lost_tasks"].sum()),
            ],
            "capacity_lost_s": take,
            "slot_seconds_lost": both("lost_slot_s"),
        }
        rows.append(_row("lost-workers", lost + take, 0.0, evidence=ev))
    return rows


@dataclass
class _Parallelism:
    """The parallelism terms of every prefix, summed in prefix order into one row."""

    total: float = 0.0
    noise2: float = 0.0
    evidence: list[dict[str, Any]] = field(default_factory=list)

    def add(self, prefix: str, seconds: float, noise: float) -> None:
        self.total += seconds
        self.noise2 += noise**2
        if seconds:
            self.evidence.append({"prefix": prefix, "seconds": float(seconds)})

    def row(self, base: Blame, other: Blame, sides: _Sides) -> dict[str, Any]:
        self.evidence.sort(key=lambda r: -abs(r["seconds"]))
        # scheduling jitter shows as waiting, and shifts concurrency by about as much; but when
        # the thread slots themselves changed (workers lost, retired or added) the change is
        # capacity, not jitter
        same_slots = abs(other.slots - base.slots) <= SLOTS_SAME_REL * max(base.slots, other.slots)
        waits = sides.pb["wait"].sum() + sides.po["wait"].sum() if same_slots else 0.0
        return _row(
            "parallelism",
            self.total,
            float(np.sqrt(self.noise2) + waits / NOISE_SIGMAS),
            evidence={
                "slots": [base.slots, other.slots],
                "concurrency": [base.concurrency, other.concurrency],
                "threads_known": [base.capacity_known, other.capacity_known],
                "prefixes": self.evidence[:10],
            },
        )


def _prefix_rows(p: str, s: _Sides, al: Alignment, par: _Parallelism) -> list[dict[str, Any]]:
    """The rows of prefix ``p``: compute (less io and worker), io, worker, retries, waiting,
    transfers; its parallelism term goes to ``par``."""
    b, o = s.pb.loc[p], s.po.loc[p]
    kb = b["share"] / b["compute"] if b["compute"] > 0 else np.nan
    ko = o["share"] / o["compute"] if o["compute"] > 0 else np.nan
    if np.isfinite(kb) and np.isfinite(ko):
        comp = (o["compute"] - b["compute"]) * kb
        par_s = o["compute"] * (ko - kb)
        k = kb
    else:  # a prefix in one run only (or without compute in one): its share as it is
        comp = o["share"] - b["share"]
        par_s = 0.0
        k = kb if np.isfinite(kb) else (ko if np.isfinite(ko) else 0.0)
    k0 = k if np.isfinite(k) else 0.0
    # more (or fewer) tasks also cost their dispatch: with the prefix's compute, not the scheduler
    comp += float(_more_tasks_dispatch(s.pb.loc[[p]], s.po.loc[[p]]).iloc[0])
    io = (o["io"] - b["io"]) * k if s.both_io else 0.0
    wrk, sd_w, wev = _worker_term(p, s, k, k0)
    sd = float(s.sd_dur.loc[p]) * k0
    rows = [
        _row(
            "compute",
            comp - io - wrk,
            sd,
            prefix=p,
            evidence=_compute_evidence(p, b, o, kb, ko, al),
        )
    ]
    if s.both_io and (o["io"] or b["io"]):
        rows.append(
            _row("io", io, sd, prefix=p, evidence={"darshan_s": [float(b["io"]), float(o["io"])]})
        )
    if wrk != 0.0:
        rows.append(_row("worker", wrk, sd_w, prefix=p, worker=wev.get("worker"), evidence=wev))
    rows.extend(_latency_rows(p, s, b, o))
    relative = abs(ko - kb) / kb if np.isfinite(kb) and np.isfinite(ko) and kb else 0.0
    par.add(p, par_s, sd * relative)
    return rows


def _worker_term(p: str, s: _Sides, k: float, k0: float) -> tuple[float, float, dict[str, Any]]:
    """Prefix ``p``'s worker cause: (seconds, noise, evidence) from the change in the largest
    excess of one worker over the others' median (0 when ``p`` ran on one worker in both)."""
    if p not in s.we_o.index and p not in s.we_b.index:
        return 0.0, 0.0, {}
    eo = float(s.we_o["excess"].get(p, 0.0))
    eb = float(s.we_b["excess"].get(p, 0.0))
    sd_w = float(np.hypot(s.we_o["sd"].get(p, 0.0), s.we_b["sd"].get(p, 0.0))) * k0
    wev: dict[str, Any] = {}
    if p in s.we_o.index:
        ratio = s.we_o.loc[p, "ratio"]
        wev = {
            "worker": str(s.we_o.loc[p, "worker"]),
            "tasks": int(s.we_o.loc[p, "tasks"]),
            "excess_s": eo,
            "baseline_excess_s": eb,
            "ratio_to_median": None if pd.isna(ratio) else float(ratio),
        }
    return (eo - eb) * k, sd_w, wev


def _compute_evidence(
    p: str, b: pd.Series, o: pd.Series, kb: float, ko: float, al: Alignment
) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "compute_s": [float(b["compute"]), float(o["compute"])],
        "executions": [int(b["executions"]), int(o["executions"])],
        "share_s": [float(b["share"]), float(o["share"])],
        "concurrency": [
            None if not np.isfinite(kb) or kb == 0 else float(1 / kb),
            None if not np.isfinite(ko) or ko == 0 else float(1 / ko),
        ],
    }
    if p in al.added:
        ev["added"] = True
    if p in al.removed:
        ev["removed"] = True
    return ev


def _latency_rows(p: str, s: _Sides, b: pd.Series, o: pd.Series) -> list[dict[str, Any]]:
    """Prefix ``p``'s retries, waiting and transfers rows (those that changed or occurred)."""
    rows = []
    retr = (o["fail_share"] - b["fail_share"]) + (o["retry_wait"] - b["retry_wait"])
    if retr != 0.0 or o["failed"] or b["failed"]:
        evidence = {
            "failed_attempts": [int(b["failed"]), int(o["failed"])],
            "failed_compute_s": [float(b["fail_compute"]), float(o["fail_compute"])],
        }
        rows.append(_row("retries", retr, 0.0, prefix=p, evidence=evidence))
    wt = o["wait"] - b["wait"]
    if wt != 0.0:
        noise = float(s.sd_wait.loc[p]) + _latency_noise(b, o, "wait", "waiters")
        evidence = {"waiting_s": [float(b["wait"]), float(o["wait"])]}
        rows.append(_row("waiting", wt, noise, prefix=p, evidence=evidence))
    xf = o["xfer"] - b["xfer"]
    if xf != 0.0 or o["incoming"] or b["incoming"]:
        similar = abs(o["incoming"] - b["incoming"]) <= 0.1 * max(o["incoming"], b["incoming"])
        noise = float(s.sd_xfer.loc[p]) + (
            _latency_noise(b, o, "xfer", "receivers") if similar else 0.0
        )
        evidence = {
            "transfer_s": [float(b["xfer"]), float(o["xfer"])],
            "bytes_in": [int(b["incoming"]), int(o["incoming"])],
        }
        rows.append(_row("transfers", xf, noise, prefix=p, evidence=evidence))
    return rows


def _interval_rows(base: Blame, other: Blame) -> list[dict[str, Any]]:
    """Startup and tail: single intervals of each run, compared directly; the startup's
    evidence holds the batch jobs' queue wait when a run states it (dask-jobqueue)."""
    evidence: dict[str, Any] = {"startup_s": [base.startup, other.startup]}
    waits = [base.timeline.queue_wait, other.timeline.queue_wait]
    if any(w is not None for w in waits):
        evidence["queue_wait_s"] = waits
    return [
        _row("startup", other.startup - base.startup, 0.0, evidence=evidence),
        _row("tail", other.tail - base.tail, 0.0, evidence={"tail_s": [base.tail, other.tail]}),
    ]


def _rank_causes(
    rows: list[dict[str, Any]], diff: float, base: Blame, other: Blame
) -> pd.DataFrame:
    """The cause table: ``rows`` plus what is left unexplained, each row's noise (scaled, with
    the floors), whether it is significant, largest in the direction of ``diff`` first."""
    causes = pd.DataFrame(rows)
    explained = float(causes["seconds"].sum())
    rows_u = _row(
        "unexplained",
        diff - explained,
        0.0,
        evidence={
            "gap_s": [base.gap, other.gap],
            "why": "time when no task ran and none was ready (the client between computations, "
            "or records missing), plus rounding",
        },
    )
    causes = pd.concat([causes, pd.DataFrame([rows_u])], ignore_index=True)
    floor = max(NOISE_FLOOR_REL * max(base.makespan, other.makespan), NOISE_FLOOR_S)
    causes["noise"] = np.maximum(NOISE_SIGMAS * causes["noise"].astype("float64"), floor)
    single = causes["cause"].isin(["startup", "tail", "unexplained"]).to_numpy()
    interval = max(
        NOISE_INTERVAL_REL * max(base.makespan, other.makespan),
        NOISE_SIGMAS * NOISE_ROUND_TRIPS * max(base.latency, other.latency),
    )
    causes.loc[single, "noise"] = np.maximum(causes.loc[single, "noise"], interval)
    _boundary_noise(causes, base, other, interval)
    causes["significant"] = causes["seconds"].abs() > causes["noise"]
    sign = 1.0 if diff >= 0 else -1.0
    causes["_order"] = [CAUSES.index(c) for c in causes["cause"]]
    causes["_rank"] = -sign * causes["seconds"]
    causes = causes.sort_values(["_rank", "_order", "prefix"], kind="stable", na_position="last")
    return causes.drop(columns=["_order", "_rank"]).reset_index(drop=True)[CAUSE_COLUMNS]


def _boundary_noise(causes: pd.DataFrame, base: Blame, other: Blame, interval: float) -> None:
    """Widen the noise of ``startup`` and ``scheduler`` where they trade seconds at one boundary.

    The opening of a run is two adjacent intervals: ``startup`` until the scheduler has ready
    work, then its dispatch until the first task starts (part of ``scheduler``). Between two
    recordings of the same workflow the boundary moves (when ``update_graph`` is counted as
    having made work ready), so seconds leave one interval for the other: the same seconds, not
    a cause. The dispatch before the first task is a single interval too (the interval's noise),
    and seconds moved across the boundary (the smaller change, where the two change in opposite
    directions) are noise of both; the scheduler's noise grows by at most the opening's own
    change, so a dispatch slower all along is named as before, and so is a slower start that
    trades nothing.
    """
    d_sched = other.startup_sched - base.startup_sched
    d_start = other.startup - base.startup
    if not (base.startup_sched or other.startup_sched):
        return
    traded = min(abs(d_sched), abs(d_start)) if d_sched * d_start < 0 else 0.0
    is_sched = causes["cause"].eq("scheduler").to_numpy()
    is_start = causes["cause"].eq("startup").to_numpy()
    # never more than the opening's own change: the dispatch all along keeps its noise
    causes.loc[is_sched, "noise"] = causes.loc[is_sched, "noise"] + min(
        abs(d_sched), interval + traded
    )
    causes.loc[is_start, "noise"] = causes.loc[is_start, "noise"] + traded


def _notes(base: Blame, other: Blame) -> list[str]:
    """What the comparison cannot attribute, and why (the runs' own notes first)."""
    notes: list[str] = []
    for bl in (base, other):
        notes.extend(f"{bl.timeline.label}: {n}" for n in bl.notes)
    if base.timeline.has_io != other.timeline.has_io:
        notes.append(
            "only one run has linked Darshan I/O: I/O time cannot be told from compute, it "
            "counts as compute"
        )
    if not (base.timeline.has_transitions and other.timeline.has_transitions):
        notes.append(
            "waiting and transfers are not attributed: a run has no worker transitions, so "
            "when its tasks became ready is not known (their waits count in parallelism)"
        )
    return notes


def _latency_noise(b: pd.Series, o: pd.Series, col: str, count: str) -> float:
    """Noise of a sum of latencies: sqrt(n) x the mean latency of the slower run (1 sigma).

    A whole run can be slower to dispatch or to move small messages (a loaded machine): that
    shifts every task's wait alike, which the spread of the matched tasks' differences misses.
    """
    n = max(b[count], o[count])
    if not n:
        return 0.0
    per = max(b[col] / b[count] if b[count] else 0.0, o[col] / o[count] if o[count] else 0.0)
    return float(np.sqrt(n) * per / NOISE_SIGMAS * 2)


def _row(
    cause: str,
    seconds: float,
    noise: float,
    *,
    prefix: str | None = None,
    worker: str | None = None,
    file: str | None = None,
    evidence: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "cause": cause,
        "seconds": float(seconds),
        "noise": float(noise),
        "significant": False,
        "prefix": prefix,
        "worker": worker,
        "file": file,
        "evidence": evidence or {},
    }


# -- tables ------------------------------------------------------------------------------------


def changed_tasks(base: Blame, other: Blame, al: Alignment, top: int = 20) -> pd.DataFrame:
    """The matched tasks whose duration changed most: the ``top`` by seconds, then by ratio."""
    cols = [
        "key_b",
        "key_o",
        "prefix",
        "rule",
        "duration_b",
        "duration_o",
        "delta_s",
        "ratio",
        "worker_b",
        "thread_b",
        "worker_o",
        "thread_o",
        "why",
    ]
    if not len(al.pairs):
        return pd.DataFrame(columns=cols)
    tb, to = _tasks(base), _tasks(other)
    p = al.pairs
    rb, ro = p["row_b"].to_numpy(), p["row_o"].to_numpy()
    out = pd.DataFrame(
        {
            "key_b": pd.Series(tb.key[rb], dtype=object),
            "key_o": pd.Series(to.key[ro], dtype=object),
            "prefix": pd.Series(tb.prefix[rb], dtype=object),
            "rule": pd.Series(_obj(p["rule"]), dtype=object),
            "duration_b": tb.duration[rb],
            "duration_o": to.duration[ro],
            "worker_b": pd.Series(tb.worker[rb], dtype=object),
            "thread_b": pd.Series(tb.thread[rb], dtype=object),
            "worker_o": pd.Series(to.worker[ro], dtype=object),
            "thread_o": pd.Series(to.thread[ro], dtype=object),
        }
    )
    out["delta_s"] = out["duration_o"] - out["duration_b"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ratio"] = out["duration_o"] / out["duration_b"]
    by_delta = out.reindex(
        out["delta_s"].abs().sort_values(ascending=False, kind="stable").index
    ).head(top)
    # ratios of tasks of a millisecond or more only (tiny tasks' ratios are clock noise)
    big = out[np.maximum(out["duration_b"], out["duration_o"]) >= 1e-3]
    lr = np.abs(np.log(big["ratio"].where(big["ratio"] > 0)))
    by_ratio = big.reindex(lr.sort_values(ascending=False, kind="stable").index).head(top)
    by_ratio = by_ratio[~by_ratio.index.isin(by_delta.index)]
    res = pd.concat([by_delta.assign(why="seconds"), by_ratio.assign(why="ratio")])
    return res.reset_index(drop=True)[cols]


def worker_table(base: Blame, other: Blame) -> pd.DataFrame:
    """Per run and worker: host, tasks, compute, share of the makespan, slowness."""
    parts = []
    for which, bl in (("baseline", base), ("other", other)):
        ex = bl.executions[bl.executions["ok"]]
        if not len(ex):
            continue
        med = ex.groupby("prefix")["duration"].transform("median")
        rel = (ex["duration"] / med.where(med > 0)).astype("float64")
        g = ex.assign(rel=rel).groupby("worker")
        t = pd.DataFrame(
            {
                "tasks": g.size(),
                "compute_s": g["duration"].sum(),
                "share_s": g["share"].sum(),
                "slowness": g["rel"].median(),
            }
        ).reset_index()
        t.insert(0, "run", which)
        t["host"] = (
            t["worker"]
            .astype(str)
            .str.replace(r"^[a-z]+://", "", regex=True)
            .str.replace(r":\d+$", "", regex=True)
        )
        parts.append(t)
    if not parts:
        return pd.DataFrame(
            columns=["run", "worker", "tasks", "compute_s", "share_s", "slowness", "host"]
        )
    return pd.concat(parts, ignore_index=True)


def host_table(base: Blame, other: Blame, workers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per host: tasks and compute in each run (from :func:`worker_table`)."""
    w = worker_table(base, other) if workers is None else workers
    if not len(w):
        return pd.DataFrame(
            columns=["host", "tasks_b", "tasks_o", "compute_b", "compute_o", "delta_s"]
        )
    g = w.groupby(["host", "run"])[["tasks", "compute_s"]].sum().unstack("run").fillna(0)
    out = pd.DataFrame(
        {
            "tasks_b": g.get(("tasks", "baseline"), 0),
            "tasks_o": g.get(("tasks", "other"), 0),
            "compute_b": g.get(("compute_s", "baseline"), 0.0),
            "compute_o": g.get(("compute_s", "other"), 0.0),
        }
    )
    out["tasks_b"] = out["tasks_b"].astype("int64")
    out["tasks_o"] = out["tasks_o"].astype("int64")
    out["delta_s"] = out["compute_o"] - out["compute_b"]
    return out.reset_index()


def file_table(base: Blame, other: Blame) -> pd.DataFrame:
    cols = ["path", "bytes_b", "bytes_o", "seconds_b", "seconds_o", "delta_s"]
    if not (base.timeline.has_io and other.timeline.has_io):
        return pd.DataFrame(columns=cols)
    gb = base.timeline.io.groupby("path")[["bytes", "seconds"]].sum()
    go = other.timeline.io.groupby("path")[["bytes", "seconds"]].sum()
    idx = gb.index.union(go.index)
    gb, go = gb.reindex(idx).fillna(0), go.reindex(idx).fillna(0)
    out = pd.DataFrame(
        {
            "path": idx,
            "bytes_b": gb["bytes"].astype("int64").to_numpy(),
            "bytes_o": go["bytes"].astype("int64").to_numpy(),
            "seconds_b": gb["seconds"].to_numpy(),
            "seconds_o": go["seconds"].to_numpy(),
        }
    )
    out["delta_s"] = out["seconds_o"] - out["seconds_b"]
    # largest change first (to the microsecond: sums in another order differ in the last bits)
    order = np.lexsort((out["path"].astype(str).to_numpy(), -np.round(out["delta_s"].abs(), 6)))
    return out.iloc[order].reset_index(drop=True)


def run_table(*blames: Blame) -> pd.DataFrame:
    """Per run: makespan and its parts, compute, concurrency and slots."""
    return pd.DataFrame(
        [
            {
                "run": bl.timeline.label,
                "run_id": bl.timeline.run_id,
                "makespan_s": bl.makespan,
                "startup_s": bl.startup,
                "window_s": bl.window,
                "tail_s": bl.tail,
                "compute_s": float(bl.executions["duration"].sum()),
                "tasks": int(bl.executions["key"].nunique()),
                "executions": int(len(bl.executions)),
                "concurrency": bl.concurrency,
                "slots": bl.slots,
            }
            for bl in blames
        ]
    )


__all__ = [
    "CAUSES",
    "CAUSE_COLUMNS",
    "Alignment",
    "Explanation",
    "align",
    "changed_tasks",
    "explain",
    "file_table",
    "host_table",
    "run_table",
    "worker_table",
]
