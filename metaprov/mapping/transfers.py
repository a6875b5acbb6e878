"""Transfers of data chunks between workers, and the replicas they generate.

Input: ``records.transfers`` (one row per key moved; rows sharing a transfer id form one
transfer). Output: an mp:Transfer per transfer id (``prov:used`` the chunks at the source,
``mp:source``/``mp:destination`` agents, window, bytes, bandwidth) and an mp:ChunkReplica per
row (``prov:specializationOf`` the chunk, ``prov:wasGeneratedBy`` the transfer,
``prov:atLocation`` the destination's node). Also, for the task step, :func:`used_replicas`: which
replica each task execution used (``mp:usedReplica``, written on the execution).

A transfer logged only by its sender to a non-worker peer (a client gathering results) has no
destination address: its destination is the run's client (the first one by id when there are
several, an approximation written down in docs/model.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.agents import worker_nodes
from metaprov.mapping.block import Block, lit_double, lit_epoch, lit_int, lit_str, lit_time
from metaprov.mapping.tables import (
    Edges,
    TaskIndex,
    dict_map,
    executions_sorted,
    list_column,
    mapped_rows,
    ragged_gather,
    row_chunks,
    take_rows,
    task_index,
    transfers_sorted,
)
from metaprov.mapping.terms import MP, PROV, RDF, XSD, as_text_array
from metaprov.mapping.versions import ChunkVersions, chunk_versions
from metaprov.timeutil import NAT_US as _NAT
from metaprov.timeutil import utc_to_us

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

log = logging.getLogger("metaprov")
LARGE = pa.large_string()


@dataclass
class ReplicaUse:
    """Which replica each task execution used, as CSR over the executions.

    ``replicas[offsets[i]:offsets[i + 1]]`` are rows of :func:`transfers_sorted` used by row ``i``
    of :func:`~metaprov.mapping.tables.executions_sorted`, in the order of its dependencies.

    Attributes:
        offsets: ``len(executions) + 1`` list offsets.
        replicas: rows of the sorted transfers table (one per linked (execution, dependency)).
        late: (execution, dependency) pairs whose dependency reached the execution's worker only
            after the execution started (a replica exists there, none arrived in time): no link.
        no_start: pairs with a replica at the execution's worker but no start time: no link.
    """

    offsets: np.ndarray
    replicas: np.ndarray
    late: int = 0
    no_start: int = 0

    @property
    def executions(self) -> int:
        """Number of executions with at least one link."""
        return int(np.count_nonzero(np.diff(self.offsets)))


def used_replicas(ctx: MapContext, idx: TaskIndex, edges: Edges, ex: pd.DataFrame) -> ReplicaUse:
    """For each execution E of a task B (rows of ``ex``, sorted as by ``executions_sorted``) and
    each dependency A of B: the replica of A whose destination is E's worker and whose transfer
    ended last at or before E's start (on a tie, the higher transfer id). None when no replica
    had arrived by then, or E has no start: a copy that arrived later did not serve E.

    E's worker is the worker of its thread (the ``worker`` column: a thread's IRI is built under
    it), or the worker it is associated with when the thread is unknown. Vectorised: replicas are
    grouped by (key, destination) and ordered by (group, end, transfer id) into one int64 sort
    key; each (execution, dependency) pair looks its own (group, start) key up with one
    ``searchsorted``.
    """

    def make() -> ReplicaUse:
        n = len(ex)
        none = ReplicaUse(np.zeros(n + 1, np.int64), np.zeros(0, np.int64))
        tr = transfers_sorted(ctx)
        if not n or not len(tr) or not len(edges.targets):
            return none
        # Replicas at a worker, with an arrival time, of a known key.
        dest = pc.dictionary_encode(as_text_array(tr["destination"]))
        workers = dest.dictionary
        rep_w = np.asarray(pc.fill_null(dest.indices, -1).to_numpy(), np.int64)
        rep_end = utc_to_us(tr["stop"])
        rep_row = idx.rows(tr["key"])
        rep = np.flatnonzero((rep_w >= 0) & (rep_end != _NAT) & (rep_row >= 0))
        if not len(rep):
            return none
        n_w = len(workers)
        # Only the dependencies that have a replica somewhere: CSR over task rows.
        has_rep = np.zeros(len(idx.keys), bool)
        has_rep[rep_row[rep]] = True
        keep = has_rep[edges.targets]
        kept = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))
        dep_off = kept[edges.offsets]
        dep_tgt = edges.targets[keep]
        off, pos = ragged_gather(dep_off, ex["row"].to_numpy(dtype=np.int64))
        if not len(pos):
            return none
        counts = np.diff(off)
        pair_ex = np.repeat(np.arange(n, dtype=np.int64), counts)
        pair_dep = dep_tgt[pos]
        # Each candidate execution's worker, as a code into the replicas' destinations.
        cand = np.flatnonzero(counts)
        ex_w = np.full(n, -1, np.int64)
        codes = dict_map(
            ex["worker"].iloc[cand], lambda d: pc.index_in(pc.cast(d, LARGE), value_set=workers)
        )
        ex_w[cand] = np.asarray(pc.fill_null(codes, -1).to_numpy(), np.int64)
        q_w = ex_w[pair_ex]
        q_t = utc_to_us(ex["start"])[pair_ex]
        # Groups (key row, destination) that hold a replica; dense ids in sorted order.
        g_rep = rep_row[rep] * n_w + rep_w[rep]
        groups = np.unique(g_rep)
        gi_rep = np.searchsorted(groups, g_rep)
        g_q = pair_dep * n_w + q_w
        gi_q = np.minimum(np.searchsorted(groups, g_q), len(groups) - 1)
        there = (q_w >= 0) & (groups[gi_q] == g_q)
        # One sort key: group * L + rank of the arrival time among the L distinct arrival times.
        ends = np.unique(rep_end[rep])
        span = len(ends)
        key_rep = gi_rep * span + np.searchsorted(ends, rep_end[rep])
        order = np.lexsort((tr["transfer"].to_numpy(dtype=np.int64)[rep], key_rep))
        key_sorted, gi_sorted, rep_sorted = key_rep[order], gi_rep[order], rep[order]
        started = q_t != _NAT
        c = np.flatnonzero(there & started)
        # Rank of the start among arrival times: the last arrival at or before it (-1: none).
        key_q = gi_q[c] * span + (np.searchsorted(ends, q_t[c], side="right") - 1)
        hit = np.searchsorted(key_sorted, key_q, side="right") - 1
        safe = np.maximum(hit, 0)
        found = (hit >= 0) & (gi_sorted[safe] == gi_q[c])
        link_ex = pair_ex[c[found]]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(link_ex, minlength=n), out=offsets[1:])
        use = ReplicaUse(
            offsets,
            rep_sorted[safe[found]],
            late=int(np.count_nonzero(~found)),
            no_start=int(np.count_nonzero(there & ~started)),
        )
        if use.late or use.no_start:
            log.info(
                "%d (execution, dependency) pairs had a replica at the execution's worker that "
                "arrived only after the execution started, %d one at an execution without a "
                "start: no mp:usedReplica for them (docs/model.md, decision 19)",
                use.late,
                use.no_start,
            )
        return use

    return ctx.cached("used_replicas", make)


@dataclass
class InputTransfers:
    """Per task execution: the transfers that brought the replicas it used (``mp:usedReplica``),
    each counted once however many of its keys the execution used, with their seconds and bytes
    summed (a missing duration or size adds nothing). Null for executions without replicas."""

    count: pd.Series  # Int64
    seconds: np.ndarray  # float64, NaN when none
    bytes: pd.Series  # Int64


def input_transfers(ctx: MapContext, use: ReplicaUse) -> InputTransfers:
    """The :class:`InputTransfers` of the executions ``use`` covers (rows of executions_sorted)."""
    n = len(use.offsets) - 1
    count = np.zeros(n, np.int64)
    seconds = np.zeros(n, np.float64)
    total = np.zeros(n, np.float64)
    if len(use.replicas):
        tr = transfers_sorted(ctx)
        ex_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(use.offsets))
        tid = tr["transfer"].to_numpy(dtype=np.int64)[use.replicas]
        order = np.lexsort((tid, ex_of))
        e, t, r = ex_of[order], tid[order], use.replicas[order]
        first = np.concatenate(([True], (e[1:] != e[:-1]) | (t[1:] != t[:-1])))
        e, r = e[first], r[first]
        dur = pd.to_numeric(tr["duration"], errors="coerce").to_numpy(dtype=np.float64)[r]
        size = pd.to_numeric(tr["total"], errors="coerce").to_numpy(dtype=np.float64)[r]
        count = np.bincount(e, minlength=n)
        seconds = np.bincount(e, weights=np.nan_to_num(dur, nan=0.0), minlength=n)
        total = np.bincount(e, weights=np.nan_to_num(size, nan=0.0), minlength=n)
    none = count == 0
    return InputTransfers(
        count=pd.Series(pd.array(np.where(none, 0, count), dtype="Int64").copy()).mask(none),
        seconds=np.where(none, np.nan, seconds),
        bytes=pd.Series(pd.array(np.rint(total).astype(np.int64), dtype="Int64")).mask(none),
    )


def replica_iris(ctx: MapContext, rows: np.ndarray) -> pa.Array:
    """IRIs of the replicas of the given rows of :func:`transfers_sorted`."""
    tr = transfers_sorted(ctx)
    part = tr.iloc[rows]
    return ctx.iris.replicas(ctx.iris.transfers(part["transfer"]), part["key"])


def fallback_destination(ctx: MapContext) -> str:
    """The agent receiving data when no worker address was logged (see module docstring)."""
    from metaprov.mapping.agents import client_table

    clients = client_table(ctx)["client"].astype(str).tolist()
    if clients:
        return str(ctx.iris.clients([clients[0]])[0].as_py())
    return f"{ctx.iris.run}/client/unknown"


def _picks(
    ctx: MapContext, idx: TaskIndex
) -> tuple[ChunkVersions, pd.DataFrame, np.ndarray, np.ndarray]:
    """(chunk versions, sorted executions, key row, picked execution) per row of
    :func:`transfers_sorted`: which of the key's successful executions the transfer copied."""
    tr = transfers_sorted(ctx)
    ex = executions_sorted(ctx, idx)
    versions = chunk_versions(ctx, idx, ex)
    key_rows = idx.rows(tr["key"])
    picks = versions.pick(key_rows, utc_to_us(tr["start"]), utc_to_us(tr["stop"]), ex)
    return versions, ex, key_rows, picks


