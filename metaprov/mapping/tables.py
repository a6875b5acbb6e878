"""Derived tables every part of the model shares: the task index, dependency edges, executions in
order, and the hosts and user behind agents.

Input: a :class:`~metaprov.mapping.MapContext` (the run's records and IRIs). Output: columnar
indexes (numpy/pyarrow), cached on the context, that the ``add_*`` steps of the mapping modules
build their triples from. No triples are made here, so every mapping module may import this one
and none of them needs another's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.terms import RunIris, as_text_array, concat

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

LARGE = pa.large_string()
TASK_COLUMNS = [
    "key",
    "prefix",
    "group",
    "graph",
    "state",
    "worker",
    "nbytes",
    "erred",
    "retried",
    "never_ran",
    "wanted",
]
EXECUTION_COLUMNS = [
    "key",
    "attempt",
    "worker",
    "thread",
    "start",
    "end",
    "outcome",
    "time_source",
    "record_lost",
]


def dict_map(values: Any, fn: Any) -> pa.Array:
    """Apply a column function to the distinct values only, then spread it back (nulls stay null).

    Worker addresses, prefixes, groups and states repeat millions of times: encoding each
    distinct value once is much cheaper than encoding every row.
    """
    if isinstance(values, pa.Array):
        arr = values
    elif isinstance(values, pd.Series) and (
        values.dtype == object or isinstance(values.dtype, pd.StringDtype)
    ):
        arr = as_text_array(values)  # text: repaired to valid UTF-8 if it must be
    else:
        arr = pa.Array.from_pandas(values)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if len(arr) == 0:
        return pa.array([], LARGE)
    enc = arr if isinstance(arr, pa.DictionaryArray) else pc.dictionary_encode(arr)
    mapped = fn(enc.dictionary)
    return mapped.take(enc.indices)


class KeyLookup:
    """Position of texts in a fixed array of distinct texts, for many lookups.

    ``pc.index_in`` builds a hash table of the whole value set on every call (~0.3-1 s for 10^6
    keys); the mapping asks for key rows a dozen times, per block for transfers and transitions.
    Here the values' 64-bit hashes are sorted once and bucketed by their top bits (about one value
    per bucket); a lookup hashes the queries, finds their bucket and scans it (one or two probes),
    then checks every candidate by comparing the texts, so the answer is exact (as ``index_in``).
    When two values share a hash, lookups fall back to ``index_in``.
    """

    def __init__(self, values: pa.Array) -> None:
        self.values = values
        self.series = _series(values)
        h = _hash64(self.series)
        self.order = np.argsort(h, kind="stable").astype(np.int64)
        self.sorted = h[self.order]
        self.exact = len(h) < 2 or not bool((self.sorted[1:] == self.sorted[:-1]).any())
        # Buckets: the top ``bits`` bits of the hash; starts[b] .. starts[b + 1] in ``sorted``.
        self.bits = max(1, int(len(h)).bit_length())
        self.shift = np.uint64(64 - self.bits)
        counts = np.bincount((self.sorted >> self.shift).astype(np.int64), minlength=1 << self.bits)
        self.starts = np.zeros((1 << self.bits) + 1, np.int64)
        np.cumsum(counts, out=self.starts[1:])

    def permuted(self, order: np.ndarray) -> KeyLookup:
        """The lookup of ``values.take(order)`` (no re-hashing)."""
        new = object.__new__(KeyLookup)
        new.__dict__.update(self.__dict__)
        new.values = self.values.take(pa.array(order))
        new.series = _series(new.values)
        inverse = np.empty(len(order), np.int64)
        inverse[order] = np.arange(len(order), dtype=np.int64)
        new.order = inverse[self.order]
        return new

    def rows(self, queries: pa.Array) -> np.ndarray:
        """Position of each query in the values (-1 when absent or null)."""
        n = len(self.values)
        if len(queries) == 0:
            return np.zeros(0, np.int64)
        if n == 0:
            return np.full(len(queries), -1, np.int64)
        if not self.exact:
            idx = pc.index_in(queries, value_set=self.values)
            return np.asarray(pc.fill_null(idx, -1).to_numpy(zero_copy_only=False), np.int64)
        qs = _series(queries)
        hq = _hash64(qs)
        bucket = (hq >> self.shift).astype(np.int64)
        pos = self.starts[bucket]
        end = self.starts[bucket + 1]
        found = np.full(len(hq), -1, np.int64)
        todo = np.flatnonzero(pos < end)
        while len(todo):
            p = pos[todo]
            hit = self.sorted[p] == hq[todo]
            found[todo[hit]] = p[hit]
            p += 1
            pos[todo] = p
            more = ~hit & (p < end[todo])
            todo = todo[more]
        has = found >= 0
        cand = np.where(has, self.order[np.where(has, found, 0)], 0)
        same = (self.series.gather(cand) == qs).fill_null(False).to_numpy()
        return np.where(has & same, cand, -1)


def _hash64(series: Any) -> np.ndarray:
    """64-bit hash of each text of a polars Series (compared only within one process)."""
    return np.asarray(series.hash(seed=0).to_numpy(), np.uint64)


def _series(values: pa.Array) -> Any:
    import polars as pl

    series = pl.from_arrow(values)
    assert isinstance(series, pl.Series)
    return series


@dataclass
class TaskIndex:
    """The sorted key space of the run, shared by the task, transfer and transition steps.

    Attributes:
        keys: every key (tasks table plus keys seen only elsewhere), sorted.
        task_iri: IRI of each key's mp:Task.
        has_chunk: whether the key has a data chunk (a result was held somewhere).
        tasks: the tasks table aligned with ``keys`` (rows added for keys seen only elsewhere).
    """

    keys: pa.Array
    task_iri: pa.Array
    has_chunk: np.ndarray
    tasks: pd.DataFrame
    lookup: KeyLookup | None = None

    def rows(self, keys: Any) -> np.ndarray:
        """Row of each key in :attr:`keys` (-1 when absent)."""
        if self.lookup is None:
            self.lookup = KeyLookup(self.keys)
        return self.lookup.rows(as_text_array(keys))

    def chunk_iri(self, rows: np.ndarray) -> pa.Array:
        """Data chunk IRIs of the given rows."""
        return concat(self.task_iri.take(pa.array(rows)), "/chunk")


def task_index(ctx: MapContext) -> TaskIndex:
    """Build (once per export) the sorted key space and which keys hold a result."""

    def make() -> TaskIndex:
        rec = ctx.records
        # Only the columns the mapping reads: the sorted copy below is the mapping's largest table.
        tasks = rec.tasks[TASK_COLUMNS].dropna(subset=["key"]).drop_duplicates("key")
        base = as_text_array(tasks["key"])
        others = [
            rec.executions["key"],
            rec.dependencies["key"],
            rec.dependencies["dependency"],
            rec.transfers["key"],
        ]
        lookup = KeyLookup(base)
        extra_parts = []
        for col in others:
            a = as_text_array(col.dropna())
            if len(a):
                extra_parts.append(a.filter(pa.array(lookup.rows(a) < 0)))
        extra = pc.unique(pa.concat_arrays(extra_parts)) if extra_parts else pa.array([], LARGE)
        if len(extra):
            from metaprov.records import conform

            add = conform("tasks", pd.DataFrame({"key": extra.to_pandas()}))[TASK_COLUMNS]
            tasks = pd.concat([tasks, add], ignore_index=True)
            base = pa.concat_arrays([base, extra])
        order = pc.sort_indices(base).to_numpy()
        tasks = tasks.iloc[order].reset_index(drop=True)
        lookup = KeyLookup(base.take(pa.array(order))) if len(extra) else lookup.permuted(order)
        keys = lookup.values
        task_iri = ctx.iris.tasks(keys)
        # A key has a result when it was in memory at the end, has a size, finished an execution
        # in memory, or was transferred.
        has = np.array(tasks["state"].eq("memory").fillna(False).to_numpy(dtype=bool), copy=True)
        has |= tasks["nbytes"].notna().to_numpy(dtype=bool)
        ex = rec.executions
        ok_keys = as_text_array(ex.loc[ex["outcome"].eq("memory").fillna(False), "key"])
        tr_keys = as_text_array(rec.transfers["key"].dropna())
        for found in (lookup.rows(ok_keys), lookup.rows(tr_keys)):
            has[found[found >= 0]] = True
        return TaskIndex(keys, task_iri, has, tasks, lookup)

    return ctx.cached("task_index", make)


@dataclass
class Edges:
    """Distinct dependency edges as CSR over task rows: ``targets[offsets[r]:offsets[r+1]]``."""

    offsets: np.ndarray
    targets: np.ndarray


def dependency_edges(ctx: MapContext, idx: TaskIndex) -> Edges:
    """Distinct (task, dependency) edges, sorted by task row then dependency row."""

    def make() -> Edges:
        dep = ctx.records.dependencies
        n = len(idx.keys)
        if not len(dep):
            return Edges(np.zeros(n + 1, np.int64), np.zeros(0, np.int64))
        src = idx.rows(dep["key"])
        dst = idx.rows(dep["dependency"])
        ok = (src >= 0) & (dst >= 0)
        # Distinct pairs sorted by (task, dependency): one sort of task * n + dependency.
        pairs = np.sort(src[ok] * n + dst[ok])
        if len(pairs):
            pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]
        counts = np.bincount(pairs // n, minlength=n) if len(pairs) else np.zeros(n, np.int64)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return Edges(offsets, (pairs % n).astype(np.int64))

    return ctx.cached("dependency_edges", make)


def ragged_gather(offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``rows``, the positions ``offsets[r]..offsets[r+1]``: (list offsets, positions)."""
    starts = offsets[rows]
    lengths = offsets[rows + 1] - starts
    out_off = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=out_off[1:])
    total = int(out_off[-1])
    if total == 0:
        return out_off, np.zeros(0, np.int64)
    pos = (
        np.arange(total, dtype=np.int64)
        - np.repeat(out_off[:-1], lengths)
        + np.repeat(starts, lengths)
    )
    return out_off, pos


