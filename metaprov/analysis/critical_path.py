"""Critical path of a run: the chain of dependent tasks with the largest total compute time.

Input: a run's records (:class:`~metaprov.records.RunRecords`: ``dependencies`` and
``executions``); the same programme over a store's copy of the run is
:mod:`metaprov.queries.critical_path`. Output: a :class:`pandas.DataFrame`, one row per task
on the path in execution order (key, prefix, worker, start, end, duration, cumulative seconds).

The dependency DAG comes from the submitted task graphs (``graph.csv``): an edge runs from a
dependency to the task that needs it. Each task weighs the compute time of its executions (all
attempts: a retried task kept the path waiting for each of them); a task that never ran weighs 0.

The heaviest path is networkx's (``dag_longest_path``, after moving the task weights onto the
edges that enter each task, with a virtual source so that the first task's own weight counts
too), computed by a vectorised version of the same dynamic programme (level by level over the
topological order, numpy over whole edge arrays) that makes the same choices between equally
heavy paths: the same path, at every size (networkx keeps Python objects per node and edge:
8 s at 10^5 tasks, minutes and gigabytes at 10^6). A test compares the two on random DAGs with
ties, zero and negative weights; ``method="networkx"`` still runs networkx itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.errors import QueryError
from metaprov.timeutil import NAT_US, utc_to_us

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph
    from metaprov.records import RunRecords

COLUMNS = ["position", "key", "prefix", "worker", "start", "end", "duration", "cumulative"]
#: Largest DAG (tasks) ``method="auto"`` gives to networkx: none (the vectorised programme
#: finds networkx's path at every size, faster; kept for callers that name it).
NETWORKX_LIMIT = 0
_SOURCE = -1  # virtual start node (task nodes are row numbers >= 0)


def longest_path(
    keys: np.ndarray,
    weights: np.ndarray,
    edges_from: np.ndarray,
    edges_to: np.ndarray,
    *,
    method: str = "auto",
    depth: np.ndarray | None = None,
) -> list[int]:
    """Heaviest path through a DAG whose nodes carry weights.

    Args:
        keys: node labels (for messages; nodes are ``0..len(keys)-1``).
        weights: weight of each node (seconds); NaN counts as 0.
        edges_from: source node of each edge (the dependency).
        edges_to: target node of each edge (the task that needs it).
        method: ``networkx``, ``numpy`` or ``auto`` (``numpy``: the same path as networkx's).
        depth: an int64 array of one entry per node, filled with each node's topological level
            (the most edges from a node without dependencies): the layers of a layered drawing,
            found in the same pass. Implies the ``numpy`` method.

    Returns:
        The node numbers on the heaviest path, first to last (empty when there are no nodes).

    Raises:
        QueryError: the graph has a cycle.
    """
    n = len(keys)
    if n == 0:
        return []
    w = np.nan_to_num(np.asarray(weights, dtype="float64"), nan=0.0)
    src = np.asarray(edges_from, dtype=np.int64)
    dst = np.asarray(edges_to, dtype=np.int64)
    if depth is not None or method == "numpy" or (method == "auto" and n > NETWORKX_LIMIT):
        return _longest_path_numpy(keys, w, src, dst, depth)
    return _longest_path_networkx(keys, w, src, dst)


def _longest_path_networkx(
    keys: np.ndarray, w: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> list[int]:
    import networkx as nx

    n = len(keys)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    # Node weights move onto the edges entering each node; the virtual source reaches every node,
    # so a path may start anywhere and its first task's weight still counts.
    g.add_weighted_edges_from(zip([_SOURCE] * n, range(n), w.tolist(), strict=True))
    if len(src):
        g.add_weighted_edges_from(zip(src.tolist(), dst.tolist(), w[dst].tolist(), strict=True))
    try:
        path = nx.dag_longest_path(g, weight="weight", default_weight=0)
    except nx.NetworkXUnfeasible as exc:
        cycle = nx.find_cycle(g)
        shown = " -> ".join(str(keys[u]) for u, _ in cycle[:5])
        raise QueryError(
            f"the dependency graph has a cycle ({shown} ...)",
            hint="a task graph must be acyclic; check graph.csv of this run",
        ) from exc
    return [int(v) for v in path if v != _SOURCE]


def _longest_path_numpy(
    keys: np.ndarray,
    w: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    depth: np.ndarray | None = None,
) -> list[int]:
    """Kahn's algorithm one topological level at a time, relaxing all of a level's edges at once.

    The same path as :func:`_longest_path_networkx`, ties included: networkx's topological
    order (a level's nodes in the order their last dependency frees them), its choice of
    predecessor (the virtual source first, then the dependencies in edge order: the first that
    gives the heaviest sum), its end (the first heaviest node in that order; none when every
    sum is 0) and its rule for negative weights (a node whose heaviest sum is negative starts
    a path of length 0).
    """
    n = len(keys)
    order = np.argsort(src, kind="stable")
    dst_by_src = dst[order]
    out_start = np.searchsorted(src[order], np.arange(n + 1))
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    dist = w.copy()  # heaviest path ending at each node (its own weight included)
    cut = np.zeros(n, dtype=bool)  # a negative heaviest sum: the node starts its path (length 0)
    topo = np.empty(n, dtype=np.int64)  # the nodes in networkx's topological order
    frontier = np.flatnonzero(indeg == 0)
    done = 0
    level = 0
    while len(frontier):
        # the frontier's sums are final: negative ones become 0, as networkx makes them
        negative = frontier[dist[frontier] < 0]
        dist[negative], cut[negative] = 0.0, True
        topo[done : done + len(frontier)] = frontier
        done += len(frontier)
        if depth is not None:
            depth[frontier] = level
            level += 1
        lo, hi = out_start[frontier], out_start[frontier + 1]
        counts = hi - lo
        if not counts.sum():
            break
        pos = np.repeat(lo - np.cumsum(np.r_[0, counts[:-1]]), counts) + np.arange(counts.sum())
        u = np.repeat(frontier, counts)
        v = dst_by_src[pos]  # the frontier's edges in networkx's order (node, then edge order)
        np.maximum.at(dist, v, dist[u] + w[v])
        np.subtract.at(indeg, v, 1)
        # The nodes whose last dependency was just done, each once, in the order networkx
        # frees them: the position of their last edge here.
        freed = v[indeg[v] == 0][::-1]
        nodes, first = np.unique(freed, return_index=True)
        frontier = nodes[np.argsort(-first, kind="stable")]
    if done < n:
        stuck = np.flatnonzero(indeg > 0)[:5]
        raise QueryError(
            f"the dependency graph has a cycle (through {', '.join(str(keys[i]) for i in stuck)} ...)",
            hint="a task graph must be acyclic; check graph.csv of this run",
        )
    heaviest = float(dist.max())
    if not heaviest > 0:  # networkx's virtual source (0) comes first: no path
        return []
    # Walk back from the first heaviest end: the predecessor is the virtual source when the
    # node's own weight is its sum (the path starts there), else the first dependency, in edge
    # order, whose sum plus the node's weight is the node's (the same floating-point sum).
    order_in = np.argsort(dst, kind="stable")
    src_by_dst = src[order_in]
    in_start = np.searchsorted(dst[order_in], np.arange(n + 1))
    v = int(topo[int(np.argmax(dist[topo]))])
    path = [v]
    while not cut[v] and dist[v] != w[v]:
        preds = src_by_dst[in_start[v] : in_start[v + 1]]
        hit = preds[dist[preds] + w[v] == dist[v]]
        if not len(hit):  # pragma: no cover - every sum came from a predecessor
            break
        v = int(hit[0])
        path.append(v)
    return path[::-1]


def path_frame(
    keys: np.ndarray,
    path: list[int],
    weights: np.ndarray,
    info: pd.DataFrame | None,
) -> pd.DataFrame:
    """The path as a table; ``info`` holds one row per path element (key, prefix, ...)."""
    rows = np.asarray(path, dtype=np.int64)
    dur = (
        np.nan_to_num(np.asarray(weights, dtype="float64")[rows], nan=0.0)
        if len(rows)
        else np.zeros(0)
    )
    out = pd.DataFrame(
        {
            "position": np.arange(1, len(rows) + 1, dtype=np.int64),
            "key": pd.Series(np.asarray(keys, dtype=object)[rows], dtype=object),
            "duration": dur,
            "cumulative": np.cumsum(dur),
        }
    )
    if info is not None and len(out):
        sub = info.reset_index(drop=True)
        for col in ("key", "prefix", "worker", "start", "end"):
            if col in sub:
                out[col] = sub[col].to_numpy()
    for col in COLUMNS:
        if col not in out:
            out[col] = pd.Series([None] * len(out), dtype=object)
    return out[COLUMNS]


def feeding_executions(path_ids: list[Any], rows: pd.DataFrame, id_col: str) -> pd.DataFrame:
    """For each step of a path (first to last), the execution that fed the next step.

    A re-executed key has several executions; the one on the path is the one whose result the
    next step used: the last step's latest execution, then, walking back, the latest execution
    of each step that ended by the start of the execution chosen after it (failing that, the
    latest that started by then; failing that, its first). So the steps are in time order
    whenever the clocks allow, and each names one execution.

    Args:
        path_ids: the steps' ids (task keys or IRIs), first to last.
        rows: one row per execution: ``id_col``, ``start``, ``end`` (UTC timestamps) and any
            other columns to keep (worker, ...).
        id_col: the column holding the step id.

    Returns:
        One row per step, in path order, with the columns of ``rows`` (all NA for a step
        without execution).
    """
    cols = list(rows.columns)
    picks = _feeding_rows(path_ids, rows, id_col)
    chosen: list[pd.Series | None] = [None if i < 0 else rows.iloc[i] for i in picks]
    data = {c: [None if r is None else r[c] for r in chosen] for c in cols}
    out = pd.DataFrame(data, columns=cols)
    out[id_col] = list(path_ids)
    for c in ("start", "end"):
        if c in out:
            out[c] = pd.to_datetime(out[c], utc=True)
    return out


def _feeding_rows(path_ids: list[Any], rows: pd.DataFrame, id_col: str) -> list[int]:
    """The position in ``rows`` of each step's feeding execution (-1: none), first to last.

    One stable sort of all rows by (step, start, end), missing times first; then, walking the
    path back, each step's choice is made on its own slice of plain integer arrays (a path of
    thousands of steps over a re-executed run takes milliseconds, not a pandas sort per step).
    """
    if not len(rows) or not len(path_ids):
        return [-1] * len(path_ids)
    codes, uniques = pd.factorize(rows[id_col], use_na_sentinel=True)
    # NaT is the smallest int64: missing times sort first, as na_position="first" does.
    start = pd.to_datetime(rows["start"], utc=True).to_numpy(dtype="datetime64[ns]").view("i8")
    end = pd.to_datetime(rows["end"], utc=True).to_numpy(dtype="datetime64[ns]").view("i8")
    nat = np.iinfo(np.int64).min
    order = np.lexsort((end, start, codes))  # stable: ties keep the rows' order
    order = order[codes[order] >= 0]
    sc = codes[order]
    first = np.searchsorted(sc, np.arange(len(uniques)), side="left")
    last = np.searchsorted(sc, np.arange(len(uniques)), side="right")
    where = pd.Index(uniques)
    step_codes = where.get_indexer(pd.Index(list(path_ids), dtype=object))
    s_start, s_end = start[order], end[order]
    picks: list[int] = []
    next_start = nat
    for c in step_codes[::-1]:
        if c < 0:
            picks.append(-1)
            continue
        lo, hi = int(first[c]), int(last[c])
        if next_start == nat:
            pick = hi - 1
        else:
            e, b = s_end[lo:hi], s_start[lo:hi]
            fed = np.flatnonzero((e != nat) & (e <= next_start))
            began = np.flatnonzero((b != nat) & (b <= next_start))
            if len(fed):
                # the latest end; among equal ends the last in (start, end) order (stable sort)
                best = e[fed].max()
                pick = lo + int(fed[e[fed] == best][-1])
            elif len(began):
                pick = lo + int(began[-1])
            else:
                pick = lo
        picks.append(int(order[pick]))
        if s_start[pick] != nat:
            next_start = int(s_start[pick])
    picks.reverse()
    return picks


def critical_path(records: RunRecords, *, method: str = "auto") -> pd.DataFrame:
    """The critical path of one run, from its records.

    Args:
        records: from :func:`metaprov.read_run`.
        method: see :func:`longest_path`.

    Returns:
        One row per task on the path, in dependency order: ``position``, ``key``, ``prefix``,
        ``worker`` and ``start``/``end`` of the execution that fed the next step
        (:func:`feeding_executions`: for a re-executed key, not just its last), ``duration``
        (seconds of compute, all attempts) and ``cumulative`` (running total). Empty when the run has no tasks.
        ``DataFrame.attrs["total_seconds"]`` holds the path's length.

    Example:
        >>> cp = critical_path(read_run("runs/R1"))  # doctest: +SKIP
        >>> cp[["key", "duration", "cumulative"]]  # doctest: +SKIP
    """
    # only the columns used below (no copies of the whole tables: 10^6 tasks at load time)
    tasks = records.tasks[["key", "prefix", "worker"]].dropna(subset=["key"])
    dep = records.dependencies[["key", "dependency"]].dropna()
    ex = records.executions[["key", "worker", "start", "end"]].dropna(subset=["key"])
    # Every key as a number, in order of first appearance in the tasks, then the dependencies
    # (one dictionary encoding of all the key columns, executions last: their other keys are
    # no nodes); the duplicate dependency pairs dropped, the first of each kept.
    parts = [tasks["key"], dep["key"], dep["dependency"], ex["key"]]
    ends = np.cumsum([0, *(len(p) for p in parts)])
    encoded = pc.dictionary_encode(pa.concat_arrays([_texts(p) for p in parts]))
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n = int(codes[: ends[3]].max()) + 1 if ends[3] else 0
    keys = _Keys(encoded.dictionary.slice(0, n))
    start, end = utc_to_us(ex["start"]), utc_to_us(ex["end"])
    secs = np.where((start != NAT_US) & (end != NAT_US), (end - start) / 1e6, 0.0)
    weights = np.zeros(n)
    ex_codes = codes[ends[3] :]
    if len(ex):
        ok = ex_codes < n
        np.add.at(weights, ex_codes[ok], secs[ok])
    key_codes, dep_codes = codes[ends[1] : ends[2]], codes[ends[2] : ends[3]]
    _, first = np.unique(dep_codes * max(n, 1) + key_codes, return_index=True)
    first.sort()
    path = longest_path(keys, weights, dep_codes[first], key_codes[first], method=method)
    on_path = keys.texts(path)
    # the tasks and executions of the keys on the path (their first task row, as below)
    nodes = np.asarray(path, dtype=np.int64)
    tasks = tasks[np.isin(codes[: ends[1]], nodes)].drop_duplicates("key")
    info = tasks.set_index(tasks["key"].astype(str)).reindex(on_path)[["prefix", "worker"]]
    # start, end and worker of the execution that fed the next step (re-executed keys)
    runs = ex[np.isin(ex_codes, nodes)]
    runs = runs.assign(key=runs["key"].astype(str))[["key", "worker", "start", "end"]]
    fed = feeding_executions(on_path, runs, "key").set_index("key")
    info["start"], info["end"] = fed["start"].to_numpy(), fed["end"].to_numpy()
    info["worker"] = (
        fed["worker"].where(fed["worker"].notna(), info["worker"].to_numpy()).to_numpy()
    )
    out = path_frame(
        np.asarray(on_path, dtype=object),
        list(range(len(path))),
        weights[nodes] if len(nodes) else np.zeros(0),
        info[["prefix", "worker", "start", "end"]],
    )
    out.attrs["total_seconds"] = float(out["cumulative"].iloc[-1]) if len(out) else 0.0
    return out


def _texts(column: pd.Series) -> pa.Array:
    """A column of keys (no nulls) as the bytes of their text (Arrow; a text Arrow cannot hold,
    a lone surrogate, by its own bytes: keys are equal when their texts are)."""
    try:
        arr = pa.Array.from_pandas(column.astype(str))
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        return arr.cast(pa.large_string()).cast(pa.large_binary())
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
        texts = column.astype(str).tolist()
        return pa.array([t.encode("utf-8", "surrogatepass") for t in texts], pa.large_binary())


class _Keys:
    """The run's keys by node number (Arrow, no Python object per key): what
    :func:`longest_path` reads of its ``keys`` (their number, a few to name a cycle)."""

    def __init__(self, texts: pa.Array) -> None:
        self.arr = texts

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, i: Any) -> str:
        return self.texts([int(i)])[0]

    def texts(self, rows: list[int]) -> list[str]:
        taken = self.arr.take(pa.array(rows, pa.int64())).to_pylist()
        return [b.decode("utf-8", "surrogatepass") for b in taken]


def path_summary(graph: ProvGraph) -> dict[str, Any]:
    """The critical path of a PROV graph's records, as task IRIs and weights (JSON-ready).

    Recorded by stores at load time (see :meth:`metaprov.store.Store.load_graph`).
    """
    import pyarrow as pa

    cp = critical_path(graph.records)
    keys = pa.array([str(k) for k in cp["key"]], type=pa.large_string())
    return {
        "tasks": graph.iris.tasks(keys).to_pylist() if len(keys) else [],
        "weights": [float(x) for x in cp["duration"]],
    }


__all__ = [
    "COLUMNS",
    "NETWORKX_LIMIT",
    "critical_path",
    "feeding_executions",
    "longest_path",
    "path_summary",
]
