"""Column blocks: the unit the mapping produces and every writer consumes.

Input: record columns (pandas / numpy / pyarrow). Output: :class:`Block` objects, one row per
subject, one :class:`Column` per predicate, holding *raw* values (IRIs without ``<>``, literal
lexical forms without quotes). Writers format them for their syntax with vectorised string
operations; :meth:`Block.triples` gives N-Triples terms.

A null value in a column means "no triple". A multi-valued column holds a pyarrow list array
(one list of values per subject), e.g. the dependencies a task execution used.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.terms import RDF, XSD, as_text_array, base_types, concat
from metaprov.timeutil import utc_to_epoch, xsd_datetime

LARGE = pa.large_string()
Kind = Literal["iri", "str", "typed"]


@dataclass
class Column:
    """One predicate over the rows of a block.

    Attributes:
        predicate: full predicate IRI.
        values: large_string array (or list<large_string> when ``multi``) of raw values, or a
            ``str`` constant shared by every row.
        kind: ``iri`` (values are IRIs), ``str`` (xsd:string literals, may need escaping) or
            ``typed`` (literals of ``datatype`` whose lexical forms never need escaping).
        datatype: datatype IRI for ``typed`` literals.
    """

    predicate: str
    values: pa.Array | str
    kind: Kind = "iri"
    datatype: str | None = None

    @property
    def multi(self) -> bool:
        return isinstance(self.values, (pa.ListArray, pa.LargeListArray))


@dataclass
class Block:
    """Rows of subjects of one class, with their predicates as columns.

    The first column is always ``rdf:type`` with a constant class IRI (writers rely on it: every
    subject has at least one triple, and Turtle/JSON-LD open each subject with it).
    """

    subjects: pa.Array
    columns: list[Column] = field(default_factory=list)
    #: the block only adds to subjects another block types (e.g. mp:IOActivity on task
    #: executions): their PROV base types are not stated twice
    restates: bool = False

    def __len__(self) -> int:
        return len(self.subjects)

    @property
    def rdf_type(self) -> str:
        first = self.columns[0]
        assert first.predicate == RDF.type and isinstance(first.values, str)
        return first.values

    def with_base_types(self) -> Block:
        """The block with the PROV classes its class implies (``prov:Activity``, ...) as further
        constant ``rdf:type`` columns right after the first (decision 22). Returns self."""
        if self.restates or not self.columns:
            return self
        types = base_types(self.rdf_type)
        if types and not any(c.predicate == RDF.type and c.values in types for c in self.columns):
            self.columns[1:1] = [Column(RDF.type, t) for t in types]
        return self

    def n_triples(self) -> int:
        """Number of triples the block holds (non-null values; list elements counted)."""
        n = 0
        for col in self.columns:
            if isinstance(col.values, str):
                n += len(self)
            elif col.multi:
                n += int(pc.sum(pc.fill_null(pc.list_value_length(col.values), 0)).as_py() or 0)
            else:
                n += len(col.values) - col.values.null_count
        return n

    def add(
        self, predicate: str, values: Any, kind: Kind = "iri", datatype: str | None = None
    ) -> Block:
        """Append a column; ``values`` None or all-null adds nothing. Returns self for chaining."""
        if values is None:
            return self
        if not isinstance(values, str):
            if isinstance(values, pa.ChunkedArray):
                values = values.combine_chunks()
            if not isinstance(values, pa.Array):
                values = as_text_array(values)
            if len(values) != len(self.subjects):
                raise ValueError(
                    f"column {predicate} has {len(values)} rows, block has {len(self.subjects)}"
                )
            if values.null_count == len(values):
                return self
            if pa.types.is_string(values.type):
                values = pc.cast(values, LARGE)
        self.columns.append(Column(predicate, values, kind, datatype))
        return self

    def triples(self) -> Iterator[tuple[pa.Array, str, pa.Array]]:
        """Per column: (subject terms, predicate term, object terms) in N-Triples syntax.

        Rows whose value is null are left out; multi-valued columns are flattened.
        """
        s_all = nt_iri(self.subjects)
        for col in self.columns:
            p = f"<{col.predicate}>"
            vals = col.values
            if isinstance(vals, str):
                yield s_all, p, pa.repeat(pa.scalar(nt_term(vals, col), LARGE), len(s_all))
                continue
            if col.multi:
                parents = pc.list_parent_indices(vals)
                flat = pc.list_flatten(vals)
                subj = s_all.take(parents)
                vals = flat
            else:
                subj = s_all
            valid = pc.is_valid(vals)
            if vals.null_count:
                subj = subj.filter(valid)
                vals = vals.filter(valid)
            yield subj, p, nt_terms(vals, col)


# ---------------------------------------------------------------------------------------------
# N-Triples term formatting (also used by Turtle and the PROV converters)
# ---------------------------------------------------------------------------------------------

_NT_NEEDS_ESCAPE = r'[\\"\n\r\x00]'


def byte_table(chars: bytes) -> np.ndarray:
    """A 256-entry lookup table, true at the given (ASCII) bytes, for :func:`has_any_byte`."""
    table = np.zeros(256, dtype=bool)
    table[np.frombuffer(chars, dtype=np.uint8)] = True
    return table


def has_any_byte(values: pa.Array, table: np.ndarray, pattern: str) -> bool:
    """Whether any text of ``values`` holds a byte marked in ``table`` (ASCII bytes only: they
    never occur inside a multi-byte UTF-8 sequence, so this is a character test).

    One pass of a table lookup over the array's data buffer (a regex scan took ~1/3 of the
    JSON-LD formatting time). Bytes of null slots may be scanned too, which can only say "yes"
    where the answer is "no" (the caller then escapes, a no-op). Arrays that are not plain
    (large) strings use the regex ``pattern``.
    """
    if len(values) == 0:
        return False
    t = values.type
    if pa.types.is_large_string(t):
        width: type = np.int64
    elif pa.types.is_string(t):
        width = np.int32
    else:
        return bool(pc.any(pc.match_substring_regex(values, pattern)).as_py())
    bufs = values.buffers()
    if bufs[2] is None:
        return False
    offsets: np.ndarray = np.frombuffer(bufs[1], dtype=width)[
        values.offset : values.offset + len(values) + 1
    ]
    data = np.frombuffer(bufs[2], dtype=np.uint8)[int(offsets[0]) : int(offsets[-1])]
    return bool(table[data].any())


_NT_ESCAPED = byte_table(b'\\"\n\r\x00')


def nt_escape(values: pa.Array) -> pa.Array:
    """Escape a string literal's lexical forms for N-Triples/Turtle: ``\\``, ``"``, LF, CR,
    and NUL as ``\\u0000`` (a raw NUL byte breaks line-oriented tools and C strings)."""
    if not has_any_byte(values, _NT_ESCAPED, _NT_NEEDS_ESCAPE):
        return values
    out = pc.replace_substring(values, "\\", "\\\\")
    out = pc.replace_substring(out, '"', '\\"')
    out = pc.replace_substring(out, "\n", "\\n")
    out = pc.replace_substring(out, "\r", "\\r")
    return pc.replace_substring(out, "\x00", "\\u0000")


def nt_iri(values: pa.Array) -> pa.Array:
    """``<iri>`` for each IRI."""
    return concat("<", values, ">")


def nt_terms(values: pa.Array, col: Column) -> pa.Array:
    """N-Triples terms of a column's raw values."""
    if col.kind == "iri":
        return nt_iri(values)
    if col.kind == "str" or col.datatype in (None, XSD.string):
        return concat('"', nt_escape(values), '"')
    return concat('"', values, f'"^^<{col.datatype}>')


