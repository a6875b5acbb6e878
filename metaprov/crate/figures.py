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

#: Files named as the whole workflow's inputs and as its results at most (the run's action).
RUN_FILES = 500

#: What marks a file as software rather than data: a Python module, bytecode, extension or path
#: file, or a file inside an installation (the run's interpreter and environments are added from
#: its environment records). A task that imports a module on first use reads it through Darshan
#: like data: it is not an input of the workflow.
SOFTWARE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyd", ".so", ".pth", ".whl", ".egg")
SOFTWARE_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python", "/__pycache__/", ".so.")


@dataclass
class RunFigures:
    """What a crate says about one run.

    Attributes:
        prefixes: one row per task prefix (sorted by name): ``prefix``, ``iri``, ``position``
            (topological order of the prefix graph; NA inside a dependency cycle), ``tasks``,
            ``executed`` (tasks with an execution on record), ``unrecorded`` (tasks that ran
            without a record of their execution: a result size or a transfer shows it),
            ``erred``, ``retried``, ``never_ran`` (``tasks = executed + unrecorded +
            never_ran``: docs/records.md, "Counts"), ``results`` (tasks whose result
            was observed), ``result_bytes``, ``first_start_us``/``last_end_us`` (int µs, NAT_US
            when unknown), ``executions``, ``total``/``mean``/``min``/``max`` (seconds),
            ``workers``, ``threads`` and the I/O columns ``file_reads``, ``bytes_read``, ``reads``,
            ``file_writes``, ``bytes_written``, ``writes`` (NA without Darshan I/O).
        files_read / files_written: per prefix, up to :data:`MAX_FILES` files as (path, IRI of
            the PROV file relative to the run's IRI: ``file/<path>`` on a shared file system,
            ``node/<host>/file/<path>`` on a node's own, ...; docs/model.md decision 16).
        n_files_read / n_files_written: per prefix, how many distinct files (a path on two
            nodes' own file systems is two files).
        run: run totals (plain JSON types).
        edges: prefix dependency edges ``(prefix, depends_on, edges)``.
    """

    prefixes: pd.DataFrame
    files_read: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    files_written: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    n_files_read: dict[str, int] = field(default_factory=dict)
    n_files_written: dict[str, int] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    edges: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the whole workflow's inputs: files its tasks read that no task of the run wrote, software
    #: files left out; and its results: the files its tasks wrote (up to RUN_FILES each, sorted)
    inputs: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    n_inputs: int = 0
    n_outputs: int = 0
    #: files tasks read that are software (modules, libraries), not inputs
    n_software: int = 0


