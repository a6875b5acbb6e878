"""Refresh a followed run's graph by formatting only the rows that changed.

Input: the mapped blocks of two refreshes of the same run (:class:`~metaprov.mapping.Block`:
one row per subject, one column per predicate). Output: the N-Triples lines to delete and to
insert, exactly those of a full conversion's diff (:func:`metaprov.live.lines.diff`), found
without formatting, keying and sorting every line of the run at every refresh.

**Why it is exact.** A row's N-Triples lines are a function of the row alone: its subject and
its values with their columns' predicates, term kinds and datatypes
(:func:`metaprov.write.rows.write_nt` formats each row by an element-wise join of its own
values). So a row whose subject and values (in the same roles: predicates, term kinds, datatypes) are
those of a row of the previous refresh has the same lines: only rows that are new or changed are formatted (their lines may come into
the graph), and the previous refresh's rows that are gone (their lines may leave it). A line can
be produced by more than one row (two blocks stating the same triple), so each distinct line
keeps a count of the rows producing it: a line leaves the graph when its count drops to zero,
comes into it when its count rises from zero.

**Keys.** Rows and lines are identified by 128-bit keys: two keyed 64-bit polars hashes with
the process's secret seeds (:data:`metaprov.live.lines.SEEDS`; the bound in that module's doc
applies to rows and lines alike). A row key sums the keyed hashes of its subject and of each
value, each hashed with a seed salted by its column's role (predicate, term kind, datatype):
see :func:`row_keys`.

**Cost.** Per refresh: the run is read and mapped as before (its columns), each block's rows are
hashed (~0.2 s for 380 k rows at 10^5 tasks), and only the changed rows are formatted and their
lines keyed; the lines of the whole run are neither formatted nor held as text (only their keys
and counts: 24 bytes a line). docs/live.md compares it with the full conversion.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from metaprov.live.lines import LARGE, LineSet, as_bytes_lines, lookup, split_lines, take_lines
from metaprov.mapping.block import Block, Column

_U64 = np.uint64


def _salt(*parts: object) -> int:
    """A 64-bit value naming a column's role in a row key (its predicate, term kind, datatype,
    constant value): mixed into the hash seeds, so equal values in different roles hash apart."""
    text = "\x1f".join(repr(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def row_keys(block: Block, seeds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The 128-bit key (two uint64 arrays) of each row of ``block``.

    Each key is a sum (modulo 2^64) over the row's terms of keyed hashes: the subject, and each
    column's value hashed with a seed salted by the column's predicate, kind and datatype (a
    constant column: by its value too); a null value adds nothing, so a row keeps its key when
    another row makes a column appear in its block (the lines of a row depend on its own values
    only). Equal keys: equal lines (but for a hash collision, see the module doc)."""
    import polars as pl

    cached = getattr(block, "_row_keys", None)
    if cached is not None and cached[0] == seeds:
        return cached[1], cached[2]
    n = len(block)
    out = []
    for seed in seeds:
        acc = pl.Series(block.subjects).hash(seed ^ _salt("subject")).to_numpy().astype(_U64)
        for c in block.columns:
            salt = _salt(c.predicate, c.kind, c.datatype, c.multi)
            if isinstance(c.values, str):
                one = pl.Series([c.values]).hash(seed ^ _salt(salt, c.values)).to_numpy()
                acc += np.full(n, one[0], dtype=_U64)
                continue
            h = pl.Series(c.values).hash(seed ^ salt).to_numpy().astype(_U64)
            if c.values.null_count:
                h[np.asarray(c.values.is_null())] = 0
            acc += h
        out.append(acc)
    # kept on the block: computed where it is mapped (overlapping the mapping thread), used by
    # advance()
    block._row_keys = (seeds, out[0], out[1])  # type: ignore[attr-defined]
    return out[0], out[1]


def take_rows(block: Block, mask: np.ndarray) -> Block:
    """The rows of ``block`` where ``mask`` is true (same columns, same signature)."""
    keep = pa.array(mask)
    cols = [
        Column(
            c.predicate,
            c.values if isinstance(c.values, str) else c.values.filter(keep),
            c.kind,
            c.datatype,
        )
        for c in block.columns
    ]
    return Block(block.subjects.filter(keep), cols, restates=block.restates)


