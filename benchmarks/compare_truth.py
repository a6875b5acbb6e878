"""Ground truth for ``metaprov compare``: real runs with ONE injected cause each.

Records, on a real Dask ``LocalCluster`` (3 workers x 1 thread, 127.0.0.1) with :func:`metaprov.capture.record`, a baseline run
(recorded three times: the one of median makespan is the baseline) and variants of the same
workflow that differ by one known cause, then checks that
``metaprov compare BASELINE VARIANT`` ranks that cause first, with about the injected seconds,
and that a second baseline names no cause above the noise.

The workflow: ``crunch-i`` (``n`` independent tasks of ``dp`` seconds) and a chain ``step-j``
(``m`` tasks, each needing the previous one, step ``j`` pinned to worker ``j % 2``, so every
step's input moves between the workers; each returns a payload). The variants:

===============  =====================================================  ===========================
variant          what changes                                           injected seconds
===============  =====================================================  ===========================
``slow_prefix``  every ``step`` sleeps ``x`` longer                     ``m x``
``threads``      one of the 3 single-thread workers retired first       the change of the ``crunch``
                                                                        stage's span (measured)
``slow_worker``  ``step`` tasks on worker 1 sleep ``x`` longer          ``m x / 2``
``retries``      every other ``step`` fails once (after ``d + 0.1``)    the retried steps' time from
                 and is retried                                         first to last start (measured)
``transfers``    each ``step`` returns ``payload`` MB (40) instead of   the change in the seconds the
                 1 KB                                                   chain's inputs spent on the
                                                                        network: Dask's transfer
                                                                        durations less its
                                                                        (de)serialising (measured)
===============  =====================================================  ===========================

"Slower file I/O" cannot be told from compute without Darshan tracing the workers
(``LD_PRELOAD=libdarshan.so``); no Darshan runtime is installed here, so that case is shown on
the real Darshan runs instead (docs/compare.md).

Usage::

    python benchmarks/compare_truth.py OUTDIR [--scale 4]   # records OUTDIR/<variant>, prints
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: seconds a failing attempt runs longer before it fails
FAILED_EXTRA = 0.1
VARIANTS = (
    "base",
    "base2",
    "base3",
    "slow_prefix",
    "threads",
    "slow_worker",
    "retries",
    "transfers",
)
#: the cause each variant injects
EXPECTED = {
    "slow_prefix": "compute",
    "threads": "parallelism",
    "slow_worker": "worker",
    "retries": "retries",
    "transfers": "transfers",
}


def crunch(i: int, d: float) -> int:
    time.sleep(d)
    return i


def step(
    prev: Any, j: int, d: float, extra: float, slow_worker: str, payload: int, marker: str
) -> bytes:
    from distributed import get_worker

    time.sleep(d)
    if slow_worker and get_worker().address == slow_worker:
        time.sleep(extra)
    elif extra and not slow_worker:
        time.sleep(extra)
    if marker:
        flag = Path(f"{marker}-{j}")
        if not flag.exists():
            flag.write_text("failed once")
            time.sleep(FAILED_EXTRA)
            raise RuntimeError(f"step {j} fails on its first attempt")
    return bytes(payload)  # calloc: no page touched, so no compute added (moving it is the cost)


def _workers(client: Any) -> list[str]:
    """The addresses of the workers the scheduler holds now, sorted."""
    return client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.workers))


def workload(
    client: Any,
    variant: str,
    *,
    n: int = 12,
    dp: float = 0.2,
    m: int = 8,
    d: float = 0.05,
    x: float = 0.15,
    payload_mb: float = 40.0,
    workdir: str | None = None,
    workers: list[str] | None = None,
) -> list[Any]:
    """Run the workflow once on ``client`` with ``variant``'s injected cause.

    Everything is submitted at once (``step-0`` needs every ``crunch``), so the client never
    sits between computations; returns the futures (release them after the recording).
    """
    from distributed import wait

    workers = _workers(client) if workers is None else workers
    if len(workers) < 2:
        raise SystemExit("the workload needs two workers")
    extra = x if variant in ("slow_prefix", "slow_worker") else 0.0
    slow = workers[1] if variant == "slow_worker" else ""
    payload = int(payload_mb * 1e6) if variant == "transfers" else 1000
    marker = ""
    if variant == "retries":
        marker = str(Path(workdir or tempfile.mkdtemp(), f"flaky-{time.time_ns()}"))
    # the crunch tasks in one graph: submitted one by one, each is ready when the client gets
    # to it, and a client slowed by the machine (here it shares its process with the
    # scheduler) would change the stage's concurrency between identical runs
    futs = client.map(crunch, range(n), [dp] * n, key=[f"crunch-{i}" for i in range(n)], pure=False)
    prev: Any = futs
    for j in range(m):
        mk = marker if (marker and j % 2 == 1) else ""
        prev = client.submit(
            step,
            prev,
            j,
            d,
            extra,
            slow,
            payload,
            mk,
            key=f"step-{j}",
            workers=[workers[j % 2]],
            allow_other_workers=False,
            retries=1,
            pure=False,
        )
    wait(prev)
    return [*futs, prev]


def record_variant(client: Any, variant: str, out: Path, **kw: Any) -> Path:
    from metaprov.capture import record

    workers = _workers(client)  # asked before: the recording starts with the submission
    with record(client, out, overwrite=True):
        futures = workload(client, variant, workdir=str(out.parent), workers=workers, **kw)
    # released, not cancelled (cancelling finished futures can break the client's connection,
    # whose reconnection would then fall into the next recording's startup); the next recording
    # starts on a scheduler that holds no task of this one
    del futures
    deadline = time.monotonic() + 30
    while client.run_on_scheduler(_tasks_held) and time.monotonic() < deadline:
        time.sleep(0.02)
    return out


def _tasks_held(dask_scheduler: Any) -> int:
    return len(dask_scheduler.tasks)


def warm_up(client: Any, out: Path, **kw: Any) -> None:
    """One recorded run thrown away: the first run of a cluster pays its imports and connections."""
    import shutil

    record_variant(client, "base", out / "warm-up", **kw)
    shutil.rmtree(out / "warm-up", ignore_errors=True)


def record_all(out: Path, variants: tuple[str, ...] = VARIANTS, **kw: Any) -> dict[str, Path]:
    """Record every variant under ``out`` on one LocalCluster of 3 workers x 1 thread; the
    ``threads`` variant last, after one worker has been retired (2 thread slots instead of 3)."""
    from distributed import Client, LocalCluster

    runs: dict[str, Path] = {}
    with (
        LocalCluster(
            n_workers=3,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",
            silence_logs=40,
        ) as cl,
        Client(cl) as client,
    ):
        warm_up(client, out, **kw)
        for v in variants:
            if v != "threads":
                runs[v] = record_variant(client, v, out / v, **kw)
        if "threads" in variants:
            # the scheduler's own table: Client.scheduler_info() is a cached identity that
            # recent distributed may return with no workers between its refreshes
            third = _workers(client)[2]
            client.retire_workers([third], close_workers=True)
            while len(_workers(client)) > 2:
                time.sleep(0.05)
            runs["threads"] = record_variant(client, "threads", out / "threads", **kw)
    return runs


def injected_seconds(variant: str, *, m: int = 8, x: float = 0.15, **_: Any) -> float | None:
    """The seconds a variant injects when they are known in advance (None: measured)."""
    return {
        "slow_prefix": m * x,
        "slow_worker": m * x / 2,
    }.get(variant)


#: Dask's fine-metric activities of (de)serialising and (de)compressing data moved between
#: workers, in the contexts of a transfer (the receiver's ``gather-dep``, the sender's
#: ``get-data``): time inside a transfer's duration that is not the network's
SERIALISING = ("serialize", "deserialize", "compress", "decompress")
TRANSFER_CONTEXTS = ("gather-dep", "get-data")


def network_seconds(path: Path, prefix: str = "step-") -> float:
    """Seconds the inputs of ``prefix`` tasks spent moving over the network, from Dask's own
    records: the durations of the transfers of those keys to the worker that needed them
    (Dask's incoming transfer log: the receiver's ``gather_dep``, from the request to the data
    deserialised), less the seconds Dask's fine performance metrics measured (de)serialising
    and (de)compressing in transfers (``gather-dep``, ``get-data``), which ``compare`` names
    ``serialisation``, not ``transfers``.

    The transfers into a chain follow one another (each step needs the one before it), so
    their durations add up to the time the chain waited for them; the fine metrics are per
    worker and interval (not per transfer), so the run's whole (de)serialising is taken off:
    the workflow's other transfers (into ``step-0``) move a few bytes each."""
    import metaprov

    r = metaprov.read_run(path, darshan=False)
    tr = r.transfers
    into = tr["key"].astype(str).str.startswith(prefix) & tr["destination"].notna()
    return float(tr.loc[into, "duration"].sum()) - _serialising(r)


