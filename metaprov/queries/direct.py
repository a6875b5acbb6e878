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

    from metaprov.mapping import ProvGraph
    from metaprov.records import RunRecords


class DirectUnsupported(Exception):
    """The direct form does not cover these parameters or runs: the store path answers."""


@dataclass(frozen=True)
class Form:
    """A direct form: the predicates (``type:<class>`` for a class) its joins read, and the
    function answering from the runs' :func:`triple_tables` and the parameters."""

    predicates: tuple[str, ...]
    answer: Callable[..., pd.DataFrame]
    #: the function also takes the runs' records (third argument)
    records: bool = False
    #: the mapping steps that write what it reads (None: every step)
    steps: tuple[str, ...] | None = None
    #: it reads what the Darshan I/O link decides (False: a run is answered unlinked, its
    #: link, seconds at 10^6 tasks, left to the questions that read it)
    io: bool = True
    #: told from a run's records: its graph has none of the triples the form's joins start
    #: from (the run is then answered from empty tables, without mapping it)
    empty: Callable[[RunRecords], bool] | None = None


def facts_of_graphs(graphs: Sequence[ProvGraph]) -> pd.DataFrame:
    """Per run: ``run_id``, ``name``, ``threads``, ``compute`` and ``missing_inputs``, the
    facts :func:`metaprov.queries.gaps` asks a store for, from the mapping's own tables (no
    pass over the blocks): the run's id and name as the job step writes them, threads when the agents step
    writes an mp:Thread, compute when an execution the tasks step writes has a start."""
    from pathlib import PurePath

    rows = []
    for graph in graphs:
        rec = graph.records
        ctx = graph.shared_context()
        name = (rec.job or {}).get("name") or PurePath(str(rec.path)).name
        missing = " ".join(sorted(str(m) for m in rec.missing))
        rows.append(
            (
                graph.run_id,
                str(name) if name else None,
                _has_threads(ctx),
                _has_compute(ctx),
                missing,
            )
        )
    rows.sort(key=lambda r: r[0])
    return pd.DataFrame(rows, columns=["run_id", "name", "threads", "compute", "missing_inputs"])


def _has_threads(ctx: Any) -> bool:
    """Whether the agents step writes an mp:Thread: a (worker, thread) pair in the threads
    table or in the executions (:func:`metaprov.mapping.agents.thread_table` is not empty),
    told without building that table when it is not built yet."""
    if "threads" in ctx.cache:
        from metaprov.mapping.agents import thread_table

        return len(thread_table(ctx)) > 0
    rec = ctx.records
    return any(
        bool((t["worker"].notna() & t["thread"].notna()).any())
        for t in (rec.threads, rec.executions)
    )


def _has_compute(ctx: Any) -> bool:
    """Whether an execution the tasks step writes has a start: one with a key and a start when
    the mapping writes every key (the whole run), else through the mapped key rows."""
    from metaprov.mapping.tables import executions_sorted, mapped_rows, maps_every_key, task_index

    ex = ctx.records.executions
    if maps_every_key(ctx):
        return bool((ex["key"].notna() & ex["start"].notna()).any())
    idx = task_index(ctx)
    ex = executions_sorted(ctx, idx)
    keys = mapped_rows(ctx, idx)
    if keys is not None and len(ex):
        ex = ex[keys[ex["row"].to_numpy()]]
    return bool(len(ex)) and bool(ex["start"].notna().any())


_TYPE = "type:"


def no_triples(graph: ProvGraph, wanted: Sequence[str]) -> dict[str, Any]:
    """:func:`triple_tables` of a graph holding none of the ``wanted`` predicates."""
    import polars as pl

    empty = pl.DataFrame({"s": [], "o": []}, schema={"s": pl.String, "o": pl.String})
    return {"graph": graph.graph_iri, **{w: empty for w in wanted}}


def triple_tables(
    graph: ProvGraph, wanted: Sequence[str], steps: Sequence[str] | None = None
) -> dict[str, Any]:
    """The run's triples of the ``wanted`` predicates (``type:<class>`` for the subjects typed
    with a class) as polars frames of ``s`` and ``o`` (raw values: IRIs without brackets,
    lexical forms), in the mapping's order; plus ``graph``: the run's graph IRI. ``steps``:
    only the blocks of these mapping steps (those that write what a form reads)."""
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc

    from metaprov.queries.needs import RDF_TYPE

    want = set(wanted)
    parts: dict[str, list[tuple[pa.Array, pa.Array]]] = {w: [] for w in want}
    for block in graph.blocks(steps=steps):
        for col in block.columns:
            name = (
                _TYPE + col.values
                if col.predicate == RDF_TYPE and isinstance(col.values, str)
                else col.predicate
            )
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


def _runs(
    tables: list[dict[str, Any]], run_id: Any
) -> list[tuple[dict[str, Any], str, float | None]]:
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


