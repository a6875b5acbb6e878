"""The ``critical-path`` question: the critical path of a run held in a store.

Input: an open :class:`~metaprov.store.Store` and a run id (or directory name). Output: the same
table as :func:`metaprov.analysis.critical_path.critical_path` over the run's records, with a
``run_id`` column first. The longest-path programme itself lives in
:mod:`metaprov.analysis.critical_path`; this module reads the DAG and durations out of a store (or
the path the store recorded at load time) and looks up the details of the tasks on the path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from metaprov.analysis.critical_path import feeding_executions, longest_path, path_frame
from metaprov.errors import QueryError
from metaprov.queries.model import Param, Question

if TYPE_CHECKING:
    from metaprov.store import Store

QUESTION = Question(
    name="critical-path",
    title="Critical path of a run",
    description="The chain of dependent tasks with the largest total compute time (networkx's "
    "longest path, vectorised, over the dependency DAG weighted by task durations), in execution "
    "order, with cumulative seconds. "
    "Each step's worker, start and end are those of the execution that fed the next step (a key "
    "executed again later is not shown after the task it fed).",
    params=(
        Param(
            "run_id",
            "string",
            "the run (id or directory name; 'run' is accepted too); needed when the store "
            "holds several",
            optional=True,
        ),
    ),
    examples=("metaprov query critical-path --param run_id=a5ff956e623079dc",),
    needs=("compute",),
)

_PREFIXES = """PREFIX mp: <https://w3id.org/metaprov/ns#>
PREFIX prov: <http://www.w3.org/ns/prov#>
"""

# Bulk reads are single index scans (no joins): joins on millions of rows are done by pandas.
_EDGES = _PREFIXES + "SELECT ?task ?dep WHERE {{ GRAPH {g} {{ ?task mp:dependsOn ?dep }} }}"
_EXEC_TASK = (
    _PREFIXES + "SELECT ?e ?task WHERE {{ GRAPH {g} {{ ?e a mp:TaskExecution ; mp:task ?task }} }}"
)
_DURATIONS = _PREFIXES + "SELECT ?e ?d WHERE {{ GRAPH {g} {{ ?e mp:duration ?d }} }}"

_DETAILS = (
    _PREFIXES
    + """SELECT ?task ?key ?prefix ?worker ?start ?end WHERE {{
  GRAPH {g} {{
    VALUES ?task {{ {tasks} }}
    ?task mp:key ?key .
    # Optional links are followed through a placeholder IRI when absent (lookups stay lookups).
    OPTIONAL {{ ?task mp:taskGroup ?group_ }}
    BIND (COALESCE(?group_, <urn:metaprov:none>) AS ?group)
    OPTIONAL {{ ?group mp:taskPrefix ?plan_ }}
    BIND (COALESCE(?plan_, <urn:metaprov:none>) AS ?plan)
    OPTIONAL {{ ?plan mp:name ?prefix }}
    OPTIONAL {{ ?about_ mp:task ?task }}
    BIND (COALESCE(?about_, <urn:metaprov:none>) AS ?about)
    OPTIONAL {{ ?about mp:attempt ?attempt }}
    OPTIONAL {{ ?about prov:startedAtTime ?start_ }}
    OPTIONAL {{ ?about prov:endedAtTime ?end_ }}
    OPTIONAL {{ ?about prov:wasAssociatedWith ?agent_ }}
    BIND (IF(BOUND(?attempt), ?start_, ?unknown) AS ?start)
    BIND (IF(BOUND(?attempt), ?end_, ?unknown) AS ?end)
    BIND (COALESCE(?agent_, <urn:metaprov:none>) AS ?agent)
    OPTIONAL {{ ?agent mp:threadId ?thread ; prov:actedOnBehalfOf/prov:actedOnBehalfOf ?thread_worker }}
    # a task without an execution has no worker: a placeholder, never an unbound variable (the
    # OPTIONAL below would then match every worker of the run)
    BIND (IF(BOUND(?attempt), COALESCE(?thread_worker, ?agent), <urn:metaprov:none>) AS ?worker_node)
    OPTIONAL {{ ?worker_node mp:address ?worker }}
  }}
}}"""
)


def _details(store: Store, g: str, on_path: np.ndarray) -> pd.DataFrame:
    """Key, prefix, worker, start and end of the given tasks (one row each, in order)."""
    from metaprov.store.sparql import make_term

    if not len(on_path):
        return pd.DataFrame({"key": pd.Series([], dtype=object)})
    values = " ".join(make_term(str(t), "iri", name="task") for t in on_path)
    details = store.query(_DETAILS.format(g=g, tasks=values))
    assert isinstance(details, pd.DataFrame)
    for c in ("start", "end"):
        details[c] = pd.to_datetime(details[c], utc=True)
    ids = [str(t) for t in on_path]
    details["task"] = details["task"].astype(str)
    # the execution that fed the next step (re-executed keys), as over records
    fed = feeding_executions(ids, details, "task")
    return fed.set_index("task").reindex(ids)


def _path_from_store(store: Store, g: str, method: str) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(task IRIs, weights, path as rows) computed from the DAG read out of the store."""
    edges = store.select_strings(_EDGES.format(g=g))
    ex_task = store.select_strings(_EXEC_TASK.format(g=g))
    durations = store.select_strings(_DURATIONS.format(g=g))
    cols = [edges.get("task"), edges.get("dep"), ex_task.get("task")]
    present = [c for c in cols if c is not None]
    if not present:
        return np.zeros(0, dtype=object), np.zeros(0), []
    codes, uniques = pd.factorize(pd.concat(present, ignore_index=True))
    tasks = np.asarray(uniques, dtype=object)
    n_edges = len(edges)
    weights = np.zeros(len(tasks))
    if len(ex_task) and len(durations):
        secs = pd.to_numeric(durations.set_index("e")["d"], errors="coerce")
        per_exec = secs.reindex(ex_task["e"]).to_numpy(dtype="float64")
        np.add.at(weights, codes[2 * n_edges :], np.nan_to_num(per_exec, nan=0.0))
    # dependsOn runs task -> dependency; the path runs dependency -> task.
    path = longest_path(
        tasks, weights, codes[n_edges : 2 * n_edges], codes[:n_edges], method=method
    )
    return tasks, weights, path


