"""Mofka-Dask CSV files (and the metaprov capture's output) -> RunRecords tables.

Input: the six CSV files of a run directory (any subset): ``scheduler_transition.csv``,
``worker_transition.csv``, ``worker_transfer.csv``, ``graph.csv``, ``worker.csv``, ``client.csv``.
Output: the ``tasks``, ``executions``, ``transitions``, ``transfers``, ``dependencies``,
``graphs``, ``workers``, ``clients`` and ``threads`` tables of :class:`RunRecords`.

All work is columnar and keyed by integers: every text column is dictionary-encoded once (Arrow),
keys get one sorted index for the whole run, and every join, sort, de-duplication and per-task
figure works on those integer codes. Text columns of the output tables are cut from the
dictionaries at the end. Each file is turned into codes right after it is read, and its Arrow
table is freed then, so memory holds one raw file at a time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.ingest.csvread import CsvTable, RowSelection, _types_mapper, read_csv
from metaprov.ingest.literals import parse_column
from metaprov.records import SCHEMAS, Accounting, RunRecords, conform
from metaprov.timeutil import MAX_EPOCH_S
from metaprov.timeutil import NAT_US as _NAT

CSV_FILES = (
    "scheduler_transition.csv",
    "worker_transition.csv",
    "worker_transfer.csv",
    "graph.csv",
    "worker.csv",
    "client.csv",
)

# States an execution is "in" on a worker until it ends (secede, cancel and resume keep it running).
_RUNNING = ("executing", "long-running", "cancelled", "resumed")

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


def _union(parts: list[pa.Array]) -> tuple[pa.Array, list[np.ndarray]]:
    """Unique texts of ``parts`` in order of first appearance, and each part's positions in them.

    One hash pass over all parts (as the chunks of one array: no concatenation); each mapping has
    one more entry (-1) for code -1.
    """
    chunks = [p.cast(pa.large_string()) for p in parts]
    filled = [c for c in chunks if len(c)]
    if not filled:
        return pa.array([], type=pa.large_string()), [np.array([-1], np.int64) for _ in parts]
    enc = pc.dictionary_encode(pa.chunked_array(filled, type=pa.large_string()))
    done = iter(enc.chunks)
    maps = [
        np.append(next(done).indices.to_numpy(zero_copy_only=False).astype(np.int64), -1)
        if len(c)
        else np.array([-1], dtype=np.int64)
        for c in chunks
    ]
    return enc.chunk(0).dictionary, maps


def _ranks(texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """``texts`` sorted (byte order = code point order), and the sorted position of each text."""
    perm = pc.sort_indices(texts).to_numpy()
    rank = np.empty(len(texts) + 1, dtype=np.int64)
    rank[perm] = np.arange(len(texts))
    rank[-1] = -1  # for code -1
    return texts.take(pa.array(perm)), rank


def _time_key(t: np.ndarray) -> np.ndarray:
    """Times as sort keys, NaT last, in a range small enough for :func:`_lexorder`."""
    valid = t != _NAT
    if valid.all():
        return t
    return np.where(valid, t, int(t[valid].max()) + 1 if valid.any() else 0)


def _in_time_order(t: np.ndarray) -> bool:
    """Are rows (in line order) also in time order, NaT last? Then line order is time order."""
    k = _time_key(t)
    return bool(np.all(k[1:] >= k[:-1]))


def _lexorder(*cols: np.ndarray) -> np.ndarray:
    """Stable row order by integer ``cols`` (the first is the primary key), like ``np.lexsort``.

    When the value ranges allow, the columns are folded into one int64 key: one sort, not one per
    column.
    """
    if not len(cols[0]):
        return np.zeros(0, dtype=np.int64)
    comp: np.ndarray | None = None
    total = 1
    for c in cols:
        lo, hi = int(c.min()), int(c.max())
        span = hi - lo + 1
        total *= span
        if total >= 2**62:
            return np.lexsort(tuple(reversed(cols)))
        part = c.astype(np.int64) - lo
        comp = part if comp is None else comp * span + part
    return np.argsort(comp, kind="stable")


def _key_time_order(kc: np.ndarray, t: np.ndarray) -> np.ndarray | None:
    """Row order by (key code, time with NaT last, row) for :func:`_last_in_order`.

    ``None`` when the rows (in line order) are in time order already: the common case, which then
    needs no sort at all.
    """
    return None if _in_time_order(t) else _lexorder(kc, _time_key(t))


def _ends(sorted_codes: np.ndarray) -> np.ndarray:
    """For rows sorted by code: is row i the last of its code?"""
    if not len(sorted_codes):
        return np.zeros(0, dtype=bool)
    return np.r_[sorted_codes[1:] != sorted_codes[:-1], True]


def _last_in_order(
    kc: np.ndarray, order: np.ndarray | None, n: int, mask: np.ndarray | None = None
) -> np.ndarray:
    """Per key: the last row in ``order`` (``None``: row order) among rows ``mask``; -1: none."""
    out = np.full(n, -1, dtype=np.int64)
    if order is None:
        rows = np.arange(len(kc)) if mask is None else np.flatnonzero(mask)
        np.maximum.at(out, kc[rows], rows)
        return out
    o = order if mask is None else order[mask[order]]
    sk = kc[o]
    e = _ends(sk)
    out[sk[e]] = o[e]
    return out


def _first_in_order(
    kc: np.ndarray, order: np.ndarray | None, n: int, mask: np.ndarray
) -> np.ndarray:
    """Per key: the first row in ``order`` (``None``: row order) among rows ``mask``; -1: none."""
    if order is None:
        rows = np.flatnonzero(mask)
        out = np.full(n, len(kc), dtype=np.int64)
        np.minimum.at(out, kc[rows], rows)
        out[out == len(kc)] = -1
        return out
    out = np.full(n, -1, dtype=np.int64)
    o = order[mask[order]]
    sk = kc[o]
    first = np.r_[True, sk[1:] != sk[:-1]] if len(sk) else np.zeros(0, dtype=bool)
    out[sk[first]] = o[first]
    return out


def _na_last(codes: np.ndarray) -> np.ndarray:
    """Codes into a sorted dictionary as sort keys, missing (-1) last."""
    return np.where(codes < 0, np.iinfo(np.int64).max, codes)


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
        return read_csv(path, acct=acct, select=select, **SPECS[name])
    return read_csv(path, acct=acct, **SPECS[name])


def _drop_null_keys(ct: CsvTable, col: str, acct: Accounting) -> CsvTable:
    null = ct.arrow(col).is_null().to_numpy()
    if null.any():
        acct.drop(ct.name, f"empty {col!r} cell", ct.lines[null], column=col)
        ct = ct.take(~null)
    return ct


# ----------------------------------------------------------------------------- per file


@dataclass
class _Trans:
    """One transition file as codes and numbers (times in int64 microseconds)."""

    observer: str
    key: _Col
    address: _Col
    from_state: _Col
    to_state: _Col
    stimulus_id: _Col
    time: np.ndarray
    line: np.ndarray
    thread: _Threads
    # scheduler only
    worker: _Col | None = None
    prefix: _Col | None = None
    group: _Col | None = None
    begins: np.ndarray | None = None
    ends: np.ndarray | None = None
    size: np.ndarray | None = None
    n: int = 0
    gkey: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # run-wide key codes
    tkey: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # transitions' codes

    def __len__(self) -> int:
        return self.n

    def release(self) -> None:
        """Drop every column (the row count stays)."""
        for name in self.__dataclass_fields__:
            if name not in ("observer", "n"):
                setattr(self, name, None)


def read_transitions(
    ct: CsvTable, observer: str, acct: Accounting, clock: _Clock | None = None
) -> _Trans:
    """scheduler_transition.csv / worker_transition.csv -> codes and numbers."""
    ct = _drop_null_keys(ct, "key", acct)
    # (the order of the calls is the order of the findings they may report)
    tr = _Trans(
        observer=observer,
        key=_enc(ct, "key"),
        address=_enc(ct, "called_from"),
        from_state=_enc(ct, "start"),
        to_state=_enc(ct, "finish"),
        time=_us(ct, "time", acct, clock),
        stimulus_id=_enc(ct, "stimulus_id"),
        line=ct.lines.astype(np.int64),
        thread=_uint64(ct, "thread", acct),
        n=len(ct),
    )
    if observer == "scheduler":
        tr.worker = _enc(ct, "worker")
        tr.prefix = _enc(ct, "prefix")
        tr.group = _enc(ct, "group")
        tr.begins = _us(ct, "begins", acct, clock)
        tr.ends = _us(ct, "ends", acct, clock)
        tr.size = _float(ct, "size", acct)
    dup = _exact_duplicates(tr)
    if dup.any():
        acct.drop(
            ct.name,
            "duplicate row (identical to an earlier row in every column read, time included; "
            "a log entry written twice)",
            tr.line[dup],
        )
        tr = _take_rows(tr, np.flatnonzero(~dup))
    return tr


def _exact_duplicates(tr: _Trans) -> np.ndarray:
    """Per row: is it a copy of an earlier row (same key, states, stimulus, address, thread,
    time to the microsecond and, for the scheduler, worker, prefix, group, begins, ends, size)?

    A task cannot make the same transition twice at the same microsecond, so such a row is the
    same log entry written twice; counted as a retry, it would invent an execution. Only rows
    whose time equals another row's are compared in full (one pass when the file is in time
    order, as logs are).
    """
    t = tr.time
    n = len(t)
    dup = np.zeros(n, dtype=bool)
    if n < 2:
        return dup
    order = None if _in_time_order(t) else np.argsort(t, kind="stable")
    ts = t if order is None else t[order]
    same = (ts[1:] == ts[:-1]) & (ts[1:] != _NAT)
    if not same.any():
        return dup
    cand_sorted = np.r_[same, False] | np.r_[False, same]
    cand = np.flatnonzero(cand_sorted) if order is None else np.sort(order[cand_sorted])
    cols = [
        t[cand],
        tr.key.codes[cand],
        tr.address.codes[cand],
        tr.from_state.codes[cand],
        tr.to_state.codes[cand],
        tr.stimulus_id.codes[cand] if len(tr.stimulus_id.codes) else np.zeros(len(cand), int),
        tr.thread.values[cand].view(np.int64),
        tr.thread.na[cand].astype(np.int64),
    ]
    if tr.worker is not None:
        cols += [tr.worker.codes[cand], tr.prefix.codes[cand], tr.group.codes[cand]]
        cols += [tr.begins[cand], tr.ends[cand], tr.size[cand].view(np.int64)]
    # group ids of the candidates: rows equal in every column share one
    gid = _row_groups([np.unique(c, return_inverse=True)[1].reshape(-1) for c in cols])
    dup[cand[~_first_of_group(gid)]] = True
    return dup


def _take_rows(tr: _Trans, idx: np.ndarray) -> _Trans:
    """The rows ``idx`` of a transition file (every column)."""
    out = _Trans(
        observer=tr.observer,
        key=tr.key.take(idx),
        address=tr.address.take(idx),
        from_state=tr.from_state.take(idx),
        to_state=tr.to_state.take(idx),
        stimulus_id=tr.stimulus_id.take(idx),
        time=tr.time[idx],
        line=tr.line[idx],
        thread=tr.thread.take(idx),
        n=len(idx),
    )
    if tr.worker is not None:
        assert tr.prefix is not None and tr.group is not None
        out.worker, out.prefix, out.group = (
            tr.worker.take(idx),
            tr.prefix.take(idx),
            tr.group.take(idx),
        )
        out.begins, out.ends, out.size = tr.begins[idx], tr.ends[idx], tr.size[idx]
    return out


def _row_groups(cols: list[np.ndarray]) -> np.ndarray:
    """One integer per row, equal for rows equal in every column (columns of integer codes)."""
    gid = np.zeros(len(cols[0]) if cols else 0, dtype=np.int64)
    for c in cols:
        # factorise the pair (group so far, this column) back to small integers: no overflow
        pair = gid * (int(c.max(initial=-1)) + 2) + (c.astype(np.int64) + 1)
        gid = np.unique(pair, return_inverse=True)[1].astype(np.int64).reshape(-1)
    return gid


def _first_of_group(gid: np.ndarray) -> np.ndarray:
    """Per row: is it the first row of its group?"""
    first = np.zeros(len(gid), dtype=bool)
    first[np.unique(gid, return_index=True)[1]] = True
    return first


def _run_starts(*keys: np.ndarray) -> np.ndarray:
    """For sorted rows: does row i start a new run of equal ``keys``?"""
    n = len(keys[0])
    new = np.zeros(n, dtype=bool)
    if n:
        new[0] = True
        for k in keys:
            new[1:] |= k[1:] != k[:-1]
    return new


def _rank_in_runs(new: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run (``new`` marks run starts)."""
    idx = np.arange(len(new))
    return idx - np.maximum.accumulate(np.where(new, idx, 0))


