"""Reading one CSV file of a run and typing its columns.

:data:`SPECS` says which columns each file must and may have; :func:`_read` reads the file
(:mod:`metaprov.ingest.csvread`), and the helpers here turn its columns into typed arrays: times
as int64 microseconds checked against the run's clock (:class:`_Clock`), thread ids as uint64,
text columns as dictionary codes (:class:`_Col`). Every cell that cannot be read is counted in
the accounting with its file, row, column and reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.ingest.csvread import CsvTable, RowSelection, _types_mapper, read_csv
from metaprov.records import SCHEMAS, Accounting, conform
from metaprov.timeutil import MAX_EPOCH_S
from metaprov.timeutil import NAT_US as _NAT

SPECS: dict[str, dict] = {
    "scheduler_transition.csv": dict(
        required=["key", "start", "finish", "time"],
        optional=[
            "thread",
            "worker",
            "prefix",
            "group",
            "stimulus_id",
            "called_from",
            "begins",
            "ends",
            "duration",
            "size",
        ],
        dictionary=(
            "key",
            "worker",
            "prefix",
            "group",
            "start",
            "finish",
            "called_from",
            "stimulus_id",
        ),
    ),
    "worker_transition.csv": dict(
        required=["key", "start", "finish", "called_from", "time"],
        optional=[],
        extended=("stimulus_id", "thread"),
        dictionary=("key", "start", "finish", "called_from", "stimulus_id"),
    ),
    "worker_transfer.csv": dict(
        required=["keys", "who", "type", "called_from"],
        optional=[
            "start",
            "stop",
            "middle",
            "duration",
            "total",
            "bandwidth",
            "time",
            "compressed",
        ],
        dictionary=("who", "type", "called_from"),
    ),
    "graph.csv": dict(
        required=["client", "keys", "dependencies"],
        optional=["time"],
        dictionary=("client",),
        large_rows=True,
    ),
    "worker.csv": dict(
        required=["worker", "action"],
        optional=["time"],
        extended=("stimulus_id",),
        dictionary=("worker", "action"),
    ),
    "client.csv": dict(
        required=["client", "action"], optional=["time"], dictionary=("client", "action")
    ),
}


def _release_memory() -> None:
    """Hand the memory Arrow's allocator keeps for reuse back to the system between steps."""
    pa.default_memory_pool().release_unused()


_LAST = np.iinfo(np.int64).max  # sort key of "no time": NaT sorts last


