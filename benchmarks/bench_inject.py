"""Injected-cause benchmark for ``metaprov compare``, in the style of HPC anomaly-injection suites.

HPAS (Ates et al., "HPAS: An HPC Performance Anomaly Suite for Reproducing Performance
Variations", ICPP 2019) injects one known anomaly into an otherwise identical run and checks that
the diagnosis names it. This script does the same for Dask: on a real ``LocalCluster``
(127.0.0.1, 2 workers x 2 threads) recorded with :func:`metaprov.capture.record`, it records a
baseline three times (the one of median makespan is the baseline) and one run per injected
cause, repeats that ``--reps`` times, compares every variant with its repetition's baseline and
reports how often the injected cause is ranked first, the error of its seconds, whether any
cause is named alone with the wrong sign, and whether the parts add up to the difference.

The workflow: ``load-i`` (reads a 2 MB file, ``n`` tasks), ``crunch-i`` (needs ``load-i``,
returns 4 MB of random bytes, held by the client until the end), ``summarize-i`` (needs
``crunch-i``), and a chain ``step-j`` (``m`` tasks, ``step-0`` needs every ``summarize``, step
``j`` asks for worker ``j % 2`` so that every step's input moves between the workers).

=================  ===============================================  ===============  =================
variant            what changes                                     expected cause   reference seconds
=================  ===============================================  ===============  =================
``transfers``      each ``step`` returns 80 MB instead of 1 MB       transfers        Dask's transfer
                                                                                     durations less its
                                                                                     (de)serialising
                                                                                     seconds (change)
``serialisation``  each ``step`` result pickles in 0.5 s             serialisation    the difference
``scheduler``      a scheduler plugin sleeps 10 ms in every          scheduler        the difference
                   transition
``spill``          workers keep 2 % of 400 MB in memory: the         spill            the difference
                   ``crunch`` results spill to disk
``lost_worker``    worker 1 is SIGKILLed a third into the run (its   lost-workers     the difference
                   nanny starts a new one)
``more_tasks``     twice as many ``load/crunch/summarize`` tasks     compute          the difference
``fewer_workers``  one of the two workers retired first              parallelism      the difference
``straggler``      ``step`` tasks on worker 1 sleep 0.6 s longer     worker           m x 0.6 / 2
``retries``        every other ``step`` fails once (after 0.5 s)     retries          first to last
                   and is retried                                                    start (change)
``slow_prefix``    every ``step`` sleeps 0.4 s longer                compute          m x 0.4
``slow_reads``     ``load`` reads its file 64 KB at a time, 20 ms    compute          the difference
                   per read (a slow file system; without Darshan
                   tracing the workers, file time is compute)
``slow_start``     the workers start 3 s after the graph arrives     startup          the difference
=================  ===============================================  ===============  =================

"The difference" as a reference is the measured makespan difference of the pair: for these
variants nothing else changed, so all of it is the injection (it includes the run-to-run noise,
which the error column therefore also shows).

Usage::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_inject.py OUTDIR --reps 3 --tag report
    python benchmarks/bench_inject.py OUTDIR --analyse-only --tag report   # re-analyse recordings

Recordings go to ``OUTDIR/<tag>-r<rep>/<variant>``; ``--tag dev`` and ``--tag report`` keep the
pairs the method was developed on apart from the pairs reported (docs/compare.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BASES = ("base", "base2", "base3")
#: variant -> the cause it injects (a name of metaprov.analysis.compare.CAUSES)
EXPECTED = {
    "transfers": "transfers",
    "serialisation": "serialisation",
    "scheduler": "scheduler",
    "spill": "spill",
    "lost_worker": "lost-workers",
    "more_tasks": "compute",
    "fewer_workers": "parallelism",
    "straggler": "worker",
    "retries": "retries",
    "slow_prefix": "compute",
    "slow_reads": "compute",
    "slow_start": "startup",
}
#: the workflow's sizes (``small`` for the test suite)
SIZES = {
    "full": dict(n=24, m=8, load_s=0.05, crunch_s=0.4, step_s=0.05, crunch_mb=4.0),
    "small": dict(n=12, m=6, load_s=0.02, crunch_s=0.05, step_s=0.03, crunch_mb=2.0),
}
#: the injections' sizes
PICKLE_S = 0.5
TRANSITION_S = 0.01
STRAGGLER_S = 0.6
SLOW_PREFIX_S = 0.4
STEP_MB = 1.0
STEP_BIG_MB = 80.0
READ_CHUNK = 64 * 1024
READ_SLEEP_S = 0.02
START_DELAY_S = 3.0
SPILL_LIMIT = "400MB"
SPILL_TARGET = 0.02
FAILED_EXTRA = 0.5


# -- the tasks ---------------------------------------------------------------------------------


class SlowPickle:
    """A result whose pickling takes ``delay`` seconds (on every transfer between workers)."""

    def __init__(self, data: bytes, delay: float) -> None:
        self.data, self.delay = data, delay

    def __reduce__(self) -> Any:
        time.sleep(self.delay)
        return (SlowPickle, (self.data, self.delay))

    def __len__(self) -> int:
        return len(self.data)


def load(i: int, path: str, d: float, slow: bool) -> int:
    """Read ``path`` (all of it); ``slow``: 64 KB at a time, each read taking 8 ms longer."""
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            chunk = f.read(READ_CHUNK if slow else 1 << 24)
            if not chunk:
                break
            n += len(chunk)
            if slow:
                time.sleep(READ_SLEEP_S)
    time.sleep(d)
    return n + i


def crunch(x: int, d: float, mb: float) -> bytes:
    import numpy as np

    time.sleep(d)
    return np.random.default_rng(x).bytes(int(mb * 1e6))


def summarize(data: bytes) -> int:
    return len(data)


def step(
    prev: Any,
    j: int,
    d: float,
    extra: float,
    slow_worker: str,
    mb: float,
    pickle_s: float,
    marker: str,
) -> Any:
    from distributed import get_worker

    time.sleep(d)
    if slow_worker:
        if str(get_worker().name) == slow_worker:
            time.sleep(extra)
    elif extra:
        time.sleep(extra)
    if marker:
        flag = Path(f"{marker}-{j}")
        if not flag.exists():
            flag.write_text("failed once")
            time.sleep(FAILED_EXTRA)
            raise RuntimeError(f"step {j} fails on its first attempt")
    data = bytes(int(mb * 1e6))  # calloc: no page touched, so no compute added
    return SlowPickle(data, pickle_s) if pickle_s else data


def workload(
    client: Any,
    variant: str,
    workdir: Path,
    *,
    n: int,
    m: int,
    load_s: float,
    crunch_s: float,
    step_s: float,
    crunch_mb: float,
    after_submit: Any = None,
) -> list[Any]:
    """Run the workflow once with ``variant``'s injection; returns the futures to release."""
    from distributed import wait

    data = workdir / "input.bin"
    if not data.exists():
        data.write_bytes(os.urandom(2_000_000))
    if variant == "more_tasks":
        n *= 2
    marker = str(workdir / f"flaky-{time.time_ns()}") if variant == "retries" else ""
    loads = [
        client.submit(
            load, i, str(data), load_s, variant == "slow_reads", key=f"load-{i}", pure=False
        )
        for i in range(n)
    ]
    crunches = [
        client.submit(crunch, x, crunch_s, crunch_mb, key=f"crunch-{i}", pure=False)
        for i, x in enumerate(loads)
    ]
    sums = [
        client.submit(summarize, c, key=f"summarize-{i}", pure=False)
        for i, c in enumerate(crunches)
    ]
    prev: Any = sums
    where = _workers(client)  # name -> address now (a worker started later is not asked for)
    extra = {"straggler": STRAGGLER_S, "slow_prefix": SLOW_PREFIX_S}.get(variant, 0.0)
    for j in range(m):
        prev = client.submit(
            step,
            prev,
            j,
            step_s,
            extra,
            "1" if variant == "straggler" else "",
            STEP_BIG_MB if variant == "transfers" else STEP_MB,
            PICKLE_S if variant == "serialisation" else 0.0,
            marker if (marker and j % 2 == 1) else "",
            key=f"step-{j}",
            workers=[where[str(j % 2)]] if str(j % 2) in where else None,
            allow_other_workers=str(j % 2) in where,
            retries=1,
            pure=False,
        )
    if after_submit is not None:
        after_submit()
    wait(prev)
    if prev.status != "finished":
        raise RuntimeError(f"{variant}: the workflow ended {prev.status}: {prev.exception()!r}")
    return [*loads, *crunches, *sums, prev]


