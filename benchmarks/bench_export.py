"""Export benchmark: metaprov's streaming export beside a naive rdflib build of the same run.

Input: sizes N (tasks) of the synthetic reference workload (``metaprov.synthetic``, seed 0,
cached in ``benchmarks/_data/run-<N>-s0`` like ``benchmarks/run.py``). Output: a markdown table
on stdout and ``benchmarks/results/export-<timestamp>.json``.

Each measurement runs in a fresh child process (its peak RSS is its own) and reports wall time,
CPU time (user + system; the machine is shared, so CPU time is the steadier figure), peak RSS and
the 1-minute load average. Measurements per N:

==================  ===============================================================================
``export-<fmt>``    end to end: ``read_run`` + ``to_prov`` + ``write`` to a file, per ``--formats``
``map+write-<fmt>`` the same child's map+write part alone (records already read)
``format-nt``       map + N-Triples formatting into a null sink (no disk): the CPU cost of the text
``rdflib-naive``    the same triples added one by one to an rdflib ``Graph``, then serialised as
                    N-Triples (only up to ``--naive-max`` tasks; it needs ~1 KB per triple)
==================  ===============================================================================

Example::

    python benchmarks/bench_export.py --n 10000 100000 1000000 --formats nt ttl nq jsonld
    # this checkout beside an older commit, alternating, twice each:
    git worktree add --detach ../base 9b44b83
    python benchmarks/bench_export.py --n 1000000 --formats nt --export-only \
        --baseline ../base --repeat 2
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "_data"
RESULTS = HERE / "results"
FORMATS = {"nt": "ntriples", "ttl": "turtle", "nq": "nquads", "jsonld": "json-ld", "trig": "trig"}
TAG = "BENCH-EXPORT "


def _usage() -> dict[str, float]:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": r.ru_utime + r.ru_stime, "rss_mb": r.ru_maxrss / 1024}


def child(kind: str, run: Path, out: Path, fmt: str) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    sys.path.insert(0, str(REPO))
    import metaprov
    from metaprov.mapping import to_prov
    from metaprov.write import write

    t0, c0 = time.perf_counter(), _usage()["cpu"]
    records = metaprov.read_run(run, darshan=False)
    t1, c1 = time.perf_counter(), _usage()["cpu"]
    res: dict[str, Any] = {"read_wall": t1 - t0, "read_cpu": c1 - c0, "tasks": len(records.tasks)}
    graph = to_prov(records)
    if kind == "export":
        n = write(graph, out, FORMATS[fmt])
        res["bytes"] = out.stat().st_size
        out.unlink()
    elif kind == "format-nt":
        from metaprov.write.ntriples import block_triples
        from metaprov.write.rows import write_nt

        class Null:
            def write(self, b: bytes) -> int:
                return len(b)

            def flush(self) -> None:
                pass

        n = 0
        sink = Null()
        for block in graph.blocks():
            write_nt(block, sink)
            n += block_triples(block)
    elif kind == "rdflib-naive":
        import rdflib

        g = rdflib.Graph()
        n = 0
        # The naive way: one Python triple at a time into an rdflib graph, then serialise.
        for s, p, o in graph.batches():
            for st, pt, ot in zip(s.to_pylist(), p.to_pylist(), o.to_pylist(), strict=True):
                g.add((_rdflib_term(st), _rdflib_term(pt), _rdflib_term(ot)))
                n += 1
        g.serialize(destination=str(out), format="nt", encoding="utf-8")
        res["bytes"] = out.stat().st_size
        out.unlink()
    else:
        raise SystemExit(f"unknown measurement {kind}")
    t2, c2 = time.perf_counter(), _usage()["cpu"]
    res.update(
        map_write_wall=t2 - t1,
        map_write_cpu=c2 - c1,
        wall=t2 - t0,
        cpu=c2 - c0,
        triples=n,
        peak_rss_mb=_usage()["rss_mb"],
        loadavg=os.getloadavg()[0],
    )
    return res


def _rdflib_term(nt: str) -> Any:
    import rdflib

    if nt.startswith("<"):
        return rdflib.URIRef(nt[1:-1])
    lex, _, tail = nt[1:].rpartition('"')
    lex = lex.encode("utf-8").decode("unicode_escape") if "\\" in lex else lex
    if tail.startswith("^^<"):
        return rdflib.Literal(lex, datatype=rdflib.URIRef(tail[3:-1]))
    return rdflib.Literal(lex)


def _spawn(
    kind: str, run: Path, out: Path, fmt: str, timeout: float, script: Path | None = None
) -> dict[str, Any]:
    """Run one measurement in a fresh process; ``script``: another checkout's copy of this file."""
    script = script or Path(__file__).resolve()
    cmd = [sys.executable, str(script), "--child", kind, str(run), str(out), fmt]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "reason": f"more than {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(TAG):
            return {"status": "ok", **json.loads(line[len(TAG) :])}
    return {"status": "failed", "reason": (proc.stderr or proc.stdout)[-2000:]}