def serialising_seconds(path: Path) -> float:
    """Seconds Dask's fine performance metrics measured (de)serialising and (de)compressing in
    the run's transfers (``gather-dep``, ``get-data``); 0 without fine metrics."""
    import metaprov

    return _serialising(metaprov.read_run(path, darshan=False))


def _serialising(r: Any) -> float:
    act = r.activity
    if act is None or not len(act):
        return 0.0
    ser = (
        (act["unit"].astype(str) == "seconds")
        & act["context"].astype(str).isin(TRANSFER_CONTEXTS)
        & act["activity"].astype(str).isin(SERIALISING)
    )
    return float(act.loc[ser, "value"].sum())


def measured_injection(variant: str, base: Path, other: Path) -> float:
    """The injected seconds measured independently of ``compare`` from what Dask recorded:
    ``threads``: the change in the span of the ``crunch`` stage (first start to last end);
    ``transfers``: the change in the seconds the chain's inputs spent on the network
    (:func:`network_seconds`: Dask's transfer durations less its (de)serialising seconds);
    ``retries``: the change in the time from the first attempt's start to the last attempt's
    start of the retried steps."""
    import metaprov

    if variant == "transfers":
        return network_seconds(other) - network_seconds(base)

    def one(path: Path) -> float:
        r = metaprov.read_run(path, darshan=False)
        if variant == "threads":
            ex = r.executions[r.executions["key"].astype(str).str.startswith("crunch-")]
            return float((ex["end"].max() - ex["start"].min()).total_seconds())
        ex = r.executions
        g = ex.groupby(ex["key"].astype(str))["start"].agg(["min", "max", "size"])
        g = g[g["size"] > 1]
        return float((g["max"] - g["min"]).dt.total_seconds().sum())

    return one(other) - one(base)