def format_rows(blocks: list[Block], which: np.ndarray, row: np.ndarray) -> pa.ChunkedArray:
    """The N-Triples lines of the rows ``row`` of the blocks ``which`` (one entry per line a
    row produces: a line two rows produce is there twice)."""
    from metaprov.write.rows import write_nt

    chunks: list[pa.Array] = []
    if len(which):
        order = np.argsort(which, kind="stable")
        which, row = which[order], row[order]
        bounds = np.flatnonzero(np.diff(which)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(which)], strict=True):
            block = blocks[int(which[lo])]
            mask = np.zeros(len(block), dtype=bool)
            mask[row[lo:hi]] = True
            buf = io.BytesIO()
            write_nt(take_rows(block, mask), buf)
            if buf.tell():
                chunks.append(split_lines(buf.getvalue()))
    return pa.chunked_array(chunks, type=LARGE)


@dataclass
class RowState:
    """What the store's graph was made of, row by row (for the next refresh's difference).

    Attributes:
        blocks: the refresh's blocks (their rows are formatted again only when they leave).
        ra, rb: the key of each distinct row, ordered by ``ra`` (unique).
        rblock, rrow: where that row is in :attr:`blocks`.
        la, lb: the key of each distinct line of the graph, ordered by ``la`` (unique).
        ln: how many rows produce each line.
    """

    blocks: list[Block]
    ra: np.ndarray
    rb: np.ndarray
    rblock: np.ndarray
    rrow: np.ndarray
    la: np.ndarray
    lb: np.ndarray
    ln: np.ndarray

    def __len__(self) -> int:
        """Distinct lines (triples)."""
        return len(self.la)


def _positions(blocks: list[Block]) -> tuple[np.ndarray, np.ndarray]:
    """(block, row) of every row of the blocks, in order."""
    which = [np.full(len(b), i, dtype=np.int32) for i, b in enumerate(blocks)]
    row = [np.arange(len(b), dtype=np.int64) for b in blocks]
    return (
        np.concatenate(which or [np.zeros(0, np.int32)]),
        np.concatenate(row or [np.zeros(0, np.int64)]),
    )


def _rows_of(blocks: list[Block], seeds: tuple[int, int]) -> tuple[np.ndarray, ...] | None:
    """Distinct rows of the blocks: (ra, rb, block, row) ordered by ra; None when two
    different rows share ``ra`` (a 64-bit collision: the caller converts in full)."""
    keys = [row_keys(b, seeds) for b in blocks]
    ra = np.concatenate([k[0] for k in keys]) if keys else np.zeros(0, _U64)
    rb = np.concatenate([k[1] for k in keys]) if keys else np.zeros(0, _U64)
    rblock, rrow = _positions(blocks)
    order = _order(ra)
    ra, rb, rblock, rrow = ra[order], rb[order], rblock[order], rrow[order]
    # identical rows (same key) produce identical lines: held once
    starts = _runs(ra, rb)
    if starts is None:
        return None
    return ra[starts], rb[starts], rblock[starts], rrow[starts]


def _counted(
    lines: pa.ChunkedArray | LineSet, seeds: tuple[int, int]
) -> tuple[np.ndarray, ...] | None:
    """Distinct line keys of ``lines`` with how often each occurs: (a, b, count, first row of
    each in ``lines``), ordered by a; None on a 64-bit collision of ``a``."""
    ls = lines if isinstance(lines, LineSet) else LineSet.of(lines.chunks, seeds)
    if not ls.a_unique or ls.counts is None:
        return None
    return ls.a, ls.b, ls.counts.astype(np.int64, copy=False), ls.rows


def _order(a: np.ndarray) -> np.ndarray:
    """The order sorting ``a`` (polars' multi-threaded sort; equal keys are equal, so which of
    them comes first does not matter)."""
    import polars as pl

    if not len(a):
        return np.zeros(0, np.int64)
    return pl.Series("a", a).arg_sort().to_numpy()


