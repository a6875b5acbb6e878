"""Questions answered straight from a run directory (issue 38), side by side with a store.

Input: a finished run directory (``benchmarks/generate.py``). Output: per question, the wall
time and peak memory of ``metaprov query QUESTION RUN_DIR`` in a child process: cold (an empty
cache: the run's CSV files are read) and second (another question after it, on the kept
records); with ``--equal``, every parameterless question answered from the run directory
compared with the answer of an in-memory store holding the whole run (sorted CSV rows and the
exact bytes).

Example::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_query_runs.py \\
        --run benchmarks/_data/run-1e6 --questions critical-path failures thread-utilisation
    python benchmarks/bench_query_runs.py --run benchmarks/_data/run-1e5 --equal
    flock /tmp/metaprov-bench.lock python benchmarks/bench_query_runs.py \\
        --run benchmarks/_data/run-1e6 --store /tmp/store-1e6   # load + the same questions
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def ask(
    question: str, run: Path, cache: Path, engine: str = "auto"
) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak RSS in GB, exit code) of ``metaprov query QUESTION RUN
    -f csv`` in a child process (its own CPU time and peak, read from wait4). On a shared
    machine the CPU time is the steadier figure: the wall time of an idle 2-core machine is
    about the CPU time (the reading and mapping are mostly one thread)."""
    cmd = ["query", question, str(run), "-f", "csv", "--engine", engine]
    return child(cmd, question, METAPROV_CACHE=str(cache))


def child(args: list[str], what: str, **env: str) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak RSS in GB, exit code) of ``metaprov -q ARGS``."""
    cmd = [sys.executable, "-m", "metaprov", "-q", *args]
    env = dict(os.environ, **env)
    question = what
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode:
        print(f"  {question}: exit {proc.returncode}: {err.strip()[:300]}", flush=True)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024**2, proc.returncode


def timings(run: Path, names: list[str], second: str, engine: str) -> None:
    """Each question cold (a fresh cache), then ``second`` on the cache it left."""
    print(f"run {run}, engine {engine}, load {os.getloadavg()}", flush=True)
    print(
        f"| question | cold: wall / CPU (s) | cold peak (GB) | then `{second}`: wall / CPU (s) "
        "| its peak (GB) | load average after |"
    )
    print("|---|---|---|---|---|---|")
    for name in names:
        cache = Path(tempfile.mkdtemp(prefix="metaprov-bench-cache-"))
        try:
            wall, cpu, peak, _ = ask(name, run, cache, engine)
            wall2, cpu2, peak2, _ = ask(second, run, cache, engine)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        print(
            f"| {name} | {wall:.1f} / {cpu:.1f} | {peak:.2f} | {wall2:.1f} / {cpu2:.1f} "
            f"| {peak2:.2f} | {_load()} |",
            flush=True,
        )
    print(f"load after: {os.getloadavg()}", flush=True)


def _load() -> str:
    """The 1-minute load average now."""
    return f"{os.getloadavg()[0]:.1f}"


def in_store(run: Path, store: Path, names: list[str]) -> None:
    """``metaprov load RUN --store STORE`` (a new store), then each question of the store."""
    print(f"run {run} into {store}, load {os.getloadavg()}", flush=True)
    print("| step | wall / CPU (s) | peak (GB) | load average after |")
    print("|---|---|---|---|")
    if store.exists():
        shutil.rmtree(store)
    wall, cpu, peak, _ = child(["load", str(run), "--store", str(store)], "load")
    print(f"| `metaprov load` | {wall:.1f} / {cpu:.1f} | {peak:.2f} | {_load()} |", flush=True)
    for name in names:
        wall, cpu, peak, _ = child(["query", name, "--store", str(store), "-f", "csv"], name)
        print(f"| `{name}` | {wall:.2f} / {cpu:.2f} | {peak:.2f} | {_load()} |", flush=True)


def equal(run: Path) -> int:
    """Every parameterless question from the run directory against a store holding the run."""
    from metaprov.queries import format_result, questions, run_question
    from metaprov.queries.direct import FORMS
    from metaprov.queries.fromruns import Timing, query_runs
    from metaprov.store import EmbeddedStore

    store = EmbeddedStore(None)
    t0 = time.perf_counter()
    store.load_run(run)
    print(f"whole run in an in-memory store: {time.perf_counter() - t0:.1f} s", flush=True)
    cache = Path(tempfile.mkdtemp(prefix="metaprov-bench-cache-"))
    bad = 0
    print(
        "| question | engine | rows | store (s) | run dir: read / load / answer (s) | sorted rows | bytes |"
    )
    print("|---|---|---|---|---|---|---|")
    try:
        for q in questions():
            if any(p.required for p in q.params):
                continue
            t0 = time.perf_counter()
            want = run_question(store, q.name, {})
            t_store = time.perf_counter() - t0
            for engine in ("store", "auto") if q.name in FORMS else ("store",):
                timing = Timing()
                got = query_runs(q.name, [run], engine=engine, cache=cache, timing=timing)
                a, b = format_result(want, "csv"), format_result(got, "csv")
                rows_same = sorted(a.splitlines()) == sorted(b.splitlines())
                same = a == b and format_result(want, "json") == format_result(got, "json")
                bad += not (same and rows_same)
                n = len(want) if not isinstance(want, bool) else want
                print(
                    f"| {q.name} | {timing.engine} | {n} | {t_store:.2f} | {timing.read:.1f} / "
                    f"{timing.load:.1f} / {timing.answer:.2f} | {'=' if rows_same else 'DIFFER'} "
                    f"| {'=' if same else 'DIFFER'} |",
                    flush=True,
                )
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"{bad} differ", flush=True)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    """Parse the options and run the measurements asked for."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished run directory")
    ap.add_argument(
        "--questions", nargs="+", default=["critical-path", "failures", "thread-utilisation"]
    )
    ap.add_argument("--second", default="worker-utilisation", help="the question asked second")
    ap.add_argument("--engine", default="auto", choices=["auto", "store", "direct"])
    ap.add_argument("--equal", action="store_true", help="compare every question with a store")
    ap.add_argument(
        "--store",
        type=Path,
        default=None,
        help="instead: metaprov load the run into this (new) store, then ask the questions of it",
    )
    args = ap.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if args.equal:
        return equal(args.run)
    if args.store is not None:
        in_store(args.run, args.store, [*args.questions, args.second])
        return 0
    timings(args.run, args.questions, args.second, args.engine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
