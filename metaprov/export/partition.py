"""A run too large for one machine, split into partitions of its keys, each mapped on a worker.

Input: one run directory and a partition count P. Output: P partition files and one run-level
file of N-Quads, whose union (as a set) is exactly the single-process export of the run.

Every key goes to partition ``hash(quote(key)) mod P`` (a fixed FNV-1a hash of the key's IRI
segment, the same on every machine), so every record of a task lands in the same partition.

What a task's triples need, and where the partition gets it (docs/scaling.md):

- its own rows (transitions of both files, its graph membership and dependency edges, its
  transfers): read by the partition owning the key;
- whether each dependency holds a data chunk (``prov:used``), and the replicas of the
  dependencies at the execution's worker (``mp:usedReplica`` and the input-transfer totals):
  the partition also reads the rows of its tasks' direct dependencies (found in ``graph.csv``)
  and the whole transfer file (transfer ids are ranks over all transfers);
- the run's IRIs: the run id is a function of facts every partition reports (key count, first
  event, scheduler address, clients, workers), combined before any triple is written.

Each partition writes only the triples of the tasks it owns (tasks, executions, associations,
data chunks, replicas, transitions), and maps only those keys; of its dependencies it keeps,
once its summary is taken, only what its keys' triples say about them (:func:`keep_for_mapping`).
Which keys have chunk versions depends on consumers in every partition: each summary names the
keys its records split, and the union reaches every partition's mapping and the run-level part
(with each transfer's copied attempt, for the transfers' ``prov:used``). The run-level part (run, job, agents, task graphs, prefixes
with their duration figures, groups, transfers) is written once, from the partitions' small
summaries plus the run's small files (``worker.csv``, ``client.csv``, ``graph.csv``,
``worker_transfer.csv``, the job files).

Darshan I/O is mapped by the run-level part: linking a segment to a task needs every execution
window of its thread (and a per-process clock offset estimated over all of them), so each
partition sends the light window columns of its own executions (key, attempt, worker, thread,
start, end, clock) and of its tasks (scheduler begins/ends, group, prefix) with its summary; the
run-level part reads the logs, links every segment against the windows of the whole run, and
writes every I/O triple once (files, processes, usages, generations and the I/O of each task
execution: file versions are numbered over the whole run).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.errors import UsageError
from metaprov.export.backend import peak_rss
from metaprov.mapping import MapContext, ProvGraph
from metaprov.mapping.agents import busy_partials
from metaprov.mapping.block import Block, Column
from metaprov.mapping.terms import MP, PROV, RunIris, quote_array
from metaprov.records import TABLES, RunRecords, conform

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"

#: Rows per mapping block of a partition. A partition's tables hold its own keys and their
#: dependencies (at P = 4 about 40 % of the rows are its own), and formatting a block costs
#: several times its text, so smaller blocks than a whole run's keep a worker's peak down
#: (docs/scaling.md, "What a partition's memory holds").
PART_CHUNK_ROWS = 5_000

#: The classes whose subjects belong to one task; every other block is run-level.
TASK_CLASSES = frozenset(
    {
        MP.Task,
        MP.TaskExecution,
        PROV.Association,
        MP.DataChunk,
        MP.Transition,
        MP.ChunkReplica,
    }
)


def partition_of_segments(segments: pa.Array, n: int) -> np.ndarray:
    """Partition (0..n-1) of each key, given as its IRI segment (``quote(key, safe='')``):
    :func:`~metaprov.ingest.dask_csv.fnv64` of the segment modulo n (FNV-1a over the UTF-8
    bytes, then a 64-bit finaliser), the same on every machine, version and process."""
    from metaprov.ingest.dask_csv import fnv64

    if len(segments) == 0:
        return np.zeros(0, np.int64)
    return (fnv64(segments) % np.uint64(n)).astype(np.int64)


def partition_of_keys(keys: Any, n: int) -> np.ndarray:
    """Partition of each Dask key (text); nulls get -1."""
    q = quote_array(keys)
    out = partition_of_segments(pc.fill_null(q, ""), n)
    return np.where(q.is_null().to_numpy(zero_copy_only=False), -1, out)


class Owner:
    """Which keys partition ``part`` of ``parts`` owns (for the reader's key selection)."""

    def __init__(self, part: int, parts: int) -> None:
        self.part, self.parts = part, parts

    def __call__(self, texts: pa.Array) -> np.ndarray:
        if self.part < 0:  # the run-level part owns no key
            return np.zeros(len(texts), bool)
        return partition_of_keys(texts, self.parts) == self.part


def read_partition(run: str | Path, part: int, parts: int, *, darshan: bool = False) -> RunRecords:
    """The records a partition needs: the rows of its keys and of their direct dependencies,
    the whole transfer file and the run's small files (``part=-1``: the run-level part, no key,
    and the only part that reads the Darshan logs when ``darshan``)."""
    from metaprov.ingest import read_run
    from metaprov.ingest.dask_csv import KeySelection

    sel = KeySelection(Owner(part, parts), keeps_keyless=part == 0, transitions=part >= 0)
    return read_run(run, darshan=darshan and part < 0, keys=sel)


def keep_for_mapping(records: RunRecords, part: int, parts: int) -> None:
    """Reduce the rows of the partition's dependencies (keys it reads but does not own, ~60 %
    of its task rows at P = 4) to what its own keys' triples say about them: whether each holds
    a result (its task's ``state`` and ``nbytes``, a successful execution, a transfer) and the
    executions that produced one (which chunk version a task used, decision 21). Their
    transitions, other executions and other task columns are dropped before the mapping."""
    own_of = Owner(part, parts)
    tasks = records.tasks
    own = own_of(pa.array(tasks["key"].astype(object), pa.large_string()))
    own |= tasks["key"].isna().to_numpy(dtype=bool)
    deps = conform("tasks", tasks.loc[~own, ["key", "state", "nbytes"]].reset_index(drop=True))
    records.tasks = pd.concat([tasks[own], deps], ignore_index=True) if len(deps) else tasks
    ex = records.executions
    if len(ex):
        keep = own_of(pa.array(ex["key"].astype(object), pa.large_string()))
        keep |= ex["outcome"].eq("memory").fillna(False).to_numpy(dtype=bool)
        records.executions = ex[keep].reset_index(drop=True)
    tr = records.transitions
    if len(tr):
        cats = pa.array(tr["key"].cat.categories.astype(object), pa.large_string())
        own_cat = np.append(own_of(cats), True)  # code -1: no key, kept
        keep = own_cat[tr["key"].cat.codes.to_numpy()]
        records.transitions = tr[keep].reset_index(drop=True)
    dep = records.dependencies
    if len(dep):
        keep = own_of(pa.array(dep["key"].astype(object), pa.large_string()))
        records.dependencies = dep[keep].reset_index(drop=True)


#: The columns of the executions and tasks that linking Darshan I/O reads (metaprov.link).
WINDOW_COLUMNS = ["key", "attempt", "worker", "thread", "start", "end", "time_source", "window"]
TASK_WINDOW_COLUMNS = [
    "key",
    "worker",
    "n_executions",
    "sched_begins",
    "sched_ends",
    "group",
    "prefix",
]


# --- what each partition reports ----------------------------------------------------------------
def summarize_partition(
    records: RunRecords, part: int, parts: int, *, windows: bool = False, reduce: bool = False
) -> dict[str, Any]:
    """The small facts the run-level part and the run id need from one partition (own keys only):
    key count, time span, scheduler addresses, workers, threads, groups, prefix durations, the
    chunk versions others need (:func:`_versions_report`); with ``windows``, the window columns
    of its executions and tasks (to link Darshan I/O). ``reduce``: reduce the records to what
    the partition's mapping needs (:func:`keep_for_mapping`) once the facts that need every row
    are taken (the versions are exact from the reduced records too: every execution is owned by
    one partition, and the versions of its dependencies are all kept)."""
    tasks = records.tasks
    keys = pa.array(tasks["key"].astype(object), pa.large_string())
    own_task = Owner(part, parts)(keys)
    own_keys = pd.Index(tasks["key"].astype(object)[own_task])
    ex = records.executions
    own_ex = ex["key"].astype(object).isin(own_keys).to_numpy(dtype=bool)
    tr = records.transitions
    sched_counts: dict[str, int] = {}
    if len(tr):
        # per distinct key (a Categorical's categories), not per transition row
        cats = pd.Index(tr["key"].cat.categories.astype(object))
        own_cat = np.append(cats.isin(own_keys), False)
        own_tr = own_cat[tr["key"].cat.codes.to_numpy()]
        sched = own_tr & tr["observer"].eq("scheduler").fillna(False).to_numpy(dtype=bool)
        counts = tr.loc[sched, "address"].astype(object).dropna().value_counts()
        sched_counts = {str(k): int(v) for k, v in counts.items()}
    first, last = records.span
    own_tasks = tasks[own_task]
    groups = own_tasks[["group", "prefix"]].drop_duplicates()
    exo = ex[own_ex]
    th = exo[exo["thread"].notna() & exo["worker"].notna()]
    threads = th.groupby(["worker", "thread"]).size().rename("n_tasks").reset_index()
    out_windows = out_task_windows = None
    if windows:
        out_windows = exo[[c for c in WINDOW_COLUMNS if c in exo.columns]].reset_index(drop=True)
        out_task_windows = own_tasks[TASK_WINDOW_COLUMNS].reset_index(drop=True)
    summary = {
        "part": part,
        "windows": out_windows,
        "task_windows": out_task_windows,
        "keys": int(own_task.sum()),
        "first": first,
        "last": last,
        "scheduler": sched_counts,
        "workers": records.workers,
        "worker_events": _own_worker_events(records, own_keys),
        "unrecorded": exo.loc[exo["record_lost"].fillna(False).to_numpy(dtype=bool), "worker"]
        .astype(object)
        .value_counts(),
        "clients": records.clients,
        "threads": threads,
        "groups": groups.reset_index(drop=True),
        "prefix_stats": _prefix_partials(own_tasks, exo),
        "busy": busy_partials(exo),
        "scheduler_address": records.scheduler.get("address"),
        "accounting": {
            name: {
                "present": a.present,
                "rows_read": a.rows_read,
                "rows_used": a.rows_used,
                "not_used": dict(a.not_used),
            }
            for name, a in records.accounting.files.items()
            if name in TRANSITION_FILES
        },
    }
    if reduce:
        # no reference to the whole tables may outlive their reduction
        del tasks, keys, own_keys, ex, tr, own_tasks, exo, th
        keep_for_mapping(records, part, parts)
        release_memory()
    summary["split_keys"], summary["transfer_picks"] = _versions_report(records, part, parts)
    return summary


def _own_worker_events(records: RunRecords, own_keys: pd.Index) -> pd.DataFrame:
    """The worker events with each removal's counts over the partition's own keys only (the
    parts' counts add up to the run's; ``lost`` is combined with any())."""
    ev = records.worker_events
    lt = records.lost_tasks
    lt = lt[lt["key"].astype(object).isin(own_keys).to_numpy(dtype=bool)]
    counts = lt.groupby(["worker", "time", "kind"]).size()
    out = ev.copy()
    for col, kind in (("n_processing", "processing"), ("n_results", "result"), ("n_data", "data")):
        idx = pd.MultiIndex.from_arrays(
            [ev["worker"].astype(object), ev["time"], pd.Series(kind, index=ev.index)]
        )
        own = counts.reindex(idx).fillna(0).to_numpy(dtype="int64")
        out[col] = pd.array(np.where(ev[col].isna(), pd.NA, own), dtype="Int64")
    return out


def _combine_worker_events(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    """Every part's worker events as one table: counts summed, ``lost`` if any part says so."""
    parts = [s["worker_events"].reset_index(drop=True) for s in summaries]
    first = parts[0]
    if not len(first):
        return first
    out = first.copy()
    for p in parts[1:]:
        for col in ("n_processing", "n_results", "n_data"):
            out[col] = out[col] + p[col]
        out["lost"] = out["lost"].fillna(False) | p["lost"].fillna(False)
    took = out[["n_processing", "n_results", "n_data"]].fillna(0).sum(axis=1) > 0
    out["lost"] = out["lost"].fillna(False) | (took & out["event"].eq("removed"))
    return conform("worker_events", out)


class _NoTaskIris(RunIris):
    """IRIs for a mapping context that mints no task IRI (the versions need only the keys)."""

    def tasks(self, keys: Any) -> pa.Array:
        return pa.nulls(len(keys), pa.large_string())


def _versions_report(records: RunRecords, part: int, parts: int) -> tuple[list[str], pd.DataFrame]:
    """What this partition knows of chunk versions (decision 21) that the other parts need.

    The keys whose result has versions by this partition's records (several successful
    executions, or a consumer that none of them can have served: the partition reads every row
    of its keys and of their dependencies, so both hold for the whole run; a consumer in another
    partition may split a key too, hence the union over the partitions). And, per row of the
    sorted transfers whose key it owns, the attempt whose result the transfer copied (the
    run-level part writes the transfers, without the executions)."""
    from metaprov.mapping.tables import executions_sorted, task_index
    from metaprov.mapping.transfers import transfer_picks
    from metaprov.mapping.versions import chunk_versions

    ctx = MapContext(records, _NoTaskIris("urn:metaprov:partition", "summary"))
    idx = task_index(ctx)
    ex = executions_sorted(ctx, idx)
    split = idx.keys.filter(pa.array(chunk_versions(ctx, idx, ex).split))
    gen = transfer_picks(ctx, idx)
    tr_keys = transfers_keys(ctx)
    own = Owner(part, parts)(tr_keys) & (gen >= 0)
    rows = np.flatnonzero(own)
    picks = pd.DataFrame(
        {"row": rows, "attempt": ex["attempt"].to_numpy(dtype=np.int64)[gen[rows]]}
    )
    return [str(k) for k in split.to_pylist()], picks


def transfers_keys(ctx: MapContext) -> pa.Array:
    """The key of each row of the sorted transfers, as text."""
    from metaprov.mapping.tables import transfers_sorted
    from metaprov.mapping.terms import as_text_array

    return as_text_array(transfers_sorted(ctx)["key"])


def _prefix_partials(tasks: pd.DataFrame, ex: pd.DataFrame) -> pd.DataFrame:
    """Per prefix, over the given executions with a known start and end: count, total, shortest
    and longest duration (integer microseconds), and the first (key, attempt) at the longest."""
    from metaprov.timeutil import NAT_US, utc_to_us

    cols = ["prefix", "count", "total_us", "min_us", "max_us", "key", "attempt"]
    if not len(ex):
        return pd.DataFrame({c: [] for c in cols})
    prefix = tasks.set_index("key")["prefix"].reindex(ex["key"].astype(object)).to_numpy()
    s, e = utc_to_us(ex["start"]), utc_to_us(ex["end"])
    keep = (s != NAT_US) & (e != NAT_US) & pd.notna(prefix)
    d = pd.DataFrame(
        {
            "prefix": prefix[keep].astype(object),
            "dur": (e - s)[keep],
            "key": ex["key"].astype(object).to_numpy()[keep],
            "attempt": ex["attempt"].fillna(0).to_numpy(dtype=np.int64)[keep],
        }
    )
    if not len(d):
        return pd.DataFrame({c: [] for c in cols})
    g = d.groupby("prefix", sort=True)["dur"]
    out = pd.DataFrame(
        {"count": g.size(), "total_us": g.sum(), "min_us": g.min(), "max_us": g.max()}
    ).reset_index()
    top = d.merge(out[["prefix", "max_us"]], on="prefix")
    top = top[top["dur"] == top["max_us"]].sort_values(["prefix", "key", "attempt"])
    top = top.drop_duplicates("prefix")[["prefix", "key", "attempt"]]
    return out.merge(top, on="prefix", how="left")[cols]


# --- combining the summaries ---------------------------------------------------------------------
def combine(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The run-wide facts from every partition's summary (order does not matter)."""
    firsts = [s["first"] for s in summaries if s["first"] is not None]
    lasts = [s["last"] for s in summaries if s["last"] is not None]
    counts: dict[str, int] = {}
    for s in summaries:
        for k, v in s["scheduler"].items():
            counts[k] = counts.get(k, 0) + v
    # the address most scheduler rows came from (on a tie, the first by text)
    # (without scheduler transitions: the address from the job's logs, the same in every part)
    address = (
        min(counts, key=lambda a: (-counts[a], a))
        if counts
        else next((s["scheduler_address"] for s in summaries if s["scheduler_address"]), None)
    )
    workers = pd.concat([s["workers"] for s in summaries], ignore_index=True)
    workers = workers.drop_duplicates("address").sort_values("address", kind="stable")
    # lost: any part's events say so; unrecorded: the parts' own executions, summed
    events = _combine_worker_events(summaries)
    unrec = pd.concat([s["unrecorded"] for s in summaries]).groupby(level=0).sum()
    lost_at = set(events.loc[events["lost"].fillna(False).to_numpy(dtype=bool), "worker"])
    addr = workers["address"].astype(object)
    workers = workers.assign(
        lost=pd.array(addr.isin(lost_at).to_numpy(), dtype="boolean"),
        unrecorded=pd.array(unrec.reindex(addr).fillna(0).to_numpy(dtype="int64"), dtype="Int64"),
    )
    threads = pd.concat([s["threads"] for s in summaries], ignore_index=True)
    if len(threads):
        threads = threads.groupby(["worker", "thread"], sort=True)["n_tasks"].sum().reset_index()
    groups = pd.concat([s["groups"] for s in summaries], ignore_index=True).drop_duplicates()
    stats = pd.concat([s["prefix_stats"] for s in summaries], ignore_index=True)
    busy = pd.concat([s["busy"] for s in summaries], ignore_index=True)
    if len(busy):
        # each execution is owned by one partition: the sums of the parts are the run's
        busy = (
            busy.groupby(["worker", "thread"], sort=True, dropna=False)[["n", "us"]]
            .sum()
            .reset_index()
        )
    windows = task_windows = None
    if all(s.get("windows") is not None for s in summaries):
        windows = _by_key(pd.concat([s["windows"] for s in summaries], ignore_index=True))
        task_windows = _by_key(pd.concat([s["task_windows"] for s in summaries], ignore_index=True))
    split_keys = sorted({k for s in summaries for k in s["split_keys"]})
    picks = pd.concat([s["transfer_picks"] for s in summaries], ignore_index=True)
    return {
        "split_keys": split_keys,
        "transfer_picks": picks.sort_values("row", kind="stable").reset_index(drop=True),
        "windows": windows,
        "task_windows": task_windows,
        "keys": sum(s["keys"] for s in summaries),
        "first": min(firsts) if firsts else None,
        "last": max(lasts) if lasts else None,
        "scheduler_address": address,
        "workers": conform("workers", workers),
        "worker_events": events,
        "clients": summaries[0]["clients"],
        "threads": conform("threads", threads),
        "groups": groups.reset_index(drop=True),
        "prefix_stats": stats,
        "busy": busy,
    }


def _by_key(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in the order of a whole run's tables: by key (binary order), then attempt."""
    kb = df["key"].astype(object).map(lambda k: str(k).encode("utf-8"))
    cols = {"kb": kb.to_numpy()}
    if "attempt" in df:
        cols["attempt"] = df["attempt"].fillna(-1).to_numpy(dtype=np.int64)
    order = pd.DataFrame(cols).sort_values(list(cols), kind="stable").index.to_numpy()
    return df.take(order).reset_index(drop=True)


def run_id_from(run_facts: dict[str, Any]) -> str:
    """The run id :func:`metaprov.ingest.dask_csv.run_id` gives the whole run, from the facts."""
    from metaprov.ingest.dask_csv import run_id_of_facts

    return run_id_of_facts(
        run_facts["scheduler_address"],
        run_facts["first"],
        run_facts["clients"]["client"],
        run_facts["keys"],
        run_facts["workers"]["address"],
    )


def _prefix_stats(iris: RunIris, prefixes: pd.Series, partials: pd.DataFrame) -> dict[str, Any]:
    """The per-prefix figures of :func:`metaprov.mapping.graphs.prefix_stats`, from partials."""
    n = len(prefixes)
    count = np.zeros(n, np.int64)
    total = np.zeros(n, np.int64)
    vmin = np.full(n, np.inf)
    vmax = np.full(n, -np.inf)
    slow_key: list[Any] = [None] * n
    slow_att = np.zeros(n, np.int64)
    if len(partials):
        code = pd.Index(prefixes.astype(str)).get_indexer(partials["prefix"].astype(str))
        p = partials[code >= 0].assign(code=code[code >= 0])
        agg = p.groupby("code").agg(
            count=("count", "sum"),
            total=("total_us", "sum"),
            lo=("min_us", "min"),
            hi=("max_us", "max"),
        )
        idx = agg.index.to_numpy()
        count[idx] = agg["count"].to_numpy(np.int64)
        total[idx] = agg["total"].to_numpy(np.int64)
        vmin[idx] = agg["lo"].to_numpy(np.int64) / 1e6
        vmax[idx] = agg["hi"].to_numpy(np.int64) / 1e6
        top = p.merge(agg[["hi"]], left_on="code", right_index=True)
        top = top[top["max_us"] == top["hi"]]
        # first by key (binary order, as the mapping sorts keys), then attempt
        top = top.assign(kb=top["key"].map(lambda k: str(k).encode("utf-8")))
        top = top.sort_values(["code", "kb", "attempt"]).drop_duplicates("code")
        for c, k, a in zip(top["code"], top["key"], top["attempt"], strict=True):
            slow_key[int(c)] = k
            slow_att[int(c)] = int(a)
    has = count > 0
    tot = total.astype(np.float64) / 1e6
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(has, tot / np.maximum(count, 1), np.nan)
    keys = pa.array([k if k is not None else "" for k in slow_key], pa.large_string())
    slow = iris.executions(iris.tasks(keys), pa.array(slow_att))
    slowest = pc.if_else(pa.array(has), slow, pa.scalar(None, slow.type))
    return {
        "count": pd.array(count, dtype="Int64"),
        "total": np.where(has, tot, np.nan),
        "mean": mean,
        "min": np.where(has, vmin, np.nan),
        "max": np.where(has, vmax, np.nan),
        "slowest": slowest,
    }


# --- the graphs a partition and the run-level part write ----------------------------------------
class PartGraph(ProvGraph):
    """A run's graph restricted to one partition's tasks (``part >= 0``) or to its run-level
    blocks (``part == -1``), with shared values handed to the mapping steps up front."""

    def __init__(
        self,
        records: RunRecords,
        part: int,
        parts: int,
        *,
        base: str,
        detail: str,
        io_detail: str = "aggregate",
        seed: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            records, base=base, detail=detail, io_detail=io_detail, chunk_rows=PART_CHUNK_ROWS
        )
        self.part, self.parts = part, parts
        self.seed = seed or {}

    def blocks(self, ahead: int = 0) -> Iterator[Block]:
        """Every block, mapped in the caller's thread (``ahead`` is ignored): a partition runs
        beside others on a worker, so the cores are busy already, and blocks mapped ahead
        would only add their memory to the worker's peak."""
        return self._blocks()

    def _blocks(self) -> Iterator[Block]:
        from metaprov.mapping import _STEPS, _ensure_builtin_steps

        _ensure_builtin_steps()
        ctx = MapContext(
            self.records,
            self.iris,
            self.detail,
            self.chunk_rows,
            io_detail=self.io_detail,
        )
        ctx.cache.update({k: (v(ctx) if callable(v) else v) for k, v in self.seed.items()})
        task_iri = self.iris.run + "/task/"
        for entry in list(_STEPS):
            for block in entry.func(ctx):
                if not len(block):
                    continue
                block = block.with_base_types()  # as ProvGraph._blocks does
                per_task = _per_task(block, task_iri)
                if self.part < 0:
                    if not per_task:
                        yield block
                    continue
                if not per_task:
                    continue
                mask = (
                    partition_of_segments(_owner_segments(block, task_iri), self.parts) == self.part
                )
                if mask.all():
                    yield block
                elif mask.any():
                    yield _filter(block, mask)


def _per_task(block: Block, task_iri: str) -> bool:
    """Whether a block's rows belong to tasks (each written by its key's partition) rather than
    to the run (written once, by the run-level part). A typed block goes by its class; a block
    that only adds to subjects another block types (no leading ``rdf:type``, e.g. the task
    facts' locations on executions) goes with its subjects: per task when every one is a task's
    (``<run>/task/...``)."""
    first = block.columns[0] if block.columns else None
    if first is not None and first.predicate == RDF_TYPE and isinstance(first.values, str):
        return block.rdf_type in TASK_CLASSES
    return bool(pc.all(pc.starts_with(block.subjects, task_iri)).as_py())


def _owner_segments(block: Block, task_iri: str) -> pa.Array:
    """The IRI segment of the key each row belongs to: from its ``mp:task`` link, else from its
    subject (a task, or an execution's association: ``<run>/task/<key>/...``)."""
    col = next(
        (c for c in block.columns if c.predicate == MP.task and not isinstance(c.values, str)),
        None,
    )
    iris = col.values if col is not None else block.subjects
    rest = pc.utf8_slice_codeunits(iris, len(task_iri))
    return pc.list_element(pc.split_pattern(rest, "/", max_splits=1), 0)


def _filter(block: Block, mask: np.ndarray) -> Block:
    keep = pa.array(mask)
    out = Block(block.subjects.filter(keep))
    for c in block.columns:
        vals = c.values if isinstance(c.values, str) else c.values.filter(keep)
        out.columns.append(Column(c.predicate, vals, c.kind, c.datatype))
    return out


def run_level_records(
    run: str | Path, facts: dict[str, Any], run_id: str, *, darshan: bool = False
) -> RunRecords:
    """The run's small files plus the partitions' combined facts, as records the mapping's
    run-level steps turn into exactly the single-process run-level triples."""
    rec = read_partition(run, -1, 1, darshan=darshan)
    rec.run_id = run_id
    rec.workers = facts["workers"]
    rec.worker_events = facts["worker_events"]
    rec.threads = facts["threads"]
    if facts["scheduler_address"]:
        rec.scheduler["address"] = facts["scheduler_address"]
    g = facts["groups"]
    rec.tasks = conform("tasks", pd.DataFrame({"group": g["group"], "prefix": g["prefix"]}))
    # the run's first and last event (the single-process run block takes them from every table)
    times = [t for t in (facts["first"], facts["last"]) if t is not None]
    rec.transitions = conform(
        "transitions",
        pd.DataFrame({"time": pd.Series(times, dtype="datetime64[us, UTC]")}),
    )
    if rec.darshan is not None:
        _link_io(rec, facts)
    return rec


def _link_io(rec: RunRecords, facts: dict[str, Any]) -> None:
    """Link the run's Darshan segments against the execution windows of every partition (the
    whole run's), exactly as a single-process export does; then keep, as task rows, only the
    tasks the I/O mapping names (their key, group and prefix: no task triple is written here)."""
    from metaprov.link import link_io

    if facts.get("windows") is None:
        raise UsageError("the partitions sent no execution windows to link the Darshan I/O")
    groups = rec.tasks
    rec.executions = conform("executions", facts["windows"])
    tw = facts["task_windows"]
    rec.tasks = conform("tasks", tw)
    link_io(rec)
    seg = rec.io.segments
    linked = pd.Index(seg.loc[seg["status"].astype(object).eq("linked"), "key"].astype(object))
    named = tw.loc[tw["key"].astype(object).isin(linked), ["key", "group", "prefix"]]
    rec.tasks = conform("tasks", pd.concat([groups, named], ignore_index=True))
    rec.executions = conform("executions", pd.DataFrame())


def _transfer_chunks(ctx: MapContext, facts: dict[str, Any]) -> pa.Array:
    """Per row of the sorted transfers, the chunk IRI it copied (as
    :func:`metaprov.mapping.transfers.transfer_chunks`), from the partitions' reports: the
    key's ``<task>/chunk``, or ``<task>/chunk/<attempt>`` when the key has versions."""
    from metaprov.mapping.tables import task_index
    from metaprov.mapping.terms import concat

    idx = task_index(ctx)
    keys = transfers_keys(ctx)
    base = idx.chunk_iri(idx.rows(keys))
    picks = facts["transfer_picks"]
    att = np.full(len(keys), -1, np.int64)
    att[picks["row"].to_numpy(dtype=np.int64)] = picks["attempt"].to_numpy(dtype=np.int64)
    split = pa.array(facts["split_keys"], pa.large_string())
    versioned = (att >= 0) & pc.is_in(keys, value_set=split).to_numpy(zero_copy_only=False)
    if not versioned.any():
        return base
    ver = concat(base, "/", pa.array(att.astype(str), pa.large_string()))
    return pc.if_else(pa.array(versioned), ver, base)


def write_run_level(
    run: str | Path,
    facts: dict[str, Any],
    run_id: str,
    out: Path,
    *,
    base: str,
    detail: str,
    darshan: bool = False,
    io_detail: str = "aggregate",
) -> dict[str, Any]:
    """Write the run-level part (with the run's Darshan I/O when ``darshan``); returns its
    figures."""
    from metaprov.write import write

    t0 = time.perf_counter()
    rec = run_level_records(run, facts, run_id, darshan=darshan)
    partials = facts["prefix_stats"]

    def stats(ctx: MapContext) -> dict[str, Any]:
        prefixes = pd.Series(
            sorted(ctx.records.tasks["prefix"].dropna().astype(str).unique()),
            dtype=object,
        )
        return _prefix_stats(ctx.iris, prefixes, partials)

    seed = {
        "prefix_stats": stats,
        "busy": lambda ctx: facts["busy"],
        "owns_keys": lambda ctx: Owner(-1, 1),
        "transfer_chunks": lambda ctx: _transfer_chunks(ctx, facts),
    }
    graph = PartGraph(rec, -1, 1, base=base, detail=detail, io_detail=io_detail, seed=seed)
    n = write(graph, out, "nquads", overwrite=True)
    return {
        "part": "run",
        "triples": n,
        "seconds": time.perf_counter() - t0,
        "graph_iri": graph.graph_iri,
        "run_iri": graph.run_iri,
        "accounting": accounting_of(rec),
        "peak_rss": peak_rss(),
        "missing": sorted(str(m) for m in rec.missing),
    }


def write_partition(
    records: RunRecords,
    part: int,
    parts: int,
    run_id: str,
    out: Path,
    *,
    base: str,
    detail: str,
    split_keys: list[str] | None = None,
) -> dict[str, Any]:
    """Write the triples of the tasks partition ``part`` owns (only those keys are mapped; the
    others it read are its tasks' dependencies); ``split_keys``: the keys with chunk versions
    in the whole run (:func:`combine`). Returns its figures."""
    from metaprov.write import write

    t0 = time.perf_counter()
    release_memory()
    records.run_id = run_id
    seed = {
        "owns_keys": lambda ctx: Owner(part, parts),
        "split_keys": pa.array(split_keys or [], pa.large_string()),
    }
    graph = PartGraph(records, part, parts, base=base, detail=detail, seed=seed)
    n = write(graph, out, "nquads", overwrite=True)
    return {
        "part": part,
        "triples": n,
        "seconds": time.perf_counter() - t0,
        "peak_rss": peak_rss(),
    }


# --- one partitioned run, end to end ---------------------------------------------------------------
#: The files whose rows each partition reads and accounts for its own keys (the others: the
#: run-level part, whole).
TRANSITION_FILES = ("scheduler_transition.csv", "worker_transition.csv", "worker_execution.csv")


def summary_task(
    run: str, part: int, parts: int, windows: bool = False, spill: str | None = None
) -> dict[str, Any]:
    """Read partition ``part`` and return its summary only; its records, reduced to what its
    mapping needs, go to the directory ``spill`` (Arrow files, :func:`spill_records`) for its
    map task, so a worker holds one partition at a time and the map task needs not parse the
    run's files again."""
    records = read_partition(run, part, parts)
    summary = summarize_partition(records, part, parts, windows=windows, reduce=True)
    if spill is not None:
        spill_records(records, Path(spill))
    del records
    release_memory()
    return summary


#: The record tables a partition's mapping reads, spilled between its two tasks: every table of
#: :class:`~metaprov.records.RunRecords` (the Darshan ones are the run-level part's).
SPILLED = tuple(name for name in TABLES if not name.startswith("darshan_"))


def spill_records(records: RunRecords, where: Path) -> bool:
    """Write the record tables a partition's mapping reads into ``where`` as Arrow IPC files
    (pandas dtypes kept in their metadata: categories, nullable integers, UTC times), plus its
    scheduler address and path as JSON. Returns False, leaving nothing behind, when a table
    cannot be written as Arrow (the map task then reads the partition from the run again)."""
    import json
    import shutil

    import pyarrow.feather as feather

    where.mkdir(parents=True, exist_ok=True)
    try:
        for name in SPILLED:
            df = getattr(records, name).reset_index(drop=True)
            feather.write_feather(df, where / f"{name}.arrow", compression="uncompressed")
    except (pa.ArrowException, TypeError, ValueError):
        shutil.rmtree(where, ignore_errors=True)
        return False
    address = records.scheduler.get("address")
    meta = {"path": str(records.path), "scheduler_address": address and str(address)}
    (where / "records.json").write_text(json.dumps(meta), encoding="utf-8")
    return True


def unspill_records(where: Path) -> RunRecords | None:
    """The records :func:`spill_records` wrote into ``where`` (None when there are none)."""
    import json

    import pyarrow.feather as feather

    meta_file = where / "records.json"
    if not meta_file.is_file():
        return None
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    records = RunRecords(path=meta["path"])
    if meta["scheduler_address"]:
        records.scheduler["address"] = meta["scheduler_address"]
    for name in SPILLED:
        setattr(records, name, feather.read_feather(where / f"{name}.arrow"))
    return records


def release_memory() -> None:
    """Hand the memory freed by reading back to the system before the next step: Arrow's
    allocator and the C library's each keep what they freed for themselves, so without this
    the mapping's numpy and Arrow buffers could not reuse what the reader let go of."""
    import ctypes
    import gc
    import sys

    gc.collect()
    pa.default_memory_pool().release_unused()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (e.g. musl): nothing to trim
            pass


def map_task(
    run: str,
    part: int,
    parts: int,
    run_id: str,
    out: str,
    base: str,
    detail: str,
    split_keys: list[str] | None = None,
    spill: str | None = None,
) -> dict[str, Any]:
    """Write the triples of partition ``part`` (any worker can run it), from its records
    spilled by its summary task, or read from the run again when there are none; its figures
    include the seconds spent reading them (``read_seconds``) and how (``read_from``)."""
    t0 = time.perf_counter()
    records = unspill_records(Path(spill)) if spill is not None else None
    source = "spill"
    if records is None:
        source = "run"
        records = read_partition(run, part, parts)
        keep_for_mapping(records, part, parts)
    read_s = time.perf_counter() - t0
    info = write_partition(
        records, part, parts, run_id, Path(out), base=base, detail=detail, split_keys=split_keys
    )
    return {**info, "read_seconds": read_s, "read_from": source}


def accounting_of(records: Any) -> dict[str, Any]:
    """Per input file: rows read, used and not used by reason (no examples: see inspect)."""
    files = {}
    for name, acct in sorted(records.accounting.files.items()):
        files[name] = {
            "present": acct.present,
            "rows_read": acct.rows_read,
            "rows_used": acct.rows_used,
            "not_used": dict(sorted(acct.not_used.items())),
        }
    return {
        "files": files,
        "rows_read": sum(f["rows_read"] for f in files.values()),
        "rows_used": sum(f["rows_used"] for f in files.values()),
        "notes": list(records.accounting.notes),
    }


def merge_accounting(summaries: list[dict[str, Any]], run_level: dict[str, Any]) -> dict[str, Any]:
    """Per file: the transition files' rows as the partitions counted them (each its own keys'),
    every other file as the run-level part read it (whole, once)."""
    files: dict[str, dict[str, Any]] = {}
    for name, f in run_level["files"].items():
        if name not in TRANSITION_FILES:
            files[name] = dict(f)
    for s in summaries:
        for name, acct in s["accounting"].items():
            f = files.setdefault(
                name,
                {
                    "present": acct["present"],
                    "rows_read": 0,
                    "rows_used": 0,
                    "not_used": {},
                },
            )
            f["rows_read"] += acct["rows_read"]
            f["rows_used"] += acct["rows_used"]
            for reason, k in acct["not_used"].items():
                f["not_used"][reason] = f["not_used"].get(reason, 0) + k
    files = {k: files[k] for k in sorted(files)}
    return {
        "files": files,
        "rows_read": sum(f["rows_read"] for f in files.values()),
        "rows_used": sum(f["rows_used"] for f in files.values()),
        "notes": list(run_level.get("notes", [])),
    }


def export_partitioned(
    client: Any,
    run: str | Path,
    shard: Path,
    parts: int,
    *,
    base: str,
    detail: str,
    darshan: bool = False,
    io_detail: str = "aggregate",
) -> dict[str, Any]:
    """Convert one run in ``parts`` partitions into the N-Quads file ``shard``.

    One task per partition reads it, returns its summary (small) and spills its records,
    reduced to what its mapping needs, beside the part files; then the run-level part and one
    task per partition (which loads its spill) write their own files, concatenated into
    ``shard``. A worker (or this process, without a client, running the same steps one
    partition at a time) holds one partition's records at a time, and the map tasks can run on
    any worker.

    Returns:
        run_id, run_iri, graph_iri, triples, parts (figures per part), accounting.
    """
    from metaprov.ingest import darshan_files

    run = str(run)
    windows = darshan and bool(darshan_files(Path(run)))
    run_level = {"base": base, "detail": detail, "darshan": darshan, "io_detail": io_detail}
    tmp = shard.with_name(f".{shard.name}.parts")
    tmp.mkdir(parents=True, exist_ok=True)
    outs = [tmp / f"part-{p:04d}.nq" for p in range(parts)]
    spills = [str(tmp / f"part-{p:04d}.records") for p in range(parts)]
    run_out = tmp / "run.nq"
    try:
        if client is None:
            summaries = [summary_task(run, p, parts, windows, spills[p]) for p in range(parts)]
            facts = combine(summaries)
            run_id = run_id_from(facts)
            split = facts["split_keys"]
            run_info = write_run_level(run, facts, run_id, run_out, **run_level)
            infos = [
                map_task(run, p, parts, run_id, str(outs[p]), base, detail, split, spills[p])
                for p in range(parts)
            ]
        else:
            futs = [
                client.submit(summary_task, run, p, parts, windows, spills[p], pure=False)
                for p in range(parts)
            ]
            summaries = client.gather(futs)
            del futs
            facts = combine(summaries)
            run_id = run_id_from(facts)
            split = facts["split_keys"]
            run_fut = client.submit(
                write_run_level, run, facts, run_id, run_out, **run_level, pure=False
            )
            maps = [
                client.submit(
                    map_task,
                    run,
                    p,
                    parts,
                    run_id,
                    str(outs[p]),
                    base,
                    detail,
                    split,
                    spills[p],
                    pure=False,
                )
                for p in range(parts)
            ]
            infos = client.gather(maps)
            del maps
            run_info = run_fut.result()
        _concatenate([run_out, *outs], shard)
    finally:
        import shutil

        for f in [run_out, *outs]:
            f.unlink(missing_ok=True)
        for d in spills:
            shutil.rmtree(d, ignore_errors=True)
        try:
            tmp.rmdir()
        except OSError:
            pass
    return {
        "run_id": run_id,
        "run_iri": run_info["run_iri"],
        "graph_iri": run_info["graph_iri"],
        "triples": run_info["triples"] + sum(i["triples"] for i in infos),
        "partitions": parts,
        "parts": [
            {k: v for k, v in run_info.items() if k in ("part", "triples", "seconds", "peak_rss")},
            *infos,
        ],
        "accounting": merge_accounting(summaries, run_info["accounting"]),
        "missing": run_info["missing"],
    }


def _concatenate(parts: list[Path], target: Path) -> None:
    """The parts, one after the other, into ``target`` (atomically: temp file + rename)."""
    import os
    import shutil

    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as out:
            for p in parts:
                with p.open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
