"""A consistent, whole-row copy of a run directory that is still being written.

Input: a run directory written right now by metaprov's capture (top-level scheduler files, the
workers' part files under ``metaprov-parts/``, ``metaprov-run.json``) or by Mofka-Dask CSV
writers (rows appended to the six CSV files).
Output: a snapshot directory that every metaprov reader reads as a finished run: each CSV file
cut after its last complete row (a row being written is left for the next snapshot), the
workers' part files merged into ``worker_transition.csv``, ``worker_transfer.csv``,
``worker_execution.csv`` and ``worker_result.csv`` exactly as the capture merges them at the end
(parts in name order, stably sorted by ``time``), other files linked or copied as they are.

Nothing is written into the run directory.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaprov.ingest.parts import part_files, read_part, whole_rows_size, write_merged

#: The capture's parts directory and the worker tables it holds (kept equal to
#: ``metaprov.capture._files.WORKER_TABLES`` by a test; importing the capture needs Dask).
PARTS_DIR = "metaprov-parts"
WORKER_TABLES = (
    "worker_transition",
    "worker_transfer",
    "worker_execution",
    "worker_result",
    "worker_metric",
)
#: The capture's run file (``status``: ``recording`` while it runs, ``complete`` at the end, or
#: ``incomplete`` at the end of a run that lost a worker or a worker's records).
RUN_JSON = "metaprov-run.json"
#: The statuses of a capture that has finished writing.
FINISHED = ("complete", "incomplete")


@dataclass
class Snapshot:
    """What one snapshot read.

    Attributes:
        path: the snapshot directory.
        status: ``complete`` (the capture says so), ``recording`` (a capture in progress) or
            None (no ``metaprov-run.json``: a Mofka-Dask run, or a capture that never started).
        signature: names, sizes and modification times of every file read (equal signatures:
            nothing changed in the run directory).
        cut_bytes: bytes of incomplete last rows left out, per file.
        parts: part files merged, per worker table.
    """

    path: Path
    status: str | None
    signature: tuple[tuple[str, int, int], ...]
    cut_bytes: dict[str, int] = field(default_factory=dict)
    parts: dict[str, int] = field(default_factory=dict)


def copy_prefix(src: Path, dst: Path, length: int) -> None:
    """Copy the first ``length`` bytes of ``src`` to a new file ``dst`` (kernel copy when possible)."""
    with src.open("rb") as fin, dst.open("wb") as fout:
        left = length
        copy_range = getattr(os, "copy_file_range", None)
        while left > 0 and copy_range is not None:
            try:
                n = copy_range(fin.fileno(), fout.fileno(), left)
            except OSError:
                break
            if n <= 0:
                break
            left -= n
        if left > 0:
            fin.seek(length - left)
            fout.seek(length - left)
            while left > 0:
                block = fin.read(min(left, 1 << 22))
                if not block:
                    break
                fout.write(block)
                left -= len(block)
        fout.truncate(length - left)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def read_status(run: Path) -> tuple[str | None, dict[str, Any]]:
    """The capture's ``status`` and its whole ``metaprov-run.json`` (None, {} without one)."""
    from metaprov.ingest.smallfiles import read_small

    try:
        # a regular file of at most 16 MiB (a FIFO or a link to /dev/zero would hang the read)
        data = json.loads(read_small(run / RUN_JSON, 16 << 20).decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # not ours to judge here: the reader reports it
        return None, {}
    if not isinstance(data, dict):
        return None, {}
    status = data.get("status")
    return (status if isinstance(status, str) else None), data


def in_progress(run: str | Path) -> bool:
    """Whether ``run`` is a capture still being written (``metaprov-run.json`` says
    ``recording``, or the workers' part files are there unmerged)."""
    status, _ = read_status(Path(run))
    if status in FINISHED:
        return False  # parts left behind by a worker that never closed do not make it running
    return status == "recording" or (Path(run) / PARTS_DIR).is_dir()


def take_snapshot(run: str | Path, dest: str | Path) -> Snapshot:
    """Copy the whole rows of ``run`` into the (new, empty) directory ``dest``.

    The capture's status is read first: a capture writes ``complete`` only after every file is
    final, so a snapshot taken after reading ``complete`` is the finished run.
    """
    src, out = Path(run), Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    status, _ = read_status(src)
    sig: list[tuple[str, int, int]] = []
    snap = Snapshot(out, status, ())
    _copy_tree(src, out, "", sig, snap)
    parts = src / PARTS_DIR
    if parts.is_dir():
        for table in WORKER_TABLES:
            files = part_files(parts, table)
            for f in files:
                try:
                    st = f.stat()
                except OSError:
                    continue
                sig.append((f"{PARTS_DIR}/{f.name}", st.st_size, st.st_mtime_ns))
            if files and not (out / f"{table}.csv").exists():
                snap.parts[table] = _merge_parts(files, out / f"{table}.csv", snap.cut_bytes)
    snap.signature = tuple(sig)
    return snap


def _copy_tree(
    src: Path, out: Path, prefix: str, sig: list[tuple[str, int, int]], snap: Snapshot
) -> None:
    """Whole rows of every CSV file, the other files as they are, sub-folders too (e.g. the
    capture's ``environment/``), except the parts (merged instead) and hidden entries."""
    for p in sorted(src.iterdir()):
        if p.name.startswith(".") or (not prefix and p.name == PARTS_DIR):
            continue
        try:
            st = p.stat()
        except OSError:
            continue  # removed while we looked (the capture replacing a file)
        rel = f"{prefix}{p.name}"
        target = out / p.name
        if p.is_dir() and not p.is_symlink():
            target.mkdir(exist_ok=True)
            _copy_tree(p, target, rel + "/", sig, snap)
            continue
        if not p.is_file():
            continue
        sig.append((rel, st.st_size, st.st_mtime_ns))
        if p.suffix == ".csv":
            # a sparse file's hole is never copied (a 3 GiB hole would fill TMPDIR): what was
            # written before it is the data; the rest is cut, as a partial last row is
            whole = whole_rows_size(p, st.st_size)
            if whole < st.st_size:
                snap.cut_bytes[rel] = st.st_size - whole
            copy_prefix(p, target, whole)
        else:
            _link_or_copy(p, target)


def _merge_parts(files: list[Path], out: Path, cut: dict[str, int]) -> int:
    """The capture's merge (:func:`metaprov.capture.merge_parts`) of the whole chunks and rows
    of ``files`` (a chunk or row being written is left for the next snapshot)."""
    frames = []
    header: list[str] | None = None
    for f in files:
        got = read_part(f, header)
        if got.cut_bytes:
            cut[f"{PARTS_DIR}/{f.name}"] = got.cut_bytes
        if got.frame is None or not len(got.frame.columns):
            continue
        if header is None:
            header = list(got.frame.columns)
        if list(got.frame.columns) != header:
            continue
        frames.append(got.frame)
    return write_merged(frames, out) if frames else 0


__all__ = [
    "Snapshot",
    "in_progress",
    "take_snapshot",
    "read_status",
    "whole_rows_size",
    "copy_prefix",
]
