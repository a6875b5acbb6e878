"""Darshan file I/O: files, qualified usages and generations, traced processes and counters.

Input: ``records.darshan`` (:class:`~metaprov.ingest.darshan.DarshanRecords`) and ``records.io``
(:class:`~metaprov.link.LinkedIO`, from :func:`metaprov.link_io`: each traced call linked to a
task execution, or to its process, or reported ambiguous/unlinked), plus the worker table of the
agents step and the nodes of the job step. Output, in row chunks:

- mp:File per file (decision 16 of docs/model.md): ``<run>/file/<path>`` on a shared file
  system (by the process's Darshan mount table), ``<run>/node/<host>/file/<path>`` on a node's
  own, ``<process>/file/<path>`` for a process's streams (``<STDERR>``, ...);
- mp:Process per Darshan log of the run: a worker's own process keeps the IRI the agents step
  gives it (``<worker>/process``, typed mp:WorkerProcess there), so thread -> worker process ->
  worker holds; other processes (nanny, launcher, ...) are ``<run>/process/<log name>``. Role,
  pid, command line, clock offset, host and its Darshan counters totalled over its files
  (mp:DarshanCounter ``<process>/counter/<name>``); a worker-role log no worker is proven to
  own names its candidate workers and why it stays apart (decision 30);
- mp:ProcessActivity per process (``<process>/activity``): the activity its I/O outside tasks
  belongs to, associated with the process;
- mp:IOActivity on each task execution with linked I/O: I/O totals, ``prov:used`` files and
  ``prov:qualifiedUsage``;
- per (activity, file, link status): reads as an mp:IOUsage (bytes, operation count, first/last
  time, offset range, time in I/O); writes as an mp:FileVersion ``prov:wasGeneratedBy`` the
  activity with an mp:IOGeneration carrying the same figures, ``prov:wasRevisionOf`` the file's
  previous version (versions numbered by the time they were complete: their last write);
- with ``io_detail="segments"``, every traced call as an mp:IOSegment ``mp:aggregatedBy`` its
  usage or generation, and the non-zero POSIX/STDIO/MPI-IO counters per process and file
  (mp:DarshanRecord with its mp:DarshanCounter nodes; files only opened, stat'ed or mapped
  appear then too).

All grouping is done with pandas/numpy over whole columns; rows are sorted by IRI-defining values
so the output never depends on the order the logs were read in. Nothing is emitted when the run
has no Darshan logs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.block import (
    Block,
    Kind,
    group_lists,
    lit_double,
    lit_int,
    lit_str,
    lit_time,
)
from metaprov.mapping.environment import add_env_columns
from metaprov.mapping.terms import MP, PROV, RDF, XSD, as_text_array, base_types, concat

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

log = logging.getLogger("metaprov")
LARGE = pa.large_string()
#: Link statuses (metaprov.link.STATUSES) in the order their codes are assigned here.
STATUS = ("linked", "process", "ambiguous", "unlinked")
OPS = ("read", "write")
#: (predicate, values for every row or a constant, kind, datatype): one column of a block.
Col = tuple[str, Any, Kind, str | None]

#: File-system types (as Darshan's mount table names them) that one path names the same file on
#: every node: parallel and network file systems (decision 16).
SHARED_FS = frozenset(
    """lustre gpfs nfs nfs4 dvs beegfs cephfs ceph cifs smb3 pvfs2 orangefs panfs wekafs
    glusterfs fuse.glusterfs""".split()
)
#: Names Darshan gives a process's own streams (``<STDIN>``, ``<STDOUT>``, ``<STDERR>``, ...).
_PSEUDO = re.compile(r"^<[^/<>]*>$")
#: Scope of a file's identity: one file for the run, per node, per process (decision 16).
SCOPES = ("shared", "node", "process")


def _mounts(text: Any) -> list[tuple[str, str]]:
    """(mount point, fs type) of a Darshan mount table (``type<TAB>point`` lines), shortest
    point first, so a longer (more specific) point assigned later wins."""
    out = []
    for line in str(text or "").split("\n"):
        fs, _, point = line.partition("\t")
        if fs and point.startswith("/"):
            out.append((point.rstrip("/") or "/", fs))
    return sorted(set(out), key=lambda m: (len(m[0]), m))


def _fs_types(paths: pa.Array, table: list[tuple[str, str]]) -> np.ndarray:
    """The fs type of each path's longest matching mount point ("" when none matches)."""
    fs = np.full(len(paths), "", dtype=object)
    for point, kind in table:
        if point == "/":
            hit = pc.starts_with(paths, "/")
        else:
            hit = pc.or_(pc.equal(paths, point), pc.starts_with(paths, point + "/"))
        fs[np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), dtype=bool)] = kind
    return fs


def file_identity(
    logs: pd.DataFrame, proc: np.ndarray, paths: pa.Array, hosts: pd.Series | None = None
) -> pd.DataFrame:
    """Scope, fs type and host of each (process, path) pair (decision 16).

    Args:
        logs: one row per traced process (``darshan_logs`` columns ``mounts`` and ``hostname``).
        proc: row of ``logs`` for each pair.
        paths: the path of each pair.
        hosts: the node host of each row of ``logs`` (default: its Darshan host name).

    Returns:
        one row per pair: ``scope`` (``shared``: on a parallel/network file system by the
        process's mount table, one file for every node; ``node``: elsewhere, one file per host;
        ``process``: a per-process stream such as ``<STDERR>``, or a node file of a process
        whose host is unknown), ``fs`` (the mount's type, None when no mount matches) and
        ``host``.
    """
    n = len(paths)
    fs = np.full(n, "", dtype=object)
    mounts = logs["mounts"].astype(object) if "mounts" in logs else pd.Series([None] * len(logs))
    table_of = mounts.fillna("").to_numpy()[proc] if n else np.zeros(0, object)
    for text in pd.unique(table_of):
        sel = np.flatnonzero(table_of == text)
        fs[sel] = _fs_types(paths.take(pa.array(sel)), _mounts(text))
    host_col = logs["hostname"] if hosts is None else hosts
    host = host_col.astype(object).to_numpy()[proc] if n else np.zeros(0, object)
    has_host = pd.notna(host)
    pseudo = np.asarray(
        pc.fill_null(pc.match_substring_regex(paths, _PSEUDO.pattern), False).to_numpy(
            zero_copy_only=False
        ),
        dtype=bool,
    )
    shared = np.isin(fs, list(SHARED_FS))
    scope = np.where(pseudo | (~shared & ~has_host), "process", np.where(shared, "shared", "node"))
    return pd.DataFrame(
        {
            "scope": scope,
            "fs": pd.Series(fs, dtype=object).replace("", None).to_numpy(),
            "host": np.where(scope == "node", host, None),
        }
    )


