"""Benchmark harness: wall time, peak RSS and throughput of each metaprov stage on synthetic runs.

Input: sizes N (tasks), stages, repeats. Output: a markdown table on stdout and a JSON file in
``benchmarks/results/`` (both gitignored, like the generated runs in ``benchmarks/_data/``).

For each N the reference workload (``metaprov.synthetic``) is generated once and cached; then each
stage runs in a FRESH child process per repeat, so its peak RSS is its own (read with ``os.wait4``,
which returns the rusage of exactly that child). This parent imports nothing but the standard
library: a large parent would leak its own size into the children's ``ru_maxrss`` on Linux.

Stages (a stage whose library function does not exist yet is reported "not available"):

========== ==================================================================================
generate   ``metaprov.synthetic.generate_run`` (into a scratch directory)
read       ``metaprov.read_run(path, darshan=False)``; baseline ``read-naive``: per-row pandas
           ``iloc`` consolidation (``benchmarks/naive.py``), capped, extrapolated linearly above
export     ``metaprov.write(metaprov.to_prov(read_run(...)), out.<fmt>)`` end to end, per
           ``--formats``; baseline ``export-naive``: rdflib ``Graph.parse`` of the N-Triples export,
           then ``serialize``, capped like the read baseline
load       embedded store load of the N-Triples export (``metaprov.load``)
query      each packaged SPARQL question on that store (``metaprov.query``)
darshan    ``benchmarks/bench_darshan.py --n N --json OUT`` (parse + link DXT segments)
========== ==================================================================================

Example::

    python benchmarks/run.py --n 10000 100000 1000000 --stages read --repeat 3
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "_data"
RESULTS = HERE / "results"

STAGES = ("generate", "read", "export", "load", "query", "darshan")
DEFAULT_STAGES = ("read", "export", "load", "query", "darshan")
FORMATS = ("nt", "ttl", "jsonld", "nq")
# rdflib serialiser names for the export baseline (N-Quads needs a dataset: no baseline there).
RDFLIB_FORMATS = {"nt": "nt", "ttl": "turtle", "jsonld": "json-ld"}
RESULT_TAG = "BENCH-RESULT "


# ------------------------------------------------------------------------------------------
# Child side: one stage, one measurement, one JSON line on stdout
# ------------------------------------------------------------------------------------------


def _not_available(reason: str) -> dict[str, Any]:
    return {"status": "not available", "reason": reason}


def _truth(run: Path) -> dict[str, Any]:
    return json.loads((run / "truth.json").read_text())


def _rss_now_mb() -> float:
    """Current resident set size of this process (Linux), in MB."""
    try:
        return (
            int(Path("/proc/self/statm").read_text().split()[1])
            * os.sysconf("SC_PAGE_SIZE")
            / 2**20
        )
    except (OSError, ValueError):
        return 0.0


def _child(stage: str, run: Path, work: Path, arg: str, n: int) -> dict[str, Any]:
    """Run one stage; ``arg`` is its argument (export format, or question name for ``query``)."""
    fmt = arg
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(HERE))
    if stage == "generate":
        from metaprov.synthetic import generate_run

        target = work / "generated"
        t0 = time.perf_counter()
        generate_run(target, n, seed=0)
        wall = time.perf_counter() - t0
        truth = _truth(target)
        size = sum(truth["bytes"].values())
        return {"wall": wall, "rows": truth["rows_total"], "bytes": size}

    if stage == "read-naive":
        import naive

        before = _rss_now_mb()
        t0 = time.perf_counter()
        out = naive.consolidate(run)
        wall = time.perf_counter() - t0
        return {
            "wall": wall,
            "rows": out["rows"],
            "tasks": len(out["tasks"]),
            "rss_before_mb": before,
        }

    if stage == "export-naive":
        import naive

        nt = work / "export.nt"
        if not nt.exists():
            return _not_available(
                "needs the N-Triples export of this run (stage export, format nt)"
            )
        import rdflib  # noqa: F401 - imported before the RSS floor is taken

        before = _rss_now_mb()
        t0 = time.perf_counter()
        triples = naive.rdflib_export(nt, work / f"naive.{fmt}", RDFLIB_FORMATS[fmt])
        return {"wall": time.perf_counter() - t0, "triples": triples, "rss_before_mb": before}

    if stage in ("darshan", "darshan-build"):
        # bench_darshan.py (another module's benchmark) provides build(...) and run_one(dir).
        if not (HERE / "bench_darshan.py").exists():
            return _not_available("benchmarks/bench_darshan.py does not exist yet")
        import bench_darshan

        build, run_one = (
            getattr(bench_darshan, "build", None),
            getattr(bench_darshan, "run_one", None),
        )
        if build is None or run_one is None:
            return _not_available("bench_darshan.py has no build()/run_one() to call")
        logs = work / "darshan"
        marker = logs / "built.json"
        if stage == "darshan-build":
            # Untimed: one log per worker process (96-byte DXT layout, as in the real runs).
            if not (marker.exists() and json.loads(marker.read_text()).get("n") == n):
                shutil.rmtree(logs, ignore_errors=True)
                logs.mkdir(parents=True)
                build(logs, n, 96, 8, 8, 2000, 96)
                marker.write_text(json.dumps({"n": n}))
            return {"wall": 0.0}
        out = run_one(logs)
        return {
            "wall": float(out["total_s"]),
            "rows": int(out["segments"]),
            "unit": "segments/s",
            "extra": out,
        }

    try:
        import metaprov
    except ImportError as exc:
        return _not_available(f"import metaprov failed: {exc}")

    def lib(name: str) -> Any:
        try:
            return getattr(metaprov, name)
        except (AttributeError, ImportError) as exc:
            raise _Unavailable(f"metaprov.{name}: {exc}") from exc

    try:
        if stage == "read":
            read_run = lib("read_run")
            t0 = time.perf_counter()
            records = read_run(run, darshan=False, progress=False)
            wall = time.perf_counter() - t0
            truth = _truth(run)
            check = {
                "tasks": (len(records.tasks), truth["tasks"]),
                "dependencies": (len(records.dependencies), truth["edges"]),
                "transfers": (len(records.transfers), truth["transfers"]),
                "executions": (len(records.executions), truth["executions"]),
            }
            bad = {k: v for k, v in check.items() if v[0] != v[1]}
            return {
                "wall": wall,
                "rows": truth["rows_total"],
                "check": "ok" if not bad else f"MISMATCH {bad}",
            }

        if stage == "export":
            read_run, to_prov, write = lib("read_run"), lib("to_prov"), lib("write")
            out = work / f"export.{fmt}"
            t0 = time.perf_counter()
            records = read_run(run, darshan=False, progress=False)
            t1 = time.perf_counter()
            triples = write(to_prov(records), out)
            t2 = time.perf_counter()
            return {
                "wall": t2 - t0,
                "triples": int(triples),
                "extra": {"read_s": t1 - t0, "map_write_s": t2 - t1, "bytes": out.stat().st_size},
            }

        if stage == "load":
            load = lib("load")
            nt = work / "export.nt"
            if not nt.exists():
                return _not_available(
                    "needs the N-Triples export of this run (stage export, format nt)"
                )
            store = work / "store"
            shutil.rmtree(store, ignore_errors=True)
            t0 = time.perf_counter()
            reports = load(nt, store=store)
            wall = time.perf_counter() - t0
            triples = sum(int(getattr(r, "triples", 0)) for r in reports)
            return {"wall": wall, "triples": triples or _count(None, nt)}

        if stage == "query-list":
            # The packaged questions, with values for their required parameters from the run.
            lib("query")
            try:
                from metaprov.queries import questions
            except ImportError as exc:
                return _not_available(f"metaprov.queries.questions: {exc}")
            samples = _param_samples(run)
            todo: dict[str, dict[str, Any]] = {}
            skipped: dict[str, str] = {}
            for q in questions():
                missing = [p.name for p in q.params if p.required and p.name not in samples]
                if missing:
                    skipped[q.name] = f"needs a value for {', '.join(missing)}"
                else:
                    todo[q.name] = {p.name: samples[p.name] for p in q.params if p.required}
                    if q.name == "downstream" and "key" in todo[q.name]:
                        # Downstream of the last task is empty: ask about the first one instead.
                        todo[q.name]["key"] = samples["first_key"]
            return {"wall": 0.0, "extra": {"questions": todo, "skipped": skipped}}

        if stage == "query":
            query = lib("query")
            store = work / "store"
            if not store.exists():
                return _not_available("needs the store of this run (stage load)")
            name, _, raw = arg.partition("?")
            params = json.loads(raw) if raw else {}
            t0 = time.perf_counter()
            res = query(name, params, store=store)
            wall = time.perf_counter() - t0
            return {
                "wall": wall,
                "extra": {"result_rows": res if isinstance(res, bool) else _count(res, None)},
            }
    except _Unavailable as exc:
        return _not_available(str(exc))
    except TypeError as exc:
        # The library function exists but with another signature than this harness expects.
        return _not_available(f"API mismatch: {exc}")
    raise SystemExit(f"unknown stage {stage!r}")


class _Unavailable(Exception):
    pass


def _count(value: Any, nt: Path | None) -> int | None:
    if isinstance(value, int):
        return value
    try:
        return len(value)
    except TypeError:
        pass
    if nt is not None:
        with open(nt, "rb") as fh:
            return sum(1 for _ in fh)
    return None


def _param_samples(run: Path) -> dict[str, Any]:
    """Values for required question parameters, taken from the run itself.

    ``key`` is the last task to finish (the deepest lineage), ``first_key`` the first task
    submitted (the largest downstream); ``prefix`` and ``worker`` those of ``key``.
    """
    import csv

    path = run / "scheduler_transition.csv"
    if not path.exists():
        return {}
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - 65536))
        tail = fh.read().decode("utf-8", "replace").splitlines()[1:]
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        first = next((dict(zip(header, r, strict=False)) for r in reader), {})
    for row in reversed(list(csv.reader(tail))):
        rec = dict(zip(header, row, strict=False))
        if rec.get("finish") == "memory":
            return {
                "key": rec["key"],
                "first_key": first.get("key", rec["key"]),
                "prefix": rec["prefix"],
                "worker": rec["worker"],
            }
    return {}


def _child_main(args: argparse.Namespace) -> int:
    try:
        result = _child(args.child, Path(args.run), Path(args.work), args.arg, args.n[0])
        result.setdefault("status", "ok")
    except Exception as exc:  # a failing stage is a result, not a crash of the harness
        result = {
            "status": "failed",
            "reason": f"{type(exc).__name__}: {exc}",
            "trace": traceback.format_exc(),
        }
    import resource

    result["self_maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(RESULT_TAG + json.dumps(result, default=str), flush=True)
    return 0


# ------------------------------------------------------------------------------------------
# Parent side
# ------------------------------------------------------------------------------------------


def _spawn(stage: str, run: Path, work: Path, n: int, fmt: str, timeout: float) -> dict[str, Any]:
    """Run one stage in a fresh interpreter; return its result with wall time and peak RSS."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", stage, "--run", str(run)]
    cmd += ["--work", str(work), "--arg", fmt, "--n", str(n)]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=str(REPO))
        deadline = t0 + timeout
        status, usage = 0, None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = -9
                return {"status": "timeout", "reason": f"> {timeout:.0f} s"}
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        process_wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        lines = [ln for ln in out.read().splitlines() if ln.startswith(RESULT_TAG)]
        if not lines:
            return {
                "status": "failed",
                "reason": f"exit {proc.returncode}: {err.read().strip()[-800:]}",
            }
        result: dict[str, Any] = json.loads(lines[-1][len(RESULT_TAG) :])
    result["process_wall"] = process_wall
    # ru_maxrss is in KiB on Linux; this is exactly this child's peak.
    result["peak_rss_mb"] = usage.ru_maxrss / 1024 if usage else None
    return result


