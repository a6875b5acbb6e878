"""Benchmark: parse N synthetic DXT segments and link them to N task executions.

Writes (untimed) one Darshan log per worker process with the project's writer, in each DXT
segment layout, plus an executions table of N millisecond tasks on 8 workers x 8 threads, each
task doing one I/O call; Darshan clocks are made late by 10-60 ms per process. Then times
``read_darshan_logs`` + ``link_io`` (the interval join) in a fresh process per layout, and prints
wall time, peak RSS, throughput and link accuracy. A naive per-task scan on a sample gives the
comparison.

    python benchmarks/bench_darshan.py --segments 1000000
    python benchmarks/bench_darshan.py --segments 100000 --layouts 96 40
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metaprov.ingest.darshan import read_darshan_logs  # noqa: E402
from metaprov.link import link_io  # noqa: E402
from metaprov.records import RunRecords, conform  # noqa: E402
from metaprov.synthetic.darshan import log_file_name, write_darshan_log  # noqa: E402
from metaprov.timeutil import epoch_to_utc  # noqa: E402

T0 = 1_713_553_300.0
CMD = "python3 -c from multiprocessing.spawn import spawn_main --multiprocessing-fork"


def build(
    out: Path, n: int, layout: int, workers: int, threads: int, files: int, seed: int
) -> None:
    """Write the logs and the executions (parquet) for one layout."""
    rng = np.random.default_rng(seed)
    per_thread = int(np.ceil(n / (workers * threads)))
    ex_parts = []
    truth_parts = []
    made = 0
    for w in range(workers):
        pid = 1000 + w
        late = rng.uniform(0.010, 0.060)
        segs = []
        for t in range(threads):
            k = min(per_thread, n - made)
            if k <= 0:
                break
            tid = np.uint64(0x7F00_0000_0000 + w * 0x100_0000 + t * 0x1000)
            dur = rng.uniform(0.5e-3, 4e-3, k)
            gap = rng.uniform(0.1e-3, 0.5e-3, k)
            start = T0 + 2.0 + np.concatenate([[0.0], np.cumsum(dur + gap)[:-1]])
            keys = np.char.add(f"task-{w}-{t}-", np.arange(k).astype(str))
            ex_parts.append(
                pd.DataFrame(
                    {
                        "key": keys,
                        "attempt": 0,
                        "worker": f"tcp://10.0.0.{w + 1}:40000",
                        "thread": np.full(k, tid, dtype=np.uint64),
                        "start": start,
                        "end": start + dur,
                        "outcome": "memory",
                        "time_source": "worker",
                    }
                )
            )
            io_t = start + 50e-6 + rng.random(k) * (dur - 150e-6)
            segs.append(
                pd.DataFrame(
                    {
                        "path": np.char.add(
                            "/lus/grand/out/f", rng.integers(0, files, k).astype(str)
                        ),
                        "op": np.where(rng.random(k) < 0.5, "write", "read"),
                        "offset": np.arange(k, dtype=np.int64) * 4096,
                        "length": 4096,
                        "start_rel": io_t - T0 + late,
                        "end_rel": io_t - T0 + late + 20e-6,
                        "pthread": pd.array(np.full(k, tid, dtype=np.uint64), dtype="UInt64"),
                    }
                )
            )
            truth_parts.append(pd.DataFrame({"key": keys}))
            made += k
        if segs:
            write_darshan_log(
                out / log_file_name("u", "python3", pid, pid, T0),
                pd.concat(segs, ignore_index=True),
                start=T0,
                cmdline=CMD,
                jobid=pid,
                layout=layout,
                counters=False,
                garbage_after_nul=False,
            )
    ex = pd.concat(ex_parts, ignore_index=True)
    ex.to_parquet(out / "executions.parquet")


def run_one(out: Path) -> dict:
    """Timed part, in a fresh process: parse the logs, link them, report."""
    ex = pd.read_parquet(out / "executions.parquet")
    ex["start"] = epoch_to_utc(ex["start"])
    ex["end"] = epoch_to_utc(ex["end"])
    rec = RunRecords(path=str(out))
    rec.executions = conform("executions", ex)
    t0 = time.perf_counter()
    rec.darshan = read_darshan_logs(out, rec.accounting)
    t1 = time.perf_counter()
    link_io(rec)
    t2 = time.perf_counter()
    links = rec.io.segments
    # accuracy: the writer gave each task's segment the file offset 4096 * (task index on its
    # thread), and the thread id encodes worker and thread: rebuild the expected key
    seg = rec.darshan.segments
    linked = np.flatnonzero(links["status"].to_numpy() == "linked")[:200_000]
    pt_all = seg["pthread"].to_numpy(dtype=np.uint64, na_value=0)
    rel = pt_all[linked] - np.uint64(0x7F00_0000_0000)
    w = (rel >> np.uint64(24)).astype(np.int64).astype(str)
    t = ((rel >> np.uint64(12)) & np.uint64(0xFFF)).astype(np.int64).astype(str)
    i = (seg["offset"].to_numpy()[linked] // 4096).astype(str)
    expect = np.char.add(
        np.char.add(np.char.add(np.char.add("task-", w), "-"), np.char.add(t, "-")), i
    )
    got = links["key"].to_numpy(dtype=object)[linked].astype(str)
    right = int((got == expect).sum())
    # naive comparison: per-segment scan over all tasks of the worker, on a sample
    sample = np.arange(0, len(seg), max(1, len(seg) // 2000))
    ex_s = rec.executions
    ws = ex_s["start"].to_numpy(dtype="datetime64[us]").view("int64")
    we = ex_s["end"].to_numpy(dtype="datetime64[us]").view("int64")
    th = ex_s["thread"].to_numpy(dtype=np.uint64)
    ss = seg["start"].to_numpy(dtype="datetime64[us]").view("int64")
    pt = pt_all
    tn = time.perf_counter()
    for i in sample:
        m = (th == pt[i]) & (ws <= ss[i] - 35_000) & (we >= ss[i] - 35_000)
        m.sum()
    naive_per_seg = (time.perf_counter() - tn) / len(sample)
    return {
        "segments": int(len(seg)),
        "tasks": int(len(rec.executions)),
        "parse_s": round(t1 - t0, 3),
        "link_s": round(t2 - t1, 3),
        "total_s": round(t2 - t0, 3),
        "segments_per_s": int(len(seg) / (t2 - t0)),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "by_status": rec.io.accounting["by_status"],
        "linked_right_in_checked": f"{right}/{len(linked)}",
        "offsets_ms": [
            round(x * 1e3, 2) for x in rec.io.processes["clock_offset"].dropna().tolist()
        ],
        "naive_scan_extrapolated_s": round(naive_per_seg * len(seg), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--segments", type=int, default=1_000_000)
    ap.add_argument("--layouts", type=int, nargs="+", default=[96, 40, 104, 32])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--files", type=int, default=2000, help="distinct files per process")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per layout (median shown)")
    ap.add_argument("--run-one", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_one:
        print(json.dumps(run_one(args.run_one)))
        return
    print(f"cpus: {os.cpu_count()}  segments: {args.segments:,}  tasks: {args.segments:,}")
    for layout in args.layouts:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            t = time.perf_counter()
            build(out, args.segments, layout, args.workers, args.threads, args.files, seed=layout)
            size = sum(p.stat().st_size for p in out.glob("*.darshan"))
            gen = time.perf_counter() - t
            runs = []
            for _ in range(args.repeat):
                res = subprocess.run(
                    [sys.executable, __file__, "--run-one", str(out)],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
            runs.sort(key=lambda r: r["total_s"])
            r = runs[len(runs) // 2]
            print(
                f"layout {layout:>3} B: logs {size / 1e6:.1f} MB (written in {gen:.1f} s); "
                f"parse {r['parse_s']} s + link {r['link_s']} s = {r['total_s']} s "
                f"({r['segments_per_s']:,} segments/s), peak RSS {r['peak_rss_mb']} MB; "
                f"{r['by_status']}; right {r['linked_right_in_checked']}; "
                f"naive per-task scan ~{r['naive_scan_extrapolated_s']} s"
            )
            print(f"    estimated clock offsets (ms): {r['offsets_ms']}")


if __name__ == "__main__":
    main()