# -- the cluster -------------------------------------------------------------------------------


class SlowTransitions:
    """A scheduler plugin that sleeps in every transition (a slow scheduler)."""

    name = "metaprov-bench-slow-transitions"

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def transition(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(self.delay)


def _plugin(delay: float) -> Any:
    from distributed.diagnostics.plugin import SchedulerPlugin

    class _Slow(SlowTransitions, SchedulerPlugin):
        pass

    return _Slow(delay)


def _cluster(n_workers: int = 2, **kw: Any) -> Any:
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=2,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",
        silence_logs=50,
        **kw,
    )


def _workers(client: Any) -> dict[str, str]:
    """name -> address of the workers the scheduler holds now."""
    return client.run_on_scheduler(
        lambda dask_scheduler: {str(w.name): a for a, w in dask_scheduler.workers.items()}
    )


def _record(client: Any, variant: str, out: Path, size: dict[str, Any], **kw: Any) -> Path:
    from metaprov.capture import record

    path = out / variant
    with record(client, path, overwrite=True):
        futures = workload(client, variant, out, **size, **kw)
    del futures  # released: the next run starts on an empty cluster
    t0 = time.monotonic()
    while client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
        if time.monotonic() - t0 > 30:
            break
        time.sleep(0.05)
    return path


def _wait_workers(client: Any, n: int, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while len(_workers(client)) != n:
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"the cluster did not reach {n} workers in {timeout:.0f} s")
        time.sleep(0.05)