def _ensure_run(n: int, seed: int, timeout: float) -> Path:
    """The cached run for N (generated in a child process when missing or stale)."""
    run = DATA / f"run-{n}-s{seed}"
    truth = run / "truth.json"
    if truth.exists():
        params = json.loads(truth.read_text()).get("params", {})
        if params.get("n_tasks") == n and params.get("seed") == seed:
            return run
    print(f"[generate] N={n:,} -> {run}", file=sys.stderr, flush=True)
    DATA.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "generate.py"),
            "--n",
            str(n),
            "--seed",
            str(seed),
            "-o",
            str(run),
        ],
        cwd=str(REPO),
        timeout=timeout,
        stdout=subprocess.DEVNULL,  # the table owns stdout; the summary line goes to stderr
    )
    if proc.returncode != 0:
        raise SystemExit(f"generating N={n} failed (exit {proc.returncode})")
    return run


def _measure(
    label: str, stage: str, n: int, run: Path, work: Path, fmt: str, repeat: int, timeout: float
) -> dict[str, Any]:
    walls: list[float] = []
    rss: list[float] = []
    last: dict[str, Any] = {}
    for i in range(repeat):
        res = _spawn(stage, run, work, n, fmt, timeout)
        last = res
        if res.get("status") != "ok":
            break
        walls.append(float(res["wall"]))
        if res.get("peak_rss_mb") is not None:
            rss.append(float(res["peak_rss_mb"]))
        print(
            f"  {label:<18} N={n:>9,} run {i + 1}/{repeat}: {res['wall']:8.2f} s, "
            f"{res.get('peak_rss_mb', 0):7.0f} MB",
            file=sys.stderr,
            flush=True,
        )
    entry: dict[str, Any] = {"n": n, "stage": label, "status": last.get("status", "failed")}
    # The machine is shared: keep the load next to each figure.
    entry["loadavg_1min"] = os.getloadavg()[0]
    if entry["status"] != "ok":
        entry["reason"] = last.get("reason", "")
        print(
            f"  {label:<18} N={n:>9,}: {entry['status']}: {entry['reason']}",
            file=sys.stderr,
            flush=True,
        )
        if last.get("trace"):
            print(last["trace"], file=sys.stderr)
        return entry
    entry["walls"] = walls
    entry["wall"] = statistics.median(walls)
    entry["peak_rss_mb"] = max(rss) if rss else None
    for k in ("rows", "triples", "check", "extra", "bytes", "tasks", "rss_before_mb"):
        if k in last:
            entry[k] = last[k]
    if entry.get("triples"):
        entry["throughput"] = entry["triples"] / entry["wall"]
        entry["unit"] = "triples/s"
    elif entry.get("rows"):
        entry["throughput"] = entry["rows"] / entry["wall"]
        entry["unit"] = last.get("unit", "rows/s")
    return entry


