"""Reading one partition of a run's keys (:class:`KeySelection`), and the run id."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.ingest.csvread import CsvTable, RowSelection
from metaprov.ingest.dask_csv.graphs import _Graphs
from metaprov.records import RunRecords

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def fnv64(texts: pa.Array) -> np.ndarray:
    """FNV-1a (64 bit) of the UTF-8 bytes of each text, then a 64-bit finaliser (nulls as ""):
    fixed, so every machine, version and process agrees (Python's and polars' hashes are seeded
    or version-dependent)."""
    arr = pc.fill_null(pc.cast(texts, pa.large_string()), "")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    m = len(arr)
    if m == 0:
        return np.zeros(0, np.uint64)
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], np.int64, m + 1, arr.offset)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    start, lens = off[:-1], np.diff(off)
    h = np.full(m, _FNV_OFFSET)
    with np.errstate(over="ignore"):
        # one vector step per byte position (keys are tens of bytes long)
        for j in range(int(lens.max())):
            sel = np.flatnonzero(lens > j)
            h[sel] = (h[sel] ^ data[start[sel] + j].astype(np.uint64)) * _FNV_PRIME
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
    return h


@dataclass
class KeySelection:
    """Which records to read when a run is read in partitions of its keys (a huge run mapped on
    several workers, see :mod:`metaprov.export.partition`).

    The rows of the keys the partition owns are read, and those of their direct dependencies
    (learnt from ``graph.csv``, read first): a task's triples depend on whether each dependency
    holds a result. Transfers and the small files are read whole (transfer ids are ranks over
    every transfer). Rows without a key are kept by the partition that owns ``None`` (one of
    them), so they are accounted once.

    Attributes:
        owns: per key text (a pyarrow string array), whether the partition owns the key.
        keeps_keyless: this partition reports the rows that have no key.
        transitions: read the transition files (False: the run-level part, which needs none).
    """

    owns: Callable[[pa.Array], np.ndarray]
    keeps_keyless: bool = False
    transitions: bool = True
    needed: pa.Array = field(default_factory=lambda: pa.array([], pa.large_string()))

    def _wanted(self, texts: pa.Array) -> np.ndarray:
        texts = texts.cast(pa.large_string())
        inneed = pc.is_in(texts, value_set=self.needed).to_numpy(zero_copy_only=False)
        return np.asarray(self.owns(texts), dtype=bool) | inneed

    def learn(self, g: _Graphs) -> None:
        """Keep the graph rows of this partition: edges from or to an owned key, membership of
        owned and needed keys; remember the owned keys' dependencies as needed."""
        own = np.asarray(self.owns(g.cats), dtype=bool)
        own_edge = own[g.edge_key]
        self.needed = pc.unique(g.cats.take(pa.array(np.unique(g.edge_dep[own_edge])))).cast(
            pa.large_string()
        )
        keep_edge = own_edge | own[g.edge_dep]
        g.edge_graph, g.edge_key, g.edge_dep = (
            g.edge_graph[keep_edge],
            g.edge_key[keep_edge],
            g.edge_dep[keep_edge],
        )
        wanted = self._wanted(g.cats)
        self._remember(g.cats, own, wanted)
        member = wanted[g.key]
        g.graph, g.key, g.wanted = g.graph[member], g.key[member], g.wanted[member]
        # only the texts still referenced (the others would become keys without records)
        used = np.unique(np.concatenate([g.key, g.edge_key, g.edge_dep]))
        remap = np.full(len(g.cats), -1, np.int64)
        remap[used] = np.arange(len(used))
        g.cats = g.cats.take(pa.array(used))
        g.key, g.edge_key, g.edge_dep = remap[g.key], remap[g.edge_key], remap[g.edge_dep]

    def masks(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Per row of a block of a transition file: keep it (a key owned or needed; without a
        key: this partition reports those), and count it as read here (owned keys only, so the
        partitions' accounts add up to the file's)."""
        col = table.column("key")
        enc = col.combine_chunks() if pa.types.is_dictionary(col.type) else None
        if enc is None:
            enc = pc.dictionary_encode(col.cast(pa.large_string()).combine_chunks())
        cats = enc.dictionary.cast(pa.large_string())
        owned, wanted = self._decide(cats)
        codes = enc.indices.to_numpy(zero_copy_only=False)
        valid = enc.indices.is_valid().to_numpy(zero_copy_only=False)
        safe = np.where(valid, codes, 0).astype(np.int64)
        keep = np.where(valid, wanted[safe] if len(cats) else False, self.keeps_keyless)
        mine = np.where(valid, owned[safe] if len(cats) else False, self.keeps_keyless)
        return keep, mine

    def _remember(self, keys: pa.Array, own: np.ndarray, wanted: np.ndarray) -> None:
        """Keep the decision for every key of the graph, found again by a 64-bit hash of its
        text (then compared as text): a transition file names each key in many blocks, and
        deciding from scratch (quoting and hashing the key) per block costs more than parsing."""
        h = fnv64(keys)
        order = np.argsort(h, kind="stable")
        self._keys = keys.cast(pa.large_string())
        self._hash, self._order = h[order], order
        self._own, self._want = own, wanted

    def _decide(self, cats: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(owned, wanted) per distinct key text of a block."""
        n = len(cats)
        owned = np.zeros(n, dtype=bool)
        wanted = np.zeros(n, dtype=bool)
        rest = np.ones(n, dtype=bool)
        hs = getattr(self, "_hash", None)
        if hs is not None and len(hs) and n:
            h = fnv64(cats)
            pos = np.minimum(np.searchsorted(hs, h), len(hs) - 1)
            hit = np.flatnonzero(hs[pos] == h)
            row = self._order[pos[hit]]
            same = pc.equal(self._keys.take(pa.array(row)), cats.take(pa.array(hit)))
            same = same.to_numpy(zero_copy_only=False).astype(bool)
            hit, row = hit[same], row[same]
            owned[hit], wanted[hit], rest[hit] = self._own[row], self._want[row], False
        if rest.any():  # keys the graph does not name (or a hash shared by two keys)
            idx = np.flatnonzero(rest)
            sub = cats.take(pa.array(idx))
            o = np.asarray(self.owns(sub), dtype=bool)
            owned[idx] = o
            wanted[idx] = o | pc.is_in(sub, value_set=self.needed).to_numpy(zero_copy_only=False)
        return owned, wanted

    def selection(self) -> RowSelection:
        """The rows of a transition file this partition reads, chosen block by block as the
        file is read (see :func:`metaprov.ingest.csvread.read_csv`)."""
        return RowSelection(self.masks, reports_rest=self.keeps_keyless)

    @staticmethod
    def reencode(ct: CsvTable) -> CsvTable:
        """The key column re-encoded so its dictionary holds only the keys kept (other columns
        keep theirs: a worker address seen in any row is a worker of the run, whichever
        partition reads the row)."""
        key = pc.dictionary_encode(ct.arrow("key").cast(pa.string()))
        table = ct.table.set_column(ct.table.column_names.index("key"), "key", key)
        return CsvTable(ct.name, table, ct.lines)


def run_id(records: RunRecords) -> str:
    """Content-derived run id: scheduler address, first event time, clients and key count."""
    first, _ = records.span
    return run_id_of_facts(
        records.scheduler.get("address"),
        first,
        records.clients["client"],
        len(records.tasks),
        records.workers["address"],
    )


def run_id_of_facts(
    scheduler: Any, first: Any, clients: pd.Series, n_tasks: int, workers: pd.Series
) -> str:
    """:func:`run_id` from its facts (a run read in partitions combines them first)."""
    parts = [
        str(scheduler or ""),
        "" if first is None else str(first.value if hasattr(first, "value") else first),
        ",".join(sorted(set(clients.dropna().astype(str)))),
        str(n_tasks),
        ",".join(sorted(set(workers.dropna().astype(str)))),
    ]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]