def maps_every_key(ctx: MapContext) -> bool:
    """Whether this export writes every key's triples (not one partition of a run: see
    :func:`mapped_rows`)."""
    return ctx.cache.get("owns_keys") is None


def mapped_rows(ctx: MapContext, idx: TaskIndex) -> np.ndarray | None:
    """Per key row, whether this export writes the key's triples (its task, executions, chunks,
    replicas); None: every key. A run mapped in partitions (:mod:`metaprov.export.partition`)
    sets ``ctx.cache["owns_keys"]`` (key texts -> bool per key) so that each partition maps only
    the keys it owns, the other keys (its tasks' dependencies) being read for what the owned
    keys' triples say about them."""
    if maps_every_key(ctx):
        return None
    owns = ctx.cache["owns_keys"]
    return ctx.cached("mapped_rows", lambda: np.asarray(owns(idx.keys), dtype=bool))


def row_chunks(n: int, step: int, mask: np.ndarray | None) -> Iterator[slice | np.ndarray]:
    """The rows of a table of ``n`` rows to map, ``step`` at a time: slices when every row is
    mapped (``mask`` None), else arrays of the positions where ``mask`` is true."""
    if mask is None:
        for a in range(0, n, step):
            yield slice(a, min(n, a + step))
        return
    sel = np.flatnonzero(mask)
    for a in range(0, len(sel), step):
        yield sel[a : a + step]