def baseline_of(runs: dict[str, Path]) -> Path:
    """The baseline: of the three baseline recordings, the one of median makespan."""
    import metaprov

    c = metaprov.compare([runs["base"], runs["base2"], runs["base3"]], baseline="median")
    return runs[{p.name: k for k, p in runs.items()}[c.baseline]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--scale", type=float, default=4.0, help="tasks x scale (default 4)")
    args = ap.parse_args(argv)
    import metaprov

    kw = dict(n=int(12 * args.scale), m=int(8 * args.scale))
    runs = record_all(args.outdir, **kw)
    base = baseline_of(runs)
    print(f"{'variant':12} {'difference':>10} {'injected':>9} {'top cause':>12} {'seconds':>8}  ok")
    for v, path in runs.items():
        if path == base:
            continue
        ex = metaprov.compare([base, path]).pair
        top = ex.top
        inj = injected_seconds(v, **kw)
        want = EXPECTED.get(v)
        size = ex.totals[want] if want else 0.0
        ref = (
            inj
            if inj is not None
            else (measured_injection(v, base, path) if v in ("transfers", "retries") else 0.0)
        )
        ok = (
            top is None
            if want is None
            else (top is not None and top["cause"] == want and abs(size - ref) <= 0.25 * abs(ref))
        )
        print(
            f"{v:12} {ex.difference_s:10.3f} {ref:9.3f} "
            f"{'-' if top is None else top['cause']:>12} {size:8.3f}  {'yes' if ok else 'NO'}"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
