"""What each task was, as PROV: functions, literal arguments, results, exceptions, call sites.

Input: the task-fact tables of :class:`~metaprov.records.RunRecords` (``results``,
``functions``, ``submissions``, ``arguments``, ``fused_ops``; all empty for runs recorded
without them, which then map exactly as before). Output:

- on nodes other steps describe (columns those steps ask for through :func:`fact_columns`):
  an erred mp:TaskExecution's ``mp:exceptionType`` / ``mp:exceptionMessage`` / ``mp:traceback``
  and ``prov:used`` of its task's literal arguments; a mp:DataChunk's ``mp:valueType``; the
  ``mp:implementation`` of a mp:TaskPrefix (the plan), a mp:TaskGroup and, where the tasks of a
  group run different functions, a mp:Task; a group's fused operations; a mp:TaskGraph's
  ``prov:qualifiedGeneration``;
- own nodes (:func:`add_facts`): mp:Function (module, qualified name, kind), mp:Argument
  (a prov:Entity: position, type, size, ``prov:value`` or why not), mp:FusedOperation (name,
  function, inputs), and per submitted graph a prov:Generation ``prov:atLocation`` a mp:CallSite
  (file, line, notebook cell).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.block import Block, lit_int, lit_str
from metaprov.mapping.terms import MP, PROV, RDF, XSD, FactIris

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

#: (predicate, values, kind, datatype): a column for :meth:`Block.add`.
Column = tuple[str, Any, str, "str | None"]
LARGE = pa.large_string()


def _has_facts(ctx: MapContext) -> bool:
    r = ctx.records
    return any(
        len(getattr(r, t, ()))
        for t in ("results", "functions", "submissions", "arguments", "fused_ops")
    )


def _function_iris(ctx: MapContext, df: pd.DataFrame) -> pa.Array:
    f = FactIris(ctx.iris)
    return f.functions(
        df["kind"].fillna("unknown").astype(str),
        df["module"].fillna("").astype(str),
        df["qualname"].fillna("").astype(str),
    )


def _named(df: pd.DataFrame) -> pd.DataFrame:
    """Rows naming a callable (tasks holding plain data or an alias run none)."""
    return df[df["qualname"].fillna("").astype(str) != ""]


def _lists(rows: np.ndarray, values: pa.Array, n: int) -> pa.Array:
    """A list column of ``n`` rows: distinct ``values`` per row, sorted (deterministic)."""
    from metaprov.mapping.tables import list_column

    df = pd.DataFrame({"row": rows, "v": values.to_pandas()}).drop_duplicates()
    df = df.sort_values(["row", "v"], kind="stable")
    counts = np.bincount(df["row"].to_numpy(dtype=np.int64), minlength=n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return list_column(offsets, pa.array(df["v"].to_numpy(dtype=object), LARGE))


def _positions(names: pd.Series, wanted: Any) -> np.ndarray:
    """Position of each ``wanted`` value in ``names`` (-1: absent)."""
    return pd.Index(names.astype(str)).get_indexer(pd.Series(wanted).astype(str))


def fact_columns(ctx: MapContext, what: str, part: Any) -> Iterator[Column]:
    """Extra columns for a block another step builds (nothing for runs without task facts).

    Args:
        ctx: the export's context.
        what: ``execution`` (``part``: sorted executions with ``row``/``attempt``), ``chunk``
            (task rows), ``task`` (task rows), ``prefix`` / ``group`` (names), ``graph``
            (graph indices).
        part: the block's rows, as described.
    """
    if not _has_facts(ctx):
        return
    fn = _COLUMNS.get(what)
    if fn is not None:
        yield from fn(ctx, part)


def add_fact_columns(ctx: MapContext, blk: Block, what: str, part: Any) -> None:
    """Add :func:`fact_columns` to a block (the one line other steps call)."""
    for pred, values, kind, datatype in fact_columns(ctx, what, part):
        blk.add(pred, values, kind, datatype)


def _execution_columns(ctx: MapContext, part: pd.DataFrame) -> Iterator[Column]:
    from metaprov.mapping.tables import task_index

    idx = task_index(ctx)
    n = len(part)
    res = ctx.records.results
    if len(res):
        err = res[res["outcome"].eq("error").fillna(False)]
        if len(err):
            mine = pd.DataFrame(
                {
                    "key": idx.keys.take(pa.array(part["row"].to_numpy())).to_pandas(),
                    "attempt": part["attempt"].astype("Int64").to_numpy(),
                }
            )
            m = mine.merge(
                err[["key", "attempt", "exception_type", "exception_message", "traceback"]],
                on=["key", "attempt"],
                how="left",
            )
            yield MP.exceptionType, lit_str(m["exception_type"]), "str", None
            yield MP.exceptionMessage, lit_str(m["exception_message"]), "str", None
            yield MP.traceback, lit_str(m["traceback"]), "str", None
    args = ctx.records.arguments
    if len(args):
        a_rows = idx.rows(args["key"])
        ok = a_rows >= 0
        arg_iris = FactIris(ctx.iris).arguments(
            idx.task_iri.take(pa.array(a_rows[ok])), args["position"][ok]
        )
        # every attempt of a task uses its task's literal arguments
        by_row = pd.DataFrame({"row": a_rows[ok], "i": np.arange(int(ok.sum()))})
        mine = pd.DataFrame({"row": part["row"].to_numpy(), "pos": np.arange(n)})
        m = mine.merge(by_row, on="row", how="inner")
        if len(m):
            yield (
                PROV.used,
                _lists(m["pos"].to_numpy(), arg_iris.take(pa.array(m["i"].to_numpy())), n),
                "iri",
                None,
            )


def _chunk_columns(ctx: MapContext, rows: np.ndarray) -> Iterator[Column]:
    from metaprov.mapping.tables import task_index

    res = ctx.records.results
    ok = res[res["outcome"].eq("memory").fillna(False) & res["type"].notna()]
    if not len(ok):
        return
    last = ok.sort_values(["key", "attempt"], kind="stable").drop_duplicates("key", keep="last")
    keys = task_index(ctx).keys.take(pa.array(rows)).to_pandas()
    typ = last.set_index("key")["type"].reindex(keys.astype(str)).array
    yield MP.valueType, lit_str(pd.Series(typ, dtype="str")), "str", None


def _task_columns(ctx: MapContext, rows: np.ndarray) -> Iterator[Column]:
    from metaprov.mapping.tables import task_index

    fx = _named(ctx.records.functions)
    per_key = fx[fx["key"].notna()]
    if not len(per_key):
        return
    keys = task_index(ctx).keys.take(pa.array(rows)).to_pandas()
    pos = _positions(keys, per_key["key"])
    hit = pos >= 0
    if hit.any():
        iris = _function_iris(ctx, per_key[hit])
        yield MP.implementation, _lists(pos[hit], iris, len(rows)), "iri", None


def _named_columns(ctx: MapContext, names: pd.Series, col: str) -> Iterator[Column]:
    fx = _named(ctx.records.functions)
    if len(fx):
        pos = _positions(names, fx[col])
        hit = pos >= 0
        if hit.any():
            iris = _function_iris(ctx, fx[hit])
            yield MP.implementation, _lists(pos[hit], iris, len(names)), "iri", None
    if col != "group":
        return
    fused = fx[fx["kind"].eq("fused").fillna(False) & fx["key"].isna()]
    if len(fused):
        n_ops = fused.groupby("group")["n_ops"].max()
        yield (
            MP.operationCount,
            lit_int(n_ops.reindex(names.astype(str)).astype("Int64").reset_index(drop=True)),
            "typed",
            XSD.integer,
        )
    ops = ctx.records.fused_ops
    if len(ops):
        pos = _positions(names, ops["group"])
        hit = pos >= 0
        if hit.any():
            f = FactIris(ctx.iris)
            op_iris = f.operations(
                ctx.iris.groups(ops["group"][hit]), ops["position"][hit].astype("int64")
            )
            yield MP.fusedOperation, _lists(pos[hit], op_iris, len(names)), "iri", None


def _graph_times(ctx: MapContext, graphs: pd.Series) -> pd.Series:
    """Submission time of each graph (NaT when unknown), in the order of ``graphs``."""
    g = ctx.records.graphs.dropna(subset=["graph"]).drop_duplicates("graph")
    return g.set_index(g["graph"].astype("int64"))["time"].reindex(graphs.astype("int64"))


def _graph_columns(ctx: MapContext, graphs: pd.Series) -> Iterator[Column]:
    sub = ctx.records.submissions
    if not len(sub):
        return
    have = pd.Index(sub["graph"].astype("int64")).get_indexer(graphs.astype("int64"))
    gen = FactIris(ctx.iris).generations(ctx.iris.task_graphs(graphs))
    # a graph with a submission time has its generation from the graphs step already
    timed = _graph_times(ctx, graphs).notna().to_numpy()
    mask = pa.array((have < 0) | timed)
    yield PROV.qualifiedGeneration, pc.if_else(mask, pa.scalar(None, LARGE), gen), "iri", None


_COLUMNS = {
    "execution": _execution_columns,
    "chunk": _chunk_columns,
    "task": _task_columns,
    "prefix": lambda ctx, names: _named_columns(ctx, names, "prefix"),
    "group": lambda ctx, names: _named_columns(ctx, names, "group"),
    "graph": _graph_columns,
}


# -- own nodes --------------------------------------------------------------------------------


def add_facts(ctx: MapContext) -> Iterator[Block]:
    """mp:Function, mp:Argument, mp:FusedOperation, prov:Generation + mp:CallSite nodes."""
    if not _has_facts(ctx):
        return
    rec = ctx.records
    f = FactIris(ctx.iris)
    # only rows naming a callable: a task of kind data or alias (dask.array and dask.dataframe
    # graphs hold many) runs none, so it has no mp:Function and no mp:implementation
    funcs = pd.concat(
        [
            _named(rec.functions)[["module", "qualname", "kind"]],
            _named(rec.fused_ops)[["module", "qualname", "kind"]],
        ],
        ignore_index=True,
    )
    funcs = funcs.fillna({"module": "", "qualname": "", "kind": "unknown"}).astype(str)
    funcs = funcs.drop_duplicates().sort_values(["kind", "module", "qualname"], kind="stable")
    if len(funcs):
        blk = Block(_function_iris(ctx, funcs))
        blk.add(RDF.type, MP.Function)
        blk.add(MP.functionModule, lit_str(funcs["module"]), "str")
        blk.add(MP.qualifiedName, lit_str(funcs["qualname"]), "str")
        blk.add(MP.callableKind, lit_str(funcs["kind"]), "str")
        blk.add(MP.run, ctx.iris.run)
        yield blk

    ops = rec.fused_ops
    if len(ops):
        group_iris = ctx.iris.groups(ops["group"])
        pos = ops["position"].astype("int64")
        blk = Block(f.operations(group_iris, pos))
        blk.add(RDF.type, MP.FusedOperation)
        blk.add(MP.position, lit_int(pos), "typed", XSD.integer)
        blk.add(MP.name, lit_str(ops["name"]), "str")
        named = ops["qualname"].fillna("").astype(str).ne("").to_numpy()
        blk.add(MP.implementation, pc.if_else(pa.array(named), _function_iris(ctx, ops), None))
        inputs = ops["inputs"].fillna("").astype(str).str.split()
        rows = np.repeat(np.arange(len(ops)), inputs.str.len().to_numpy())
        if len(rows):
            flat = np.concatenate([np.asarray(v, dtype=np.int64) for v in inputs if len(v)])
            blk.add(
                MP.operationInput,
                _lists(rows, f.operations(group_iris.take(pa.array(rows)), flat), len(ops)),
            )
        yield blk

    args = rec.arguments
    if len(args):
        from metaprov.mapping.tables import task_index

        idx = task_index(ctx)
        rows = idx.rows(args["key"])
        ok = rows >= 0
        a = args[ok]
        blk = Block(f.arguments(idx.task_iri.take(pa.array(rows[ok])), a["position"]))
        blk.add(RDF.type, MP.Argument)
        blk.add(MP.task, idx.task_iri.take(pa.array(rows[ok])))
        blk.add(MP.argumentPosition, lit_str(a["position"]), "str")
        blk.add(MP.valueType, lit_str(a["type"]), "str")
        blk.add(MP.valueSize, lit_int(a["size"]), "typed", XSD.integer)
        blk.add(MP.valueStatus, lit_str(a["status"]), "str")
        blk.add(PROV.value, lit_str(a["value"].where(a["status"].eq("ok"))), "str")
        yield blk

    sub = rec.submissions
    if len(sub):
        g_iris = ctx.iris.task_graphs(sub["graph"].astype("int64"))
        times = _graph_times(ctx, sub["graph"]).reset_index(drop=True)
        # a graph with a time has its generation node (type, time) from the graphs step: only
        # the call site is added to it here (no triple twice); one without gets it typed here
        untimed = pa.array(times.isna().to_numpy())
        for mask, restates in ((untimed, False), (pc.invert(untimed), True)):
            if not pc.any(mask).as_py():
                continue
            gen = Block(f.generations(g_iris).filter(mask), restates=restates)
            if not restates:
                gen.add(RDF.type, PROV.Generation)
            gen.add(PROV.atLocation, f.call_sites(g_iris).filter(mask))
            yield gen
        site = Block(f.call_sites(g_iris))
        site.add(RDF.type, MP.CallSite)
        site.add(MP.sourceFile, lit_str(sub["file"]), "str")
        site.add(MP.lineNumber, lit_int(sub["line"]), "typed", XSD.integer)
        site.add(MP.notebookCell, lit_int(sub["cell"]), "typed", XSD.integer)
        site.add(MP.cellSource, lit_str(sub["cell_source"]), "str")
        site.add(MP.sourceSha256, lit_str(sub["sha256"]), "str")
        yield site
