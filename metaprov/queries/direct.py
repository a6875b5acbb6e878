"""Direct forms of packaged questions: the question's SPARQL evaluated as column joins.

Input: the records of the runs (as :func:`metaprov.queries.fromruns.query_runs` reads them) and
the question's parameters. Output: the DataFrame the question's SPARQL text gives on a store
holding those runs, built through the same SPARQL-results reader (so the same dtypes).

Each form is the question's own query, translated by hand into joins (polars) over the very
triples the mapping produces for the predicates it names (:func:`triple_tables`: subjects and
raw values of each predicate, no N-Triples text, no store): the same IRIs and lexical forms,
the same bag semantics of joins, the same arithmetic on doubles. A direct form exists only where
loading the triples into a store takes too long for a large run (at 10^6 tasks the store path
needs minutes for these questions; the direct form seconds). ``tests/integration/
test_query_runs.py`` asks every question both ways on every run it has and compares the bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from metaprov.mapping.terms import MP, PROV, XSD

if TYPE_CHECKING:
    import polars as pl

    from metaprov.records import RunRecords


class DirectUnsupported(Exception):
    """The direct form does not cover these parameters or runs: the store path answers."""


@dataclass(frozen=True)
class Form:
    """A direct form: the predicates (``type:<class>`` for a class) its joins read, and the
    function answering from the runs' :func:`triple_tables` and the parameters."""

    predicates: tuple[str, ...]
    answer: Callable[[list[dict[str, Any]], dict[str, Any]], pd.DataFrame]


#: What :func:`facts` reads (the runs, and what they lack: the notes of ``# needs:``).
FACT_PREDICATES = (
    "type:" + MP.Run,
    "type:" + MP.Thread,
    "type:" + MP.TaskExecution,
    MP.runId,
    MP.runName,
    MP.missingInput,
    PROV.startedAtTime,
)


def facts(tables: list[dict[str, Any]]) -> pd.DataFrame:
    """Per run: ``run_id``, ``name``, ``threads``, ``compute`` and ``missing_inputs`` (the
    facts :func:`metaprov.queries.gaps` asks a store for), sorted by run id."""
    rows = []
    for t in tables:
        runs = t["type:" + MP.Run].join(t[MP.runId], on="s", suffix="_id")
        threads = len(t["type:" + MP.Thread]) > 0
        ex = t["type:" + MP.TaskExecution].select("s")
        compute = len(ex.join(t[PROV.startedAtTime].select("s").unique(), on="s").head(1)) > 0
        for s, rid in zip(runs["s"].to_list(), runs["o_id"].to_list(), strict=True):
            names = t[MP.runName].filter(t[MP.runName]["s"] == s)["o"].to_list()
            missing = t[MP.missingInput].filter(t[MP.missingInput]["s"] == s)["o"].to_list()
            for name in names or [None]:
                rows.append((rid, name, threads, compute, " ".join(missing)))
    rows.sort(key=lambda r: r[0])
    return pd.DataFrame(rows, columns=["run_id", "name", "threads", "compute", "missing_inputs"])

_TYPE = "type:"