def _thread_workers(t: dict[str, Any]) -> pl.DataFrame:
    """``agent`` (a thread), ``thread_`` (its id, lexical) and ``w`` (the worker it acted for,
    through its worker process)."""
    threads = t["type:" + MP.Thread].select(agent="s")
    ids = t[MP.threadId].rename({"s": "agent", "o": "thread_"})
    hop = t[PROV.actedOnBehalfOf]
    up = hop.rename({"s": "agent", "o": "p"}).join(hop.rename({"s": "p", "o": "w"}), on="p")
    return threads.join(ids, on="agent").join(up.select("agent", "w"), on="agent")


_UTIL = (MP.Run, MP.Thread, MP.Worker)
_UTIL_PREDICATES = [
    *(_TYPE + c for c in _UTIL),
    MP.runId,
    MP.duration,
    MP.threadId,
    PROV.actedOnBehalfOf,
    MP.address,
    MP.nthreads,
    MP.busyExecutionCount,
    MP.busySeconds,
]


def thread_utilisation(tables: list[dict[str, Any]], params: dict[str, Any]) -> pd.DataFrame:
    """``thread-utilisation`` (see its .rq file): each thread's busy figures, its worker's
    address, the run's span."""
    import polars as pl

    rows = []
    for t, rid, span in _runs(tables, params.get("run_id")):
        per = _thread_workers(t)
        per = per.join(t[MP.busyExecutionCount].rename({"s": "agent", "o": "n"}), on="agent")
        per = per.join(t[MP.busySeconds].rename({"s": "agent", "o": "b"}), on="agent")
        per = per.join(t[MP.address].rename({"s": "w", "o": "worker"}), on="w")
        if params.get("worker") not in (None, ""):
            per = per.filter(pl.col("worker") == str(params["worker"]))
        for r in per.iter_rows(named=True):
            busy = float(r["b"])
            util = busy / span if span is not None and span > 0 else None
            rows.append((rid, r["worker"], int(r["thread_"]), int(r["n"]), busy, span, util))
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
    """``worker-utilisation`` (see its .rq file): every worker with an address, its threads and
    busy figures (0 when it ran nothing timed), the run's span."""
    rows = []
    for t, rid, span in _runs(tables, params.get("run_id")):
        workers = t["type:" + MP.Worker].select(w="s")
        workers = workers.join(t[MP.address].rename({"s": "w", "o": "worker"}), on="w")
        for name, col in (
            (MP.nthreads, "threads"),
            (MP.busyExecutionCount, "n"),
            (MP.busySeconds, "b"),
        ):
            workers = workers.join(t[name].rename({"s": "w", "o": col}), on="w", how="left")
        for r in workers.iter_rows(named=True):
            nthreads = None if r["threads"] is None else int(r["threads"])
            busy = 0.0 if r["b"] is None else float(r["b"])
            util = (
                busy / (nthreads * span)
                if nthreads is not None and nthreads > 0 and span is not None and span > 0
                else None
            )
            n = 0 if r["n"] is None else int(r["n"])
            rows.append((rid, r["worker"], nthreads, n, busy, span, util))
    rows.sort(key=lambda r: (r[0], r[1]))
    return _results(
        {
            "run_id": ([r[0] for r in rows], None),
            "worker": ([r[1] for r in rows], None),
            "threads": ([r[2] for r in rows], XSD.integer),
            "executions": ([r[3] for r in rows], XSD.integer),
            "busy": ([r[4] for r in rows], XSD.double),
            "span": ([r[5] for r in rows], XSD.double),
            "utilisation": ([r[6] for r in rows], XSD.double),
        }
    )


_FAILURES = (
    "type:" + MP.Run,
    MP.runId,
    MP.exceptionType,
    MP.task,
    MP.key,
    MP.exceptionMessage,
    MP.prefix,
    MP.name,
    MP.implementation,
    MP.taskGroup,
    MP.functionModule,
    MP.qualifiedName,
)


def _no_errors(records: RunRecords) -> bool:
    """Whether the run records no erred attempt with its exception (the capture's results):
    the mapping then writes no mp:exceptionType, the triple ``failures`` starts from."""
    res = records.results
    return not len(res) or not bool(res["outcome"].eq("error").fillna(False).any())


