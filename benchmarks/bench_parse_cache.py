"""The parse cache of ``metaprov follow``: reading a run again after rows were appended.

A synthetic run of ``--tasks`` tasks (default 10^5) is replayed by the tests' writer
(tests/live_replay.py) in 10 batches (graph.csv's rows whole: the graph is complete at 90 %);
whole-row snapshots are taken as ``follow`` takes them after 9 batches (90 % of the rows) and
after the last (100 %). Then, ``--repeat`` times each:

- ``fresh``: ``read_run`` of the 100 % snapshot (what every refresh costs without the cache);
- ``cached``: ``read_run`` of the 100 % snapshot through a :class:`ParseCache` that read the
  90 % snapshot before (untimed): only the last 10 % of each CSV file is parsed;
- ``unchanged``: ``read_run`` of the 100 % snapshot again through the same cache.

Each cached read is checked equal to the fresh read (every table, the accounting). Printed: the
best and median seconds, the CSV text parsed (MB), the memory the cache holds (Arrow tables).

Run it under the machine's benchmark lock and say what the load was::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_parse_cache.py --tasks 100000
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _prepare(work: Path, n: int) -> tuple[Path, Path]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from live_replay import Replay

    from metaprov.live.snapshot import take_snapshot
    from metaprov.synthetic import generate_run

    csv.field_size_limit(1 << 30)  # a synthetic run's graph rows list many dependencies
    src = generate_run(work / "src" / "run", n, seed=1)
    rep = Replay(src, work / "run", steps=10, whole=("graph.csv",))
    for _ in range(9):
        rep.step()
    at90 = take_snapshot(work / "run", work / "snap90").path
    rep.step()
    at100 = take_snapshot(work / "run", work / "snap100").path
    return at90, at100


def _csv_mb(run: Path) -> float:
    return sum(p.stat().st_size for p in run.glob("*.csv")) / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="print where a cached read spends")
    ap.add_argument(
        "--work",
        type=Path,
        help="keep the replayed snapshots in this directory and reuse them on the next call",
    )
    args = ap.parse_args(argv)

    from metaprov.ingest import read_run
    from metaprov.ingest.csvread import ParseCache, parse_cache

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
    from test_parse_cache import _assert_records_equal

    with tempfile.TemporaryDirectory(prefix="bench-parse-cache-") as tmp:
        work = args.work / str(args.tasks) if args.work else Path(tmp)
        if (work / "snap100").is_dir():
            at90, at100 = work / "snap90", work / "snap100"
        else:
            at90, at100 = _prepare(work, args.tasks)
        print(f"{args.tasks} tasks: CSV {_csv_mb(at90):.1f} MB at 90 %, {_csv_mb(at100):.1f} MB")
        times: dict[str, list[float]] = {"fresh": [], "cached": [], "unchanged": []}
        fresh = None
        for _ in range(args.repeat):
            t = time.perf_counter()
            fresh = read_run(at100)
            times["fresh"].append(time.perf_counter() - t)
        for _ in range(args.repeat):
            cache = ParseCache()
            with parse_cache(cache):
                read_run(at90)
                t = time.perf_counter()
                cached = read_run(at100)
                times["cached"].append(time.perf_counter() - t)
                t = time.perf_counter()
                again = read_run(at100)
                times["unchanged"].append(time.perf_counter() - t)
            assert cache.stats["appended"] >= 5, cache.stats
            _assert_records_equal(cached, fresh)
            _assert_records_equal(again, fresh)
        held = sum(e.parsed.table.nbytes for e in cache._entries.values()) / 1e6
        for k, v in times.items():
            print(f"  {k:9s} best {min(v):.3f} s  median {statistics.median(v):.3f} s")
        print(f"  the cache holds {held:.0f} MB of Arrow tables; stats {cache.stats}")
        if args.profile:
            cache = ParseCache()
            with parse_cache(cache):
                read_run(at90)
                prof = cProfile.Profile()
                prof.enable()
                read_run(at100)
                prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
