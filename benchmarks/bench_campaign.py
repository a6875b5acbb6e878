"""Campaign benchmark: many runs in one process vs on a LocalCluster; a huge run in partitions.

Input: synthetic runs of the reference workload (``metaprov.synthetic``, cached in
``benchmarks/_data/run-<N>-s<seed>``). Output: a markdown table on stdout and
``benchmarks/results/campaign-<timestamp>.json``.

Each configuration runs ``metaprov export`` in a fresh child process (``-q``); its wall time and
peak RSS (the driver's: for ``in-process`` that is the whole conversion) are measured here, and
each worker's peak RSS is read from the manifest (every task records the peak of the process
that ran it); "cores busy" is the CPU seconds of the child (and of the worker processes it
waited for) over its wall seconds. Configurations:

=====================  ==========================================================================
``campaign-seq``       ``--runs`` runs of ``--n`` tasks, ``--backend in-process`` (one at a time)
``campaign-local``     the same runs on ``--local-workers W`` (a LocalCluster of W processes)
``huge-single``        one run of ``--huge`` tasks, in-process, no partitions
``huge-partitioned``   the same run, ``--partitions P`` on ``--local-workers W``; its quads are
                       checked equal to ``huge-single``'s (an order-independent hash of the lines)
=====================  ==========================================================================

Timings must not overlap with other benchmarks on a shared machine: run it under
``flock /tmp/metaprov-bench.lock``.

Example::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_campaign.py --runs 20 --n 100000 \\
        --huge 1000000 --partitions 4 --workers 2
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "_data"
RESULTS = HERE / "results"


def ensure_run(n: int, seed: int) -> Path:
    """The cached synthetic run of ``n`` tasks and ``seed`` (generated once, in a child)."""
    path = DATA / f"run-{n}-s{seed}"
    if (path / "truth.json").is_file():
        return path
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); "
        "from metaprov.synthetic import generate_run; "
        f"generate_run({str(path)!r}, {n}, seed={seed})"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    return path


def export(inputs: list[Path], out: Path, *options: str) -> dict[str, Any]:
    """``metaprov export INPUTS -o OUT -f nq -q OPTIONS`` in a child: wall time, peak RSS,
    the manifest's figures (triples, per-worker peaks)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "metaprov", "-q", "export", *map(str, inputs)]
    cmd += ["-o", str(out), "-f", "nq", *options]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err}")
    manifest = json.loads((out / "manifest.json").read_text())
    runs = manifest["runs"]
    peaks = [e.get("peak_rss") for e in runs] + [
        p.get("peak_rss") for e in runs for p in e.get("parts", [])
    ]
    peaks = [p for p in peaks if p]
    return {
        "command": " ".join(cmd[2:]),
        "wall_s": wall,
        "driver_peak_mb": usage.ru_maxrss / 1024,
        # CPU seconds of the child and the processes it waited for (a LocalCluster's workers)
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "worker_peak_mb": max(peaks) / 2**20 if peaks else None,
        "triples": manifest["totals"]["triples"],
        "runs": len(runs),
        "backend": manifest["backend"],
        "shards": [out / e["shard"] for e in runs],
    }


def shard_digests(files: list[Path], outdir: Path) -> list[str]:
    """The sha256 of each shard, in order; then ``outdir`` is removed (disk space)."""
    digests = []
    for f in files:
        h = hashlib.sha256()
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        digests.append(h.hexdigest())
    shutil.rmtree(outdir, ignore_errors=True)
    return digests


def sorted_hash(files: list[Path]) -> tuple[int, str]:
    """(lines, order-independent hash) of N-Quads files: the count, sum and xor of a 64-bit
    BLAKE2b hash of every line. Equal multisets of lines give equal results whatever their
    order, read in one pass with no temporary files (sorting two 10^6-task shards, 9.4 GB each,
    needs as much free disk again)."""
    total = xor = lines = 0
    mask = (1 << 64) - 1
    for path in files:
        with path.open("rb", buffering=1 << 24) as f:
            for line in f:
                h = int.from_bytes(hashlib.blake2b(line, digest_size=8).digest(), "little")
                total = (total + h) & mask
                xor ^= h
                lines += 1
    return lines, f"{total:016x}{xor:016x}"


def row(name: str, r: dict[str, Any], tasks: int) -> str:
    worker = f"{r['worker_peak_mb']:,.0f}" if r.get("worker_peak_mb") else "—"
    return (
        f"| {name} | {r['backend']['name']} ({r['backend'].get('workers') or '?'}) "
        f"| {r['wall_s']:.1f} | {tasks / r['wall_s']:,.0f} | {r['triples'] / r['wall_s']:,.0f} "
        f"| {r['driver_peak_mb']:,.0f} | {worker} | {r['cpu_s'] / r['wall_s']:.2f} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="runs in the campaign")
    ap.add_argument("--n", type=int, default=100_000, help="tasks per campaign run")
    ap.add_argument("--huge", type=int, default=1_000_000, help="tasks of the partitioned run")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2, help="LocalCluster workers")
    ap.add_argument("--skip-campaign", action="store_true")
    ap.add_argument("--skip-huge", action="store_true")
    ap.add_argument("--work", type=Path, default=Path("/tmp/metaprov-bench-campaign"))
    args = ap.parse_args(argv)
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    lines = [
        "| configuration | backend (workers) | wall s | tasks/s | triples/s | driver peak MB "
        "| worker peak MB | cores busy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if not args.skip_campaign:
        runs = [ensure_run(args.n, seed) for seed in range(args.runs)]
        camp = args.work / "campaign"
        camp.mkdir(parents=True, exist_ok=True)
        for r in runs:  # one campaign directory of links to the cached runs
            link = camp / r.name
            if not link.exists():
                link.symlink_to(r)
        total = args.n * args.runs
        # each backend's shards are hashed and deleted before the next runs: 20 shards of a
        # 10^5-task run are ~19 GB, and both sets at once did not fit the disk
        seq = export([camp], args.work / "seq", "--backend", "in-process")
        seq["sha256"] = shard_digests(seq["shards"], args.work / "seq")
        par = export([camp], args.work / "par", "--local-workers", str(args.workers))
        par["sha256"] = shard_digests(par["shards"], args.work / "par")
        same = seq["sha256"] == par["sha256"]
        lines.append(row(f"campaign-seq ({args.runs} x {args.n:,})", seq, total))
        lines.append(row(f"campaign-local ({args.runs} x {args.n:,})", par, total))
        lines.append(f"\nshards byte-identical between the backends: {same}")
        results["campaign"] = {"seq": seq, "local": par, "identical": same}
    if not args.skip_huge:
        huge = ensure_run(args.huge, 0)
        single = export([huge], args.work / "single", "--backend", "in-process", "--no-darshan")
        parts = export(
            [huge],
            args.work / "parts",
            "--partitions",
            str(args.partitions),
            "--local-workers",
            str(args.workers),
            "--no-darshan",
        )
        a, b = sorted_hash(single["shards"]), sorted_hash(parts["shards"])
        lines.append(row(f"huge-single ({args.huge:,})", single, args.huge))
        lines.append(row(f"huge-partitioned ({args.partitions} parts)", parts, args.huge))
        lines.append(f"\nquads: single {a[0]:,}, partitioned {b[0]:,}; equal as sets: {a == b}")
        results["huge"] = {"single": single, "partitioned": parts, "equal": a == b}
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"campaign-{stamp}.json"
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\n(results in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
