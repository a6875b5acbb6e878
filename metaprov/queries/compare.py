"""The timeline of a run held in a store, for ``metaprov compare --store`` / ``--endpoint``.

Input: an open :class:`~metaprov.store.Store` and a run id (or run name). Output: the same
:class:`~metaprov.analysis.timeline.Timeline` that
:func:`~metaprov.analysis.timeline.timeline_from_records` makes from the run's directory, read
with a few SPARQL scans of the run's named graph (executions, dependencies, transfers, workers,
graph submissions, linked I/O): a comparison from a store gives the same numbers as from the run
directories (a test checks it on real runs). The decomposition itself lives in
:mod:`metaprov.analysis.compare`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from metaprov.analysis.timeline import Timeline
from metaprov.queries.critical_path import resolve_run
from metaprov.timeutil import NAT_US

if TYPE_CHECKING:
    from metaprov.store import Store

_P = """PREFIX mp: <https://w3id.org/metaprov/ns#>
PREFIX prov: <http://www.w3.org/ns/prov#>
"""

_EXECUTIONS = (
    _P
    + """SELECT ?key ?prefix ?attempt ?start ?end ?outcome ?source ?thread ?worker ?agent_worker
WHERE { GRAPH %(g)s {
  ?e a mp:TaskExecution ; mp:task ?task .
  ?task mp:key ?key .
  OPTIONAL { ?e mp:attempt ?attempt }
  OPTIONAL { ?e prov:startedAtTime ?start }
  OPTIONAL { ?e prov:endedAtTime ?end }
  OPTIONAL { ?e mp:outcome ?outcome }
  OPTIONAL { ?e mp:timeSource ?source }
  OPTIONAL { ?e mp:prefix/mp:name ?prefix }
  OPTIONAL { ?e prov:wasAssociatedWith ?agent .
    OPTIONAL { ?agent mp:threadId ?thread ;
               prov:actedOnBehalfOf/prov:actedOnBehalfOf/mp:address ?worker }
    OPTIONAL { ?agent mp:address ?agent_worker }
  }
} }"""
)
_DEPENDENCIES = (
    _P
    + """SELECT ?key ?dependency WHERE { GRAPH %(g)s {
  ?t mp:dependsOn ?d . ?t mp:key ?key . ?d mp:key ?dependency } }"""
)
_TRANSFERS = (
    _P
    + """SELECT ?key ?destination ?start ?stop ?nbytes WHERE { GRAPH %(g)s {
  ?rep a mp:ChunkReplica ; prov:wasGeneratedBy ?tr ; mp:task ?task .
  ?task mp:key ?key .
  OPTIONAL { ?rep mp:nbytes ?nbytes }
  OPTIONAL { ?tr prov:startedAtTime ?start }
  OPTIONAL { ?tr prov:endedAtTime ?stop }
  OPTIONAL { ?tr mp:destination/mp:address ?destination }
} }"""
)
_WORKERS = (
    _P
    + """SELECT ?address ?threads ?added ?removed WHERE { GRAPH %(g)s {
  ?w a mp:Worker ; mp:address ?address .
  OPTIONAL { ?w mp:nthreads ?threads }
  OPTIONAL { ?w mp:addedAt ?added }
  OPTIONAL { ?w mp:removedAt ?removed }
} }"""
)
_SUBMITTED = (
    _P
    + """SELECT ?key (MIN(?time) AS ?at) WHERE { GRAPH %(g)s {
  ?t mp:inGraph ?tg ; mp:key ?key . ?tg prov:qualifiedGeneration/prov:atTime ?time
} } GROUP BY ?key"""
)
_SPAN = (
    _P
    + """SELECT ?start ?end ?name WHERE { GRAPH %(g)s {
  ?run a mp:Run . OPTIONAL { ?run prov:startedAtTime ?start } OPTIONAL { ?run prov:endedAtTime ?end }
  OPTIONAL { ?run mp:runName ?name }
} }"""
)
_SOFTWARE = (
    _P
    + """SELECT ?environment ?cls ?manager ?name ?version WHERE { GRAPH %(g)s {
  ?run a mp:Run ; prov:used ?env . ?env a mp:SoftwareEnvironment ; mp:environmentId ?environment ;
       mp:package ?p . ?p mp:packageManager ?manager ; mp:packageName ?name ;
       mp:packageVersion ?version .
  OPTIONAL { ?agent mp:environment ?env ; a ?cls .
             FILTER (?cls IN (mp:Client, mp:Scheduler, mp:WorkerProcess)) }
} }"""
)
_READS = (
    _P
    + """SELECT ?key ?attempt ?path ?bytes ?seconds WHERE { GRAPH %(g)s {
  ?e prov:qualifiedUsage ?u ; mp:task ?task .
  ?u a mp:IOUsage ; mp:linkStatus "linked" ; prov:entity ?f .
  ?task mp:key ?key . ?f mp:path ?path .
  OPTIONAL { ?e mp:attempt ?attempt }
  OPTIONAL { ?u mp:bytesRead ?bytes }
  OPTIONAL { ?u mp:ioTime ?seconds }
} }"""
)
_WRITES = (
    _P
    + """SELECT ?key ?attempt ?path ?bytes ?seconds WHERE { GRAPH %(g)s {
  ?gen a mp:IOGeneration ; mp:linkStatus "linked" ; prov:activity ?e .
  ?v prov:qualifiedGeneration ?gen ; mp:file ?f .
  ?e mp:task ?task . ?task mp:key ?key . ?f mp:path ?path .
  OPTIONAL { ?e mp:attempt ?attempt }
  OPTIONAL { ?gen mp:bytesWritten ?bytes }
  OPTIONAL { ?gen mp:ioTime ?seconds }
} }"""
)


def _us(col: pd.Series) -> np.ndarray:
    """xsd:dateTime lexical forms -> int64 µs (empty -> NAT_US)."""
    t = pd.to_datetime(col.where(col != "", None), utc=True, format="ISO8601")
    return t.astype("datetime64[us, UTC]").to_numpy(dtype="datetime64[us]").view("int64")


def _int(col: pd.Series, default: int = 0) -> np.ndarray:
    return (
        pd.to_numeric(col.where(col != "", None), errors="coerce")
        .fillna(default)
        .to_numpy(dtype="int64")
    )


def _get(df: pd.DataFrame, col: str, n: int) -> pd.Series:
    return df[col] if col in df else pd.Series([""] * n, dtype=object)


def timeline_from_store(store: Store, run: str) -> Timeline:
    """The :class:`Timeline` of ``run`` (its id or run name) as the store holds it.

    Raises:
        QueryError: no such run in the store (or several of that name).
    """
    from metaprov.analysis.timeline import EXECUTION_COLUMNS, IO_COLUMNS, _host
    from metaprov.store.sparql import make_term

    run_id, graph = resolve_run(store, run)
    g = make_term(graph, "iri", name="graph")

    def ask(q: str) -> pd.DataFrame:
        return store.select_strings(q % {"g": g})

    notes: list[str] = []
    span = ask(_SPAN)
    name = (
        str(span["name"].iloc[0])
        if len(span) and "name" in span and span["name"].iloc[0]
        else run_id
    )
    s_us = int(_us(span["start"])[0]) if len(span) and span["start"].iloc[0] else NAT_US
    e_us = int(_us(span["end"])[0]) if len(span) and span["end"].iloc[0] else NAT_US

    ex = ask(_EXECUTIONS)
    n = len(ex)
    if n:
        worker = _get(ex, "worker", n).where(
            _get(ex, "worker", n) != "", _get(ex, "agent_worker", n)
        )
        thread = pd.to_numeric(_get(ex, "thread", n).where(_get(ex, "thread", n) != "", None))
        prefix = _get(ex, "prefix", n).where(_get(ex, "prefix", n) != "", "?")
        executions = pd.DataFrame(
            {
                "key": ex["key"].to_numpy(dtype=object),
                "prefix": prefix.to_numpy(dtype=object),
                "attempt": _int(_get(ex, "attempt", n)),
                "worker": worker.to_numpy(dtype=object),
                "thread": pd.array(
                    [None if v != v else int(v) for v in thread.to_numpy(dtype=object)],
                    dtype="UInt64",
                )
                if thread.notna().any()
                else pd.array([None] * n, dtype="UInt64"),
                "start": _us(_get(ex, "start", n)),
                "end": _us(_get(ex, "end", n)),
                "ok": (_get(ex, "outcome", n) == "memory").to_numpy(),
            }
        )
        has_transitions = bool((_get(ex, "source", n) == "worker").any())
    else:
        executions = pd.DataFrame({c: pd.Series(dtype=object) for c in EXECUTION_COLUMNS})
        has_transitions = False
    # the same order as the records' executions (key, attempt, start): ties of the sweep
    executions = executions.sort_values(["key", "attempt", "start"], kind="stable").reset_index(
        drop=True
    )
    dep = ask(_DEPENDENCIES)
    dependencies = (
        pd.DataFrame({"key": dep["key"].to_numpy(), "dependency": dep["dependency"].to_numpy()})
        if len(dep)
        else pd.DataFrame({"key": pd.Series(dtype=object), "dependency": pd.Series(dtype=object)})
    ).drop_duplicates(ignore_index=True)
    tr = ask(_TRANSFERS)
    m = len(tr)
    dest = _get(tr, "destination", m)
    transfers = pd.DataFrame(
        {
            "key": _get(tr, "key", m).to_numpy(dtype=object),
            "source": pd.Series([None] * m, dtype=object),
            "destination": dest.where(dest != "", None).to_numpy(dtype=object),
            "start": _us(_get(tr, "start", m)),
            "stop": _us(_get(tr, "stop", m)),
            "nbytes": _int(_get(tr, "nbytes", m)),
        }
    )
    w = ask(_WORKERS)
    k = len(w)
    addr = _get(w, "address", k)
    workers = pd.DataFrame(
        {
            "address": addr.to_numpy(dtype=object),
            "host": _host(addr).to_numpy(),
            "threads": pd.array(
                pd.to_numeric(_get(w, "threads", k).where(_get(w, "threads", k) != "", None)),
                dtype="Int64",
            ),
            "added": _us(_get(w, "added", k)),
            "removed": _us(_get(w, "removed", k)),
        }
    ).drop_duplicates("address")
    sub = ask(_SUBMITTED)
    submitted = (
        pd.Series(_us(sub["at"]), index=sub["key"].to_numpy())
        if len(sub)
        else pd.Series([], dtype="int64")
    )
    submitted = submitted[submitted != NAT_US]
    parts = []
    for q, op in ((_READS, "read"), (_WRITES, "write")):
        a = ask(q)
        if len(a):
            j = len(a)
            parts.append(
                pd.DataFrame(
                    {
                        "key": a["key"].to_numpy(dtype=object),
                        "attempt": _int(_get(a, "attempt", j)),
                        "path": a["path"].to_numpy(dtype=object),
                        "op": op,
                        "bytes": _int(_get(a, "bytes", j)),
                        "seconds": pd.to_numeric(_get(a, "seconds", j), errors="coerce")
                        .fillna(0.0)
                        .to_numpy(dtype="float64"),
                    }
                )
            )
    io = (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame({c: pd.Series(dtype=object) for c in IO_COLUMNS})
    )
    if not has_transitions:
        notes.append(
            "no worker transitions: task times are the scheduler's begins/ends and readiness is "
            "not known, so waiting cannot be told from compute"
        )
    if n and executions["thread"].isna().all():
        notes.append(
            "no thread ids: per-thread lanes are unknown; capacity comes from the workers' "
            "thread counts or, without them, the most tasks seen running at once"
        )
    sw = ask(_SOFTWARE)
    software = None
    if len(sw):
        role = {"Client": "client", "Scheduler": "scheduler", "WorkerProcess": "worker"}
        cls = _get(sw, "cls", len(sw)).astype(str).str.rsplit("#", n=1).str[-1]
        software = (
            pd.DataFrame(
                {
                    "process": sw["environment"].astype(str),  # one row per environment
                    "role": cls.map(role).fillna("").to_numpy(),
                    "manager": sw["manager"].astype(str),
                    "name": sw["name"].astype(str),
                    "version": sw["version"].astype(str),
                }
            )
            .drop_duplicates()
            .reset_index(drop=True)
        )
    return Timeline(
        label=name,
        run_id=run_id,
        start=s_us,
        end=e_us,
        executions=executions,
        dependencies=dependencies,
        transfers=transfers,
        workers=workers,
        submitted=submitted,
        io=io,
        has_io=len(io) > 0,
        has_transitions=has_transitions,
        notes=notes,
        software=software,
    )


__all__ = ["timeline_from_store"]
