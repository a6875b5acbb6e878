"""The six CSV files of a run, written from the plan and its events in chunks of rows."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.synthetic.csvtext import (
    _csv_field,
    _CsvFile,
    _fmt_ints,
    _masked,
    _take,
    _write_lines,
    format_floats,
)
from metaprov.synthetic.graph import _n_dependents
from metaprov.synthetic.plan import (
    _S_PE,
    _S_PM,
    _S_PR,
    _S_RW,
    _S_STATES,
    _S_WP,
    _ST_ERRED,
    _ST_FINISHED,
    _ST_GRAPH,
    _ST_PREFIX,
    _W_EE,
    _W_EM,
    _W_ER,
    _W_FF,
    _W_FM,
    _W_RE,
    _W_RF,
    _W_RW,
    _W_STATES,
    _W_WR,
    _Events,
    _Plan,
)

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


_SCHEDULER = "tcp://10.201.1.129:8786"


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
