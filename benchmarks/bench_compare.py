"""Speed of ``metaprov compare``: two big runs side by side, and a campaign against its median.

1. Two synthetic runs of N tasks (seeds 1 and 2, the benchmark workload of
   ``metaprov.synthetic.generate_run``): the time to read both (``read_run``), then the time of
   the comparison itself (timelines, every run's makespan shared out, alignment, causes, tables),
   and the ratio of the whole ``compare`` (reading included) to the reading alone (bar: <= 2).
2. A campaign of R small runs (seeds 1..R) compared against its median run in one call.

Run it alone on the machine (``flock /tmp/metaprov-bench.lock``); it prints the load average.

Usage::

    python benchmarks/bench_compare.py --n 1000000 --campaign 100 --campaign-tasks 2000
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metaprov.analysis.compare import explain  # noqa: E402
from metaprov.analysis.timeline import blame, timeline_from_records  # noqa: E402
from metaprov.compare import compare  # noqa: E402
from metaprov.ingest import read_run  # noqa: E402
from metaprov.synthetic import generate_run  # noqa: E402


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pair(root: Path, n: int) -> dict[str, float]:
    paths = []
    for seed in (1, 2):
        p = root / f"pair-{n}-{seed}"
        if not (p / "truth.json").is_file():
            generate_run(p, n, seed=seed)
        paths.append(p)
    # one run's records in memory at a time: read, make its timeline, let the records go
    read_s = t_tl = 0.0
    timelines = []
    for p in paths:
        t = time.perf_counter()
        records = read_run(p, darshan=False)
        read_s += time.perf_counter() - t
        t = time.perf_counter()
        timelines.append(timeline_from_records(records, p.name))
        t_tl += time.perf_counter() - t
        del records
    t = time.perf_counter()
    blames = [blame(tl) for tl in timelines]
    t_blame = time.perf_counter() - t
    t = time.perf_counter()
    ex = explain(*blames)
    t_explain = time.perf_counter() - t
    compare_s = t_tl + t_blame + t_explain
    assert abs(ex.causes["seconds"].sum() - ex.difference_s) < 1e-3
    return {
        "tasks": n,
        "read_s": read_s,
        "timelines_s": t_tl,
        "blame_s": t_blame,
        "explain_s": t_explain,
        "compare_s": compare_s,
        "ratio_total_to_read": (read_s + compare_s) / read_s,
        "peak_rss_mb": _rss_mb(),
        "difference_s": ex.difference_s,
    }


def campaign(root: Path, runs: int, n: int) -> dict[str, float]:
    paths = []
    for seed in range(1, runs + 1):
        p = root / f"camp-{n}-{seed}"
        if not (p / "truth.json").is_file():
            generate_run(p, n, seed=seed, workers=4, threads=4)
        paths.append(p)
    t = time.perf_counter()
    c = compare(paths, baseline="median", darshan=False)
    total = time.perf_counter() - t
    return {
        "runs": runs,
        "tasks_per_run": n,
        "seconds": total,
        "read_s": c.read_seconds,
        "outliers": int(c.runs["outlier"].sum()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="tasks per run of the pair")
    ap.add_argument("--campaign", type=int, default=100, help="runs of the campaign (0: none)")
    ap.add_argument("--campaign-tasks", type=int, default=2000)
    ap.add_argument("--data", type=Path, default=None, help="where runs are generated (kept)")
    args = ap.parse_args(argv)
    import os

    print(f"load before: {os.getloadavg()}")
    root = args.data or Path(tempfile.mkdtemp(prefix="metaprov-bench-compare-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.n:
        r = pair(root, args.n)
        print(
            f"pair of {r['tasks']:,} tasks: read {r['read_s']:.1f} s; compare {r['compare_s']:.1f} s "
            f"(timelines {r['timelines_s']:.1f}, blame {r['blame_s']:.1f}, explain "
            f"{r['explain_s']:.1f}); (read + compare) / read = {r['ratio_total_to_read']:.2f}; "
            f"peak RSS {r['peak_rss_mb']:,.0f} MB"
        )
    if args.campaign:
        r2 = campaign(root, args.campaign, args.campaign_tasks)
        print(
            f"campaign of {r2['runs']} runs x {r2['tasks_per_run']:,} tasks against the median: "
            f"{r2['seconds']:.1f} s in one call (reading {r2['read_s']:.1f} s), "
            f"{r2['outliers']} outlier(s)"
        )
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
