"""Benchmark: the cost of Darshan I/O in the PROV export (N tasks, one traced call each).

Builds (untimed) the synthetic logs and executions of ``bench_darshan.py`` (8 workers x 8 threads,
millisecond tasks, one read or write each, 2,000 files per process), reads and links them, then
times the N-Triples export of the same records three ways, interleaved: without the I/O (the
records' Darshan tables removed), with the default I/O aggregates, and with ``--io-detail
segments``. Prints wall time, triples and triples/s per variant (medians of ``--repeat``) and the
peak RSS of the whole process.

    python benchmarks/bench_export_io.py --segments 1000000
    python benchmarks/bench_export_io.py --segments 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_darshan import build  # noqa: E402

from metaprov.ingest.darshan import read_darshan_logs  # noqa: E402
from metaprov.link import link_io  # noqa: E402
from metaprov.mapping import to_prov  # noqa: E402
from metaprov.records import RunRecords, conform  # noqa: E402
from metaprov.timeutil import epoch_to_utc  # noqa: E402
from metaprov.write import write  # noqa: E402


def records_of(out: Path) -> RunRecords:
    ex = pd.read_parquet(out / "executions.parquet")
    ex["key"] = ex["key"].to_numpy(dtype=object)  # one chunk, as the CSV reader gives it
    ex["start"] = epoch_to_utc(ex["start"])
    ex["end"] = epoch_to_utc(ex["end"])
    rec = RunRecords(path=str(out))
    rec.executions = conform("executions", ex)
    rec.run_id = "bench-io"
    rec.darshan = read_darshan_logs(out, rec.accounting)
    return link_io(rec)


def timed(rec: RunRecords, target: Path, io_detail: str) -> tuple[float, int]:
    t = time.perf_counter()
    n = write(to_prov(rec, io_detail=io_detail), target, "ntriples")
    return time.perf_counter() - t, n


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--segments", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="metaprov-bench-io-") as tmp:
        out = Path(tmp)
        build(out, args.segments, 96, 8, 8, 2000, 0)
        rec = records_of(out)
        plain = copy.copy(rec)
        plain.darshan = None
        plain.io = None
        variants = {
            "no I/O": (plain, "aggregate"),
            "I/O aggregate": (rec, "aggregate"),
            "I/O segments": (rec, "segments"),
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        triples: dict[str, int] = {}
        for _ in range(args.repeat):
            for name, (r, detail) in variants.items():
                dt, n = timed(r, out / "out.nt", detail)
                times[name].append(dt)
                triples[name] = n
                os.unlink(out / "out.nt")
    rows = []
    for name in variants:
        med = statistics.median(times[name])
        rows.append(
            {
                "variant": name,
                "seconds": round(med, 2),
                "triples": triples[name],
                "triples_per_s": int(triples[name] / med),
                "runs": [round(x, 2) for x in times[name]],
            }
        )
    rss = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(f"N = {args.segments:,} tasks, one traced call each; load {os.getloadavg()[0]:.1f}")
    for r in rows:
        print(
            f"{r['variant']:<15} {r['seconds']:>7.2f} s  {r['triples']:>11,} triples  "
            f"{r['triples_per_s']:>10,} triples/s  {r['runs']}"
        )
    print(f"peak RSS {rss} MB")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "peak_rss_mb": rss}, indent=2))


if __name__ == "__main__":
    main()