def failures(tables: list[dict[str, Any]], params: dict[str, Any]) -> pd.DataFrame:
    """``failures`` (see its .rq file): the erred executions joined with their task, key,
    message, prefix and function as the query's patterns and OPTIONALs join them."""
    import polars as pl

    def pairs(t: dict[str, Any], predicate: str, s: str, o: str) -> pl.DataFrame:
        return t[predicate].rename({"s": s, "o": o})

    frames = []
    for t in tables:
        runs = t["type:" + MP.Run].join(t[MP.runId], on="s", suffix="_id").select(run_id="o_id")
        if params.get("run_id") not in (None, ""):
            runs = runs.filter(pl.col("run_id") == str(params["run_id"]))
        rows = pairs(t, MP.exceptionType, "execution", "exception_type")
        if params.get("exception_type") not in (None, ""):
            rows = rows.filter(pl.col("exception_type") == str(params["exception_type"]))
        rows = rows.join(pairs(t, MP.task, "execution", "task"), on="execution")
        rows = rows.join(pairs(t, MP.key, "task", "key"), on="task")
        rows = rows.join(
            pairs(t, MP.exceptionMessage, "execution", "message"), on="execution", how="left"
        )
        rows = rows.join(pairs(t, MP.prefix, "execution", "plan"), on="execution", how="left")
        rows = rows.join(pairs(t, MP.name, "plan", "prefix"), on="plan", how="left")
        rows = rows.join(
            pairs(t, MP.implementation, "task", "task_function"), on="task", how="left"
        )
        rows = rows.join(pairs(t, MP.taskGroup, "task", "group"), on="task", how="left")
        rows = rows.join(
            pairs(t, MP.implementation, "group", "group_function"), on="group", how="left"
        )
        rows = rows.with_columns(f=pl.coalesce("task_function", "group_function"))
        rows = rows.join(pairs(t, MP.functionModule, "f", "module"), on="f", how="left")
        rows = rows.join(pairs(t, MP.qualifiedName, "f", "qualname"), on="f", how="left")
        rows = rows.with_columns(
            function=pl.when(pl.col("module").is_not_null() & (pl.col("module") != ""))
            .then(pl.concat_str("module", pl.lit("."), "qualname"))
            .otherwise(pl.col("qualname"))
        )
        frames.append(runs.join(rows, how="cross"))
    if not frames or not sum(len(f) for f in frames):
        return _results({c: ([], None) for c in _FAILURE_COLUMNS})
    grouped = (
        pl.concat(frames)
        .group_by(["run_id", "exception_type", "function", "prefix"])
        .agg(
            attempts=pl.col("execution").n_unique(),
            tasks=pl.col("task").n_unique(),
            example_key=pl.col("key").min(),
            example_message=pl.col("message").min(),
        )
    )
    rows = grouped.sort(
        ["run_id", "attempts", "exception_type", "function", "prefix"],
        descending=[False, True, False, False, False],
        nulls_last=False,
    ).head(_limit(params, 100))
    return _results(
        {
            c: (rows[c].to_list(), XSD.integer if c in ("attempts", "tasks") else None)
            for c in _FAILURE_COLUMNS
        }
    )


_FAILURE_STEPS = ("job", "graphs", "tasks", "facts")

_FAILURE_COLUMNS = (
    "run_id",
    "exception_type",
    "function",
    "prefix",
    "attempts",
    "tasks",
    "example_key",
    "example_message",
)


def _limit(params: dict[str, Any], default: int) -> int:
    value = params.get("limit")
    return default if value is None else int(str(value))


def critical_path(
    tables: list[dict[str, Any]], params: dict[str, Any], records: Sequence[RunRecords]
) -> pd.DataFrame:
    """``critical-path``: the path a store records at load time is computed from the records
    (:func:`metaprov.analysis.critical_path.path_summary`); here the same programme gives the
    path with its details (keys, prefixes, workers, times) from the records too."""
    from metaprov.analysis.critical_path import critical_path as from_records

    run = params.get("run_id")
    if run is None or str(run) == "":
        if len(records) != 1:
            raise DirectUnsupported  # the store path says which runs there are
        chosen = records[0]
    else:
        hits = [r for r in records if r.run_id == str(run)]
        if not hits:
            from pathlib import Path

            hits = [r for r in records if Path(r.path).name == str(run)]
        if len(hits) != 1:
            raise DirectUnsupported
        chosen = hits[0]
    out = from_records(chosen)
    out.insert(0, "run_id", chosen.run_id)
    out.attrs["total_seconds"] = float(out["cumulative"].iloc[-1]) if len(out) else 0.0
    return out


#: Question name -> its direct form.
FORMS: dict[str, Form] = {
    "thread-utilisation": Form(
        tuple(_UTIL_PREDICATES), thread_utilisation, steps=("job", "agents"), io=False
    ),
    "worker-utilisation": Form(
        tuple(_UTIL_PREDICATES), worker_utilisation, steps=("job", "agents"), io=False
    ),
    # the run (job), executions, their tasks and prefixes (tasks), the prefixes' names and the
    # functions (graphs, facts): a test checks these steps give every triple a whole pass gives
    "failures": Form(_FAILURES, failures, steps=_FAILURE_STEPS, io=False, empty=_no_errors),
    "critical-path": Form((), critical_path, records=True, io=False),
}

__all__ = ["FORMS", "DirectUnsupported", "Form", "facts_of_graphs", "no_triples", "triple_tables"]
