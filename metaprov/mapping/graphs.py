"""Plans at client and scheduler level: submitted task graphs, task prefixes and task groups.

Input: ``records.graphs`` and the prefix/group columns of ``records.tasks``. Output: blocks of
mp:TaskGraph (attributed to its client), mp:TaskPrefix and mp:TaskGroup (with its prefix).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.block import Block, lit_double, lit_int, lit_str, lit_time
from metaprov.mapping.facts import add_fact_columns
from metaprov.mapping.terms import MP, PROV, RDF, XSD

LARGE = pa.large_string()

if TYPE_CHECKING:
    from metaprov.mapping import MapContext


def group_table(ctx: MapContext) -> pd.DataFrame:
    """Distinct (group, prefix) pairs of the tasks, one row per group, sorted by group."""

    def make() -> pd.DataFrame:
        t = ctx.records.tasks[["group", "prefix"]].dropna(subset=["group"])
        t = t.drop_duplicates().sort_values(["group", "prefix"], kind="stable", na_position="last")
        return t.drop_duplicates("group").reset_index(drop=True)

    return ctx.cached("groups", make)


def add_graphs(ctx: MapContext) -> Iterator[Block]:
    """Task graphs, prefixes, groups."""
    rec = ctx.records
    iris = ctx.iris

    g = (
        rec.graphs.dropna(subset=["graph"])
        .drop_duplicates("graph")
        .sort_values("graph", kind="stable")
    )
    if len(g):
        g_iri = iris.task_graphs(g["graph"])
        times = lit_time(g["time"])
        gb = Block(g_iri)
        gb.add(RDF.type, MP.TaskGraph)
        gb.add(MP.graphIndex, lit_int(g["graph"]), "typed", XSD.integer)
        gb.add(PROV.wasAttributedTo, iris.clients(g["client"]))
        # its submission time on a qualified generation (decision 23)
        gen = pc.if_else(pc.is_valid(times), iris.generations(g_iri), pa.scalar(None, LARGE))
        gb.add(PROV.qualifiedGeneration, gen)
        gb.add(MP.wantedCount, lit_int(g["n_wanted"]), "typed", XSD.integer)
        gb.add(MP.taskCount, lit_int(g["n_tasks"]), "typed", XSD.integer)
        gb.add(MP.edgeCount, lit_int(g["n_edges"]), "typed", XSD.integer)
        gb.add(MP.run, iris.run)
        add_fact_columns(ctx, gb, "graph", g["graph"])
        yield gb
        # the run's association with the graph's client, following the graph (decision 26)
        sel = g["client"].notna().to_numpy(dtype=bool)
        if sel.any():
            ab = Block(iris.associations(g_iri.filter(pa.array(sel))))
            ab.add(RDF.type, PROV.Association)
            ab.add(PROV.agent, iris.clients(g["client"][sel]))
            ab.add(PROV.hadPlan, g_iri.filter(pa.array(sel)))
            yield ab
        has = pc.is_valid(times)
        if pc.any(has).as_py():
            qb = Block(gen.filter(has))
            qb.add(RDF.type, PROV.Generation)
            qb.add(PROV.atTime, times.filter(has), "typed", XSD.dateTime)
            yield qb

    prefixes = pd.Series(sorted(rec.tasks["prefix"].dropna().astype(str).unique()), dtype=object)
    if len(prefixes):
        # cached: a run mapped in partitions hands in the figures combined over its partitions
        stats = ctx.cached("prefix_stats", lambda: prefix_stats(ctx, prefixes))
        pb = Block(iris.prefixes(prefixes))
        pb.add(RDF.type, MP.TaskPrefix)
        pb.add(MP.name, lit_str(prefixes), "str")
        pb.add(MP.run, iris.run)
        pb.add(MP.executionCount, lit_int(stats["count"]), "typed", XSD.integer)
        pb.add(MP.totalDuration, lit_double(stats["total"]), "typed", XSD.double)
        pb.add(MP.meanDuration, lit_double(stats["mean"]), "typed", XSD.double)
        pb.add(MP.minDuration, lit_double(stats["min"]), "typed", XSD.double)
        pb.add(MP.maxDuration, lit_double(stats["max"]), "typed", XSD.double)
        pb.add(MP.slowestExecution, stats["slowest"])
        io = prefix_io(ctx, prefixes)
        if io is not None:
            for pred, col in (
                (MP.fileReadCount, "file_reads"),
                (MP.bytesRead, "bytes_read"),
                (MP.readCount, "reads"),
                (MP.fileWriteCount, "file_writes"),
                (MP.bytesWritten, "bytes_written"),
                (MP.writeCount, "writes"),
            ):
                pb.add(pred, lit_int(io[col]), "typed", XSD.integer)
        add_fact_columns(ctx, pb, "prefix", prefixes)
        yield pb

    groups = group_table(ctx)
    if len(groups):
        grb = Block(iris.groups(groups["group"]))
        grb.add(RDF.type, MP.TaskGroup)
        grb.add(MP.name, lit_str(groups["group"]), "str")
        grb.add(MP.taskPrefix, iris.prefixes(groups["prefix"]))
        grb.add(MP.run, iris.run)
        add_fact_columns(ctx, grb, "group", groups["group"])
        yield grb


def prefix_stats(ctx: MapContext, prefixes: pd.Series) -> dict[str, object]:
    """Per task prefix (in the order of ``prefixes``): the executions with a known compute time
    (start and end observed), their total, mean, shortest and longest duration in seconds, and
    the IRI of the slowest one (first by key and attempt on a tie).

    The same durations as each execution's mp:duration (end - start in integer microseconds):
    a question over a prefix then reads a handful of triples instead of joining millions.
    Prefixes without such executions get a count of 0 and no other figure.
    """
    from metaprov.mapping.tables import execution_iris, executions_sorted, task_index
    from metaprov.timeutil import NAT_US, utc_to_us

    n = len(prefixes)
    idx = task_index(ctx)
    ex = executions_sorted(ctx, idx)
    start_us, end_us = utc_to_us(ex["start"]), utc_to_us(ex["end"])
    known = (start_us != NAT_US) & (end_us != NAT_US)
    pcode = _task_prefix_codes(ctx, prefixes)[ex["row"].to_numpy()]
    keep = known & (pcode >= 0)
    codes = pcode[keep]
    dur_us = end_us[keep] - start_us[keep]
    dur = dur_us / 1e6
    count = np.bincount(codes, minlength=n)
    # summed in integer microseconds: exact, whatever the order of the executions
    total = np.bincount(codes, weights=dur_us.astype(np.float64), minlength=n) / 1e6
    has = count > 0
    vmin = np.full(n, np.inf)
    vmax = np.full(n, -np.inf)
    np.minimum.at(vmin, codes, dur)
    np.maximum.at(vmax, codes, dur)
    slowest: pa.Array = pa.nulls(n, pa.large_string())
    if has.any():
        # first row (sorted by key, attempt) reaching the maximum of its prefix
        at_max = np.flatnonzero(dur == vmax[codes])
        first_code, first_at = np.unique(codes[at_max], return_index=True)
        slow_row = np.zeros(n, np.int64)
        slow_row[first_code] = np.flatnonzero(keep)[at_max[first_at]]
        iris = execution_iris(ctx.iris, idx, ex.iloc[slow_row])
        slowest = pc.if_else(pa.array(has), iris, pa.scalar(None, iris.type))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(has, total / np.maximum(count, 1), np.nan)
    return {
        "count": pd.array(count, dtype="Int64"),
        "total": np.where(has, total, np.nan),
        "mean": mean,
        "min": np.where(has, vmin, np.nan),
        "max": np.where(has, vmax, np.nan),
        "slowest": slowest,
    }


def prefix_io(ctx: MapContext, prefixes: pd.Series) -> dict[str, pd.Series] | None:
    """Per task prefix (in the order of ``prefixes``): the Darshan I/O of its task executions,
    from the same per (execution, file, operation) aggregates as the mp:IOUsage and
    mp:IOGeneration nodes: (execution, file) pairs read and written, bytes, operations.

    None when the run has no linked I/O; prefixes without I/O get nulls (no triples).
    """
    rec = ctx.records
    if rec.darshan is None or rec.io is None:
        return None
    from metaprov.mapping.fileio import io_tables

    t = ctx.cached("io_tables", lambda: io_tables(ctx))
    if not len(t.procs):
        return None
    agg = t.agg
    act = agg["act"].to_numpy()
    on_task = act < len(t.act_row)
    code = _task_prefix_codes(ctx, prefixes)[t.act_row[act[on_task]]]
    n = len(prefixes)
    ok = code >= 0
    code = code[ok]
    op = agg["op"].to_numpy()[on_task][ok]
    nbytes = agg["bytes"].to_numpy(dtype=np.int64)[on_task][ok]
    count = agg["count"].to_numpy(dtype=np.int64)[on_task][ok]
    out: dict[str, np.ndarray] = {}
    for name, done, is_op in (("read", "read", op == 0), ("write", "written", op == 1)):
        c = code[is_op]
        out[f"file_{name}s"] = np.bincount(c, minlength=n)
        out[f"bytes_{done}"] = _int_sums(c, nbytes[is_op], n)
        out[f"{name}s"] = _int_sums(c, count[is_op], n)
    has = (out["file_reads"] + out["file_writes"]) > 0
    if not has.any():
        return None
    return {k: pd.Series(v, dtype="Int64").where(has) for k, v in out.items()}


def _task_prefix_codes(ctx: MapContext, prefixes: pd.Series) -> np.ndarray:
    """Position in ``prefixes`` of each task row's prefix (-1 when it has none), per task once."""
    from metaprov.mapping.tables import task_index

    def make() -> np.ndarray:
        task_prefix = task_index(ctx).tasks["prefix"].astype(object).to_numpy()
        return pd.Index(prefixes.astype(str)).get_indexer(task_prefix).astype(np.int64)

    return ctx.cached("task_prefix_codes", make)


def _int_sums(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact integer sums of ``values`` per code (np.bincount would go through float64)."""
    sums = np.zeros(n, np.int64)
    np.add.at(sums, codes, values)
    return sums