def _commit(checkout: Path) -> str:
    proc = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or "unknown"


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
        epilog="example: python benchmarks/bench_export.py --n 10000 100000",
    )
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000], help="task counts")
    ap.add_argument(
        "--formats", nargs="+", default=["nt", "ttl", "nq", "jsonld"], choices=sorted(FORMATS)
    )
    ap.add_argument(
        "--naive-max", type=int, default=100_000, help="largest N for the rdflib baseline"
    )
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument(
        "--baseline",
        type=Path,
        metavar="CHECKOUT",
        help="also measure this checkout of metaprov (e.g. a `git worktree` of an older commit), "
        "alternating with this one, each measurement in a fresh process",
    )
    ap.add_argument("--repeat", type=int, default=1, help="repetitions of every measurement")
    ap.add_argument("--export-only", action="store_true", help="only the export-<fmt> measurements")
    ap.add_argument(
        "--child", nargs=4, metavar=("KIND", "RUN", "OUT", "FMT"), help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    if args.child:
        kind, run, out, fmt = args.child
        print(TAG + json.dumps(child(kind, Path(run), Path(out), fmt)), flush=True)
        return 0

    RESULTS.mkdir(parents=True, exist_ok=True)
    work = DATA / "export-work"
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for n in args.n:
        run = ensure_run(n)
        plan = [("export", f) for f in args.formats]
        if not args.export_only:
            plan.append(("format-nt", "nt"))
        if n <= args.naive_max and not args.export_only:
            plan.append(("rdflib-naive", "nt"))
        checkouts: list[tuple[str, Path | None]] = [("", None)]
        if args.baseline is not None:
            base = args.baseline.resolve() / "benchmarks" / "bench_export.py"
            checkouts = [("baseline ", base), ("", None)]
        for (kind, fmt), _, (label, script) in itertools.product(
            plan, range(args.repeat), checkouts
        ):
            res = _spawn(kind, run, work / f"out.{fmt}", fmt, args.timeout, script)
            res.update(n=n, measure=label + (f"{kind}-{fmt}" if kind == "export" else kind))
            res["commit"] = _commit(script.parents[1] if script else REPO)
            rows.append(res)
            if res["status"] == "ok":
                print(
                    f"N={n:>9,} {res['measure']:<14} wall {res['wall']:7.1f} s (cpu {res['cpu']:7.1f}) "
                    f"map+write {res['map_write_wall']:6.1f} s (cpu {res['map_write_cpu']:6.1f}) "
                    f"{res['triples']:>11,} triples  peak {res['peak_rss_mb']:6.0f} MB  load {res['loadavg']:.1f}"
                    f"  ({res['commit']})",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                print(
                    f"N={n:>9,} {res['measure']}: {res['status']} {res.get('reason', '')}",
                    file=sys.stderr,
                )
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"export-{stamp}.json").write_text(json.dumps(rows, indent=2))
    print(
        "| N | commit | measure | wall s | CPU s | read s | map+write s | triples | M triples/s (map+write) | MB out | peak RSS MB | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["status"] != "ok":
            print(
                f"| {r['n']:,} | {r['commit']} | {r['measure']} | {r['status']} | | | | | | | | |"
            )
            continue
        rate = r["triples"] / r["map_write_wall"] / 1e6 if r["map_write_wall"] else 0.0
        mb = f"{r['bytes'] / 1e6:,.0f}" if "bytes" in r else ""
        print(
            f"| {r['n']:,} | {r['commit']} | {r['measure']} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['read_wall']:.1f} | "
            f"{r['map_write_wall']:.1f} | {r['triples']:,} | {rate:.2f} | {mb} | {r['peak_rss_mb']:.0f} | {r['loadavg']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
