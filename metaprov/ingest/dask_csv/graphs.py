"""``graph.csv`` -> the ``graphs`` table and the submitted keys with their dependencies (:class:`_Graphs`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.ingest.csvread import CsvTable
from metaprov.ingest.dask_csv.columns import _Clock, _decode, _str, _table, _text, _time
from metaprov.ingest.dask_csv.order import _distinct, _lexorder
from metaprov.ingest.literals import parse_column
from metaprov.records import Accounting, conform


@dataclass
class _Graphs:
    """Keys and edges of the submitted graphs as codes into ``cats`` (texts, unsorted)."""

    cats: pa.Array
    graph: np.ndarray  # (graph, key, wanted) rows: every key of a graph, and the wanted ones
    key: np.ndarray
    wanted: np.ndarray
    edge_graph: np.ndarray  # distinct (graph, key, dependency) edges, in no particular order
    edge_key: np.ndarray
    edge_dep: np.ndarray


def _rows(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    """``arr`` at ``idx`` (no copy when that is every row)."""
    if len(idx) == len(arr):
        return arr
    return arr.take(pa.array(idx))


def read_graphs(
    ct: CsvTable, acct: Accounting, clock: _Clock | None = None
) -> tuple[pd.DataFrame, _Graphs]:
    """graph.csv -> (graphs table, keys and edges as codes; see :func:`_dependencies`)."""
    name = ct.name
    # (kept with the parse by a ParseCache: a graph.csv read again unchanged is not parsed again)
    deps = ct.derived("deps", lambda: parse_column(ct.arrow("dependencies"), "deps"))
    wanted = ct.derived("keys", lambda: parse_column(ct.arrow("keys"), "set"))
    if len(deps.bad_cells):
        acct.drop(
            name,
            "malformed 'dependencies' literal",
            ct.lines[deps.bad_cells],
            column="dependencies",
            detail=deps.bad_detail,
        )
    only_keys_bad = np.setdiff1d(wanted.bad_cells, deps.bad_cells)
    if len(only_keys_bad):
        pos = np.searchsorted(wanted.bad_cells, only_keys_bad)
        acct.drop(
            name,
            "malformed 'keys' literal",
            ct.lines[only_keys_bad],
            column="keys",
            detail=[wanted.bad_detail[i] for i in pos],
        )
    n = len(ct)
    good = np.ones(n, dtype=bool)
    good[np.union1d(deps.bad_cells, wanted.bad_cells)] = False
    dep_ok = np.flatnonzero(good[deps.cell])
    want_ok = np.flatnonzero(good[wanted.cell])
    dcell, wcell = deps.cell[dep_ok], wanted.cell[want_ok]
    texts = [
        _rows(deps.key, dep_ok),
        _rows(deps.value, dep_ok),
        _rows(wanted.key, want_ok),
    ]
    del deps, wanted
    # one dictionary for every key text of the graphs (hashed once, not concatenated)
    parts = [t for t in texts if len(t)]
    enc = pc.dictionary_encode(pa.chunked_array(parts, type=pa.large_string()))
    chunks = iter(enc.chunks)
    kc, vc, wc = (
        next(chunks).indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        if len(t)
        else np.zeros(0, dtype=np.int64)
        for t in texts
    )
    cats = enc.chunk(0).dictionary if enc.num_chunks else pa.array([], type=pa.large_string())
    del texts, parts, enc
    nd = len(dcell)
    has = vc >= 0
    eg, ek, ev = dcell[has].astype(np.int64), kc[has], vc[has]
    e = _distinct(eg, ek, ev)
    g = _Graphs(
        cats,
        np.concatenate([dcell, wcell]).astype(np.int64),
        np.concatenate([kc, wc]),
        np.r_[np.zeros(nd, dtype=bool), np.ones(len(wc), dtype=bool)],
        eg[e],
        ek[e],
        ev[e],
    )
    graphs = pd.DataFrame(
        {
            "graph": np.arange(n),
            "client": _text(ct.get("client")),
            "time": _time(ct, "time", acct, clock),
            "n_wanted": np.bincount(wcell, minlength=n),
            "n_tasks": np.bincount(g.graph[_distinct(g.graph, g.key)], minlength=n),
            "n_edges": np.bincount(g.edge_graph, minlength=n),
        }
    )[good]
    return conform("graphs", graphs), g


def _dependencies(g: _Graphs, gmap: np.ndarray, keys: pa.Array) -> pd.DataFrame:
    """The dependencies table: edges by graph, key text, dependency text."""
    ek, ev = gmap[g.edge_key], gmap[g.edge_dep]
    o = _lexorder(g.edge_graph, ek, ev)
    edges = {
        "graph": pd.array(g.edge_graph[o], dtype="Int64"),
        "key": _str(_decode(keys, ek[o])),
        "dependency": _str(_decode(keys, ev[o])),
    }
    return _table("dependencies", edges)
