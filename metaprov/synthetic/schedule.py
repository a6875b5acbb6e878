"""The run's timeline: executions back to back on each thread, graph after graph, and the failed
first attempts of retried tasks (:class:`_Schedule`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A failed first attempt ends at least this long before the retry starts.
_RETRY_MARGIN = 0.25


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