def _extrapolate(base: dict[str, Any], n: int) -> dict[str, Any]:
    """Scale a baseline measured at a smaller N linearly to N.

    Time scales with N; memory as the interpreter-and-imports floor (RSS just before the timed
    call) plus the growth above it times N / N_measured.
    """
    f = n / base["n"]
    e = dict(base, n=n, wall=base["wall"] * f, walls=[], extrapolated_from=base["n"])
    if base.get("peak_rss_mb") is not None:
        floor = min(float(base.get("rss_before_mb") or 0.0), base["peak_rss_mb"])
        e["peak_rss_mb"] = floor + (base["peak_rss_mb"] - floor) * f
    for k in ("rows", "triples"):
        if base.get(k):
            e[k] = int(base[k] * f)
    return e


def _fmt_row(e: dict[str, Any]) -> str:
    if e.get("status") != "ok":
        return f"| {e['n']:,} | {e['stage']} | — | — | — | {e.get('status')}: {e.get('reason', '')[:80]} |"
    ex = "~" if "extrapolated_from" in e else ""
    wall = f"{ex}{e['wall']:.2f}"
    rss = f"{ex}{e['peak_rss_mb']:,.0f}" if e.get("peak_rss_mb") is not None else "—"
    thr = f"{ex}{e['throughput']:,.0f} {e['unit']}" if e.get("throughput") else "—"
    notes = []
    if ex:
        notes.append(f"extrapolated linearly from N={e['extrapolated_from']:,}")
    elif len(e.get("walls", [])) > 1:
        notes.append(f"median of {len(e['walls'])}")
    if e.get("check") and e["check"] != "ok":
        notes.append(str(e["check"]))
    extra = e.get("extra") or {}
    if "map_write_s" in extra:
        notes.append(f"read {extra['read_s']:.1f} s + map/write {extra['map_write_s']:.1f} s")
    if "result_rows" in extra:
        notes.append(f"{extra['result_rows']} result rows")
    if "per_query_s" in extra:
        slowest = max(extra["per_query_s"].items(), key=lambda kv: kv[1])
        notes.append(
            f"{len(extra['per_query_s'])} queries, slowest {slowest[0]} {slowest[1]:.2f} s"
        )
    if e.get("bytes"):
        notes.append(f"{e['bytes'] / 1e6:,.0f} MB written")
    return f"| {e['n']:,} | {e['stage']} | {wall} | {rss} | {thr} | {'; '.join(notes)} |"


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
    }
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_total_gb"] = int(line.split()[1]) / 1024**2
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        info["git"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with the hidden ``--child``, one stage measurement)."""
    ap = argparse.ArgumentParser(
        description="Benchmark metaprov stages on seeded synthetic runs.",
        epilog="example: python benchmarks/run.py --n 10000 100000 --stages read export --repeat 3",
    )
    ap.add_argument(
        "--n", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="task counts"
    )
    ap.add_argument("--stages", nargs="+", default=list(DEFAULT_STAGES), choices=STAGES)
    ap.add_argument("--formats", nargs="+", default=["nt"], choices=FORMATS, help="export formats")
    ap.add_argument("--repeat", type=int, default=3, help="runs per stage (the median is reported)")
    ap.add_argument(
        "--baseline-cap", type=int, default=100_000, help="largest N a baseline runs at"
    )
    ap.add_argument(
        "--slow-baseline-cap",
        type=int,
        default=10_000,
        help="cap for the rdflib Turtle/JSON-LD baselines",
    )
    ap.add_argument("--baseline-repeat", type=int, default=1, help="runs per baseline measurement")
    ap.add_argument("--no-baseline", action="store_true", help="skip the naive baselines")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per stage run")
    ap.add_argument("--query-timeout", type=float, default=600, help="seconds per question run")
    ap.add_argument("--json", type=Path, help="also write the results JSON here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--arg", "--format", dest="arg", default="nt", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child_main(args)

    started = _dt.datetime.now(_dt.timezone.utc)
    results: list[dict[str, Any]] = []
    baselines: dict[tuple[str, str], dict[str, Any]] = {}
    stages = [s for s in STAGES if s in args.stages]

    def baseline(label: str, stage: str, n: int, fmt: str, run: Path, work: Path) -> dict[str, Any]:
        """Measure a baseline at N up to its cap; above it, extrapolate from the cap."""
        cap = args.baseline_cap
        if label in ("export-naive-ttl", "export-naive-jsonld"):
            # rdflib's Turtle/JSON-LD serialisers run at 1-20 k triples/s: 10^5 tasks = 30+ min.
            cap = min(cap, args.slow_baseline_cap)
        key = (label, fmt)
        if n <= cap:
            e = _measure(label, stage, n, run, work, fmt, args.baseline_repeat, args.timeout)
            if e.get("status") == "ok" and (key not in baselines or baselines[key]["n"] < n):
                baselines[key] = e
            return e
        if key not in baselines or baselines[key]["n"] != cap:
            cap_run = _ensure_run(cap, args.seed, args.timeout)
            cap_work = DATA / f"work-{cap}-s{args.seed}"
            cap_work.mkdir(parents=True, exist_ok=True)
            if stage == "export-naive" and not (cap_work / "export.nt").exists():
                _measure("export-nt", "export", cap, cap_run, cap_work, "nt", 1, args.timeout)
            baselines[key] = _measure(
                label, stage, cap, cap_run, cap_work, fmt, args.baseline_repeat, args.timeout
            )
        base = baselines[key]
        return _extrapolate(base, n) if base.get("status") == "ok" else dict(base, n=n)

    # N-Triples first: the store load and the rdflib baselines read that file.
    needs_nt = bool({"load", "query"} & set(stages)) or not args.no_baseline
    export_formats = [f for f in FORMATS if f in args.formats or (f == "nt" and needs_nt)]

    def _export(n: int, run: Path, work: Path, fmt: str) -> dict[str, Any]:
        return _measure(f"export-{fmt}", "export", n, run, work, fmt, args.repeat, args.timeout)

    for n in args.n:
        run = _ensure_run(n, args.seed, args.timeout)
        work = DATA / f"work-{n}-s{args.seed}"
        work.mkdir(parents=True, exist_ok=True)
        if {"load", "query"} & set(stages) and "export" not in stages:
            # The store is loaded from this run's N-Triples export: make it once, and show it.
            results.append(_measure("export-nt", "export", n, run, work, "nt", 1, args.timeout))
        for stage in stages:
            if stage == "generate":
                results.append(
                    _measure("generate", "generate", n, run, work, "nt", args.repeat, args.timeout)
                )
                shutil.rmtree(work / "generated", ignore_errors=True)
            elif stage == "read":
                results.append(
                    _measure("read", "read", n, run, work, "nt", args.repeat, args.timeout)
                )
                if not args.no_baseline:
                    results.append(baseline("read-naive", "read-naive", n, "nt", run, work))
            elif stage == "export":
                for fmt in export_formats:
                    results.append(_export(n, run, work, fmt))
                    if not args.no_baseline and fmt in RDFLIB_FORMATS and fmt in args.formats:
                        label = f"export-naive-{fmt}"
                        results.append(baseline(label, "export-naive", n, fmt, run, work))
            elif stage == "load":
                results.append(
                    _measure("load", "load", n, run, work, "nt", args.repeat, args.timeout)
                )
            elif stage == "query":
                # One fresh process per question: its own time, memory and timeout.
                listing = _spawn("query-list", run, work, n, "", args.timeout)
                if listing.get("status") != "ok":
                    results.append({**listing, "n": n, "stage": "query"})
                    continue
                for name, why in listing["extra"]["skipped"].items():
                    results.append(
                        {"n": n, "stage": f"query {name}", "status": "skipped", "reason": why}
                    )
                for name, params in listing["extra"]["questions"].items():
                    qarg = name + ("?" + json.dumps(params) if params else "")
                    results.append(
                        _measure(
                            f"query {name}",
                            "query",
                            n,
                            run,
                            work,
                            qarg,
                            args.repeat,
                            args.query_timeout,
                        )
                    )
            elif stage == "darshan":
                # Untimed preparation (the logs and executions), then the timed parse + link.
                prep = _spawn("darshan-build", run, work, n, "nt", args.timeout)
                if prep.get("status") != "ok":
                    results.append({**prep, "n": n, "stage": "darshan"})
                else:
                    results.append(
                        _measure(
                            "darshan", "darshan", n, run, work, "nt", args.repeat, args.timeout
                        )
                    )

    machine = _machine()
    lines = [
        f"metaprov benchmarks, {started:%Y-%m-%d %H:%M} UTC, {machine.get('cpus')} CPUs, "
        f"{machine.get('cpu', '?')}, git {machine.get('git', '?')}",
        "",
        "| N tasks | stage | wall s | peak RSS MB | throughput | notes |",
        "|---:|---|---:|---:|---:|---|",
        *(_fmt_row(e) for e in results),
    ]
    print("\n".join(lines))
    payload = {
        "started": started.isoformat(),
        "machine": machine,
        "args": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in ("child", "run", "work", "arg")
        },
        "results": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"bench-{started:%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"\nresults: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
