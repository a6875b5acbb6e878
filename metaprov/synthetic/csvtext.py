"""Formatting columns exactly as ``pandas.DataFrame.to_csv`` writes them, with pyarrow kernels.

Floats in their shortest ``repr``, integers, quoted CSV fields, hexadecimal ids: every function
takes numpy arrays and returns an Arrow string array, so a file is written a chunk of rows at a
time without a Python object per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def format_floats(values: np.ndarray) -> pa.Array:
    """Format float64 values exactly as ``pandas.DataFrame.to_csv`` does (Python ``repr``).

    Arrow's shortest round-trip formatting gives the same digits as ``repr`` but prints integral
    values without ``.0`` and uses exponent notation at other thresholds. So: values that Python
    prints positionally (``1e-4 <= |v| < 1e16``) and Arrow printed without an exponent keep Arrow's
    digits (plus ``.0`` when integral); the rest (rare in this workload) go through numpy's
    ``str``, which is ``repr``. NaN becomes an empty field.

    Args:
        values: float64 array.

    Returns:
        An Arrow string array of the same length.
    """
    v = np.ascontiguousarray(values, dtype=np.float64)
    out = pc.cast(pa.array(v), pa.string())
    a = np.abs(v)
    odd = ~(((a >= 1e-4) & (a < 1e16)) | (v == 0)) | ~np.isfinite(v)
    odd |= pc.match_substring(out, "e").to_numpy(zero_copy_only=False)
    no_point = pc.invert(pc.match_substring(out, "."))
    out = pc.if_else(no_point, pc.binary_join_element_wise(out, ".0", ""), out)
    if odd.any():
        repl = v[odd].astype(str)
        repl[np.isnan(v[odd])] = ""
        out = pc.replace_with_mask(out, pa.array(odd), pa.array(repl, pa.string()))
    return out


def _fmt_ints(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(np.ascontiguousarray(values)), pa.string())


def _masked(mask: np.ndarray, fill_values: pa.Array) -> pa.Array:
    """Strings ``fill_values`` at the positions of ``mask`` (len = mask.sum()), empty elsewhere."""
    base = _empty_strings(len(mask))
    if not mask.any():
        return base
    return pc.replace_with_mask(base, pa.array(mask), fill_values)


def _empty_strings(n: int) -> pa.Array:
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(np.zeros(n + 1, dtype=np.int32)), pa.py_buffer(b"")
    )


def _take(table: pa.Array, idx: np.ndarray) -> pa.Array:
    return table.take(pa.array(np.ascontiguousarray(idx, dtype=np.int64)))


def _csv_field(s: pa.Array) -> pa.Array:
    """Quote fields as csv.QUOTE_MINIMAL does for our content (commas only; no quotes or newlines)."""
    has_comma = pc.match_substring(s, ",")
    quoted = pc.binary_join_element_wise('"', s, '"', "")
    return pc.if_else(has_comma, quoted, s)


class _CsvFile:
    """A CSV file written the way pandas writes it: header with an empty first name, index column."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path = path
        self.fh: BinaryIO = open(path, "wb")  # closed in close()
        self.fh.write(("," + ",".join(columns) + "\n").encode())
        self.rows = 0

    def write(self, cols: Sequence[pa.Array | str]) -> None:
        n = next(len(c) for c in cols if not isinstance(c, str))
        if n == 0:
            return
        idx = _fmt_ints(np.arange(self.rows, self.rows + n, dtype=np.int64))
        parts = [idx, *(pa.scalar(c, pa.string()) if isinstance(c, str) else c for c in cols)]
        line = pc.binary_join_element_wise(*parts, ",")
        _write_lines(self.fh, line, "\n")
        self.rows += n

    def close(self) -> None:
        self.fh.close()


def _write_lines(fh: BinaryIO, arr: pa.Array, terminator: str) -> None:
    """Write each string of ``arr`` followed by ``terminator``, straight from the Arrow buffers."""
    arr = pc.binary_join_element_wise(arr, "", terminator)
    if arr.null_count:
        raise AssertionError("synthetic: null in a CSV line (a column was not filled)")
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)
    lo, hi = int(offsets[arr.offset]), int(offsets[arr.offset + len(arr)])
    fh.write(memoryview(arr.buffers()[2])[lo:hi])


def _hex(raw: np.ndarray) -> np.ndarray:
    """(n, k) uint8 -> (n, 2k) uint8 ASCII lowercase hex digits."""
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    out = np.empty((raw.shape[0], raw.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2] = digits[raw >> 4]
    out[:, 1::2] = digits[raw & 0x0F]
    return out


def _ascii_rows(chars: np.ndarray) -> pa.Array:
    """(n, k) uint8 ASCII -> Arrow strings of length k."""
    n, k = chars.shape
    flat = np.ascontiguousarray(chars).reshape(-1)
    offsets = np.arange(0, (n + 1) * k, k, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(flat))


def _unique_hex(rng: np.random.Generator, n: int, uuid: bool) -> pa.Array:
    """n distinct random hex ids: md5-like (32 chars) or uuid4-like (8-4-4-4-12)."""
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    # The last 4 bytes are a bijection of the row number (odd multiplier, xor): the ids are
    # distinct without a uniqueness check and still look random.
    mixed = (np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF)
    mixed ^= np.uint64(int(rng.integers(0, 1 << 32)))
    raw[:, 12:16] = mixed.astype(">u4").view(np.uint8).reshape(n, 4)
    if uuid:
        raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
        raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    h = _hex(raw)
    if not uuid:
        return _ascii_rows(h)
    dash = np.full((n, 1), ord("-"), dtype=np.uint8)
    return _ascii_rows(
        np.hstack(
            [h[:, :8], dash, h[:, 8:12], dash, h[:, 12:16], dash, h[:, 16:20], dash, h[:, 20:]]
        )
    )