@dataclass
class _TransferKeys:
    """The key of every transfers row as a code into ``cats``."""

    codes: np.ndarray
    cats: pa.Array


def read_transfers(
    ct: CsvTable, acct: Accounting, clock: _Clock | None = None
) -> tuple[pd.DataFrame, _TransferKeys]:
    """De-duplicate re-sent rows, match the two sides of each transfer, one row per key moved."""
    name = ct.name
    content = [
        c
        for c in (
            "start",
            "stop",
            "middle",
            "duration",
            "keys",
            "total",
            "bandwidth",
            "who",
            "type",
            "called_from",
            "compressed",
        )
        if c in ct.columns
    ]
    dup = ~_first_of_group(_row_groups([_enc(ct, c).codes for c in content]))
    if dup.any():
        acct.drop(name, "duplicate (re-sent log entry; identical but for 'time')", ct.lines[dup])
        ct = ct.take(~dup)
    typ = _enc(ct, "type")
    known_type = typ.is_in(("incoming_transfer", "outgoing_transfer"))
    if (~known_type).any():
        unknown = typ.take(np.flatnonzero(~known_type)).arrow()
        acct.drop(
            name,
            "unknown transfer type",
            ct.lines[~known_type],
            column="type",
            detail=[str(x) if x is not None else "nan" for x in unknown.to_pylist()],
        )
        ct = ct.take(known_type)
        typ = _enc(ct, "type")
    parsed = parse_column(ct.arrow("keys"), "dict_int")
    if len(parsed.bad_cells):
        acct.drop(
            name,
            "malformed 'keys' literal",
            ct.lines[parsed.bad_cells],
            column="keys",
            detail=parsed.bad_detail,
        )
    n = len(ct)
    good = np.ones(n, dtype=bool)
    good[parsed.bad_cells] = False
    incoming = typ.is_in(("incoming_transfer",))
    # Addresses: one sorted dictionary for both columns; "" stands for a missing one (a client).
    logger, peer = _enc(ct, "called_from"), _enc(ct, "who")
    addrs = _sorted_union(pa.array([""]), logger.cats, peer.cats)
    empty = int(pc.index(addrs, "").as_py())
    lg = _mapping(logger.cats, addrs)[logger.codes]
    pe = _mapping(peer.cats, addrs)[peer.codes]
    lg, pe = np.where(lg < 0, empty, lg), np.where(pe < 0, empty, pe)
    source, destination = np.where(incoming, pe, lg), np.where(incoming, lg, pe)
    # The key set of a row, order-independent, to pair an incoming side with its outgoing side:
    # a sum of 64-bit key hashes and the key count (collisions are negligible at 2**-64).
    kenc = pc.dictionary_encode(parsed.key)
    kcats, kcodes = kenc.dictionary, kenc.indices.to_numpy(zero_copy_only=False)
    khash = pd.util.hash_array(
        kcats.to_numpy(zero_copy_only=False).astype(object), categorize=False
    )
    sig = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.add.at(sig, parsed.cell, khash[kcodes])
    nkeys = np.bincount(parsed.cell, minlength=n)
    start, stop = _us(ct, "start", acct, clock), _us(ct, "stop", acct, clock)
    nostart = good & (start == _NAT)
    if nostart.any():
        acct.drop(name, "no usable 'start' time", ct.lines[nostart], column="start")
        good &= ~nostart
    backwards = good & (stop != _NAT) & (stop < start)
    if backwards.any():
        idx = np.flatnonzero(backwards)
        acct.warn(
            name,
            f"'stop' before 'start' (stop treated as absent) x{len(idx)}",
            line=int(ct.lines[idx[0]]),
            column="stop",
        )
        stop = np.where(backwards, _NAT, stop)
    num = {c: _float(ct, c, acct) for c in ("duration", "total", "bandwidth", "compressed")}

    # rank of each row among the rows of its side with the same match key, by (start, row)
    rows = np.flatnonzero(good)
    inc = incoming[rows]
    match = [source[rows], destination[rows], sig[rows], nkeys[rows]]
    o = np.lexsort((rows, _sortable(start[rows]), *reversed(match), inc))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[o] = _rank_in_runs(_run_starts(inc[o], *(m[o] for m in match)))
    side = pd.DataFrame({"src": match[0], "dst": match[1], "sig": match[2], "nk": match[3]})
    side["rank"], side["row"] = rank, rows
    m = side[inc].merge(
        side[~inc], on=["src", "dst", "sig", "nk", "rank"], how="outer", suffixes=("_in", "_out")
    )
    has_in = m["row_in"].notna().to_numpy()
    has_out = m["row_out"].notna().to_numpy()
    r_in = m["row_in"].fillna(-1).to_numpy(dtype=np.int64)
    r_out = m["row_out"].fillna(-1).to_numpy(dtype=np.int64)
    pick = np.where(has_in, r_in, r_out)  # the row whose figures are kept
    comp_row = np.where(has_out, r_out, r_in)  # only the sender logs the compressed size
    src = m["src"].to_numpy(dtype=np.int64)
    dst = m["dst"].to_numpy(dtype=np.int64)
    src, dst = np.where(src == empty, -1, src), np.where(dst == empty, -1, dst)
    order = np.lexsort((pick, _na_last(dst), _na_last(src), _sortable(start[pick])))
    pick, comp_row, src, dst = pick[order], comp_row[order], src[order], dst[order]
    logged = np.where(has_in & has_out, "both", np.where(has_in, "incoming", "outgoing"))[order]
    # one row per key moved, by transfer then key text
    pos = np.full(n, -1, dtype=np.int64)
    pos[pick] = np.arange(len(pick))
    it = pos[parsed.cell]
    keep = np.flatnonzero(it >= 0)
    krank = np.empty(len(kcats), dtype=np.int64)
    krank[pc.sort_indices(kcats).to_numpy()] = np.arange(len(kcats))
    items = keep[np.lexsort((krank[kcodes[keep]], it[keep]))]
    t = it[items]
    rowsel = pick[t]
    nbytes = np.rint(parsed.value.to_numpy(zero_copy_only=False)[items])
    out = pd.DataFrame(
        {
            "transfer": t,
            "key": _str(kcats.take(pa.array(kcodes[items]))),
            "nbytes": pd.array(nbytes).round().astype("Int64"),
            "source": _str(_decode(addrs, src[t])),
            "destination": _str(_decode(addrs, dst[t])),
            "start": _utc(start[rowsel]),
            "stop": _utc(stop[rowsel]),
            "duration": num["duration"][rowsel],
            "total": pd.array(num["total"][rowsel]).round().astype("Int64"),
            "bandwidth": num["bandwidth"][rowsel],
            "compressed": pd.array(num["compressed"][comp_row[t]]).round().astype("Int64"),
            "n_keys": nkeys[rowsel],
            "logged_by": logged[t],
        }
    )
    return conform("transfers", out), _TransferKeys(kcodes[items], kcats)


