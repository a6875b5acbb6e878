"""Capture overhead: the same task graph on the same LocalCluster, with and without metaprov.capture.

Input: nothing (a LocalCluster of 2 worker processes x 2 threads on 127.0.0.1 is started here).
Output: one line per run and a summary on stdout (``--json``: machine-readable), with

- wall time of the graph's computation without and with capture, and with capture including
  registration and the final flush/merge (what ``record()`` adds around the block);
- CPU seconds of all processes (client + scheduler, both workers) for the same runs;
- the CPU spent inside the capture's hooks and flushes, measured in each process with
  ``time.thread_time`` around every hook: the capture's direct cost, which, unlike differences of
  wall times, a shared noisy machine does not drown;
- the same for the capture *with the task facts* (function per task group, result type or
  exception per attempt, call site of the graph: the facts recorded by default), beside the
  capture without them in the same repetition;
- the same for *where the time went* (Dask's fine performance metrics per execution and per
  interval, worker memory samples, spans: on by default), beside the capture without them
  (``nometrics``: ``metrics=False, memory_interval=0``) in the same repetition.

Overheads are medians of per-repetition ratios (captured / plain of the same repetition); each
repetition runs plain, captured, captured with facts, and both captures with timed hooks (the
hook timing costs CPU itself, so it is kept out of the wall/CPU comparison), in alternating order so drift of a shared machine
hits all alike. The graph has ``--n``
tasks (default 10^4): n/2 tiny root tasks, n/2 tasks each depending on two roots (tasks on one
worker fetch from the other), then a tree reduction (fan-in 10) to one key::

    python benchmarks/bench_capture.py --n 10000 --repeat 5
    python benchmarks/bench_capture.py --n 10000 --repeat 3 \\
        --variants plain,captured,nometrics,timed,timed-nometrics     # the metrics' cost only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import dask
from distributed import Client, LocalCluster

from metaprov.capture import PLUGIN_NAME, SchedulerCapture, WorkerCapture
from metaprov.capture._files import NFRAMES


def inc(x: int) -> int:
    return x + 1


def add(a: int, b: int) -> int:
    return a + b


def total(*xs: int) -> int:
    return sum(xs)


def build_graph(n: int) -> tuple[dict[Any, Any], Any]:
    """A graph of about ``n`` tasks with dependencies, with fresh keys; returns it and its output key."""
    tok = uuid.uuid4().hex[:8]
    half = max(2, n // 2)
    dsk: dict[Any, Any] = {(f"inc-{tok}", i): (inc, i) for i in range(half)}
    dsk.update(
        {
            (f"add-{tok}", i): (add, (f"inc-{tok}", i), (f"inc-{tok}", (i + 1) % half))
            for i in range(half)
        }
    )
    level = [(f"add-{tok}", i) for i in range(half)]
    depth = 0
    while len(level) > 1:
        depth += 1
        nxt = []
        for j in range(0, len(level), 10):
            key = (f"total-{depth}-{tok}", j // 10)
            dsk[key] = (total, *level[j : j + 10])
            nxt.append(key)
        level = nxt
    return dsk, level[0]


# -- the plugins, with the CPU time of every hook and flush accumulated ---------------------------


def _nothing() -> None:
    """The empty hook timed beside every real one (the measurement's own residual)."""


class _Timed:
    """Thread CPU of the hooks, kept apart: per event (a transition, a graph, an execution's
    metrics: grows with the tasks) and periodic (flushes, memory samples: grows with the run's
    duration, so a run slowed down by a loaded machine pays more of them per task).

    The clock is a system call (about 0.7 us warm, two to three times that cold, between Dask's
    own work). Each timed region reads the clock twice back to back just before it and subtracts
    that: the clock's own cost where and when the hook ran. Beside every per-event hook an empty
    call is timed the same way; what it measures (a fraction of a microsecond either way: the
    clock pair is not exactly as cold as the region's own reads) is the measurement's residual,
    taken off the hooks' total (``net_spent``) and reported (``residual``); the reads before
    the region also warm the clock, so the region's own first read is no colder than the pair
    subtracted. Until 2026-11-29 each region began with the first, cold read and one warm clock
    cost from a tight loop was subtracted: the cold read's excess stayed in every call
    (docs/benchmarks.md has both ways side by side on the same code)."""

    spent = 0.0
    calls = 0
    empty = 0.0
    periodic = 0.0
    periodic_calls = 0

    def _timed(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        clock = time.thread_time
        e = clock()
        t = clock()
        _nothing()
        self.empty += clock() - t - (t - e)
        e = clock()
        t = clock()
        try:
            return method(*args, **kwargs)
        finally:
            self.spent += clock() - t - (t - e)
            self.calls += 1

    def _timed_periodic(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        clock = time.thread_time
        e = clock()
        t = clock()
        try:
            return method(*args, **kwargs)
        finally:
            self.periodic += clock() - t - (t - e)
            self.periodic_calls += 1

    def net_spent(self) -> float:
        """Per-event hooks, less the clock's own cost and the measurement's residual."""
        return max(0.0, self.spent - self.empty)

    def net_periodic(self) -> float:
        """Flushes and samples, less the clock's own cost (a few calls: no residual taken)."""
        return max(0.0, self.periodic)


class TimedSchedulerCapture(_Timed, SchedulerCapture):
    """SchedulerCapture that adds up the thread CPU time spent in its hooks and flushes."""

    def transition(self, *args: Any, **kwargs: Any) -> None:
        self._timed(super().transition, *args, **kwargs)

    def update_graph(self, *args: Any, **kwargs: Any) -> None:
        self._timed(super().update_graph, *args, **kwargs)

    def flush(self) -> None:
        self._timed_periodic(super().flush)

    def sample(self) -> None:
        self._timed_periodic(super().sample)


class TimedWorkerCapture(_Timed, WorkerCapture):
    """WorkerCapture that adds up the thread CPU time spent in its hooks and flushes."""

    def transition(self, *args: Any, **kwargs: Any) -> None:
        self._timed(super().transition, *args, **kwargs)

    def flush(self) -> None:
        self._timed_periodic(super().flush)

    def teardown(self, worker: Any) -> None:
        self._timed_periodic(super().teardown, worker)
        worker._metaprov_bench_spent = (self.net_spent(), self.net_periodic(), self.empty)

    def _execution_rows(self, *args: Any) -> None:
        # one execution's metrics closed when Dask finalises them (their rows are formatted at
        # the flush, timed there); the wrapped digest_metric, per metric a name-id lookup and
        # two list appends (before: a dictionary update), is too cheap to time: not counted
        self._timed(super()._execution_rows, *args)


def _worker_spent(dask_worker: Any) -> tuple[float, float, float]:
    return getattr(dask_worker, "_metaprov_bench_spent", (0.0, 0.0, 0.0))


async def _finalize(dask_scheduler: Any) -> dict[str, Any]:
    plugin = dask_scheduler.plugins.pop(PLUGIN_NAME)
    t = time.thread_time()
    summary = await plugin.finalize()
    timed = isinstance(plugin, _Timed)
    return {
        "spent": plugin.net_spent() if timed else 0.0,
        "periodic": plugin.net_periodic() if timed else 0.0,
        "empty": plugin.empty if timed else 0.0,
        "finalize_cpu": time.thread_time() - t,
        "files": summary["files"],
    }


def _rusage_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _cpu(client: Client) -> float:
    """CPU seconds used so far by this process (client + LocalCluster scheduler) and the workers."""
    return _rusage_cpu() + sum(client.run(_rusage_cpu).values())


def run_once(
    client: Client,
    n: int,
    capture_dir: Path | None,
    *,
    timed: bool = False,
    facts: bool = False,
    environment: bool = True,
    metrics: bool = True,
) -> dict[str, float]:
    """Compute one fresh graph; with ``capture_dir``, under the capture (as ``record()`` does).

    ``timed`` uses the plugins that time their own hooks (their clock calls cost CPU too, so the
    wall and CPU comparison uses the untimed plugins). ``facts`` records the task facts too
    (and the client sends its call site, as under ``record()``). ``metrics``: Dask's fine
    performance metrics, memory samples and spans (the capture's default).
    """
    dsk, out = build_graph(n)
    half = max(2, n // 2)
    expected = sum((i + 1) + ((i + 1) % half + 1) for i in range(half))
    res: dict[str, float] = {"tasks": len(dsk), "rows": 0, "hooks_cpu": 0.0, "periodic_cpu": 0.0}
    res.update(scheduler_hooks_cpu=0.0, finalize_cpu=0.0, residual_cpu=0.0)
    sched_cls, worker_cls = (
        (TimedSchedulerCapture, TimedWorkerCapture) if timed else (SchedulerCapture, WorkerCapture)
    )
    cpu0 = _cpu(client)
    t0 = time.perf_counter()
    if capture_dir is not None:
        client.register_plugin(
            sched_cls(
                capture_dir,
                functions=facts,
                call_sites=facts,
                environment=environment,
                memory_interval=0.5 if metrics else 0,
            ),
            name=PLUGIN_NAME,
        )
        client.register_plugin(
            worker_cls(capture_dir, results=facts, environment=environment, metrics=metrics),
            name=PLUGIN_NAME,
        )
    t_in = time.perf_counter()
    with dask.config.set({NFRAMES: 1 if facts else 0}):
        value = client.get(dsk, out)
    t1 = time.perf_counter()
    if capture_dir is not None:
        client.unregister_worker_plugin(PLUGIN_NAME)
        fin = client.run_on_scheduler(_finalize)
        res["rows"] = sum(fin["files"].values())
        res["finalize_cpu"] = fin["finalize_cpu"]
        if timed:
            workers = list(client.run(_worker_spent).values())
            # hooks_cpu: everything the capture spent (events, flushes, samples), as before;
            # periodic_cpu: of it, the flushes (formatting the buffered rows, the run's JSON)
            # and the memory samples
            res["periodic_cpu"] = fin["periodic"] + sum(w[1] for w in workers)
            res["scheduler_hooks_cpu"] = fin["spent"] + fin["periodic"]
            res["hooks_cpu"] = sum(w[0] for w in workers) + fin["spent"] + res["periodic_cpu"]
            # what the empty hook timed beside each real one measured (taken off hooks_cpu)
            res["residual_cpu"] = sum(w[2] for w in workers) + fin["empty"]
    t2 = time.perf_counter()
    assert value == expected, (value, expected)
    res.update(compute=t1 - t_in, total=t2 - t0, cpu=_cpu(client) - cpu0, startup=t_in - t0)
    return res


#: Every variant of a repetition: plain, the capture (with metrics, without facts), without its
#: environment records, with the task facts, without the metrics, and the hook-timed captures.
VARIANTS = (
    "plain",
    "captured",
    "noenv",
    "facts",
    "nometrics",
    "timed",
    "timed-facts",
    "timed-nometrics",
)


def metrics_micro(n: int = 20_000, repeat: int = 5) -> dict[str, float]:
    """The worker plugin's cost per execution for Dask's fine performance metrics, in this
    process (no cluster: thread CPU, robust on a loaded machine): ``n`` executions finalised
    as Dask does (5 metrics each: thread-cpu, thread-noncpu, executor, other seconds and a
    memory-read count), through a stand-in worker with and without the capture's wrappers,
    the rows written to a real file. Best of ``repeat``."""
    from distributed.metrics import DelayedMetricsLedger

    from metaprov.capture.worker import MetricSink

    labels = (
        ("thread-cpu", 0.01, "seconds"),
        ("thread-noncpu", 0.002, "seconds"),
        ("executor", 0.001, "seconds"),
        ("other", 0.0005, "seconds"),
        ("memory-read", 1, "count"),
    )

    class Stim:
        def __init__(self, key: str) -> None:
            self.key = key

    class StandIn:  # what Worker does: _finalize_metrics digests each metric of the ledger
        def digest_metric(self, name: Any, value: float) -> None:
            pass

        def _finalize_metrics(self, stim: Any, ledger: Any, span_id: Any = None) -> None:
            for label, value, unit in labels:
                self.digest_metric(("execute", span_id, "inc", label, unit), value)

    def once(tap: bool) -> float:
        d = Path(tempfile.mkdtemp(prefix="metaprov-bench-metrics-"))
        try:
            w = StandIn()
            cap = WorkerCapture(d, metrics=True)
            cap.address, cap._closed = "tcp://127.0.0.1:40001", False
            cap._sinks = {"worker_metric": MetricSink(d / "m.part", cap.address)}
            if tap:
                cap._tap_metrics(w)
            ledgers = [DelayedMetricsLedger() for _ in range(n)]
            stims = [Stim(f"inc-{i:08x}") for i in range(n)]
            t = time.thread_time()
            for stim, ledger in zip(stims, ledgers, strict=True):
                w._finalize_metrics(stim, ledger, "span-1")
            cap._sinks["worker_metric"].close()
            return (time.thread_time() - t) / n * 1e6
        finally:
            shutil.rmtree(d, ignore_errors=True)

    plain = min(once(False) for _ in range(repeat))
    tapped = min(once(True) for _ in range(repeat))
    return {"plain_us": plain, "captured_us": tapped, "metrics_us_per_execution": tapped - plain}


def hooks_micro(n: int = 20_000, repeat: int = 5, every: int = 1_500) -> dict[str, float]:
    """The capture's per-event work for one task, in this process (no cluster: thread CPU,
    robust on a loaded machine), rows formatted and written to real files: on a worker, six
    transitions (released -> waiting -> ready -> executing -> memory -> released -> forgotten)
    and the execution's row, with and without Dask's fine performance metrics (5 per execution,
    through the capture's wrappers); on the scheduler, five transitions, one with the
    execution's details as Dask passes them (with an equal key object, as decoded from the
    worker's message). In the order a graph makes them: every task's arrival first, then the
    executions, then the releases, the files flushed every ``every`` tasks as the periodic
    flush does (a task's rows come thousands of rows apart, as on a cluster). Stand-in task and
    worker states; best of ``repeat``."""
    from types import SimpleNamespace as NS

    from distributed.metrics import DelayedMetricsLedger

    from metaprov.capture import _files
    from metaprov.capture._files import (
        SCHEDULER_TRANSITION,
        WORKER_EXECUTION,
        WORKER_TRANSITION,
        CsvSink,
        scheduler_transitions,
    )
    from metaprov.capture.worker import MetricSink

    def worker_sinks(d: Path) -> dict[str, Any]:
        """The worker's part files as the checkout under test writes them (typed columns since
        0.14; CSV text through specialised formatters before: kept for A/B runs)."""
        part = getattr(_files, "PartSink", None)
        columns = getattr(_files, "TransitionPart", None)
        if columns is not None:
            return {
                "worker_transition": columns(d / "wt.arrows", StandIn.address),
                "worker_execution": part(d / "we.arrows", WORKER_EXECUTION, key=0),
            }
        if part is not None:
            return {
                "worker_transition": part(d / "wt.arrows", WORKER_TRANSITION, key=0, finish=2),
                "worker_execution": part(d / "we.arrows", WORKER_EXECUTION, key=0),
            }
        return {
            "worker_transition": CsvSink(
                d / "wt.csv", WORKER_TRANSITION, index=False, batch=_files.worker_transitions
            ),
            "worker_execution": CsvSink(
                d / "we.csv", WORKER_EXECUTION, index=False, fast=_files.fast_worker_execution
            ),
        }

    keys = [("add-1f3a9c0e", i) for i in range(n)]  # as Dask hands them to the hooks
    labels = (
        ("thread-cpu", 0.01, "seconds"),
        ("thread-noncpu", 0.002, "seconds"),
        ("executor", 0.001, "seconds"),
        ("other", 0.0005, "seconds"),
        ("memory-read", 1, "count"),
    )

    class StandIn:  # what Worker does: _finalize_metrics digests each metric of the ledger
        scheduler_delay = 0.0
        address = "tcp://127.0.0.1:40001"

        def digest_metric(self, name: Any, value: float) -> None:
            pass

        def _finalize_metrics(self, stim: Any, ledger: Any, span_id: Any = None) -> None:
            for label, value, unit in labels:
                self.digest_metric(("execute", span_id, "add", label, unit), value)

    def worker(d: Path, metrics: bool) -> float:
        t0 = time.time()
        w = StandIn()
        w.state = NS(
            tasks={
                k: NS(run_id=i, startstops=[{"action": "compute", "start": t0, "stop": t0 + 1e-3}])
                for i, k in enumerate(keys)
            },
            threads={k: 140_000_000 + i % 2 for i, k in enumerate(keys)},
        )
        cap = WorkerCapture(d, metrics=metrics, results=False, environment=False)
        cap.worker, cap.address, cap._closed, cap._pending = w, w.address, False, {}
        cap._sinks = worker_sinks(d)
        cap._transition_rows, cap._result_rows = cap._sinks["worker_transition"].append, None
        adders = getattr(cap._sinks["worker_transition"], "adders", None)
        if adders is not None:
            cap._add_key, cap._add_start, cap._add_finish, cap._add_time = adders
        cap._execution_append = cap._sinks["worker_execution"].append
        if metrics:
            cap._sinks["worker_metric"] = MetricSink(d / "wm.part", w.address)
            cap._tap_metrics(w)
        ledgers = [DelayedMetricsLedger() for _ in range(n)]
        stims = [NS(key=k) for k in keys]
        tr = cap.transition
        t = time.thread_time()
        for k in keys:
            tr(k, "released", "waiting")
            tr(k, "waiting", "ready")
        cap.flush()
        for i, (k, stim, ledger) in enumerate(zip(keys, stims, ledgers, strict=True), 1):
            tr(k, "ready", "executing")
            tr(k, "executing", "memory")
            w._finalize_metrics(stim, ledger, "span-1")
            if i % every == 0:
                cap.flush()
        cap.flush()
        for k in keys:
            tr(k, "memory", "released")
            tr(k, "released", "forgotten")
        # as at teardown: the transitions last where the capture orders them so
        order = getattr(cap, "_flush_order", None)
        for sink in order() if order is not None else cap._sinks.values():
            sink.close()
        return (time.thread_time() - t) / n * 1e6

    def scheduler(d: Path) -> float:
        prefix, group = NS(name="add"), NS(name="add-1f3a9c0e")
        cap = SchedulerCapture(d, environment=False)
        cap._tasks = {k: NS(key=k, prefix=prefix, group=group) for k in keys}
        cap._summary, cap._address = None, "tcp://127.0.0.1:8786"
        # the capture's own sink (it takes the hook's seven-cell rows since 0.15; a whole-row
        # CsvSink before: kept for A/B runs against older checkouts)
        sched_sink = getattr(_files, "SchedulerTransitionSink", None)
        if sched_sink is not None:
            sink = sched_sink(d / "st.csv", cap._address)
        else:
            sink = CsvSink(
                d / "st.csv", SCHEDULER_TRANSITION, index=True, batch=scheduler_transitions
            )
        cap._transition_rows = sink.append
        t0, tr = time.time(), cap.transition
        done = {"worker": "tcp://127.0.0.1:40001", "nbytes": 28, "thread": 140_000_000}
        decoded = [(k[0], k[1]) for k in keys]  # equal keys, other objects (from messages)
        t = time.thread_time()
        for k in keys:
            tr(k, "released", "waiting", stimulus_id="update-graph-1")
            tr(k, "waiting", "processing", stimulus_id="update-graph-1")
        sink.flush()
        for i, k in enumerate(decoded, 1):
            tr(
                k,
                "processing",
                "memory",
                stimulus_id="task-finished-1",
                startstops=({"action": "compute", "start": t0, "stop": t0 + 1e-3},),
                **done,
            )
            if i % every == 0:
                sink.flush()
        sink.flush()
        for k in keys:
            tr(k, "memory", "released", stimulus_id="client-releases-1")
            tr(k, "released", "forgotten", stimulus_id="client-releases-1")
        sink.close()
        return (time.thread_time() - t) / n * 1e6

    def best(f: Any) -> float:
        out = []
        for _ in range(repeat):
            d = Path(tempfile.mkdtemp(prefix="metaprov-bench-hooks-"))
            try:
                out.append(f(d))
            finally:
                shutil.rmtree(d, ignore_errors=True)
        return min(out)

    return {
        "worker_us": best(lambda d: worker(d, False)),
        "worker_metrics_us": best(lambda d: worker(d, True)),
        "scheduler_us": best(scheduler),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="tasks in the graph (about)")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of each variant")
    parser.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated subset of {','.join(VARIANTS)} (plain and captured always run)",
    )
    parser.add_argument(
        "--metrics-micro",
        action="store_true",
        help="only the per-execution cost of the fine performance metrics, in this process",
    )
    parser.add_argument(
        "--hooks-micro",
        action="store_true",
        help="only the per-task CPU of the worker and scheduler hooks, in this process",
    )
    args = parser.parse_args()
    if args.hooks_micro:
        load0 = os.getloadavg()[0]
        got = hooks_micro()
        print(
            f"hooks per task (load average {load0:.1f} on {os.cpu_count()} CPUs): worker "
            f"{got['worker_us']:.1f} us ({got['worker_metrics_us']:.1f} us with the fine "
            f"metrics), scheduler {got['scheduler_us']:.1f} us; rows formatted and written"
        )
        if args.json:
            print(json.dumps(got, indent=2))
        return
    if args.metrics_micro:
        load0 = os.getloadavg()[0]
        got = metrics_micro()
        print(
            f"fine performance metrics (load average {load0:.1f} on {os.cpu_count()} CPUs): "
            f"{got['metrics_us_per_execution']:.1f} us CPU per execution (5 metrics, rows "
            f"written) = {got['captured_us']:.1f} us with the capture's wrappers - "
            f"{got['plain_us']:.1f} us without"
        )
        if args.json:
            print(json.dumps(got, indent=2))
        return
    chosen = [v for v in VARIANTS if v in {"plain", "captured", *args.variants.split(",")}]
    base = Path(tempfile.mkdtemp(prefix="metaprov-bench-capture-"))
    pairs: list[tuple[dict[str, float], dict[str, float]]] = []
    timed: list[tuple[dict[str, float], dict[str, float]]] = []
    fact_pairs: list[tuple[dict[str, float], dict[str, float]]] = []
    fact_timed: list[tuple[dict[str, float], dict[str, float]]] = []
    env_pairs: list[tuple[dict[str, float], dict[str, float]]] = []
    metric_pairs: list[tuple[dict[str, float], dict[str, float]]] = []
    metric_timed: list[tuple[dict[str, float], dict[str, float]]] = []
    load: list[float] = []
    try:
        with (
            LocalCluster(
                n_workers=2,
                threads_per_worker=2,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
            ) as cluster,
            Client(cluster) as client,
        ):
            run_once(client, min(args.n, 1000), None)  # warm-up: imports, connections
            for r in range(args.repeat):
                load.append(os.getloadavg()[0])
                variants = list(chosen)
                if r % 2:
                    variants.reverse()
                got: dict[str, dict[str, float]] = {}
                for v in variants:
                    cap = None if v == "plain" else base / f"run-{r}-{v}"
                    res = run_once(
                        client,
                        args.n,
                        cap,
                        timed=v.startswith("timed"),
                        facts="facts" in v,
                        environment=v != "noenv",
                        metrics="nometrics" not in v,
                    )
                    got[v] = res
                    print(
                        f"rep {r} {v:11s} compute {res['compute']:7.3f} s  total {res['total']:7.3f} s"
                        f"  cpu {res['cpu']:7.3f} s  in hooks {res['hooks_cpu']:6.3f} s"
                        f" (periodic {res['periodic_cpu']:6.3f} s)"
                        f"  start-up {res.get('startup', 0.0):6.3f} s"
                        f"  rows {res['rows']:.0f}",
                        flush=True,
                    )
                pairs.append((got["plain"], got["captured"]))
                for runs, a, b in (
                    (timed, "plain", "timed"),
                    (fact_pairs, "captured", "facts"),
                    (env_pairs, "noenv", "captured"),
                    (fact_timed, "timed", "timed-facts"),
                    (metric_pairs, "nometrics", "captured"),
                    (metric_timed, "timed-nometrics", "timed"),
                ):
                    if a in got and b in got:
                        runs.append((got[a], got[b]))
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def med(f: Any, runs: list[tuple[dict[str, float], dict[str, float]]] = pairs) -> float:
        if not runs:  # a variant not run (--variants)
            return float("nan")
        return float(statistics.median(f(p, c) for p, c in runs))

    summary = {
        "tasks": int(pairs[0][0]["tasks"]),
        "repeat": args.repeat,
        "rows_written": med(lambda p, c: c["rows"]),
        "load_average": statistics.median(load),
        "plain_compute_s": med(lambda p, c: p["compute"]),
        "captured_compute_s": med(lambda p, c: c["compute"]),
        "captured_total_s": med(lambda p, c: c["total"]),
        "overhead_compute_pct": med(lambda p, c: 100 * (c["compute"] / p["compute"] - 1)),
        "overhead_total_pct": med(lambda p, c: 100 * (c["total"] / p["compute"] - 1)),
        "plain_cpu_s": med(lambda p, c: p["cpu"]),
        "captured_cpu_s": med(lambda p, c: c["cpu"]),
        "overhead_cpu_pct": med(lambda p, c: 100 * (c["cpu"] / p["cpu"] - 1)),
        "hooks_cpu_s": med(lambda p, c: c["hooks_cpu"], timed),
        "hooks_cpu_pct_of_plain": med(lambda p, c: 100 * c["hooks_cpu"] / p["cpu"], timed),
        "hooks_cpu_pct_reps": [100 * c["hooks_cpu"] / p["cpu"] for p, c in timed],
        "hooks_residual_cpu_s": med(lambda p, c: c["residual_cpu"], timed),
        "scheduler_hooks_cpu_s": med(lambda p, c: c["scheduler_hooks_cpu"], timed),
        "finalize_cpu_s": med(lambda p, c: c["finalize_cpu"]),
        "hooks_us_per_task": med(lambda p, c: 1e6 * c["hooks_cpu"] / c["tasks"], timed),
        # flushes and memory samples: CPU per second of the run, not per task
        "periodic_cpu_s": med(lambda p, c: c["periodic_cpu"], timed),
        "periodic_cpu_pct_of_plain": med(lambda p, c: 100 * c["periodic_cpu"] / p["cpu"], timed),
        "periodic_ms_per_s": med(
            lambda p, c: 1e3 * c["periodic_cpu"] / (c["compute"] or float("nan")), timed
        ),
        "metrics_periodic_cpu_s": med(lambda p, c: c["periodic_cpu"], metric_timed),
        "metrics_off_periodic_cpu_s": med(lambda p, c: p["periodic_cpu"], metric_timed),
        # the environment records: the capture with them against the capture without
        "env_off_startup_s": med(lambda p, c: p["startup"], env_pairs),
        "env_on_startup_s": med(lambda p, c: c["startup"], env_pairs),
        "env_off_compute_s": med(lambda p, c: p["compute"], env_pairs),
        "env_on_compute_s": med(lambda p, c: c["compute"], env_pairs),
        "env_off_total_s": med(lambda p, c: p["total"], env_pairs),
        "env_on_total_s": med(lambda p, c: c["total"], env_pairs),
        "env_overhead_compute_pct": med(
            lambda p, c: 100 * (c["compute"] / p["compute"] - 1), env_pairs
        ),
        # the task facts: the capture with them against the capture without, same repetition
        "facts_rows_written": med(lambda p, c: c["rows"], fact_pairs),
        "facts_compute_s": med(lambda p, c: c["compute"], fact_pairs),
        "facts_overhead_compute_pct": med(
            lambda p, c: 100 * (c["compute"] / p["compute"] - 1), fact_pairs
        ),
        "facts_cpu_s": med(lambda p, c: c["cpu"], fact_pairs),
        "facts_overhead_cpu_pct": med(lambda p, c: 100 * (c["cpu"] / p["cpu"] - 1), fact_pairs),
        "facts_hooks_cpu_s": med(lambda p, c: c["hooks_cpu"], fact_timed),
        "facts_extra_hooks_cpu_s": med(lambda p, c: c["hooks_cpu"] - p["hooks_cpu"], fact_timed),
        "facts_extra_scheduler_hooks_cpu_s": med(
            lambda p, c: c["scheduler_hooks_cpu"] - p["scheduler_hooks_cpu"], fact_timed
        ),
        "facts_extra_us_per_task": med(
            lambda p, c: 1e6 * (c["hooks_cpu"] - p["hooks_cpu"]) / c["tasks"], fact_timed
        ),
        # where the time went: the capture with the metrics against the capture without
        "metrics_extra_rows": med(lambda p, c: c["rows"] - p["rows"], metric_pairs),
        "metrics_off_compute_s": med(lambda p, c: p["compute"], metric_pairs),
        "metrics_overhead_compute_pct": med(
            lambda p, c: 100 * (c["compute"] / p["compute"] - 1), metric_pairs
        ),
        "metrics_off_cpu_s": med(lambda p, c: p["cpu"], metric_pairs),
        "metrics_overhead_cpu_pct": med(lambda p, c: 100 * (c["cpu"] / p["cpu"] - 1), metric_pairs),
        "metrics_hooks_cpu_s": med(lambda p, c: c["hooks_cpu"], metric_timed),
        "metrics_off_hooks_cpu_s": med(lambda p, c: p["hooks_cpu"], metric_timed),
        "metrics_extra_hooks_cpu_s": med(
            lambda p, c: c["hooks_cpu"] - p["hooks_cpu"], metric_timed
        ),
        "metrics_extra_us_per_task": med(
            lambda p, c: 1e6 * (c["hooks_cpu"] - p["hooks_cpu"]) / c["tasks"], metric_timed
        ),
    }
    lines = [
        f"median of {args.repeat} (load average {summary['load_average']:.1f} on "
        f"{os.cpu_count()} CPUs): {summary['tasks']} tasks, {summary['rows_written']:.0f} rows",
        f"  wall   plain {summary['plain_compute_s']:.2f} s, captured "
        f"{summary['captured_compute_s']:.2f} s ({summary['overhead_compute_pct']:+.1f} %), with "
        f"register+flush+merge {summary['captured_total_s']:.2f} s "
        f"({summary['overhead_total_pct']:+.1f} %)",
        f"  CPU    plain {summary['plain_cpu_s']:.2f} s, captured "
        f"{summary['captured_cpu_s']:.2f} s ({summary['overhead_cpu_pct']:+.1f} %)",
    ]
    if timed:
        spread = ", ".join(f"{x:.2f}" for x in summary["hooks_cpu_pct_reps"])
        lines += [
            f"  hooks  {summary['hooks_cpu_s']:.3f} s CPU = {summary['hooks_cpu_pct_of_plain']:.2f} %"
            f" of the plain run's CPU (repetitions: {spread} %; "
            f"{summary['hooks_us_per_task']:.0f} us per task; scheduler "
            f"{summary['scheduler_hooks_cpu_s']:.3f} s; the empty hook's residual "
            f"{summary['hooks_residual_cpu_s']:+.3f} s taken off); finalize (merge) "
            f"{summary['finalize_cpu_s']:.3f} s",
            f"  of which flushes and memory samples {summary['periodic_cpu_s']:.3f} s CPU = "
            f"{summary['periodic_cpu_pct_of_plain']:.1f} % of the plain run's CPU "
            f"({summary['periodic_ms_per_s']:.1f} ms per second of the run)",
        ]
    if fact_pairs:
        lines.append(
            f"  facts  {summary['facts_rows_written']:.0f} rows; wall "
            f"{summary['facts_compute_s']:.2f} s ({summary['facts_overhead_compute_pct']:+.1f} % vs "
            f"captured without facts), CPU {summary['facts_cpu_s']:.2f} s "
            f"({summary['facts_overhead_cpu_pct']:+.1f} %)"
        )
    if fact_timed:
        lines.append(
            f"  facts' hooks {summary['facts_hooks_cpu_s']:.3f} s CPU, "
            f"{summary['facts_extra_hooks_cpu_s']:+.3f} s for the facts "
            f"({summary['facts_extra_us_per_task']:+.1f} us per task; scheduler "
            f"{summary['facts_extra_scheduler_hooks_cpu_s']:+.3f} s)"
        )
    if env_pairs:
        lines.append(
            f"  environment records: start-up {summary['env_on_startup_s']:.3f} s vs "
            f"{summary['env_off_startup_s']:.3f} s without, wall "
            f"{summary['env_overhead_compute_pct']:+.1f} %"
        )
    if metric_pairs:
        lines.append(
            f"  metrics +{summary['metrics_extra_rows']:.0f} rows; wall "
            f"{summary['captured_compute_s']:.2f} s ({summary['metrics_overhead_compute_pct']:+.1f} %"
            f" vs captured without them), CPU ({summary['metrics_overhead_cpu_pct']:+.1f} %)"
        )
    if metric_timed:
        lines.append(
            f"  metrics' hooks {summary['metrics_hooks_cpu_s']:.3f} s CPU vs "
            f"{summary['metrics_off_hooks_cpu_s']:.3f} s without, "
            f"{summary['metrics_extra_hooks_cpu_s']:+.3f} s for the metrics "
            f"({summary['metrics_extra_us_per_task']:+.1f} us per task; flushes and samples "
            f"{summary['metrics_periodic_cpu_s']:.3f} s vs "
            f"{summary['metrics_off_periodic_cpu_s']:.3f} s)"
        )
    print("\n".join(lines))
    if args.json:
        print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
