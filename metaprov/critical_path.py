"""Critical path of a run: the chain of dependent tasks with the largest total compute time.

Input: a run's records (:class:`~metaprov.records.RunRecords`: ``dependencies`` and
``executions``) or a store holding the run. Output: a :class:`pandas.DataFrame`, one row per task
on the path in execution order (key, prefix, worker, start, end, duration, cumulative seconds).

The dependency DAG comes from the submitted task graphs (``graph.csv``): an edge runs from a
dependency to the task that needs it. Each task weighs the compute time of its executions (all
attempts: a retried task kept the path waiting for each of them); a task that never ran weighs 0.
networkx finds the heaviest path (``dag_longest_path``) after moving the task weights onto the
edges that enter each task, with a virtual source so that the first task's own weight counts too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from metaprov.errors import QueryError
from metaprov.queries import Param, Question

if TYPE_CHECKING:
    from metaprov.records import RunRecords
    from metaprov.store import Store

QUESTION = Question(
    name="critical-path",
    title="Critical path of a run",
    description="The chain of dependent tasks with the largest total compute time (networkx over "
    "the dependency DAG weighted by task durations), in execution order, with cumulative seconds.",
    params=(
        Param(
            "run",
            "string",
            "the run (id or directory name); needed when the store holds several",
            optional=True,
        ),
    ),
    examples=("metaprov query critical-path --param run=a5ff956e623079dc",),
)

COLUMNS = ["position", "key", "prefix", "worker", "start", "end", "duration", "cumulative"]
_SOURCE = -1  # virtual start node (task nodes are row numbers >= 0)


def longest_path(
    keys: np.ndarray, weights: np.ndarray, edges_from: np.ndarray, edges_to: np.ndarray
) -> list[int]:
    """Heaviest path through a DAG whose nodes carry weights.

    Args:
        keys: node labels (only their count is used; nodes are ``0..len(keys)-1``).
        weights: weight of each node (seconds); NaN counts as 0.
        edges_from: source node of each edge (the dependency).
        edges_to: target node of each edge (the task that needs it).

    Returns:
        The node numbers on the heaviest path, first to last (empty when there are no nodes).

    Raises:
        QueryError: the graph has a cycle.
    """
    import networkx as nx

    n = len(keys)
    if n == 0:
        return []
    w = np.nan_to_num(np.asarray(weights, dtype="float64"), nan=0.0)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    # Node weights move onto the edges entering each node; the virtual source reaches every node,
    # so a path may start anywhere and its first task's weight still counts.
    g.add_weighted_edges_from(zip([_SOURCE] * n, range(n), w.tolist(), strict=True))
    if len(edges_from):
        g.add_weighted_edges_from(
            zip(
                np.asarray(edges_from).tolist(),
                np.asarray(edges_to).tolist(),
                w[np.asarray(edges_to)].tolist(),
                strict=True,
            )
        )
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


def _frame(
    keys: np.ndarray,
    path: list[int],
    weights: np.ndarray,
    info: pd.DataFrame | None,
) -> pd.DataFrame:
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
        sub = info.reindex(rows).reset_index(drop=True)
        for col in ("prefix", "worker", "start", "end"):
            if col in sub:
                out[col] = sub[col].to_numpy()
    for col in COLUMNS:
        if col not in out:
            out[col] = pd.Series([None] * len(out), dtype=object)
    return out[COLUMNS]


def critical_path(records: RunRecords) -> pd.DataFrame:
    """The critical path of one run, from its records.

    Args:
        records: from :func:`metaprov.read_run`.

    Returns:
        One row per task on the path, in dependency order: ``position``, ``key``, ``prefix``,
        ``worker`` and ``start``/``end`` of its last execution, ``duration`` (seconds of compute,
        all attempts) and ``cumulative`` (running total). Empty when the run has no tasks.
        ``DataFrame.attrs["total_seconds"]`` holds the path's length.

    Example:
        >>> cp = critical_path(read_run("runs/R1"))  # doctest: +SKIP
        >>> cp[["key", "duration", "cumulative"]]  # doctest: +SKIP
    """
    tasks = records.tasks.dropna(subset=["key"]).drop_duplicates("key")
    dep = records.dependencies.dropna(subset=["key", "dependency"])
    ex = records.executions.dropna(subset=["key"])
    keys = pd.unique(
        pd.concat([tasks["key"], dep["key"], dep["dependency"]], ignore_index=True).astype(str)
    )
    index = pd.Index(keys)
    start = (ex["start"]).to_numpy(dtype="datetime64[us]").view("int64")
    end = (ex["end"]).to_numpy(dtype="datetime64[us]").view("int64")
    nat = np.iinfo(np.int64).min
    secs = np.where((start != nat) & (end != nat), (end - start) / 1e6, 0.0)
    weights = np.zeros(len(keys))
    if len(ex):
        rows = index.get_indexer(ex["key"].astype(str))
        ok = rows >= 0
        np.add.at(weights, rows[ok], secs[ok])
    pairs = dep[["dependency", "key"]].drop_duplicates()
    src = index.get_indexer(pairs["dependency"].astype(str))
    dst = index.get_indexer(pairs["key"].astype(str))
    path = longest_path(keys, weights, src, dst)
    info = (
        tasks.set_index(tasks["key"].astype(str))
        .reindex(keys)[["prefix", "worker", "start", "end"]]
        .reset_index(drop=True)
    )
    out = _frame(keys, path, weights, info)
    out.attrs["total_seconds"] = float(out["cumulative"].iloc[-1]) if len(out) else 0.0
    return out


_EDGES = """
PREFIX mp: <https://w3id.org/metaprov/ns#>
SELECT ?key ?dependency WHERE {
  GRAPH ?g { ?run mp:runId ?run_id . ?task mp:dependsOn ?dep ; mp:key ?key . ?dep mp:key ?dependency }
}
"""

_TASKS = """
PREFIX mp: <https://w3id.org/metaprov/ns#>
PREFIX prov: <http://www.w3.org/ns/prov#>
SELECT ?key ?prefix ?worker ?start ?end ?duration WHERE {
  GRAPH ?g {
    ?run mp:runId ?run_id .
    ?execution a mp:TaskExecution ; mp:task ?task ; mp:duration ?duration ; prov:wasAssociatedWith ?agent .
    ?task mp:key ?key .
    OPTIONAL { ?execution prov:qualifiedAssociation/prov:hadPlan/mp:name ?prefix }
    OPTIONAL { ?execution prov:startedAtTime ?start }
    OPTIONAL { ?execution prov:endedAtTime ?end }
    OPTIONAL { ?agent a mp:Thread ; prov:actedOnBehalfOf/prov:actedOnBehalfOf ?thread_worker }
    BIND (COALESCE(?thread_worker, ?agent) AS ?worker_node)
    OPTIONAL { ?worker_node mp:address ?worker }
  }
}
"""

_RUNS = """
PREFIX mp: <https://w3id.org/metaprov/ns#>
SELECT ?run_id ?name WHERE { GRAPH ?g { ?run a mp:Run ; mp:runId ?run_id . OPTIONAL { ?run mp:runName ?name } } }
ORDER BY ?run_id
"""


def resolve_run(store: Store, run: str | None) -> str:
    """The id of the run meant by ``run`` (an id or a run directory name) in a store.

    Raises:
        QueryError: no such run, or no run given while the store holds several.
    """
    runs = store.query(_RUNS)
    assert isinstance(runs, pd.DataFrame)
    if not len(runs):
        raise QueryError("the store holds no run", hint="load one first: metaprov load RUN")
    if run is None:
        if len(runs) > 1:
            shown = ", ".join(
                f"{r} ({n})" for r, n in zip(runs["run_id"], runs["name"].fillna(""), strict=True)
            )
            raise QueryError(
                "the store holds several runs: say which one",
                hint=f"give --param run=ID; runs: {shown}",
            )
        return str(runs["run_id"].iloc[0])
    if run in set(runs["run_id"].astype(str)):
        return run
    names = runs[runs["name"].astype(str) == run]
    if len(names) == 1:
        return str(names["run_id"].iloc[0])
    if len(names) > 1:
        raise QueryError(
            f"several runs are named {run!r}", hint=f"give the run id: {', '.join(names['run_id'])}"
        )
    raise QueryError(f"no run {run!r} in the store", hint=f"runs: {', '.join(runs['run_id'])}")


def critical_path_from_store(store: Store, run: str | None = None) -> pd.DataFrame:
    """The critical path of a run held in a store (same result as :func:`critical_path`).

    Args:
        store: an open store.
        run: run id or directory name; may be omitted when the store holds one run.

    Returns:
        See :func:`critical_path`; a ``run_id`` column comes first.
    """
    run_id = resolve_run(store, run)
    params = {"run_id": run_id}
    edges = store.query(_EDGES, params)
    tasks = store.query(_TASKS, params)
    assert isinstance(edges, pd.DataFrame) and isinstance(tasks, pd.DataFrame)
    agg: dict[str, Any] = {
        "prefix": "first",
        "worker": "last",
        "start": "max",
        "end": "max",
        "duration": "sum",
    }
    tasks = tasks.sort_values(["key", "start"], kind="stable", na_position="first")
    per_task = tasks.groupby("key", sort=True).agg(agg)
    keys = pd.unique(
        pd.concat(
            [pd.Series(per_task.index, dtype=object), edges["key"], edges["dependency"]],
            ignore_index=True,
        ).astype(str)
    )
    index = pd.Index(keys)
    per_task = per_task.reindex(keys)
    weights = (
        pd.to_numeric(per_task["duration"], errors="coerce").fillna(0.0).to_numpy(dtype="float64")
    )
    pairs = edges.drop_duplicates()
    path = longest_path(
        keys,
        weights,
        index.get_indexer(pairs["dependency"].astype(str)),
        index.get_indexer(pairs["key"].astype(str)),
    )
    out = _frame(keys, path, weights, per_task.reset_index(drop=True))
    out.insert(0, "run_id", run_id)
    out.attrs["total_seconds"] = float(out["cumulative"].iloc[-1]) if len(out) else 0.0
    return out


__all__ = ["QUESTION", "critical_path", "critical_path_from_store", "longest_path", "resolve_run"]
