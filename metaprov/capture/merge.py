"""Merge the workers' part files of a capture into the single files of the Mofka schema.

Input: ``<run>/metaprov-parts/`` (``worker_transition.<part>.arrows``,
``worker_transfer.<part>.arrows``, ``worker_execution.<part>.arrows``, ... and
``worker_info.<part>.json``, one set per worker process; the ``.csv`` parts of older captures
too, read by :mod:`metaprov.ingest.parts`), and optionally the scheduler's view of the workers.
Output: ``<run>/worker_transition.csv``, ``worker_transfer.csv``, ``worker_execution.csv`` (rows of
all parts, stably sorted by ``time``, with the pandas index column) and ``workers_info.csv``. The
parts directory is removed once every part is closed; otherwise it stays and the merge can be
run again later (:func:`merge_parts` is idempotent: it always rebuilds from all parts).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from metaprov.capture._files import (
    OPTIONAL_WORKER_TABLES,
    PARTS_DIR,
    RUN_JSON,
    WORKER_TABLES,
    WORKERS_INFO,
    write_json_atomic,
)
from metaprov.errors import InputError
from metaprov.ingest.parts import part_files, read_part, write_merged

log = logging.getLogger("metaprov.capture")


def read_part_infos(parts: Path) -> list[dict[str, Any]]:
    """The ``worker_info.<part>.json`` records of a parts directory (unreadable ones skipped)."""
    infos = []
    if not parts.is_dir():
        return infos
    for p in sorted(parts.glob("worker_info.*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            log.warning("metaprov capture: unreadable part info %s", p)
            continue
        if isinstance(data, dict) and data.get("worker"):
            infos.append(data)
    return infos


def _merge_table(
    parts: Path, table: str, columns: tuple[str, ...], out: Path
) -> tuple[int, list[str]] | None:
    import pandas as pd

    files = part_files(parts, table)
    if not files:
        return None
    notes: list[str] = []
    frames = []
    for f in files:
        got = read_part(f, columns)
        notes.extend(got.notes)
        if got.cut_bytes:
            unit = "chunk" if f.suffix == ".arrows" else "row"
            notes.append(
                f"{f.name}: {got.cut_bytes} bytes after its last whole {unit} left out (a "
                f"{unit} cut while written, by a worker killed or still running, or bytes "
                "that are not a part file's)"
            )
        if got.frame is not None:
            frames.append(got.frame)
    if not frames:
        frames = [pd.DataFrame({c: pd.Series(dtype=str) for c in columns})]
    return write_merged(frames, out), notes


def _workers_table(
    infos: list[dict[str, Any]], scheduler_workers: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    by_worker: dict[str, dict[str, Any]] = {}
    # Later parts (a restarted worker reusing its address) win over earlier ones.
    for info in sorted(infos, key=lambda i: i.get("setup_time") or 0.0):
        by_worker[info["worker"]] = info
    rows = []
    for address in sorted(set(by_worker) | set(scheduler_workers)):
        mine = by_worker.get(address, {})
        theirs = scheduler_workers.get(address, {})
        row = {c: mine.get(c, theirs.get(c)) for c in WORKERS_INFO if c not in ("address", "time")}
        row["address"] = address
        row["time"] = mine.get("setup_time", theirs.get("added"))
        rows.append(row)
    return rows


def merge_parts(
    run_dir: str | Path,
    *,
    scheduler_workers: dict[str, dict[str, Any]] | None = None,
    keep_parts: bool = False,
) -> dict[str, Any]:
    """Merge the worker part files of a capture directory.

    Args:
        run_dir: the capture directory.
        scheduler_workers: what the scheduler knows of each worker (fills ``workers_info.csv``
            for workers that wrote no part, e.g. without a shared file system).
        keep_parts: keep ``metaprov-parts/`` even when every part is closed.

    Returns:
        ``{"files": {name: rows}, "workers": [...], "incomplete_workers": [...], "notes": [...]}``.

    Raises:
        InputError: ``run_dir`` is not a directory.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise InputError("not a directory", path=run, hint="give the capture's run directory")
    parts = run / PARTS_DIR
    infos = read_part_infos(parts)
    files: dict[str, int] = {}
    notes: list[str] = []
    for table, columns in WORKER_TABLES.items():
        result = (
            _merge_table(parts, table, columns, run / f"{table}.csv") if parts.is_dir() else None
        )
        if result is None:
            if (run / f"{table}.csv").exists() or table in OPTIONAL_WORKER_TABLES:
                continue  # merged earlier (parts already removed), or not asked for
            notes.append(
                f"{table}.csv not written: no worker wrote a part (worker plugin not running?)"
            )
            continue
        files[f"{table}.csv"], n = result
        notes.extend(n)
    workers = _workers_table(infos, scheduler_workers or {})
    if workers or infos:
        import pandas as pd

        from metaprov.records import csv_text

        csv_text(
            pd.DataFrame(workers, columns=list(WORKERS_INFO)), run / "workers_info.csv", index=True
        )
        files["workers_info.csv"] = len(workers)
    incomplete = sorted({i["worker"] for i in infos if i.get("closed_time") is None})
    no_part = sorted(set(scheduler_workers or {}) - {i["worker"] for i in infos})
    if no_part and infos:
        notes.append(f"no part files from workers {no_part} (not running the worker plugin?)")
    if incomplete:
        notes.append(
            f"parts of workers {incomplete} were not closed (worker still running or crashed); "
            "their buffered rows may be missing. Run metaprov.capture.merge_parts again later."
        )
    elif parts.is_dir() and not keep_parts:
        shutil.rmtree(parts, ignore_errors=True)
    for n in notes:
        log.warning("metaprov capture: %s", n)
    return {"files": files, "workers": workers, "incomplete_workers": incomplete, "notes": notes}


def merge_run(run_dir: str | Path, *, keep_parts: bool = False) -> dict[str, Any]:
    """Merge a capture's parts after the fact and update its ``metaprov-run.json``.

    For captures whose scheduler could not merge (a worker outlived the scheduler, or the
    scheduler was killed).

    Args:
        run_dir: the capture directory.
        keep_parts: keep ``metaprov-parts/`` even when every part is closed.

    Returns:
        The merge summary of :func:`merge_parts`.
    """
    run = Path(run_dir)
    meta_path = run / RUN_JSON
    meta: dict[str, Any] = {}
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InputError(f"invalid JSON: {exc}", path=meta_path) from exc
    known = {
        w["address"]: w for w in meta.get("workers", []) if isinstance(w, dict) and w.get("address")
    }
    merged = merge_parts(run, scheduler_workers=known, keep_parts=keep_parts)
    if meta:
        meta.setdefault("files", {}).update(merged["files"])
        meta["workers"] = merged["workers"]
        meta["incomplete_workers"] = merged["incomplete_workers"]
        meta["notes"] = merged["notes"]
        write_json_atomic(meta_path, meta)
    return merged
