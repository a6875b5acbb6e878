"""Crate benchmark: ``metaprov crate`` of one run beside the Turtle export of the same run.

Input: sizes N (tasks) of the synthetic reference workload (``metaprov.synthetic``, seed 0,
cached in ``benchmarks/_data/run-<N>-s0`` like the other benchmarks), or ``--run DIR``.
Output: a markdown table on stdout and ``benchmarks/results/crate-<timestamp>.json``.

Each measurement runs in a fresh child process and reports wall time, CPU time (user + system),
peak RSS and the 1-minute load average; the two measurements alternate ``--repeat`` times so
both see the same machine:

==============  ==================================================================================
``export-ttl``  end to end: ``metaprov.export.export(run, out.ttl)`` (read, map, write Turtle)
``crate``       end to end: ``metaprov.crate([run], out/)`` with its defaults: Turtle and JSON-LD
                (one mapping pass), PROV-N (refused above its limit, with a note), the per-prefix
                figures, the record files listed with their sha256, metadata and preview
==============  ==================================================================================

The bar (issue 13): the crate in <= 1.5x the time of the Turtle export alone, and metadata that
stays small (per task prefix, not per task).

Example::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_crate.py --n 1000000 --repeat 2
"""

from __future__ import annotations

import argparse
import datetime as _dt
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
TAG = "BENCH-CRATE "


def _usage() -> dict[str, float]:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": r.ru_utime + r.ru_stime, "rss_mb": r.ru_maxrss / 1024}


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def child(kind: str, run: Path, out: Path) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    sys.path.insert(0, str(REPO))
    import logging

    logging.basicConfig(level=logging.ERROR)
    t0, c0 = time.perf_counter(), _usage()["cpu"]
    res: dict[str, Any] = {}
    if kind == "export-ttl":
        from metaprov.export import export

        r = export(run, out)
        res["triples"] = r.triples
    elif kind == "crate":
        import metaprov

        r = metaprov.crate([run], out)
        res.update(
            triples=r.runs[0]["files"][0]["triples"],
            entities=r.entities,
            metadata_bytes=r.metadata_bytes,
            files=[f["file"] for f in r.runs[0]["files"]],
            notes=r.runs[0]["notes"],
        )
    else:
        raise SystemExit(f"unknown measurement {kind}")
    res.update(
        wall=time.perf_counter() - t0,
        cpu=_usage()["cpu"] - c0,
        peak_rss_mb=_usage()["rss_mb"],
        bytes=_tree_bytes(out),
        loadavg=os.getloadavg()[0],
    )
    return res


def _spawn(kind: str, run: Path, out: Path, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, str(run), str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "reason": f"more than {timeout:.0f} s"}
    finally:
        if out.is_dir():
            shutil.rmtree(out, ignore_errors=True)
        elif out.exists():
            out.unlink()
    for line in proc.stdout.splitlines():
        if line.startswith(TAG):
            return {"status": "ok", **json.loads(line[len(TAG) :])}
    return {"status": "failed", "reason": (proc.stderr or proc.stdout)[-2000:]}


def ensure_run(n: int) -> Path:
    run = DATA / f"run-{n}-s0"
    if not (run / "graph.csv").exists():
        sys.path.insert(0, str(REPO))
        from metaprov.synthetic import generate_run

        print(f"generating the synthetic run N={n:,} in {run}", file=sys.stderr)
        generate_run(run, n, seed=0)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: flock /tmp/metaprov-bench.lock python benchmarks/bench_crate.py --n 100000",
    )
    ap.add_argument("--n", type=int, nargs="+", default=[100_000], help="task counts")
    ap.add_argument("--run", type=Path, default=None, help="an existing run directory instead")
    ap.add_argument("--repeat", type=int, default=1, help="alternating repeats of both measures")
    ap.add_argument("--work", type=Path, default=DATA / "crate-work", help="scratch directory")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--child", nargs=3, metavar=("KIND", "RUN", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, run, out = args.child
        print(TAG + json.dumps(child(kind, Path(run), Path(out))), flush=True)
        return 0

    RESULTS.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    runs = [(None, args.run)] if args.run else [(n, ensure_run(n)) for n in args.n]
    rows: list[dict[str, Any]] = []
    for n, run in runs:
        for i in range(args.repeat):
            for kind in ("export-ttl", "crate"):
                out = args.work / ("out.ttl" if kind == "export-ttl" else "crate")
                res = _spawn(kind, run, out, args.timeout)
                res.update(n=n, run=str(run), measure=kind, repeat=i)
                rows.append(res)
                if res["status"] == "ok":
                    print(
                        f"{run.name} {kind:<10} wall {res['wall']:7.1f} s (cpu {res['cpu']:7.1f}) "
                        f"peak {res['peak_rss_mb']:6.0f} MB  {res['bytes'] / 1e6:9.1f} MB out  "
                        f"load {res['loadavg']:.1f}",
                        file=sys.stderr,
                        flush=True,
                    )
                else:
                    print(
                        f"{run.name} {kind}: {res['status']} {res.get('reason', '')}",
                        file=sys.stderr,
                    )
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"crate-{stamp}.json").write_text(json.dumps(rows, indent=2))
    print(
        "| run | measure | wall s | CPU s | peak RSS MB | MB written | metadata KB | entities | load |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["status"] != "ok":
            print(f"| {Path(r['run']).name} | {r['measure']} | {r['status']} | | | | | | |")
            continue
        md = f"{r['metadata_bytes'] / 1024:,.0f}" if "metadata_bytes" in r else ""
        print(
            f"| {Path(r['run']).name} | {r['measure']} | {r['wall']:.1f} | {r['cpu']:.1f} | "
            f"{r['peak_rss_mb']:,.0f} | {r['bytes'] / 1e6:,.0f} | {md} | {r.get('entities', '')} | "
            f"{r['loadavg']:.1f} |"
        )
    ok = [r for r in rows if r["status"] == "ok"]
    for run in sorted({r["run"] for r in ok}):
        e = [r["wall"] for r in ok if r["run"] == run and r["measure"] == "export-ttl"]
        c = [r["wall"] for r in ok if r["run"] == run and r["measure"] == "crate"]
        if e and c:
            print(
                f"\n{Path(run).name}: crate / Turtle export = {min(c) / min(e):.2f} (best of each)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