@dataclass
class FileTable:
    """The files of a run's I/O, one row per identity (decision 16), sorted by IRI.

    Attributes:
        iri, path: IRI and path of each file.
        scope, fs, host, owner: per file, ``shared``/``node``/``process``, the fs type of its
            mount (None: unknown), its node host (node scope) and its process IRI (process
            scope).
        pairs: ``<process row>\\x1f<path>`` of every (process, path) pair seen; ``pair_file``
            the file of each.
    """

    iri: pa.Array
    path: pa.Array
    scope: np.ndarray
    fs: np.ndarray
    host: np.ndarray
    owner: pa.Array
    pairs: pd.Index
    pair_file: np.ndarray

    def __len__(self) -> int:
        return len(self.iri)

    def codes(self, proc: Any, paths: pa.Array) -> np.ndarray:
        """The file (row) of each (process row, path); -1 for a pair never seen."""
        keys = _pair_keys(np.asarray(proc, dtype=np.int64), paths)
        pos = _codes(keys, self.pairs)
        return np.where(pos >= 0, self.pair_file[np.maximum(pos, 0)], -1)


def _pair_keys(proc: np.ndarray, paths: pa.Array) -> pa.Array:
    return concat(pa.array(proc.astype(str), LARGE), "\x1f", as_text_array(paths))


def _file_table(
    ctx: MapContext, procs: pd.DataFrame, proc_iri: pa.Array, proc: np.ndarray, paths: pa.Array
) -> FileTable:
    """Identify the files behind the (process row, path) pairs of a run (decision 16)."""
    iris = ctx.iris
    keys = _pair_keys(proc, paths)
    enc = pc.dictionary_encode(keys)
    first = np.unique(enc.indices.to_numpy(zero_copy_only=False), return_index=True)[1]
    p_proc, p_path = proc[first], paths.take(pa.array(first))
    # np.unique returns the first row of each dictionary entry in dictionary order
    pairs = pd.Index(enc.dictionary.to_numpy(zero_copy_only=False), dtype=object)
    node_host, _ = _node_of(ctx, procs["hostname"].astype(object))
    ident = file_identity(procs, p_proc, p_path, hosts=node_host)
    scope = ident["scope"].to_numpy()
    host = ident["host"].to_numpy()
    owner = proc_iri.take(pa.array(p_proc))
    shared_iri = iris.files(p_path)
    node_iri = iris.node_files(iris.nodes(pd.Series(host).fillna("")), p_path)
    own_iri = iris.process_files(owner, p_path)
    iri = pc.if_else(
        pa.array(scope == "shared"),
        shared_iri,
        pc.if_else(pa.array(scope == "node"), node_iri, own_iri),
    )
    uniq, first_of, pair_file = np.unique(
        np.asarray(iri.to_numpy(zero_copy_only=False), dtype=object),
        return_index=True,
        return_inverse=True,
    )
    take = pa.array(first_of)
    is_proc = scope[first_of] == "process"
    return FileTable(
        iri=pa.array(uniq, LARGE),
        path=p_path.take(take),
        scope=scope[first_of],
        fs=ident["fs"].to_numpy()[first_of],
        host=host[first_of],
        owner=pc.if_else(pa.array(is_proc), owner.take(take), pa.scalar(None, LARGE)),
        pairs=pairs,
        pair_file=pair_file.reshape(-1),
    )


@dataclass
class IOTables:
    """The I/O of a run, grouped once per export and shared by the blocks.

    Attributes:
        procs: one row per traced process of the run, sorted by log name: the ``darshan_logs``
            columns (start/end clock-corrected) plus worker, clock_offset, mapped (the worker's
            own process) and pid_out (the pid unless the agents step wrote it already).
        proc_iri, proc_act: IRIs of the processes and of their activities.
        proc_code: position of each process activity in ``acts``.
        files: the files of the run (:class:`FileTable`, sorted by IRI; codes index it).
        acts: IRI of every activity with I/O: task executions (by key, then attempt), then
            process activities (by log name).
        act_task: whether each activity is a task execution.
        act_row: the task row (in the tasks step's key index) of each task-execution activity.
        agg: one row per (activity, file, operation, status): codes, sums, extremes; sorted.
        agg_iri: IRI of each aggregate (usage or generation).
        version_iri: IRI of the file version of each write aggregate (unused for reads).
        seg: per traced call of the run (only with segment detail): aggregate row and its own
            columns; None otherwise.
    """

    procs: pd.DataFrame
    proc_iri: pa.Array
    proc_act: pa.Array
    proc_code: np.ndarray
    files: FileTable
    acts: pa.Array
    act_task: np.ndarray
    act_row: np.ndarray
    agg: pd.DataFrame
    agg_iri: pa.Array
    version_iri: pa.Array
    seg: pd.DataFrame | None


def add_io(ctx: MapContext) -> Iterator[Block]:
    """Files, processes, process activities, I/O usages/generations, counters (and segments)."""
    rec = ctx.records
    if rec.darshan is None or rec.io is None:
        return
    t: IOTables = ctx.cached("io_tables", lambda: io_tables(ctx))
    if not len(t.procs):
        return
    yield from _file_blocks(ctx, t)
    yield from _process_blocks(ctx, t)
    yield from _activity_blocks(ctx, t)
    yield from _usage_blocks(ctx, t)
    yield from _generation_blocks(ctx, t)
    yield from _counter_blocks(ctx, t)
    if ctx.io_detail == "segments":
        yield from _segment_blocks(ctx, t)