def record_repetition(out: Path, size: dict[str, Any], variants: list[str]) -> dict[str, Path]:
    """One repetition: the three baselines and every variant of ``variants`` under ``out``."""
    from distributed import Client

    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Path] = {}
    plain = [
        v
        for v in variants
        if v
        in (
            "transfers",
            "serialisation",
            "more_tasks",
            "straggler",
            "retries",
            "slow_prefix",
            "slow_reads",
        )
    ]
    half = len(plain) // 2
    with _cluster() as cl, Client(cl) as client:
        _record(client, "warm-up", out, size)
        runs["base"] = _record(client, "base", out, size)
        for v in plain[:half]:
            runs[v] = _record(client, v, out, size)
        runs["base2"] = _record(client, "base2", out, size)
        for v in plain[half:]:
            runs[v] = _record(client, v, out, size)
        runs["base3"] = _record(client, "base3", out, size)
        if "scheduler" in variants:
            plugin = _plugin(TRANSITION_S)
            client.register_plugin(plugin, name=SlowTransitions.name)
            try:
                runs["scheduler"] = _record(client, "scheduler", out, size)
            finally:
                client.unregister_scheduler_plugin(SlowTransitions.name)
        if "lost_worker" in variants:
            for _ in range(3):  # a kill at the wrong moment can fail the workflow: again
                try:
                    runs["lost_worker"] = _record_lost_worker(client, out, size)
                    break
                except RuntimeError as e:
                    print(f"lost_worker again: {e}", flush=True)
                finally:
                    _wait_workers(client, 2)
        if "slow_start" in variants:
            cl.scale(0)
            _wait_workers(client, 0)

            def start_late() -> None:
                time.sleep(START_DELAY_S)
                cl.scale(2)

            runs["slow_start"] = _record(client, "slow_start", out, size, after_submit=start_late)
            _wait_workers(client, 2)
        if "fewer_workers" in variants:
            client.retire_workers([sorted(_workers(client).values())[1]], close_workers=True)
            _wait_workers(client, 1)
            runs["fewer_workers"] = _record(client, "fewer_workers", out, size)
    if "spill" in variants:
        import dask

        cfg = {
            "distributed.worker.memory.target": SPILL_TARGET,
            "distributed.worker.memory.spill": False,
            "distributed.worker.memory.pause": False,
            "distributed.worker.memory.terminate": False,
        }
        with dask.config.set(cfg), _cluster(memory_limit=SPILL_LIMIT) as cl, Client(cl) as client:
            _record(client, "warm-up", out, size)
            runs["spill"] = _record(client, "spill", out, size)
    return runs


