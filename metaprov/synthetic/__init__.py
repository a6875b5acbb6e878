"""Seeded synthetic Mofka-Dask runs: the benchmark workload and a large test input.

Input: the shape of a run (number of tasks, workers, threads, share of transfers, ...) and a seed.
Output: a run directory holding ``scheduler_transition.csv``, ``worker_transition.csv``,
``worker_transfer.csv``, ``graph.csv``, ``worker.csv`` and ``client.csv`` with the exact column
schemas the Mofka-Dask plugins write (``pandas.DataFrame.to_csv``: unnamed index column, float epoch
times in full ``repr`` precision, thread ids as exact integers, tuple keys as their ``repr``), and
``truth.json`` with the ground-truth counts a reader must reproduce. With ``io_fraction > 0`` it
also writes one Darshan DXT log per worker process (tasks' file I/O on their own thread ids,
inside their compute windows, plus the processes' own I/O), and ``truth.json`` gains the I/O
truth; :func:`expected_io` lists every intended segment with its task.

The run is causally consistent, so that linking and consolidation can be checked against it:

* tasks on one (worker, thread) run back to back and never overlap;
* a task starts after its dependencies finished; a dependency held by another worker is fetched
  first (an incoming transfer, logged twice by the receiver as the real plugin does, plus the
  outgoing row logged by the sender on its own clock);
* per key, scheduler transitions (``released -> waiting -> processing -> memory``) and worker
  transitions (``released -> waiting -> ready -> executing -> memory``) are in time order;
* the scheduler's ``begins``/``ends`` are the first ``startstops`` entry: the incoming transfer for
  tasks that fetched a dependency (as in real runs), else the compute interval shifted by a
  per-worker clock offset of a few milliseconds.

Everything is built column-wise with numpy and written with pyarrow string kernels in chunks:
10^6 tasks (~7.3 million CSV rows) take ~10 s on an idle 2-core machine, and memory is a few
numeric arrays per task plus one chunk of strings (~0.55 GB at 10^6). The same seed and parameters
give byte-identical files.

Example::

    from metaprov.synthetic import generate_run, load_truth
    run = generate_run("/tmp/run-1e5", 100_000, seed=1)
    truth = load_truth(run)   # {"tasks": 100000, "scheduler_transitions": 300000, ...}
    run = generate_run("/tmp/run-io", 100_000, seed=1, io_fraction=0.1, io_files=100)
    load_truth(run)["io"]["link"]  # {"linked": 17302, "process": 143, "ambiguous": 0, ...}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "generate_run",
    "load_truth",
    "expected_io",
    "format_floats",
    "COLUMNS",
    "TRUTH_FILE",
    "IO_FILES",
]

TRUTH_FILE = "truth.json"
GENERATOR_VERSION = 1

#: Column names of each file after the unnamed index column (as in the real runs).
COLUMNS: dict[str, list[str]] = {
    "scheduler_transition.csv": [
        "key", "thread", "worker", "prefix", "group", "start", "finish", "stimulus_id",
        "called_from", "begins", "ends", "duration", "size", "time",
    ],
    "worker_transition.csv": ["key", "start", "finish", "called_from", "time"],
    "worker_transfer.csv": [
        "start", "stop", "middle", "duration", "keys", "total", "bandwidth", "who", "type",
        "called_from", "time", "compressed",
    ],
    "graph.csv": ["client", "keys", "dependencies", "time"],
    "worker.csv": ["worker", "action", "stimulus_id", "time"],
    "client.csv": ["client", "action", "time"],
}  # fmt: skip

# Rows formatted and written per batch: bounds the memory of the string columns.
CHUNK_ROWS = 100_000

# Dependencies end at least this long before the dependent becomes ready. It leaves room for the
# longest synthetic transfer (40 ms) and the message latencies, so every causal order holds.
_DEP_MARGIN = 0.06
# A failed first attempt ends at least this long before the retry starts.
_RETRY_MARGIN = 0.25
# Rank windows among the finished candidates: the first dependency is one of the 16 most recently
# finished tasks, the second one of the 240 before them, so the two are always distinct.
_WIN1, _WIN2 = 16, 240

_SCHEDULER = "tcp://10.201.1.129:8786"

# (key stem, prefix as Dask's key_split reports it) for plain string keys (delayed-style, uuid).
_STRING_STEMS = (
    ("inc", "inc"),
    ("load", "load"),
    ("transform", "transform"),
    ("_dask_helper", "dask_helper"),
)
# Prefixes of tuple-key groups (array-style: ('<prefix>-<md5>', i)).
_TUPLE_PREFIXES = ("array", "getitem", "mul", "block-info")
_TUPLE_GROUP_SIZE = 1000

# Scheduler row kinds: (start, finish).
_S_RW, _S_WP, _S_PM, _S_PE, _S_PR = range(5)
_S_STATES = (
    ("released", "waiting"),
    ("waiting", "processing"),
    ("processing", "memory"),
    ("processing", "erred"),
    ("processing", "released"),
)
# Stimulus kinds.
_ST_GRAPH, _ST_FINISHED, _ST_ERRED = range(3)
_ST_PREFIX = ("update-graph-", "task-finished-", "task-erred-")
# Worker row kinds.
_W_RW, _W_WR, _W_RE, _W_EM, _W_EE, _W_ER, _W_RF, _W_FF, _W_FM = range(9)
_W_STATES = (
    ("released", "waiting"),
    ("waiting", "ready"),
    ("ready", "executing"),
    ("executing", "memory"),
    ("executing", "error"),
    ("error", "released"),
    ("released", "fetch"),
    ("fetch", "flight"),
    ("flight", "memory"),
)


# --------------------------------------------------------------------------------------------
# Formatting: exactly what pandas.to_csv writes
# --------------------------------------------------------------------------------------------


def format_floats(values: np.ndarray) -> pa.Array:
    """Format float64 values exactly as ``pandas.DataFrame.to_csv`` does (Python ``repr``).

    Arrow's shortest round-trip formatting gives the same digits as ``repr`` but prints integral
    values without ``.0`` and uses exponent notation at other thresholds. So: values that Python
    prints positionally (``1e-4 <= |v| < 1e16``) and Arrow printed without an exponent keep Arrow's
    digits (plus ``.0`` when integral); the rest (rare in this workload) go through numpy's
    ``str``, which is ``repr``. NaN becomes an empty field.

    Args:
        values: float64 array.

    Returns:
        An Arrow string array of the same length.
    """
    v = np.ascontiguousarray(values, dtype=np.float64)
    out = pc.cast(pa.array(v), pa.string())
    a = np.abs(v)
    odd = ~(((a >= 1e-4) & (a < 1e16)) | (v == 0)) | ~np.isfinite(v)
    odd |= pc.match_substring(out, "e").to_numpy(zero_copy_only=False)
    no_point = pc.invert(pc.match_substring(out, "."))
    out = pc.if_else(no_point, pc.binary_join_element_wise(out, ".0", ""), out)
    if odd.any():
        repl = v[odd].astype(str)
        repl[np.isnan(v[odd])] = ""
        out = pc.replace_with_mask(out, pa.array(odd), pa.array(repl, pa.string()))
    return out


def _fmt_ints(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(np.ascontiguousarray(values)), pa.string())


def _masked(mask: np.ndarray, fill_values: pa.Array) -> pa.Array:
    """Strings ``fill_values`` at the positions of ``mask`` (len = mask.sum()), empty elsewhere."""
    base = _empty_strings(len(mask))
    if not mask.any():
        return base
    return pc.replace_with_mask(base, pa.array(mask), fill_values)


def _empty_strings(n: int) -> pa.Array:
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(np.zeros(n + 1, dtype=np.int32)), pa.py_buffer(b"")
    )


def _take(table: pa.Array, idx: np.ndarray) -> pa.Array:
    return table.take(pa.array(np.ascontiguousarray(idx, dtype=np.int64)))


def _csv_field(s: pa.Array) -> pa.Array:
    """Quote fields as csv.QUOTE_MINIMAL does for our content (commas only; no quotes or newlines)."""
    has_comma = pc.match_substring(s, ",")
    quoted = pc.binary_join_element_wise('"', s, '"', "")
    return pc.if_else(has_comma, quoted, s)


class _CsvFile:
    """A CSV file written the way pandas writes it: header with an empty first name, index column."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path = path
        self.fh: BinaryIO = open(path, "wb")  # closed in close()
        self.fh.write(("," + ",".join(columns) + "\n").encode())
        self.rows = 0

    def write(self, cols: Sequence[pa.Array | str]) -> None:
        n = next(len(c) for c in cols if not isinstance(c, str))
        if n == 0:
            return
        idx = _fmt_ints(np.arange(self.rows, self.rows + n, dtype=np.int64))
        parts = [idx, *(pa.scalar(c, pa.string()) if isinstance(c, str) else c for c in cols)]
        line = pc.binary_join_element_wise(*parts, ",")
        _write_lines(self.fh, line, "\n")
        self.rows += n

    def close(self) -> None:
        self.fh.close()


def _write_lines(fh: BinaryIO, arr: pa.Array, terminator: str) -> None:
    """Write each string of ``arr`` followed by ``terminator``, straight from the Arrow buffers."""
    arr = pc.binary_join_element_wise(arr, "", terminator)
    if arr.null_count:
        raise AssertionError("synthetic: null in a CSV line (a column was not filled)")
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)
    lo, hi = int(offsets[arr.offset]), int(offsets[arr.offset + len(arr)])
    fh.write(memoryview(arr.buffers()[2])[lo:hi])


