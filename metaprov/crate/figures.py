"""Per-run and per-task-prefix figures for a crate: the same numbers the PROV export states.

Input: a :class:`~metaprov.mapping.ProvGraph` (its records and IRIs). Output: a :class:`RunFigures`
with one row per task prefix (counts, first start, last end, durations, results, I/O, files)
and the run's totals. Everything is computed column-wise over the run's tables, once; the crate
holds per-prefix figures only, never one entity per task.

The durations and I/O sums come from the mapping's own per-prefix summaries
(:func:`metaprov.mapping.graphs.prefix_stats` and ``prefix_io``), so a crate's resource usage
equals the mp:TaskPrefix figures in its PROV files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from metaprov.timeutil import NAT_US, utc_to_us

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph

#: Files named per prefix and direction in the crate at most; the full lists are in the PROV files.
MAX_FILES = 50


@dataclass
class RunFigures:
    """What a crate says about one run.

    Attributes:
        prefixes: one row per task prefix (sorted by name): ``prefix``, ``iri``, ``position``
            (topological order of the prefix graph; NA inside a dependency cycle), ``tasks``,
            ``executed``, ``erred``, ``retried``, ``never_ran``, ``results`` (tasks whose result
            was observed), ``result_bytes``, ``first_start_us``/``last_end_us`` (int µs, NAT_US
            when unknown), ``executions``, ``total``/``mean``/``min``/``max`` (seconds),
            ``workers``, ``threads`` and the I/O columns ``file_reads``, ``bytes_read``, ``reads``,
            ``file_writes``, ``bytes_written``, ``writes`` (NA without Darshan I/O).
        files_read / files_written: per prefix, up to :data:`MAX_FILES` file paths.
        n_files_read / n_files_written: per prefix, how many distinct files.
        run: run totals (plain JSON types).
        edges: prefix dependency edges ``(prefix, depends_on, edges)``.
    """

    prefixes: pd.DataFrame
    files_read: dict[str, list[str]] = field(default_factory=dict)
    files_written: dict[str, list[str]] = field(default_factory=dict)
    n_files_read: dict[str, int] = field(default_factory=dict)
    n_files_written: dict[str, int] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    edges: pd.DataFrame = field(default_factory=pd.DataFrame)


def run_figures(graph: ProvGraph) -> RunFigures:
    """Compute a run's crate figures (see :class:`RunFigures`)."""
    from metaprov.mapping import MapContext
    from metaprov.mapping.graphs import prefix_io, prefix_stats
    from metaprov.mapping.tables import executions_sorted, task_index

    rec = graph.records
    ctx = MapContext(rec, graph.iris, graph.detail, graph.chunk_rows, io_detail=graph.io_detail)
    tasks = rec.tasks
    names = pd.Series(sorted(tasks["prefix"].dropna().astype(str).unique()), dtype=object)
    n = len(names)
    index = pd.Index(names)
    code = index.get_indexer(tasks["prefix"].astype(object))
    ok = code >= 0
    c = code[ok]

    def count(mask: Any) -> np.ndarray:
        m = np.asarray(pd.array(mask, dtype="boolean").fillna(False), dtype=bool)[ok]
        return np.bincount(c[m], minlength=n)

    never = np.asarray(tasks["never_ran"].astype("boolean").fillna(False), dtype=bool)
    failed = tasks["state"].astype(object).to_numpy() == "erred"
    nbytes = tasks["nbytes"]
    df = pd.DataFrame(
        {
            "prefix": names,
            "tasks": np.bincount(c, minlength=n),
            "executed": count(~never),
            "failed": count(failed),
            "erred": count(tasks["erred"]),
            "retried": count(tasks["retried"]),
            "never_ran": count(never),
            "results": count(~never & ~failed),
            "result_bytes": _sum_int(c, nbytes.fillna(0).to_numpy(dtype=np.int64)[ok], n),
        }
    )
    df["iri"] = graph.iris.prefixes(names).to_pylist() if n else []

    if n:
        stats = prefix_stats(ctx, names)
        for col in ("total", "mean", "min", "max"):
            df[col] = np.asarray(stats[col], dtype=np.float64)
        df["executions"] = np.asarray(stats["count"], dtype=np.int64)
        idx = task_index(ctx)
        ex = executions_sorted(ctx, idx)
        ex_code = index.get_indexer(idx.tasks["prefix"].astype(object))[ex["row"].to_numpy()]
        start = utc_to_us(ex["start"])
        end = utc_to_us(ex["end"])
        first = np.full(n, np.iinfo(np.int64).max)
        last = np.full(n, NAT_US)
        s_ok = (start != NAT_US) & (ex_code >= 0)
        e_ok = (end != NAT_US) & (ex_code >= 0)
        np.minimum.at(first, ex_code[s_ok], start[s_ok])
        np.maximum.at(last, ex_code[e_ok], end[e_ok])
        first[first == np.iinfo(np.int64).max] = NAT_US
        df["first_start_us"] = first
        df["last_end_us"] = last
        worker = ex["worker"].astype(object)
        pairs = pd.DataFrame({"p": ex_code, "w": worker, "t": ex["thread"]})
        pairs = pairs[(pairs["p"] >= 0) & pairs["w"].notna()]
        df["workers"] = (
            pairs.drop_duplicates(["p", "w"])["p"].value_counts().reindex(range(n), fill_value=0)
        ).to_numpy()
        pt = pairs[pairs["t"].notna()].drop_duplicates(["p", "w", "t"])
        df["threads"] = pt["p"].value_counts().reindex(range(n), fill_value=0).to_numpy()
        io = prefix_io(ctx, names)
        for col in ("file_reads", "bytes_read", "reads", "file_writes", "bytes_written", "writes"):
            df[col] = io[col].to_numpy() if io is not None else pd.array([None] * n, "Int64")
    figs = RunFigures(df)
    _add_files(ctx, figs, index)
    figs.edges = _prefix_edges(rec, index)
    df["position"] = _positions(names, figs.edges)
    figs.run = _run_totals(graph, df)
    return figs