def _record_lost_worker(client: Any, out: Path, size: dict[str, Any]) -> Path:
    """The workflow with worker ``1`` SIGKILLed once a third of the baseline's makespan has
    passed (its nanny starts a new worker process)."""
    w = _workers(client)["1"]
    pid = client.run(os.getpid, workers=[w])[w]
    delay = 0.35 * _base_makespan(out)

    def kill() -> None:
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)

    return _record(
        client, "lost_worker", out, size, after_submit=lambda: threading.Thread(target=kill).start()
    )


def _base_makespan(out: Path) -> float:
    import metaprov

    r = metaprov.read_run(out / "base", darshan=False)
    first, last = r.span
    return float((last - first).total_seconds())


# -- the analysis ------------------------------------------------------------------------------


def _network_seconds(path: Path) -> float:
    """compare_truth.network_seconds (loaded by its path: the benchmarks are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "compare_truth", Path(__file__).with_name("compare_truth.py")
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return float(mod.network_seconds(path))


def reference_seconds(
    variant: str, base: Path, other: Path, difference: float, size: dict[str, Any]
) -> float:
    """The injected seconds, known in advance or measured from Dask's own records."""
    import metaprov

    m = size["m"]
    if variant == "straggler":
        return m / 2 * STRAGGLER_S
    if variant == "slow_prefix":
        return m * SLOW_PREFIX_S
    if variant == "transfers":
        # the seconds the chain's inputs spent on the network (Dask's transfer durations less
        # its (de)serialising seconds, which compare names serialisation): the change
        return _network_seconds(other) - _network_seconds(base)
    if variant != "retries":
        return difference

    def one(path: Path) -> float:
        r = metaprov.read_run(path, darshan=False)
        ex = r.executions
        g = ex.groupby(ex["key"].astype(str))["start"].agg(["min", "max", "size"])
        g = g[g["size"] > 1]
        return float((g["max"] - g["min"]).dt.total_seconds().sum())

    return one(other) - one(base)


def baseline_of(runs: dict[str, Path]) -> Path:
    import metaprov

    c = metaprov.compare([runs[b] for b in BASES], baseline="median")
    return runs[{p.name: k for k, p in runs.items()}[c.baseline]]


