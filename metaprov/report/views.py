"""What a run's report shows, computed from its records: plain tables and arrays, no plotting.

Input: :class:`~metaprov.records.RunRecords` (Darshan I/O linked by :func:`metaprov.link.link_io`
when logs were read). Output: a :class:`RunView` of pandas tables and numpy arrays that
:mod:`metaprov.report.figures` draws, and :func:`facts`, the JSON-ready figures embedded in the
page (what the tests compare with the records).

Everything is columnar: at 10^6 tasks the task stream is binned into a raster (one row per worker
thread, :data:`RASTER_BINS` columns, each coloured by the prefix that used most of it), the longest
:data:`LONGEST_BARS` executions are still drawn one bar each, and transfers and I/O are merged into
bursts; the page says when it does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.analysis.critical_path import COLUMNS as CRITICAL_COLUMNS
from metaprov.analysis.critical_path import longest_path
from metaprov.mapping.fileio import file_labels
from metaprov.records import RunRecords
from metaprov.timeutil import NAT_US, utc_to_us

#: Executions drawn one bar each; above this the task stream is rasterised.
BAR_LIMIT = 100_000
#: In a rasterised task stream, the longest executions still drawn as bars (with hover).
LONGEST_BARS = 10_000
#: Columns of the rasterised task stream.
RASTER_BINS = 1_600
#: Transfer or I/O bars drawn at most (more are merged into wider bursts).
BURST_LIMIT = 20_000
#: Time bins of the worker-occupancy chart.
OCCUPANCY_BINS = 400
#: Largest graph drawn task by task; larger graphs are drawn one node per prefix.
GRAPH_TASK_LIMIT = 2_000
#: Rows of the "slowest tasks" and "erred or retried" tables.
TABLE_ROWS = 50
#: An I/O burst: segments of one thread less than this apart (seconds) are one burst.
IO_GAP = 0.001

_US = 1e6


def _secs(us: np.ndarray, t0: int) -> np.ndarray:
    """Seconds since ``t0`` (µs); NaT becomes NaN."""
    out = (us - t0).astype("float64") / _US
    out[us == NAT_US] = np.nan
    return out


def _str(s: pd.Series, na: str = "") -> np.ndarray:
    """Text column as an object array of ``str`` (NA as ``na``)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype(object)
    return s.to_numpy(dtype=object, na_value=na)


def _arrow(s: pd.Series) -> pa.Array:
    """A text column as one Arrow ``large_string`` array (zero-copy for Arrow-backed columns)."""
    arr = s.array
    a = (
        pa.array(arr)
        if hasattr(arr, "__arrow_array__")
        else pa.array(s.to_numpy(dtype=object), from_pandas=True)
    )
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    return a if a.type == pa.large_string() else a.cast(pa.large_string())


def _lookup(values: pd.Series, keys: pa.Array) -> np.ndarray:
    """Position of each value in ``keys`` (-1: absent or NA): one hash join in Arrow."""
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    idx = pc.index_in(_arrow(values), value_set=keys)
    return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _codes(s: pd.Series, na: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) of a text column with few distinct values; names sorted, NA named ``na``."""
    a = _arrow(s).fill_null(na)
    enc = pc.dictionary_encode(a)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    names = np.asarray(enc.dictionary.to_pylist(), dtype=object)
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.argsort(names, kind="stable") if len(names) else np.zeros(0, np.int64)
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    return (rank[idx] if len(idx) else idx), names[order]


def _largest(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest values, largest first, ties in position order.

    The same as ``np.argsort(-values, kind="stable")[:k]`` for finite values, without sorting
    them all: only the values from the k-th largest up (every tie of it included) are sorted.
    """
    v = np.asarray(values, dtype="float64")
    if k >= len(v):
        return np.argsort(-v, kind="stable")
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    threshold = np.partition(v, len(v) - k)[len(v) - k]
    candidates = np.flatnonzero(v >= threshold)
    return candidates[np.argsort(-v[candidates], kind="stable")[:k]]


def _thread(s: pd.Series) -> np.ndarray:
    """Thread ids as uint64 (0: unknown)."""
    return s.to_numpy(dtype=np.uint64, na_value=0)


@dataclass
class Lanes:
    """The task stream's rows: one per worker thread, then per worker a transfer and an I/O lane."""

    table: pd.DataFrame  # y, worker, thread (str), kind, label

    def __len__(self) -> int:
        return len(self.table)

    def count(self, kind: str) -> int:
        return int((self.table["kind"] == kind).sum())


@dataclass
class RunView:
    """Everything the report of one run draws (see :func:`run_view`)."""

    records: RunRecords
    summary: dict[str, Any]
    t0_us: int
    span_s: float
    prefixes: pd.DataFrame  # prefix, colour index, tasks, executions, compute_s, quantiles ...
    lanes: Lanes
    bars: pd.DataFrame  # y, left, right, duration, prefix, key, attempt, outcome, color
    mode: str  # "bars" or "raster"
    raster: np.ndarray | None  # (lanes, bins) prefix index of the bin's dominant prefix, -1 idle
    raster_busy: np.ndarray | None  # (lanes, bins) busy fraction
    transfer_bars: pd.DataFrame
    io_bars: pd.DataFrame
    occupancy: pd.DataFrame  # worker, threads, and busy-threads array per bin (as columns)
    occupancy_busy: np.ndarray  # (workers, bins)
    occupancy_dw: float
    executions: pd.DataFrame  # prefix code and duration of every execution with a start and an end
    slowest: pd.DataFrame
    problems: pd.DataFrame
    n_problems: int
    matrix: pd.DataFrame  # source, destination, bytes, transfers, seconds
    io_files: pd.DataFrame
    io_prefix_file: pd.DataFrame
    graph: dict[str, Any]
    critical: pd.DataFrame
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# tasks and executions as integer codes


