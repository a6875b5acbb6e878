"""The run plan: every number of the run as numpy arrays (:class:`_Plan`, built by :func:`_plan`
from the schedule and the graph), and the event times derived from it (:class:`_Events`).

The row kinds of the transition files (scheduler and worker state pairs, stimulus kinds) are
defined here: the plan's events and the writers share them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.synthetic.csvtext import _take, _unique_hex
from metaprov.synthetic.graph import _dependencies, _keys, _n_dependents
from metaprov.synthetic.schedule import _schedule

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
