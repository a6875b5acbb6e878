"""Read the capture's worker part files: whole chunks (or rows) only, every cell as CSV text.

Input: one part file under a capture's ``metaprov-parts/``. A worker writes each of its tables
as ``<table>.<part id>.arrows``: a sequence of *chunks*, one per flush, each a complete Arrow IPC
stream (its schema, one record batch, the end-of-stream marker) appended in one write. A chunk's
columns are typed by what they held at that flush: ``float64`` (Python floats), ``int64``
(Python ints), or text; a null is an empty cell. Numbers stay binary on the worker's hot path and
are formatted once, here. A column holding both floats and ints (Dask's metric values: seconds
and counts) is written as two, the ints under ``<name>#int``. Captures made before metaprov 0.14 wrote ``<table>.<part id>.csv``
parts (CSV text with a header); both are read.

Output: a :class:`PartRows`: the part's rows as a DataFrame of ``str`` cells, exactly the cells
the CSV part would have held (a float as Python's ``repr``, an int as ``str``, null as ``""``),
the bytes of an unfinished last chunk or row left out (a worker still writing, or killed while
writing), and a note per thing not used (a chunk that is not a readable Arrow stream, columns
missing or of a type a worker never writes).

A part file is untrusted input: every record batch is validated in full by Arrow before its
cells are read, and a file that is not one of these layouts is reported, never guessed at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from metaprov.ingest.csvread import first_hole
from metaprov.records import csv_text

#: Suffixes of part files, in the order a part id's files are listed (Arrow chunks, older CSV).
PART_SUFFIXES = (".arrows", ".csv")
#: The end-of-stream marker that closes each chunk (Arrow IPC: continuation, length 0).
EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
#: A column of floats and ints is written as two: the floats under its name, the ints under
#: its name with this suffix (null where the other holds the value).
INT_SUFFIX = "#int"
_TAIL = 1 << 16


@dataclass
class PartRows:
    """What :func:`read_part` read from one part file.

    Attributes:
        frame: the rows, every cell ``str`` (None when nothing usable was read).
        cut_bytes: bytes after the last whole chunk (or row) left out.
        notes: one line per thing not used, naming the file.
    """

    frame: pd.DataFrame | None
    cut_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def part_files(parts: Path, table: str) -> list[Path]:
    """The part files of ``table`` in ``parts`` (both layouts), in name order."""
    found: list[Path] = []
    for suffix in PART_SUFFIXES:
        found.extend(p for p in parts.glob(f"{table}.*{suffix}") if p.is_file())
    return sorted(found, key=lambda p: p.name)


def read_part(path: Path, columns: Sequence[str] | None = None) -> PartRows:
    """The whole rows of one part file (``.arrows`` or ``.csv``), cells as CSV text.

    Args:
        path: the part file.
        columns: the table's columns, in order (the frame holds exactly these; a chunk or a
            CSV part without one of them is left out with a note). None: the part's own.
    """
    try:
        size = first_hole(path, path.stat().st_size)
    except OSError as exc:
        return PartRows(None, 0, [f"{path.name}: unreadable ({exc.strerror or exc})"])
    if path.suffix == ".arrows":
        return _read_arrows(path, size, columns)
    return _read_csv(path, size, columns)


def whole_rows_size(path: Path, size: int | None = None) -> int:
    """Bytes of ``path`` up to and including its last ``\\n`` (0 when it holds none) before
    its first hole, if sparse (a hole is never read: gigabytes of zeros)."""
    if size is None:
        size = path.stat().st_size
    size = first_hole(path, size)
    with path.open("rb") as fh:
        return _whole_rows(fh, size)


def _whole_rows(fh: Any, size: int) -> int:
    """Bytes of the open file ``fh`` up to and including its last ``\\n`` within ``size``."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL)
        fh.seek(start)
        block = fh.read(end - start)
        i = block.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


def _read_csv(path: Path, size: int, columns: Sequence[str] | None) -> PartRows:
    import io

    try:
        with path.open("rb") as fh:  # ``size`` already stops at the first hole
            whole = _whole_rows(fh, size)
            fh.seek(0)
            data = fh.read(whole)
    except OSError as exc:
        return PartRows(None, 0, [f"{path.name}: unreadable ({exc.strerror or exc})"])
    out = PartRows(None, size - whole)
    if not data:
        out.notes.append(f"{path.name}: empty part (no header)")
        return out
    try:
        df = pd.read_csv(
            io.BytesIO(data), dtype=str, keep_default_na=False, na_filter=False, on_bad_lines="skip"
        )
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        out.notes.append(f"{path.name}: not a readable CSV part ({exc}); part skipped")
        return out
    if columns is not None:
        missing = [c for c in columns if c not in df.columns]
        if missing:
            out.notes.append(f"{path.name}: columns {missing} missing; part skipped")
            return out
        df = df[list(columns)]
    out.frame = df
    return out


