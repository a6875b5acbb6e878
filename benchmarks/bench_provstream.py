"""PROV-N, PROV-JSON, PROV-XML (streamed) and the trace export beside N-Triples, side by side.

Input: sizes N (tasks) of the synthetic reference workload (``metaprov.synthetic``, seed 0,
cached in ``benchmarks/_data/run-<N>-s0`` like ``bench_export.py``). Output: a markdown table on
stdout and ``benchmarks/results/provstream-<timestamp>.json``.

Each measurement runs in a fresh child process (its peak RSS is its own): ``read_run`` once,
then ``to_prov`` + ``write`` of one format to a file, timed alone (wall and CPU seconds, peak
RSS, file size, the 1-minute load average). N-Triples is the baseline the issue measures the
PROV-DM formats against (at most 3x its time and 3 GB). Run it under the shared lock::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_provstream.py --n 100000 1000000
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "_data"
RESULTS = HERE / "results"
FORMATS = ("ntriples", "provn", "provjson", "provxml", "trace")
SUFFIX = {
    "ntriples": "nt",
    "provn": "provn",
    "provjson": "provjson",
    "provxml": "provx",
    "trace": "trace.json",
}
TAG = "BENCH-PROVSTREAM "


def child(run: Path, out: Path, fmt: str) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    import resource

    sys.path.insert(0, str(REPO))
    from metaprov import read_run, to_prov
    from metaprov.write import write

    records = read_run(run)
    t0, c0 = time.perf_counter(), time.process_time()
    n = write(to_prov(records), out, fmt)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "format": fmt,
        "count": n,
        "seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": round(rss),
        "size_mb": round(out.stat().st_size / 1e6, 1),
        "load": round(os.getloadavg()[0], 2),
    }


def ensure_run(n: int) -> Path:
    run = DATA / f"run-{n}-s0"
    if not (run / "graph.csv").exists():
        sys.path.insert(0, str(REPO))
        from metaprov.synthetic import generate_run

        run.parent.mkdir(parents=True, exist_ok=True)
        generate_run(run, n, seed=0)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100_000])
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    ap.add_argument("--child", nargs=3, metavar=("RUN", "OUT", "FORMAT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        run, out, fmt = args.child
        print(TAG + json.dumps(child(Path(run), Path(out), fmt)), flush=True)
        return 0
    rows = []
    scratch = DATA / "provstream-out"
    scratch.mkdir(parents=True, exist_ok=True)
    for n in args.n:
        run = ensure_run(n)
        for fmt in args.formats:
            out = scratch / f"run-{n}.{SUFFIX[fmt]}"
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(run), str(out), fmt],
                capture_output=True,
                text=True,
                check=True,
            )
            line = next(x for x in proc.stdout.splitlines() if x.startswith(TAG))
            row = {"tasks": n, **json.loads(line[len(TAG) :])}
            rows.append(row)
            print(json.dumps(row), flush=True)
            out.unlink()
    base = {r["tasks"]: r["seconds"] for r in rows if r["format"] == "ntriples"}
    print("\n| tasks | format | count | wall s | CPU s | x N-Triples | peak RSS MB | MB | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['seconds'] / base[r['tasks']]:.2f}" if r["tasks"] in base else ""
        print(
            f"| {r['tasks']:,} | {r['format']} | {r['count']:,} | {r['seconds']} | "
            f"{r['cpu_seconds']} | {ratio} | {r['peak_rss_mb']} | {r['size_mb']} | {r['load']} |"
        )
    RESULTS.mkdir(exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"provstream-{stamp}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
