"""Capture overhead: the same task graph on the same LocalCluster, with and without metaprov.capture.

Input: nothing (a LocalCluster of 2 worker processes x 2 threads on 127.0.0.1 is started here).
Output: wall times per repetition and their medians on stdout (``--json`` for a machine-readable
summary): the graph's compute time without capture, with capture (compute only), with capture
including registration and the final flush/merge, and the relative overhead.

The graph has ``--n`` tasks (default 10^4): n/2 tiny root tasks, n/2 tasks each depending on two
roots (so tasks on one worker fetch from the other), then a tree reduction (fan-in 10) to one key.
Runs alternate plain/captured so drift on a shared machine hits both alike::

    python benchmarks/bench_capture.py --n 10000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from distributed import Client, LocalCluster

from metaprov.capture import record


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


def run_once(client: Client, n: int, capture_dir: Path | None) -> dict[str, float]:
    """Compute one fresh graph; with ``capture_dir``, under :func:`metaprov.capture.record`."""
    dsk, out = build_graph(n)
    half = max(2, n // 2)
    expected = sum((i + 1) + ((i + 1) % half + 1) for i in range(half))
    rows = 0
    cpu0 = _cpu(client)
    t0 = time.perf_counter()
    if capture_dir is None:
        t_in = t0
        value = client.get(dsk, out)
        t1 = time.perf_counter()
    else:
        with record(client, capture_dir) as cap:
            t_in = time.perf_counter()
            value = client.get(dsk, out)
            t1 = time.perf_counter()
        rows = sum(cap.files.values())
    t2 = time.perf_counter()
    cpu1 = _cpu(client)
    assert value == expected, (value, expected)
    return {
        "compute": t1 - t_in,
        "total": t2 - t0,
        "cpu": sum(cpu1.values()) - sum(cpu0.values()),
        "tasks": len(dsk),
        "rows": rows,
    }


def _rusage_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _cpu(client: Client) -> dict[str, float]:
    """CPU seconds used so far by this process (client + LocalCluster scheduler) and each worker.

    CPU time is what the capture adds; on a shared, loaded machine it is far steadier than wall
    time, which is also reported.
    """
    out = {"client+scheduler": _rusage_cpu()}
    out.update(client.run(_rusage_cpu))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="tasks in the graph (about)")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of each variant")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="metaprov-bench-capture-"))
    plain: list[dict[str, float]] = []
    captured: list[dict[str, float]] = []
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
                # Alternate the order so slow drift of a shared machine hits both variants.
                order = [None, base / f"run-{r}"] if r % 2 == 0 else [base / f"run-{r}", None]
                for cap in order:
                    res = run_once(client, args.n, cap)
                    (plain if cap is None else captured).append(res)
                    kind = "plain   " if cap is None else "captured"
                    print(
                        f"rep {r} {kind} compute {res['compute']:7.3f} s  total {res['total']:7.3f} s"
                        f"  cpu {res['cpu']:7.3f} s  tasks {res['tasks']}  rows {res['rows']}",
                        flush=True,
                    )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {
        "plain_compute_s": statistics.median(r["compute"] for r in plain),
        "captured_compute_s": statistics.median(r["compute"] for r in captured),
        "captured_total_s": statistics.median(r["total"] for r in captured),
        "plain_cpu_s": statistics.median(r["cpu"] for r in plain),
        "captured_cpu_s": statistics.median(r["cpu"] for r in captured),
        "tasks": plain[0]["tasks"],
        "rows_written": int(statistics.median(r["rows"] for r in captured)),
        "repeat": args.repeat,
    }
    med["overhead_compute_pct"] = 100 * (med["captured_compute_s"] / med["plain_compute_s"] - 1)
    med["overhead_total_pct"] = 100 * (med["captured_total_s"] / med["plain_compute_s"] - 1)
    med["overhead_cpu_pct"] = 100 * (med["captured_cpu_s"] / med["plain_cpu_s"] - 1)
    if args.json:
        print(json.dumps(med, indent=2))
    else:
        print(
            f"median of {args.repeat}: plain {med['plain_compute_s']:.3f} s, captured "
            f"{med['captured_compute_s']:.3f} s (+{med['overhead_compute_pct']:.1f} %), with "
            f"register+flush+merge {med['captured_total_s']:.3f} s (+{med['overhead_total_pct']:.1f} %); "
            f"{med['tasks']} tasks, {med['rows_written']} rows written\n"
            f"CPU (all processes): plain {med['plain_cpu_s']:.2f} s, captured "
            f"{med['captured_cpu_s']:.2f} s (+{med['overhead_cpu_pct']:.1f} %)"
        )


if __name__ == "__main__":
    main()