def _texts(arr: pa.Array) -> list[Any]:
    """A column's cells as the csv module writes them (None where null). Through numpy, not
    ``to_pylist`` (which makes an Arrow scalar per value: a microsecond each)."""
    t = arr.type
    if pa.types.is_null(t):
        return [None] * len(arr)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return arr.to_numpy(zero_copy_only=False).tolist()  # type: ignore[no-any-return]
    if pa.types.is_float64(t):
        fmt: Any = repr
    elif pa.types.is_int64(t):
        fmt = str
    else:
        raise TypeError(f"a column of type {t}")
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False).tolist()
        values = arr.fill_null(0).to_numpy().tolist()
        return [fmt(v) if ok else None for v, ok in zip(values, valid, strict=True)]
    return list(map(fmt, arr.to_numpy().tolist()))


def _cells(batch: pa.RecordBatch, name: str) -> list[str]:
    """The cells of column ``name``: its own values, where null those of ``<name>#int``
    (a column of floats and ints is written as two), ``""`` where both are null."""
    cells = _texts(batch.column(name))
    if f"{name}{INT_SUFFIX}" in batch.schema.names:
        ints = _texts(batch.column(f"{name}{INT_SUFFIX}"))
        return [
            c if c is not None else ("" if i is None else i)
            for c, i in zip(cells, ints, strict=True)
        ]
    if None in cells:
        return ["" if c is None else c for c in cells]
    return cells


def _read_arrows(path: Path, size: int, columns: Sequence[str] | None) -> PartRows:
    out = PartRows(None)
    groups: list[tuple[list[str], dict[str, list[Any]]]] = []  # runs of chunks, same columns
    good = 0  # bytes up to the end of the last whole batch (or chunk)
    try:
        fh = pa.OSFile(str(path), "r")
    except (OSError, pa.ArrowException) as exc:
        return PartRows(None, 0, [f"{path.name}: unreadable ({exc})"])
    chunk = 0
    with fh:
        while good < size:
            chunk += 1
            fh.seek(good)
            batches = []
            try:
                reader = pa.ipc.open_stream(fh)
                last = fh.tell()  # the end of the last message read (the schema's)
                while True:
                    try:
                        batch = reader.read_next_batch()
                    except StopIteration:
                        break
                    batch.validate(full=True)
                    batches.append(batch)
                    good = last = fh.tell()
                end = fh.tell()
                # closed by its end marker (not by the end of the file)
                fh.seek(last)
                closed = end == last + len(EOS) and fh.read(len(EOS)) == EOS
            except (pa.ArrowException, OSError, ValueError):
                closed = False  # an unfinished chunk (being written, or cut): its rest later
            if closed:
                good = end
            for batch in batches:
                names = batch.schema.names
                own = [n for n in names if not n.endswith(INT_SUFFIX)]
                want = own if columns is None else list(columns)
                missing = [c for c in want if c not in names]
                if missing or len(set(names)) != len(names):
                    what = f"columns {missing} missing" if missing else "repeated column names"
                    out.notes.append(f"{path.name}: chunk {chunk}: {what}; chunk skipped")
                    continue
                try:
                    cells = {c: _cells(batch, c) for c in want}
                except TypeError as exc:
                    out.notes.append(f"{path.name}: chunk {chunk}: {exc}; chunk skipped")
                    continue
                if not groups or groups[-1][0] != want:
                    groups.append((want, {c: [] for c in want}))
                acc = groups[-1][1]
                for c in want:
                    acc[c].extend(cells[c])
            if not closed:
                break  # the file ends inside this chunk: its whole batches read, the rest cut
    out.cut_bytes = size - good
    if groups:
        parts = [pd.DataFrame(acc, columns=names, dtype=object) for names, acc in groups]
        out.frame = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    elif columns is not None:
        out.frame = pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    return out


def write_merged(frames: list[pd.DataFrame], out: Path) -> int:
    """Write the parts' rows as one file of the Mofka schema: concatenated in part order,
    stably sorted by ``time`` (rows with equal times keep their part order and their order
    within the part; no ``time`` column: as they come), with the pandas index column, through
    a temporary file renamed into place. The rows written."""
    df = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    if "time" in df.columns:
        t = pd.to_numeric(df["time"], errors="coerce")
        df = df.iloc[t.argsort(kind="stable").to_numpy()].reset_index(drop=True)
    tmp = out.with_name(f".{out.name}.tmp")
    csv_text(df, tmp, index=True)
    tmp.replace(out)
    return len(df)


__all__ = [
    "EOS",
    "INT_SUFFIX",
    "PART_SUFFIXES",
    "PartRows",
    "part_files",
    "read_part",
    "whole_rows_size",
    "write_merged",
]
