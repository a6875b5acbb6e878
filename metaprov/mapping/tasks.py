"""Tasks, their executions and their results: the hot path of the mapping.

Input: ``records.tasks``, ``records.executions``, ``records.dependencies`` (and the keys of
``records.transfers``). Output, in row chunks:

- mp:Task per key: key, group, first graph, last state, flags, ``mp:dependsOn`` (static edges);
- mp:TaskExecution per execution row: compute window (dateTimes, epochs, duration), attempt,
  outcome, ``prov:wasAssociatedWith`` its thread (its worker when the thread is unknown), a
  qualified ``prov:Association`` whose ``prov:hadPlan`` is the task prefix, ``prov:used`` of
  the data chunk of every dependency (dynamic edges), ``mp:prefix`` (the plan again, as a
  direct link), ``mp:usedReplica`` of the replica a transferred dependency was read from and
  the totals of the transfers behind those (see ``used_replicas`` in ``transfers.py``);
- mp:DataChunk per key with a result, ``prov:wasGeneratedBy`` its successful execution and
  ``prov:atLocation`` the worker holding it.

Everything is computed with pyarrow/numpy over whole columns; rows are sorted by key (then attempt)
so the output order never depends on the input order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.block import Block, lit_double, lit_int, lit_str, lit_time, lit_true
from metaprov.mapping.terms import MP, PROV, RDF, XSD, RunIris, as_text_array, concat
from metaprov.timeutil import NAT_US as _NAT
from metaprov.timeutil import utc_to_us

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
EXECUTION_COLUMNS = ["key", "attempt", "worker", "thread", "start", "end", "outcome", "time_source"]


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


def list_column(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    """A list<large_string> column from CSR offsets; empty lists become null (no triple)."""
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values)
    empty = (offsets[1:] - offsets[:-1]) == 0
    if empty.any():
        lists = pa.LargeListArray.from_arrays(
            pa.array(offsets, pa.int64()), values, mask=pa.array(empty)
        )
    return lists


def add_tasks(ctx: MapContext) -> Iterator[Block]:
    """Tasks, executions (+ associations), data chunks."""
    idx = task_index(ctx)
    edges = dependency_edges(ctx, idx)
    yield from _task_blocks(ctx, idx, edges)
    ex = executions_sorted(ctx, idx)
    yield from _execution_blocks(ctx, idx, edges, ex)
    yield from _chunk_blocks(ctx, idx, ex)


def _task_blocks(ctx: MapContext, idx: TaskIndex, edges: Edges) -> Iterator[Block]:
    iris = ctx.iris
    t = idx.tasks
    n = len(t)
    step = ctx.chunk_rows
    for a in range(0, n, step):
        b = min(n, a + step)
        part = t.iloc[a:b]
        blk = Block(idx.task_iri.slice(a, b - a))
        blk.add(RDF.type, MP.Task)
        blk.add(MP.key, idx.keys.slice(a, b - a), "str")
        blk.add(MP.taskGroup, dict_map(part["group"], iris.groups))
        blk.add(MP.inGraph, dict_map(part["graph"], iris.task_graphs))
        blk.add(MP.state, lit_str(part["state"]), "str")
        blk.add(MP.wanted, lit_true(part["wanted"]), "typed", XSD.boolean)
        blk.add(MP.erred, lit_true(part["erred"]), "typed", XSD.boolean)
        blk.add(MP.retried, lit_true(part["retried"]), "typed", XSD.boolean)
        blk.add(MP.neverRan, lit_true(part["never_ran"]), "typed", XSD.boolean)
        o0, o1 = int(edges.offsets[a]), int(edges.offsets[b])
        if o1 > o0:
            vals = idx.task_iri.take(pa.array(edges.targets[o0:o1]))
            blk.add(MP.dependsOn, list_column(edges.offsets[a : b + 1] - o0, vals))
        yield blk


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


def _execution_blocks(
    ctx: MapContext, idx: TaskIndex, edges: Edges, ex: pd.DataFrame
) -> Iterator[Block]:
    iris = ctx.iris
    n = len(ex)
    if not n:
        return
    # The chunk-holding dependencies of each task: the dynamic "used" edges.
    keep = idx.has_chunk[edges.targets] if len(edges.targets) else np.zeros(0, bool)
    kept_before = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))
    used_counts = kept_before[edges.offsets[1:]] - kept_before[edges.offsets[:-1]]
    used_offsets = np.zeros(len(idx.keys) + 1, np.int64)
    np.cumsum(used_counts, out=used_offsets[1:])
    used_targets = edges.targets[keep]
    prefix_of = dict_map(idx.tasks["prefix"], iris.prefixes)
    # The replica each execution read a transferred dependency from (imported here: the
    # transfers module builds on this one).
    from metaprov.mapping.transfers import input_transfers, replica_iris, used_replicas

    use = used_replicas(ctx, idx, edges, ex)
    waits = input_transfers(ctx, use)
    step = ctx.chunk_rows
    for a in range(0, n, step):
        b = min(n, a + step)
        part = ex.iloc[a:b]
        rows = part["row"].to_numpy()
        e_iri = execution_iris(iris, idx, part)
        _, agent = agent_iris(iris, part)
        start_us = utc_to_us(part["start"])
        end_us = utc_to_us(part["end"])
        known = (start_us != _NAT) & (end_us != _NAT)
        dur = np.where(known, (end_us - start_us) / 1e6, np.nan)
        blk = Block(e_iri)
        blk.add(RDF.type, MP.TaskExecution)
        blk.add(MP.task, idx.task_iri.take(pa.array(rows)))
        blk.add(MP.attempt, lit_int(part["attempt"]), "typed", XSD.integer)
        blk.add(PROV.startedAtTime, lit_time(part["start"]), "typed", XSD.dateTime)
        blk.add(PROV.endedAtTime, lit_time(part["end"]), "typed", XSD.dateTime)
        blk.add(MP.duration, lit_double(dur), "typed", XSD.double)
        blk.add(MP.incomplete, lit_true(~known), "typed", XSD.boolean)
        blk.add(MP.outcome, dict_map(part["outcome"], lit_str), "str")
        blk.add(MP.timeSource, dict_map(part["time_source"], lit_str), "str")
        blk.add(PROV.wasAssociatedWith, agent)
        blk.add(PROV.qualifiedAssociation, iris.associations(e_iri))
        # the association's plan again, as a direct link: "executions of this prefix" is then
        # one index range instead of two lookups per execution (slowest-tasks with a prefix)
        plan = prefix_of.take(pa.array(rows))
        blk.add(MP.prefix, plan)
        off, pos = ragged_gather(used_offsets, rows)
        if len(pos):
            blk.add(PROV.used, list_column(off, idx.chunk_iri(used_targets[pos])))
        r0, r1 = int(use.offsets[a]), int(use.offsets[b])
        if r1 > r0:
            reps = replica_iris(ctx, use.replicas[r0:r1])
            blk.add(MP.usedReplica, list_column(use.offsets[a : b + 1] - r0, reps))
            blk.add(MP.inputTransferCount, lit_int(waits.count.iloc[a:b]), "typed", XSD.integer)
            blk.add(MP.inputTransferSeconds, lit_double(waits.seconds[a:b]), "typed", XSD.double)
            blk.add(MP.inputTransferBytes, lit_int(waits.bytes.iloc[a:b]), "typed", XSD.integer)
        yield blk

        ab = Block(iris.associations(e_iri))
        ab.add(RDF.type, PROV.Association)
        ab.add(PROV.agent, agent)
        ab.add(PROV.hadPlan, plan)
        yield ab


def generating_execution(ex: pd.DataFrame) -> pd.DataFrame:
    """Per key row: the last execution that ended in memory (row, attempt, worker)."""
    ok = ex[ex["outcome"].eq("memory").fillna(False)]
    return ok.drop_duplicates("row", keep="last")[["row", "attempt", "worker"]]


def _chunk_blocks(ctx: MapContext, idx: TaskIndex, ex: pd.DataFrame) -> Iterator[Block]:
    iris = ctx.iris
    rows_all = np.flatnonzero(idx.has_chunk)
    if not len(rows_all):
        return
    gen = (
        generating_execution(ex)
        if len(ex)
        else pd.DataFrame({"row": [], "attempt": [], "worker": []})
    )
    gen_pos = np.full(len(idx.keys), -1, np.int64)
    gen_pos[gen["row"].to_numpy(dtype=np.int64)] = np.arange(len(gen))
    gen_attempt = (
        pa.Array.from_pandas(gen["attempt"].astype("Int64"))
        if len(gen)
        else pa.array([], pa.int64())
    )
    gen_worker = as_text_array(gen["worker"]) if len(gen) else pa.array([], LARGE)
    task_worker = idx.tasks["worker"]
    step = ctx.chunk_rows
    for a in range(0, len(rows_all), step):
        rows = rows_all[a : a + step]
        t_iri = idx.task_iri.take(pa.array(rows))
        blk = Block(concat(t_iri, "/chunk"))
        blk.add(RDF.type, MP.DataChunk)
        blk.add(MP.task, t_iri)
        blk.add(MP.nbytes, lit_int(idx.tasks["nbytes"].iloc[rows]), "typed", XSD.integer)
        gp = gen_pos[rows]
        has_gen = gp >= 0
        safe = np.where(has_gen, gp, 0)
        if len(gen):
            att = pc.if_else(
                pa.array(has_gen),
                gen_attempt.take(pa.array(safe)),
                pa.scalar(None, gen_attempt.type),
            )
            blk.add(PROV.wasGeneratedBy, iris.executions(t_iri, att))
            gw = pc.if_else(
                pa.array(has_gen), gen_worker.take(pa.array(safe)), pa.scalar(None, gen_worker.type)
            )
        else:
            gw = pa.nulls(len(rows), LARGE)
        where = pc.coalesce(
            pc.cast(gw, LARGE),
            as_text_array(task_worker.iloc[rows]),
        )
        blk.add(PROV.atLocation, dict_map(where, iris.workers))
        yield blk
