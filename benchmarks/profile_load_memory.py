"""Where does ``metaprov load`` hold its memory? Resident memory over time, phase by phase.

Runs ``metaprov load RUN --store DIR`` in this process (the CLI's own entry point) with a thread
that reads ``VmRSS`` from ``/proc/self/status`` every 0.2 s, and marks the phases by wrapping the
functions the load calls (fingerprint, read, link, map, write the staging file, critical path,
release, bulk load). Prints, per phase, its wall seconds, the resident memory at its start and
end and its maximum; then the process's high-water mark (``VmHWM``) and CPU seconds. Linux only.

    python benchmarks/profile_load_memory.py RUN --store DIR [--json OUT.json]

(The samples are the process's resident set: Python objects, Arrow's pool, Oxigraph's RocksDB
and bulk-loader buffers alike.) Used for issue 29: see docs/benchmarks.md, "Load memory at 10^6
tasks".
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_phase = ["start"]
_samples: list[tuple[float, int, str]] = []
_cpu: dict[str, float] = {}  # CPU seconds of the process spent in each phase
_marks: list[tuple[float, str]] = []
_T0 = time.perf_counter()


def _status(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024  # MB
    return -1


def _sampler(stop: threading.Event) -> None:
    while not stop.wait(0.2):
        _samples.append((time.perf_counter() - _T0, _status("VmRSS"), _phase[-1]))


def _cpu_now() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


_last_cpu = [0.0]


def _account() -> None:
    """Charge the CPU since the last phase change to the phase that was running."""
    now = _cpu_now()
    _cpu[_phase[-1]] = _cpu.get(_phase[-1], 0.0) + now - _last_cpu[0]
    _last_cpu[0] = now


def _enter(name: str) -> None:
    _account()
    _phase.append(name)
    _marks.append((time.perf_counter() - _T0, name))
    _samples.append((time.perf_counter() - _T0, _status("VmRSS"), name))


def _leave(name: str, back: str) -> None:
    _samples.append((time.perf_counter() - _T0, _status("VmRSS"), name))
    _account()
    _phase.append(back)
    _marks.append((time.perf_counter() - _T0, back))


def _wrap(module: Any, attr: str, name: str, *, generator: bool = False) -> None:
    """Mark ``name`` while ``module.attr`` runs (or while a generator it returns is consumed)."""
    fn = getattr(module, attr, None)
    if fn is None:
        return

    if generator:

        @functools.wraps(fn)
        def gen(*a: Any, **k: Any) -> Any:
            back = _phase[-1]
            _enter(name)
            try:
                yield from fn(*a, **k)
            finally:
                _leave(name, back)

        setattr(module, attr, gen)
        return

    @functools.wraps(fn)
    def call(*a: Any, **k: Any) -> Any:
        back = _phase[-1]
        _enter(name)
        try:
            return fn(*a, **k)
        finally:
            _leave(name, back)

    setattr(module, attr, call)


def _instrument() -> None:
    import metaprov.analysis.critical_path as cp
    import metaprov.ingest as ingest
    import metaprov.mapping as mapping
    import metaprov.store.base as base
    import metaprov.store.embedded as embedded
    import metaprov.write as write

    _wrap(base, "run_fingerprint", "fingerprint")
    _wrap(ingest, "read_run", "read")
    _wrap(base, "_maybe_link", "link")
    _wrap(mapping, "to_prov", "map (to_prov)")
    _wrap(write, "iter_ntriples", "write staging file", generator=True)
    _wrap(embedded, "iter_ntriples", "write staging file", generator=True)
    _wrap(embedded.EmbeddedStore, "_stage_parts", "write staging files")
    _wrap(cp, "path_summary", "critical path")
    _wrap(embedded, "path_summary", "critical path")
    _wrap(embedded, "_release_memory", "release")
    mapping._ensure_builtin_steps()  # each mapping step (run in the mapping's own thread)
    for entry in mapping._STEPS:
        holder = type("H", (), {"f": staticmethod(entry.func)})
        _wrap(holder, "f", f"  step {entry.name}", generator=True)
        entry.func = holder.f
    # the bulk load is a Rust call: it runs from the drop before it to the catalog entry after it
    original_drop: Callable[..., Any] = embedded.EmbeddedStore.drop
    original_remember: Callable[..., Any] = embedded.EmbeddedStore._remember

    def drop(self: Any, graph: str) -> bool:
        out = original_drop(self, graph)
        if _phase[-1] not in ("bulk load",):
            _enter("bulk load")
        return out

    def remember(self: Any, report: Any, **facts: Any) -> None:
        if _phase[-1] == "bulk load":
            _leave("bulk load", "catalog")
        original_remember(self, report, **facts)

    embedded.EmbeddedStore.drop = drop  # type: ignore[method-assign]
    embedded.EmbeddedStore._remember = remember  # type: ignore[method-assign]


def _summary() -> list[dict[str, Any]]:
    """One row per consecutive stretch of a phase: seconds, RSS at start/end, max RSS."""
    rows: list[dict[str, Any]] = []
    for t, rss, phase in _samples:
        if rows and rows[-1]["phase"] == phase:
            r = rows[-1]
            r["end_s"], r["rss_end_mb"] = t, rss
            r["rss_max_mb"] = max(r["rss_max_mb"], rss)
        else:
            rows.append(
                {
                    "phase": phase,
                    "start_s": t,
                    "end_s": t,
                    "rss_start_mb": rss,
                    "rss_end_mb": rss,
                    "rss_max_mb": rss,
                }
            )
    merged: list[dict[str, Any]] = []
    for r in rows:  # short returns to an outer phase between two inner ones are noise
        if merged and merged[-1]["phase"] == r["phase"]:
            m = merged[-1]
            m["end_s"], m["rss_end_mb"] = r["end_s"], r["rss_end_mb"]
            m["rss_max_mb"] = max(m["rss_max_mb"], r["rss_max_mb"])
        else:
            merged.append(r)
    return merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a run directory")
    ap.add_argument("--store", required=True, help="the store directory (new)")
    ap.add_argument("--json", default=None, help="write the samples and the summary here")
    ap.add_argument(
        "--part-mib", type=int, default=None, help="staging part size (default: the store's)"
    )
    args = ap.parse_args(argv)
    if args.part_mib:
        import metaprov.store.embedded as embedded

        embedded.LOAD_PART_BYTES = args.part_mib * 1024 * 1024
    stop = threading.Event()
    thread = threading.Thread(target=_sampler, args=(stop,), daemon=True)
    thread.start()
    _instrument()
    from metaprov.cli import main as cli

    try:
        cli(["load", "-q", args.run, "--store", args.store])
        code = 0
    except SystemExit as exc:  # click ends with sys.exit
        code = exc.code
    stop.set()
    thread.join()
    _samples.append((time.perf_counter() - _T0, _status("VmRSS"), "end"))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    hwm = _status("VmHWM")
    rows = _summary()
    _account()
    print(f"{'phase':<22}{'start s':>9}{'wall s':>9}{'RSS start':>11}{'RSS end':>9}{'RSS max':>9}")
    for r in rows:
        print(
            f"{r['phase']:<22}{r['start_s']:>9.1f}{r['end_s'] - r['start_s']:>9.1f}"
            f"{r['rss_start_mb']:>11,}{r['rss_end_mb']:>9,}{r['rss_max_mb']:>9,}"
        )
    print("CPU s by phase:", {k: round(v, 1) for k, v in _cpu.items()})
    total = {
        "exit": code,
        "wall_s": round(time.perf_counter() - _T0, 1),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
        "peak_rss_mb": hwm,
    }
    print(json.dumps(total))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"total": total, "phases": rows, "cpu": _cpu, "samples": _samples}, fh)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