@dataclass
class _Tasks:
    """The tasks as arrays: keys (Arrow), prefix codes and names."""

    keys: pa.Array
    prefix: np.ndarray  # code per task
    names: np.ndarray  # prefix names, sorted
    #: task row of each key in the executions, dependencies and I/O links (-1: no such task)
    rows: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.keys)


def _tasks(records: RunRecords) -> tuple[_Tasks, pd.DataFrame]:
    t = records.tasks
    keys = _arrow(t["key"])
    if pc.count_distinct(keys, mode="all").as_py() != len(keys):
        t = t.drop_duplicates("key").reset_index(drop=True)
        keys = _arrow(t["key"])
    codes, names = _codes(t["prefix"], "(no prefix)")
    columns = {
        "executions": records.executions["key"],
        "dependency": records.dependencies["dependency"],
        "dependent": records.dependencies["key"],
    }
    if records.darshan is not None and records.io is not None and len(records.darshan.segments):
        columns["io"] = records.io.segments["key"]
    return _Tasks(keys, codes, names, _rows_of(keys, columns)), t


def _rows_of(keys: pa.Array, columns: dict[str, pd.Series]) -> dict[str, np.ndarray]:
    """Row in ``keys`` (unique) of every value of each column, -1 where absent or NA.

    One dictionary encoding of the keys followed by all the columns: the keys are hashed once,
    not once per column (as :func:`_lookup` would). The keys come first and are unique, so a
    value's dictionary index is its key's row when it is below ``len(keys)``.
    """
    lengths = [len(s) for s in columns.values()]
    if not sum(lengths):
        return {name: np.zeros(0, dtype=np.int64) for name in columns}
    arrays = [keys, *(_arrow(s) for s in columns.values())]
    enc = pc.dictionary_encode(pa.chunked_array(arrays, type=pa.large_string()))
    idx = np.concatenate(
        [c.indices.fill_null(-1).to_numpy(zero_copy_only=False) for c in enc.chunks]
    ).astype(np.int64)
    assert len(idx) == len(keys) + sum(lengths)
    idx[idx >= len(keys)] = -1
    bounds = np.cumsum([len(keys), *lengths])
    return {name: idx[bounds[i] : bounds[i + 1]] for i, name in enumerate(columns)}


