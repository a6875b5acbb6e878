"""Sorting, grouping and picking over integer codes: the steps every CSV table shares.

Keys, addresses and states are dictionary codes (see :mod:`.columns`); a time is int64
microseconds with NaT as the smallest int64. These functions order rows by such columns, find
the runs of equal values, and pick the first or last row of each, without a Python object per row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.timeutil import NAT_US as _NAT


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


def _distinct(*cols: np.ndarray) -> np.ndarray:
    """Positions of the first occurrence of each distinct row of integer columns (sorted rows)."""
    if not len(cols[0]):
        return np.zeros(0, dtype=np.int64)
    o = _lexorder(*cols)
    return o[_run_starts(*(c[o] for c in cols))]


def _at(values: np.ndarray, idx: np.ndarray, missing: Any) -> np.ndarray:
    """``values[idx]`` with ``missing`` where idx is -1."""
    if len(values) == 0:
        return np.full(len(idx), missing)
    return np.where(idx >= 0, values[np.maximum(idx, 0)], missing)