# ---------------------------------------------------------------------------------------------
# grouping
# ---------------------------------------------------------------------------------------------


def _paths(df: pd.DataFrame) -> pa.Array:
    """File paths; a record id missing from the name map becomes ``darshan-record:<id>``."""
    path = as_text_array(df["path"])
    if path.null_count:
        ids = concat("darshan-record:", pc.cast(pa.Array.from_pandas(df["record_id"]), LARGE))
        path = pc.coalesce(path, ids)
    return path


def _codes(values: pa.Array, index: pd.Index) -> np.ndarray:
    """Position of each value in ``index``, looking each distinct value up once."""
    enc = pc.dictionary_encode(values)
    pos = index.get_indexer(enc.dictionary.to_numpy(zero_copy_only=False))
    return pos[enc.indices.to_numpy(zero_copy_only=False)]


def _processes(ctx: MapContext) -> pd.DataFrame:
    """Traced processes of the run: logs in the run that could be read, sorted by log name."""
    from metaprov.mapping.agents import worker_table

    dr = ctx.records.darshan
    io = ctx.records.io
    logs = dr.logs
    in_run = logs["in_run"].fillna(True).astype(bool)
    readable = logs["status"].astype(object).ne("unreadable")
    p = logs.loc[in_run & readable].sort_values("log", kind="stable").reset_index(drop=True)
    cols = ["log", "worker", "clock_offset"]
    p = p.merge(io.processes[cols].drop_duplicates("log"), on="log", how="left")
    worker = p["worker"].astype(object)
    # The worker's own process: the agents step already describes <worker>/process. If two logs
    # claim one worker (reported by link_io), only the first keeps that IRI.
    p["mapped"] = worker.notna() & ~worker.duplicated()
    offset = pd.to_numeric(p["clock_offset"], errors="coerce").fillna(0.0)
    shift = pd.to_timedelta(np.rint(offset.to_numpy() * 1e6).astype(np.int64), unit="us")
    p["start"] = p["start"] - shift
    p["end"] = p["end"] - shift
    # A pid the agents step already wrote (worker pid from the capture plugin) is not repeated.
    w = worker_table(ctx)
    known = dict(zip(w["address"].astype(str), w["pid"], strict=True))
    recorded = worker.where(p["mapped"]).map(known).astype("Int64")
    same = (recorded == p["pid"].astype("Int64")).fillna(False).to_numpy(dtype=bool)
    p["pid_out"] = p["pid"].astype("Int64").mask(same)
    return p


def file_labels(logs: pd.DataFrame, seg_logs: Any, paths: Any) -> pd.Series:
    """A readable identity of the file behind each (log, path) row (decision 16), for tables
    and counts outside the export: the path on a shared file system, ``<path> @ <host>`` on a
    node's own, ``<path> @ <log>`` for a per-process stream. Null paths stay null."""
    path = pd.Series(np.asarray(as_text_array(paths).to_numpy(zero_copy_only=False), dtype=object))
    logs_s = pd.Series(
        np.asarray(as_text_array(seg_logs).to_numpy(zero_copy_only=False), dtype=object)
    )
    proc = pd.Index(logs["log"].astype(object)).get_indexer(logs_s)
    key = pd.Series(proc.astype(str)) + "\x1f" + path.fillna("")
    codes, uniq = pd.factorize(key, sort=False)
    first = pd.Series(np.arange(len(key))).groupby(codes).first().to_numpy() if len(key) else []
    u_proc = proc[first] if len(key) else np.zeros(0, np.int64)
    ok = u_proc >= 0
    labels = np.asarray(path.to_numpy()[first] if len(key) else [], dtype=object)
    if ok.any():
        sel = np.flatnonzero(ok)
        ident = file_identity(
            logs.reset_index(drop=True), u_proc[sel], pa.array(labels[sel].tolist(), LARGE)
        )
        host = ident["host"].to_numpy()
        scope = ident["scope"].to_numpy()
        log_names = logs["log"].astype(object).to_numpy()[u_proc[sel]]
        labels[sel] = [
            p if sc == "shared" else f"{p} @ {h if sc == 'node' else ln}"
            for p, sc, h, ln in zip(labels[sel], scope, host, log_names, strict=True)
        ]
    out = pd.Series(labels[codes] if len(key) else [], dtype=object)
    return out.where(path.notna().to_numpy(), None)


