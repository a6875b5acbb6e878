"""A graph held as N-Triples lines in Arrow, and the difference of two such graphs.

Input: N-Triples text (the mapping's byte chunks, or a store's dump). Output: a :class:`LineSet`
(the lines as Arrow ``large_string`` chunks, whose buffers *are* the text, plus a 128-bit key
per line), and :func:`diff`: the lines to delete and to insert between two refreshes. Only the
lines that changed become Python ``bytes``; the graph itself is never held as one Python object
per line (3.5 M triples held as two Python sets of lines took 6.6 GB and ~19 s to diff).

**Keys.** Each line is identified by two 64-bit keyed hashes of its bytes (polars' string hash,
vectorised and multi-threaded), with two seeds drawn at random when the process starts: a
128-bit key. The keys are kept sorted (numpy arrays, 16 bytes a line beside the text) and two
refreshes are matched by a merge of their sorted keys (``searchsorted``), never by text.

**Why 128 bits is enough.** A collision (two different lines, one key) would make a new line
look already present (not inserted) or a removed line look still present (not deleted): a lost
change. With ``n`` held and ``m`` new lines, the chance that any pair collides is at most
``n*m / 2**128`` (the two seeded hashes behaving as independent random functions of the line):
at 10^7 triples on each side, below 3e-25 per refresh, or 3e-16 for a refresh every second for
a billion years. 64 bits would not do: at 10^7 x 10^7 pairs the bound is 5e-6 per refresh. The
seeds are secret and new in every process, so a run's content (untrusted) cannot be crafted to
collide; and since only this process's own keys are ever compared, polars' hash not being stable
across its versions does not matter (after a restart the held graph is read back from the store
and keyed again).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

LARGE = pa.large_string()
#: The two hash seeds of this process (secret, random).
SEEDS: tuple[int, int] = (
    int.from_bytes(os.urandom(8), "little") >> 1,
    int.from_bytes(os.urandom(8), "little") >> 1,
)
_SEEDS = SEEDS


def split_lines(data: bytes | memoryview) -> pa.Array:
    """The lines of N-Triples text as a ``large_string`` array over the same buffer (each line
    keeps its ``\\n``; a last line without one gets none). Zero copy of the text."""
    buf = pa.py_buffer(data)
    raw = np.frombuffer(buf, dtype=np.uint8)
    ends = np.flatnonzero(raw == 10) + 1
    if len(raw) and (not len(ends) or ends[-1] != len(raw)):
        ends = np.append(ends, len(raw))
    offsets = np.zeros(len(ends) + 1, dtype=np.int64)
    offsets[1:] = ends
    return pa.Array.from_buffers(LARGE, len(ends), [None, pa.py_buffer(offsets), buf])


def line_keys(
    lines: pa.ChunkedArray | pa.Array, seeds: tuple[int, int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The two 64-bit keys of each line (in the lines' order), with this process's secret
    seeds by default."""
    import polars as pl

    seeds = seeds or SEEDS
    if not len(lines):
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    s = pl.Series("l", lines)
    return (
        s.hash(seeds[0]).to_numpy().astype(np.uint64, copy=False),
        s.hash(seeds[1]).to_numpy().astype(np.uint64, copy=False),
    )


def as_bytes_lines(arr: pa.Array | pa.ChunkedArray) -> list[bytes]:
    """The lines of a (chunked) ``large_string`` array as Python bytes (for the store update:
    only the lines that changed are ever turned into Python objects)."""
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    out: list[bytes] = []
    for c in chunks:
        c = c.filter(pc.is_valid(c)) if c.null_count else c
        if len(c) == 0:
            continue
        c = c if c.type == LARGE else pc.cast(c, LARGE)
        bufs = c.buffers()
        offs = np.frombuffer(bufs[1], dtype=np.int64)[c.offset : c.offset + len(c) + 1]
        # a taken chunk's lines are contiguous in its buffer: one slice, split at line ends
        # (N-Triples never holds a raw CR or LF inside a line; checked by the count)
        lines = bytes(memoryview(bufs[2])[int(offs[0]) : int(offs[-1])]).splitlines(True)
        if len(lines) != len(c):
            lines = [s.encode("utf-8") for s in c.to_pylist()]
        out.extend(lines)
    return out