@dataclass
class _Graphs:
    """Keys and edges of the submitted graphs as codes into ``cats`` (texts, unsorted)."""

    cats: pa.Array
    graph: np.ndarray  # (graph, key, wanted) rows: every key of a graph, and the wanted ones
    key: np.ndarray
    wanted: np.ndarray
    edge_graph: np.ndarray  # distinct (graph, key, dependency) edges, in no particular order
    edge_key: np.ndarray
    edge_dep: np.ndarray


def _distinct(*cols: np.ndarray) -> np.ndarray:
    """Positions of the first occurrence of each distinct row of integer columns (sorted rows)."""
    if not len(cols[0]):
        return np.zeros(0, dtype=np.int64)
    o = _lexorder(*cols)
    return o[_run_starts(*(c[o] for c in cols))]


def _rows(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    """``arr`` at ``idx`` (no copy when that is every row)."""
    if len(idx) == len(arr):
        return arr
    return arr.take(pa.array(idx))


def read_graphs(
    ct: CsvTable, acct: Accounting, clock: _Clock | None = None
) -> tuple[pd.DataFrame, _Graphs]:
    """graph.csv -> (graphs table, keys and edges as codes; see :func:`_dependencies`)."""
    name = ct.name
    deps = parse_column(ct.arrow("dependencies"), "deps")
    wanted = parse_column(ct.arrow("keys"), "set")
    if len(deps.bad_cells):
        acct.drop(
            name,
            "malformed 'dependencies' literal",
            ct.lines[deps.bad_cells],
            column="dependencies",
            detail=deps.bad_detail,
        )
    only_keys_bad = np.setdiff1d(wanted.bad_cells, deps.bad_cells)
    if len(only_keys_bad):
        pos = np.searchsorted(wanted.bad_cells, only_keys_bad)
        acct.drop(
            name,
            "malformed 'keys' literal",
            ct.lines[only_keys_bad],
            column="keys",
            detail=[wanted.bad_detail[i] for i in pos],
        )
    n = len(ct)
    good = np.ones(n, dtype=bool)
    good[np.union1d(deps.bad_cells, wanted.bad_cells)] = False
    dep_ok = np.flatnonzero(good[deps.cell])
    want_ok = np.flatnonzero(good[wanted.cell])
    dcell, wcell = deps.cell[dep_ok], wanted.cell[want_ok]
    texts = [
        _rows(deps.key, dep_ok),
        _rows(deps.value, dep_ok),
        _rows(wanted.key, want_ok),
    ]
    del deps, wanted
    # one dictionary for every key text of the graphs (hashed once, not concatenated)
    parts = [t for t in texts if len(t)]
    enc = pc.dictionary_encode(pa.chunked_array(parts, type=pa.large_string()))
    chunks = iter(enc.chunks)
    kc, vc, wc = (
        next(chunks).indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        if len(t)
        else np.zeros(0, dtype=np.int64)
        for t in texts
    )
    cats = enc.chunk(0).dictionary if enc.num_chunks else pa.array([], type=pa.large_string())
    del texts, parts, enc
    nd = len(dcell)
    has = vc >= 0
    eg, ek, ev = dcell[has].astype(np.int64), kc[has], vc[has]
    e = _distinct(eg, ek, ev)
    g = _Graphs(
        cats,
        np.concatenate([dcell, wcell]).astype(np.int64),
        np.concatenate([kc, wc]),
        np.r_[np.zeros(nd, dtype=bool), np.ones(len(wc), dtype=bool)],
        eg[e],
        ek[e],
        ev[e],
    )
    graphs = pd.DataFrame(
        {
            "graph": np.arange(n),
            "client": _text(ct.get("client")),
            "time": _time(ct, "time", acct, clock),
            "n_wanted": np.bincount(wcell, minlength=n),
            "n_tasks": np.bincount(g.graph[_distinct(g.graph, g.key)], minlength=n),
            "n_edges": np.bincount(g.edge_graph, minlength=n),
        }
    )[good]
    return conform("graphs", graphs), g


def _dependencies(g: _Graphs, gmap: np.ndarray, keys: pa.Array) -> pd.DataFrame:
    """The dependencies table: edges by graph, key text, dependency text."""
    ek, ev = gmap[g.edge_key], gmap[g.edge_dep]
    o = _lexorder(g.edge_graph, ek, ev)
    edges = {
        "graph": pd.array(g.edge_graph[o], dtype="Int64"),
        "key": _str(_decode(keys, ek[o])),
        "dependency": _str(_decode(keys, ev[o])),
    }
    return _table("dependencies", edges)


def read_membership(
    ct: CsvTable, col: str, acct: Accounting, clock: _Clock | None = None
) -> pd.DataFrame:
    """worker.csv / client.csv -> one row per id with first add and last remove time."""
    ct = _drop_null_keys(ct, col, acct)
    action = _text(ct.get("action"))
    known = action.isin(["add", "remove"]).to_numpy()
    if (~known).any():
        acct.drop(
            ct.name,
            "unknown action",
            ct.lines[~known],
            column="action",
            detail=action[~known].astype(str).tolist(),
        )
    df = pd.DataFrame(
        {"id": _text(ct.get(col)), "action": action, "time": _time(ct, "time", acct, clock)}
    )[known]
    added = df[df["action"] == "add"].groupby("id")["time"].min()
    removed = df[df["action"] == "remove"].groupby("id")["time"].max()
    ids = pd.Index(sorted(set(df["id"])))
    return pd.DataFrame(
        {"id": ids, "added": added.reindex(ids).array, "removed": removed.reindex(ids).array}
    )


# ----------------------------------------------------------------------------- consolidation


def _at(values: np.ndarray, idx: np.ndarray, missing: Any) -> np.ndarray:
    """``values[idx]`` with ``missing`` where idx is -1."""
    if len(values) == 0:
        return np.full(len(idx), missing)
    return np.where(idx >= 0, values[np.maximum(idx, 0)], missing)


_TCOLS = ["key", "observer", "address", "from_state", "to_state", "time", "stimulus_id", "line"]


def _transitions(files: list[_Trans], key_cats: pa.Array) -> pd.DataFrame:
    """The transitions table: both files, by time, then observer, then line; text as Categorical.

    Categories are as pandas' ``union_categoricals`` gives them: the first file's, then the new
    ones of the second (for the keys: ``key_cats``, with each file's ``tkey`` codes into them).
    The files' columns no later step uses are released as they are used.
    """
    if not files:
        return conform("transitions", pd.DataFrame(columns=_TCOLS))
    # Rows of each file are in line order and the scheduler's come first: a stable sort by time
    # orders by (time, observer, line).
    order = np.argsort(_sortable(np.concatenate([f.time for f in files])), kind="stable")
    cols: dict[str, Any] = {}
    cols["key"] = _categorical(np.concatenate([f.tkey for f in files])[order], key_cats)
    for f in files:
        f.tkey = None
    for name in ("address", "from_state", "to_state", "stimulus_id"):
        parts = [getattr(f, name) for f in files]
        filled = [p for p in parts if len(p.cats)]
        if len(filled) <= 1:  # one file has the column (stimulus_id: only the scheduler's)
            cats = filled[0].cats if filled else parts[0].cats
            maps = [None if len(p.cats) else np.array([-1], np.int32) for p in parts]
        else:
            cats, maps = _union([p.cats for p in parts])
        codes = np.concatenate(
            [
                p.codes if m is None else m[p.codes].astype(np.int32)
                for p, m in zip(parts, maps, strict=True)
            ]
        )
        for f in files:  # (the executions still need the rest)
            if name == "stimulus_id" or (name == "address" and f.observer == "scheduler"):
                setattr(f, name, None)
        del parts
        cols[name] = _categorical(codes[order], cats)
        del codes
    obs = np.concatenate([np.full(len(f), i, dtype=np.int8) for i, f in enumerate(files)])
    cols["observer"] = _categorical(obs[order], pa.array([f.observer for f in files]))
    cols["time"] = _utc(np.concatenate([f.time for f in files])[order])
    cols["line"] = pd.array(np.concatenate([f.line for f in files])[order], dtype="Int64")
    for f in files:
        f.line = None
    return _table("transitions", cols)


def _categorical(codes: np.ndarray, cats: pa.Array) -> pd.Categorical:
    categories = _index_str(cats)
    # The categories are unique by construction (a dictionary). pandas' check of that hashes them
    # all into a table of Python strings, kept with the dtype: 150 MB and 0.3 s per 10^6 keys.
    fast = getattr(pd.CategoricalDtype, "_from_fastpath", None)
    dtype = fast(categories, False) if fast is not None else pd.CategoricalDtype(categories)
    return pd.Categorical.from_codes(
        codes.astype(np.int32, copy=False), dtype=dtype, validate=False
    )


@dataclass
class _Exec:
    """Executions in code space (keys: run-wide codes; workers: codes into sorted addresses)."""

    key: np.ndarray
    worker: np.ndarray
    start: np.ndarray
    end: np.ndarray
    outcome: pa.Array
    thread: _Threads
    source: np.ndarray  # 0: worker, 1: scheduler
    attempt: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _executions(
    sched: _Trans | None,
    work: _Trans | None,
    nkeys: int,
    wcats: pa.Array,
    acct: Accounting | None = None,
) -> _Exec:
    """One row per execution attempt: worker-side windows, else the scheduler's startstops.

    Inconsistent times are reported to ``acct``: a worker-side end with no start before it
    (the end is not used), a scheduler startstop that ends before it begins (the end is treated
    as absent).
    """
    parts: list[_Exec] = []
    ran = np.zeros(nkeys, dtype=bool)
    if work is not None and len(work):
        running = ("executing", "long-running", "cancelled", "resumed")
        from_run, to_run = work.from_state.is_in(running), work.to_state.is_in(running)
        is_start = work.to_state.is_in(("executing",)) & ~from_run
        is_end = from_run & ~to_run
        ev = np.flatnonzero(is_start | is_end)
        kc, ac = work.gkey[ev], work.address.codes[ev]
        # by key, worker, then time and line (ev is in line order)
        tev = work.time[ev]
        order = _lexorder(kc, ac) if _in_time_order(tev) else _lexorder(kc, ac, _time_key(tev))
        del tev
        ev, kc, ac = ev[order], kc[order], ac[order]
        st = is_start[ev]
        nxt_ok = np.r_[(~st[1:]) & (kc[1:] == kc[:-1]) & (ac[1:] == ac[:-1]), False]
        starts = ev[st]
        ends = np.where(nxt_ok[st], np.r_[ev[1:], -1][st], -1)
        orphan = ~st & ~np.r_[False, (nxt_ok & st)[:-1]]
        if acct is not None and orphan.any():
            acct.warn(
                "worker_transition.csv",
                f"end of an execution with no start before it (times out of order, or the log "
                f"began mid-task; end not used) x{int(orphan.sum())}",
                column="time",
            )
        wmap = _mapping(work.address.cats, wcats)
        parts.append(
            _Exec(
                key=work.gkey[starts],
                worker=wmap[work.address.codes[starts]],
                start=work.time[starts],
                end=_at(work.time, ends, _NAT),
                outcome=work.to_state.take(ends).arrow(),
                thread=work.thread.take(starts),
                source=np.zeros(len(starts), dtype=np.int8),
            )
        )
        ran[work.gkey[starts]] = True
    if sched is not None and len(sched):
        rows = sched.from_state.is_in(("processing",)) & (~sched.thread.na | (sched.begins != _NAT))
        rows &= ~ran[sched.gkey]
        idx = np.flatnonzero(rows)
        ends = sched.ends[idx]
        backwards = (ends != _NAT) & (sched.begins[idx] != _NAT) & (ends < sched.begins[idx])
        if backwards.any():
            if acct is not None:
                acct.warn(
                    "scheduler_transition.csv",
                    f"'ends' before 'begins' (end treated as absent) x{int(backwards.sum())}",
                    column="ends",
                )
            ends = np.where(backwards, _NAT, ends)
        if len(idx):
            parts.append(
                _Exec(
                    key=sched.gkey[idx],
                    worker=_mapping(sched.worker.cats, wcats)[sched.worker.codes[idx]],
                    start=sched.begins[idx],
                    end=ends,
                    outcome=sched.to_state.take(idx).arrow(),
                    thread=sched.thread.take(idx),
                    source=np.ones(len(idx), dtype=np.int8),
                )
            )
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return _Exec(z, z, z, z, pa.array([], pa.string()), _Threads(z.astype(np.uint64), z > 0), z)
    ex = _Exec(
        key=np.concatenate([p.key for p in parts]),
        worker=np.concatenate([p.worker for p in parts]),
        start=np.concatenate([p.start for p in parts]),
        end=np.concatenate([p.end for p in parts]),
        outcome=pa.concat_arrays([p.outcome.cast(pa.string()) for p in parts]),
        thread=_Threads(
            np.concatenate([p.thread.values for p in parts]),
            np.concatenate([p.thread.na for p in parts]),
        ),
        source=np.concatenate([p.source for p in parts]),
    )
    # The thread of a worker-side execution comes from the scheduler's row for the same key and
    # worker (the latest one; a missing worker matches a missing worker).
    if sched is not None and len(sched) and ex.thread.na.any():
        nw = len(wcats) + 1
        has = np.flatnonzero(~sched.thread.na)
        swork = _mapping(sched.worker.cats, wcats)[sched.worker.codes[has]]
        pair = sched.gkey[has] * nw + (swork + 1)
        o = _lexorder(pair, _time_key(sched.time[has]))
        ps = pair[o]
        if len(ps):
            last = np.r_[ps[1:] != ps[:-1], True]
            upair, uthread = ps[last], sched.thread.values[has][o][last]
            expair = ex.key * nw + (ex.worker + 1)
            i = np.minimum(np.searchsorted(upair, expair), len(upair) - 1)
            fill = ex.thread.na & (upair[i] == expair)
            ex.thread.values = np.where(fill, uthread[i], ex.thread.values)
            ex.thread.na = ex.thread.na & ~fill
    # by key, start, worker (texts sort like their codes; missing last); attempts count per key
    o = _lexorder(ex.key, _time_key(ex.start), np.where(ex.worker < 0, len(wcats), ex.worker))
    ex = _Exec(
        key=ex.key[o],
        worker=ex.worker[o],
        start=ex.start[o],
        end=ex.end[o],
        outcome=ex.outcome.take(pa.array(o)),
        thread=_Threads(ex.thread.values[o], ex.thread.na[o]),
        source=ex.source[o],
    )
    ex.attempt = _rank_in_runs(_run_starts(ex.key))
    return ex


def _executions_table(ex: _Exec, keys: pa.Array, wcats: pa.Array) -> pd.DataFrame:
    return _table(
        "executions",
        {
            "key": _str(_decode(keys, ex.key)),
            "attempt": pd.array(ex.attempt, dtype="Int64"),
            "worker": _str(_decode(wcats, ex.worker)),
            "thread": ex.thread.array(),
            "start": _utc(ex.start),
            "end": _utc(ex.end),
            "outcome": _str(ex.outcome),
            "time_source": _source_text(ex.source),
            "window": _str(
                pa.array(["hook", "scheduler"]).take(
                    pa.array(ex.source.astype(np.int64), mask=ex.source < 0)
                )
            ),
        },
    )


def _source_text(source: np.ndarray) -> pd.Series:
    """0 -> 'worker', 1 -> 'scheduler', -1 -> missing."""
    names = pa.array(["worker", "scheduler"])
    return _str(names.take(pa.array(source.astype(np.int64), mask=source < 0)))


def consolidate(
    records: RunRecords,
    sched: _Trans | None,
    work: _Trans | None,
    graphs: _Graphs | None,
    transfer_keys: _TransferKeys | None,
) -> None:
    """Fill ``records.tasks``, ``executions``, ``transitions``, ``threads`` and ``dependencies``."""
    sched = sched if sched is not None and len(sched) else None
    work = work if work is not None and len(work) else None
    # Every key text of the run, hashed once: the transition files' keys come first, so the first
    # texts are their categories; sorted once, for the tasks and every sort by key.
    files = [f for f in (sched, work) if f is not None]
    parts = [f.key.cats for f in files]
    if graphs is not None:
        parts.append(graphs.cats)
    if transfer_keys is not None:
        parts.append(transfer_keys.cats)
    texts, maps = _union(parts)
    keys, rank = _ranks(texts)
    n = len(keys)
    n_trans = max((int(m.max()) + 1 for m in maps[: len(files)]), default=0)
    key_cats = texts.slice(0, n_trans)
    for f, m in zip(files, maps, strict=False):
        f.tkey = m[f.key.codes].astype(np.int32)
        f.gkey = rank[f.tkey]
        f.key = None
    gmap = rank[maps[len(files)]] if graphs is not None else None
    tmap = rank[maps[-1]] if transfer_keys is not None else None
    del texts, maps, rank
    # first the largest table, releasing what no later step needs
    records.transitions = _transitions(files, key_cats)
    del key_cats
    _release_memory()
    if graphs is not None:
        records.dependencies = _dependencies(graphs, gmap, keys)
        graph_of, wanted_of = graphs.graph, graphs.wanted
        gc = gmap[graphs.key]
        graphs.cats = graphs.key = graphs.edge_graph = graphs.edge_key = graphs.edge_dep = None
        del gmap
    # worker addresses of executions, sorted
    wcats = _sorted_union(
        work.address.cats if work is not None else None,
        sched.worker.cats if sched is not None else None,
    )
    ex = _executions(sched, work, n, wcats, records.accounting)
    records.executions = _executions_table(ex, keys, wcats)

    tasks: dict[str, Any] = {"key": _str(keys)}
    n_proc = np.zeros(n, dtype=np.int64)
    erred = np.zeros(n, dtype=bool)
    n_tr = np.zeros(n, dtype=np.int64)
    prefix = group = state = None
    nbytes = np.full(n, np.nan)
    if sched is not None:
        kc = sched.gkey
        # rows by (key, time, line): the first with a prefix, the last, the last carrying results
        order = _key_time_order(kc, sched.time)
        first_pg = _first_in_order(kc, order, n, sched.prefix.codes >= 0)
        last = _last_in_order(kc, order, n)
        carries = ~sched.thread.na | (sched.begins != _NAT) | ~np.isnan(sched.size)
        fin = _last_in_order(kc, order, n, carries)
        del order
        prefix = sched.prefix.take(first_pg).arrow()
        group = sched.group.take(first_pg).arrow()
        state = sched.to_state.take(last).arrow()
        tasks["sched_begins"] = _utc(_at(sched.begins, fin, _NAT))
        tasks["sched_ends"] = _utc(_at(sched.ends, fin, _NAT))
        nbytes = _at(sched.size, fin, np.nan)
        n_proc = np.bincount(kc[sched.to_state.is_in(("processing",))], minlength=n)
        erred |= np.bincount(kc[sched.to_state.is_in(("erred",))], minlength=n) > 0
        n_tr += np.bincount(kc, minlength=n)
        sched.release()
    if work is not None:
        kc = work.gkey
        last = _last_in_order(kc, _key_time_order(kc, work.time), n)
        wstate = work.to_state.take(last).arrow()
        state = wstate if state is None else pc.coalesce(state, wstate)
        erred |= np.bincount(kc[work.to_state.is_in(("error",))], minlength=n) > 0
        n_tr += np.bincount(kc, minlength=n)
        work.release()
    if state is not None:
        tasks["state"] = _str(state)
    if sched is not None:
        tasks["nbytes"] = pd.Series(nbytes).round().astype("Int64")
    # prefix and group the scheduler never reported: from the key, as Dask derives them
    if prefix is None:
        grp, pre = key_split(_str(keys))
    else:
        pre, grp = _str(prefix), _str(group)
        if pre.isna().any():
            need = np.flatnonzero(pre.isna().to_numpy() | grp.isna().to_numpy())
            g2, p2 = key_split(_str(keys.take(pa.array(need))))
            pre.iloc[need] = pre.iloc[need].fillna(pd.Series(p2.array, index=need))
            grp.iloc[need] = grp.iloc[need].fillna(pd.Series(g2.array, index=need))
    tasks["prefix"], tasks["group"] = pre, grp

    final = _last_in_order(ex.key, None, n)  # ex is by key, then attempt
    n_exec = np.bincount(ex.key, minlength=n)
    tasks["worker"] = _str(_decode(wcats, _at(ex.worker, final, -1)))
    tasks["thread"] = ex.thread.take(final).array()
    start, end = _at(ex.start, final, _NAT), _at(ex.end, final, _NAT)
    tasks["start"], tasks["end"] = _utc(start), _utc(end)
    tasks["time_source"] = _source_text(_at(ex.source, final, -1))
    tasks["duration"] = (tasks["end"] - tasks["start"]).dt.total_seconds()
    tasks["n_transitions"] = pd.array(n_tr, dtype="Int64")
    tasks["n_executions"] = pd.array(n_exec, dtype="Int64")
    err_ex = pc.is_in(ex.outcome, pa.array(["error", "erred"])).to_numpy(zero_copy_only=False)
    erred |= np.bincount(ex.key[err_ex], minlength=n) > 0
    tasks["erred"] = pd.array(erred, dtype="boolean")
    tasks["retried"] = pd.array((n_exec > 1) | (n_proc > 1), dtype="boolean")
    # A key moved between workers, or with a result size, existed in memory: it ran somewhere.
    moved = np.zeros(n, dtype=bool)
    if transfer_keys is not None and len(transfer_keys.codes):
        moved[tmap[transfer_keys.codes]] = True
    tasks["never_ran"] = pd.array((n_exec == 0) & ~moved & np.isnan(nbytes), dtype="boolean")
    if graphs is not None and len(gc):
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, gc, graph_of)  # the first graph holding the key
        graph = pd.array(np.where(first < np.iinfo(np.int64).max, first, 0), dtype="Int64")
        graph[first == np.iinfo(np.int64).max] = pd.NA
        tasks["graph"] = graph
        wanted = np.zeros(n, dtype=bool)
        wanted[gc[wanted_of]] = True
        tasks["wanted"] = pd.array(wanted, dtype="boolean")
        client_of = records.graphs.set_index("graph")["client"]
        tasks["client"] = client_of.reindex(pd.Series(graph).astype("float64")).array
    else:
        tasks["wanted"] = pd.array(np.zeros(n, dtype=bool), dtype="boolean")
    records.tasks = _table("tasks", tasks)

    # tasks per (worker, thread), executions without a worker or a thread left out
    sel = np.flatnonzero(~ex.thread.na & (ex.worker >= 0))
    w, t = ex.worker[sel], ex.thread.values[sel]
    o = np.lexsort((t, w))
    w, t = w[o], t[o]
    new = _run_starts(w, t)
    counts = np.diff(np.r_[np.flatnonzero(new), len(w)])
    th = pd.DataFrame(
        {
            "worker": _str(_decode(wcats, w[new])),
            "thread": pd.arrays.IntegerArray(t[new].astype(np.uint64), np.zeros(new.sum(), bool)),
            "n_tasks": counts,
        }
    )
    records.threads = conform("threads", th)