def triple_tables(records: RunRecords, wanted: Sequence[str], base: str | None) -> dict[str, Any]:
    """The run's triples of the ``wanted`` predicates (``type:<class>`` for the subjects typed
    with a class) as polars frames of ``s`` and ``o`` (raw values: IRIs without brackets,
    lexical forms), in the mapping's order; plus ``graph``: the run's graph IRI."""
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc

    from metaprov.mapping import to_prov
    from metaprov.mapping.terms import DEFAULT_BASE
    from metaprov.queries.needs import RDF_TYPE

    graph = to_prov(records, base=base or DEFAULT_BASE)
    want = set(wanted)
    parts: dict[str, list[tuple[pa.Array, pa.Array]]] = {w: [] for w in want}
    for block in graph.blocks():
        for col in block.columns:
            name = _TYPE + col.values if col.predicate == RDF_TYPE and isinstance(
                col.values, str
            ) else col.predicate
            if name not in want:
                continue
            s = block.subjects
            vals = col.values
            if isinstance(vals, str):
                vals = pa.repeat(pa.scalar(vals, pa.large_string()), len(s))
            elif col.multi:
                s = s.take(pc.list_parent_indices(vals))
                vals = pc.list_flatten(vals)
            if vals.null_count:
                keep = pc.is_valid(vals)
                s, vals = s.filter(keep), vals.filter(keep)
            parts[name].append((pc.cast(s, pa.large_string()), pc.cast(vals, pa.large_string())))
    out: dict[str, Any] = {"graph": graph.graph_iri}
    for name, chunks in parts.items():
        s = pa.chunked_array([c[0] for c in chunks], pa.large_string())
        o = pa.chunked_array([c[1] for c in chunks], pa.large_string())
        out[name] = pl.from_arrow(pa.table({"s": s, "o": o}))
    return out


def _results(columns: dict[str, tuple[list[Any], str | None]]) -> pd.DataFrame:
    """A frame as the store's SPARQL JSON results reader makes it: per column its values
    (None: unbound) and their datatype (None: a plain string)."""
    from metaprov.store import results_to_frame

    names = list(columns)
    n = len(next(iter(columns.values()))[0]) if columns else 0
    rows: list[dict[str, Any]] = []
    for i in range(n):
        row = {}
        for name in names:
            values, dtype = columns[name]
            v = values[i]
            if v is None:
                continue
            cell = {"type": "literal", "value": v if isinstance(v, str) else _lexical(v)}
            if dtype is not None:
                cell["datatype"] = dtype
            row[name] = cell
        rows.append(row)
    return results_to_frame({"head": {"vars": names}, "results": {"bindings": rows}})


