"""IRIs written as qualified names (``prefix:local``) by the PROV-DM syntaxes, a column at a time.

Input: a string array of IRIs, the document's namespaces (prefix -> namespace IRI) and a
:class:`Style` (how a syntax escapes a local part, byte by byte). Output: a string array of the
qualified names, the same text the per-value rules of ``prov`` and
:func:`metaprov.write.provdm.xml_local` give.

One pass of table lookups over the array's text buffer (numpy), no Python per value: each byte
of a local part is copied, or written after a lead byte (``\\=`` in PROV-N, ``__`` in PROV-XML),
or as ``_`` and two hex digits (PROV-XML); the namespace's bytes become the prefix and ``:``.
A value holding a byte the table cannot decide alone (outside ASCII in PROV-XML, outside
PN_LOCAL in PROV-N, a JSON escape) goes through the syntax's exact rule (``Style.exact``);
those values are rare (run keys are ASCII). Long arrays are cut into slices of
:data:`SLICE_BYTES` of text, so the temporary arrays stay small.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.errors import FormatError

LARGE = pa.large_string()
#: Text of one slice of an array (the temporaries are about 7 bytes per byte of text).
SLICE_BYTES = 8 << 20
#: Output bytes of an input byte: 0 = the value goes through :attr:`Style.exact`.
EXACT, COPY, LEAD, HEX = 0, 1, 2, 3
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", np.uint8)


@dataclass(frozen=True)
class Style:
    """How one syntax writes a local part."""

    #: output bytes of each byte of a local part (EXACT, COPY, LEAD or HEX), by byte value
    width: np.ndarray
    #: the same for the first byte of a local part
    first: np.ndarray
    #: the same for the last byte (if it differs from ``width``)
    last: np.ndarray | None
    #: the byte written before a byte of width LEAD
    lead: int
    #: the exact rule, on the local parts of the values the tables could not decide
    exact: Callable[[pa.Array], pa.Array]
    #: rows whose local part the syntax must also send to ``exact`` (``body``: the text
    #: buffer, ``local``: where each row's local part starts, ``ends``: where each row ends)
    also_exact: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None
    #: text written before and after every qualified name (PROV-JSON's quotes)
    before: bytes = b""
    after: bytes = b""


def table(default: int, groups: dict[int, bytes]) -> np.ndarray:
    """A 256-entry width table: ``default`` at every byte, then each group's bytes its width."""
    t = np.full(256, default, np.uint8)
    for w, chars in groups.items():
        t[np.frombuffer(chars, np.uint8)] = w
    return t


def qualified_names(iris: pa.Array, ns: dict[str, str], style: Style) -> pa.Array:
    """Each IRI as ``prefix:local`` under the longest namespace of ``ns`` (prefix -> IRI,
    longest first) that holds it, with the style's ``before`` and ``after``; nulls stay
    null."""
    iris = iris if iris.type == LARGE else pc.cast(iris, LARGE)
    if iris.null_count:
        valid = pc.is_valid(iris)
        done = qualified_names(iris.filter(valid), ns, style)
        mask = ~valid.to_numpy(zero_copy_only=False)
        take = np.cumsum(~mask) - 1
        return done.take(pa.array(np.where(mask, 0, take), mask=mask))
    if len(iris) == 0:
        return iris
    slices = _slices(iris)
    heads = {p: style.before + p.encode() + b":" for p in ns}
    spaces = [(heads[p], ns_iri.encode()) for p, ns_iri in ns.items()]
    parts = [_one_slice(iris.slice(a, b - a), ns, spaces, style) for a, b in slices]
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def _slices(iris: pa.Array) -> list[tuple[int, int]]:
    """Row ranges of at most :data:`SLICE_BYTES` of text (at least one row each)."""
    off = _offsets(iris)
    total = int(off[-1] - off[0])
    if total <= SLICE_BYTES:
        return [(0, len(iris))]
    cuts = np.searchsorted(off, off[0] + np.arange(SLICE_BYTES, total, SLICE_BYTES))
    bounds = sorted({0, *cuts.tolist(), len(iris)})
    return list(zip(bounds[:-1], bounds[1:], strict=False))


def _offsets(arr: pa.Array) -> np.ndarray:
    return np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]


def _namespace_of(iris: pa.Array, ns: dict[str, str]) -> np.ndarray:
    """Index (in ``ns``'s order) of the longest namespace holding each IRI."""
    k = np.full(len(iris), -1, np.int16)
    for i, iri in enumerate(ns.values()):
        hit = pc.starts_with(iris, iri).to_numpy(zero_copy_only=False)
        if i == 0 and hit.all():
            return np.zeros(len(iris), np.int16)
        k[hit & (k < 0)] = i
    if (k < 0).any():  # pragma: no cover - the writer gave every namespace a prefix
        raise FormatError(f"no prefix for {iris[int(np.flatnonzero(k < 0)[0])].as_py()}")
    return k


