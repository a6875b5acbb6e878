"""Transfers of data chunks between workers, and the replicas they generate.

Input: ``records.transfers`` (one row per key moved; rows sharing a transfer id form one
transfer). Output: an mp:Transfer per transfer id (``prov:used`` the chunks at the source,
``mp:source``/``mp:destination`` agents, window, bytes, bandwidth) and an mp:ChunkReplica per
row (``prov:specializationOf`` the chunk, ``prov:wasGeneratedBy`` the transfer,
``prov:atLocation`` the destination).

A transfer logged only by its sender to a non-worker peer (a client gathering results) has no
destination address: its destination is the run's client (the first one by id when there are
several, an approximation written down in docs/model.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.block import Block, lit_double, lit_epoch, lit_int, lit_str, lit_time
from metaprov.mapping.tasks import dict_map, list_column, task_index
from metaprov.mapping.terms import MP, PROV, RDF, XSD

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

LARGE = pa.large_string()


def transfers_sorted(ctx: MapContext) -> pd.DataFrame:
    """Transfer rows with a transfer id and key, sorted by (transfer, key), one row per pair."""

    def make() -> pd.DataFrame:
        tr = ctx.records.transfers.dropna(subset=["transfer", "key"])
        tr = tr.sort_values(["transfer", "key"], kind="stable").drop_duplicates(["transfer", "key"])
        return tr.reset_index(drop=True)

    return ctx.cached("transfers_sorted", make)


def fallback_destination(ctx: MapContext) -> str:
    """The agent receiving data when no worker address was logged (see module docstring)."""
    from metaprov.mapping.agents import client_table

    clients = client_table(ctx)["client"].astype(str).tolist()
    if clients:
        return str(ctx.iris.clients([clients[0]])[0].as_py())
    return f"{ctx.iris.run}/client/unknown"


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
        blk.add(PROV.used, list_column(offsets[a : b + 1] - o0, idx.chunk_iri(rows)))
        blk.add(MP.run, iris.run)
        yield blk

    # Replicas: one per (transfer, key) row.
    tid_iri_all = None
    for a in range(0, len(tr), step):
        part = tr.iloc[a : a + step]
        rows = idx.rows(part["key"])
        tid_iri_all = iris.transfers(part["transfer"])
        rb = Block(iris.replicas(tid_iri_all, part["key"]))
        rb.add(RDF.type, MP.ChunkReplica)
        rb.add(PROV.specializationOf, idx.chunk_iri(rows))
        rb.add(MP.task, idx.task_iri.take(pa.array(rows)))
        rb.add(PROV.wasGeneratedBy, tid_iri_all)
        rb.add(PROV.atLocation, pc.fill_null(dict_map(part["destination"], iris.workers), fallback))
        rb.add(MP.nbytes, lit_int(part["nbytes"]), "typed", XSD.integer)
        yield rb