def _text(s: pd.Series) -> pd.Series:
    """Any text-like column -> pandas ``str``."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype(object)
    return s.astype("str")


def _float(ct: CsvTable, col: str, acct: Accounting) -> np.ndarray:
    """Parse a numeric column; unparseable cells become NaN and are reported (the row is kept)."""
    raw = ct.arrow(col)
    if pa.types.is_dictionary(raw.type):
        raw = raw.cast(pa.string())
    try:
        val = pc.cast(raw, pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        val = pd.to_numeric(ct.get(col).astype(object), errors="coerce").to_numpy(
            dtype="float64", na_value=np.nan
        )
    present = raw.is_valid().to_numpy()
    bad = present & ~np.isfinite(val)
    if bad.any():
        idx = np.flatnonzero(bad)
        acct.warn(
            ct.name,
            f"unparseable number in column {col!r} (value treated as absent) x{len(idx)}",
            line=int(ct.lines[idx[0]]),
            column=col,
            detail=str(raw[int(idx[0])].as_py())[:80],
        )
        val = val.copy()
        val[bad] = np.nan
    return val


#: Largest distance of a time from the run's reference time (the median of the first time
#: column read): no Dask run lasts 30 days, so a time further away is an epoch in milliseconds,
#: a negative epoch, a year like 3000, or a corrupt cell.
PLAUSIBLE_SPAN_US = 30 * 86_400 * 1_000_000


@dataclass
class _Clock:
    """The run's reference time, set by the first time column that has values (the scheduler's
    transitions when present); every later time column is checked against it."""

    ref: int | None = None

    def check(self, us: np.ndarray, ct: CsvTable, col: str, acct: Accounting) -> np.ndarray:
        """Times (int64 µs) further than :data:`PLAUSIBLE_SPAN_US` from the reference, reported
        and treated as absent."""
        valid = us != _NAT
        if not valid.any():
            return us
        if self.ref is None:
            self.ref = int(np.median(us[valid]))
        bad = valid & (np.abs(us - self.ref) > PLAUSIBLE_SPAN_US)
        if bad.any():
            idx = np.flatnonzero(bad)
            ref = np.datetime_as_string(np.datetime64(self.ref, "us"), unit="s") + "Z"
            acct.warn(
                ct.name,
                f"implausible time in column {col!r}: more than 30 days from the run's time "
                f"({ref}); an epoch in milliseconds, a negative or far-future time? (treated "
                f"as absent) x{len(idx)}",
                line=int(ct.lines[idx[0]]),
                column=col,
                detail=str(ct.arrow(col)[int(idx[0])].as_py())[:80],
            )
            us = us.copy()
            us[bad] = _NAT
        return us


def _time(ct: CsvTable, col: str, acct: Accounting, clock: _Clock | None = None) -> pd.Series:
    return _utc(_us(ct, col, acct, clock))


def _us(ct: CsvTable, col: str, acct: Accounting, clock: _Clock | None = None) -> np.ndarray:
    """Epoch-seconds column -> int64 microseconds (``_NAT``: none), rounded as ``epoch_to_utc``.

    A value too large to be a time (it would overflow) is reported and treated as absent; with
    a ``clock``, so is a time outside the run's plausible span (see :class:`_Clock`).
    """
    val = _float(ct, col, acct)
    ok = np.isfinite(val)
    huge = ok & (np.abs(val) >= MAX_EPOCH_S)
    if huge.any():
        idx = np.flatnonzero(huge)
        acct.warn(
            ct.name,
            f"time out of range in column {col!r} (not an epoch in seconds; treated as absent) "
            f"x{len(idx)}",
            line=int(ct.lines[idx[0]]),
            column=col,
            detail=str(ct.arrow(col)[int(idx[0])].as_py())[:80],
        )
        ok &= ~huge
    out = np.full(len(val), _NAT, dtype=np.int64)
    out[ok] = np.rint(val[ok] * 1e6).astype("int64")
    return clock.check(out, ct, col, acct) if clock is not None else out


def _utc(us: np.ndarray) -> pd.Series:
    """int64 microseconds (``_NAT``: none) -> ``datetime64[us, UTC]``."""
    return pd.Series(pd.DatetimeIndex(us.view("datetime64[us]")).tz_localize("UTC"))


def _sortable(us: np.ndarray) -> np.ndarray:
    """Times as sort keys with NaT last."""
    return np.where(us == _NAT, _LAST, us)


@dataclass
class _Threads:
    """Exact 64-bit thread ids and their missing mask."""

    values: np.ndarray
    na: np.ndarray

    def take(self, idx: np.ndarray) -> _Threads:
        """Rows ``idx``; -1 gives a missing id."""
        if len(self.values) == 0:
            return _Threads(np.zeros(len(idx), np.uint64), np.ones(len(idx), dtype=bool))
        safe = np.maximum(idx, 0)
        return _Threads(self.values[safe], self.na[safe] | (idx < 0))

    def array(self) -> pd.arrays.IntegerArray:
        return pd.arrays.IntegerArray(self.values.astype(np.uint64), self.na.copy())


def _uint64(ct: CsvTable, col: str, acct: Accounting) -> _Threads:
    """Exact 64-bit thread ids: text -> uint64 without passing through float."""
    arr = ct.arrow(col)
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string())
    # "123.0" appears when a writer let pandas turn the column into float: accept the exact form.
    if pc.any(pc.ends_with(arr, ".0")).as_py():
        arr = pc.replace_substring_regex(arr, r"\.0$", "")
    # 1 to 20 ASCII digits (the same test as the regex ^\d{1,20}$, without a regex engine)
    ok = pc.fill_null(
        pc.and_(pc.ascii_is_decimal(arr), pc.less_equal(pc.binary_length(arr), 20)), False
    )
    good = pc.if_else(ok, arr, pa.scalar(None, pa.string()))
    try:
        out = pc.cast(good, pa.uint64())
    except pa.ArrowInvalid:  # a 20-digit value above 2**64 - 1
        ints = [None if x is None or int(x) >= 2**64 else int(x) for x in good.to_pylist()]
        out = pa.chunked_array([pa.array(ints, type=pa.uint64())])
        ok = pc.and_(ok, out.is_valid())
    badmask = pc.and_(pc.invert(ok), arr.is_valid()).to_numpy()
    if badmask.any():
        idx = np.flatnonzero(badmask)
        acct.warn(
            ct.name,
            f"not a thread id in column {col!r} (treated as absent) x{len(idx)}",
            line=int(ct.lines[idx[0]]),
            column=col,
            detail=str(ct.arrow(col)[int(idx[0])].as_py())[:80],
        )
    values = pc.fill_null(out, 0).to_numpy().astype(np.uint64)
    return _Threads(values, out.is_null().to_numpy())


@dataclass
class _Col:
    """A dictionary-encoded text column: integer codes (-1: missing) into unique texts."""

    codes: np.ndarray
    cats: pa.Array

    def take(self, idx: np.ndarray) -> _Col:
        """Rows ``idx``; -1 gives a missing value."""
        if len(self.codes) == 0:
            return _Col(np.full(len(idx), -1, dtype=np.int64), self.cats)
        return _Col(np.where(idx >= 0, self.codes[np.maximum(idx, 0)], -1), self.cats)

    def arrow(self) -> pa.Array:
        """The texts (null where missing)."""
        return _decode(self.cats, self.codes)

    def is_in(self, values: tuple[str, ...]) -> np.ndarray:
        """Per row: is the text one of ``values`` (missing: False)?"""
        lut = np.append(pc.is_in(self.cats, pa.array(values)).to_numpy(zero_copy_only=False), False)
        return lut[self.codes]


def _decode(cats: pa.Array, codes: np.ndarray) -> pa.Array:
    return cats.take(pa.array(codes, mask=codes < 0)) if len(codes) else cats.slice(0, 0)


def _enc(ct: CsvTable, col: str) -> _Col:
    """Dictionary-encode a column (dictionary in order of first appearance, as pandas shows it)."""
    arr = ct.arrow(col)
    arr = (
        arr.unify_dictionaries() if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr)
    )
    if arr.num_chunks == 0:
        return _Col(np.zeros(0, dtype=np.int32), pa.array([], type=pa.string()))
    codes = [c.indices.fill_null(-1).to_numpy(zero_copy_only=False) for c in arr.chunks]
    return _Col(np.concatenate(codes).astype(np.int32, copy=False), arr.chunk(0).dictionary)


def _str(arr: pa.Array | pa.ChunkedArray) -> pd.Series:
    """Arrow text -> pandas ``str`` Series."""
    return arr.to_pandas(types_mapper=_types_mapper).reset_index(drop=True)


def _index_str(arr: pa.Array) -> pd.Index:
    return pd.Index(_str(arr))


def _sorted_union(*parts: pa.Array) -> pa.Array:
    """Sorted unique texts of ``parts`` (nulls dropped), in byte (= code point) order."""
    parts = tuple(p.cast(pa.large_string()) for p in parts if p is not None and len(p))
    if not parts:
        return pa.array([], type=pa.large_string())
    uniq = pc.unique(pa.concat_arrays(list(parts))).drop_null()
    return uniq.take(pc.sort_indices(uniq))


def _mapping(cats: pa.Array, index: pa.Array) -> np.ndarray:
    """Position in ``index`` of every text of ``cats``, with one more entry (-1) for code -1."""
    pos = pc.index_in(cats.cast(pa.large_string()), value_set=index)
    return np.append(pos.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64), -1)


def _table(name: str, cols: dict[str, Any]) -> pd.DataFrame:
    """:func:`conform`, without copying the columns that already have the schema's dtype.

    (``conform`` builds its frame with pandas' default copy; for the large tables that doubles
    the peak memory of the step.) Columns of another dtype go through ``conform``.
    """
    series = {
        c: v.reset_index(drop=True) if isinstance(v, pd.Series) else pd.Series(v, copy=False)
        for c, v in cols.items()
    }
    n = len(next(iter(series.values()))) if series else 0
    out: dict[str, pd.Series] = {}
    for c, t, _ in SCHEMAS[name]:
        if c not in series:
            out[c] = pd.Series(pd.array([None] * n, dtype=t) if n else [], dtype=t)
        elif str(series[c].dtype) == str(t):
            out[c] = series[c]
        else:
            return conform(name, pd.DataFrame(series))
    return pd.DataFrame(out, copy=False)


class _Deferred(Accounting):
    """Accounting calls kept in order and replayed later.

    Files are turned into codes right after they are read (to free their tables), but the findings
    must keep their order: every file's read first, then every file's content.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple, dict]] = []

    def drop(self, *args: Any, **kwargs: Any) -> None:  # noqa: D102
        self.calls.append(("drop", args, kwargs))

    def warn(self, *args: Any, **kwargs: Any) -> None:  # noqa: D102
        self.calls.append(("warn", args, kwargs))

    def note(self, *args: Any, **kwargs: Any) -> None:  # noqa: D102
        self.calls.append(("note", args, kwargs))

    def read(self, *args: Any, **kwargs: Any) -> None:  # noqa: D102
        self.calls.append(("read", args, kwargs))

    def replay(self, acct: Accounting) -> None:
        """Make the recorded calls on ``acct``."""
        for name, args, kwargs in self.calls:
            getattr(acct, name)(*args, **kwargs)