def _one_slice(
    iris: pa.Array, ns: dict[str, str], spaces: list[tuple[bytes, bytes]], style: Style
) -> pa.Array:
    """:func:`qualified_names` of a slice without nulls."""
    n = len(iris)
    k = _namespace_of(iris, ns)
    off = _offsets(iris)
    body = np.frombuffer(iris.buffers()[2], np.uint8)[int(off[0]) : int(off[-1])]
    off = off - off[0]
    starts, ends = off[:-1], off[1:]
    ns_len = np.array([len(s) for _, s in spaces], np.int64)[k]
    local = starts + ns_len
    nbytes = len(body)
    # widths: every byte of a local part by the table, the first and last by theirs
    width = style.width[body]
    has_local = local < ends
    first_at = local[has_local]
    width[first_at] = style.first[body[first_at]]
    if style.last is not None:
        last_at = ends[has_local] - 1
        tail = style.last[body[last_at]]
        both = _combine(width[last_at], tail)
        width[last_at] = np.where(last_at == first_at, both, tail)
    in_ns = np.zeros(nbytes + 1, np.int8)
    in_ns[starts] += 1
    in_ns[local] -= 1
    ns_mask = np.cumsum(in_ns[:-1], dtype=np.int8).astype(bool)
    # values the tables cannot write go through the exact rule
    exact = np.zeros(n, bool)
    bad = np.flatnonzero((width == EXACT) & ~ns_mask)
    if len(bad):
        exact[np.searchsorted(ends, bad, side="right")] = True
    if style.also_exact is not None:
        exact |= style.also_exact(body, local, ends)
    width[ns_mask] = 0
    # sizes: the widths, the namespace's first byte the prefix's, the last byte + ``after``
    heads = [h for h, _ in spaces]
    head_len = np.array([len(h) for h in heads], np.uint8)
    after = len(style.after)
    size = width.copy()
    size[starts] = head_len[k]
    if after:
        size[ends - 1] += after
    # where each input byte's text starts in the output
    big = nbytes * 10 + n * (int(head_len.max()) + after) >= 2**31
    pos = np.zeros(nbytes + 1, np.int64 if big else np.int32)
    np.cumsum(size, out=pos[1:])
    del size
    out = np.empty(int(pos[-1]), np.uint8)
    copy = width == COPY
    out[pos[:-1][copy]] = body[copy]
    del copy
    at = np.flatnonzero(width == LEAD)
    if len(at):
        p = pos[at]
        out[p] = style.lead
        out[p + 1] = body[at]
    at = np.flatnonzero(width == HEX)
    if len(at):
        p, b = pos[at], body[at]
        out[p] = ord("_")
        out[p + 1] = _HEX_DIGITS[b >> 4]
        out[p + 2] = _HEX_DIGITS[b & 15]
    new_off = pos[off].astype(np.int64)
    for i, head in enumerate(heads):
        rows = np.flatnonzero(k == i)
        if len(rows):
            at = new_off[rows]
            for j, byte in enumerate(head):
                out[at + j] = byte
    if after:
        at = new_off[1:] - after
        for j, byte in enumerate(style.after):
            out[at + j] = byte
    text = pa.LargeStringArray.from_buffers(n, pa.py_buffer(new_off), pa.py_buffer(out))
    if exact.any():
        text = _exact_rows(iris, k, spaces, style, exact, text)
    return text


def _combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Width of a byte that is both the first and the last of its local part."""
    return np.where((a == EXACT) | (b == EXACT), EXACT, np.maximum(a, b)).astype(np.uint8)


def _exact_rows(
    iris: pa.Array,
    k: np.ndarray,
    spaces: list[tuple[bytes, bytes]],
    style: Style,
    rows: np.ndarray,
    text: pa.Array,
) -> pa.Array:
    """``text`` with the given rows written by the style's exact rule."""
    sel = pa.array(rows)
    mine = iris.filter(sel)
    kk = k[rows]
    ns_chars = np.array([len(s.decode()) for _, s in spaces], np.int64)[kk]
    cut = [v[c:] for v, c in zip(mine.to_pylist(), ns_chars.tolist(), strict=True)]
    escaped = style.exact(pa.array(cut, LARGE)).to_pylist()
    heads = [h.decode() for h, _ in spaces]
    tail = style.after.decode()
    fixed = [f"{heads[i]}{e}{tail}" for i, e in zip(kk.tolist(), escaped, strict=True)]
    return pc.replace_with_mask(text, sel, pa.array(fixed, LARGE))
