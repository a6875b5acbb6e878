"""Write a seeded synthetic Mofka-Dask run (the benchmark workload) to a directory.

Input: the number of tasks and the run's shape. Output: the run's CSV files and ``truth.json``
(see :func:`metaprov.synthetic.generate_run` and ``docs/benchmarks.md``).

Example::

    python benchmarks/generate.py --n 100000 -o benchmarks/_data/run-1e5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metaprov.synthetic import IO_FILES, generate_run, load_truth  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Parse the options, generate the run, print its ground-truth counts."""
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: python benchmarks/generate.py --n 100000 -o benchmarks/_data/run-1e5",
    )
    ap.add_argument("--n", type=int, required=True, help="number of tasks")
    ap.add_argument("-o", "--output", type=Path, required=True, help="run directory to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--threads", type=int, default=8, help="threads per worker")
    ap.add_argument("--transfer-fraction", type=float, default=0.10)
    ap.add_argument("--tuple-key-fraction", type=float, default=0.5)
    ap.add_argument("--graphs", type=int, default=1)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--erred-fraction", type=float, default=0.0)
    ap.add_argument("--retried-fraction", type=float, default=0.0)
    ap.add_argument(
        "--no-worker-transitions", action="store_true", help="omit worker_transition.csv"
    )
    ap.add_argument(
        "--no-scheduler-transitions", action="store_true", help="omit scheduler_transition.csv"
    )
    ap.add_argument(
        "--fetch-transitions", action="store_true", help="add released->fetch->flight->memory rows"
    )
    ap.add_argument("--wide-thread-ids", action="store_true", help="thread ids above 2^63")
    ap.add_argument(
        "--io-fraction",
        type=float,
        default=0.0,
        help="share of tasks doing file I/O; > 0 also writes one Darshan DXT log per worker",
    )
    ap.add_argument("--io-files", type=int, default=IO_FILES, help="size of the data file pool")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    run = generate_run(
        args.output,
        args.n,
        seed=args.seed,
        workers=args.workers,
        threads=args.threads,
        transfer_fraction=args.transfer_fraction,
        tuple_key_fraction=args.tuple_key_fraction,
        with_worker_transitions=not args.no_worker_transitions,
        with_scheduler_transitions=not args.no_scheduler_transitions,
        graphs=args.graphs,
        clients=args.clients,
        erred_fraction=args.erred_fraction,
        retried_fraction=args.retried_fraction,
        wide_thread_ids=args.wide_thread_ids,
        fetch_transitions=args.fetch_transitions,
        io_fraction=args.io_fraction,
        io_files=args.io_files,
    )
    elapsed = time.perf_counter() - t0
    truth = load_truth(run)
    size = sum(truth["bytes"].values())
    print(
        f"{run}: {truth['tasks']:,} tasks, {truth['rows_total']:,} CSV rows, "
        f"{size / 1e6:,.1f} MB in {elapsed:.1f} s",
        file=sys.stderr,
    )
    print(
        json.dumps(
            {k: v for k, v in truth.items() if k not in ("params", "bytes", "io")}
            | ({"io": {k: truth["io"][k] for k in ("segments", "link")}} if "io" in truth else {}),
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