def _read(
    run: Path, name: str, acct: Accounting, select: RowSelection | None = None
) -> CsvTable | None:
    path = run / name
    if not path.exists():
        acct.missing(name)
        return None
    if not path.is_file():
        acct.missing(name)
        acct.warn(name, "not a regular file")
        return None
    if select is not None:
        ct = read_csv(path, acct=acct, select=select, **SPECS[name])
    else:
        ct = read_csv(path, acct=acct, **SPECS[name])
    if ct is not None:
        _report_nul_keys(ct, acct)
    return ct


_KEY_COLUMNS = ("key", "keys", "dependencies")


def _has_nul(col: pa.ChunkedArray) -> np.ndarray:
    """Per row: the text holds a NUL character (vectorised; a dictionary column is tested once
    per distinct value)."""
    out = []
    for chunk in col.chunks:
        if pa.types.is_dictionary(chunk.type):
            bad = pc.match_substring(chunk.dictionary.cast(pa.string()), "\x00")
            hit = pc.fill_null(pc.take(bad, chunk.indices), False)
        else:
            hit = pc.fill_null(pc.match_substring(chunk.cast(pa.string()), "\x00"), False)
        out.append(hit.to_numpy(zero_copy_only=False))
    return np.concatenate(out) if out else np.zeros(0, dtype=bool)


def _report_nul_keys(ct: CsvTable, acct: Accounting) -> None:
    """A key holding a NUL byte (no Dask key does: Dask writes keys as text) is kept as written,
    so ``a\\0b`` and ``ab`` stay two tasks, but never silently: each row is counted with its
    reason in the accounting (text outputs escape the NUL as ``\\u0000``)."""
    for col in _KEY_COLUMNS:
        if col not in ct.columns:
            continue
        hit = ct.derived(f"nul:{col}", lambda col=col: _has_nul(ct.arrow(col)))
        if hit.any():
            acct.drop(
                ct.name,
                "key holds a NUL byte (row kept; the key is a distinct task, written escaped)",
                ct.lines[hit],
                column=col,
                counts_as_row=False,
            )


def _drop_null_keys(ct: CsvTable, col: str, acct: Accounting) -> CsvTable:
    null = ct.arrow(col).is_null().to_numpy()
    if null.any():
        acct.drop(ct.name, f"empty {col!r} cell", ct.lines[null], column=col)
        ct = ct.take(~null)
    return ct