def _hex(raw: np.ndarray) -> np.ndarray:
    """(n, k) uint8 -> (n, 2k) uint8 ASCII lowercase hex digits."""
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    out = np.empty((raw.shape[0], raw.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2] = digits[raw >> 4]
    out[:, 1::2] = digits[raw & 0x0F]
    return out


def _ascii_rows(chars: np.ndarray) -> pa.Array:
    """(n, k) uint8 ASCII -> Arrow strings of length k."""
    n, k = chars.shape
    flat = np.ascontiguousarray(chars).reshape(-1)
    offsets = np.arange(0, (n + 1) * k, k, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(flat))


def _unique_hex(rng: np.random.Generator, n: int, uuid: bool) -> pa.Array:
    """n distinct random hex ids: md5-like (32 chars) or uuid4-like (8-4-4-4-12)."""
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    # The last 4 bytes are a bijection of the row number (odd multiplier, xor): the ids are
    # distinct without a uniqueness check and still look random.
    mixed = (np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF)
    mixed ^= np.uint64(int(rng.integers(0, 1 << 32)))
    raw[:, 12:16] = mixed.astype(">u4").view(np.uint8).reshape(n, 4)
    if uuid:
        raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
        raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    h = _hex(raw)
    if not uuid:
        return _ascii_rows(h)
    dash = np.full((n, 1), ord("-"), dtype=np.uint8)
    return _ascii_rows(
        np.hstack(
            [h[:, :8], dash, h[:, 8:12], dash, h[:, 12:16], dash, h[:, 16:20], dash, h[:, 20:]]
        )
    )


# --------------------------------------------------------------------------------------------
# The plan: every number of the run, as numpy arrays
# --------------------------------------------------------------------------------------------


def _finished_before(
    by_group: np.ndarray, bounds: np.ndarray, end: np.ndarray, target: np.ndarray, limit: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Tasks of a query's target group that ended before its limit.

    ``by_group`` lists task ids sorted by (group, end); group ``g`` spans
    ``by_group[bounds[g]:bounds[g + 1]]``. Returns, per query, the offset of its group in
    ``by_group`` and how many of the group's tasks ended before ``limit`` (the candidates are the
    first that many, most recent last).
    """
    count = np.zeros(len(target), dtype=np.int64)
    order = np.argsort(target, kind="stable")
    qb = np.searchsorted(target[order], np.arange(len(bounds)))
    for grp in range(len(bounds) - 1):
        q = order[qb[grp] : qb[grp + 1]]
        if len(q):
            count[q] = np.searchsorted(
                end[by_group[bounds[grp] : bounds[grp + 1]]], limit[q], side="left"
            )
    return bounds[target], count


@dataclass
class _Plan:
    n: int
    workers: int
    threads: int
    graphs: int
    clients: int
    addresses: pa.Array  # per worker
    thread_ids: np.ndarray  # uint64 per global thread (worker * threads + t)
    clock_offset: np.ndarray  # per worker: scheduler startstops vs worker clock (s)
    worker_added: np.ndarray
    client_added: np.ndarray
    client_names: list[str]
    # per graph
    graph_time: np.ndarray
    graph_stimulus: np.ndarray  # client-side update-graph stimulus time
    graph_client: np.ndarray
    graph_start: np.ndarray  # first task index of each graph (+ n at the end)
    # per task (task order = start order of the final execution)
    graph_of: np.ndarray
    thread: np.ndarray  # global thread of the final execution
    start: np.ndarray
    end: np.ndarray
    nbytes: np.ndarray
    # first (failed) attempt of retried tasks, sorted by task: task, thread, start, end
    retry_task: np.ndarray
    retry_thread: np.ndarray
    retry_start: np.ndarray
    retry_end: np.ndarray
    erred: np.ndarray  # bool per task
    # keys
    key_csv: pa.Array  # str(key) as a CSV field (tuple reprs quoted); see _literal()
    prefix_code: np.ndarray  # index into prefix_names
    group_code: np.ndarray  # index into group_names
    prefix_names: pa.Array
    group_names: pa.Array
    n_tuple: int
    # dependencies (-1: none)
    dep1: np.ndarray
    dep2: np.ndarray
    transfer: np.ndarray  # bool per task: dep1 was fetched from another worker
    end_time: float = 0.0

    @property
    def worker_of(self) -> np.ndarray:
        return self.thread // self.threads

    def key_lit(self, idx: np.ndarray) -> pa.Array:
        """repr(key) of tasks ``idx``: the Python literal used inside dict and set reprs."""
        return _literal(_take(self.key_csv, idx))


def _literal(csv_keys: pa.Array) -> pa.Array:
    # A quoted CSV field is a tuple repr (unquote it); a plain one is a string key (quote it).
    quoted = pc.starts_with(csv_keys, '"')
    inner = pc.utf8_slice_codeunits(csv_keys, 1, -1)
    return pc.if_else(quoted, inner, pc.binary_join_element_wise("'", csv_keys, "'", ""))


@dataclass
class _Schedule:
    graph_time: np.ndarray
    graph_stimulus: np.ndarray
    graph_start: np.ndarray
    graph_of: np.ndarray
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    retry_task: np.ndarray
    retry_thread: np.ndarray
    retry_start: np.ndarray
    retry_end: np.ndarray
    end_time: float


def _schedule_graph(
    rng: np.random.Generator, ng: int, rg: int, n_threads: int, base: float
) -> tuple[np.ndarray, ...]:
    """Executions of one graph, back to back on each thread, as (task start, end, thread) in start
    order, plus the failed first attempts (index of their task, thread, start, end)."""
    ne = ng + rg
    dur = np.exp(rng.normal(np.log(8e-3), 1.0, ne)).clip(5e-5, 5.0)
    idle = 2e-5 + rng.exponential(5e-4, ne)
    thr = rng.integers(0, n_threads, ne).astype(np.int32)
    order = np.argsort(thr, kind="stable")
    thr_s = thr[order]
    step = (idle + dur)[order]
    # Work queued before each execution on its own thread = running sum minus the thread's base.
    before = np.cumsum(step)
    before -= step
    first = np.minimum(np.searchsorted(thr_s, np.arange(n_threads)), max(ne - 1, 0))
    lead = rng.uniform(0, 5e-3, n_threads)
    start_rel = np.empty(ne)
    start_rel[order] = lead[thr_s] + before - before[first][thr_s] + idle[order]
    del order, thr_s, step, before, idle
    # Idle gaps are >= 20 us, far above the float rounding of epoch times (0.24 us): no overlap.
    s = base + start_rel
    e = base + (start_rel + dur)
    del start_rel, dur
    by_start = np.argsort(s, kind="stable")
    # Failed first attempts: random executions among the first 90 %; the rest are the tasks.
    failed = np.zeros(ne, dtype=bool)
    if rg:
        failed[by_start[rng.choice(int(ne * 0.9), size=rg, replace=False)]] = True
    fin = by_start[~failed[by_start]]
    ts, te, tt = s[fin], e[fin], thr[fin]
    fx = np.flatnonzero(failed)
    fx = fx[np.argsort(e[fx], kind="stable")]
    # Each failure is retried by the first task that starts late enough; t_k = k + cummax(c_k - k)
    # makes the chosen tasks distinct and increasing.
    c = np.searchsorted(ts, e[fx] + _RETRY_MARGIN)
    k = np.arange(len(fx))
    tk = k + np.maximum.accumulate(c - k) if len(fx) else k
    ok = tk < ng
    fx, tk = fx[ok], tk[ok]
    return ts, te, tt, tk, thr[fx], s[fx], e[fx], float(e.max()) if ne else base


def _schedule(
    rng: np.random.Generator, n: int, graphs: int, n_threads: int, n_retry: int, t_first: float
) -> _Schedule:
    sizes = np.full(graphs, n // graphs, dtype=np.int64)
    sizes[: n % graphs] += 1
    retry_sizes = np.full(graphs, n_retry // graphs, dtype=np.int64)
    retry_sizes[: n_retry % graphs] += 1
    g_time = np.empty(graphs)
    g_stim = np.empty(graphs)
    parts: list[tuple[np.ndarray, ...]] = []
    t_next = t_first
    first_task = 0
    for g in range(graphs):
        ng, rg = int(sizes[g]), int(retry_sizes[g])
        g_time[g] = t_next
        g_stim[g] = t_next - float(rng.uniform(0.5, 2.0))
        # update_graph walks the tasks first (a few us each); nothing runs before it is done.
        base = t_next + 3e-4 + 6e-6 * ng + _RETRY_MARGIN
        ts, te, tt, tk, rthr, rs, re_, last = _schedule_graph(rng, ng, rg, n_threads, base)
        parts.append((ts, te, tt, np.full(ng, g, np.int32), first_task + tk, rthr, rs, re_))
        first_task += ng
        # Graphs run one after the other, as a client calling compute() in a loop.
        t_next = last + float(rng.uniform(0.05, 0.5))
    cols = [np.concatenate([pt[i] for pt in parts]) for i in range(8)]
    o = np.argsort(cols[4], kind="stable")
    return _Schedule(
        graph_time=g_time,
        graph_stimulus=g_stim,
        graph_start=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        graph_of=cols[3],
        thread=cols[2].astype(np.int64),
        start=cols[0],
        end=cols[1],
        retry_task=cols[4][o].astype(np.int64),
        retry_thread=cols[5][o].astype(np.int64),
        retry_start=cols[6][o],
        retry_end=cols[7][o],
        end_time=t_next,
    )


def _keys(
    rng: np.random.Generator, n: int, tuple_key_fraction: float
) -> tuple[pa.Array, np.ndarray, np.ndarray, pa.Array, pa.Array, int]:
    """Dask keys: uuid-style strings ``'<stem>-<uuid4>'`` and array-style tuples
    ``('<prefix>-<md5>', i)`` in groups of up to 1000 chunks, mixed at random."""
    is_tuple = rng.random(n) < tuple_key_fraction
    n_tuple = int(is_tuple.sum())
    n_str = n - n_tuple
    stem_code = rng.integers(0, len(_STRING_STEMS), n_str)
    n_groups = -(-n_tuple // _TUPLE_GROUP_SIZE)
    grp_prefix = rng.integers(0, len(_TUPLE_PREFIXES), n_groups)
    group_hex = _unique_hex(rng, n_groups, uuid=False)
    stems = pa.array([s for s, _ in _STRING_STEMS], pa.string())
    str_keys = pc.binary_join_element_wise(
        _take(stems, stem_code), _unique_hex(rng, n_str, uuid=True), "-"
    )
    tprefixes = pa.array(list(_TUPLE_PREFIXES), pa.string())
    group_names_t = pc.binary_join_element_wise(_take(tprefixes, grp_prefix), group_hex, "-")
    tk_idx = np.arange(n_tuple)
    tgroup = tk_idx // _TUPLE_GROUP_SIZE
    tuple_csv = pc.binary_join_element_wise(
        "\"('", _take(group_names_t, tgroup), "', ", _fmt_ints(tk_idx % _TUPLE_GROUP_SIZE), ')"', ""
    )
    pos = np.empty(n, dtype=np.int64)
    pos[~is_tuple] = np.arange(n_str)
    pos[is_tuple] = n_str + tk_idx
    key_csv = pa.concat_arrays([str_keys, tuple_csv]).take(pa.array(pos))
    del str_keys, tuple_csv, pos
    prefix_names = pa.array([p for _, p in _STRING_STEMS] + list(_TUPLE_PREFIXES), pa.string())
    prefix_code = np.empty(n, dtype=np.int8)
    prefix_code[~is_tuple] = stem_code
    prefix_code[is_tuple] = len(_STRING_STEMS) + grp_prefix[tgroup]
    # Group of a string key is its prefix (key_split_group); of a tuple key, its first element.
    group_names = pa.concat_arrays(
        [pa.array([p for _, p in _STRING_STEMS], pa.string()), group_names_t]
    )
    group_code = np.empty(n, dtype=np.int32)
    group_code[~is_tuple] = stem_code
    group_code[is_tuple] = len(_STRING_STEMS) + tgroup
    return key_csv, prefix_code, group_code, prefix_names, group_names, n_tuple


def _dependencies(
    rng: np.random.Generator,
    sch: _Schedule,
    workers: int,
    threads: int,
    graphs: int,
    transfer_fraction: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Up to two dependencies per task (mean 1.3 edges), among the tasks of the same graph that
    finished before it got ready: on its own worker, except for the tasks chosen to fetch one
    dependency from another worker (a transfer)."""
    n = len(sch.start)
    first_start = sch.start.copy()
    first_start[sch.retry_task] = sch.retry_start
    ready_limit = first_start - 3e-4 - _DEP_MARGIN
    del first_start
    worker_of = sch.thread // threads
    gw = sch.graph_of.astype(np.int64) * workers + worker_of
    by_gw = np.lexsort((sch.end, gw))
    bounds = np.searchsorted(gw[by_gw], np.arange(graphs * workers + 1))
    n_deps = rng.choice(3, size=n, p=[0.2, 0.3, 0.5]).astype(np.int8)
    base, c = _finished_before(by_gw, bounds, sch.end, gw, ready_limit)
    dep1 = np.full(n, -1, dtype=np.int64)
    dep2 = np.full(n, -1, dtype=np.int64)
    ok = (n_deps >= 1) & (c >= 1)
    r = c - 1 - np.floor(rng.random(n) * np.minimum(c, _WIN1)).astype(np.int64)
    dep1[ok] = by_gw[(base + r)[ok]]
    ok = (n_deps >= 2) & (c > _WIN1)
    r = c - 1 - _WIN1 - np.floor(rng.random(n) * np.clip(c - _WIN1, 1, _WIN2)).astype(np.int64)
    dep2[ok] = by_gw[(base + r)[ok]]
    del gw, base, c, r, ok, n_deps
    transfer = np.zeros(n, dtype=bool)
    remote_w = (worker_of + 1 + rng.integers(0, max(workers - 1, 1), n)) % workers
    remote_u = rng.random(n)
    if workers > 1 and transfer_fraction > 0:
        target = sch.graph_of.astype(np.int64) * workers + remote_w
        rbase, rc = _finished_before(by_gw, bounds, sch.end, target, ready_limit)
        is_retried = np.zeros(n, dtype=bool)
        is_retried[sch.retry_task] = True
        eligible = np.flatnonzero((dep1 >= 0) & (rc >= 1) & ~is_retried)
        k = min(int(round(transfer_fraction * n)), len(eligible))
        chosen = np.sort(rng.choice(eligible, size=k, replace=False)) if k else eligible[:0]
        rr = rc[chosen] - 1 - np.floor(remote_u[chosen] * np.minimum(rc[chosen], _WIN1))
        transfer[chosen] = True
        dep1[chosen] = by_gw[rbase[chosen] + rr.astype(np.int64)]
    return dep1, dep2, transfer


def _plan(
    n: int,
    *,
    seed: int,
    workers: int,
    threads: int,
    transfer_fraction: float,
    tuple_key_fraction: float,
    graphs: int,
    clients: int,
    erred_fraction: float,
    retried_fraction: float,
    wide_thread_ids: bool,
) -> _Plan:
    rng = np.random.Generator(np.random.PCG64(seed))
    n_threads = workers * threads

    # ---- workers, threads, clients
    t0 = 1713553294.0 + float(rng.random())
    hosts = [
        f"10.201.{rng.integers(0, 4)}.{rng.integers(2, 254)}" for _ in range((workers + 3) // 4)
    ]
    ports = rng.choice(np.arange(32768, 61000), size=workers, replace=False)
    addresses = pa.array(
        [f"tcp://{hosts[w // 4]}:{int(ports[w])}" for w in range(workers)], pa.string()
    )
    # pthread_self() is the address of the thread's control block: 0x7f.. with 8 MiB stacks apart.
    high = (rng.permutation(0xC0)[:workers].astype(np.uint64) + np.uint64(0x10)) << np.uint64(32)
    low = rng.integers(0, 0x10000, workers).astype(np.uint64) << np.uint64(16)
    top = np.uint64(0x7F0000000000) + high + low
    step = np.arange(threads, dtype=np.uint64) * np.uint64(0x801000)
    thread_ids = (top[:, None] - step[None, :] + np.uint64(0x640)).reshape(-1)
    if wide_thread_ids:
        # Above 2^63 and odd: any pass through float64 changes them.
        thread_ids = thread_ids | np.uint64(1 << 63) | np.uint64(1)
    clock_offset = rng.uniform(-3e-3, 3e-3, workers)
    # Client-<uuid1>: a time-based uuid whose tail is the host's MAC address, as Dask names clients.
    client_hex = _unique_hex(rng, clients, uuid=False).to_pylist()
    client_names = [f"Client-{h[:8]}-{h[8:12]}-11ee-{h[16:20]}-6805cae1dd68" for h in client_hex]
    client_added = t0 + np.arange(clients) * 0.0137 + rng.uniform(0, 1e-3, clients)
    worker_added = t0 + 1.8 + np.arange(workers) * 1.2e-3 + rng.uniform(0, 2e-4, workers)

    # ---- schedule, sizes, keys, dependencies
    t_first = float(worker_added[-1]) + 0.4 + float(rng.uniform(0, 0.3))
    sch = _schedule(rng, n, graphs, n_threads, int(round(retried_fraction * n)), t_first)
    nbytes = np.exp(rng.normal(np.log(50_000), 1.5, n)).clip(24, 5e8).astype(np.int64)
    key_csv, prefix_code, group_code, prefix_names, group_names, n_tuple = _keys(
        rng, n, tuple_key_fraction
    )
    dep1, dep2, transfer = _dependencies(rng, sch, workers, threads, graphs, transfer_fraction)

    # ---- erred: tasks nobody depends on (their dependents would be erred without running)
    erred = np.zeros(n, dtype=bool)
    n_err = int(round(erred_fraction * n))
    if n_err:
        sinks = np.flatnonzero(_n_dependents(dep1, dep2) == 0)
        sinks = sinks[~np.isin(sinks, sch.retry_task)]
        n_err = min(n_err, len(sinks))
        erred[np.sort(rng.choice(sinks, size=n_err, replace=False))] = True

    return _Plan(
        n=n,
        workers=workers,
        threads=threads,
        graphs=graphs,
        clients=clients,
        addresses=addresses,
        thread_ids=thread_ids,
        clock_offset=clock_offset,
        worker_added=worker_added,
        client_added=client_added,
        client_names=client_names,
        graph_time=sch.graph_time,
        graph_stimulus=sch.graph_stimulus,
        graph_client=np.arange(graphs) % clients,
        graph_start=sch.graph_start,
        graph_of=sch.graph_of,
        thread=sch.thread,
        start=sch.start,
        end=sch.end,
        nbytes=nbytes,
        retry_task=sch.retry_task,
        retry_thread=sch.retry_thread,
        retry_start=sch.retry_start,
        retry_end=sch.retry_end,
        erred=erred,
        key_csv=key_csv,
        prefix_code=prefix_code,
        group_code=group_code,
        prefix_names=prefix_names,
        group_names=group_names,
        n_tuple=n_tuple,
        dep1=dep1,
        dep2=dep2,
        transfer=transfer,
        end_time=sch.end_time,
    )


def _n_dependents(dep1: np.ndarray, dep2: np.ndarray) -> np.ndarray:
    n = len(dep1)
    return np.bincount(dep1[dep1 >= 0], minlength=n) + np.bincount(dep2[dep2 >= 0], minlength=n)


@dataclass
class _Events:
    """Event times derived from the plan (the plugins' `time` columns and message latencies)."""

    sched_rw: np.ndarray
    msg: np.ndarray  # worker's task-finished / task-erred message time (stimulus)
    sched_done: np.ndarray  # processing -> memory|erred row time
    wp: np.ndarray
    wp_stim_kind: np.ndarray
    wp_stim_time: np.ndarray
    w_rw: np.ndarray
    w_wr: np.ndarray
    tr_start: np.ndarray  # per transfer task (NaN otherwise)
    tr_stop: np.ndarray
    # first attempts of retried tasks
    r_w_rw: np.ndarray
    r_w_wr: np.ndarray
    r_msg: np.ndarray
    r_er: np.ndarray
    r_sched_pr: np.ndarray
    r_sched_rw2: np.ndarray
    r_wp1: np.ndarray
    r_wp1_stim_kind: np.ndarray
    r_wp1_stim_time: np.ndarray


def _events(p: _Plan, rng: np.random.Generator) -> _Events:
    n = p.n
    # update_graph: the scheduler walks the new tasks in order, a few microseconds each.
    local = np.arange(n) - p.graph_start[p.graph_of]
    sched_rw = p.graph_time[p.graph_of] + 3e-4 + 5e-6 * local + rng.uniform(0, 1e-6, n)
    msg = p.end + rng.uniform(5e-5, 5e-4, n)
    sched_done = msg + rng.uniform(3e-4, 2e-3, n)
    r_msg = p.retry_end + rng.uniform(5e-5, 5e-4, len(p.retry_task))
    r_sched_pr = r_msg + rng.uniform(3e-4, 2e-3, len(p.retry_task))
    r_sched_rw2 = r_sched_pr + rng.uniform(1e-5, 5e-5, len(p.retry_task))

    # The dependent goes to processing in the stimulus of its last finishing dependency.
    d1t = np.where(p.dep1 >= 0, sched_done[np.maximum(p.dep1, 0)], -np.inf)
    d2t = np.where(p.dep2 >= 0, sched_done[np.maximum(p.dep2, 0)], -np.inf)
    last = np.where(d2t > d1t, p.dep2, p.dep1)
    has_dep = last >= 0
    trigger = np.where(has_dep, np.maximum(d1t, d2t), sched_rw)
    wp = trigger + rng.uniform(1e-5, 1e-4, n)
    wp_stim_kind = np.where(has_dep, _ST_FINISHED, _ST_GRAPH).astype(np.int8)
    wp_stim_time = np.where(has_dep, msg[np.maximum(last, 0)], p.graph_stimulus[p.graph_of])
    # Retried tasks: the final attempt is sent in the stimulus of the failure.
    rt = p.retry_task
    wp_first = wp[rt].copy()
    r_wp1_stim_kind = wp_stim_kind[rt].copy()
    r_wp1_stim_time = wp_stim_time[rt].copy()
    wp[rt] = r_sched_rw2 + rng.uniform(1e-5, 5e-5, len(rt))
    wp_stim_kind[rt] = _ST_ERRED
    wp_stim_time[rt] = r_msg
    w_rw = wp + rng.uniform(2e-4, 1.5e-3, n)
    tr_dur = np.exp(rng.normal(np.log(4e-3), 0.7, n)).clip(2e-4, 0.04)
    tr_start = np.where(p.transfer, w_rw + rng.uniform(5e-5, 1e-3, n), np.nan)
    tr_stop = tr_start + tr_dur
    w_wr = np.where(p.transfer, tr_stop, w_rw) + rng.uniform(5e-5, 3e-4, n)
    r_w_rw = wp_first + rng.uniform(2e-4, 1.5e-3, len(rt))
    r_w_wr = r_w_rw + rng.uniform(5e-5, 3e-4, len(rt))
    # The worker drops the failed attempt when the scheduler's release reaches it, before the
    # retry can arrive (w_rw of the retry is >= r_sched_pr + 220 us).
    r_er = r_sched_pr + rng.uniform(5e-5, 1.5e-4, len(rt))
    return _Events(
        sched_rw=sched_rw,
        msg=msg,
        sched_done=sched_done,
        wp=wp,
        wp_stim_kind=wp_stim_kind,
        wp_stim_time=wp_stim_time,
        w_rw=w_rw,
        w_wr=w_wr,
        tr_start=tr_start,
        tr_stop=tr_stop,
        r_w_rw=r_w_rw,
        r_w_wr=r_w_wr,
        r_msg=r_msg,
        r_er=r_er,
        r_sched_pr=r_sched_pr,
        r_sched_rw2=r_sched_rw2,
        r_wp1=wp_first,
        r_wp1_stim_kind=r_wp1_stim_kind,
        r_wp1_stim_time=r_wp1_stim_time,
    )


# --------------------------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------------------------


def _release() -> None:
    # Arrow's allocator keeps freed blocks for reuse; hand them back between files so the peak
    # RSS is one file's working set, not the sum of them.
    pa.default_memory_pool().release_unused()


def _sort_rows(time: np.ndarray, *cols: np.ndarray) -> tuple[np.ndarray, ...]:
    order = np.argsort(time, kind="stable")
    return (time[order], *(c[order] for c in cols))


def _write_scheduler(path: Path, p: _Plan, ev: _Events, chunk: int) -> int:
    n, rt = p.n, p.retry_task.astype(np.int32)
    ar = np.arange(n, dtype=np.int32)
    done_kind = np.where(p.erred, _S_PE, _S_PM).astype(np.int8)
    done_stim = np.where(p.erred, _ST_ERRED, _ST_FINISHED).astype(np.int8)
    g_stim = p.graph_stimulus[p.graph_of]
    k = len(rt)
    # Retried: released->waiting->processing (1st attempt) ->released->waiting->processing->memory.
    task = np.concatenate([ar, ar, ar, rt, rt, rt])
    kind = np.concatenate(
        [
            np.full(n, _S_RW, np.int8),
            np.full(n, _S_WP, np.int8),
            done_kind,
            np.full(k, _S_WP, np.int8),
            np.full(k, _S_PR, np.int8),
            np.full(k, _S_RW, np.int8),
        ]
    )
    time = np.concatenate(
        [ev.sched_rw, ev.wp, ev.sched_done, ev.r_wp1, ev.r_sched_pr, ev.r_sched_rw2]
    )
    stim_kind = np.concatenate(
        [
            np.full(n, _ST_GRAPH, np.int8),
            ev.wp_stim_kind,
            done_stim,
            ev.r_wp1_stim_kind,
            np.full(k, _ST_ERRED, np.int8),
            np.full(k, _ST_ERRED, np.int8),
        ]
    )
    stim_time = np.concatenate(
        [g_stim, ev.wp_stim_time, ev.msg, ev.r_wp1_stim_time, ev.r_msg, ev.r_msg]
    )
    time, task, kind, stim_kind, stim_time = _sort_rows(time, task, kind, stim_kind, stim_time)

    # startstops[0]: the dependency transfer when there was one (as in real runs), else compute.
    w_of = p.thread // p.threads
    begins = np.where(p.transfer, ev.tr_start, p.start + p.clock_offset[w_of])
    ends = np.where(p.transfer, ev.tr_stop, p.end + p.clock_offset[w_of])
    thread_str = _fmt_ints(p.thread_ids)
    states_from = pa.array([a for a, _ in _S_STATES], pa.string())
    states_to = pa.array([b for _, b in _S_STATES], pa.string())
    stim_prefix = pa.array(list(_ST_PREFIX), pa.string())

    out = _CsvFile(path, COLUMNS["scheduler_transition.csv"])
    try:
        for a in range(0, len(time), chunk):
            sl = slice(a, a + chunk)
            t, kd = task[sl], kind[sl]
            done = (kd == _S_PM) | (kd == _S_PE)
            td = t[done]
            b, e = begins[td], ends[td]
            out.write(
                [
                    _take(p.key_csv, t),
                    _masked(done, _take(thread_str, p.thread[td])),
                    _masked(done, _take(p.addresses, w_of[td])),
                    _take(p.prefix_names, p.prefix_code[t]),
                    _take(p.group_names, p.group_code[t]),
                    _take(states_from, kd),
                    _take(states_to, kd),
                    pc.binary_join_element_wise(
                        _take(stim_prefix, stim_kind[sl]), format_floats(stim_time[sl]), ""
                    ),
                    _SCHEDULER,
                    _masked(done, format_floats(b)),
                    _masked(done, format_floats(e)),
                    _masked(done, format_floats(e - b)),
                    _masked(done & (kd == _S_PM), _fmt_ints(p.nbytes[t[kd == _S_PM]])),
                    format_floats(time[sl]),
                ]
            )
    finally:
        out.close()
    return out.rows


def _write_worker_transitions(path: Path, p: _Plan, ev: _Events, chunk: int, fetch: bool) -> int:
    n, rt = p.n, p.retry_task.astype(np.int32)
    k = len(rt)
    ar = np.arange(n, dtype=np.int32)
    w_of = (p.thread // p.threads).astype(np.int16)
    rw_of = (p.retry_thread // p.threads).astype(np.int16)
    end_kind = np.where(p.erred, _W_EE, _W_EM).astype(np.int8)
    parts_task = [ar, ar, ar, ar, rt, rt, rt, rt, rt]
    i8 = np.int8
    parts_kind = [
        np.full(n, _W_RW, i8), np.full(n, _W_WR, i8), np.full(n, _W_RE, i8), end_kind,
        np.full(k, _W_RW, i8), np.full(k, _W_WR, i8), np.full(k, _W_RE, i8), np.full(k, _W_EE, i8),
        np.full(k, _W_ER, i8),
    ]  # fmt: skip
    parts_worker = [w_of, w_of, w_of, w_of, rw_of, rw_of, rw_of, rw_of, rw_of]
    parts_time = [
        ev.w_rw,
        ev.w_wr,
        p.start,
        p.end,
        ev.r_w_rw,
        ev.r_w_wr,
        p.retry_start,
        p.retry_end,
        ev.r_er,
    ]
    if fetch:
        # The receiving worker's own transitions for the fetched dependency key.
        tr = np.flatnonzero(p.transfer)
        m = len(tr)
        rng = np.random.Generator(np.random.PCG64([p.n, m, 7]))
        f1 = ev.w_rw[tr] + rng.uniform(1e-5, 4e-5, m)
        f2 = ev.tr_start[tr] - rng.uniform(0, 1e-5, m)
        f3 = ev.tr_stop[tr] + rng.uniform(1e-5, 4e-5, m)
        parts_task += [p.dep1[tr].astype(np.int32)] * 3
        parts_kind += [
            np.full(m, _W_RF, np.int8),
            np.full(m, _W_FF, np.int8),
            np.full(m, _W_FM, np.int8),
        ]
        parts_worker += [w_of[tr]] * 3
        parts_time += [f1, f2, f3]
    time, task, kind, worker = _sort_rows(
        np.concatenate(parts_time),
        np.concatenate(parts_task),
        np.concatenate(parts_kind),
        np.concatenate(parts_worker),
    )
    states_from = pa.array([a for a, _ in _W_STATES], pa.string())
    states_to = pa.array([b for _, b in _W_STATES], pa.string())
    out = _CsvFile(path, COLUMNS["worker_transition.csv"])
    try:
        for a in range(0, len(time), chunk):
            sl = slice(a, a + chunk)
            out.write(
                [
                    _take(p.key_csv, task[sl]),
                    _take(states_from, kind[sl]),
                    _take(states_to, kind[sl]),
                    _take(p.addresses, worker[sl]),
                    format_floats(time[sl]),
                ]
            )
    finally:
        out.close()
    return out.rows


def _write_transfers(
    path: Path, p: _Plan, ev: _Events, rng: np.random.Generator, chunk: int
) -> tuple[int, int]:
    tr = np.flatnonzero(p.transfer)
    m = len(tr)
    src = p.dep1[tr] if m else np.empty(0, np.int64)
    src_w = p.thread[src] // p.threads
    dst_w = p.thread[tr] // p.threads
    total = p.nbytes[src]
    in_start, in_stop = ev.tr_start[tr], ev.tr_stop[tr]
    in_dur = in_stop - in_start
    in_mid = (in_start + in_stop) / 2.0
    log1 = ev.w_wr[tr] + rng.uniform(1e-4, 3e-3, m)
    # The plugin re-sends log entries: the same row again, only `time` differs.
    log2 = log1 + rng.uniform(1e-3, 5e-2, m)
    # The sender logs the same transfer on its own clock; `middle` there is not (start+stop)/2.
    out_start = in_start + rng.uniform(-5e-4, 3e-3, m)
    out_stop = out_start + in_dur * rng.uniform(0.6, 1.0, m)
    out_dur = out_stop - out_start
    out_mid = (out_start + out_stop) / 2.0 + rng.uniform(0, 2e-3, m)
    out_log = out_stop + rng.uniform(1e-3, 2e-2, m)
    compressed = np.floor(total * rng.uniform(0.85, 1.15, m)) + 46.0

    # rows: 0 incoming (first), 1 incoming (re-sent), 2 outgoing
    which = np.concatenate([np.zeros(m, np.int8), np.ones(m, np.int8), np.full(m, 2, np.int8)])
    idx = np.concatenate([np.arange(m)] * 3)
    time = np.concatenate([log1, log2, out_log])
    time, which, idx = _sort_rows(time, which, idx)
    keys_dict = pc.binary_join_element_wise("{", p.key_lit(src), ": ", _fmt_ints(total), "}", "")
    keys_dict = _csv_field(keys_dict)
    types = pa.array(["incoming_transfer", "outgoing_transfer"], pa.string())
    out = _CsvFile(path, COLUMNS["worker_transfer.csv"])
    try:
        for a in range(0, len(time), chunk):
            sl = slice(a, a + chunk)
            w, i = which[sl], idx[sl]
            o = w == 2
            start = np.where(o, out_start[i], in_start[i])
            stop = np.where(o, out_stop[i], in_stop[i])
            dur = np.where(o, out_dur[i], in_dur[i])
            out.write(
                [
                    format_floats(start),
                    format_floats(stop),
                    format_floats(np.where(o, out_mid[i], in_mid[i])),
                    format_floats(dur),
                    _take(keys_dict, i),
                    _fmt_ints(total[i]),
                    format_floats(total[i] / dur),
                    _take(p.addresses, np.where(o, dst_w[i], src_w[i])),
                    _take(types, o.astype(np.int64)),
                    _take(p.addresses, np.where(o, src_w[i], dst_w[i])),
                    format_floats(time[sl]),
                    _masked(o, format_floats(compressed[i[o]])),
                ]
            )
    finally:
        out.close()
    return out.rows, m


def _replica_uses(p: _Plan, ev: _Events) -> int:
    """Executions that used a replica (``mp:usedReplica``, docs/model.md): an execution on worker
    W of a task with a dependency that a transfer had brought to W by the execution's start.

    Counted on the worker-transition windows (first attempts of retried tasks included) and on
    the receiving side's transfer times, both at the microseconds the reader parses. Whether some
    copy had arrived is the earliest arrival per (dependency, worker) <= the start.
    """
    tr = np.flatnonzero(p.transfer)
    if not len(tr):
        return 0

    def us(t: np.ndarray) -> np.ndarray:
        return np.rint(np.asarray(t, dtype=np.float64) * 1e6).astype(np.int64)

    g = p.dep1[tr].astype(np.int64) * p.workers + p.worker_of[tr]
    order = np.lexsort((us(ev.tr_stop[tr]), g))
    g, arrival = g[order], us(ev.tr_stop[tr])[order]
    first = np.concatenate(([True], g[1:] != g[:-1]))
    g, arrival = g[first], arrival[first]  # earliest arrival per (dependency, worker)
    task = np.concatenate([np.arange(p.n), p.retry_task]).astype(np.int64)
    worker = np.concatenate([p.worker_of, p.retry_thread // p.threads]).astype(np.int64)
    start = us(np.concatenate([p.start, p.retry_start]))
    used = np.zeros(len(task), dtype=bool)
    for dep in (p.dep1, p.dep2):
        d = dep[task].astype(np.int64)
        q = np.where(d >= 0, d * p.workers + worker, -1)
        at = np.minimum(np.searchsorted(g, q), len(g) - 1)
        used |= (d >= 0) & (g[at] == q) & (arrival[at] <= start)
    return int(used.sum())


def _write_graph(path: Path, p: _Plan, chunk: int) -> tuple[int, int]:
    """One row per graph; the `keys` set and `dependencies` dict cells are streamed in pieces."""
    wanted = _n_dependents(p.dep1, p.dep2) == 0
    n_wanted = 0
    with open(path, "wb") as fh:
        fh.write(("," + ",".join(COLUMNS["graph.csv"]) + "\n").encode())
        for g in range(p.graphs):
            a, b = int(p.graph_start[g]), int(p.graph_start[g + 1])
            w_idx = a + np.flatnonzero(wanted[a:b])
            n_wanted += len(w_idx)
            # A tuple key is a quoted CSV field: its literal has a comma, so the cell is quoted.
            has_tuple = bool(pc.any(pc.starts_with(p.key_csv.slice(a, b - a), '"')).as_py())
            fh.write(f"{g},{p.client_names[p.graph_client[g]]},".encode())
            # keys: set repr of the keys the client asked for (the graph's sinks)
            quote_keys = len(w_idx) > 1 or has_tuple
            fh.write(b'"{' if quote_keys else b"{")
            for c in range(0, len(w_idx), chunk):
                _write_joined(fh, p.key_lit(w_idx[c : c + chunk]), ", ", c + chunk >= len(w_idx))
            fh.write(b'}",' if quote_keys else b"},")
            # dependencies: {key: {dep, ...} or set(), ...} for every task of the graph
            quote_deps = (b - a) > 1 or has_tuple or bool((p.dep2[a:b] >= 0).any())
            fh.write(b'"{' if quote_deps else b"{")
            for c in range(a, b, chunk):
                sl = slice(c, min(c + chunk, b))
                d1, d2 = p.dep1[sl], p.dep2[sl]
                l1 = p.key_lit(np.maximum(d1, 0))
                l2 = p.key_lit(np.maximum(d2, 0))
                two = pc.binary_join_element_wise("{", l1, ", ", l2, "}", "")
                one = pc.binary_join_element_wise("{", l1, "}", "")
                deps = pc.if_else(
                    pa.array(d2 >= 0), two, pc.if_else(pa.array(d1 >= 0), one, "set()")
                )
                entry = pc.binary_join_element_wise(
                    p.key_lit(np.arange(sl.start, sl.stop)), deps, ": "
                )
                _write_joined(fh, entry, ", ", sl.stop >= b)
            fh.write(b'}",' if quote_deps else b"},")
            fh.write(format_floats(np.array([p.graph_time[g]]))[0].as_py().encode() + b"\n")
    return p.graphs, n_wanted


def _write_joined(fh: BinaryIO, arr: pa.Array, sep: str, last: bool) -> None:
    """Write the strings of ``arr`` separated by ``sep``; a trailing ``sep`` unless ``last``."""
    if len(arr) == 0:
        return
    if last:
        if len(arr) > 1:
            _write_lines(fh, arr.slice(0, len(arr) - 1), sep)
        fh.write(arr[len(arr) - 1].as_py().encode())
    else:
        _write_lines(fh, arr, sep)


def _write_workers(path: Path, p: _Plan) -> int:
    removed = p.end_time + 0.2 + np.arange(p.workers) * 1.1e-3
    out = _CsvFile(path, COLUMNS["worker.csv"])
    try:
        out.write([p.addresses, "add", "", format_floats(p.worker_added)])
        stim = pc.binary_join_element_wise("worker-close-", format_floats(removed - 2e-4), "")
        out.write([p.addresses, "remove", stim, format_floats(removed)])
    finally:
        out.close()
    return out.rows


def _write_clients(path: Path, p: _Plan) -> int:
    names = pa.array(p.client_names, pa.string())
    removed = p.end_time + 0.1 + np.arange(p.clients) * 1.3e-3
    out = _CsvFile(path, COLUMNS["client.csv"])
    try:
        out.write([names, "add", format_floats(p.client_added)])
        out.write([names, "remove", format_floats(removed)])
    finally:
        out.close()
    return out.rows


# --------------------------------------------------------------------------------------------
# Darshan I/O (io_fraction > 0): one DXT log per worker process
# --------------------------------------------------------------------------------------------

#: Default size of the pool of data files the I/O tasks read and write.
IO_FILES = 100
# Tasks shorter than this do no I/O: a segment needs room inside the window, with margins.
_IO_MIN_DURATION = 5e-4
# Every task segment keeps this share of its task's duration (at most 1 ms) from both window
# edges: >= 50 us, far above the rounding of times to microseconds on either side.
_IO_EDGE_SHARE = 0.1
_IO_EDGE_MAX = 1e-3
# Segments per I/O task: 1, 2, 3 or 4 with these probabilities.
_IO_SEGMENTS_P = (0.55, 0.25, 0.12, 0.08)
# Prefixes whose tasks read (array chunks and loaders read their input files).
_IO_READ_PREFIXES = ("load", "array")
# Darshan's clock is late against the worker's time.time() by this much (s), per process: the
# range measured on a real local Dask run (docs: shared/design/inputs.md, section 2).
_IO_LATE = (0.012, 0.058)
_IO_USER = "dask"
_IO_PROJECT = "DaskProv"
_IO_ENV = "/home/dask/.conda/envs/dask"
_IO_CMD = (
    f"{_IO_ENV}/bin/python3 -c from multiprocessing.spawn import spawn_main; "
    "spawn_main(tracker_fd=9, pipe_handle=15) --multiprocessing-fork"
)
_IO_MOUNTS = (("lustre", "/lus/grand"), ("xfs", "/local/scratch"), ("ext4", "/"))
# Files a worker process reads while it starts (imports, configuration): process-level I/O.
_IO_STARTUP_FILES = tuple(
    f"{_IO_ENV}/lib/python3.11/site-packages/{m}"
    for m in (
        "numpy/__init__.py",
        "numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
        "pandas/__init__.py",
        "pandas/_libs/lib.cpython-311-x86_64-linux-gnu.so",
        "dask/__init__.py",
        "dask/config.py",
        "dask/dask.yaml",
        "distributed/__init__.py",
        "distributed/worker.py",
        "distributed/distributed.yaml",
        "h5py/__init__.py",
        "h5py/_hl/files.py",
        "tornado/ioloop.py",
        "msgpack/__init__.py",
        "toolz/__init__.py",
        "yaml/__init__.py",
        "psutil/__init__.py",
        "zict/__init__.py",
        "tblib/__init__.py",
        "sortedcontainers/__init__.py",
    )
)


@dataclass
class _IOPlan:
    """Every DXT segment of the run, sorted by (worker, start); times on the worker's clock."""

    worker: np.ndarray  # int64
    task: np.ndarray  # int64; -1: process-level I/O (a thread that runs no task)
    pthread: np.ndarray  # uint64
    path: np.ndarray  # int64 code into paths
    write: np.ndarray  # bool
    offset: np.ndarray  # int64
    length: np.ndarray  # int64
    start: np.ndarray  # float64 epoch seconds, worker clock
    end: np.ndarray
    paths: list[str]
    io_tasks: int
    # per worker process
    pid: np.ndarray
    hostnames: list[str]  # per worker
    log_start_ns: np.ndarray  # Darshan's recorded job start (int ns)
    log_end_ns: np.ndarray
    late: np.ndarray  # Darshan clock minus worker clock (s)
    main_thread: np.ndarray
    log_names: list[str]
    jobid: int
    uid: int

    @property
    def bounds(self) -> np.ndarray:
        return np.searchsorted(self.worker, np.arange(len(self.pid) + 1))


def _under_failed_attempts(p: _Plan) -> np.ndarray:
    """Tasks whose window overlaps a failed first attempt once that is put on their thread.

    The CSV files give a failed first attempt no thread (only the final ``processing->memory``
    row carries one), so readers place it on the thread of the final attempt; there it can
    overlap other tasks, and I/O inside such a task would fit two windows. Those tasks do no I/O.
    """
    n, k = p.n, len(p.retry_task)
    hit = np.zeros(n, dtype=bool)
    if not k or not n:
        return hit
    t0 = min(float(p.start.min()), float(p.retry_start.min()))
    span = np.int64(int((max(float(p.end.max()), float(p.retry_end.max())) - t0) * 1e9) + 10**9)

    def at(thread: np.ndarray, t: np.ndarray) -> np.ndarray:  # (thread, time) as one int64 axis
        return thread.astype(np.int64) * span + np.round((t - t0) * 1e9).astype(np.int64)

    order = np.lexsort((p.start, p.thread))  # per thread, windows are disjoint and in order
    s_key = at(p.thread[order], p.start[order])
    e_key = at(p.thread[order], p.end[order])
    th = p.thread[p.retry_task]
    # windows [a, b) of the thread: from the first ending after the attempt's start to the last
    # starting before its end
    a = np.searchsorted(e_key, at(th, p.retry_start), side="left")
    b = np.searchsorted(s_key, at(th, p.retry_end), side="right")
    ok = b > a
    mark = np.zeros(n + 1, dtype=np.int64)
    np.add.at(mark, a[ok], 1)
    np.add.at(mark, b[ok], -1)
    hit[order] = np.cumsum(mark[:n]) > 0
    return hit


def _io_plan(p: _Plan, seed: int, io_fraction: float, io_files: int) -> _IOPlan:
    """The run's I/O: which tasks do it, on which files, when; plus the processes' own I/O."""
    from metaprov.synthetic.darshan import log_file_name

    # Its own stream: the CSV files do not depend on the I/O options.
    rng = np.random.Generator(np.random.PCG64([seed, 2]))
    nw, n = p.workers, p.n

    # ---- worker processes: pid, host, Darshan's start/end, clock lateness, non-task threads
    jobid = int(rng.integers(1_000_000, 2_000_000))
    uid = int(rng.integers(20_000, 40_000))
    pid = np.sort(rng.choice(np.arange(10_000, 60_000), size=nw, replace=False)).astype(np.int64)
    rng.shuffle(pid)
    node = rng.choice(560, size=(nw + 3) // 4, replace=False)
    host_names = [f"x{3001 + int(v) // 28}c{int(v) % 28 // 7}s{int(v) % 7}b0n0" for v in node]
    hostnames = [host_names[w // 4] for w in range(nw)]
    proc_start = p.worker_added - rng.uniform(1.0, 1.6, nw)
    log_start_ns = np.round(proc_start * 1e6).astype(np.int64) * 1000
    late = rng.uniform(_IO_LATE[0], _IO_LATE[1], nw)
    removed = p.end_time + 0.2 + np.arange(nw) * 1.1e-3  # as in worker.csv
    log_end_ns = np.round((removed + late + rng.uniform(0.01, 0.05, nw)) * 1e6).astype(np.int64)
    log_end_ns *= 1000
    # pthread_self() of the main thread (event loop) and of the offload thread: addresses above
    # the worker's task threads, ending in 0x740 where task thread ids end in 0x640 (0x641 when
    # wide): never equal to any task thread of any worker.
    top = p.thread_ids[:: p.threads] & np.uint64(0x7FFF_FFFF_FFFF_F000)
    main_thread = (top + np.uint64(0x800_0000)) | np.uint64(0x740)
    offload_thread = main_thread + np.uint64(0x80_1000)
    log_names = [
        log_file_name(_IO_USER, "python3", jobid, int(pid[w]), int(log_start_ns[w]) / 1e9)
        for w in range(nw)
    ]

    # ---- task I/O: which tasks, read or write, which file, how many segments
    dur = p.end - p.start
    eligible = np.flatnonzero((dur >= _IO_MIN_DURATION) & ~_under_failed_attempts(p))
    k = min(int(round(io_fraction * n)), len(eligible))
    tasks = np.sort(rng.choice(eligible, size=k, replace=False)) if k else eligible[:0]
    read_prefix = np.isin(
        np.asarray(p.prefix_names.to_pylist(), dtype=object), list(_IO_READ_PREFIXES)
    )
    sink = _n_dependents(p.dep1, p.dep2)[tasks] == 0
    coin = rng.random(k) < 0.5
    t_write = ~read_prefix[p.prefix_code[tasks]] & (sink | coin)
    t_file = rng.integers(0, io_files, k)
    nseg = rng.choice(len(_IO_SEGMENTS_P), size=k, p=_IO_SEGMENTS_P) + 1
    m = int(nseg.sum())
    owner = np.repeat(np.arange(k), nseg)
    j = np.arange(m) - np.repeat(np.cumsum(nseg) - nseg, nseg)
    tk = tasks[owner]
    d = dur[tk]
    edge = np.minimum(_IO_EDGE_SHARE * d, _IO_EDGE_MAX)
    slot = (d - 2 * edge) / nseg[owner]
    seg_len = slot * rng.uniform(0.15, 0.85, m)
    # Segments of a task follow one another, each inside its own slot of the inner window.
    t_start = p.start[tk] + (edge + j * slot + (slot - seg_len) * rng.random(m))
    t_end = t_start + seg_len
    bandwidth = np.exp(rng.normal(np.log(8e8), 0.7, m))
    t_length = np.maximum(np.floor(seg_len * bandwidth), 512).astype(np.int64)
    width = max(4, len(str(io_files)))
    paths = [
        f"/lus/grand/projects/{_IO_PROJECT}/data/part-{i + 1:0{width}d}.h5" for i in range(io_files)
    ]

    # ---- process-level I/O (threads that run no task): startup reads on the main thread,
    # spills on the offload thread during the run, log writes on the main thread at the end.
    n_startup = len(_IO_STARTUP_FILES)
    paths += list(_IO_STARTUP_FILES)
    paths += [
        f"/lus/grand/projects/{_IO_PROJECT}/logs/worker-{a.split('//')[-1].replace(':', '-')}.log"
        for a in p.addresses.to_pylist()
    ]
    spill_base = len(paths)
    n_spill = rng.integers(0, 4, nw)
    spill_dir = _hex(rng.integers(0, 256, size=(nw, 4), dtype=np.uint8))
    for w in range(nw):
        d8 = spill_dir[w].tobytes().decode()
        paths += [
            f"/local/scratch/dask-scratch-space/worker-{d8}/storage/spill-{i}.bin"
            for i in range(int(n_spill[w]))
        ]
    pw: list[np.ndarray] = []
    pth: list[np.ndarray] = []
    ppath: list[np.ndarray] = []
    pwrite: list[np.ndarray] = []
    pstart: list[np.ndarray] = []
    plen: list[np.ndarray] = []
    spill_at = spill_base
    t_run0 = float(p.start.min()) if n else float(p.worker_added.max())
    for w in range(nw):  # a handful of rows per worker (<= 192 workers): not the hot path
        ns = int(rng.integers(10, n_startup + 1))
        files = np.sort(rng.choice(n_startup, size=ns, replace=False)) + io_files
        t0 = int(log_start_ns[w]) / 1e9
        st = np.sort(rng.uniform(t0 + 0.05, float(p.worker_added[w]) - 0.05, ns))
        nl = int(rng.integers(2, 5))
        lt = np.sort(rng.uniform(p.end_time + 0.05, float(removed[w]) - 0.02, nl))
        ks = int(n_spill[w])
        sp = np.sort(rng.uniform(t_run0, max(p.end_time - 0.05, t_run0), ks))
        pw.append(np.full(ns + nl + ks, w, np.int64))
        pth.append(
            np.concatenate(
                [np.full(ns + nl, main_thread[w], np.uint64), np.full(ks, offload_thread[w])]
            )
        )
        ppath.append(
            np.concatenate(
                [
                    files,
                    np.full(nl, io_files + n_startup + w, np.int64),
                    spill_at + np.arange(ks, dtype=np.int64),
                ]
            )
        )
        spill_at += ks
        pwrite.append(np.r_[np.zeros(ns, bool), np.ones(nl + ks, bool)])
        pstart.append(np.concatenate([st, lt, sp]))
        plen.append(
            np.concatenate(
                [
                    np.exp(rng.normal(np.log(30_000), 1.0, ns)),
                    rng.uniform(80, 400, nl),
                    np.exp(rng.normal(np.log(5e7), 0.8, ks)),
                ]
            ).astype(np.int64)
        )
    p_start = np.concatenate(pstart)
    p_len = np.concatenate(plen)
    p_end = p_start + rng.uniform(2e-5, 3e-4, len(p_start)) + p_len / 2e9

    # ---- all segments, sorted by (worker, start)
    worker = np.concatenate([(p.thread[tk] // p.threads).astype(np.int64), np.concatenate(pw)])
    task = np.concatenate([tk, np.full(len(p_start), -1, np.int64)])
    pthread = np.concatenate([p.thread_ids[p.thread[tk]], np.concatenate(pth)])
    path = np.concatenate([t_file[owner].astype(np.int64), np.concatenate(ppath)])
    write = np.concatenate([t_write[owner], np.concatenate(pwrite)])
    length = np.concatenate([t_length, p_len])
    start = np.concatenate([t_start, p_start])
    end = np.concatenate([t_end, p_end])
    order = np.lexsort((start, worker))
    worker, task, pthread, path, write, length, start, end = (
        a[order] for a in (worker, task, pthread, path, write, length, start, end)
    )
    # Offsets: each (file, read|write) is accessed sequentially in time order, across tasks;
    # process files per process.
    group = (path * 2 + write) * (nw + 1) + np.where(task < 0, worker + 1, 0)
    o = np.lexsort((start, group))
    cum = np.cumsum(length[o]) - length[o]
    g = group[o]
    head = np.r_[True, g[1:] != g[:-1]]
    cum -= np.maximum.accumulate(np.where(head, cum, 0))
    offset = np.empty_like(cum)
    offset[o] = cum
    return _IOPlan(
        worker=worker,
        task=task,
        pthread=pthread,
        path=path,
        write=write,
        offset=offset,
        length=length,
        start=start,
        end=end,
        paths=paths,
        io_tasks=k,
        pid=pid,
        hostnames=hostnames,
        log_start_ns=log_start_ns,
        log_end_ns=log_end_ns,
        late=late,
        main_thread=main_thread,
        log_names=log_names,
        jobid=jobid,
        uid=uid,
    )


def _write_darshan(run: Path, p: _Plan, io: _IOPlan) -> None:
    """One Darshan log (96-byte DXT layout, POSIX counters) per worker process."""
    import pandas as pd

    from metaprov.synthetic.darshan import write_darshan_log

    paths = np.asarray(io.paths, dtype=object)
    ops = np.asarray(["read", "write"], dtype=object)
    b = io.bounds
    for w in range(p.workers):
        sl = slice(int(b[w]), int(b[w + 1]))
        sec, nsec = divmod(int(io.log_start_ns[w]), 1_000_000_000)
        esec, ensec = divmod(int(io.log_end_ns[w]), 1_000_000_000)
        # Relative to the recorded start, on Darshan's (late) clock; the integer second is
        # taken off first so the subtraction is exact.
        late = float(io.late[w]) - nsec / 1e9
        segs = pd.DataFrame(
            {
                "path": paths[io.path[sl]],
                "op": ops[io.write[sl].astype(np.int64)],
                "offset": io.offset[sl],
                "length": io.length[sl],
                "start_rel": (io.start[sl] - sec) + late,
                "end_rel": (io.end[sl] - sec) + late,
                "pthread": pd.array(io.pthread[sl], dtype="UInt64"),
            }
        )
        write_darshan_log(
            run / io.log_names[w],
            segs,
            start=(sec, nsec),
            end=(esec, ensec),
            cmdline=_IO_CMD,
            uid=io.uid,
            jobid=io.jobid,
            nprocs=1,
            hostname=io.hostnames[w],
            mounts=_IO_MOUNTS,
            layout=96,
        )


def _io_truth(p: _Plan, io: _IOPlan, io_fraction: float, io_files: int) -> dict[str, Any]:
    """The I/O ground truth: what ``link_io`` must find, and the answers of the I/O questions."""
    on_task = io.task >= 0
    n_files = io_files

    def totals(mask: np.ndarray) -> dict[str, int]:
        w, ln = io.write[mask], io.length[mask]
        return {
            "segments": int(mask.sum()),
            "reads": int((~w).sum()),
            "writes": int(w.sum()),
            "bytes_read": int(ln[~w].sum()),
            "bytes_written": int(ln[w].sum()),
            "files": int(len(np.unique(io.path[mask]))),
            "files_read": int(len(np.unique(io.path[mask][~w]))),
            "files_written": int(len(np.unique(io.path[mask][w]))),
        }

    task_io = totals(on_task)
    tk, tw = io.task[on_task], io.write[on_task]
    task_io["tasks"] = io.io_tasks
    task_io["tasks_read"] = int(len(np.unique(tk[~tw])))
    task_io["tasks_written"] = int(len(np.unique(tk[tw])))

    # per prefix (Dask's key_split) and per data file, from the task segments
    names = p.prefix_names.to_pylist()
    code = p.prefix_code[tk].astype(np.int64)
    ln = io.length[on_task]
    npx = len(names)
    ntask = np.bincount(p.prefix_code[np.unique(tk)].astype(np.int64), minlength=npx)
    by_prefix = {}
    for c in range(npx):
        sel = code == c
        if not sel.any():
            continue
        by_prefix[names[c]] = {
            "tasks": int(ntask[c]),
            "segments": int(sel.sum()),
            "reads": int((sel & ~tw).sum()),
            "writes": int((sel & tw).sum()),
            "bytes_read": int(ln[sel & ~tw].sum()),
            "bytes_written": int(ln[sel & tw].sum()),
        }
    fp = io.path[on_task]
    reads_f = np.bincount(fp[~tw], minlength=n_files)
    writes_f = np.bincount(fp[tw], minlength=n_files)
    br_f = np.bincount(fp[~tw], weights=ln[~tw], minlength=n_files)
    bw_f = np.bincount(fp[tw], weights=ln[tw], minlength=n_files)
    # distinct (file, read|write, task): tasks that read / wrote each file
    pairs = np.unique((fp * 2 + tw) * np.int64(p.n) + tk)
    pair_file, pair_write = pairs // p.n // 2, (pairs // p.n) % 2 == 1
    treads_f = np.bincount(pair_file[~pair_write], minlength=n_files)
    twrites_f = np.bincount(pair_file[pair_write], minlength=n_files)
    by_file = {
        io.paths[f]: {
            "reads": int(reads_f[f]),
            "writes": int(writes_f[f]),
            "bytes_read": int(br_f[f]),
            "bytes_written": int(bw_f[f]),
            "tasks_read": int(treads_f[f]),
            "tasks_written": int(twrites_f[f]),
        }
        for f in range(n_files)
        if reads_f[f] or writes_f[f]
    }
    counts = np.bincount(io.worker, minlength=p.workers)
    tcounts = np.bincount(io.worker[on_task], minlength=p.workers)
    addresses = p.addresses.to_pylist()
    logs = [
        {
            "log": io.log_names[w],
            "worker": addresses[w],
            "pid": int(io.pid[w]),
            "hostname": io.hostnames[w],
            "clock_late_s": float(io.late[w]),
            "main_thread": int(io.main_thread[w]),
            "segments": int(counts[w]),
            "task_segments": int(tcounts[w]),
        }
        for w in range(p.workers)
    ]
    n_task, n_proc = int(on_task.sum()), int((~on_task).sum())
    return {
        "io_fraction": io_fraction,
        "io_files": io_files,
        "logs": logs,
        "segments": int(len(io.task)),
        # what metaprov.link_io must report: every task segment linked to its task, every other
        # segment attributed to its process
        "link": {"linked": n_task, "process": n_proc, "ambiguous": 0, "unlinked": 0},
        "task": task_io,
        "process": totals(~on_task),
        "by_prefix": by_prefix,
        "by_file": by_file,
    }


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def generate_run(
    path: str | Path,
    n_tasks: int,
    *,
    seed: int = 0,
    workers: int = 8,
    threads: int = 8,
    transfer_fraction: float = 0.10,
    tuple_key_fraction: float = 0.5,
    with_worker_transitions: bool = True,
    with_scheduler_transitions: bool = True,
    graphs: int = 1,
    clients: int = 1,
    erred_fraction: float = 0.0,
    retried_fraction: float = 0.0,
    wide_thread_ids: bool = False,
    fetch_transitions: bool = False,
    io_fraction: float = 0.0,
    io_files: int = IO_FILES,
    chunk_rows: int = CHUNK_ROWS,
) -> Path:
    """Write a synthetic Mofka-Dask run directory and its ``truth.json``.

    Per task: 3 scheduler transitions (``released->waiting``, ``waiting->processing``,
    ``processing->memory`` with thread, worker, begins, ends, duration, size), 4 worker transitions
    (``released->waiting->ready->executing->memory``); ``transfer_fraction`` of the tasks fetch one
    dependency from another worker (3 transfer rows: the incoming row twice, differing only in
    ``time``, and the sender's outgoing row). ``graph.csv`` holds the dependency DAG. With worker
    transitions, ``truth.json`` says in ``replica_uses`` how many executions read a copy of a
    dependency that a transfer had brought to their worker by their start (``mp:usedReplica``).

    Args:
        path: run directory to create (existing files of the same names are overwritten).
        n_tasks: number of tasks (N).
        seed: random seed; same seed and arguments give byte-identical files.
        workers: worker processes.
        threads: threads per worker.
        transfer_fraction: share of tasks that fetch a dependency from another worker.
        tuple_key_fraction: share of tasks with tuple keys ``('<prefix>-<md5>', i)``.
        with_worker_transitions: write ``worker_transition.csv`` (real runs often lack it).
        with_scheduler_transitions: write ``scheduler_transition.csv``.
        graphs: number of submitted graphs (run one after the other).
        clients: number of clients; graph ``g`` is submitted by client ``g % clients``.
        erred_fraction: share of tasks that end in error (chosen among tasks nobody depends on).
        retried_fraction: share of tasks whose first attempt failed and that ran a second time
            (scheduler: ``processing->released->waiting->processing``; worker: the first attempt
            ends ``executing->error``, ``error->released``).
        wide_thread_ids: make thread ids larger than 2^63 and odd, so that any float conversion in
            a reader changes them (real Linux ids are < 2^47).
        fetch_transitions: also write the receiving worker's ``released->fetch->flight->memory``
            transitions of each transferred key (real runs have them; off in the reference workload).
        io_fraction: share of the tasks that do file I/O. Above 0, one Darshan DXT log per worker
            process is written too (see "Darshan I/O" below); 0 (the default) writes none and
            leaves every other file byte-identical to a run generated without the option.
        io_files: size of the pool of data files the I/O tasks read and write
            (``/lus/grand/projects/DaskProv/data/part-0001.h5`` ...).
        chunk_rows: rows formatted per batch (bounds memory).

    Darshan I/O (``io_fraction > 0``): ``round(io_fraction * n_tasks)`` tasks, drawn at random
    among those lasting at least 0.5 ms, each issue 1-4 DXT segments (55/25/12/8 %) on one file of
    the pool, one after another, on the task's own thread id and strictly inside its compute
    window (``ready->executing`` .. ``executing->memory|error`` of its final attempt), at least
    10 % of the task's duration (at most 1 ms, at least 50 us) from both edges. Tasks of the
    ``load`` and ``array`` prefixes read; the graph's sinks (the "save/store" step) write; the
    others read or write at random. Lengths follow the segment's duration at ~0.8 GB/s; offsets
    are sequential per (file, read|write) in time order. Each worker process also has
    process-level I/O on threads that run no task: 10-20 startup reads (site-packages modules,
    configuration) on its main thread before the worker registers, 0-3 spill writes on an offload
    thread during the run and 2-4 writes to its log file after the last task. Each log is
    written with :func:`metaprov.synthetic.darshan.write_darshan_log` in the 96-byte DXT
    layout of the Dask-run Darshan build (``pthread_id=<n>`` in ``extra_info``) with POSIX
    counters, a worker command line (``--multiprocessing-fork``), the worker's host and its own
    pid, and a Darshan clock 12-58 ms late against the worker's clock (as measured on real
    runs): :func:`metaprov.link_io` has to estimate that offset. ``truth.json`` gains ``io``:
    per log (worker, pid, true lateness, segment counts), the link counts ``link_io`` must report
    (every task segment ``linked``, every other one ``process``, none ambiguous or unlinked),
    reads, writes, bytes and files of task and process I/O, and per prefix and per data file;
    :func:`expected_io` lists every intended segment with its task. The exact link counts hold
    with worker transitions (the default) and enough I/O per worker to pin each process's clock
    offset (tens of task segments per worker).

    Returns:
        The run directory.

    Raises:
        UsageError: a parameter is out of range.
    """
    if not 1 <= n_tasks < 2**31:
        raise UsageError(f"n_tasks must be within [1, 2^31), got {n_tasks}")
    if not 1 <= workers <= 192 or threads < 1:
        raise UsageError(f"need 1 <= workers <= 192 and threads >= 1, got {workers} and {threads}")
    if graphs < 1 or graphs > n_tasks or clients < 1:
        raise UsageError(
            f"need 1 <= graphs <= n_tasks and clients >= 1, got {graphs} and {clients}"
        )
    for name, v in (
        ("transfer_fraction", transfer_fraction),
        ("tuple_key_fraction", tuple_key_fraction),
        ("erred_fraction", erred_fraction),
        ("retried_fraction", retried_fraction),
        ("io_fraction", io_fraction),
    ):
        if not 0.0 <= v <= 1.0:
            raise UsageError(f"{name} must be within [0, 1], got {v}")
    if retried_fraction > 0.5:
        raise UsageError(f"retried_fraction must be <= 0.5, got {retried_fraction}")
    if io_files < 1:
        raise UsageError(f"io_files must be >= 1, got {io_files}")
    run = Path(path)
    run.mkdir(parents=True, exist_ok=True)

    params: dict[str, Any] = dict(
        n_tasks=n_tasks,
        seed=seed,
        workers=workers,
        threads=threads,
        transfer_fraction=transfer_fraction,
        tuple_key_fraction=tuple_key_fraction,
        with_worker_transitions=with_worker_transitions,
        with_scheduler_transitions=with_scheduler_transitions,
        graphs=graphs,
        clients=clients,
        erred_fraction=erred_fraction,
        retried_fraction=retried_fraction,
        wide_thread_ids=wide_thread_ids,
        fetch_transitions=fetch_transitions,
    )
    if io_fraction > 0:  # absent otherwise: truth.json of runs without I/O is unchanged
        params.update(io_fraction=io_fraction, io_files=io_files)
    p = _plan(
        n_tasks,
        seed=seed,
        workers=workers,
        threads=threads,
        transfer_fraction=transfer_fraction,
        tuple_key_fraction=tuple_key_fraction,
        graphs=graphs,
        clients=clients,
        erred_fraction=erred_fraction,
        retried_fraction=retried_fraction,
        wide_thread_ids=wide_thread_ids,
    )
    # A second stream for latencies, so the plan does not depend on which files are written.
    rng = np.random.Generator(np.random.PCG64([seed, 1]))
    ev = _events(p, rng)
    _release()

    files: dict[str, int] = {}
    for stale in ("scheduler_transition.csv", "worker_transition.csv", *_old_logs(run)):
        (run / stale).unlink(missing_ok=True)
    if with_scheduler_transitions:
        files["scheduler_transition.csv"] = _write_scheduler(
            run / "scheduler_transition.csv", p, ev, chunk_rows
        )
    _release()
    if with_worker_transitions:
        files["worker_transition.csv"] = _write_worker_transitions(
            run / "worker_transition.csv", p, ev, chunk_rows, fetch_transitions
        )
    _release()
    transfer_rows, n_transfers = _write_transfers(
        run / "worker_transfer.csv", p, ev, rng, chunk_rows
    )
    files["worker_transfer.csv"] = transfer_rows
    files["graph.csv"], n_wanted = _write_graph(run / "graph.csv", p, chunk_rows)
    files["worker.csv"] = _write_workers(run / "worker.csv", p)
    files["client.csv"] = _write_clients(run / "client.csv", p)
    io_truth: dict[str, Any] | None = None
    if io_fraction > 0:
        io = _io_plan(p, seed, io_fraction, io_files)
        _write_darshan(run, p, io)
        io_truth = _io_truth(p, io, io_fraction, io_files)
        del io

    n_edges = int((p.dep1 >= 0).sum() + (p.dep2 >= 0).sum())
    truth: dict[str, Any] = {
        "generator": "metaprov.synthetic",
        "generator_version": GENERATOR_VERSION,
        "params": params,
        "tasks": n_tasks,
        "executions": n_tasks + len(p.retry_task),
        "retried": len(p.retry_task),
        "erred": int(p.erred.sum()),  # final state erred (scheduler processing->erred)
        # executions that ended executing->error: erred tasks plus failed first attempts
        "failed_executions": int(p.erred.sum()) + len(p.retry_task),
        "tuple_keys": p.n_tuple,
        "scheduler_transitions": files.get("scheduler_transition.csv", 0),
        "worker_transitions": files.get("worker_transition.csv", 0),
        "transfer_rows": transfer_rows,
        "transfers": n_transfers,
        "transfer_rows_distinct": 2 * n_transfers,
        "duplicate_transfer_rows": n_transfers,
        "edges": n_edges,
        "wanted": n_wanted,
        "workers": workers,
        "threads": workers * threads,
        "clients": clients,
        "graphs": graphs,
        "rows": files,
        "rows_total": int(sum(files.values())),
        "bytes": {name: (run / name).stat().st_size for name in files},
    }
    if with_worker_transitions:
        # Without them, executions are the scheduler's startstops, which for a fetching task
        # start with its transfer: the count would be another one (not written).
        truth["replica_uses"] = _replica_uses(p, ev)
    if io_truth is not None:
        truth["io"] = io_truth
    (run / TRUTH_FILE).write_text(json.dumps(truth, indent=2, sort_keys=True) + "\n")
    return run


def load_truth(path: str | Path) -> dict[str, Any]:
    """Read the ``truth.json`` that :func:`generate_run` wrote into ``path``."""
    return json.loads((Path(path) / TRUTH_FILE).read_text())


def _old_logs(run: Path) -> list[str]:
    """Darshan logs an earlier generate_run wrote into ``run`` (listed in its truth.json)."""
    try:
        old = json.loads((run / TRUTH_FILE).read_text())
        return [str(entry["log"]) for entry in old.get("io", {}).get("logs", [])]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []


def expected_io(path: str | Path) -> pd.DataFrame:
    """Every DXT segment a synthetic run's Darshan logs hold, with the task that issued it.

    Rebuilds the generator's plan from the parameters in ``truth.json`` (as long as generating
    the run's numbers takes, without writing anything).

    Args:
        path: a run directory written by :func:`generate_run` with ``io_fraction > 0``.

    Returns:
        One row per segment: ``log``, ``worker`` (address), ``pid``, ``pthread`` (UInt64),
        ``level`` (``task`` or ``process``), ``key`` (``str(key)``, as in the CSV files; missing
        for process-level I/O), ``attempt`` (0, or 1 for a retried task's final attempt),
        ``path``, ``op`` (``read``/``write``), ``offset``, ``length``, ``start``/``end`` (float
        epoch seconds on the worker's clock; Darshan's own times are later by the log's
        ``clock_late_s`` in ``truth.json``). ``(log, path, op, offset)`` identifies a segment.

    Raises:
        UsageError: the run was generated without I/O.
    """
    import pandas as pd

    truth = load_truth(path)
    prm = dict(truth["params"])
    if "io_fraction" not in prm:
        raise UsageError(f"{path}: generated without I/O (io_fraction = 0): no Darshan logs")
    p = _plan(
        prm["n_tasks"],
        seed=prm["seed"],
        workers=prm["workers"],
        threads=prm["threads"],
        transfer_fraction=prm["transfer_fraction"],
        tuple_key_fraction=prm["tuple_key_fraction"],
        graphs=prm["graphs"],
        clients=prm["clients"],
        erred_fraction=prm["erred_fraction"],
        retried_fraction=prm["retried_fraction"],
        wide_thread_ids=prm["wide_thread_ids"],
    )
    io = _io_plan(p, prm["seed"], prm["io_fraction"], prm["io_files"])
    on_task = io.task >= 0
    tk = np.maximum(io.task, 0)
    keys = pc.if_else(pa.array(on_task), _take(p.key_csv, tk), pa.scalar(None, pa.string()))
    # A CSV field quoted for its commas is a tuple repr: str(key) is what is inside the quotes.
    keys = pc.if_else(pc.starts_with(keys, '"'), pc.utf8_slice_codeunits(keys, 1, -1), keys)
    retried = np.zeros(p.n, dtype=bool)
    retried[p.retry_task] = True
    attempt = pd.array(np.where(on_task, retried[tk].astype(np.int64), 0), dtype="Int64")
    attempt[~on_task] = pd.NA
    from metaprov.records import STR

    return pd.DataFrame(
        {
            "log": np.asarray(io.log_names, dtype=object)[io.worker],
            "worker": np.asarray(p.addresses.to_pylist(), dtype=object)[io.worker],
            "pid": io.pid[io.worker],
            "pthread": pd.array(io.pthread, dtype="UInt64"),
            "level": np.where(on_task, "task", "process").astype(object),
            "key": pd.Series(pd.array(keys, dtype=STR)),
            "attempt": attempt,
            "path": np.asarray(io.paths, dtype=object)[io.path],
            "op": np.where(io.write, "write", "read").astype(object),
            "offset": io.offset,
            "length": io.length,
            "start": io.start,
            "end": io.end,
        }
    )
