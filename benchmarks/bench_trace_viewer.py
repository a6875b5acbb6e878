"""A big run's trace written and opened in a real viewer: speedscope in headless Chromium.

Input: a size N (tasks) of the synthetic reference workload (seed 0, cached in
``benchmarks/_data/run-<N>-s0`` like ``bench_export.py``). Output: one JSON line and a markdown
row: the trace's events and size, the seconds (wall and CPU) to write it, and the seconds
speedscope took to fetch and import it (served from 127.0.0.1, ``#profileURL=``), with the
number of profiles it shows and the 1-minute load average. speedscope comes from the npm
registry, installed once into a cache directory (``tests/speedscope.py``). Run it under the
shared lock::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_trace_viewer.py --n 100000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args(argv)
    from bench_provstream import ensure_run
    from speedscope import Viewer, install

    from metaprov import read_run, to_prov
    from metaprov.report.browser import Browser
    from metaprov.write import write

    run = ensure_run(args.n)
    records = read_run(run)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "run.trace.json"
        t0, c0 = time.perf_counter(), time.process_time()
        events = write(to_prov(records), trace)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        app = install()
        browser = Browser(loopback=True)
        viewer = Viewer(app, browser)
        try:
            shown = viewer.open(trace, timeout=600)
        finally:
            viewer.close()
            browser.close()
        m = re.search(r"metaprov \(1/(\d+)\)", shown["body"])
        row = {
            "tasks": args.n,
            "events": events,
            "size_mb": round(trace.stat().st_size / 1e6, 1),
            "write_seconds": round(wall, 2),
            "write_cpu_seconds": round(cpu, 2),
            "open_seconds": round(shown["seconds"], 1),
            "profiles": int(m.group(1)) if m else None,
            "errors": len(shown["errors"]),
            "load": round(os.getloadavg()[0], 2),
        }
    print(json.dumps(row))
    print(
        "\n| tasks | events | MB | write s (CPU) | speedscope open s | profiles | errors | load |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {row['tasks']:,} | {row['events']:,} | {row['size_mb']} | {row['write_seconds']} "
        f"({row['write_cpu_seconds']}) | {row['open_seconds']} | {row['profiles']} | "
        f"{row['errors']} | {row['load']} |"
    )
    return 0 if m and not shown["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