def unmatched_workers(ctx: MapContext, procs: pd.DataFrame) -> pd.DataFrame:
    """Why each worker-role process that is no worker's own stays apart (decision 30).

    A Darshan log is a worker's own process when the data prove it (``metaprov.link_io``: the
    worker's task threads appear in its DXT segments, or the capture recorded the worker's pid);
    the two nodes are then one (``<worker>/process``). Otherwise the log stays a process of its
    own, with the workers it may be (``candidates``: workers without a traced process, on its
    node when the proven pairs show which worker host its Darshan host name is) and the reason
    (``reason``); never merged by elimination.

    Returns:
        one row per row of ``procs``: ``candidates`` (list of worker addresses, empty for
        matched or non-worker processes) and ``reason`` (None for those).
    """
    from metaprov.mapping.agents import worker_hosts, worker_table

    n = len(procs)
    out = pd.DataFrame({"candidates": [[] for _ in range(n)], "reason": [None] * n})
    todo = procs["role"].astype(object).eq("worker").to_numpy() & ~procs["mapped"].to_numpy(
        dtype=bool
    )
    if not todo.any():
        return out
    w = worker_table(ctx)
    w_host = dict(zip(w["address"].astype(str), worker_hosts(ctx).astype(object), strict=True))
    matched = set(procs.loc[procs["mapped"], "worker"].astype(str))
    free = [a for a in w["address"].astype(str) if a not in matched]
    # Darshan host name -> worker hosts, as the proven pairs show them
    seen: dict[str, set[str]] = {}
    for h, a in zip(procs["hostname"], procs["worker"], strict=True):
        if pd.notna(h) and pd.notna(a):
            seen.setdefault(str(h), set()).add(str(w_host.get(str(a))))
    ex = ctx.records.executions
    threads = set(ex.loc[ex["thread"].notna(), "worker"].dropna().astype(str))
    any_threads = bool(len(threads))
    for i in np.flatnonzero(todo):
        h = procs["hostname"].iloc[i]
        if pd.notna(h) and str(h) in seen:
            cands = [a for a in free if str(w_host.get(a)) in seen[str(h)]]
            where = f"on its node ({h})"
        elif pd.notna(h) and any(str(w_host.get(a)) == str(h) for a in free):
            cands = [a for a in free if str(w_host.get(a)) == str(h)]
            where = f"on its node ({h})"
        else:
            cands = free
            where = "in the run (which worker host its Darshan host name is, no record shows)"
        if not any_threads:
            why = "the run records no thread id of any task execution, so no thread ties a log to a worker"
        else:
            why = "none of them ran a task with a recorded thread id that appears in this log"
        if not cands:
            reason = (
                f"no worker is left without a traced process {where}: a worker process the "
                "Dask records do not name"
            )
        elif len(cands) == 1:
            reason = (
                f"one worker without a traced process {where} ({cands[0]}), but {why} and no pid "
                "is recorded: not merged by elimination (a worker's process may be untraced)"
            )
        else:
            reason = (
                f"{len(cands)} workers without a traced process {where}; {why}, and no pid "
                "is recorded: which one it is cannot be told"
            )
        out.at[i, "candidates"] = cands
        out.at[i, "reason"] = reason
    for reason, n_logs in out["reason"].dropna().value_counts(sort=False).sort_index().items():
        log.info(
            "Darshan: %d worker process log(s) not merged with a worker: %s (mp:unmatchedReason; "
            "docs/model.md, decision 30)",
            n_logs,
            reason,
        )
    return out


def _node_of(ctx: MapContext, hosts: pd.Series) -> tuple[pd.Series, list[str]]:
    """Node host name for each Darshan host name, and the hosts no other step describes.

    Darshan records the short host name (``x3109c0s37b0n0``); the node lists may hold the full
    name (``x3109c0s37b0n0.hsn.cm...``): a unique match on the first label is the same node.
    """
    from metaprov.mapping.job import node_roles

    known = sorted(set(node_roles(ctx)["host"].astype(str)))
    by_label: dict[str, list[str]] = {}
    for h in known:
        by_label.setdefault(h.split(".")[0], []).append(h)
    table: dict[str, str] = {}
    for h in sorted(set(hosts.dropna().astype(str))):
        if h in known:
            table[h] = h
        else:
            cands = by_label.get(h.split(".")[0], [])
            table[h] = cands[0] if len(cands) == 1 else h
    mapped = hosts.astype(object).map(table)
    new = sorted({v for v in table.values() if v not in known})
    return mapped, new


def io_tables(ctx: MapContext) -> IOTables:
    """Group the run's traced calls per (activity, file, operation, link status).

    The steps: the traced processes and their IRIs; the traced calls of those processes; the
    activity of each call; the file of each call; the aggregates and their file versions; the
    aggregates' IRIs; with segment detail, the calls themselves.
    """
    iris = ctx.iris
    procs = _processes(ctx)
    w_iri = iris.processes(iris.workers(procs["worker"].astype(object)))
    o_iri = iris.os_processes(procs["log"])
    proc_iri = pc.if_else(pa.array(procs["mapped"].to_numpy(dtype=bool)), w_iri, o_iri)
    proc_act = iris.process_activities(proc_iri)
    calls = _calls(ctx.records, procs)
    acts = _activities(ctx, calls, proc_act)
    ft, path = _call_files(ctx, procs, proc_iri, calls)
    g, grouped, agg = _aggregates(calls, acts.act, path)
    agg["version"] = _versions(agg)
    version_iri, agg_iri = _aggregate_iris(ctx, agg, ft, acts.acts)
    seg_table = _segment_table(calls, grouped) if ctx.io_detail == "segments" and len(g) else None
    return IOTables(
        procs=procs,
        proc_iri=proc_iri,
        proc_act=proc_act,
        proc_code=acts.n_task + np.arange(len(procs)),
        files=ft,
        acts=acts.acts,
        act_task=np.arange(len(acts.acts)) < acts.n_task,
        act_row=acts.task_row,
        agg=agg,
        agg_iri=agg_iri,
        version_iri=version_iri,
        seg=seg_table,
    )


@dataclass
class _Calls:
    """The traced calls of the run's processes: Darshan segments, their links, their process
    (row of the processes table) and link status (index into ``STATUS``)."""

    seg: pd.DataFrame
    links: pd.DataFrame
    proc: np.ndarray
    status: np.ndarray

    @property
    def linked(self) -> np.ndarray:
        return self.status == 0


def _calls(rec: Any, procs: pd.DataFrame) -> _Calls:
    seg = rec.darshan.segments
    links = rec.io.segments
    if len(links) != len(seg):
        from metaprov.errors import UsageError

        raise UsageError(
            f"records.io has {len(links)} segment links for {len(seg)} Darshan segments",
            hint="run metaprov.link_io(records) again on these records",
        )
    log_index = pd.Index(procs["log"].astype(object))
    proc = _codes(as_text_array(seg["log"]), log_index) if len(seg) else np.zeros(0, np.int64)
    inc = proc >= 0
    seg = seg.loc[inc].reset_index(drop=True)
    lk = links.loc[inc].reset_index(drop=True)
    st = np.asarray(
        pc.fill_null(
            pc.index_in(as_text_array(lk["status"]), value_set=pa.array(STATUS, LARGE)),
            STATUS.index("unlinked"),
        ).to_numpy(zero_copy_only=False),
        dtype=np.int64,
    )
    return _Calls(seg, lk, proc[inc], st)


@dataclass
class _Activities:
    """Every activity with I/O (task executions, then process activities) and each call's."""

    acts: pa.Array
    n_task: int
    task_row: np.ndarray  # the task row of each task-execution activity
    act: np.ndarray  # per call: index into acts


