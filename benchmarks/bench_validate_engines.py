"""Which validation engine is cheapest at which size: ``metaprov validate --engine E`` for
shacl (pyshacl), sparql (Oxigraph) and columnar, on exports of the synthetic workload from a
hundred tasks up (issue 29: ``--engine auto`` chooses by this measured cost).

Each (size, engine) runs ``metaprov -q validate FILE.nt --engine E`` once in a fresh process:
wall and CPU seconds (user + system of the child) and its peak RSS. CPU seconds are the figure
to compare on a shared machine. Output: a table on stdout and
``benchmarks/results/validate_engines.json``.

Example::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_validate_engines.py --n 100 1000 3000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed(cmd: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)  # noqa: S603
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
        "peak_rss_mb": round(after.ru_maxrss / 1024),
        "exit": proc.returncode,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100, 1000, 3000], help="task counts")
    ap.add_argument("--engines", nargs="+", default=["shacl", "sparql", "columnar"])
    args = ap.parse_args(argv)
    from metaprov.synthetic import generate_run

    work = Path(tempfile.mkdtemp(prefix="bench-validate-engines-"))
    rows = []
    try:
        for n in args.n:
            run = generate_run(work / f"run-{n}", n, seed=1, io_fraction=0.1)
            nt = work / f"run-{n}.nt"
            subprocess.run(  # noqa: S603
                [sys.executable, "-m", "metaprov", "-q", "export", str(run), "-o", str(nt)],
                check=True,
            )
            triples = sum(1 for _ in open(nt, "rb"))
            for engine in args.engines:
                # one child per measurement; in a child of a child so ru_maxrss is its own
                cmd = [
                    sys.executable,
                    "-m",
                    "metaprov",
                    "-q",
                    "validate",
                    str(nt),
                    "--engine",
                    engine,
                ]
                r = json.loads(
                    subprocess.run(  # noqa: S603
                        [sys.executable, __file__, "--one", json.dumps(cmd)],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout
                )
                row = {
                    "tasks": n,
                    "triples": triples,
                    "engine": engine,
                    **r,
                    "loadavg": os.getloadavg()[0],
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'tasks':>7}{'triples':>10}  {'engine':<9}{'wall s':>8}{'CPU s':>8}{'RSS MB':>8}")
    for r in rows:
        print(
            f"{r['tasks']:>7}{r['triples']:>10,}  {r['engine']:<9}{r['wall_s']:>8}{r['cpu_s']:>8}{r['peak_rss_mb']:>8}"
        )
    out = REPO / "benchmarks" / "results" / "validate_engines.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(timed(json.loads(sys.argv[2]))))
        sys.exit(0)
    sys.exit(main())