def csr_rows(offsets: np.ndarray, rows: slice | np.ndarray) -> tuple[np.ndarray, Any]:
    """(list offsets, positions) of the CSR lists of ``rows`` (a slice of consecutive rows, whose
    positions are then a slice too, or an array of rows)."""
    if isinstance(rows, slice):
        o0, o1 = int(offsets[rows.start]), int(offsets[rows.stop])
        return offsets[rows.start : rows.stop + 1] - o0, slice(o0, o1)
    return ragged_gather(offsets, rows)


def positions(rows: slice | np.ndarray) -> np.ndarray:
    """``rows`` as an array of positions."""
    return np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows


def take_rows(values: pa.Array, rows: slice | np.ndarray) -> pa.Array:
    """``values`` at ``rows`` (a zero-copy slice for a slice)."""
    if isinstance(rows, slice):
        return values.slice(rows.start, rows.stop - rows.start)
    return values.take(pa.array(rows))


def used_dependencies(idx: TaskIndex, edges: Edges) -> tuple[np.ndarray, np.ndarray]:
    """The chunk-holding dependencies of each task (the dynamic "used" edges), as CSR over task
    rows: ``targets[offsets[r]:offsets[r + 1]]``."""
    keep = idx.has_chunk[edges.targets] if len(edges.targets) else np.zeros(0, bool)
    kept_before = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))
    counts = kept_before[edges.offsets[1:]] - kept_before[edges.offsets[:-1]]
    offsets = np.zeros(len(idx.keys) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, edges.targets[keep]


def list_column(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    """A list<large_string> column from CSR offsets; empty lists become null (no triple)."""
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values)
    empty = (offsets[1:] - offsets[:-1]) == 0
    if empty.any():
        lists = pa.LargeListArray.from_arrays(
            pa.array(offsets, pa.int64()), values, mask=pa.array(empty)
        )
    return lists


def executions_sorted(ctx: MapContext, idx: TaskIndex) -> pd.DataFrame:
    """Executions with their key's row (``row``), sorted by key then attempt; IRIs cached."""

    def make() -> pd.DataFrame:
        ex = ctx.records.executions[EXECUTION_COLUMNS].dropna(subset=["key"])
        if not len(ex):
            return ex.assign(row=pd.Series(dtype="int64"))
        rows = idx.rows(ex["key"])
        att = ex["attempt"].fillna(0).to_numpy(dtype=np.int64)
        order = np.lexsort((att, rows))
        ex = ex.iloc[order].reset_index(drop=True)
        ex["row"] = rows[order]
        ex["attempt"] = pd.array(att[order], dtype="Int64")
        return ex

    return ctx.cached("executions_sorted", make)


def execution_iris(iris: RunIris, idx: TaskIndex, ex: pd.DataFrame) -> pa.Array:
    """IRI of each (sorted) execution row."""
    return iris.executions(idx.task_iri.take(pa.array(ex["row"].to_numpy())), ex["attempt"])


def agent_iris(iris: RunIris, ex: pd.DataFrame) -> tuple[pa.Array, pa.Array]:
    """(worker IRI, thread-or-worker IRI) per execution row."""
    w = dict_map(ex["worker"], iris.workers)
    th = iris.threads(w, pa.Array.from_pandas(ex["thread"]))
    return w, pc.coalesce(th, w)


def generating_execution(ex: pd.DataFrame) -> pd.DataFrame:
    """Per key row: the last execution that ended in memory (row, attempt, worker)."""
    ok = ex[ex["outcome"].eq("memory").fillna(False)]
    return ok.drop_duplicates("row", keep="last")[["row", "attempt", "worker"]]


def host_of(address: Any) -> str | None:
    """Host part of ``tcp://10.0.0.1:8786`` (None for a missing address)."""
    if address is None or (isinstance(address, float) and pd.isna(address)) or address is pd.NA:
        return None
    text = str(address)
    rest = text.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0] if ":" in rest else rest