def _sum_int(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    np.add.at(out, codes, values)
    return out


def _add_files(ctx: Any, figs: RunFigures, index: pd.Index) -> None:
    """Distinct files read / written by each prefix's tasks (Darshan), at most MAX_FILES named."""
    rec = ctx.records
    if rec.darshan is None or rec.io is None:
        return
    from metaprov.mapping.fileio import io_tables
    from metaprov.mapping.tables import task_index

    t = ctx.cached("io_tables", lambda: io_tables(ctx))
    if not len(t.procs) or not len(t.agg):
        return
    agg = t.agg
    act = agg["act"].to_numpy()
    on_task = act < len(t.act_row)
    prefix = task_index(ctx).tasks["prefix"].astype(object).to_numpy()
    pcode = index.get_indexer(prefix[t.act_row[act[on_task]]])
    sel = pd.DataFrame(
        {
            "p": pcode,
            "file": agg["path"].to_numpy()[on_task],
            "op": agg["op"].to_numpy()[on_task],
        }
    )
    sel = sel[sel["p"] >= 0].drop_duplicates()
    files = np.asarray(t.files.to_pylist(), dtype=object)
    names = index.to_numpy()
    for op, named, counts in (
        (0, figs.files_read, figs.n_files_read),
        (1, figs.files_written, figs.n_files_written),
    ):
        part = sel[sel["op"] == op].sort_values(["p", "file"])
        for p, grp in part.groupby("p", sort=True):
            key = str(names[p])
            counts[key] = int(len(grp))
            named[key] = [str(x) for x in files[grp["file"].to_numpy()[:MAX_FILES]]]


def _prefix_edges(rec: Any, index: pd.Index) -> pd.DataFrame:
    """Prefix-level dependency edges: (prefix, depends_on, number of task edges), no self loops."""
    dep = rec.dependencies
    if not len(dep) or not len(index):
        return pd.DataFrame({"prefix": [], "depends_on": [], "edges": []})
    key_prefix = rec.tasks.drop_duplicates("key").set_index("key")["prefix"].astype(object)
    a = index.get_indexer(dep["key"].astype(object).map(key_prefix))
    b = index.get_indexer(dep["dependency"].astype(object).map(key_prefix))
    keep = (a >= 0) & (b >= 0) & (a != b)
    e = pd.DataFrame({"a": a[keep], "b": b[keep]}).value_counts().reset_index(name="edges")
    e = e.sort_values(["a", "b"], kind="stable")
    names = index.to_numpy()
    return pd.DataFrame(
        {
            "prefix": names[e["a"].to_numpy()],
            "depends_on": names[e["b"].to_numpy()],
            "edges": e["edges"].to_numpy(),
        }
    ).reset_index(drop=True)


def _positions(names: pd.Series, edges: pd.DataFrame) -> pd.array:
    """Execution order of the prefixes: a prefix comes after every prefix it depends on.

    Prefixes inside a dependency cycle (possible at prefix level) get no position; ties are
    broken by name, so the order is deterministic.
    """
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(names)
    g.add_edges_from(zip(edges["depends_on"], edges["prefix"], strict=False))
    cyclic = set()
    for comp in nx.strongly_connected_components(g):
        if len(comp) > 1:
            cyclic |= comp
    cond = nx.condensation(g)
    order = list(
        nx.lexicographical_topological_sort(cond, key=lambda c: min(cond.nodes[c]["members"]))
    )
    pos: dict[str, int] = {}
    i = 0
    for comp in order:
        members = sorted(cond.nodes[comp]["members"])
        for m in members:
            if m not in cyclic:
                pos[m] = i
                i += 1
    return pd.array([pos.get(x) for x in names], dtype="Int64")


def _run_totals(graph: ProvGraph, df: pd.DataFrame) -> dict[str, Any]:
    rec = graph.records
    first, last = rec.span
    tr = rec.transfers
    per = tr.drop_duplicates("transfer") if len(tr) else tr
    workers = rec.workers
    hosts = workers["hostname"].fillna(workers["host"]).dropna().astype(str).unique()
    out: dict[str, Any] = {
        "first_us": None if first is None else int(first.value // 1000),
        "last_us": None if last is None else int(last.value // 1000),
        "tasks": int(df["tasks"].sum()) if len(df) else 0,
        "executed": int(df["executed"].sum()) if len(df) else 0,
        "erred": int(df["erred"].sum()) if len(df) else 0,
        "failed": int(df["failed"].sum()) if len(df) else 0,
        "results": int(df["results"].sum()) if len(df) else 0,
        "retried": int(df["retried"].sum()) if len(df) else 0,
        "executions": int(df["executions"].sum()) if "executions" in df and len(df) else 0,
        "total": float(np.nansum(df["total"])) if "total" in df and len(df) else 0.0,
        "workers": int(workers["address"].nunique()),
        "threads": int(workers["threads"].fillna(0).sum()) if len(workers) else 0,
        "nodes": int(len(hosts)),
        "transfers": int(per["transfer"].nunique()) if len(tr) else 0,
        "transfer_bytes": int(tr["nbytes"].fillna(0).sum()) if len(tr) else 0,
        "graphs": int(len(rec.graphs)),
        "wanted": int(rec.tasks["wanted"].astype("boolean").fillna(False).sum()),
    }
    for col in ("file_reads", "bytes_read", "reads", "file_writes", "bytes_written", "writes"):
        if col in df and df[col].notna().any():
            out[col] = int(df[col].fillna(0).sum())
    return out
