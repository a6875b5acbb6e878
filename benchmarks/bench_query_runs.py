"""Questions answered straight from a run directory (issue 38), side by side with a store.

Input: a finished run directory (``benchmarks/generate.py``). Output: per question, the wall
time to the answer (the first byte printed) and to the exit, the CPU time and peak memory of
``metaprov query QUESTION RUN_DIR`` in a child process: cold (an empty cache: the run's CSV
files are read) and second (another question after it, on the kept records); with
``--baseline SRC``, each question also asked of the metaprov source tree SRC (e.g. main's,
``git archive main | tar -x -C SRC``), side by side in the same run; with ``--equal``, every parameterless question answered from the run directory
compared with the answer of an in-memory store holding the whole run (sorted CSV rows and the
exact bytes).

Example::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_query_runs.py \\
        --run benchmarks/_data/run-1e6 --questions critical-path failures thread-utilisation \\
        --second worker-utilisation --baseline /tmp/metaprov-main
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
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass
class Run:
    """What one child process took: wall seconds to its answer (the first byte it printed)
    and to its exit, CPU seconds (user + system), peak RSS in GB, exit code."""

    answer: float
    wall: float
    cpu: float
    peak: float
    code: int


def ask(
    question: str, run: Path, cache: Path, engine: str = "auto", code: Path | None = None
) -> Run:
    """``metaprov query QUESTION RUN -f csv`` in a child process (its own CPU time and peak,
    read from wait4). On a shared machine the CPU time is the steadier figure: the wall time
    of an idle 2-core machine is about the CPU time (the reading and mapping are mostly one
    thread)."""
    cmd = ["query", question, str(run), "-f", "csv", "--engine", engine]
    return child(cmd, question, code, METAPROV_CACHE=str(cache))


REPO = Path(__file__).resolve().parents[1]


def child(args: list[str], what: str, code: Path | None = None, **env: str) -> Run:
    """``metaprov -q ARGS`` in a child process (the metaprov of source tree ``code``, default
    this one): when it printed its first byte, when it ended, its CPU time and peak memory."""
    cmd = [sys.executable, "-m", "metaprov", "-q", *args]
    tree = (code or REPO).resolve()
    env = dict(os.environ, **env, PYTHONPATH=str(tree))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first: list[float] = []
    err: list[bytes] = []

    def drain(stream: Any, into: list[Any], stamp: bool) -> None:
        while chunk := stream.read1(1 << 16):
            if stamp and not into:
                into.append(time.perf_counter() - t0)
            elif not stamp:
                into.append(chunk)

    readers = [
        threading.Thread(target=drain, args=(proc.stdout, first, True)),
        threading.Thread(target=drain, args=(proc.stderr, err, False)),
    ]
    for r in readers:
        r.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    for r in readers:
        r.join()
    code = os.waitstatus_to_exitcode(status)
    if code:
        text = b"".join(err).decode(errors="replace")
        print(f"  {what}: exit {code}: {text.strip()[:300]}", flush=True)
    answer = first[0] if first else wall
    return Run(answer, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024**2, code)


def timings(
    run: Path, names: list[str], second: str, engine: str, baseline: Path | None = None
) -> None:
    """Each question cold (a fresh cache), then ``second`` on the cache it left; with a
    ``baseline`` source tree, the baseline's first, then this tree's, question by question."""
    print(f"run {run}, engine {engine}, load {os.getloadavg()}", flush=True)
    print(
        "| question | code | cold: wall to answer / to exit, CPU (s) | cold peak (GB) "
        f"| then `{second}`: wall to answer / to exit, CPU (s) | its peak (GB) "
        "| load average after |"
    )
    print("|---|---|---|---|---|---|---|")
    trees: list[tuple[str, Path | None]] = [("this", None)]
    if baseline is not None:
        trees.insert(0, ("baseline", baseline))
    for name in names:
        for label, code in trees:
            cache = Path(tempfile.mkdtemp(prefix="metaprov-bench-cache-"))
            try:
                a = ask(name, run, cache, engine, code)
                b = ask(second, run, cache, engine, code)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            print(
                f"| {name} | {label} | {a.answer:.1f} / {a.wall:.1f}, {a.cpu:.1f} | {a.peak:.2f} "
                f"| {b.answer:.1f} / {b.wall:.1f}, {b.cpu:.1f} | {b.peak:.2f} | {_load()} |",
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
    r = child(["load", str(run), "--store", str(store)], "load")
    print(
        f"| `metaprov load` | {r.wall:.1f} / {r.cpu:.1f} | {r.peak:.2f} | {_load()} |", flush=True
    )
    for name in names:
        r = child(["query", name, "--store", str(store), "-f", "csv"], name)
        print(f"| `{name}` | {r.wall:.2f} / {r.cpu:.2f} | {r.peak:.2f} | {_load()} |", flush=True)


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
        "--baseline",
        type=Path,
        default=None,
        help="a metaprov source tree to time side by side (e.g. git archive main)",
    )
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
    timings(args.run, args.questions, args.second, args.engine, args.baseline)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