def user_iri(ctx: MapContext) -> str | None:
    user = (ctx.records.job or {}).get("user")
    return ctx.iris.user(str(user)) if user else None


def transfers_sorted(ctx: MapContext) -> pd.DataFrame:
    """Transfer rows with a transfer id and key, sorted by (transfer, key), one row per pair."""

    def make() -> pd.DataFrame:
        tr = ctx.records.transfers.dropna(subset=["transfer", "key"])
        tr = tr.sort_values(["transfer", "key"], kind="stable").drop_duplicates(["transfer", "key"])
        return tr.reset_index(drop=True)

    return ctx.cached("transfers_sorted", make)


def job_iri(ctx: MapContext) -> str:
    job = ctx.records.job or {}
    jid = job.get("id")
    if jid and job.get("server"):
        jid = f"{jid}.{job['server']}"
    return ctx.iris.job(str(jid) if jid else None)


def batch_job_iri(ctx: MapContext, jid: str) -> str:
    """The IRI of batch job ``jid``: the run's own job's when it is that job."""
    own = (ctx.records.job or {}).get("id")
    return job_iri(ctx) if own and str(own) == jid else ctx.iris.job(jid)


def worker_job_iris(ctx: MapContext, addresses: pd.Series) -> pa.Array:
    """The IRI of the batch job each worker (by address) ran in, from its process's environment
    record (null when no record names a job; by pid when an anonymous record left the address
    out)."""
    env = ctx.records.environments
    env = env[(env["role"] == "worker") & env["job"].notna()]
    by_address = dict(
        zip(env["address"].dropna(), env.loc[env["address"].notna(), "job"], strict=True)
    )
    w = ctx.records.workers.dropna(subset=["pid", "address"]).drop_duplicates("pid", keep=False)
    pid_of = dict(zip(w["address"].astype(str), w["pid"].astype(int), strict=True))
    e = env.dropna(subset=["pid"]).drop_duplicates("pid", keep=False)
    by_pid = dict(zip(e["pid"].astype(int), e["job"].astype(str), strict=True))
    out: list[str | None] = []
    for a in addresses:
        jid = by_address.get(a)
        if jid is None and a in pid_of:
            jid = by_pid.get(pid_of[a])
        out.append(batch_job_iri(ctx, str(jid)) if jid is not None else None)
    return pa.array(out, LARGE)


def worker_losses(records: Any) -> pd.DataFrame:
    """Per worker address that was lost or has executions known from the scheduler only:
    ``lost``, ``reason`` (of its last lost removal), ``lost_tasks`` (tasks its lost removals
    took along; NA: not known) and ``unrecorded`` (from ``records.workers``)."""
    w = records.workers
    flagged = w["lost"].fillna(False).to_numpy(dtype=bool) | (
        w["unrecorded"].fillna(0).to_numpy(dtype=np.int64) > 0
    )
    out = w.loc[flagged, ["address", "lost", "unrecorded"]].reset_index(drop=True)
    ev = records.worker_events
    ev = ev[ev["lost"].fillna(False).to_numpy(dtype=bool)]
    took = ev[["n_processing", "n_results", "n_data"]].sum(axis=1, min_count=3)
    per = pd.DataFrame(
        {"address": ev["worker"].astype(object), "reason": ev["reason"], "took": took}
    ).groupby("address", sort=True)
    reason = per["reason"].last()
    lost_tasks = per["took"].sum(min_count=1)
    addr = out["address"].astype(object)
    return out.assign(
        reason=reason.reindex(addr).to_numpy(),
        lost_tasks=pd.array(lost_tasks.reindex(addr).to_numpy(), dtype="Int64"),
    )
