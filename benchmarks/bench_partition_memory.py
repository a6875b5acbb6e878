"""Peak memory of one partition of a run, against the single-process export (issue 15).

Input: a cached synthetic run (``benchmarks/_data/run-<N>-s0``, made by ``bench_campaign.py``).
Output: a markdown table on stdout: the peak RSS of a fresh child process per configuration.

=================  ===========================================================================
``single``         ``metaprov.export`` of the whole run (no partitions)
``read``           read partition 0 of P (``read_partition``) and nothing else
``one``            read, summarise and map partition 0 of P (what a worker does per partition)
``held2``          read partitions 0 and 1, then map both, holding both partitions' records
                   (what a worker with P / W = 2 partitions did before issue 15's s6 change)
``seq2``           summarise partitions 0 and 1 (each read, summarised, dropped), then read
                   each again, reduce its dependencies and map it (what a worker with 2
                   partitions does now: ``summary_task`` then ``map_task``); its ``reread s``
                   is the second reads'
=================  ===========================================================================

Only peak memory is measured (the child's ``ru_maxrss``); wall times are printed for shape, and
are timings only under ``flock /tmp/metaprov-bench.lock``.

Example::

    python benchmarks/bench_partition_memory.py --n 100000 --partitions 4 --baseline /work/main
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

CHILD = """
import json, resource, sys, tempfile, time
from pathlib import Path
from metaprov.export.partition import read_partition, summarize_partition, write_partition
try:  # what the summary and map tasks do now (absent from older checkouts)
    from metaprov.export.partition import keep_for_mapping, summary_task
except ImportError:
    keep_for_mapping = summary_task = None
run, parts, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
opts = {"base": "https://w3id.org/metaprov/id", "detail": "tasks"}
t = time.perf_counter()
reread = 0.0
with tempfile.TemporaryDirectory(prefix="metaprov-bench-") as tmp:
    out = Path(tmp)
    if mode == "single":
        from metaprov.export import export
        export(run, out / "x.nq", darshan=False)
    elif mode == "read":
        read_partition(run, 0, parts)
    elif mode == "seq2":
        for p in range(2):
            if summary_task is not None:
                summary_task(run, p, parts)
            else:
                summarize_partition(read_partition(run, p, parts), p, parts)
        for p in range(2):
            t1 = time.perf_counter()
            rec = read_partition(run, p, parts)
            reread += time.perf_counter() - t1
            if keep_for_mapping is not None:
                keep_for_mapping(rec, p, parts)
            write_partition(rec, p, parts, "run", out / f"{p}.nq", **opts)
            del rec
    else:
        held = []
        for p in range(1 if mode == "one" else 2):
            rec = read_partition(run, p, parts)
            summarize_partition(rec, p, parts)
            held.append(rec)
        for p, rec in enumerate(held):
            write_partition(rec, p, parts, "run", out / f"{p}.nq", **opts)
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"mode": mode, "wall_s": wall, "peak_mb": peak, "reread_s": reread}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="tasks of the cached run")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout of metaprov (e.g. a worktree of main) measured in the same run",
    )
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from bench_campaign import ensure_run

    run = ensure_run(args.n, 0)
    base = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, metaprov.mapping, metaprov.ingest; "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    print(
        f"run: {run} ({args.n:,} tasks), P = {args.partitions}; "
        f"interpreter and libraries: {float(base.stdout):,.0f} MB\n"
    )
    print(
        "| code | configuration | peak RSS MB | wall s (shape only) | reread s |\n"
        "|---|---|---:|---:|---:|"
    )
    checkouts = [("this", REPO)] + ([("baseline", args.baseline)] if args.baseline else [])
    for mode in ("single", "read", "one", "held2", "seq2"):
        for name, repo in checkouts:
            res = subprocess.run(
                [sys.executable, "-c", CHILD, str(run), str(args.partitions), mode],
                check=True,
                capture_output=True,
                text=True,
                cwd=repo,
            )
            r = json.loads(res.stdout.strip().splitlines()[-1])
            reread = f"{r['reread_s']:.1f}" if mode == "seq2" else "—"
            print(f"| {name} | {mode} | {r['peak_mb']:,.0f} | {r['wall_s']:.1f} | {reread} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
