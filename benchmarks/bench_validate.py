"""Validation benchmark: ``metaprov validate`` with the columnar engine beside the SPARQL engine.

Input: sizes N (tasks) of the synthetic reference workload (cached in ``benchmarks/_data`` like
``bench_export.py``), exported to N-Triples once per N (under ``--work``, default the system
temporary directory; deleted afterwards). Output: one line per step on stderr (wall and CPU
seconds), per engine its total wall, CPU and peak RSS, whether the two engines found the same
violations, and ``benchmarks/results/validate-<timestamp>.json``.

Each engine runs in its own child process (so its peak RSS is its own), step by step:

- ``sparql``: the steps of :func:`metaprov.validate.validate` with the SPARQL engine: the bulk
  load into an on-disk Oxigraph store, the two inference updates (the ontology's class and
  property hierarchy), every shape query and every PROV-CONSTRAINTS query;
- ``columnar``: reading the file column-wise (hierarchy applied), then every check's columnar
  twin (:mod:`metaprov.validate.columnar`).

Example::

    python benchmarks/bench_validate.py --n 100000
    python benchmarks/bench_validate.py --n 1000000 --engine columnar
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_export import RESULTS, ensure_run  # noqa: E402


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _timer(rows: list[dict[str, Any]]) -> Any:
    def timed(step: str, kind: str, fn: Any) -> Any:
        w, c = time.perf_counter(), _cpu()
        out = fn()
        row = {"step": step, "kind": kind, "wall": time.perf_counter() - w, "cpu": _cpu() - c}
        if isinstance(out, list):
            row["violations"] = len(out)
        rows.append(row)
        print(
            f"{kind:<11} {step:<45} wall {row['wall']:7.2f} s  cpu {row['cpu']:7.2f} s"
            + (f"  {row['violations']} violations" if "violations" in row else ""),
            file=sys.stderr,
            flush=True,
        )
        return out

    return timed


def measure_columnar(nt: Path) -> tuple[list[dict[str, Any]], list[list[str]]]:
    from metaprov.validate import PROV_CHECKS, SPARQL_CHECKS, columnar, constraints

    rows: list[dict[str, Any]] = []
    timed = _timer(rows)
    graph = timed("read (columns, hierarchy)", "load", lambda: columnar.read(nt))
    rows[-1]["triples"] = graph.statements
    found: list[list[str]] = []
    for kind, checks in (
        ("shape", SPARQL_CHECKS),
        ("prov", PROV_CHECKS),
        ("constraint", constraints.checks()),
    ):
        for name, query, _message in checks:
            foci = timed(name, kind, lambda q=query: columnar.run_check(graph, q))
            found += [[name, f] for f in foci]
    return rows, found


def measure_sparql(nt: Path) -> tuple[list[dict[str, Any]], list[list[str]]]:
    import pyoxigraph as ox

    from metaprov.validate import PROV_CHECKS, SPARQL_CHECKS, _run_sparql, constraints

    rows: list[dict[str, Any]] = []
    timed = _timer(rows)
    found: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="validate-", dir=nt.parent) as tmp:
        store = ox.Store(tmp)
        timed(
            "bulk load",
            "load",
            lambda s=store: s.bulk_load(
                path=str(nt), format=ox.RdfFormat.N_TRIPLES, to_graph=ox.DefaultGraph()
            ),
        )
        rows[-1]["triples"] = len(store)
        for i, update in enumerate(constraints.inference_updates()):
            timed(("classes", "properties")[i], "inference", lambda u=update, s=store: s.update(u))
        for kind, checks in (
            ("shape", SPARQL_CHECKS),
            ("prov", PROV_CHECKS),
            ("constraint", constraints.checks()),
        ):
            for name, query, message in checks:
                check = (name, query, message)
                out = timed(name, kind, lambda c=check, s=store: _run_sparql(s, [c]))
                found += [[v.shape, v.focus] for v in out]
        del store
    return rows, found


def child(engine: str, nt: Path, out: Path) -> int:
    """Measure one engine in this (child) process; write its rows, violations and peak RSS."""
    w, c = time.perf_counter(), _cpu()
    rows, found = (measure_columnar if engine == "columnar" else measure_sparql)(nt)
    total = {"wall": time.perf_counter() - w, "cpu": _cpu() - c}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)
    out.write_text(json.dumps({"steps": rows, "total": total, "peak_rss_mb": rss, "found": found}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: python benchmarks/bench_validate.py --n 100000",
    )
    ap.add_argument("--n", type=int, nargs="+", default=[100_000], help="task counts")
    ap.add_argument(
        "--engine",
        nargs="+",
        choices=("columnar", "sparql"),
        default=["columnar", "sparql"],
        help="engines to time (each in its own process)",
    )
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the N-Triples export is written (and deleted); 10^6 tasks is ~8 GB",
    )
    ap.add_argument("--child", nargs=3, metavar=("ENGINE", "NT", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child[0], Path(args.child[1]), Path(args.child[2]))
    import metaprov

    RESULTS.mkdir(parents=True, exist_ok=True)
    out: list[dict[str, Any]] = []
    for n in args.n:
        with tempfile.TemporaryDirectory(prefix="bench-validate-", dir=args.work) as tmp:
            nt = Path(tmp) / f"run-{n}.nt"
            w = time.perf_counter()
            metaprov.write(metaprov.to_prov(metaprov.read_run(ensure_run(n), darshan=False)), nt)
            print(
                f"N={n:,}: exported in {time.perf_counter() - w:.1f} s "
                f"({nt.stat().st_size / 1e9:.2f} GB)",
                file=sys.stderr,
            )
            entry: dict[str, Any] = {"n": n, "engines": {}}
            for engine in args.engine:
                res = Path(tmp) / f"{engine}.json"
                subprocess.run(
                    [sys.executable, __file__, "--child", engine, str(nt), str(res)], check=True
                )
                got = json.loads(res.read_text())
                total = got["total"]
                print(
                    f"N={n:,}: engine {engine}: {total['wall']:.1f} s wall, "
                    f"{total['cpu']:.1f} s CPU, peak RSS {got['peak_rss_mb']:,.0f} MB, "
                    f"{len(got['found'])} violation(s), load average {os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                )
                entry["engines"][engine] = got
            if len(entry["engines"]) == 2:
                a, b = (
                    {tuple(f) for f in entry["engines"][e]["found"]} for e in ("columnar", "sparql")
                )
                entry["same_violations"] = a == b
                print(f"N={n:,}: same violations from both engines: {a == b}", file=sys.stderr)
            entry["loadavg"] = os.getloadavg()[0]
        out.append(entry)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"validate-{stamp}.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