def _runs(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """Start of each run of equal keys in keys sorted by ``a``; None when two different keys
    share ``a`` (a 64-bit collision: the caller takes the exact path instead)."""
    same_a = a[1:] == a[:-1]
    if bool((same_a & (b[1:] != b[:-1])).any()):
        return None
    first = np.ones(len(a), dtype=bool)
    first[1:] = ~same_a
    return np.flatnonzero(first)


def start(
    blocks: list[Block], lines: pa.ChunkedArray | LineSet, seeds: tuple[int, int]
) -> RowState | None:
    """The row state of a refresh converted in full (``lines``: all its blocks' lines, one entry
    per line a row produces, or their :class:`~metaprov.live.lines.LineSet` already keyed with
    ``seeds``); None when a 64-bit collision makes the row path unsafe."""
    rows = _rows_of(blocks, seeds)
    if rows is None:
        return None
    if len(rows[0]) < sum(len(b) for b in blocks):
        # some rows were repeated: the lines are counted from the distinct rows only
        lines = format_rows(blocks, rows[2], rows[3])
    counted = _counted(lines, seeds)
    if counted is None:
        return None
    return RowState(blocks, *rows, *counted[:3])


def advance(
    state: RowState, blocks: list[Block], seeds: tuple[int, int]
) -> tuple[list[bytes], list[bytes], RowState, int] | None:
    """The next refresh from its blocks: (lines to delete, lines to insert, the new state, rows
    formatted). None when the row path cannot decide exactly (a 64-bit collision among the new
    keys): the caller converts in full."""
    rows = _rows_of(blocks, seeds)
    if rows is None:
        return None
    ra, rb, rblock, rrow = rows
    found, pos = lookup(state.ra, state.rb, ra, rb)
    kept = np.zeros(len(state.ra), dtype=bool)
    kept[pos[found]] = True
    come = format_rows(blocks, rblock[~found], rrow[~found])
    gone = format_rows(state.blocks, state.rblock[~kept], state.rrow[~kept])
    c_new, g_new = _counted(come, seeds), _counted(gone, seeds)
    if c_new is None or g_new is None:
        return None
    # net change of each line's count: +1 per new row producing it, -1 per row gone
    a = np.concatenate([c_new[0], g_new[0]])
    b = np.concatenate([c_new[1], g_new[1]])
    delta = np.concatenate([c_new[2], -g_new[2]])
    src = np.concatenate([np.zeros(len(c_new[0]), np.int8), np.ones(len(g_new[0]), np.int8)])
    srow = np.concatenate([c_new[3], g_new[3]])
    order = _order(a)
    a, b, delta, src, srow = a[order], b[order], delta[order], src[order], srow[order]
    starts = _runs(a, b)
    if starts is None:
        return None
    net = np.add.reduceat(delta, starts) if len(starts) else np.zeros(0, np.int64)
    ua, ub = a[starts], b[starts]
    held, hpos = lookup(state.la, state.lb, ua, ub)
    before = np.where(held, state.ln[hpos] if len(state.ln) else 0, 0)
    after = before + net
    if bool((after < 0).any()):
        return None  # a row left that the state never counted: not exact, convert in full
    leaves = (before > 0) & (after == 0)
    enters = (before == 0) & (after > 0)
    # the text of a leaving line comes from a gone row, of an entering line from a new row:
    # the first occurrence of its key among the sorted entries is of either source, so pick
    # per key the entry of the right source
    removed = _texts(gone, _rows_for(a, b, src, srow, ua[leaves], ub[leaves], 1))
    added = _texts(come, _rows_for(a, b, src, srow, ua[enters], ub[enters], 0))
    # the new line keys: counts updated, lines gone dropped, lines new inserted (sorted)
    ln = state.ln.copy()
    ln[hpos[held]] = after[held]
    keep = ln > 0
    la, lb = state.la, state.lb
    if not keep.all():
        la, lb, ln = la[keep], lb[keep], ln[keep]
    ia, ib, inn = ua[enters], ub[enters], after[enters]
    at = np.searchsorted(la, ia)
    la, lb, ln = np.insert(la, at, ia), np.insert(lb, at, ib), np.insert(ln, at, inn)
    if len(la) > 1 and bool((la[1:] == la[:-1]).any()):
        return None
    new_state = RowState(blocks, ra, rb, rblock, rrow, la, lb, ln)
    return removed, added, new_state, int((~found).sum() + (~kept).sum())


def _rows_for(
    a: np.ndarray,
    b: np.ndarray,
    src: np.ndarray,
    srow: np.ndarray,
    wa: np.ndarray,
    wb: np.ndarray,
    source: int,
) -> np.ndarray:
    """For each wanted key (wa, wb), the row (in its source's lines) of an entry of ``source``
    with that key (one exists: the key's count moved that way)."""
    if not len(wa):
        return np.zeros(0, np.int64)
    mine = src == source
    ma, mb, mrow = a[mine], b[mine], srow[mine]
    # ma is sorted (a subsequence of the sorted entries) and unique within one source
    pos = np.searchsorted(ma, wa)
    assert bool(((ma[pos] == wa) & (mb[pos] == wb)).all())
    return mrow[pos]


def _texts(lines: pa.ChunkedArray, rows: np.ndarray) -> list[bytes]:
    """The lines at ``rows`` as bytes (only the lines that change become Python objects)."""
    return as_bytes_lines(take_lines(lines, rows))


def all_lines(blocks: Iterable[Block]) -> pa.ChunkedArray:
    """Every line of the blocks (one entry per line a row produces), as a full conversion
    formats them."""
    bl = list(blocks)
    return format_rows(bl, *_positions(bl))


__all__ = ["RowState", "advance", "all_lines", "format_rows", "row_keys", "start"]