def analyse(root: Path, tag: str, size: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (repetition, variant): top cause, expected cause's seconds, reference, sum."""
    import metaprov

    rows = []
    for rep in sorted(root.glob(f"{tag}-r*")):
        runs = {p.name: p for p in rep.iterdir() if (p / "metaprov-run.json").exists()}
        if not all(b in runs for b in BASES):
            continue
        base = baseline_of(runs)
        for v in [*BASES, *EXPECTED]:
            if v not in runs or runs[v] == base:
                continue
            ex = metaprov.compare([base, runs[v]]).pair
            want = EXPECTED.get(v)
            top = ex.top
            sig = ex.causes[ex.causes["significant"]]
            mine = float(ex.totals.get(want, 0.0)) if want else 0.0
            ref = reference_seconds(v, base, runs[v], ex.difference_s, size) if want else 0.0
            rows.append(
                {
                    "rep": rep.name,
                    "variant": v,
                    "expected": want,
                    "difference_s": ex.difference_s,
                    "top": None if top is None else str(top["cause"]),
                    "top_s": None if top is None else float(top["seconds"]),
                    "named": [str(c) for c in sig["cause"]],
                    "seconds": mine,
                    "reference_s": ref,
                    "sum_error_s": float(ex.causes["seconds"].sum() - ex.difference_s),
                    "wrong_sign_alone": bool(
                        len(sig) == 1 and float(sig["seconds"].iloc[0]) * ex.difference_s < 0
                    ),
                }
            )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The accuracy table (Markdown): per variant, ranked first in how many pairs, error."""
    lines = [
        "| injected cause | expected `cause` | pairs | ranked first | seconds (median) | "
        "reference (median) | error (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    total = hit = 0
    for v, want in EXPECTED.items():
        rs = [r for r in rows if r["variant"] == v]
        if not rs:
            continue
        first = sum(r["top"] == want for r in rs)
        total += len(rs)
        hit += first
        errs = [
            abs(r["seconds"] - r["reference_s"]) / abs(r["reference_s"])
            for r in rs
            if r["reference_s"]
        ]
        lines.append(
            f"| {v.replace('_', ' ')} | `{want}` | {len(rs)} | {first}/{len(rs)} | "
            f"{statistics.median(r['seconds'] for r in rs):.2f} s | "
            f"{statistics.median(r['reference_s'] for r in rs):.2f} s | "
            f"{(statistics.median(errs) * 100 if errs else float('nan')):.0f} % |"
        )
    nb = [r for r in rows if r["variant"] in BASES]
    quiet = sum(r["top"] is None for r in nb)
    lines.append(
        f"| (no change: another baseline) | none | {len(nb)} | {quiet}/{len(nb)} named nothing | | | |"
    )
    worst = max((abs(r["sum_error_s"]) for r in rows), default=0.0)
    alone = sum(r["wrong_sign_alone"] for r in rows)
    lines.append("")
    lines.append(
        f"Ranked first: {hit}/{total} pairs ({100 * hit / max(total, 1):.0f} %); a cause named "
        f"alone with the wrong sign: {alone}; parts vs the difference: at most {worst * 1e3:.3f} ms off."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tag", default="report", help="dev (for tuning) or report (fresh pairs)")
    ap.add_argument("--size", choices=sorted(SIZES), default="full")
    ap.add_argument("--variants", default=",".join(EXPECTED), help="comma-separated subset")
    ap.add_argument("--analyse-only", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    size = SIZES[args.size]
    variants = [v for v in args.variants.split(",") if v]
    if not args.analyse_only:
        print(f"load average before: {os.getloadavg()}", flush=True)
        for _ in range(args.reps):
            t0 = time.time()
            existing = sorted(args.outdir.glob(f"{args.tag}-r*"))
            out = args.outdir / f"{args.tag}-r{len(existing) + 1}"
            record_repetition(out, size, variants)
            print(f"recorded {out} in {time.time() - t0:.0f} s; load {os.getloadavg()}", flush=True)
    rows = analyse(args.outdir, args.tag, size)
    for r in rows:
        print(
            f"{r['rep']:10} {r['variant']:14} diff {r['difference_s']:+7.3f}  top {str(r['top']):13}"
            f" {r['expected'] or '-':13} {r['seconds']:+7.3f} ref {r['reference_s']:+7.3f}"
            f"  named {','.join(r['named'])}"
        )
    print()
    print(table(rows))
    print(f"load average after: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ != "__main__" and __name__ in sys.modules:
    # imported (tests): the tasks must travel by value to the workers, which cannot import this
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])

if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    tempfile.tempdir = None
    sys.exit(main())
