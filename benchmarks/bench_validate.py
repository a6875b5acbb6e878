"""Validation benchmark: where the time of ``metaprov validate --engine sparql`` goes.

Input: sizes N (tasks) of the synthetic reference workload (cached in ``benchmarks/_data`` like
``bench_export.py``), exported to N-Triples once per N. Output: one line per step on stderr
(wall and CPU seconds) and ``benchmarks/results/validate-<timestamp>.json``.

The steps are those of :func:`metaprov.validate.validate` with the SPARQL engine, timed one by
one in this process: the bulk load into an on-disk Oxigraph store, the two inference updates
(the ontology's class and property hierarchy), every shape query and every PROV-CONSTRAINTS
query. The verdict is the same as the command's (same store, same queries).

Example::

    python benchmarks/bench_validate.py --n 100000
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_export import DATA, RESULTS, ensure_run  # noqa: E402


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def measure(nt: Path) -> list[dict[str, Any]]:
    import pyoxigraph as ox

    from metaprov.validate import PROV_CHECKS, SPARQL_CHECKS, _run_sparql, constraints

    rows: list[dict[str, Any]] = []

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
                timed(name, kind, lambda c=check, s=store: _run_sparql(s, [c]))
        del store
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: python benchmarks/bench_validate.py --n 100000",
    )
    ap.add_argument("--n", type=int, nargs="+", default=[100_000], help="task counts")
    args = ap.parse_args(argv)
    import metaprov

    work = DATA / "validate-work"
    work.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out: list[dict[str, Any]] = []
    for n in args.n:
        nt = work / f"run-{n}.nt"
        w = time.perf_counter()
        metaprov.write(metaprov.to_prov(metaprov.read_run(ensure_run(n), darshan=False)), nt)
        print(f"N={n:,}: exported in {time.perf_counter() - w:.1f} s", file=sys.stderr)
        try:
            rows = measure(nt)
        finally:
            nt.unlink()
        total = {k: sum(r[k] for r in rows) for k in ("wall", "cpu")}
        print(
            f"N={n:,}: validate steps {total['wall']:.1f} s wall, {total['cpu']:.1f} s CPU, "
            f"load average {os.getloadavg()[0]:.1f}",
            file=sys.stderr,
        )
        out.append({"n": n, "steps": rows, "total": total, "loadavg": os.getloadavg()[0]})
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"validate-{stamp}.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
