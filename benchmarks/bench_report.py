"""Benchmark of ``metaprov report``: build time against the time of reading the run, size, opening.

Input: sizes N (tasks). For each N a synthetic run with Darshan I/O (``io_fraction=0.1``, 0.1 %
erred and retried tasks) is generated once into ``benchmarks/_data/report-<N>``. Output: one
markdown row per N on stdout, with the median of ``--repeat`` measurements:

- ``read``: ``read_run`` + ``link_io`` (what every report starts with): the baseline;
- ``report``: :func:`metaprov.report.write_report` end to end (read, link, summarise, import
  Bokeh, draw, write). Both clocks start once ``metaprov.ingest`` and ``metaprov.link`` (pandas,
  Arrow) are imported, so both measure the same reading; importing Bokeh counts for the report;
- the ratio report / read (the bar: <= 1.5), the page's size and the build's peak RSS;
- the same ratio in CPU seconds of the two child processes (user + system, interpreter start and
  imports included in both): less sensitive to other load on a shared machine than wall time;
- ``open``: seconds until headless Chromium (offline) has drawn every figure, when available.

Each measurement runs in a fresh child process (``os.wait4`` gives that child's own peak RSS).
Serialise timing runs on a shared machine::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_report.py --n 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "_data"
TAG = "BENCH-RESULT "

_READ = """
import json, sys, time
from metaprov.ingest import read_run
from metaprov.link import link_io
t = time.perf_counter()
r = read_run(sys.argv[1])
if r.darshan is not None:
    link_io(r)
print("{tag}" + json.dumps({{"seconds": time.perf_counter() - t, "tasks": len(r.tasks)}}))
"""

_REPORT = """
import json, sys, time
import metaprov.ingest, metaprov.link  # imported before the clock starts, as in the read's child
from metaprov.report import write_report
t = time.perf_counter()
res = write_report([sys.argv[1]], sys.argv[2])
print("{tag}" + json.dumps({{"seconds": time.perf_counter() - t, "bytes": res.bytes,
      "mode": res.facts["runs"][0]["task_stream"]["mode"], "graph": res.facts["runs"][0]["graph"]["drawn"]}}))
"""

_OPEN = """
import json, sys
from metaprov.report.browser import Browser
with Browser() as b:
    s = b.open(sys.argv[1])
    print("{tag}" + json.dumps({{"seconds": s, "errors": len(b.errors()), "roots": b.rendered_roots()}}))
"""


def _child(code: str, *args: str) -> dict:
    proc = subprocess.Popen(
        [sys.executable, "-c", code.format(tag=TAG), *args], stdout=subprocess.PIPE, text=True
    )
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"child failed ({status}): {code.splitlines()[1]} {args}")
    line = next(x for x in out.splitlines() if x.startswith(TAG))
    result = json.loads(line[len(TAG) :])
    result["rss_mb"] = usage.ru_maxrss / 1024
    result["cpu"] = usage.ru_utime + usage.ru_stime
    return result


def _run(n: int) -> Path:
    path = DATA / f"report-{n}"
    if not (path / "truth.json").exists():
        sys.path.insert(0, str(HERE.parent))
        from metaprov.synthetic import generate_run

        generate_run(path, n, io_fraction=0.1, erred_fraction=0.001, retried_fraction=0.001)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-browser", action="store_true", help="do not time the page in Chromium")
    args = ap.parse_args(argv)
    print(
        "| N | read s (median) | report s (median) | report / read | CPU s read / report (median) | CPU report / read | page MB | report peak RSS MB | drawn as | opens in Chromium s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.n:
        run = _run(n)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "report.html"
            reads, reports = [], []
            for _ in range(args.repeat):
                reads.append(_child(_READ, str(run)))
                reports.append(_child(_REPORT, str(run), str(out)))
            opened = None
            if not args.no_browser:
                try:
                    opened = _child(_OPEN, str(out))
                except SystemExit as exc:
                    print(f"<!-- browser not timed: {exc} -->", file=sys.stderr)
            r = statistics.median(x["seconds"] for x in reads)
            p = statistics.median(x["seconds"] for x in reports)
            rc = statistics.median(x["cpu"] for x in reads)
            pc = statistics.median(x["cpu"] for x in reports)
            rep = reports[0]
            op = "-" if opened is None else f"{opened['seconds']:.1f}"
            print(
                f"| {n:,} | {r:.1f} | {p:.1f} | {p / r:.2f} | {rc:.1f} / {pc:.1f} | {pc / rc:.2f} | "
                f"{rep['bytes'] / 1e6:.1f} | "
                f"{max(x['rss_mb'] for x in reports):,.0f} | task stream {rep['mode']}, graph per "
                f"{rep['graph']} | {op} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