def nt_term(value: str, col: Column) -> str:
    """N-Triples term of one raw value."""
    return str(nt_terms(pa.array([value], LARGE), col)[0].as_py())


# ---------------------------------------------------------------------------------------------
# Literal columns from record columns (vectorised; null where there is no value)
# ---------------------------------------------------------------------------------------------


def _arrow(values: Any) -> pa.Array:
    if isinstance(values, pd.Series):
        return pa.Array.from_pandas(values)
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    return pa.array(values)


def lit_int(values: Any) -> pa.Array:
    """Integers (nullable Int64 / UInt64 columns) as decimal lexical forms."""
    return pc.cast(_arrow(values), LARGE)


def lit_double(values: Any) -> pa.Array:
    """Doubles as shortest round-trip lexical forms; NaN and infinities become null."""
    arr = pc.cast(_arrow(values), pa.float64())
    arr = pc.if_else(pc.is_finite(arr), arr, pa.scalar(None, pa.float64()))
    return pc.cast(arr, LARGE)


def lit_time(values: pd.Series) -> pa.Array:
    """UTC times as ``xsd:dateTime`` lexical forms (``...ffffffZ``); NaT becomes null.

    The same text as :func:`~metaprov.timeutil.xsd_datetime`, built as fixed-width digits in
    one byte matrix (no Python string per value; 2-3x faster). Years outside 0001-9999 (never
    in a real run) take the general path.
    """
    us = np.asarray(values.to_numpy(dtype="datetime64[us]")).view(np.int64)
    valid = us != np.iinfo(np.int64).min
    if len(us) and not ((us[valid] >= _US_YEAR_1).all() and (us[valid] < _US_YEAR_10000).all()):
        text = xsd_datetime(values)
        arr = pa.array(text, type=LARGE)
        return pc.if_else(pc.equal(arr, ""), pa.scalar(None, LARGE), arr)
    t = us[valid]
    days = t // _US_DAY
    rem = t - days * _US_DAY
    # civil date from days since 1970-01-01 (H. Hinnant's algorithm, proleptic Gregorian)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    sec, frac = rem // 1_000_000, rem % 1_000_000
    out = np.empty((len(t), _TIME_WIDTH), np.uint8)
    out[:] = np.frombuffer(b"0000-00-00T00:00:00.000000Z", np.uint8)
    for col, pair in (
        (0, year // 100),
        (2, year % 100),
        (5, month),
        (8, day),
        (11, sec // 3600),
        (14, sec // 60 % 60),
        (17, sec % 60),
        (20, frac // 10_000),
        (22, frac // 100 % 100),
        (24, frac % 100),
    ):
        out[:, col : col + 2] = _DIGIT_PAIRS[pair]
    offsets = np.zeros(len(us) + 1, np.int64)
    np.cumsum(np.where(valid, _TIME_WIDTH, 0), out=offsets[1:])
    n_null = len(us) - len(t)
    mask = pa.array(valid).buffers()[1] if n_null else None
    return pa.Array.from_buffers(
        LARGE,
        len(us),
        [mask, pa.py_buffer(offsets), pa.py_buffer(out.reshape(-1))],
        null_count=n_null,
    )


_US_DAY = 86_400_000_000
_US_YEAR_1 = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
_US_YEAR_10000 = 253_402_300_800_000_000  # 10000-01-01T00:00:00Z
_TIME_WIDTH = len("0000-00-00T00:00:00.000000Z")
#: the two ASCII digits of 0..99
_DIGIT_PAIRS = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), np.uint8).reshape(
    100, 2
)


def lit_epoch(values: pd.Series) -> pa.Array:
    """UTC times as epoch seconds (xsd:double lexical forms); NaT becomes null."""
    return lit_double(utc_to_epoch(values))


def lit_true(values: Any) -> pa.Array:
    """``"true"`` where the (nullable) boolean is true, null elsewhere (flags written only when set)."""
    arr = pc.cast(_arrow(values), pa.bool_())
    arr = pc.fill_null(arr, False)
    return pc.if_else(arr, pa.scalar("true", LARGE), pa.scalar(None, LARGE))


def lit_str(values: Any) -> pa.Array:
    """Text; empty strings become null (an absent value, not an empty literal)."""
    arr = as_text_array(values)
    return pc.if_else(pc.equal(arr, ""), pa.scalar(None, LARGE), arr)


def null_where(values: pa.Array, mask: Any) -> pa.Array:
    """``values`` with nulls where ``mask`` is true."""
    m = pa.array(np.asarray(mask, dtype=bool))
    return pc.if_else(m, pa.scalar(None, values.type), values)


def group_lists(parent_rows: np.ndarray, values: pa.Array, n_rows: int) -> pa.Array:
    """A list column of ``n_rows`` lists: ``values[i]`` goes to row ``parent_rows[i]``.

    Lists keep the order of ``values`` within a row (callers sort first for determinism); rows
    without values get an empty list, which writers treat like null.
    """
    parent_rows = np.asarray(parent_rows, dtype=np.int64)
    order = np.argsort(parent_rows, kind="stable")
    counts = np.bincount(parent_rows, minlength=n_rows)
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = values.take(pa.array(order)) if len(values) else values
    if pa.types.is_string(flat.type):
        flat = pc.cast(flat, LARGE)
    return pa.LargeListArray.from_arrays(pa.array(offsets), flat)


def empty_to_null(lists: pa.Array) -> pa.Array:
    """Empty lists become null lists."""
    lengths = pc.list_value_length(lists)
    return pc.if_else(pc.equal(lengths, 0), pa.scalar(None, lists.type), lists)
