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

from metaprov.analysis.timeline import Timeline, dispatch_and_losses
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


_SCHEDULER_TRANSITIONS = (
    _P
    + """SELECT ?key ?from ?to ?time ?stimulus WHERE { GRAPH %(g)s {
  ?t a mp:Transition ; mp:observer "scheduler" ; mp:task/mp:key ?key ;
     mp:fromState ?from ; mp:toState ?to ; prov:atTime ?time .
  OPTIONAL { ?t mp:stimulusId ?stimulus }
  FILTER (?to = "processing" || ?from IN ("memory", "processing"))
} }"""
)
_ACTIVITY = (
    _P
    + """SELECT ?worker ?prefix ?context ?activity ?unit ?value WHERE { GRAPH %(g)s {
  ?a a mp:ActivityShare ; mp:measuredOn/mp:address ?worker ; mp:metricContext ?context ;
     mp:activityName ?activity ; mp:metricUnit ?unit ; mp:metricValue ?value .
  OPTIONAL { ?a mp:prefixName ?prefix }
} }"""
)
_MEMORY = (
    _P
    + """SELECT ?worker ?time ?managed ?unmanaged ?spilled ?paused WHERE { GRAPH %(g)s {
  ?m a mp:MemorySample ; mp:measuredOn/mp:address ?worker ; prov:generatedAtTime ?time .
  OPTIONAL { ?m mp:managedBytes ?managed } OPTIONAL { ?m mp:unmanagedBytes ?unmanaged }
  OPTIONAL { ?m mp:spilledBytes ?spilled } OPTIONAL { ?m mp:paused ?paused }
} }"""
)
_COUNT_SCHEDULER = (
    _P
    + """SELECT (COUNT(?t) AS ?n) WHERE { GRAPH %(g)s {
  ?t a mp:Transition ; mp:observer "scheduler" } }"""
)
# the first one (an ordered scan: MIN over xsd:dateTime is not answered by every store)
_FIRST_SCHEDULER = (
    _P
    + """SELECT ?first WHERE { GRAPH %(g)s {
  ?t a mp:Transition ; mp:observer "scheduler" ; prov:atTime ?first } } ORDER BY ?first LIMIT 1"""
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
    """The :class:`Timeline` of ``run`` (its id or run name) as the store holds it: one scan of
    the run's graph per table.

    Raises:
        QueryError: no such run in the store (or several of that name).
    """
    from metaprov.store.sparql import make_term

    run_id, graph = resolve_run(store, run)
    g = make_term(graph, "iri", name="graph")

    def ask(q: str) -> pd.DataFrame:
        return store.select_strings(q % {"g": g})

    name, start, end = _span(ask(_SPAN), run_id)
    executions, has_transitions = _executions(ask(_EXECUTIONS))
    io = _io(ask(_READS), ask(_WRITES))
    dispatched, lost, n_sched, first_sched = _dispatch(
        ask(_SCHEDULER_TRANSITIONS), ask(_COUNT_SCHEDULER), ask(_FIRST_SCHEDULER)
    )
    notes = _notes(executions, has_transitions)
    if has_transitions and not n_sched:
        notes.append(
            "the store holds no scheduler transitions (load the run with --detail transitions): "
            "when the scheduler handed each task out is not known, so its delays count as waiting"
        )
    return Timeline(
        label=name,
        run_id=run_id,
        start=start,
        end=end,
        executions=executions,
        dependencies=_dependencies(ask(_DEPENDENCIES)),
        transfers=_transfers(ask(_TRANSFERS)),
        workers=_workers(ask(_WORKERS)),
        submitted=_submitted(ask(_SUBMITTED)),
        io=io,
        has_io=len(io) > 0,
        has_transitions=has_transitions,
        notes=notes,
        software=_software(ask(_SOFTWARE)),
        dispatched=dispatched,
        lost=lost,
        activity=_activity(ask(_ACTIVITY)),
        memory=_memory(ask(_MEMORY)),
        scheduler_transitions=n_sched,
        scheduler_first=first_sched,
    )


def _activity(a: pd.DataFrame) -> pd.DataFrame | None:
    """The activity shares (sums per worker, context, prefix, activity, unit), if any."""
    if not len(a):
        return None
    n = len(a)
    out = pd.DataFrame(
        {
            "worker": a["worker"].astype(object).to_numpy(),
            "prefix": _get(a, "prefix", n).astype(object).where(lambda x: x != "", None).to_numpy(),
            "context": a["context"].astype(object).to_numpy(),
            "activity": a["activity"].astype(object).to_numpy(),
            "unit": a["unit"].astype(object).to_numpy(),
            "value": pd.to_numeric(a["value"], errors="coerce").fillna(0.0).to_numpy(),
        }
    )
    # one order whatever the store's (sums then add in the same order as from the records)
    return out.sort_values(["worker", "context", "activity", "unit"], kind="stable").reset_index(
        drop=True
    )


def _memory(m: pd.DataFrame) -> pd.DataFrame | None:
    if not len(m):
        return None
    n = len(m)
    out = pd.DataFrame({"worker": m["worker"].astype(object).to_numpy(), "time": _us(m["time"])})
    for c in ("managed", "unmanaged", "spilled"):
        out[c] = _int(_get(m, c, n))
    out["paused"] = (_get(m, "paused", n).astype(str) == "true").to_numpy()
    return out.sort_values(["worker", "time"], kind="stable").reset_index(drop=True)


def _dispatch(
    tr: pd.DataFrame, count: pd.DataFrame, first: pd.DataFrame
) -> tuple[pd.Series, pd.Series, int, int]:
    """When the scheduler handed each task out, the tasks it took back from a lost worker, how
    many transitions it made and when it made its first (from the mp:Transition events of a run
    loaded with ``--detail transitions``; empty otherwise)."""
    has = len(count) > 0 and "n" in count
    n = int(_int(count["n"])[0]) if has else 0
    at = _get(first, "first", len(first))
    first_us = int(_us(at)[0]) if len(at) and at.iloc[0] else NAT_US
    if not len(tr):
        return pd.Series(dtype="int64"), pd.Series(dtype="int64"), n, first_us
    frame = pd.DataFrame(
        {
            "key": tr["key"].astype(object).to_numpy(),
            "observer": "scheduler",
            "from_state": tr["from"].astype(object).to_numpy(),
            "to_state": tr["to"].astype(object).to_numpy(),
            "stimulus_id": _get(tr, "stimulus", len(tr)).astype(object).to_numpy(),
            "time": _us(tr["time"]),
        }
    )
    dispatched, lost, _, _ = dispatch_and_losses(frame)
    return dispatched, lost, n, first_us


def _span(span: pd.DataFrame, run_id: str) -> tuple[str, int, int]:
    """The run's name (its id when it has none), start and end (µs; NAT_US when unknown)."""
    has = len(span) > 0
    name = str(span["name"].iloc[0]) if has and "name" in span and span["name"].iloc[0] else run_id
    start = int(_us(span["start"])[0]) if has and span["start"].iloc[0] else NAT_US
    end = int(_us(span["end"])[0]) if has and span["end"].iloc[0] else NAT_US
    return name, start, end


def _executions(ex: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """The execution attempts, in the records' order (key, attempt, start: ties of the sweep),
    and whether the workers' transitions timed them."""
    from metaprov.analysis.timeline import EXECUTION_COLUMNS

    n = len(ex)
    if not n:
        empty = pd.DataFrame({c: pd.Series(dtype=object) for c in EXECUTION_COLUMNS})
        return empty, False
    worker = _get(ex, "worker", n)
    worker = worker.where(worker != "", _get(ex, "agent_worker", n))
    prefix = _get(ex, "prefix", n)
    executions = pd.DataFrame(
        {
            "key": ex["key"].to_numpy(dtype=object),
            "prefix": prefix.where(prefix != "", "?").to_numpy(dtype=object),
            "attempt": _int(_get(ex, "attempt", n)),
            "worker": worker.to_numpy(dtype=object),
            "thread": _threads(_get(ex, "thread", n)),
            "start": _us(_get(ex, "start", n)),
            "end": _us(_get(ex, "end", n)),
            "ok": (_get(ex, "outcome", n) == "memory").to_numpy(),
        }
    )
    executions = executions.sort_values(["key", "attempt", "start"], kind="stable")
    return executions.reset_index(drop=True), bool((_get(ex, "source", n) == "worker").any())


def _threads(col: pd.Series) -> pd.arrays.IntegerArray:
    """Thread ids (unsigned 64-bit; empty -> missing)."""
    thread = pd.to_numeric(col.where(col != "", None))
    if not thread.notna().any():
        return pd.array([None] * len(col), dtype="UInt64")
    return pd.array(
        [None if v != v else int(v) for v in thread.to_numpy(dtype=object)], dtype="UInt64"
    )


def _dependencies(dep: pd.DataFrame) -> pd.DataFrame:
    if not len(dep):
        return pd.DataFrame({"key": pd.Series(dtype=object), "dependency": pd.Series(dtype=object)})
    return pd.DataFrame(
        {"key": dep["key"].to_numpy(), "dependency": dep["dependency"].to_numpy()}
    ).drop_duplicates(ignore_index=True)


def _transfers(tr: pd.DataFrame) -> pd.DataFrame:
    m = len(tr)
    dest = _get(tr, "destination", m)
    return pd.DataFrame(
        {
            "key": _get(tr, "key", m).to_numpy(dtype=object),
            "source": pd.Series([None] * m, dtype=object),
            "destination": dest.where(dest != "", None).to_numpy(dtype=object),
            "start": _us(_get(tr, "start", m)),
            "stop": _us(_get(tr, "stop", m)),
            "nbytes": _int(_get(tr, "nbytes", m)),
        }
    )


def _workers(w: pd.DataFrame) -> pd.DataFrame:
    from metaprov.analysis.timeline import _host

    k = len(w)
    addr = _get(w, "address", k)
    threads = _get(w, "threads", k)
    return pd.DataFrame(
        {
            "address": addr.to_numpy(dtype=object),
            "host": _host(addr).to_numpy(),
            "threads": pd.array(pd.to_numeric(threads.where(threads != "", None)), dtype="Int64"),
            "added": _us(_get(w, "added", k)),
            "removed": _us(_get(w, "removed", k)),
        }
    ).drop_duplicates("address")


def _submitted(sub: pd.DataFrame) -> pd.Series:
    """When each key's graph was submitted (µs), for the keys with a time."""
    if not len(sub):
        return pd.Series([], dtype="int64")
    submitted = pd.Series(_us(sub["at"]), index=sub["key"].to_numpy())
    return submitted[submitted != NAT_US]


def _io(reads: pd.DataFrame, writes: pd.DataFrame) -> pd.DataFrame:
    """The linked Darshan I/O per execution attempt and file: reads, then writes."""
    from metaprov.analysis.timeline import IO_COLUMNS

    parts = []
    for a, op in ((reads, "read"), (writes, "write")):
        if not len(a):
            continue
        j = len(a)
        seconds = pd.to_numeric(_get(a, "seconds", j), errors="coerce").fillna(0.0)
        parts.append(
            pd.DataFrame(
                {
                    "key": a["key"].to_numpy(dtype=object),
                    "attempt": _int(_get(a, "attempt", j)),
                    "path": a["path"].to_numpy(dtype=object),
                    "op": op,
                    "bytes": _int(_get(a, "bytes", j)),
                    "seconds": seconds.to_numpy(dtype="float64"),
                }
            )
        )
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in IO_COLUMNS})
    return pd.concat(parts, ignore_index=True)


def _notes(executions: pd.DataFrame, has_transitions: bool) -> list[str]:
    notes: list[str] = []
    if not has_transitions:
        notes.append(
            "no worker transitions: task times are the scheduler's begins/ends and readiness is "
            "not known, so waiting cannot be told from compute"
        )
    if len(executions) and executions["thread"].isna().all():
        notes.append(
            "no thread ids: per-thread lanes are unknown; capacity comes from the workers' "
            "thread counts or, without them, the most tasks seen running at once"
        )
    return notes


def _software(sw: pd.DataFrame) -> pd.DataFrame | None:
    """The software of the run's processes (one row per environment and package), if recorded."""
    if not len(sw):
        return None
    role = {"Client": "client", "Scheduler": "scheduler", "WorkerProcess": "worker"}
    cls = _get(sw, "cls", len(sw)).astype(str).str.rsplit("#", n=1).str[-1]
    return (
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


__all__ = ["timeline_from_store"]
