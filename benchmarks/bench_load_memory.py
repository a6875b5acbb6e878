"""Peak memory and wall time of ``metaprov load`` beside Oxigraph's own bulk load of the same
triples (issue 29: a laptop user must be able to load a run of 10^6 tasks).

Each step runs in a fresh process, as a user runs it; its peak resident memory is the child's
``ru_maxrss``, its CPU the child's user + system seconds:

1. ``metaprov load RUN --store DIR`` (read, link, map, load, critical path);
2. ``metaprov export RUN -o RUN.nt`` (read, link, map, write: the export alone);
3. Oxigraph alone: ``pyoxigraph.Store(DIR).bulk_load(path=RUN.nt, to_graph=<the run's graph>)``.

Output: a table on stdout and ``benchmarks/results/bench_load_memory_<N>.json``. Run it under
the machine's benchmark lock, on a generated run::

    python benchmarks/generate.py --n 1000000 --seed 1 --erred-fraction 0.001 \\
        --retried-fraction 0.001 --io-fraction 0.1 -o benchmarks/_data/run-1e6
    flock /tmp/metaprov-bench.lock python benchmarks/bench_load_memory.py benchmarks/_data/run-1e6
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_OWN = """
import sys, pyoxigraph as ox
from metaprov.store import EmbeddedStore
st = ox.Store(sys.argv[1])
st.bulk_load(path=sys.argv[2], format=ox.RdfFormat.N_TRIPLES, to_graph=ox.NamedNode(sys.argv[3]))
st.flush()
"""


def child(cmd: list[str]) -> dict:
    """Run ``cmd``; wall, CPU and peak RSS of that child alone (``os.wait4`` gives the child's
    own rusage: ``RUSAGE_CHILDREN``'s ``ru_maxrss`` is the largest of all children so far)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # noqa: S603
    load_before = os.getloadavg()
    out_text, err_text = _drain(proc)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err_text[-2000:]}")
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "loadavg": [load_before, os.getloadavg()],
        "stdout": out_text.strip()[-2000:],
    }


def _drain(proc: subprocess.Popen) -> tuple[str, str]:
    """Read the child's output to its end without reaping it (``os.wait4`` reaps it)."""
    import threading

    err: list[str] = []
    t = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    t.start()
    out = proc.stdout.read()
    t.join()
    return out, err[0] if err else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run directory (benchmarks/generate.py)")
    ap.add_argument("--work", type=Path, default=None, help="scratch directory [a new temp dir]")
    ap.add_argument("--label", default="", help="a name for this measurement (e.g. the git rev)")
    ap.add_argument(
        "--load-only",
        action="store_true",
        help="measure metaprov load alone (export and Oxigraph's own load measured before)",
    )
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-load-", dir=args.work))
    metaprov = [sys.executable, "-m", "metaprov", "-q"]
    out: dict = {"run": str(args.run), "label": args.label, "loadavg_start": os.getloadavg()}
    try:
        # one step per fresh interpreter, so that each peak is that step's own
        steps = {
            "export": metaprov + ["export", str(args.run), "-o", str(work / "run.nt")],
            "load": metaprov + ["load", str(args.run), "--store", str(work / "store"), "--json"],
        }
        if args.load_only:
            del steps["export"]
        for name, cmd in steps.items():
            wrapped = [sys.executable, __file__, "--one", json.dumps(cmd)]
            out[name] = json.loads(
                subprocess.run(wrapped, capture_output=True, text=True, check=True).stdout
            )  # noqa: S603
            print(f"{name}: {out[name]}", flush=True)
        reports = json.loads(out["load"].pop("stdout"))
        graph, triples = reports[0]["graph"], reports[0]["triples"]
        out["triples"] = triples
        if args.load_only:
            return _table(out, args)
        own = [sys.executable, "-c", _OWN, str(work / "own"), str(work / "run.nt"), graph]
        wrapped = [sys.executable, __file__, "--one", json.dumps(own)]
        out["oxigraph_own"] = json.loads(
            subprocess.run(wrapped, capture_output=True, text=True, check=True).stdout
        )  # noqa: S603
        out["triples"] = triples
        print(f"oxigraph_own: {out['oxigraph_own']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _table(out, args)


def _table(out: dict, args: argparse.Namespace) -> int:
    out["loadavg_end"] = os.getloadavg()
    print(f"{'step':<14}{'wall s':>9}{'CPU s':>9}{'peak RSS MB':>13}")
    for name in ("export", "load", "oxigraph_own"):
        if name not in out:
            continue
        r = out[name]
        print(f"{name:<14}{r['wall_s']:>9}{r['cpu_s']:>9}{r['peak_rss_mb']:>13,}")
    print(
        f"triples {out['triples']:,}; load average {out['loadavg_start']} -> {out['loadavg_end']}"
    )
    target = (
        REPO
        / "benchmarks"
        / "results"
        / f"bench_load_memory_{args.run.name}{'_' + args.label if args.label else ''}.json"
    )
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        sys.exit(0)
    sys.exit(main())