def run_figures(graph: ProvGraph) -> RunFigures:
    """Compute a run's crate figures (see :class:`RunFigures`)."""
    from metaprov.mapping.graphs import _task_prefix_codes, prefix_io, prefix_stats
    from metaprov.mapping.tables import executions_sorted, task_index

    rec = graph.records
    # the graph's shared context: the tables computed here are the ones its export pass reuses
    ctx = graph.shared_context()
    idx = task_index(ctx)
    tasks = idx.tasks  # the run's tasks (plus keys seen only elsewhere: no prefix, not counted)
    names = pd.Series(sorted(rec.tasks["prefix"].dropna().astype(str).unique()), dtype=object)
    n = len(names)
    index = pd.Index(names)
    code = _task_prefix_codes(ctx, names)
    ok = code >= 0
    c = code[ok]

    def count(mask: Any) -> np.ndarray:
        m = np.asarray(pd.array(mask, dtype="boolean").fillna(False), dtype=bool)[ok]
        return np.bincount(c[m], minlength=n)

    never = np.asarray(tasks["never_ran"].astype("boolean").fillna(False), dtype=bool)
    # executed: tasks with an execution (one definition everywhere: docs/records.md, "Counts")
    with_ex = tasks["key"].astype(object).isin(set(rec.executions["key"].dropna().astype(object)))
    failed = tasks["state"].astype(object).to_numpy() == "erred"
    nbytes = tasks["nbytes"]
    df = pd.DataFrame(
        {
            "prefix": names,
            "tasks": np.bincount(c, minlength=n),
            "executed": count(with_ex.to_numpy(dtype=bool)),
            "unrecorded": count((~with_ex & ~never).to_numpy(dtype=bool)),
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
        ex = executions_sorted(ctx, idx)
        ex_code = code[ex["row"].to_numpy()]
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
        # who ran a prefix none of whose tasks has an execution on record is unknown, not none
        for col in ("workers", "threads"):
            df[col] = df[col].astype("Int64").where(df["executed"] > 0, pd.NA)
        io = prefix_io(ctx, names)
        for col in ("file_reads", "bytes_read", "reads", "file_writes", "bytes_written", "writes"):
            df[col] = io[col].to_numpy() if io is not None else pd.array([None] * n, "Int64")
    figs = RunFigures(df)
    _add_files(ctx, figs, index)
    figs.edges = _prefix_edges(ctx, names)
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
    paths = t.files.path.to_pylist()
    cut = len(ctx.iris.run) + 1
    files = np.empty(len(paths), dtype=object)
    files[:] = [(p, iri[cut:]) for p, iri in zip(paths, t.files.iri.to_pylist(), strict=True)]
    names = index.to_numpy()
    for op, named, counts in (
        (0, figs.files_read, figs.n_files_read),
        (1, figs.files_written, figs.n_files_written),
    ):
        part = sel[sel["op"] == op].sort_values(["p", "file"])
        for p, grp in part.groupby("p", sort=True):
            key = str(names[p])
            counts[key] = int(len(grp))
            named[key] = list(files[grp["file"].to_numpy()[:MAX_FILES]])
    _add_run_files(figs, sel, files, software_roots(rec.environments))


def software_roots(environments: pd.DataFrame) -> list[str]:
    """Folders holding the run's software: its venvs, conda prefixes and interpreters' prefixes
    (``<prefix>/bin/python`` -> ``<prefix>/``), from the environment records."""
    roots: set[str] = set()
    for col in ("venv", "conda_prefix"):
        if col in environments:
            roots.update(str(v).rstrip("/") + "/" for v in environments[col].dropna())
    if "python_executable" in environments:
        for exe in environments["python_executable"].dropna().astype(str):
            parent = exe.rsplit("/", 2)
            if len(parent) == 3 and parent[1] == "bin" and parent[0]:
                roots.add(parent[0] + "/")
    return sorted(r for r in roots if len(r) > 1)


def is_software(paths: pd.Series, roots: list[str]) -> pd.Series:
    """Which paths are software (see :data:`SOFTWARE_SUFFIXES`), not data."""
    p = paths.astype(str)
    soft = p.str.lower().str.endswith(SOFTWARE_SUFFIXES)
    for part in SOFTWARE_PARTS:
        soft |= p.str.contains(part, regex=False)
    for root in roots:
        soft |= p.str.startswith(root)
    return soft


def _add_run_files(
    figs: RunFigures, sel: pd.DataFrame, files: np.ndarray, roots: list[str]
) -> None:
    """The whole workflow's inputs (read by its tasks, written by none, not software) and
    results (written by its tasks), from the task-linked I/O ``sel`` (file, op)."""
    written = np.unique(sel.loc[sel["op"] == 1, "file"].to_numpy())
    read = np.unique(sel.loc[sel["op"] == 0, "file"].to_numpy())
    read = np.setdiff1d(read, written)
    paths = pd.Series([files[i][0] for i in read], dtype=object)
    soft = is_software(paths, roots).to_numpy(dtype=bool) if len(paths) else np.zeros(0, bool)
    figs.n_software = int(soft.sum())
    inputs = sorted(files[i] for i in read[~soft])
    outputs = sorted(files[i] for i in written)
    figs.n_inputs, figs.n_outputs = len(inputs), len(outputs)
    figs.inputs, figs.outputs = inputs[:RUN_FILES], outputs[:RUN_FILES]


def _prefix_edges(ctx: Any, names: pd.Series) -> pd.DataFrame:
    """Prefix-level dependency edges: (prefix, depends_on, number of distinct task edges), from
    the mapping's own edge table; no self loops."""
    from metaprov.mapping.graphs import _task_prefix_codes
    from metaprov.mapping.tables import dependency_edges, task_index

    empty = pd.DataFrame({"prefix": [], "depends_on": [], "edges": []})
    if not len(ctx.records.dependencies) or not len(names):
        return empty
    idx = task_index(ctx)
    edges = dependency_edges(ctx, idx)
    code = _task_prefix_codes(ctx, names)
    src = np.repeat(np.arange(len(edges.offsets) - 1), np.diff(edges.offsets))
    a, b = code[src], code[edges.targets]
    keep = (a >= 0) & (b >= 0) & (a != b)
    n = len(names)
    pair, count = np.unique(a[keep] * n + b[keep], return_counts=True)
    arr = names.to_numpy(dtype=object)
    return pd.DataFrame(
        {"prefix": arr[pair // n], "depends_on": arr[pair % n], "edges": count}
    ).reset_index(drop=True)


def _positions(names: pd.Series, edges: pd.DataFrame) -> pd.array:
    """Execution order of the prefixes: a prefix comes after every prefix it depends on (Kahn's
    algorithm, ties by name: deterministic). Prefixes in or after a dependency cycle (possible
    at prefix level) get no position."""
    import heapq

    needs: dict[str, set[str]] = {str(x): set() for x in names}
    feeds: dict[str, list[str]] = {str(x): [] for x in names}
    for e in edges.itertuples():
        needs[str(e.prefix)].add(str(e.depends_on))
        feeds[str(e.depends_on)].append(str(e.prefix))
    ready = [p for p, deps in needs.items() if not deps]
    heapq.heapify(ready)
    pos: dict[str, int] = {}
    while ready:
        p = heapq.heappop(ready)
        pos[p] = len(pos)
        for q in feeds[p]:
            needs[q].discard(p)
            if not needs[q] and q not in pos:
                heapq.heappush(ready, q)
    return pd.array([pos.get(str(x)) for x in names], dtype="Int64")


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
        "unrecorded": int(df["unrecorded"].sum()) if len(df) else 0,
        "erred": int(df["erred"].sum()) if len(df) else 0,
        "failed": int(df["failed"].sum()) if len(df) else 0,
        "results": int(df["results"].sum()) if len(df) else 0,
        "retried": int(df["retried"].sum()) if len(df) else 0,
        "executions": int(df["executions"].sum()) if "executions" in df and len(df) else 0,
        # compute seconds: unknown (None), not 0, when no execution has both a start and an end
        "total": float(np.nansum(df["total"]))
        if "total" in df and df["total"].notna().any()
        else None,
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
