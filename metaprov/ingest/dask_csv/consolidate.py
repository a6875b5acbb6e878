"""The per-file codes -> the run's ``tasks``, ``executions``, ``transitions`` and ``dependencies``.

:func:`consolidate` joins what the files said about each key: one key index for the whole run,
the executions found in the worker (or scheduler) transitions, the tasks' times, states and
groups (:func:`key_split`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.ingest.dask_csv.columns import (
    _decode,
    _index_str,
    _mapping,
    _release_memory,
    _sortable,
    _sorted_union,
    _str,
    _table,
    _Threads,
    _utc,
)
from metaprov.ingest.dask_csv.graphs import _dependencies, _Graphs
from metaprov.ingest.dask_csv.order import (
    _at,
    _first_in_order,
    _in_time_order,
    _key_time_order,
    _last_in_order,
    _lexorder,
    _rank_in_runs,
    _ranks,
    _run_starts,
    _time_key,
    _union,
)
from metaprov.ingest.dask_csv.transfers import _TransferKeys
from metaprov.ingest.dask_csv.transitions import _Trans
from metaprov.records import Accounting, RunRecords, conform
from metaprov.timeutil import NAT_US as _NAT

_TCOLS = ["key", "observer", "address", "from_state", "to_state", "time", "stimulus_id", "line"]


def _transitions(files: list[_Trans], key_cats: pa.Array) -> pd.DataFrame:
    """The transitions table: both files, by time, then observer, then line; text as Categorical.

    Categories are as pandas' ``union_categoricals`` gives them: the first file's, then the new
    ones of the second (for the keys: ``key_cats``, with each file's ``tkey`` codes into them).
    The files' columns no later step uses are released as they are used.
    """
    if not files:
        return conform("transitions", pd.DataFrame(columns=_TCOLS))
    # Rows of each file are in line order and the scheduler's come first: a stable sort by time
    # orders by (time, observer, line).
    order = np.argsort(_sortable(np.concatenate([f.time for f in files])), kind="stable")
    cols: dict[str, Any] = {}
    cols["key"] = _categorical(np.concatenate([f.tkey for f in files])[order], key_cats)
    for f in files:
        f.tkey = None
    for name in ("address", "from_state", "to_state", "stimulus_id"):
        parts = [getattr(f, name) for f in files]
        filled = [p for p in parts if len(p.cats)]
        if len(filled) <= 1:  # one file has the column (stimulus_id: only the scheduler's)
            cats = filled[0].cats if filled else parts[0].cats
            maps = [None if len(p.cats) else np.array([-1], np.int32) for p in parts]
        else:
            cats, maps = _union([p.cats for p in parts])
        codes = np.concatenate(
            [
                p.codes if m is None else m[p.codes].astype(np.int32)
                for p, m in zip(parts, maps, strict=True)
            ]
        )
        for f in files:  # (the executions still need the rest)
            if name == "stimulus_id" or (name == "address" and f.observer == "scheduler"):
                setattr(f, name, None)
        del parts
        cols[name] = _categorical(codes[order], cats)
        del codes
    obs = np.concatenate([np.full(len(f), i, dtype=np.int8) for i, f in enumerate(files)])
    cols["observer"] = _categorical(obs[order], pa.array([f.observer for f in files]))
    cols["time"] = _utc(np.concatenate([f.time for f in files])[order])
    cols["line"] = pd.array(np.concatenate([f.line for f in files])[order], dtype="Int64")
    for f in files:
        f.line = None
    return _table("transitions", cols)


def _categorical(codes: np.ndarray, cats: pa.Array) -> pd.Categorical:
    categories = _index_str(cats)
    # The categories are unique by construction (a dictionary). pandas' check of that hashes them
    # all into a table of Python strings, kept with the dtype: 150 MB and 0.3 s per 10^6 keys.
    fast = getattr(pd.CategoricalDtype, "_from_fastpath", None)
    dtype = fast(categories, False) if fast is not None else pd.CategoricalDtype(categories)
    return pd.Categorical.from_codes(
        codes.astype(np.int32, copy=False), dtype=dtype, validate=False
    )


@dataclass
class _Exec:
    """Executions in code space (keys: run-wide codes; workers: codes into sorted addresses)."""

    key: np.ndarray
    worker: np.ndarray
    start: np.ndarray
    end: np.ndarray
    outcome: pa.Array
    thread: _Threads
    source: np.ndarray  # 0: worker, 1: scheduler
    attempt: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lost: np.ndarray | None = None  # the worker's own record is missing (None: all False)

    def lost_mask(self) -> np.ndarray:
        return np.zeros(len(self.key), dtype=bool) if self.lost is None else self.lost


def _executions(
    sched: _Trans | None,
    work: _Trans | None,
    nkeys: int,
    wcats: pa.Array,
    acct: Accounting | None = None,
) -> _Exec:
    """One row per execution attempt: worker-side windows, else the scheduler's startstops.

    Per key and worker: the worker's own records when it has any for that key, else every
    execution the scheduler saw end there (``processing`` rows carrying a thread or a compute
    window). A worker whose records are lost (killed mid-run, its file cut) keeps the executions
    the scheduler saw it finish; when the run has worker-side records at all, those are marked
    ``lost`` (their worker's own record is missing).

    Inconsistent times are reported to ``acct``: a worker-side end with no start before it
    (the end is not used), a scheduler startstop that ends before it begins (the end is treated
    as absent). Rows by key, start, worker; ``attempt`` counts per key.
    """
    parts: list[_Exec] = []
    covered = np.zeros(0, dtype=np.int64)  # key * (workers + 1) + worker + 1, sorted
    nw = len(wcats) + 1
    has_worker_side = work is not None and len(work) > 0
    if has_worker_side:
        parts.append(_worker_executions(work, wcats, acct))
        covered = np.unique(parts[-1].key.astype(np.int64) * nw + (parts[-1].worker + 1))
    if sched is not None and len(sched):
        from_sched = _scheduler_executions(sched, covered, wcats, acct)
        if from_sched is not None:
            from_sched.lost = np.full(len(from_sched.key), has_worker_side)
            parts.append(from_sched)
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return _Exec(z, z, z, z, pa.array([], pa.string()), _Threads(z.astype(np.uint64), z > 0), z)
    ex = _concat(parts)
    if sched is not None and len(sched) and ex.thread.na.any():
        _threads_from_scheduler(ex, sched, wcats)
    ex = _in_attempt_order(ex, wcats)
    ex.attempt = _rank_in_runs(_run_starts(ex.key))
    return ex


def _worker_executions(work: _Trans, wcats: pa.Array, acct: Accounting | None) -> _Exec:
    """Executions from the worker's transitions: a start (to ``executing``) paired with the next
    row of the same key and worker that leaves the running states."""
    running = ("executing", "long-running", "cancelled", "resumed")
    from_run, to_run = work.from_state.is_in(running), work.to_state.is_in(running)
    is_start = work.to_state.is_in(("executing",)) & ~from_run
    is_end = from_run & ~to_run
    ev = np.flatnonzero(is_start | is_end)
    kc, ac = work.gkey[ev], work.address.codes[ev]
    # by key, worker, then time and line (ev is in line order)
    tev = work.time[ev]
    order = _lexorder(kc, ac) if _in_time_order(tev) else _lexorder(kc, ac, _time_key(tev))
    del tev
    ev, kc, ac = ev[order], kc[order], ac[order]
    st = is_start[ev]
    nxt_ok = np.r_[(~st[1:]) & (kc[1:] == kc[:-1]) & (ac[1:] == ac[:-1]), False]
    starts = ev[st]
    ends = np.where(nxt_ok[st], np.r_[ev[1:], -1][st], -1)
    orphan = ~st & ~np.r_[False, (nxt_ok & st)[:-1]]
    if acct is not None and orphan.any():
        acct.warn(
            "worker_transition.csv",
            f"end of an execution with no start before it (times out of order, or the log "
            f"began mid-task; end not used) x{int(orphan.sum())}",
            column="time",
        )
    wmap = _mapping(work.address.cats, wcats)
    return _Exec(
        key=work.gkey[starts],
        worker=wmap[work.address.codes[starts]],
        start=work.time[starts],
        end=_at(work.time, ends, _NAT),
        outcome=work.to_state.take(ends).arrow(),
        thread=work.thread.take(starts),
        source=np.zeros(len(starts), dtype=np.int8),
    )


def _scheduler_executions(
    sched: _Trans, covered: np.ndarray, wcats: pa.Array, acct: Accounting | None
) -> _Exec | None:
    """Executions from the scheduler's startstops (``processing`` rows with a thread or a
    begins), for the (key, worker) pairs no worker-side execution covers (``covered``: sorted
    pair codes ``key * (workers + 1) + worker + 1``)."""
    rows = sched.from_state.is_in(("processing",)) & (~sched.thread.na | (sched.begins != _NAT))
    idx = np.flatnonzero(rows)
    if len(covered) and len(idx):
        worker = _mapping(sched.worker.cats, wcats)[sched.worker.codes[idx]]
        pair = sched.gkey[idx].astype(np.int64) * (len(wcats) + 1) + (worker + 1)
        at = np.minimum(np.searchsorted(covered, pair), len(covered) - 1)
        idx = idx[covered[at] != pair]
    ends = sched.ends[idx]
    backwards = (ends != _NAT) & (sched.begins[idx] != _NAT) & (ends < sched.begins[idx])
    if backwards.any():
        if acct is not None:
            acct.warn(
                "scheduler_transition.csv",
                f"'ends' before 'begins' (end treated as absent) x{int(backwards.sum())}",
                column="ends",
            )
        ends = np.where(backwards, _NAT, ends)
    if not len(idx):
        return None
    return _Exec(
        key=sched.gkey[idx],
        worker=_mapping(sched.worker.cats, wcats)[sched.worker.codes[idx]],
        start=sched.begins[idx],
        end=ends,
        outcome=sched.to_state.take(idx).arrow(),
        thread=sched.thread.take(idx),
        source=np.ones(len(idx), dtype=np.int8),
    )


def _concat(parts: list[_Exec]) -> _Exec:
    return _Exec(
        key=np.concatenate([p.key for p in parts]),
        worker=np.concatenate([p.worker for p in parts]),
        start=np.concatenate([p.start for p in parts]),
        end=np.concatenate([p.end for p in parts]),
        outcome=pa.concat_arrays([p.outcome.cast(pa.string()) for p in parts]),
        thread=_Threads(
            np.concatenate([p.thread.values for p in parts]),
            np.concatenate([p.thread.na for p in parts]),
        ),
        source=np.concatenate([p.source for p in parts]),
        lost=np.concatenate([p.lost_mask() for p in parts]),
    )


def _threads_from_scheduler(ex: _Exec, sched: _Trans, wcats: pa.Array) -> None:
    """The thread of a worker-side execution without one comes from the scheduler's row for the
    same key and worker (the latest one; a missing worker matches a missing worker)."""
    nw = len(wcats) + 1
    has = np.flatnonzero(~sched.thread.na)
    swork = _mapping(sched.worker.cats, wcats)[sched.worker.codes[has]]
    pair = sched.gkey[has] * nw + (swork + 1)
    o = _lexorder(pair, _time_key(sched.time[has]))
    ps = pair[o]
    if len(ps):
        last = np.r_[ps[1:] != ps[:-1], True]
        upair, uthread = ps[last], sched.thread.values[has][o][last]
        expair = ex.key * nw + (ex.worker + 1)
        i = np.minimum(np.searchsorted(upair, expair), len(upair) - 1)
        fill = ex.thread.na & (upair[i] == expair)
        ex.thread.values = np.where(fill, uthread[i], ex.thread.values)
        ex.thread.na = ex.thread.na & ~fill


def _in_attempt_order(ex: _Exec, wcats: pa.Array) -> _Exec:
    """By key, start, worker (texts sort like their codes; missing last)."""
    o = _lexorder(ex.key, _time_key(ex.start), np.where(ex.worker < 0, len(wcats), ex.worker))
    return _Exec(
        key=ex.key[o],
        worker=ex.worker[o],
        start=ex.start[o],
        end=ex.end[o],
        outcome=ex.outcome.take(pa.array(o)),
        thread=_Threads(ex.thread.values[o], ex.thread.na[o]),
        source=ex.source[o],
        lost=ex.lost_mask()[o],
    )


def _executions_table(ex: _Exec, keys: pa.Array, wcats: pa.Array) -> pd.DataFrame:
    return _table(
        "executions",
        {
            "key": _str(_decode(keys, ex.key)),
            "attempt": pd.array(ex.attempt, dtype="Int64"),
            "worker": _str(_decode(wcats, ex.worker)),
            "thread": ex.thread.array(),
            "start": _utc(ex.start),
            "end": _utc(ex.end),
            "outcome": _str(ex.outcome),
            "time_source": _source_text(ex.source),
            "window": _str(
                pa.array(["hook", "scheduler"]).take(
                    pa.array(ex.source.astype(np.int64), mask=ex.source < 0)
                )
            ),
            "record_lost": pd.array(ex.lost_mask(), dtype="boolean"),
        },
    )


def _source_text(source: np.ndarray) -> pd.Series:
    """0 -> 'worker', 1 -> 'scheduler', -1 -> missing."""
    names = pa.array(["worker", "scheduler"])
    return _str(names.take(pa.array(source.astype(np.int64), mask=source < 0)))


def consolidate(
    records: RunRecords,
    sched: _Trans | None,
    work: _Trans | None,
    graphs: _Graphs | None,
    transfer_keys: _TransferKeys | None,
) -> None:
    """Fill ``records.tasks``, ``executions``, ``transitions``, ``threads`` and ``dependencies``.

    The steps, largest table first, each freeing what no later step needs: one key index for
    the run; the transitions; the dependencies; the executions; the tasks (what the transition
    files say of each key, then its final execution, its graph); the threads.
    """
    sched = sched if sched is not None and len(sched) else None
    work = work if work is not None and len(work) else None
    files = [f for f in (sched, work) if f is not None]
    ki = _key_index(files, graphs, transfer_keys)
    keys, n = ki.keys, len(ki.keys)
    records.transitions = _transitions(files, ki.key_cats)
    ki.key_cats = None
    _release_memory()
    membership = None
    if graphs is not None:
        records.dependencies = _dependencies(graphs, ki.graph_keys, keys)
        membership = _graph_membership(graphs, ki.graph_keys)
        ki.graph_keys = None
    # worker addresses of executions, sorted
    wcats = _sorted_union(
        work.address.cats if work is not None else None,
        sched.worker.cats if sched is not None else None,
    )
    ex = _executions(sched, work, n, wcats, records.accounting)
    records.executions = _executions_table(ex, keys, wcats)
    said = _from_transitions(sched, work, n)
    moved = np.zeros(n, dtype=bool)  # moved between workers: it was in memory, so it ran
    if transfer_keys is not None and len(transfer_keys.codes):
        moved[ki.transfer_keys[transfer_keys.codes]] = True
    tasks: dict[str, Any] = {"key": _str(keys), **said.columns()}
    tasks["prefix"], tasks["group"] = _prefix_group(keys, said.prefix, said.group)
    tasks.update(_final_execution(ex, wcats, n, said, moved))
    tasks.update(_graph_columns(membership, records.graphs, n))
    records.tasks = _table("tasks", tasks)
    records.threads = _threads(ex, wcats)


@dataclass
class _KeyIndex:
    """Every key text of the run, sorted once (for the tasks and every sort by key)."""

    keys: pa.Array
    key_cats: pa.Array | None  # the transition files' key texts, in their code order
    graph_keys: np.ndarray | None  # graph.csv's key codes -> index into keys
    transfer_keys: np.ndarray | None  # worker_transfer.csv's key codes -> index into keys


def _key_index(
    files: list[_Trans], graphs: _Graphs | None, transfer_keys: _TransferKeys | None
) -> _KeyIndex:
    """Hash every key text once and sort the union; recode each transition file's keys
    (``tkey``: into the transition key texts, ``gkey``: into the sorted index)."""
    # the transition files' keys come first, so the first texts are their categories
    parts = [f.key.cats for f in files]
    if graphs is not None:
        parts.append(graphs.cats)
    if transfer_keys is not None:
        parts.append(transfer_keys.cats)
    texts, maps = _union(parts)
    keys, rank = _ranks(texts)
    n_trans = max((int(m.max()) + 1 for m in maps[: len(files)]), default=0)
    for f, m in zip(files, maps, strict=False):
        f.tkey = m[f.key.codes].astype(np.int32)
        f.gkey = rank[f.tkey]
        f.key = None
    return _KeyIndex(
        keys=keys,
        key_cats=texts.slice(0, n_trans),
        graph_keys=rank[maps[len(files)]] if graphs is not None else None,
        transfer_keys=rank[maps[-1]] if transfer_keys is not None else None,
    )


@dataclass
class _Membership:
    """Which graph holds each submitted key (rows of graph.csv, key index per row)."""

    graph_of: np.ndarray
    wanted_of: np.ndarray
    key: np.ndarray


def _graph_membership(graphs: _Graphs, graph_keys: np.ndarray) -> _Membership:
    out = _Membership(graphs.graph, graphs.wanted, graph_keys[graphs.key])
    graphs.cats = graphs.key = graphs.edge_graph = graphs.edge_key = graphs.edge_dep = None
    return out


@dataclass
class _Said:
    """What the transition files say of each key (None: no scheduler / worker file)."""

    prefix: pa.Array | None = None
    group: pa.Array | None = None
    state: pa.Array | None = None
    sched_begins: np.ndarray | None = None
    sched_ends: np.ndarray | None = None
    nbytes: np.ndarray | None = None
    erred: np.ndarray | None = None
    n_transitions: np.ndarray | None = None

    def columns(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.sched_begins is not None:
            out["sched_begins"] = _utc(self.sched_begins)
            out["sched_ends"] = _utc(self.sched_ends)
        if self.state is not None:
            out["state"] = _str(self.state)
        if self.sched_begins is not None:
            out["nbytes"] = pd.Series(self.nbytes).round().astype("Int64")
        return out


def _from_transitions(sched: _Trans | None, work: _Trans | None, n: int) -> _Said:
    """Per key: prefix and group (the first scheduler row with one), state (the last row, the
    scheduler's first), the scheduler's begins/ends and size (its last row carrying results),
    whether it erred, its transition count. Frees the files."""
    said = _Said(
        nbytes=np.full(n, np.nan),
        erred=np.zeros(n, dtype=bool),
        n_transitions=np.zeros(n, dtype=np.int64),
    )
    if sched is not None:
        kc = sched.gkey
        # rows by (key, time, line): the first with a prefix, the last, the last carrying results
        order = _key_time_order(kc, sched.time)
        first_pg = _first_in_order(kc, order, n, sched.prefix.codes >= 0)
        last = _last_in_order(kc, order, n)
        carries = ~sched.thread.na | (sched.begins != _NAT) | ~np.isnan(sched.size)
        fin = _last_in_order(kc, order, n, carries)
        del order
        said.prefix = sched.prefix.take(first_pg).arrow()
        said.group = sched.group.take(first_pg).arrow()
        said.state = sched.to_state.take(last).arrow()
        said.sched_begins = _at(sched.begins, fin, _NAT)
        said.sched_ends = _at(sched.ends, fin, _NAT)
        said.nbytes = _at(sched.size, fin, np.nan)
        said.erred |= np.bincount(kc[sched.to_state.is_in(("erred",))], minlength=n) > 0
        said.n_transitions += np.bincount(kc, minlength=n)
        sched.release()
    if work is not None:
        kc = work.gkey
        last = _last_in_order(kc, _key_time_order(kc, work.time), n)
        wstate = work.to_state.take(last).arrow()
        said.state = wstate if said.state is None else pc.coalesce(said.state, wstate)
        said.erred |= np.bincount(kc[work.to_state.is_in(("error",))], minlength=n) > 0
        said.n_transitions += np.bincount(kc, minlength=n)
        work.release()
    return said


def _prefix_group(
    keys: pa.Array, prefix: pa.Array | None, group: pa.Array | None
) -> tuple[pd.Series, pd.Series]:
    """The scheduler's prefix and group; what it never reported, from the key as Dask does."""
    if prefix is None:
        grp, pre = key_split(_str(keys))
        return pre, grp
    pre, grp = _str(prefix), _str(group)
    if pre.isna().any():
        need = np.flatnonzero(pre.isna().to_numpy() | grp.isna().to_numpy())
        g2, p2 = key_split(_str(keys.take(pa.array(need))))
        pre.iloc[need] = pre.iloc[need].fillna(pd.Series(p2.array, index=need))
        grp.iloc[need] = grp.iloc[need].fillna(pd.Series(g2.array, index=need))
    return pre, grp


def _final_execution(
    ex: _Exec, wcats: pa.Array, n: int, said: _Said, moved: np.ndarray
) -> dict[str, Any]:
    """The columns a task takes from its final execution, and its execution counts."""
    final = _last_in_order(ex.key, None, n)  # ex is by key, then attempt
    n_exec = np.bincount(ex.key, minlength=n)
    cols: dict[str, Any] = {}
    cols["worker"] = _str(_decode(wcats, _at(ex.worker, final, -1)))
    cols["thread"] = ex.thread.take(final).array()
    cols["start"] = _utc(_at(ex.start, final, _NAT))
    cols["end"] = _utc(_at(ex.end, final, _NAT))
    cols["time_source"] = _source_text(_at(ex.source, final, -1))
    cols["duration"] = (cols["end"] - cols["start"]).dt.total_seconds()
    cols["n_transitions"] = pd.array(said.n_transitions, dtype="Int64")
    cols["n_executions"] = pd.array(n_exec, dtype="Int64")
    err_ex = pc.is_in(ex.outcome, pa.array(["error", "erred"])).to_numpy(zero_copy_only=False)
    erred = said.erred | (np.bincount(ex.key[err_ex], minlength=n) > 0)
    cols["erred"] = pd.array(erred, dtype="boolean")
    # retried: executed more than once (one definition for every surface, docs/records.md);
    # a task sent to processing again without a second execution (work stealing, a worker lost
    # while it ran) is not a retry: the lost ones are in worker_losses / lost_tasks
    cols["retried"] = pd.array(n_exec > 1, dtype="boolean")
    # A key moved between workers, or with a result size, existed in memory: it ran somewhere.
    cols["never_ran"] = pd.array((n_exec == 0) & ~moved & np.isnan(said.nbytes), dtype="boolean")
    return cols


def _graph_columns(m: _Membership | None, graphs: pd.DataFrame, n: int) -> dict[str, Any]:
    """The first graph holding each key, its client, and whether the client wanted the key."""
    if m is None or not len(m.key):
        return {"wanted": pd.array(np.zeros(n, dtype=bool), dtype="boolean")}
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, m.key, m.graph_of)  # the first graph holding the key
    graph = pd.array(np.where(first < np.iinfo(np.int64).max, first, 0), dtype="Int64")
    graph[first == np.iinfo(np.int64).max] = pd.NA
    wanted = np.zeros(n, dtype=bool)
    wanted[m.key[m.wanted_of]] = True
    client_of = graphs.set_index("graph")["client"]
    return {
        "graph": graph,
        "wanted": pd.array(wanted, dtype="boolean"),
        "client": client_of.reindex(pd.Series(graph).astype("float64")).array,
    }


def _threads(ex: _Exec, wcats: pa.Array) -> pd.DataFrame:
    """Tasks per (worker, thread); executions without a worker or a thread left out."""
    sel = np.flatnonzero(~ex.thread.na & (ex.worker >= 0))
    w, t = ex.worker[sel], ex.thread.values[sel]
    o = np.lexsort((t, w))
    w, t = w[o], t[o]
    new = _run_starts(w, t)
    counts = np.diff(np.r_[np.flatnonzero(new), len(w)])
    th = pd.DataFrame(
        {
            "worker": _str(_decode(wcats, w[new])),
            "thread": pd.arrays.IntegerArray(t[new].astype(np.uint64), np.zeros(new.sum(), bool)),
            "n_tasks": counts,
        }
    )
    return conform("threads", th)


_KEY_SPLIT = r"^(?P<head>[^-]*)(?P<rest>(?:-(?![0-9a-f]{8}(?:-|$))[A-Za-z]+(?=-|$))*)"


def key_split(keys: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(group, prefix) of Dask keys, vectorised, as ``dask.utils.key_split_group`` / ``key_split``.

    The scheduler names these itself; this is only used for keys it never reported (tasks seen only
    in a submitted graph or a transfer).
    """
    s = keys.astype("str")
    is_tuple = s.str.startswith("(")
    first = s.where(~is_tuple, s.str.split(",", n=1).str[0].str.strip("()\"'"))
    parts = first.str.extract(_KEY_SPLIT)
    head = parts["head"].fillna("")
    alpha = head.str.match(r"^[A-Za-z]")
    head = head.where(alpha, head.str.split(",").str[0].str.strip("_'()\""))
    prefix = head + parts["rest"].fillna("")
    prefix = prefix.where(~prefix.str.fullmatch(r"[a-f0-9]{32}"), "data")
    group = first.where(is_tuple, prefix)
    return group, prefix