def transfer_picks(ctx: MapContext, idx: TaskIndex) -> np.ndarray:
    """Per row of :func:`transfers_sorted`: the row of ``executions_sorted`` whose result the
    transfer copied (decision 21; -1: none recorded)."""
    versions, _ex, _rows, picks = _picks(ctx, idx)
    if len(versions.gen) == 0:  # no execution of this part generated a version: none picked
        return np.full(len(picks), -1, dtype=np.int64)
    return np.where(picks >= 0, versions.gen[np.maximum(picks, 0)], -1)


def transfer_chunks(ctx: MapContext, idx: TaskIndex) -> pa.Array:
    """Per row of :func:`transfers_sorted`: the chunk IRI the transfer copied, ``<task>/chunk``
    or, on a key with versions, ``<task>/chunk/<attempt>`` (decision 21). A run's part without
    the executions (a run read in partitions) is handed them in ``ctx.cache``."""

    def make() -> pa.Array:
        versions, ex, key_rows, picks = _picks(ctx, idx)
        return versions.chunk_iris(ctx, idx, ex, key_rows, picks)

    return ctx.cached("transfer_chunks", make)


def add_transfers(ctx: MapContext) -> Iterator[Block]:
    """Transfers and replicas."""
    tr = transfers_sorted(ctx)
    if not len(tr):
        return
    iris = ctx.iris
    idx = task_index(ctx)
    fallback = fallback_destination(ctx)
    if fallback.endswith("/client/unknown"):
        ub = Block(pa.array([fallback], LARGE))
        ub.add(RDF.type, MP.Client)
        ub.add(MP.run, iris.run)
        yield ub

    # the version of each key's result the transfer copied (decision 21), one per row

    key_rows = idx.rows(tr["key"])
    used_chunks = transfer_chunks(ctx, idx)

    ids = tr["transfer"].to_numpy(dtype=np.int64)
    first = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    offsets = np.append(first, len(tr)).astype(np.int64)
    head = tr.iloc[first]
    step = ctx.chunk_rows
    for a in range(0, len(head), step):
        b = min(len(head), a + step)
        h = head.iloc[a:b]
        t_iri = iris.transfers(h["transfer"])
        src = dict_map(h["source"], iris.workers)
        dst = pc.fill_null(dict_map(h["destination"], iris.workers), fallback)
        blk = Block(t_iri)
        blk.add(RDF.type, MP.Transfer)
        blk.add(MP.transferId, lit_int(h["transfer"]), "typed", XSD.integer)
        blk.add(MP.source, src)
        blk.add(MP.destination, dst)
        # the two agents as PROV associations too (mp:source/destination specialise it, but a
        # PROV-N reader or a store without inference sees only what is written)
        blk.add(PROV.wasAssociatedWith, _pairs(src, dst))
        blk.add(PROV.startedAtTime, lit_time(h["start"]), "typed", XSD.dateTime)
        blk.add(PROV.endedAtTime, lit_time(h["stop"]), "typed", XSD.dateTime)
        blk.add(MP.duration, lit_double(h["duration"]), "typed", XSD.double)
        blk.add(MP.startEpoch, lit_epoch(h["start"]), "typed", XSD.double)
        blk.add(MP.endEpoch, lit_epoch(h["stop"]), "typed", XSD.double)
        blk.add(MP.totalBytes, lit_int(h["total"]), "typed", XSD.integer)
        blk.add(MP.compressedBytes, lit_int(h["compressed"]), "typed", XSD.integer)
        blk.add(MP.bandwidth, lit_double(h["bandwidth"]), "typed", XSD.double)
        blk.add(MP.keyCount, lit_int(h["n_keys"]), "typed", XSD.integer)
        blk.add(MP.loggedBy, dict_map(h["logged_by"], lit_str), "str")
        o0, o1 = int(offsets[a]), int(offsets[b])
        rows = idx.rows(tr["key"].iloc[o0:o1])
        used = used_chunks.slice(o0, o1 - o0)
        blk.add(PROV.used, list_column(offsets[a : b + 1] - o0, used))
        blk.add(MP.run, iris.run)
        yield blk

    # Replicas: one per (transfer, key) row (of the keys this export maps).
    mapped = mapped_rows(ctx, idx)
    mask = None if mapped is None else (key_rows >= 0) & mapped[np.maximum(key_rows, 0)]
    for sel in row_chunks(len(tr), step, mask):
        part = tr.iloc[sel]
        rows = key_rows[sel]
        tid_iri_all = iris.transfers(part["transfer"])
        rb = Block(iris.replicas(tid_iri_all, part["key"]))
        rb.add(RDF.type, MP.ChunkReplica)
        rb.add(PROV.specializationOf, take_rows(used_chunks, sel))
        rb.add(MP.task, idx.task_iri.take(pa.array(rows)))
        rb.add(PROV.wasGeneratedBy, tid_iri_all)
        # where the copy is: the destination worker's node (unknown for a client's gather)
        rb.add(PROV.atLocation, worker_nodes(ctx, as_text_array(part["destination"])))
        rb.add(MP.nbytes, lit_int(part["nbytes"]), "typed", XSD.integer)
        yield rb


def _pairs(first: pa.Array, second: pa.Array) -> pa.Array:
    """Per row the list [first, second] (nulls and a repeated value left out)."""
    a = pc.cast(first, LARGE)
    b = pc.if_else(pc.fill_null(pc.equal(a, second), False), pa.scalar(None, LARGE), second)
    b = pc.cast(b, LARGE)
    inter = pa.concat_arrays([a, b]).take(
        pa.array(np.arange(2 * len(a)).reshape(2, -1).T.reshape(-1))
    )
    keep = pc.is_valid(inter)
    counts = pc.add(pc.cast(pc.is_valid(a), pa.int64()), pc.cast(pc.is_valid(b), pa.int64()))
    offsets = np.concatenate(([0], np.cumsum(counts.to_numpy(zero_copy_only=False))))
    return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), inter.filter(keep))