_KEY_SPLIT = r"^(?P<head>[^-]*)(?P<rest>(?:-(?![0-9a-f]{8}(?:-|$))[A-Za-z]+(?=-|$))*)"


def key_split(keys: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(group, prefix) of Dask keys, vectorised, as ``dask.utils.key_split_group`` / ``key_split``.

    The scheduler names these itself; this is only used for keys it never reported (tasks seen only
    in a submitted graph or a transfer).
    """
    s = keys.astype("str")
    is_tuple = s.str.startswith("(")
    first = s.where(~is_tuple, s.str.split(",", n=1).str[0].str.strip("()\"'"))
    parts = first.str.extract(_KEY_SPLIT)
    head = parts["head"].fillna("")
    alpha = head.str.match(r"^[A-Za-z]")
    head = head.where(alpha, head.str.split(",").str[0].str.strip("_'()\""))
    prefix = head + parts["rest"].fillna("")
    prefix = prefix.where(~prefix.str.fullmatch(r"[a-f0-9]{32}"), "data")
    group = first.where(is_tuple, prefix)
    return group, prefix


# ----------------------------------------------------------------------------- one partition


_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def fnv64(texts: pa.Array) -> np.ndarray:
    """FNV-1a (64 bit) of the UTF-8 bytes of each text, then a 64-bit finaliser (nulls as ""):
    fixed, so every machine, version and process agrees (Python's and polars' hashes are seeded
    or version-dependent)."""
    arr = pc.fill_null(pc.cast(texts, pa.large_string()), "")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    m = len(arr)
    if m == 0:
        return np.zeros(0, np.uint64)
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], np.int64, m + 1, arr.offset)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    start, lens = off[:-1], np.diff(off)
    h = np.full(m, _FNV_OFFSET)
    with np.errstate(over="ignore"):
        # one vector step per byte position (keys are tens of bytes long)
        for j in range(int(lens.max())):
            sel = np.flatnonzero(lens > j)
            h[sel] = (h[sel] ^ data[start[sel] + j].astype(np.uint64)) * _FNV_PRIME
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
    return h


@dataclass
class KeySelection:
    """Which records to read when a run is read in partitions of its keys (a huge run mapped on
    several workers, see :mod:`metaprov.export.partition`).

    The rows of the keys the partition owns are read, and those of their direct dependencies
    (learnt from ``graph.csv``, read first): a task's triples depend on whether each dependency
    holds a result. Transfers and the small files are read whole (transfer ids are ranks over
    every transfer). Rows without a key are kept by the partition that owns ``None`` (one of
    them), so they are accounted once.

    Attributes:
        owns: per key text (a pyarrow string array), whether the partition owns the key.
        keeps_keyless: this partition reports the rows that have no key.
        transitions: read the transition files (False: the run-level part, which needs none).
    """

    owns: Callable[[pa.Array], np.ndarray]
    keeps_keyless: bool = False
    transitions: bool = True
    needed: pa.Array = field(default_factory=lambda: pa.array([], pa.large_string()))

    def _wanted(self, texts: pa.Array) -> np.ndarray:
        texts = texts.cast(pa.large_string())
        inneed = pc.is_in(texts, value_set=self.needed).to_numpy(zero_copy_only=False)
        return np.asarray(self.owns(texts), dtype=bool) | inneed

    def learn(self, g: _Graphs) -> None:
        """Keep the graph rows of this partition: edges from or to an owned key, membership of
        owned and needed keys; remember the owned keys' dependencies as needed."""
        own = np.asarray(self.owns(g.cats), dtype=bool)
        own_edge = own[g.edge_key]
        self.needed = pc.unique(g.cats.take(pa.array(np.unique(g.edge_dep[own_edge])))).cast(
            pa.large_string()
        )
        keep_edge = own_edge | own[g.edge_dep]
        g.edge_graph, g.edge_key, g.edge_dep = (
            g.edge_graph[keep_edge],
            g.edge_key[keep_edge],
            g.edge_dep[keep_edge],
        )
        wanted = self._wanted(g.cats)
        self._remember(g.cats, own, wanted)
        member = wanted[g.key]
        g.graph, g.key, g.wanted = g.graph[member], g.key[member], g.wanted[member]
        # only the texts still referenced (the others would become keys without records)
        used = np.unique(np.concatenate([g.key, g.edge_key, g.edge_dep]))
        remap = np.full(len(g.cats), -1, np.int64)
        remap[used] = np.arange(len(used))
        g.cats = g.cats.take(pa.array(used))
        g.key, g.edge_key, g.edge_dep = remap[g.key], remap[g.edge_key], remap[g.edge_dep]

    def masks(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Per row of a block of a transition file: keep it (a key owned or needed; without a
        key: this partition reports those), and count it as read here (owned keys only, so the
        partitions' accounts add up to the file's)."""
        col = table.column("key")
        enc = col.combine_chunks() if pa.types.is_dictionary(col.type) else None
        if enc is None:
            enc = pc.dictionary_encode(col.cast(pa.large_string()).combine_chunks())
        cats = enc.dictionary.cast(pa.large_string())
        owned, wanted = self._decide(cats)
        codes = enc.indices.to_numpy(zero_copy_only=False)
        valid = enc.indices.is_valid().to_numpy(zero_copy_only=False)
        safe = np.where(valid, codes, 0).astype(np.int64)
        keep = np.where(valid, wanted[safe] if len(cats) else False, self.keeps_keyless)
        mine = np.where(valid, owned[safe] if len(cats) else False, self.keeps_keyless)
        return keep, mine

    def _remember(self, keys: pa.Array, own: np.ndarray, wanted: np.ndarray) -> None:
        """Keep the decision for every key of the graph, found again by a 64-bit hash of its
        text (then compared as text): a transition file names each key in many blocks, and
        deciding from scratch (quoting and hashing the key) per block costs more than parsing."""
        h = fnv64(keys)
        order = np.argsort(h, kind="stable")
        self._keys = keys.cast(pa.large_string())
        self._hash, self._order = h[order], order
        self._own, self._want = own, wanted

    def _decide(self, cats: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(owned, wanted) per distinct key text of a block."""
        n = len(cats)
        owned = np.zeros(n, dtype=bool)
        wanted = np.zeros(n, dtype=bool)
        rest = np.ones(n, dtype=bool)
        hs = getattr(self, "_hash", None)
        if hs is not None and len(hs) and n:
            h = fnv64(cats)
            pos = np.minimum(np.searchsorted(hs, h), len(hs) - 1)
            hit = np.flatnonzero(hs[pos] == h)
            row = self._order[pos[hit]]
            same = pc.equal(self._keys.take(pa.array(row)), cats.take(pa.array(hit)))
            same = same.to_numpy(zero_copy_only=False).astype(bool)
            hit, row = hit[same], row[same]
            owned[hit], wanted[hit], rest[hit] = self._own[row], self._want[row], False
        if rest.any():  # keys the graph does not name (or a hash shared by two keys)
            idx = np.flatnonzero(rest)
            sub = cats.take(pa.array(idx))
            o = np.asarray(self.owns(sub), dtype=bool)
            owned[idx] = o
            wanted[idx] = o | pc.is_in(sub, value_set=self.needed).to_numpy(zero_copy_only=False)
        return owned, wanted

    def selection(self) -> RowSelection:
        """The rows of a transition file this partition reads, chosen block by block as the
        file is read (see :func:`metaprov.ingest.csvread.read_csv`)."""
        return RowSelection(self.masks, reports_rest=self.keeps_keyless)

    @staticmethod
    def reencode(ct: CsvTable) -> CsvTable:
        """The key column re-encoded so its dictionary holds only the keys kept (other columns
        keep theirs: a worker address seen in any row is a worker of the run, whichever
        partition reads the row)."""
        key = pc.dictionary_encode(ct.arrow("key").cast(pa.string()))
        table = ct.table.set_column(ct.table.column_names.index("key"), "key", key)
        return CsvTable(ct.name, table, ct.lines)


def run_id(records: RunRecords) -> str:
    """Content-derived run id: scheduler address, first event time, clients and key count."""
    first, _ = records.span
    return run_id_of_facts(
        records.scheduler.get("address"),
        first,
        records.clients["client"],
        len(records.tasks),
        records.workers["address"],
    )


def run_id_of_facts(
    scheduler: Any, first: Any, clients: pd.Series, n_tasks: int, workers: pd.Series
) -> str:
    """:func:`run_id` from its facts (a run read in partitions combines them first)."""
    parts = [
        str(scheduler or ""),
        "" if first is None else str(first.value if hasattr(first, "value") else first),
        ",".join(sorted(set(clients.dropna().astype(str)))),
        str(n_tasks),
        ",".join(sorted(set(workers.dropna().astype(str)))),
    ]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def read_dask_csvs(
    run: Path, records: RunRecords, progress: Any = None, keys: KeySelection | None = None
) -> None:
    """Read the six CSV files of ``run`` into ``records`` (missing files are recorded).

    ``keys``: read one partition of the run's keys only (see :class:`KeySelection`).
    """
    acct = records.accounting
    later: list[_Deferred] = []  # findings about the files' content, reported after the reads

    def step(name: str, fn: Any, select: RowSelection | None = None) -> Any:
        # read one file and turn it into codes at once: its table is freed before the next read
        ct = _read(run, name, acct, select)
        if progress is not None:
            progress.update(1)
        later.append(_Deferred())
        out = fn(ct, later[-1]) if ct is not None else None
        del ct
        _release_memory()
        return out

    clock = _Clock()  # every time is checked against the first file's (see _Clock)
    transfer_keys = graphs = None
    if keys is not None:
        # a partition learns its tasks' dependencies from the graph before reading transitions
        out = step("graph.csv", lambda ct, d: read_graphs(ct, d, clock))
        if out is not None:
            records.graphs, graphs = out
            keys.learn(graphs)

    def transitions(name: str, observer: str) -> _Trans | None:
        if keys is None:
            return step(name, lambda ct, d: read_transitions(ct, observer, d, clock))
        if not keys.transitions:
            return None
        return step(
            name,
            lambda ct, d: read_transitions(keys.reencode(ct), observer, d, clock),
            keys.selection(),
        )

    sched = transitions("scheduler_transition.csv", "scheduler")
    work = transitions("worker_transition.csv", "worker")
    out = step("worker_transfer.csv", lambda ct, d: read_transfers(ct, d, clock))
    if out is not None:
        records.transfers, transfer_keys = out
    if keys is None:
        out = step("graph.csv", lambda ct, d: read_graphs(ct, d, clock))
        if out is not None:
            records.graphs, graphs = out
    workers = step("worker.csv", lambda ct, d: read_membership(ct, "worker", d, clock))
    clients = step("client.csv", lambda ct, d: read_membership(ct, "client", d, clock))
    for d in later:
        d.replay(acct)
    records.missing = [n for n in CSV_FILES if not (run / n).exists()]

    if sched is not None and len(sched):
        counts = pd.Series(
            pd.Categorical.from_codes(
                sched.address.codes,
                dtype=pd.CategoricalDtype(_index_str(sched.address.cats)),
                validate=False,
            )
        ).value_counts()
        if len(counts) and counts.iloc[0] > 0:
            records.scheduler["address"] = str(counts.index[0])

    # Workers: from worker.csv, plus every address that logged or ran something.
    seen = [
        workers["id"] if workers is not None else None,
        _str(work.address.cats) if work is not None and len(work) else None,
        _str(sched.worker.cats) if sched is not None and len(sched) else None,
        records.transfers["source"],
        records.transfers["destination"],
    ]
    addrs = (
        sorted(
            set(
                pd.concat([s for s in seen if s is not None and len(s)], ignore_index=True)
                .dropna()
                .astype(str)
                .unique()
            )
        )
        if any(s is not None and len(s) for s in seen)
        else []
    )
    wdf = pd.DataFrame({"address": pd.Series(addrs, dtype=object)})
    if workers is not None:
        right = workers.rename(columns={"id": "address"})
        right["address"] = right["address"].astype(object)
        wdf = wdf.merge(right, on="address", how="left")
    wdf["host"] = wdf["address"].str.extract(r"^[a-z]+://\[?([^\]/]+?)\]?:\d+$", expand=False)
    records.workers = conform("workers", wdf)

    cl = sorted(
        set(clients["id"])
        if clients is not None
        else set() | set(records.graphs["client"].dropna().astype(str))
    )
    cl = sorted(set(cl) | set(records.graphs["client"].dropna().astype(str)))
    # object columns on both sides, also when a file holds its header only (a run in progress)
    cdf = pd.DataFrame({"client": pd.Series(cl, dtype=object)})
    if clients is not None:
        right = clients.rename(columns={"id": "client"})
        right["client"] = right["client"].astype(object)
        cdf = cdf.merge(right, on="client", how="left")
    records.clients = conform("clients", cdf)

    consolidate(records, sched, work, graphs, transfer_keys)