def _executions(records: RunRecords, tasks: _Tasks, t0: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Executions with a start and an end: task row, prefix code, worker code, thread, seconds."""
    ex = records.executions
    start, end = utc_to_us(ex["start"]), utc_to_us(ex["end"])
    ok = (start != NAT_US) & (end != NAT_US)
    task = tasks.rows["executions"]
    wcode, workers = _codes(ex["worker"], "(unknown worker)")
    prefix = np.where(task >= 0, tasks.prefix[np.maximum(task, 0)] if len(tasks) else -1, -1)
    out = pd.DataFrame(
        {
            "row": np.arange(len(ex), dtype=np.int64),
            "task": task,
            "prefix": prefix,
            "worker": wcode,
            "thread": _thread(ex["thread"]),
            "left": _secs(start, t0),
            "right": _secs(end, t0),
        }
    )[ok]
    out["duration"] = out["right"] - out["left"]
    return out.reset_index(drop=True), workers


def _prefix_table(
    records: RunRecords, t: pd.DataFrame, tasks: _Tasks, ex: pd.DataFrame
) -> pd.DataFrame:
    """Per prefix: tasks (by outcome) and the distribution of execution durations."""
    m = len(tasks.names)
    code = tasks.prefix

    def count(mask: pd.Series) -> np.ndarray:
        return np.bincount(code[mask.to_numpy(dtype=bool, na_value=False)], minlength=m)

    out = pd.DataFrame(
        {
            "prefix": tasks.names,
            "tasks": np.bincount(code, minlength=m),
            "executed": count(t["n_executions"].fillna(0) > 0),
            "erred": count(t["erred"]),
            "retried": count(t["retried"]),
        }
    )
    known = ex[ex["prefix"] >= 0]
    out["executions"] = np.bincount(known["prefix"], minlength=m)
    out["compute_s"] = np.bincount(known["prefix"], weights=known["duration"], minlength=m)
    # a prefix none of whose executions has a start and an end has unknown compute, not 0
    out["compute_s"] = out["compute_s"].where(out["executions"] > 0)
    out["mean"] = out["compute_s"] / out["executions"].where(out["executions"] > 0)
    qs = {"min": 0.0, "p05": 0.05, "p25": 0.25, "median": 0.5, "p75": 0.75, "p95": 0.95, "max": 1.0}
    for c in qs:
        out[c] = np.nan
    if len(known):
        q = known.groupby("prefix", sort=True)["duration"].quantile(list(qs.values())).unstack()
        q.columns = list(qs)
        out.loc[q.index.to_numpy(), list(qs)] = q.to_numpy()
    # Colours follow the order of compute time (the busiest prefix gets the first colour).
    out = out.sort_values(
        ["compute_s", "tasks", "prefix"], ascending=[False, False, True], na_position="last"
    )
    out["code"] = out.index.to_numpy()
    out["color"] = np.arange(len(out), dtype=np.int64)
    return out.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# task stream

#: Pseudo thread ids of the packed lanes of executions without a thread id (from the top of the
#: uint64 range, far from any pthread id): lane j of a worker is ``_PACKED - j``.
_PACKED = np.uint64(2**64 - 2**20)


def _pack_unknown_threads(ex: pd.DataFrame) -> int:
    """Give executions without a thread id (0) a lane each so that overlapping ones never share
    one (first fit, per worker, in start order); returns how many there were. In place."""
    unknown = ex["thread"].to_numpy() == 0
    if not unknown.any():
        return 0
    sub = ex.loc[unknown, ["worker", "left", "right"]].sort_values(
        ["worker", "left"], kind="stable"
    )
    lane = np.zeros(len(sub), np.uint64)
    worker, left, right = (sub[c].to_numpy() for c in ("worker", "left", "right"))
    ends: list[float] = []
    for i in range(len(sub)):  # first fit: sequential by nature, only over these executions
        if i == 0 or worker[i] != worker[i - 1]:
            ends = []
        for j, e in enumerate(ends):
            if e <= left[i]:
                ends[j] = right[i]
                lane[i] = j
                break
        else:
            ends.append(right[i])
            lane[i] = len(ends) - 1
    ex.loc[sub.index, "thread"] = _PACKED - lane
    return int(unknown.sum())


def _lanes(
    ex: pd.DataFrame, workers: np.ndarray, transfer_workers: np.ndarray, io_workers: np.ndarray
) -> Lanes:
    """Lanes: each worker's threads (numeric order), then its transfer lane and its I/O lane."""
    th = ex[["worker", "thread"]].drop_duplicates()
    parts = [th.assign(kind=0)]
    parts.append(
        pd.DataFrame(
            {
                "worker": transfer_workers,
                "thread": np.zeros(len(transfer_workers), np.uint64),
                "kind": 1,
            }
        )
    )
    parts.append(
        pd.DataFrame(
            {"worker": io_workers, "thread": np.zeros(len(io_workers), np.uint64), "kind": 2}
        )
    )
    lanes = pd.concat(parts, ignore_index=True).astype(
        {"worker": np.int64, "thread": np.uint64, "kind": np.int64}
    )
    lanes = lanes.sort_values(["worker", "kind", "thread"], kind="stable").reset_index(drop=True)
    lanes["y"] = np.arange(len(lanes), dtype=np.int64)
    packed = (lanes["kind"] == 0) & (lanes["thread"] > _PACKED - np.uint64(2**19))
    known = (lanes["kind"] == 0) & (lanes["thread"] != 0) & ~packed
    num = (lanes[known].groupby("worker").cumcount() + 1).reindex(lanes.index)
    num = num.fillna(0).astype(np.int64).astype(str).where(known, "?")
    slot = (_PACKED - lanes["thread"].where(packed, _PACKED).to_numpy(np.uint64)).astype(np.int64)
    num = num.where(
        ~packed, "? (packed " + pd.Series(slot + 1, index=lanes.index).astype(str) + ")"
    )
    name = workers[lanes["worker"].to_numpy()] if len(lanes) else np.zeros(0, dtype=object)
    kind_text = np.array(["thread ", "transfers in", "I/O, other threads"], dtype=object)[
        lanes["kind"].to_numpy()
    ]
    lanes["label"] = name + "  " + kind_text + np.where(lanes["kind"] == 0, num, "")
    lanes["worker_name"] = name
    lanes["kind"] = np.array(["thread", "transfers", "io"], dtype=object)[lanes["kind"].to_numpy()]
    return Lanes(lanes)


def _lane_of(lanes: Lanes, worker: np.ndarray, thread: np.ndarray, kind: str) -> np.ndarray:
    t = lanes.table
    sub = t[t["kind"] == kind]
    if not len(worker):
        return np.zeros(0, dtype=np.int64)
    if not len(sub):  # no lane of this kind (e.g. every I/O segment is on a task thread)
        return np.full(len(worker), -1, dtype=np.int64)
    # (worker code, thread) -> lane, as one sorted search over a combined 128-bit-free key
    idx = pd.MultiIndex.from_arrays([sub["worker"].to_numpy(), sub["thread"].to_numpy()])
    pos = idx.get_indexer(
        pd.MultiIndex.from_arrays([np.asarray(worker, np.int64), np.asarray(thread, np.uint64)])
    )
    return np.where(pos >= 0, sub["y"].to_numpy()[np.maximum(pos, 0)], -1)


def _bursts(
    y: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    nbytes: np.ndarray,
    gap: float,
    limit: int,
    span: float,
) -> tuple[pd.DataFrame, float]:
    """Merge intervals of one lane closer than ``gap`` seconds; widen the gap until <= ``limit``."""
    y = np.asarray(y, dtype=np.int64)
    left, right = np.asarray(left, dtype="float64"), np.asarray(right, dtype="float64")
    nbytes = np.asarray(nbytes, dtype=np.int64)
    keep = (y >= 0) & np.isfinite(left) & np.isfinite(right)
    y, left, right, nbytes = y[keep], left[keep], right[keep], nbytes[keep]
    if not len(y):
        return pd.DataFrame({"y": y, "left": left, "right": right, "bytes": nbytes, "n": y}), gap
    order = np.lexsort((left, y))
    y, left, right, nbytes = y[order], left[order], right[order], nbytes[order]
    run_end = pd.Series(right).groupby(y).cummax().to_numpy()
    while True:
        # A new burst starts where the lane changes or the interval begins after the running end.
        new = np.ones(len(y), dtype=bool)
        new[1:] = (y[1:] != y[:-1]) | (left[1:] > run_end[:-1] + gap)
        if int(new.sum()) <= limit or gap >= span:
            break
        gap = max(gap * 4, span / (4 * limit))
    bid = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    return pd.DataFrame(
        {
            "y": y[first],
            "left": left[first],
            "right": np.maximum.reduceat(right, first),
            "bytes": np.add.reduceat(nbytes, first),
            "n": np.bincount(bid),
        }
    ), gap


def _raster(
    y: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    color: np.ndarray,
    n_lanes: int,
    span: float,
    bins: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per lane and time bin: the prefix that used most of it, and the busy fraction."""
    dw = span / bins if span > 0 else 1.0
    b0 = np.clip((left / dw).astype(np.int64), 0, bins - 1)
    b1 = np.clip((right / dw).astype(np.int64), 0, bins - 1)
    reps = b1 - b0 + 1
    idx = np.repeat(np.arange(len(y)), reps)
    bins_of = np.repeat(b0, reps) + (
        np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
    )
    cover = np.clip(
        np.minimum(right[idx], (bins_of + 1) * dw) - np.maximum(left[idx], bins_of * dw), 0, None
    )
    cell = y[idx] * bins + bins_of
    busy = np.bincount(cell, weights=cover, minlength=n_lanes * bins) / dw
    # dominant prefix per cell: cover summed per (cell, colour), the largest kept
    ncol = int(color.max()) + 1 if len(color) else 1
    pair, inv = np.unique(cell * ncol + color[idx], return_inverse=True)
    w = np.bincount(inv, weights=cover)
    order = np.lexsort((-w, pair // ncol))
    pc_, first = pair[order], np.r_[True, np.diff(pair[order] // ncol) != 0]
    dom = np.full(n_lanes * bins, -1, dtype=np.int64)
    dom[pc_[first] // ncol] = pc_[first] % ncol
    return dom.reshape(n_lanes, bins), np.clip(busy, 0, 1).reshape(n_lanes, bins)


def _occupancy(
    ex: pd.DataFrame, n_workers: int, span: float, bins: int
) -> tuple[np.ndarray, float]:
    """Average busy threads of each worker per time bin (exact integral of the step function)."""
    dw = span / bins if span > 0 else 1.0
    edges = np.arange(bins + 1) * dw
    out = np.zeros((n_workers, bins))
    order = np.argsort(ex["worker"].to_numpy(), kind="stable")
    w = ex["worker"].to_numpy()[order]
    lefts, rights = ex["left"].to_numpy()[order], ex["right"].to_numpy()[order]
    bounds = np.searchsorted(w, np.arange(n_workers + 1))
    for i in range(n_workers):
        s = np.sort(lefts[bounds[i] : bounds[i + 1]])
        e = np.sort(rights[bounds[i] : bounds[i + 1]])
        cs, ce = np.r_[0.0, np.cumsum(s)], np.r_[0.0, np.cumsum(e)]
        ks, ke = np.searchsorted(s, edges), np.searchsorted(e, edges)
        integral = (edges * ks - cs[ks]) - (edges * ke - ce[ke])
        out[i] = np.diff(integral) / dw
    return out, dw


# ---------------------------------------------------------------------------------------------
# transfers and I/O


def _transfers(records: RunRecords, t0: int) -> pd.DataFrame:
    """One row per distinct transfer: source, destination ('(client)' when none), times, bytes."""
    tr = records.transfers
    cols = ["transfer", "source", "destination", "left", "right", "bytes", "n_keys"]
    if not len(tr):
        return pd.DataFrame(
            {
                c: pd.Series(dtype=object if c in ("source", "destination") else "float64")
                for c in cols
            }
        )
    tid = tr["transfer"].to_numpy(dtype=np.int64, na_value=-1)
    order = np.argsort(tid, kind="stable")
    first = order[np.r_[True, np.diff(tid[order]) != 0]]
    nbytes = tr["nbytes"].to_numpy(dtype=np.int64, na_value=0)
    ids, inv = np.unique(tid, return_inverse=True)
    per = tr.iloc[first]
    return pd.DataFrame(
        {
            "transfer": ids,
            "source": per["source"].to_numpy(dtype=object, na_value="(unknown)"),
            "destination": per["destination"].to_numpy(dtype=object, na_value="(client)"),
            "left": _secs(utc_to_us(per["start"]), t0),
            "right": _secs(utc_to_us(per["stop"]), t0),
            "bytes": np.bincount(inv, weights=nbytes).astype(np.int64),
            "n_keys": np.bincount(inv),
        }
    )


def _matrix(per: pd.DataFrame) -> pd.DataFrame:
    if not len(per):
        return pd.DataFrame(columns=["source", "destination", "bytes", "transfers", "seconds"])
    g = per.assign(seconds=(per["right"] - per["left"]).fillna(0)).groupby(
        ["source", "destination"], sort=True
    )
    return pd.DataFrame(
        {"bytes": g["bytes"].sum(), "transfers": g.size(), "seconds": g["seconds"].sum()}
    ).reset_index()


def _io(
    records: RunRecords, t0: int, tasks: _Tasks, workers: np.ndarray
) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per Darshan segment with its link, as codes (empty without Darshan); file names."""
    dr = records.darshan
    cols = ["path", "read", "bytes", "task", "prefix", "worker", "pthread", "left", "right"]
    if dr is None or records.io is None or not len(dr.segments):
        empty = pd.DataFrame(
            {c: pd.Series(dtype="float64" if c in ("left", "right") else np.int64) for c in cols}
        )
        empty["worker_role"] = pd.Series(dtype=bool)
        return empty, np.zeros(0, dtype=object)
    seg, links = dr.segments, records.io.segments
    # one row per file: a path on two nodes' own file systems is two (docs/model.md, decision 16)
    path, files = _codes(file_labels(dr.logs, seg["log"], seg["path"]), "(unknown)")
    task = tasks.rows["io"]
    wpos = _lookup(links["worker"], pa.array(workers.tolist(), type=pa.large_string()))
    return (
        pd.DataFrame(
            {
                "path": path,
                "read": (seg["op"] == "read").to_numpy(dtype=bool, na_value=False),
                "bytes": seg["length"].to_numpy(dtype=np.int64, na_value=0),
                "task": task,
                "prefix": np.where(
                    task >= 0, tasks.prefix[np.maximum(task, 0)] if len(tasks) else -1, -1
                ),
                "worker": wpos,
                "pthread": _thread(links["pthread"]),
                # the segment's log is a worker process's (mapped to its worker or not)
                "worker_role": _worker_role(dr.logs, seg["log"]),
                "left": _secs(utc_to_us(links["start"]), t0),
                "right": _secs(utc_to_us(links["end"]), t0),
            }
        ),
        files,
    )


def _worker_role(logs: pd.DataFrame, seg_log: pd.Series) -> np.ndarray:
    """Per segment: whether its Darshan log (by file name) is a worker process's."""
    if "role" not in logs or not len(seg_log):
        return np.zeros(len(seg_log), dtype=bool)
    workers = logs.loc[logs["role"].astype(str) == "worker", "log"].astype(str)
    return seg_log.astype(str).isin(set(workers)).to_numpy(dtype=bool)


def _io_files(
    io: pd.DataFrame, files: np.ndarray, tasks: _Tasks
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per file: reads, writes, bytes, tasks and their prefixes; per (prefix, file): tasks, bytes."""
    nf = len(files)
    rd = io["read"].to_numpy()
    b = io["bytes"].to_numpy()
    path = io["path"].to_numpy()
    out = pd.DataFrame(
        {
            "path": files,
            "reads": np.bincount(path[rd], minlength=nf),
            "writes": np.bincount(path[~rd], minlength=nf),
            "bytes_read": np.bincount(path[rd], weights=b[rd], minlength=nf).astype(np.int64),
            "bytes_written": np.bincount(path[~rd], weights=b[~rd], minlength=nf).astype(np.int64),
        }
    )
    linked = io[io["task"] >= 0]
    pairs = linked[["path", "task"]].drop_duplicates()
    out["tasks"] = np.bincount(pairs["path"], minlength=nf)
    pf = (
        linked.groupby(["prefix", "path"], sort=True)
        .agg(tasks=("task", "nunique"), bytes=("bytes", "sum"))
        .reset_index()
    )
    names = pf.groupby("path")["prefix"].agg(lambda c: ", ".join(tasks.names[c]))
    out["prefixes"] = names.astype(object).reindex(range(nf)).to_numpy(dtype=object, na_value="")
    first = pairs.groupby("path")["task"].agg(lambda c: list(c[:3]))
    ex_keys = {p: ", ".join(tasks.keys.take(pa.array(v)).to_pylist()) for p, v in first.items()}
    out["examples"] = [ex_keys.get(i, "") for i in range(nf)]
    out = out.sort_values(["bytes_read", "bytes_written", "path"], ascending=[False, False, True])
    pf["prefix"] = tasks.names[pf["prefix"].to_numpy()] if len(pf) else pf["prefix"].astype(object)
    pf["path"] = files[pf["path"].to_numpy()] if len(pf) else pf["path"].astype(object)
    return out.reset_index(drop=True), pf


# ---------------------------------------------------------------------------------------------
# task graph


def _layout(depth: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Layered layout: x = layer, y = rank within the layer (by group, then input order), centred."""
    if not len(depth):
        return np.zeros(0), np.zeros(0)
    return depth.astype("float64"), _centred_rank(depth, group)


def _centred_rank(layer: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Position of each node within its layer (by group, then input order), centred on 0."""
    n = len(layer)
    order = np.lexsort((np.arange(n), group, layer))
    rank = np.empty(n, dtype=np.int64)
    first = np.r_[0, np.flatnonzero(np.diff(layer[order])) + 1]
    rank[order] = np.arange(n) - np.repeat(first, np.diff(np.r_[first, n]))
    size = np.bincount(layer)[layer]
    return (rank - (size - 1) / 2.0).astype("float64")


def _dag(
    records: RunRecords, tasks: _Tasks, ex: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dependency, dependent, compute seconds per task): the DAG over task rows."""
    n = len(tasks)
    src, dst = tasks.rows["dependency"], tasks.rows["dependent"]
    ok = (src >= 0) & (dst >= 0)
    pair = np.unique(src[ok] * max(n, 1) + dst[ok])
    weight = np.zeros(n)
    known = ex[ex["task"] >= 0]
    np.add.at(weight, known["task"].to_numpy(), known["duration"].to_numpy())
    return pair // max(n, 1), pair % max(n, 1), weight


def _critical(
    records: RunRecords,
    t: pd.DataFrame,
    tasks: _Tasks,
    src: np.ndarray,
    dst: np.ndarray,
    weight: np.ndarray,
) -> pd.DataFrame:
    """The critical path (as :func:`metaprov.analysis.critical_path.critical_path`), from the DAG."""
    # the layers of the graph's drawing come out of the same pass
    depth = np.zeros(len(tasks), dtype=np.int64)
    path = longest_path(np.arange(len(tasks)), weight, src, dst, depth=depth)
    rows = np.asarray(path, dtype=np.int64)
    sub = t.iloc[rows]
    dur = weight[rows]
    out = pd.DataFrame(
        {
            "position": np.arange(1, len(rows) + 1, dtype=np.int64),
            "key": tasks.keys.take(pa.array(rows)).to_pylist() if len(rows) else [],
            "prefix": sub["prefix"].to_numpy(dtype=object, na_value=None),
            "worker": sub["worker"].to_numpy(dtype=object, na_value=None),
            "start": sub["start"].to_numpy(),
            "end": sub["end"].to_numpy(),
            "duration": dur,
            "cumulative": np.cumsum(dur),
        }
    )[CRITICAL_COLUMNS]
    out.attrs["total_seconds"] = float(out["cumulative"].iloc[-1]) if len(out) else 0.0
    out.attrs["rows"] = rows
    out.attrs["depth"] = depth
    return out


def _graph(
    t: pd.DataFrame,
    tasks: _Tasks,
    prefixes: pd.DataFrame,
    src: np.ndarray,
    dst: np.ndarray,
    weight: np.ndarray,
    path: np.ndarray,
    depth: np.ndarray,
    limit: int,
) -> dict[str, Any]:
    """Nodes and edges to draw: every task, or one node per prefix above :data:`GRAPH_TASK_LIMIT`."""
    n = len(tasks)
    codes, names = tasks.prefix, tasks.names
    color = np.full(len(names), -1, dtype=np.int64)
    color[prefixes["code"].to_numpy()] = prefixes["color"].to_numpy()
    dur = np.where(weight > 0, weight, np.nan)
    nbytes = t["nbytes"].to_numpy(dtype="float64", na_value=np.nan)
    out: dict[str, Any] = {"tasks": n, "edges": len(src), "critical": path}
    if n <= limit:
        x, y = _layout(depth, codes)
        out.update(
            level="task",
            layout="layers",
            nodes=pd.DataFrame(
                {
                    "x": x,
                    "y": y,
                    "key": tasks.keys.to_pylist(),
                    "prefix": names[codes] if n else np.zeros(0, dtype=object),
                    "color": color[codes] if n else np.zeros(0, np.int64),
                    "duration": dur,
                    "nbytes": nbytes,
                    "worker": t["worker"].to_numpy(dtype=object, na_value=""),
                    "state": t["state"].to_numpy(dtype=object, na_value=""),
                }
            ),
            src=src,
            dst=dst,
        )
        return out
    # Too many tasks to draw: one node per prefix, one edge per pair of prefixes.
    m = len(names)
    pairs, counts = np.unique(codes[src] * m + codes[dst], return_counts=True)
    es, ed = pairs // m, pairs % m
    loop = es == ed
    es, ed, en = es[~loop], ed[~loop], counts[~loop]
    first = np.full(m, np.iinfo(np.int64).max)
    np.minimum.at(first, codes, depth)
    # Each prefix in the layer where its first task is (the prefix graph may have cycles, e.g.
    # getitem -> stack -> getitem, so it has no layers of its own).
    layer = np.unique(first, return_inverse=True)[1].astype(np.int64)
    x, y = layer.astype("float64"), _centred_rank(layer, np.arange(m))
    out.update(
        level="prefix",
        layout="first-layer",
        nodes=pd.DataFrame(
            {
                "x": x,
                "y": y,
                "key": names,
                "prefix": names,
                "color": color,
                "tasks": np.bincount(codes, minlength=m),
                "duration": np.bincount(codes, weights=weight, minlength=m),
                "nbytes": np.bincount(codes, weights=np.nan_to_num(nbytes), minlength=m),
                "worker": "",
                "state": "",
            }
        ),
        src=es,
        dst=ed,
        edge_tasks=en,
        critical_prefix_path=codes[path] if len(path) else np.zeros(0, np.int64),
    )
    return out


# ---------------------------------------------------------------------------------------------


def run_view(
    records: RunRecords,
    summary: dict[str, Any],
    *,
    bar_limit: int = BAR_LIMIT,
    longest_bars: int = LONGEST_BARS,
    graph_task_limit: int = GRAPH_TASK_LIMIT,
) -> RunView:
    """Compute what the report of ``records`` draws.

    Args:
        records: a run's records, Darshan I/O linked when logs were read.
        summary: :func:`metaprov.analysis.summary.summarize` of the same records.
        bar_limit: most executions drawn one bar each; above, the task stream is a raster.
        longest_bars: executions still drawn as bars in a raster (the longest ones).
        graph_task_limit: most tasks drawn one node each; above, one node per prefix.
    """
    first, last = records.span
    t0 = 0 if first is None else int(first.value // 1000)
    span = 0.0 if first is None else (last - first).total_seconds()
    tasks, t = _tasks(records)
    ex, workers = _executions(records, tasks, t0)
    packed = _pack_unknown_threads(ex)
    notes = _execution_notes(packed, len(records.executions) - len(ex))
    prefixes = _prefix_table(records, t, tasks, ex)
    color = np.full(len(tasks.names), -1, dtype=np.int64)
    color[prefixes["code"].to_numpy()] = prefixes["color"].to_numpy()

    per = _transfers(records, t0)
    io, files = _io(records, t0, tasks, workers)
    # worker codes known from executions; transfer or I/O workers that ran nothing are added
    workers = _with_workers_of(workers, per)
    per_lane = per[per["destination"] != "(client)"]
    t_worker = pd.Index(workers).get_indexer(per_lane["destination"].to_numpy())
    io_w = io[(io["worker"] >= 0) & io["left"].notna()]
    on_thread = _on_task_thread(ex, io_w)
    lanes = _lanes(
        ex, workers, np.unique(t_worker), np.unique(io_w["worker"].to_numpy()[~on_thread])
    )

    mode, raster, raster_busy, bars, stream_notes = _stream(
        records, tasks, ex, lanes, color, span, bar_limit, longest_bars
    )
    tb, transfer_notes = _transfer_bursts(lanes, per_lane, t_worker, span)
    ib, io_notes = _io_bursts(lanes, io_w, on_thread, span)
    io_notes += _io_not_drawn_notes(io, io_w)
    occupancy, occ, dw = _occupancy_of(records, ex, workers, span)
    slowest = _slowest(records, tasks, ex)
    bad = _problems(t)
    io_files, io_pf = _io_files(io, files, tasks) if len(io) else (pd.DataFrame(), pd.DataFrame())
    critical, graph, graph_notes = _critical_and_graph(
        records, t, tasks, prefixes, ex, graph_task_limit
    )
    return RunView(
        records=records,
        summary=summary,
        t0_us=t0,
        span_s=span,
        prefixes=prefixes,
        lanes=lanes,
        bars=bars,
        mode=mode,
        raster=raster,
        raster_busy=raster_busy,
        transfer_bars=tb,
        io_bars=ib,
        occupancy=occupancy,
        occupancy_busy=occ,
        occupancy_dw=dw,
        executions=ex[["prefix", "duration"]],
        slowest=slowest,
        problems=bad.head(TABLE_ROWS),
        n_problems=len(bad),
        matrix=_matrix(per),
        io_files=io_files,
        io_prefix_file=io_pf,
        graph=graph,
        critical=critical,
        notes=notes + stream_notes + transfer_notes + io_notes + graph_notes,
    )


def _execution_notes(packed: int, not_timed: int) -> list[str]:
    """Notes on executions drawn on packed lanes, or not drawn."""
    notes = []
    if packed:
        notes.append(
            f"task stream: {packed:,} executions have no thread id; on each worker they are "
            "drawn on lanes 'thread ?' packed so that bars overlapping in time never share a "
            "lane (the lanes are not the worker's threads)"
        )
    if not_timed:
        notes.append(f"{not_timed:,} execution(s) have no start or end time and are not drawn")
    return notes


def _with_workers_of(workers: np.ndarray, per: pd.DataFrame) -> np.ndarray:
    """``workers`` followed by the transfer destinations that ran nothing (sorted)."""
    extra = sorted((set(per["destination"]) | set()) - set(workers) - {"(client)"})
    if extra:
        workers = np.concatenate([workers, np.asarray(extra, dtype=object)])
    return workers


def _on_task_thread(ex: pd.DataFrame, io_w: pd.DataFrame) -> np.ndarray:
    """Whether each I/O segment is on a (worker, thread) that ran a task execution."""
    thread_set = pd.MultiIndex.from_frame(ex[["worker", "thread"]].drop_duplicates())
    return (
        thread_set.get_indexer(
            pd.MultiIndex.from_arrays([io_w["worker"].to_numpy(), io_w["pthread"].to_numpy()])
        )
        >= 0
    )


def _stream(
    records: RunRecords,
    tasks: _Tasks,
    ex: pd.DataFrame,
    lanes: Lanes,
    color: np.ndarray,
    span: float,
    bar_limit: int,
    longest_bars: int,
) -> tuple[str, np.ndarray | None, np.ndarray | None, pd.DataFrame, list[str]]:
    """The task stream: its mode, raster (or None), the executions drawn as bars, and notes."""
    notes = []
    y = _lane_of(lanes, ex["worker"].to_numpy(), ex["thread"].to_numpy(), "thread")
    colors = np.where(
        ex["prefix"].to_numpy() >= 0,
        color[np.maximum(ex["prefix"].to_numpy(), 0)] if len(color) else -1,
        -1,
    )
    n_ex = len(ex)
    raster = raster_busy = None
    if n_ex > bar_limit:
        mode = "raster"
        raster, raster_busy = _raster(
            y, ex["left"].to_numpy(), ex["right"].to_numpy(), colors, len(lanes), span, RASTER_BINS
        )
        keep = np.sort(_largest(ex["duration"].to_numpy(), longest_bars))
        notes.append(
            f"task stream: {n_ex:,} executions are more than {bar_limit:,}, so each lane is drawn as "
            f"{RASTER_BINS:,} time bins coloured by the prefix that used most of each bin (lighter: "
            f"less busy); the {len(keep):,} longest executions are also drawn one bar each (hover)"
        )
    else:
        mode = "bars"
        keep = np.arange(n_ex)
    sub = ex.iloc[keep]
    src_rows = records.executions.iloc[sub["row"].to_numpy()]
    bars = pd.DataFrame(
        {
            "y": y[keep],
            "left": sub["left"].to_numpy(),
            "right": sub["right"].to_numpy(),
            "duration": sub["duration"].to_numpy(),
            "prefix": np.where(
                sub["prefix"] >= 0,
                tasks.names[np.maximum(sub["prefix"].to_numpy(), 0)] if len(tasks.names) else "",
                "(no prefix)",
            ),
            "key": src_rows["key"].to_numpy(dtype=object, na_value=""),
            "attempt": src_rows["attempt"].to_numpy(dtype=np.int64, na_value=0),
            "outcome": src_rows["outcome"].to_numpy(dtype=object, na_value=""),
            "color": colors[keep],
        }
    )
    return mode, raster, raster_busy, bars, notes


def _transfer_bursts(
    lanes: Lanes, per_lane: pd.DataFrame, t_worker: np.ndarray, span: float
) -> tuple[pd.DataFrame, list[str]]:
    """Transfers on their destination's transfer lane, merged into bursts when too many."""
    ty = _lane_of(lanes, t_worker, np.zeros(len(per_lane), np.uint64), "transfers")
    tb, tgap = _bursts(
        ty,
        per_lane["left"].to_numpy(),
        per_lane["right"].to_numpy(),
        per_lane["bytes"].to_numpy(),
        0.0,
        BURST_LIMIT,
        span,
    )
    notes = []
    if tgap > 0:
        notes.append(
            f"transfers: {len(per_lane):,} transfers drawn as {len(tb):,} bars (transfers less than {tgap * 1e3:.3g} ms apart on one lane merged)"
        )
    return tb, notes


def _io_bursts(
    lanes: Lanes, io_w: pd.DataFrame, on_thread: np.ndarray, span: float
) -> tuple[pd.DataFrame, list[str]]:
    """I/O segments of workers on their thread's lane (or the worker's I/O lane), as bursts."""
    iw, ip = io_w["worker"].to_numpy(), io_w["pthread"].to_numpy()
    iy = np.where(
        on_thread,
        _lane_of(lanes, iw, ip, "thread"),
        _lane_of(lanes, iw, np.zeros(len(io_w), np.uint64), "io"),
    )
    ib, igap = _bursts(
        iy,
        io_w["left"].to_numpy(),
        io_w["right"].to_numpy(),
        io_w["bytes"].to_numpy(),
        IO_GAP,
        BURST_LIMIT,
        span,
    )
    notes = []
    if len(io_w):
        notes.append(
            f"I/O: {len(io_w):,} Darshan segments of worker processes drawn as {len(ib):,} bursts "
            f"(segments of one thread less than {igap * 1e3:.3g} ms apart merged)"
        )
    return ib, notes


def _io_not_drawn_notes(io: pd.DataFrame, io_w: pd.DataFrame) -> list[str]:
    """Notes counting the I/O segments not on the task stream, by why."""
    notes: list[str] = []
    if len(io) <= len(io_w):
        return notes
    drawn_not = io[~((io["worker"] >= 0) & io["left"].notna())]
    untimed = int(drawn_not["left"].isna().sum())
    timed = drawn_not[drawn_not["left"].notna()]
    of_workers = int(timed["worker_role"].sum())
    others = len(timed) - of_workers
    if of_workers:
        notes.append(
            f"I/O: {of_workers:,} segments of worker processes are not drawn on the task "
            "stream: their log could not be matched to a worker (the match goes by the "
            "thread ids of its task executions; a log without thread ids, or whose threads "
            "ran no task, has none), so no lane is theirs"
        )
    if others:
        notes.append(
            f"I/O: {others:,} segments of processes that are not workers (nanny, "
            "scheduler, launcher, ...) are not drawn on the task stream"
        )
    if untimed:
        notes.append(f"I/O: {untimed:,} segments have no time and are not drawn")
    return notes


def _occupancy_of(
    records: RunRecords, ex: pd.DataFrame, workers: np.ndarray, span: float
) -> tuple[pd.DataFrame, np.ndarray, float]:
    """Busy threads per worker and time bin, with each worker's thread count."""
    occ, dw = _occupancy(ex, len(workers), span, OCCUPANCY_BINS)
    wt = records.workers.drop_duplicates("address")
    threads = pd.Series(
        wt["threads"].to_numpy(dtype="float64", na_value=np.nan),
        index=wt["address"].to_numpy(dtype=object, na_value=""),
    )
    occupancy = pd.DataFrame({"worker": workers, "threads": threads.reindex(workers).to_numpy()})
    return occupancy, occ, dw


def _slowest(records: RunRecords, tasks: _Tasks, ex: pd.DataFrame) -> pd.DataFrame:
    """The longest executions (the table's rows)."""
    top = _largest(ex["duration"].to_numpy(), TABLE_ROWS)
    srow = ex.iloc[top]
    slow_src = records.executions.iloc[srow["row"].to_numpy()]
    return pd.DataFrame(
        {
            "key": slow_src["key"].to_numpy(dtype=object, na_value=""),
            "prefix": np.where(
                srow["prefix"] >= 0,
                tasks.names[np.maximum(srow["prefix"].to_numpy(), 0)] if len(tasks.names) else "",
                "",
            ),
            "worker": slow_src["worker"].to_numpy(dtype=object, na_value=""),
            "thread": slow_src["thread"].to_numpy(dtype=object, na_value=""),
            "attempt": slow_src["attempt"].to_numpy(dtype=object, na_value=""),
            "outcome": slow_src["outcome"].to_numpy(dtype=object, na_value=""),
            "left": srow["left"].to_numpy(),
            "duration": srow["duration"].to_numpy(),
        }
    )


def _problems(t: pd.DataFrame) -> pd.DataFrame:
    """The tasks that erred or were retried."""
    bad_mask = t["erred"].to_numpy(dtype=bool, na_value=False) | t["retried"].to_numpy(
        dtype=bool, na_value=False
    )
    return t[bad_mask]


def _critical_and_graph(
    records: RunRecords,
    t: pd.DataFrame,
    tasks: _Tasks,
    prefixes: pd.DataFrame,
    ex: pd.DataFrame,
    graph_task_limit: int,
) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
    """The critical path, the task graph drawn (per task, or per prefix when too many), notes."""
    src, dst, weight = _dag(records, tasks, ex)
    critical = _critical(records, t, tasks, src, dst, weight)
    graph = _graph(
        t,
        tasks,
        prefixes,
        src,
        dst,
        weight,
        critical.attrs["rows"],
        critical.attrs.pop("depth"),
        graph_task_limit,
    )
    notes = []
    if graph["level"] == "prefix":
        notes.append(
            f"task graph: {len(tasks):,} tasks are more than {graph_task_limit:,}, so it is drawn "
            "one node per prefix (edges: dependencies between prefixes)"
        )
    return critical, graph, notes


def facts(view: RunView) -> dict[str, Any]:
    """The figures shown on the page, as JSON types (embedded in the page for scripts and tests)."""
    s = view.summary
    p = view.prefixes
    return {
        "run_id": s["run"]["run_id"],
        "path": s["run"]["path"],
        "first_event": s["run"]["first_event"],
        "last_event": s["run"]["last_event"],
        "span_s": s["run"]["duration_s"],
        "tasks": {
            k: s["tasks"][k]
            for k in ("total", "executed", "never_ran", "erred", "retried", "by_state")
        },
        "executions": s["executions"],
        "workers": s["workers"]["total"],
        "threads": s["threads"],
        "lanes": {
            "total": len(view.lanes),
            "threads": view.lanes.count("thread"),
            # lanes of executions without a thread id (packed so that none overlap)
            "threads_unknown": int(
                (
                    (view.lanes.table["kind"] == "thread")
                    & (
                        (view.lanes.table["thread"] == 0)
                        | (view.lanes.table["thread"] > _PACKED - np.uint64(2**19))
                    )
                ).sum()
            ),
            "transfers": view.lanes.count("transfers"),
            "io": view.lanes.count("io"),
        },
        "task_stream": {
            "mode": view.mode,
            "bars": len(view.bars),
            "transfer_bars": len(view.transfer_bars),
            "io_bars": len(view.io_bars),
        },
        "prefixes": {
            str(r.prefix): {
                "tasks": int(r.tasks),
                "executions": int(r.executions),
                "erred": int(r.erred),
                "retried": int(r.retried),
                "compute_s": None if pd.isna(r.compute_s) else round(float(r.compute_s), 6),
            }
            for r in p.sort_values("prefix").itertuples()
        },
        "transfers": {
            "distinct": s["transfers"]["distinct"],
            "bytes": s["transfers"]["bytes"],
            "pairs": len(view.matrix),
        },
        "io": (s.get("io") or {}).get("totals", {}),
        "graph": {
            "graphs": s["graphs"]["total"],
            "tasks": view.graph["tasks"],
            "edges": view.graph["edges"],
            "drawn": view.graph["level"],
        },
        "critical_path": {
            "tasks": len(view.critical),
            "seconds": round(float(view.critical.attrs.get("total_seconds", 0.0)), 6),
            "first": str(view.critical["key"].iloc[0]) if len(view.critical) else None,
            "last": str(view.critical["key"].iloc[-1]) if len(view.critical) else None,
        },
        "notes": list(view.notes),
    }