@dataclass
class LineSet:
    """A graph as N-Triples lines (Arrow) and their 128-bit keys (see the module doc).

    Attributes:
        lines: every line (``large_string`` chunks; may hold the same line twice).
        a, b: the two 64-bit keys of each distinct line, ordered by ``a``.
        rows: the row in ``lines`` of each key (the first of equal lines).
        a_unique: no two keys share their ``a`` (the fast, sorted diff applies).
        counts: how many times each distinct line occurs in ``lines`` (when ``a_unique``).
    """

    lines: pa.ChunkedArray
    a: np.ndarray
    b: np.ndarray
    rows: np.ndarray
    a_unique: bool
    counts: np.ndarray | None = None

    def __len__(self) -> int:
        """Distinct lines (triples)."""
        return len(self.a)

    @classmethod
    def of(cls, chunks: Iterable[pa.Array], seeds: tuple[int, int] | None = None) -> LineSet:
        """The lines of these ``large_string`` chunks, keyed (two vectorised hashes and one
        sort: ~0.8 s for 3.5 M lines on one core)."""
        import polars as pl

        arrays = [c for c in chunks if len(c)]
        lines = pa.chunked_array(arrays, type=LARGE)
        if not len(lines):
            empty = np.zeros(0, dtype=np.uint64)
            none = np.zeros(0, dtype=np.int64)
            return cls(lines, empty, empty, none, True, none)
        ha, hb = line_keys(lines, seeds)
        order = pl.Series("a", ha).arg_sort().to_numpy()
        a = ha[order]
        b = hb[order]
        rows = order.astype(np.int64, copy=False)
        # equal lines (equal keys: adjacent, as a is sorted) are held once; a repeated a with
        # another b (a 64-bit collision) leaves a_unique false, and diff() takes its exact path
        first = np.ones(len(a), dtype=bool)
        same_a = a[1:] == a[:-1]
        first[1:] = ~(same_a & (b[1:] == b[:-1]))
        starts = np.flatnonzero(first)
        counts = np.diff(np.append(starts, len(a)))
        if len(starts) < len(a):
            a, b, rows = a[starts], b[starts], rows[starts]
            same_a = a[1:] == a[:-1]
        return cls(lines, a, b, rows, not bool(same_a.any()), counts)

    @classmethod
    def from_text(cls, data: bytes) -> LineSet:
        """The lines of N-Triples text (e.g. a store's dump of the graph)."""
        return cls.of([split_lines(data)] if data else [])

    def take(self, rows: np.ndarray) -> pa.ChunkedArray:
        """The lines at these rows, in the graph's order."""
        return take_lines(self.lines, rows)


def take_lines(lines: pa.ChunkedArray, rows: np.ndarray) -> pa.ChunkedArray:
    """The lines at these rows (distinct), in their order (a mask per chunk: a chunked take
    of scattered rows costs several times more)."""
    if not len(rows):
        return pa.chunked_array([], type=LARGE)
    if len(rows) == len(lines):  # every line (a first refresh): nothing to filter
        return lines
    mask = np.zeros(len(lines), dtype=bool)
    mask[np.asarray(rows, dtype=np.int64)] = True
    return lines.filter(pa.array(mask))


def lookup(
    ka: np.ndarray, kb: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each key (a, b): whether it is among the keys (ka, kb) (``ka`` sorted and unique),
    and where."""
    if not len(ka):
        return np.zeros(len(a), dtype=bool), np.zeros(len(a), dtype=np.int64)
    pos = np.minimum(np.searchsorted(ka, a), len(ka) - 1)
    return (ka[pos] == a) & (kb[pos] == b), pos


def _missing(x: LineSet, y: LineSet) -> np.ndarray:
    """Rows of ``x`` whose key is not in ``y`` (both sorted by ``a``, ``a`` unique in ``y``)."""
    found, _ = lookup(y.a, y.b, x.a, x.b)
    return x.rows[~found]


def diff(held: LineSet, new: LineSet) -> tuple[list[bytes], list[bytes]]:
    """(lines of ``held`` not in ``new``, lines of ``new`` not in ``held``): the triples to
    delete and to insert, each once, in their graph's order.

    Keys are compared as 128-bit pairs: by a merge of the two ``a``-sorted key arrays when no
    ``a`` repeats within a set (the rule: a repeat needs a 64-bit collision, about one chance
    in 10^6 at 10^7 lines), else by a hash join on both keys (polars), the same answer.
    """
    if held.a_unique and new.a_unique:
        gone, come = _missing(held, new), _missing(new, held)
    else:
        import polars as pl

        hk = pl.DataFrame({"a": held.a, "b": held.b, "i": held.rows})
        nk = pl.DataFrame({"a": new.a, "b": new.b, "i": new.rows})
        gone = hk.join(nk.select("a", "b"), on=["a", "b"], how="anti")["i"].to_numpy()
        come = nk.join(hk.select("a", "b"), on=["a", "b"], how="anti")["i"].to_numpy()
    return as_bytes_lines(held.take(gone)), as_bytes_lines(new.take(come))


__all__ = ["LineSet", "as_bytes_lines", "diff", "line_keys", "lookup", "split_lines", "take_lines"]