def resolve_run(store: Store, run: str | None) -> tuple[str, str]:
    """(run id, graph IRI) of the run meant by ``run`` (an id or a run directory name).

    Raises:
        QueryError: no such run, or no run given while the store holds several.
    """
    runs = store.runs()
    if not len(runs):
        raise QueryError("the store holds no run", hint="load one first: metaprov load RUN")
    names = runs["name"].astype(object).where(runs["name"].notna(), "")
    if run is None:
        if len(runs) > 1:
            shown = ", ".join(f"{r} ({n})" for r, n in zip(runs["run_id"], names, strict=True))
            raise QueryError(
                "the store holds several runs: say which one",
                hint=f"give --param run_id=ID; runs: {shown}",
            )
        hit = runs
    else:
        hit = runs[runs["run_id"].astype(str) == run]
        if not len(hit):
            hit = runs[names.astype(str) == run]
    if len(hit) > 1:
        raise QueryError(
            f"several runs are named {run!r}", hint=f"give the run id: {', '.join(hit['run_id'])}"
        )
    if not len(hit):
        raise QueryError(f"no run {run!r} in the store", hint=f"runs: {', '.join(runs['run_id'])}")
    return str(hit["run_id"].iloc[0]), str(hit["graph"].iloc[0])


def critical_path_from_store(
    store: Store, run: str | None = None, *, method: str = "auto"
) -> pd.DataFrame:
    """The critical path of a run held in a store (same result as :func:`critical_path`).

    When the store recorded the path at load time (the embedded store does), only the path's
    details are read. Otherwise the DAG and the durations are read with three index scans (slow
    for huge runs: every task IRI is decoded) and the path is computed here; the details (keys,
    prefixes, workers, times) are then looked up for the tasks on the path only.

    Args:
        store: an open store.
        run: run id or directory name; may be omitted when the store holds one run.
        method: see :func:`longest_path`.

    Returns:
        See :func:`critical_path`; a ``run_id`` column comes first.
    """
    from metaprov.store.sparql import make_term

    run_id, graph = resolve_run(store, run)
    g = make_term(graph, "iri", name="graph")
    cached = store.cached_critical_path(graph)
    if cached is not None:
        tasks = np.asarray(cached["tasks"], dtype=object)
        weights = np.asarray(cached["weights"], dtype="float64")
        path = list(range(len(tasks)))
        info = _details(store, g, tasks[path])
        if info["key"].isna().any():  # the graph changed since the path was recorded
            cached = None
    if cached is None:
        tasks, weights, path = _path_from_store(store, g, method)
        info = _details(store, g, tasks[path]) if path else None
    out = path_frame(np.asarray(tasks, dtype=object), path, weights, info)
    out.insert(0, "run_id", run_id)
    out.attrs["total_seconds"] = float(out["cumulative"].iloc[-1]) if len(out) else 0.0
    return out


__all__ = ["QUESTION", "critical_path_from_store", "resolve_run"]