def _lexical(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _runs(tables: list[dict[str, Any]], run_id: Any) -> list[tuple[dict[str, Any], str, float | None]]:
    """(tables, run id, span) of the runs the question covers (``run_id`` narrows them)."""
    out = []
    for t in tables:
        runs = t["type:" + MP.Run].join(t[MP.runId], on="s", suffix="_id")
        for s, rid in zip(runs["s"].to_list(), runs["o_id"].to_list(), strict=True):
            if run_id is not None and str(run_id) != "" and rid != str(run_id):
                continue
            span = t[MP.duration].filter(t[MP.duration]["s"] == s)["o"].to_list()
            out.extend((t, rid, float(x)) for x in span) if span else out.append((t, rid, None))
    return out


def _busy_per_agent(t: dict[str, Any]) -> pl.DataFrame:
    """``agent``, ``n`` (executions) and ``b`` (their summed durations) per executing agent:
    the sub-select the two utilisation questions share (executions typed, associated, timed)."""
    import polars as pl

    ex = t["type:" + MP.TaskExecution].select("s")
    assoc = t[PROV.wasAssociatedWith].rename({"o": "agent"})
    dur = t[MP.duration].rename({"o": "d"}).with_columns(pl.col("d").cast(pl.Float64))
    joined = ex.join(assoc, on="s").join(dur, on="s")
    return joined.group_by("agent", maintain_order=True).agg(
        pl.len().alias("n"), pl.col("d").sum().alias("b")
    )


def _thread_workers(t: dict[str, Any]) -> pl.DataFrame:
    """``agent`` (a thread), ``thread_`` (its id, lexical) and ``w`` (the worker it acted for,
    through its worker process)."""
    threads = t["type:" + MP.Thread].select(agent="s")
    ids = t[MP.threadId].rename({"s": "agent", "o": "thread_"})
    hop = t[PROV.actedOnBehalfOf]
    up = hop.rename({"s": "agent", "o": "p"}).join(hop.rename({"s": "p", "o": "w"}), on="p")
    return threads.join(ids, on="agent").join(up.select("agent", "w"), on="agent")


_UTIL = (MP.Run, MP.TaskExecution, MP.Thread, MP.Worker)
_UTIL_PREDICATES = [
    *(_TYPE + c for c in _UTIL),
    MP.runId,
    MP.duration,
    PROV.wasAssociatedWith,
    MP.threadId,
    PROV.actedOnBehalfOf,
    MP.address,
    MP.nthreads,
]


def thread_utilisation(tables: list[dict[str, Any]], params: dict[str, Any]) -> pd.DataFrame:
    """``thread-utilisation`` (see its .rq file)."""
    import polars as pl

    rows = []
    for t, rid, span in _runs(tables, params.get("run_id")):
        per = _busy_per_agent(t).join(_thread_workers(t), on="agent")
        per = per.join(t[MP.address].rename({"s": "w", "o": "worker"}), on="w")
        if params.get("worker") not in (None, ""):
            per = per.filter(pl.col("worker") == str(params["worker"]))
        for r in per.iter_rows(named=True):
            util = r["b"] / span if span is not None and span > 0 else None
            rows.append((rid, r["worker"], int(r["thread_"]), r["n"], r["b"], span, util))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return _results(
        {
            "run_id": ([r[0] for r in rows], None),
            "worker": ([r[1] for r in rows], None),
            "thread": ([r[2] for r in rows], XSD.integer),
            "executions": ([r[3] for r in rows], XSD.integer),
            "busy": ([r[4] for r in rows], XSD.double),
            "span": ([r[5] for r in rows], XSD.double),
            "utilisation": ([r[6] for r in rows], XSD.double),
        }
    )


def worker_utilisation(tables: list[dict[str, Any]], params: dict[str, Any]) -> pd.DataFrame:
    """``worker-utilisation`` (see its .rq file)."""
    import polars as pl

    rows = []
    for t, rid, span in _runs(tables, params.get("run_id")):
        per = _busy_per_agent(t)
        own = per.join(t["type:" + MP.Worker].select(agent="s"), on="agent").with_columns(
            w=pl.col("agent")
        )
        via = per.join(_thread_workers(t).select("agent", "w"), on="agent")
        both = pl.concat([own.select("w", "n", "b"), via.select("w", "n", "b")])
        sums = {
            w: (n, b)
            for w, n, b in both.group_by("w", maintain_order=True)
            .agg(pl.col("n").sum(), pl.col("b").sum())
            .iter_rows()
        }
        workers = t["type:" + MP.Worker].select(w="s")
        workers = workers.join(t[MP.address].rename({"s": "w", "o": "worker"}), on="w")
        workers = workers.join(
            t[MP.nthreads].rename({"s": "w", "o": "threads"}), on="w", how="left"
        )
        for w, worker, threads in workers.select("w", "worker", "threads").iter_rows():
            n, b = sums.get(w, (None, None))
            nthreads = None if threads is None else int(threads)
            busy = b if b is not None else 0.0
            util = (
                busy / (nthreads * span)
                if nthreads is not None and nthreads > 0 and span is not None and span > 0
                else None
            )
            rows.append(
                (rid, worker, nthreads, n if n is not None else 0, b, span, util)
            )
    rows.sort(key=lambda r: (r[0], r[1]))
    return _results(
        {
            "run_id": ([r[0] for r in rows], None),
            "worker": ([r[1] for r in rows], None),
            "threads": ([r[2] for r in rows], XSD.integer),
            "executions": ([r[3] for r in rows], XSD.integer),
            "busy": ([r[4] if r[4] is not None else 0.0 for r in rows], XSD.double),
            "span": ([r[5] for r in rows], XSD.double),
            "utilisation": ([r[6] for r in rows], XSD.double),
        }
    )


#: Question name -> its direct form.
FORMS: dict[str, Form] = {
    "thread-utilisation": Form(tuple(_UTIL_PREDICATES), thread_utilisation),
    "worker-utilisation": Form(tuple(_UTIL_PREDICATES), worker_utilisation),
}

__all__ = ["FACT_PREDICATES", "FORMS", "DirectUnsupported", "Form", "facts", "triple_tables"]