def _activities(ctx: MapContext, calls: _Calls, proc_act: pa.Array) -> _Activities:
    """Activity of each call: its task execution when linked, else its process's activity.

    Executions are found in the run's key space shared with the tasks step (its IRIs reused),
    ordered by key then attempt; process activities follow, by log name.
    """
    from metaprov.mapping.tables import task_index

    lk, linked = calls.links, calls.linked
    idx = task_index(ctx)
    key_row = idx.rows(as_text_array(lk.loc[linked, "key"]))
    attempt = lk.loc[linked, "attempt"].fillna(0).to_numpy(dtype=np.int64)
    width = int(attempt.max()) + 1 if len(attempt) else 1
    pair, pair_code = np.unique(key_row * width + attempt, return_inverse=True)
    task_acts = ctx.iris.executions(
        idx.task_iri.take(pa.array(pair // width)), pa.array(pair % width)
    )
    n_task = len(task_acts)
    act = n_task + calls.proc
    act[linked] = pair_code.reshape(-1)
    return _Activities(pa.concat_arrays([task_acts, proc_act]), n_task, pair // width, act)


def _call_files(
    ctx: MapContext, procs: pd.DataFrame, proc_iri: pa.Array, calls: _Calls
) -> tuple[FileTable, np.ndarray]:
    """The files of the run and the file of each call.

    Files come from the traced calls (and, with segment detail, the counter records), each
    identified by run + path, run + host + path or process + path (decision 16).
    """
    seg, proc = calls.seg, calls.proc
    seg_path = _paths(seg)
    pair_proc, pair_path = [proc], [seg_path]
    if ctx.io_detail == "segments":
        # the per-file counter records name files that were only opened, stat'ed or mapped
        counters = ctx.records.darshan.counters
        c_proc = pd.Index(procs["log"].astype(object)).get_indexer(counters["log"].astype(object))
        c_in = c_proc >= 0
        pair_proc.append(c_proc[c_in])
        pair_path.append(_paths(counters.loc[c_in]))
    ft = _file_table(ctx, procs, proc_iri, np.concatenate(pair_proc), pa.concat_arrays(pair_path))
    path = ft.codes(proc, seg_path) if len(seg) else np.zeros(0, np.int64)
    return ft, path


def _aggregates(
    calls: _Calls, act: np.ndarray, path: np.ndarray
) -> tuple[pd.DataFrame, Any, pd.DataFrame]:
    """The calls as a frame, grouped per (activity, file, operation, status), and the groups'
    sums and extremes (sorted by those keys)."""
    seg, lk = calls.seg, calls.links
    offset = seg["offset"].fillna(0).to_numpy(dtype=np.int64)
    length = seg["length"].fillna(0).to_numpy(dtype=np.int64)
    start, end = lk["start"], lk["end"]
    g = pd.DataFrame(
        {
            "act": act,
            "path": path,
            "op": (seg["op"].astype(object) == "write").to_numpy(dtype=np.int64),
            "st": calls.status,
            "length": length,
            "offset": offset,
            "end_off": offset + length,
            "start": start,
            "end": end,
            "dur": (end - start).dt.total_seconds().to_numpy(),
        }
    )
    grouped = g.groupby(["act", "path", "op", "st"], sort=True)
    agg = grouped.agg(
        bytes=("length", "sum"),
        count=("length", "size"),
        first=("start", "min"),
        last=("end", "max"),
        min_off=("offset", "min"),
        end_off=("end_off", "max"),
        io_time=("dur", "sum"),
    ).reset_index()
    return g, grouped, agg


def _versions(agg: pd.DataFrame) -> np.ndarray:
    """Writes: file versions numbered per file by their generation instant, the last write (then
    activity IRI), so that wasRevisionOf runs forward in time (decision 16); 0 for reads."""
    is_w = agg["op"].to_numpy() == 1
    w = agg.loc[is_w, ["path", "last", "act", "st"]]
    w = w.sort_values(["path", "last", "act", "st"], kind="stable")
    version = np.zeros(len(agg), np.int64)
    version[w.index.to_numpy()] = w.groupby("path").cumcount().to_numpy() + 1
    return version


def _aggregate_iris(
    ctx: MapContext, agg: pd.DataFrame, ft: FileTable, acts: pa.Array
) -> tuple[pa.Array, pa.Array]:
    """The IRI of each write's file version, and of each aggregate: the generation of a write,
    the usage of a read (labelled per operation and status: read, write-unlinked, ...)."""
    iris = ctx.iris
    label_table = pa.array(
        [o if i <= 1 else f"{o}-{name}" for o in OPS for i, name in enumerate(STATUS)], LARGE
    )
    labels = label_table.take(pa.array(agg["op"].to_numpy() * len(STATUS) + agg["st"].to_numpy()))
    a_path = pa.array(agg["path"].to_numpy())
    version_iri = iris.file_versions(ft.iri.take(a_path), agg["version"])
    # an activity is one process on one host: its path names one file
    usage_iri = iris.io_qualifiers(
        acts.take(pa.array(agg["act"].to_numpy())), labels, ft.path.take(a_path)
    )
    is_w = agg["op"].to_numpy() == 1
    return version_iri, pc.if_else(pa.array(is_w), iris.generations(version_iri), usage_iri)


def _segment_table(calls: _Calls, grouped: Any) -> pd.DataFrame:
    """Each call with its aggregate row (``gid``), its ordinal in it and the link's evidence."""
    seg, lk = calls.seg, calls.links
    s = pd.DataFrame(
        {
            "gid": grouped.ngroup().to_numpy(),
            "start": lk["start"],
            "end": lk["end"],
            "offset": seg["offset"],
            "length": seg["length"],
            "op": seg["op"].astype(object),
            "module": seg["module"].astype(object),
            "pthread": seg["pthread"],
            "rule": lk["rule"].astype(object),
            "reason": lk["reason"].astype(object),
            # the evidence of the link (docs/darshan.md §3)
            "clock": lk["clock"].astype(object),
            "clock_offset": lk["clock_offset"].astype("float64"),
            "offset_unc": lk["offset_uncertainty"].astype("float64"),
            "candidates": lk["candidates"].astype(object),
        }
    )
    s = s.sort_values(["gid", "start", "offset"], kind="stable").reset_index(drop=True)
    s["ordinal"] = s.groupby("gid").cumcount()
    return s


# ---------------------------------------------------------------------------------------------
# blocks
# ---------------------------------------------------------------------------------------------


def _chunked(
    subjects: pa.Array,
    rdf_type: str,
    columns: list[Col],
    step: int,
) -> Iterator[Block]:
    """Blocks of at most ``step`` rows from whole-table columns (pyarrow arrays or constants)."""
    n = len(subjects)
    for a in range(0, n, step):
        k = min(step, n - a)
        blk = Block(subjects.slice(a, k))
        blk.add(RDF.type, rdf_type)
        for pred, vals, kind, dt in columns:
            if vals is not None:
                blk.add(pred, vals if isinstance(vals, str) else vals.slice(a, k), kind, dt)
        yield blk


def _file_blocks(ctx: MapContext, t: IOTables) -> Iterator[Block]:
    f = t.files
    host = pd.Series(f.host, dtype=object)
    cols: list[Col] = [
        (MP.path, lit_str(f.path), "str", None),
        (MP.run, ctx.iris.run, "iri", None),
        (MP.fileScope, lit_str(pd.Series(f.scope, dtype=object)), "str", None),
        (MP.fileSystem, lit_str(pd.Series(f.fs, dtype=object)), "str", None),
        # a node-local file lies on its node; a per-process file belongs to its process
        (PROV.atLocation, _node_iris(ctx, host), "iri", None),
        (MP.process, f.owner, "iri", None),
    ]
    yield from _chunked(f.iri, MP.File, cols, ctx.chunk_rows)


def _node_iris(ctx: MapContext, hosts: pd.Series) -> pa.Array:
    """Node IRI per host; null where the host is null."""
    known = hosts.notna().to_numpy()
    iri = ctx.iris.nodes(hosts.fillna(""))
    return pc.if_else(pa.array(known), iri, pa.scalar(None, LARGE))


#: How a counter adds up over the files of a process: its first start and last end timestamps,
#: the sum of counts, bytes, seconds and size-histogram bins. Per-file attributes (alignment,
#: mode, the common access sizes and strides, maxima, rank statistics) do not add up and are
#: only in the per-file records (``io_detail="segments"``).
_NOT_ADDITIVE = re.compile(
    r"ALIGNMENT|_MODE$|_ACCESS\d_|_STRIDE\d_|MAX_|FASTEST_|SLOWEST_|VARIANCE_|_HINTS$|_VIEWS$"
)


def _counter_rule(name: str) -> str:
    if name.endswith("_START_TIMESTAMP"):
        return "min"
    if name.endswith("_END_TIMESTAMP"):
        return "max"
    return "skip" if _NOT_ADDITIVE.search(name) else "sum"


def _process_counters(ctx: MapContext, t: IOTables) -> tuple[pd.DataFrame, pa.Array]:
    """Per process and counter, the total over its files (see :data:`_NOT_ADDITIVE`)."""

    def make() -> tuple[pd.DataFrame, pa.Array]:
        c = ctx.records.darshan.counters
        proc = pd.Index(t.procs["log"]).get_indexer(c["log"])
        keep = proc >= 0
        names = c["counter"].astype(object)
        # one decision per distinct counter name (a few dozen), spread back over the rows
        rules = pd.Series({n: _counter_rule(str(n)) for n in names[keep].unique()}, dtype=object)
        rule = names.map(rules)
        df = pd.DataFrame(
            {"proc": proc, "counter": names, "rule": rule, "value": c["value"].astype("float64")}
        )
        df = df[keep & rule.ne("skip").to_numpy(dtype=bool)]
        g = df.groupby(["proc", "counter"], sort=True)
        out = g.agg(rule=("rule", "first"), total=("value", "sum"), lo=("value", "min"))
        out["hi"] = g["value"].max()
        out["value"] = np.select(
            [out["rule"].eq("min"), out["rule"].eq("max")], [out["lo"], out["hi"]], out["total"]
        )
        out = out.reset_index()[["proc", "counter", "value"]]
        iris = ctx.iris.process_counters(
            t.proc_iri.take(pa.array(out["proc"].to_numpy())), out["counter"]
        )
        return out, iris

    return ctx.cached("io_process_counters", make)


def _counter_records(ctx: MapContext, t: IOTables) -> tuple[pd.DataFrame, pa.Array, pa.Array]:
    """(counter rows sorted by record then name, record IRI per row, record IRI per record)."""

    def make() -> tuple[pd.DataFrame, pa.Array, pa.Array]:
        c = ctx.records.darshan.counters
        proc = pd.Index(t.procs["log"]).get_indexer(c["log"])
        keep = proc >= 0
        c = c.loc[keep].reset_index(drop=True)
        c = c.assign(proc=proc[keep], path=_paths(c).to_numpy(zero_copy_only=False))
        c = c.sort_values(
            ["proc", "module", "rank", "record_id", "counter"], kind="stable"
        ).reset_index(drop=True)
        rec_code = c.groupby(["proc", "module", "rank", "record_id"], sort=True).ngroup()
        c["rec"] = rec_code.to_numpy()
        first = c.drop_duplicates("rec")
        rec_iri = ctx.iris.darshan_records(
            t.proc_iri.take(pa.array(first["proc"].to_numpy())),
            first["module"].astype(object),
            first["rank"],
            first["record_id"],
        )
        return c, rec_iri.take(pa.array(c["rec"].to_numpy())), rec_iri

    return ctx.cached("io_counters", make)


def _process_blocks(ctx: MapContext, t: IOTables) -> Iterator[Block]:
    iris = ctx.iris
    p = t.procs
    mapped = p["mapped"].to_numpy(dtype=bool)
    # every Darshan host is a node (its node-local files lie there); a worker's own process has
    # its node from the agents step
    node_host, new_hosts = _node_of(ctx, p["hostname"].astype(object))
    node_host = node_host.where(~mapped)
    totals, total_iri = _process_counters(ctx, t)
    counters = group_lists(totals["proc"].to_numpy(), total_iri, len(p)) if len(totals) else None
    records = None
    if ctx.io_detail == "segments":
        c, _, rec_iri = _counter_records(ctx, t)
        first = c.drop_duplicates("rec")
        records = group_lists(first["proc"].to_numpy(), rec_iri, len(p)) if len(first) else None
    cols: list[Col] = [
        (MP.processRole, lit_str(p["role"].astype(object)), "str", None),
        (MP.pid, lit_int(p["pid_out"]), "typed", XSD.integer),
        (MP.darshanLog, lit_str(p["log"].astype(object)), "str", None),
        (MP.commandLine, lit_str(p["cmdline"].astype(object)), "str", None),
        (MP.clockOffset, lit_double(p["clock_offset"].astype("float64")), "typed", XSD.double),
        # the worker's own process has its node from the agents step
        (MP.node, iris.nodes(node_host), "iri", None),
        (MP.run, iris.run, "iri", None),
        (MP.counter, counters, "iri", None),
        (MP.darshanRecord, records, "iri", None),
    ]
    um = unmatched_workers(ctx, p)
    if um["reason"].notna().any():
        rows = np.repeat(np.arange(len(p)), um["candidates"].map(len).to_numpy())
        flat = [a for c in um["candidates"] for a in c]
        cols.append(
            (MP.candidateWorker, group_lists(rows, iris.workers(flat), len(p)), "iri", None)
        )
        cols.append((MP.unmatchedReason, lit_str(um["reason"]), "str", None))
    for blk in _chunked(t.proc_iri, MP.Process, cols, ctx.chunk_rows):
        blk.restates = True  # a worker's own process is typed prov:SoftwareAgent already
        yield blk
    other = t.proc_iri.filter(pa.array(~mapped))
    if len(other):
        # the PROV types of the other processes (nanny, launcher, ...), stated once
        ob = Block(other)
        for cls in base_types(MP.Process):
            ob.add(RDF.type, cls)
        add_env_columns(ctx, ob, "agent")  # a traced process's environment (Mofka runs)
        yield ob
    if new_hosts:
        nb = Block(iris.nodes(new_hosts))
        nb.add(RDF.type, MP.Node)
        nb.add(MP.hostname, lit_str(new_hosts), "str")
        nb.add(MP.run, iris.run)
        yield nb


def _totals(t: IOTables, n: int, rows: np.ndarray) -> list[Col]:
    """Per activity (``rows`` maps activity code -> block row): bytes and counts, and its files."""
    a = t.agg
    row = rows[a["act"].to_numpy()]
    ok = row >= 0
    cols: list[Col] = []
    for op, b_pred, c_pred in (
        (0, MP.bytesRead, MP.readCount),
        (1, MP.bytesWritten, MP.writeCount),
    ):
        sel = ok & (a["op"].to_numpy() == op)
        total_b = np.bincount(row[sel], weights=a["bytes"].to_numpy()[sel], minlength=n)
        total_c = np.bincount(row[sel], weights=a["count"].to_numpy()[sel], minlength=n)
        has = total_c > 0
        cols.append(
            (b_pred, lit_int(pa.array(total_b.astype(np.int64), mask=~has)), "typed", XSD.integer)
        )
        cols.append(
            (c_pred, lit_int(pa.array(total_c.astype(np.int64), mask=~has)), "typed", XSD.integer)
        )
    reads = ok & (a["op"].to_numpy() == 0)
    # prov:used once per (activity, file), even when reads of one file have several statuses
    rp = pd.DataFrame({"row": row[reads], "path": a["path"].to_numpy()[reads]}).drop_duplicates()
    used = group_lists(rp["row"].to_numpy(), t.files.iri.take(pa.array(rp["path"].to_numpy())), n)
    qual = group_lists(row[reads], t.agg_iri.filter(pa.array(reads)), n)
    cols.append((PROV.used, used, "iri", None))
    cols.append((PROV.qualifiedUsage, qual, "iri", None))
    return cols


def _activity_blocks(ctx: MapContext, t: IOTables) -> Iterator[Block]:
    # Process activities: one per process, with or without I/O of its own.
    p = t.procs
    n = len(p)
    rows = np.full(len(t.acts), -1, np.int64)
    rows[t.proc_code] = np.arange(n)
    cols: list[Col] = [
        (PROV.wasAssociatedWith, t.proc_iri, "iri", None),
        (PROV.startedAtTime, lit_time(p["start"]), "typed", XSD.dateTime),
        (PROV.endedAtTime, lit_time(p["end"]), "typed", XSD.dateTime),
        *_totals(t, n, rows),
    ]
    yield from _chunked(t.proc_act, MP.ProcessActivity, cols, ctx.chunk_rows)
    # Task executions with linked I/O: a second type, and their I/O columns.
    task_codes = np.flatnonzero(t.act_task)
    if len(task_codes):
        rows = np.full(len(t.acts), -1, np.int64)
        rows[task_codes] = np.arange(len(task_codes))
        subjects = t.acts.take(pa.array(task_codes))
        cols = _totals(t, len(task_codes), rows)
        for blk in _chunked(subjects, MP.IOActivity, cols, ctx.chunk_rows):
            blk.restates = True  # task executions: typed prov:Activity by the tasks step
            yield blk


def _figures(a: pd.DataFrame, op: int) -> list[Col]:
    b_pred, c_pred = (MP.bytesRead, MP.readCount) if op == 0 else (MP.bytesWritten, MP.writeCount)
    return [
        (b_pred, lit_int(a["bytes"].astype("int64")), "typed", XSD.integer),
        (c_pred, lit_int(a["count"].astype("int64")), "typed", XSD.integer),
        (MP.firstTime, lit_time(a["first"]), "typed", XSD.dateTime),
        (MP.lastTime, lit_time(a["last"]), "typed", XSD.dateTime),
        (MP.minOffset, lit_int(a["min_off"].astype("int64")), "typed", XSD.integer),
        (MP.endOffset, lit_int(a["end_off"].astype("int64")), "typed", XSD.integer),
        (MP.ioTime, lit_double(a["io_time"].astype("float64")), "typed", XSD.double),
        (
            MP.linkStatus,
            lit_str(pd.Series(np.array(STATUS, dtype=object)[a["st"].to_numpy()])),
            "str",
            None,
        ),
    ]


def _usage_blocks(ctx: MapContext, t: IOTables) -> Iterator[Block]:
    sel = t.agg["op"].to_numpy() == 0
    if not sel.any():
        return
    a = t.agg.loc[sel].reset_index(drop=True)
    mask = pa.array(sel)
    # the usage's instant: its first read (decision 23)
    cols = [
        (PROV.entity, t.files.iri.take(pa.array(a["path"].to_numpy())), "iri", None),
        (PROV.atTime, lit_time(a["first"]), "typed", XSD.dateTime),
        *_figures(a, 0),
    ]
    yield from _chunked(t.agg_iri.filter(mask), MP.IOUsage, cols, ctx.chunk_rows)


def _generation_blocks(ctx: MapContext, t: IOTables) -> Iterator[Block]:
    sel = t.agg["op"].to_numpy() == 1
    if not sel.any():
        return
    a = t.agg.loc[sel].reset_index(drop=True)
    mask = pa.array(sel)
    versions = t.version_iri.filter(mask)
    gens = t.agg_iri.filter(mask)
    file_of = t.files.iri.take(pa.array(a["path"].to_numpy()))
    act_of = t.acts.take(pa.array(a["act"].to_numpy()))
    # the previous version of the same file (none for version 1)
    v = a["version"].to_numpy()
    prev = ctx.iris.file_versions(file_of, pa.array(np.maximum(v - 1, 1)))
    prev = pc.if_else(pa.array(v > 1), prev, pa.scalar(None, LARGE))
    vcols: list[Col] = [
        (MP.file, file_of, "iri", None),
        (PROV.specializationOf, file_of, "iri", None),
        (PROV.wasGeneratedBy, act_of, "iri", None),
        (PROV.qualifiedGeneration, gens, "iri", None),
        (PROV.wasRevisionOf, prev, "iri", None),
    ]
    yield from _chunked(versions, MP.FileVersion, vcols, ctx.chunk_rows)
    # the generation's instant: its last write (the version is complete); decision 23
    gcols = [
        (PROV.activity, act_of, "iri", None),
        (PROV.atTime, lit_time(a["last"]), "typed", XSD.dateTime),
        *_figures(a, 1),
    ]
    yield from _chunked(gens, MP.IOGeneration, gcols, ctx.chunk_rows)


def _counter_blocks(ctx: MapContext, t: IOTables) -> Iterator[Block]:
    totals, total_iri = _process_counters(ctx, t)
    if len(totals):
        tcols: list[Col] = [
            (MP.counterName, lit_str(totals["counter"]), "str", None),
            (MP.counterValue, lit_double(totals["value"]), "typed", XSD.double),
        ]
        yield from _chunked(total_iri, MP.DarshanCounter, tcols, ctx.chunk_rows)
    if ctx.io_detail != "segments":
        return
    c, rec_of_row, rec_iri = _counter_records(ctx, t)
    if not len(c):
        return
    first = c.drop_duplicates("rec").reset_index(drop=True)
    counter_iri = ctx.iris.darshan_counters(rec_of_row, c["counter"].astype(object))
    counters = group_lists(c["rec"].to_numpy(), counter_iri, len(first))
    file_of = t.files.iri.take(
        pa.array(t.files.codes(first["proc"].to_numpy(), as_text_array(first["path"])))
    )
    rcols: list[Col] = [
        (MP.module, lit_str(first["module"].astype(object)), "str", None),
        (MP.rank, lit_int(first["rank"]), "typed", XSD.integer),
        (MP.file, file_of, "iri", None),
        (MP.counter, counters, "iri", None),
    ]
    yield from _chunked(rec_iri, MP.DarshanRecord, rcols, ctx.chunk_rows)
    ccols: list[Col] = [
        (MP.counterName, lit_str(c["counter"].astype(object)), "str", None),
        (MP.counterValue, lit_double(c["value"].astype("float64")), "typed", XSD.double),
    ]
    yield from _chunked(counter_iri, MP.DarshanCounter, ccols, ctx.chunk_rows)


def _segment_blocks(ctx: MapContext, t: IOTables) -> Iterator[Block]:
    s = t.seg
    if s is None or not len(s):
        return
    step = ctx.chunk_rows
    for a in range(0, len(s), step):
        part = s.iloc[a : a + step]
        agg = t.agg_iri.take(pa.array(part["gid"].to_numpy()))
        blk = Block(ctx.iris.io_segments(agg, part["ordinal"]))
        blk.add(RDF.type, MP.IOSegment)
        blk.add(MP.aggregatedBy, agg)
        blk.add(MP.operation, lit_str(part["op"]), "str")
        blk.add(MP.offset, lit_int(part["offset"]), "typed", XSD.integer)
        blk.add(MP.length, lit_int(part["length"]), "typed", XSD.integer)
        blk.add(PROV.startedAtTime, lit_time(part["start"]), "typed", XSD.dateTime)
        blk.add(PROV.endedAtTime, lit_time(part["end"]), "typed", XSD.dateTime)
        blk.add(MP.callingThread, lit_int(part["pthread"]), "typed", XSD.integer)
        blk.add(MP.module, lit_str(part["module"]), "str")
        blk.add(MP.linkRule, lit_str(part["rule"]), "str")
        blk.add(MP.linkReason, lit_str(part["reason"]), "str")
        blk.add(MP.linkClock, lit_str(part["clock"]), "str")
        blk.add(MP.linkOffset, lit_double(part["clock_offset"]), "typed", XSD.double)
        blk.add(MP.linkOffsetUncertainty, lit_double(part["offset_unc"]), "typed", XSD.double)
        blk.add(MP.linkCandidates, lit_str(part["candidates"]), "str")
        yield blk
