"""The columnar validation engine: every check of :mod:`metaprov.validate` as table operations.

Input: an export as N-Triples or N-Quads (a file or bytes). Output: the same
:class:`~metaprov.validate.Violation` list (rule, focus node, message) as the SPARQL engine,
without loading a triple store.

How: the file is read in large byte chunks cut at a newline; each chunk becomes one Arrow string
column of lines, split at the first two spaces (IRIs and blank nodes hold no spaces) into subject,
predicate and the rest, and only the triples of the predicates the checks name (and their
sub-properties) are kept. Terms are dictionary-encoded into one id space (a polars Categorical
with its own categories), so every join is on integers. The ontology's class and property
hierarchy is applied as joins (the SPARQL engine's two INSERTs), then each check is a few
vectorised joins, anti-joins (``MINUS``) and filters.

Lines in canonical form (single spaces, no backslash escape, no tab, lower-case language tag) take
the vectorised path; any other line goes through pyoxigraph's own parser (one line at a time,
so a malformed line is reported with its number) and comes out in the canonical form, so two
spellings of one term get one id.

Semantics follow SPARQL as Oxigraph runs it: comparisons of xsd:dateTime compare instants
(offsets honoured); a time without a time zone is ordered against one with a zone only when they
lie more than 14 hours apart (otherwise the comparison is an error, so the FILTER is false);
numeric filters apply to typed numeric literals; ``!=`` compares numbers, booleans and times by
value, strings and other terms by term, and is an error (false) between literals of unknown
datatypes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.errors import InputError
from metaprov.mapping.terms import PROV_NS, RDF_NS, VOCAB, XSD_NS
from metaprov.validate import constraints
from metaprov.validate.checks import (
    JOB_SUBMITTED_AFTER_START,
    PROV_CHECKS,
    SPARQL_CHECKS,
    START_BEFORE_END,
    WARNING_CHECKS,
    start_after_end,
)

#: Bytes read per step (cut at the last newline): larger chunks cost memory, not speed.
CHUNK_BYTES = 16 << 20
#: Chunks parsed at once (lazy queries collected together, in parallel outside the GIL).
THREADS = 2

_PREFIX = {"mp": VOCAB, "prov": PROV_NS, "rdf": RDF_NS, "xsd": XSD_NS}
RDF_TYPE = f"<{RDF_NS}type>"
_LANG_STRING = f"{RDF_NS}langString"
_IRI = r'<[^<>"{}|^`\\\x00-\x20]*>'
_BNODE = r"_:[A-Za-z0-9_][^\x00-\x20<>\"\\]*"
_LIT = r'"[^"\\\x00-\x1f]*"(?:\^\^' + _IRI + r"|@[a-z]+(?:-[a-z0-9]+)*)?"
_NODE = rf"(?:{_IRI}|{_BNODE})"
_FAST_NT = rf"^{_NODE} {_IRI} (?:{_NODE}|{_LIT}) \.$"
_FAST_NQ = rf"^{_NODE} {_IRI} (?:{_NODE}|{_LIT})(?: {_NODE})? \.$"
_OBJECT_NQ = r'^(<[^>]*>|_:[^ ]+|"[^"]*"(?:\^\^<[^>]*>|@[a-z0-9-]+)?)'
_STRING_DT = f"^^<{XSD_NS}string>"
_HOUR_NS = 3_600_000_000_000
_KINDS = pl.Enum(["node", "num", "dt", "bool", "str", "lang", "xsd", "unknown"])

_INTEGER_TYPES = {
    XSD_NS + t
    for t in (
        "integer int long short byte nonNegativeInteger positiveInteger nonPositiveInteger "
        "negativeInteger unsignedLong unsignedInt unsignedShort unsignedByte"
    ).split()
}
_DECIMAL = XSD_NS + "decimal"
_FLOAT_TYPES = {XSD_NS + "double", XSD_NS + "float"}
_RE_INTEGER = r"^[+-]?[0-9]+$"
_RE_DECIMAL = r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$"
_RE_FLOAT = r"^(?:[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?INF|NaN)$"
_RE_DATETIME = r"^-?[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})?$"


def _iri(curie: str) -> str:
    prefix, local = curie.split(":", 1)
    return f"<{_PREFIX[prefix]}{local}>"


# --------------------------------------------------------------------------- reading


@cache
def needed_predicates() -> tuple[str, ...]:
    """Predicates (N-Triples IRIs) the checks read: those the queries name, the time
    predicates and every sub-property of them in the ontology."""
    names = {RDF_TYPE, *constraints.TIME_PREDICATES}
    for _, query, _ in SPARQL_CHECKS + PROV_CHECKS + WARNING_CHECKS + constraints.checks():
        names |= {_iri(c) for c in re.findall(r"\b(?:mp|prov):\w+", query)}
    _, props = constraints.hierarchy()
    names |= {f"<{p}>" for p, sup in props if f"<{sup}>" in names}
    return tuple(sorted(names))


def _chunks(source: Path | bytes | Iterable[bytes]) -> Iterator[bytes]:
    """The input in pieces of about CHUNK_BYTES, each ending at a newline (the last may not):
    a file, bytes, or pieces of bytes as they come (e.g. a graph being written as N-Triples,
    never held whole)."""
    if isinstance(source, bytes):
        view = memoryview(source)
        start = 0
        while start < len(view):
            end = source.rfind(b"\n", start, start + CHUNK_BYTES) + 1
            if end <= start:  # one line longer than a chunk: to its end
                nl = source.find(b"\n", start + CHUNK_BYTES)
                end = len(source) if nl < 0 else nl + 1
            yield bytes(view[start:end])
            start = end
        return
    if isinstance(source, Path):
        with open(source, "rb") as fh:
            yield from _rechunk(iter(lambda: fh.read(CHUNK_BYTES), b""))
        return
    yield from _rechunk(iter(source))


def _rechunk(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """Pieces of any size regrouped into chunks of at least CHUNK_BYTES cut at a newline."""
    held: list[bytes] = []
    size = 0
    for piece in pieces:
        held.append(piece)
        size += len(piece)
        if size < CHUNK_BYTES:
            continue
        buf = b"".join(held)
        cut = buf.rfind(b"\n") + 1
        if cut == 0:  # no line ends yet: keep gathering
            held, size = [buf], len(buf)
            continue
        yield buf[:cut]
        held = [buf[cut:]] if cut < len(buf) else []
        size = len(buf) - cut
    if size:
        yield b"".join(held)


def _lines(buf: bytes, label: str, line0: int) -> pl.Series:
    """The chunk's lines as one string column (no Python object per line)."""
    offsets = pa.py_buffer(np.array([0, len(buf)], dtype=np.int32))
    arr = pa.StringArray.from_buffers(1, offsets, pa.py_buffer(buf))
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        try:
            buf.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                "not UTF-8 text", path=label, line=line0 + buf.count(b"\n", 0, exc.start) + 1
            ) from None
        raise
    lines = pc.list_flatten(pc.split_pattern(arr, "\n"))
    if buf.endswith(b"\n"):
        lines = lines.slice(0, len(lines) - 1)
    return pl.Series("l", lines)


def _slow(rows: pl.DataFrame, label: str, quads: bool) -> pl.DataFrame:
    """Lines off the canonical path, parsed one by one through pyoxigraph (canonical terms)."""
    import pyoxigraph as ox

    fmt = ox.RdfFormat.N_QUADS if quads else ox.RdfFormat.N_TRIPLES
    out: dict[str, list[str]] = {"s": [], "p": [], "o": []}
    for n, line in rows.iter_rows():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            parsed = list(ox.parse(text.encode("utf-8"), format=fmt))
        except (SyntaxError, ValueError) as exc:
            name = "N-Quads" if quads else "N-Triples"
            raise InputError(f"not valid {name}: {exc}", path=label, line=n) from None
        for t in parsed:
            out["s"].append(str(t.subject))
            out["p"].append(str(t.predicate))
            out["o"].append(str(t.object))
    return pl.DataFrame(out, schema={"s": pl.String, "p": pl.String, "o": pl.String})


def _plan(lines: pl.Series, line0: int, quads: bool, cat: Any) -> list[pl.LazyFrame]:
    """One chunk's work, as two lazy queries: the canonical lines' (s, p, o) of the needed
    predicates, terms encoded; and the other lines (number, text) for :func:`_slow`."""
    needed = needed_predicates()
    lf = (
        pl.DataFrame(lines)
        .lazy()
        .with_row_index("n", offset=line0 + 1)
        .with_columns(pl.col("l").str.strip_suffix("\r"))
        .with_columns(ok=pl.col("l").str.contains(_FAST_NQ if quads else _FAST_NT))
    )
    obj = pl.col("r").str.extract(_OBJECT_NQ, 1) if quads else pl.col("r").str.head(-2)
    fast = (
        lf.filter("ok")
        .select(pl.col("l").str.splitn(" ", 3).struct.rename_fields(["s", "p", "r"]))
        .unnest("l")
        .filter(pl.col("p").is_in(needed))
        .select(
            pl.col("s").cast(cat),
            pl.col("p").cast(pl.Enum(needed)),
            obj.str.strip_suffix(_STRING_DT).cast(cat).alias("o"),
        )
    )
    return [fast, lf.filter(~pl.col("ok")).select("n", "l")]


def read(source: Path | bytes | Iterable[bytes], *, quads: bool = False, label: str = "") -> Graph:
    """Read an N-Triples (or N-Quads, graph names dropped) export into a :class:`Graph`.

    :data:`THREADS` chunks at a time are run as lazy queries collected together (in parallel,
    outside the GIL); lines off the canonical path are parsed in file order, so the first
    malformed line in the file is the one reported.
    """
    label = label or (str(source) if isinstance(source, Path) else "N-Triples")
    needed = needed_predicates()
    cat = pl.Categorical(pl.Categories.random())
    parts: dict[str, list[pl.DataFrame]] = {}
    statements = 0
    line0 = 0
    batch: list[tuple[int, pl.Series]] = []

    def run() -> None:
        nonlocal statements
        plans = [q for n0, lines in batch for q in _plan(lines, n0, quads, cat)]
        done = pl.collect_all(plans)
        for (_n0, lines), fast, odd in zip(batch, done[::2], done[1::2], strict=True):
            slow = _slow(odd, label, quads)
            statements += len(lines) - len(odd) + len(slow)
            slow = slow.filter(pl.col("p").is_in(needed)).select(
                pl.col("s").cast(cat),
                pl.col("p").cast(pl.Enum(needed)),
                pl.col("o").str.strip_suffix(_STRING_DT).cast(cat),
            )
            for part in (fast, slow):
                for (key,), frame in part.partition_by("p", as_dict=True).items():
                    parts.setdefault(key, []).append(frame.drop("p"))
        batch.clear()

    for buf in _chunks(source):
        batch.append((line0, _lines(buf, label, line0)))
        line0 += buf.count(b"\n")
        if len(batch) >= THREADS:
            run()
    run()
    props = {key: pl.concat(frames) for key, frames in parts.items()}
    parts.clear()
    return Graph(props, cat, statements)


# --------------------------------------------------------------------------- the graph


class Graph:
    """An export's triples (only the predicates the checks need), hierarchy applied."""

    def __init__(self, props: dict[str, pl.DataFrame], cat: Any, statements: int) -> None:
        self.cat = cat
        self.statements = statements
        classes, props_below = constraints.hierarchy()
        self.inferred = 0
        for sub, sup in props_below:
            if f"<{sub}>" in props and f"<{sup}>" in needed_predicates():
                extra = props[f"<{sub}>"]
                self.inferred += len(extra)
                have = props.get(f"<{sup}>")
                props[f"<{sup}>"] = extra if have is None else pl.concat([have, extra])
        self._props = props
        # rdfs:subClassOf applied when a class is asked for (a node typed with a subclass
        # counts), which is what the SPARQL engine's INSERT of the implied types gives
        self._below: dict[str, set[str]] = {}
        for c, sup in classes:
            self._below.setdefault(f"<{sup}>", set()).add(f"<{c}>")
        self.types = self.p(RDF_TYPE).rename({"o": "c"})
        self._facts: pl.DataFrame | None = None
        self._typed: dict[tuple[str, ...], pl.DataFrame] = {}

    # -- access
    def p(self, pred: str) -> pl.DataFrame:
        """(s, o) of one predicate (N-Triples IRI or CURIE), sub-properties included."""
        key = pred if pred.startswith("<") else _iri(pred)
        part = self._props.get(key)
        if part is None:
            return pl.DataFrame(schema={"s": self.cat, "o": self.cat})
        return part

    def typed(self, cls: str | tuple[str, ...], col: str = "f") -> pl.DataFrame:
        """Nodes typed with the class (or any of the classes), one column ``col``, distinct."""
        names = [cls] if isinstance(cls, str) else list(cls)
        asked = [n if n.startswith("<") else _iri(n) for n in names]
        iris = sorted({*asked, *(c for a in asked for c in self._below.get(a, ()))})
        key = tuple(iris)
        if key not in self._typed:
            ids = pl.DataFrame({"c": iris}, schema={"c": pl.String}).cast({"c": self.cat})
            self._typed[key] = self.types.join(ids, on="c", how="semi").select(f="s").unique()
        return self._typed[key].rename({"f": col})

    def anytyped(self, col: str = "f") -> pl.DataFrame:
        """Nodes with any type."""
        if () not in self._typed:
            self._typed[()] = self.types.select(f="s").unique()
        return self._typed[()].rename({"f": col})

    def info(self, ids: pl.Series) -> pl.DataFrame:
        """Per term id: kind, literal category (num/dt/bool/str/lang/xsd/unknown), value."""
        u = ids.unique().drop_nulls()
        text = u.cast(pl.String)
        df = pl.DataFrame({"id": u, "t": text})
        # canonical terms: "lex", "lex"^^<datatype> or "lex"@lang (quotes inside lex escaped)
        t = pl.col("t")
        df = df.with_columns(
            lit=t.str.starts_with('"'),
            dtype=t.str.extract(r'"\^\^<([^>]*)>$', 1),
            lang=t.str.extract(r'"@([a-z0-9-]+)$', 1),
        )
        tail = (
            pl.when(pl.col("dtype").is_not_null())
            .then(pl.col("dtype").str.len_chars() + 4)
            .when(pl.col("lang").is_not_null())
            .then(pl.col("lang").str.len_chars() + 1)
            .otherwise(0)
        )
        df = df.with_columns(
            lex=pl.when(pl.col("lit")).then(t.str.slice(1, t.str.len_chars() - 2 - tail)),
            dt=pl.when(pl.col("dtype").is_not_null())
            .then(pl.col("dtype"))
            .when(pl.col("lang").is_not_null())
            .then(pl.lit(_LANG_STRING))
            .otherwise(pl.lit(XSD_NS + "string")),
        ).drop("dtype", "lang")
        dt, lex = pl.col("dt"), pl.col("lex")
        num_ok = (
            (dt.is_in(list(_INTEGER_TYPES)) & lex.str.contains(_RE_INTEGER))
            | ((dt == _DECIMAL) & lex.str.contains(_RE_DECIMAL))
            | (dt.is_in(list(_FLOAT_TYPES)) & lex.str.contains(_RE_FLOAT))
        )
        is_num = dt.is_in([*_INTEGER_TYPES, _DECIMAL, *_FLOAT_TYPES])
        is_dt = dt == XSD_NS + "dateTime"
        zone = lex.str.extract(_RE_DATETIME, 1)
        dt_ok = is_dt & lex.str.contains(_RE_DATETIME)
        with_zone = lex.str.replace(r"Z$", "+00:00").str.to_datetime(
            "%Y-%m-%dT%H:%M:%S%.f%:z", time_unit="ns", strict=False
        )
        naive = lex.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", time_unit="ns", strict=False)
        df = df.with_columns(
            kind=pl.when(~pl.col("lit"))
            .then(pl.lit("node"))
            .when(is_num)
            .then(pl.lit("num"))
            .when(is_dt)
            .then(pl.lit("dt"))
            .when(dt == XSD_NS + "boolean")
            .then(pl.lit("bool"))
            .when(dt == XSD_NS + "string")
            .then(pl.lit("str"))
            .when(dt == _LANG_STRING)
            .then(pl.lit("lang"))
            .when(dt.str.starts_with(XSD_NS))
            .then(pl.lit("xsd"))
            .otherwise(pl.lit("unknown")),
            num=pl.when(pl.col("lit") & num_ok).then(lex.cast(pl.Float64, strict=False)),
            tz=pl.when(dt_ok).then(zone.is_not_null()),
            utc=pl.when(dt_ok).then(zone.is_in(["Z", "+00:00", "-00:00"]).fill_null(False)),
            bool=pl.when(pl.col("lit") & (dt == XSD_NS + "boolean")).then(
                pl.when(lex.is_in(["true", "1"]))
                .then(True)
                .when(lex.is_in(["false", "0"]))
                .then(False)
            ),
        )
        df = df.with_columns(
            inst=pl.when(dt_ok & pl.col("tz"))
            .then(with_zone.dt.convert_time_zone("UTC").dt.replace_time_zone(None))
            .when(dt_ok)
            .then(naive)
            .cast(pl.Int64)
        )
        df = df.with_columns(
            valid=pl.when(pl.col("kind") == "num")
            .then(pl.col("num").is_not_null())
            .when(pl.col("kind") == "dt")
            .then(dt_ok)  # a lexical form Oxigraph reads as a dateTime (TZ() works on it)
            .when(pl.col("kind") == "bool")
            .then(pl.col("bool").is_not_null())
            .otherwise(True)
        )
        return df.drop("t", "dt", "lit").cast({"kind": _KINDS})

    def with_info(self, df: pl.DataFrame, col: str) -> pl.DataFrame:
        """``df`` with the term facts of column ``col`` as ``col_<fact>`` columns (each term's
        facts are worked out once and kept for the next check)."""
        ids = df.select(id=col).unique()
        if self._facts is not None:
            ids = ids.join(self._facts.select("id"), on="id", how="anti")
        if len(ids) or self._facts is None:
            new = self.info(ids.get_column("id"))
            self._facts = new if self._facts is None else pl.concat([self._facts, new])
        info = self._facts.rename({c: f"{col}_{c}" for c in self._facts.columns if c != "id"})
        return df.join(info, left_on=col, right_on="id", how="left")

    def where(self, df: pl.DataFrame, cols: tuple[str, ...], cond: pl.Expr) -> pl.DataFrame:
        """Rows of ``df`` where ``cond`` (over the term facts of ``cols``, see :meth:`with_info`)
        is true; null (a SPARQL error) counts as false. Returns ``df``'s own columns."""
        if not len(df):
            return df
        keep = df.columns
        for col in cols:
            df = self.with_info(df, col)
        return df.filter(cond.fill_null(False)).select(keep)

    # -- SPARQL operators, vectorised
    def ne(self, df: pl.DataFrame, a: str, b: str) -> pl.DataFrame:
        """Rows of ``df`` where ``?a != ?b`` holds (SPARQL: error counts as false)."""
        df = df.filter(pl.col(a) != pl.col(b))
        ca, cb = pl.col(f"{a}_kind"), pl.col(f"{b}_kind")
        va, vb = pl.col(f"{a}_valid"), pl.col(f"{b}_valid")
        by_value = (
            pl.when((ca == "node") | (cb == "node"))
            .then(True)
            .when((ca == "unknown") | (cb == "unknown"))
            .then(None)
            .when(~va | ~vb)
            .then(None)
            .when(ca != cb)
            .then(True)
            .when(ca == "num")
            .then(pl.col(f"{a}_num") != pl.col(f"{b}_num"))
            .when(ca == "bool")
            .then(pl.col(f"{a}_bool") != pl.col(f"{b}_bool"))
            .when(ca == "dt")
            .then(
                (pl.col(f"{a}_tz") != pl.col(f"{b}_tz"))
                | (pl.col(f"{a}_inst") != pl.col(f"{b}_inst"))
            )
            .otherwise(True)
        )
        return self.where(df, (a, b), by_value)

    def gt(self, df: pl.DataFrame, a: str, b: str, *, same_zone: bool = False) -> pl.DataFrame:
        """Rows of ``df`` where ``?a > ?b`` holds (times as instants, numbers, strings).

        ``same_zone``: also require that both times have a zone or neither has
        (``(TZ(?a) = "") = (TZ(?b) = "")``: pyshacl's ``sh:lessThanOrEquals`` does not compare a
        time without zone with one that has).
        """
        ca, cb = pl.col(f"{a}_kind"), pl.col(f"{b}_kind")
        ia, ib = pl.col(f"{a}_inst"), pl.col(f"{b}_inst")
        za, zb = pl.col(f"{a}_tz"), pl.col(f"{b}_tz")
        slack = 14 * _HOUR_NS
        times = (
            pl.when(za == zb)
            .then(ia > ib)
            .otherwise(
                (ia - pl.when(za).then(0).otherwise(slack))
                > (ib + pl.when(zb).then(0).otherwise(slack))
            )
        )
        cond = (
            pl.when(~pl.col(f"{a}_valid") | ~pl.col(f"{b}_valid"))
            .then(None)
            .when((ca == "dt") & (cb == "dt"))
            .then(times)
            .when((ca == "num") & (cb == "num"))
            .then(pl.col(f"{a}_num") > pl.col(f"{b}_num"))
            .when((ca == "str") & (cb == "str"))
            .then(pl.col(f"{a}_lex") > pl.col(f"{b}_lex"))
            .when((ca == "bool") & (cb == "bool"))
            .then(pl.col(f"{a}_bool") & ~pl.col(f"{b}_bool"))
        )
        if same_zone:
            cond = cond & (ca == "dt") & (cb == "dt") & (za == zb)
        return self.where(df, (a, b), cond)

    def below(self, df: pl.DataFrame, col: str, limit: float) -> pl.DataFrame:
        """Rows where ``?col < limit`` (a typed numeric literal below the number)."""
        cond = (pl.col(f"{col}_kind") == "num") & (pl.col(f"{col}_num") < limit)
        return self.where(df, (col,), cond)

    def not_in(self, df: pl.DataFrame, col: str, values: tuple[str, ...]) -> pl.DataFrame:
        """Rows where ``?col NOT IN (values)`` holds for the given plain strings."""
        c = pl.col(f"{col}_kind")
        cond = (
            pl.when(c == "str")
            .then(~pl.col(f"{col}_lex").is_in(list(values)))
            .when(c == "unknown")
            .then(None)
            .when(~pl.col(f"{col}_valid"))
            .then(None)
            .otherwise(True)
        )
        return self.where(df, (col,), cond)

    # -- building blocks of the shapes
    def of(self, cls: str, pred: str, o: str = "o") -> pl.DataFrame:
        """(f, o) of the nodes of class ``cls`` and their values of ``pred``."""
        return self.typed(cls).join(self.p(pred), left_on="f", right_on="s").rename({"o": o})

    def missing(self, cls: str, pred: str) -> pl.DataFrame:
        """Nodes of ``cls`` without a value of ``pred`` (``^pred``: not the object of one)."""
        if pred.startswith("^"):
            has = self.p(pred[1:]).select(f="o")
        else:
            has = self.p(pred).select(f="s")
        return self.typed(cls).join(has, on="f", how="anti")

    def multi(self, cls: str | None, pred: str) -> pl.DataFrame:
        """Nodes (of ``cls``) with two values of ``pred`` that differ (``?a != ?b``)."""
        vals = self.p(pred).unique()
        if cls is not None:
            vals = vals.join(self.typed(cls), left_on="s", right_on="f", how="semi")
        dup = vals.filter(pl.len().over("s") > 1)
        pairs = dup.join(dup, on="s", suffix="_b").rename({"o": "a", "o_b": "b"})
        return self.ne(pairs, "a", "b").select(f="s")

    def undescribed(self, df: pl.DataFrame, col: str, cls: str | tuple[str, ...]) -> pl.DataFrame:
        """Rows whose ``col`` is not typed ``cls``."""
        return df.join(self.typed(cls, col), on=col, how="anti")


# --------------------------------------------------------------------------- the checks

Check = Callable[[Graph], pl.DataFrame]
_T1 = re.compile(r"^SELECT \?f WHERE \{ \?f a (\S+) \. MINUS \{ \?f (\S+) \?\w+ \} \}$")
_T2 = re.compile(
    r"^SELECT DISTINCT \?f WHERE \{ \?f a (\S+) ; (\S+) \?a, \?b \. FILTER\(\?a != \?b\) \}$"
)
_T3 = re.compile(r"\{ \?f a (\S+) MINUS \{ \?f (\S+) \?\w+ \} \}")
_T3_WHOLE = re.compile(
    r"^SELECT DISTINCT \?f WHERE \{ \{ \?f a \S+ MINUS \{ \?f \S+ \?\w+ \} \}"
    r"(?: UNION \{ \?f a \S+ MINUS \{ \?f \S+ \?\w+ \} \})* \}$"
)
TE = "mp:TaskExecution"


def _union(*frames: pl.DataFrame) -> pl.DataFrame:
    return pl.concat([f.select("f") for f in frames]).unique()


def _template(query: str) -> Check | None:
    """The columnar form of the three recurring query shapes (required, single, any missing)."""
    if m := _T1.match(query):
        cls, pred = m.groups()
        return lambda g: g.missing(cls, pred)
    if m := _T2.match(query):
        cls, pred = m.groups()
        return lambda g: g.multi(cls, pred)
    if _T3_WHOLE.match(query):
        parts = _T3.findall(query)
        return lambda g: _union(*(g.missing(c, p) for c, p in parts))
    return None


def _times(g: Graph, *steps: tuple[str, str, str]) -> pl.DataFrame:
    """Join a chain of (subject column, predicate, object column) steps."""
    df: pl.DataFrame | None = None
    for s, pred, o in steps:
        part = g.p(pred).rename({"s": s, "o": o})
        df = part if df is None else df.join(part, on=s)
    assert df is not None
    return df


def _within(g: Graph, df: pl.DataFrame) -> pl.DataFrame:
    """Rows (f, a, t) whose time t lies before a's start or after a's end."""
    early = g.gt(df.join(g.p("prov:startedAtTime").rename({"s": "a", "o": "s"}), on="a"), "s", "t")
    late = g.gt(df.join(g.p("prov:endedAtTime").rename({"s": "a", "o": "e"}), on="a"), "t", "e")
    return _union(early, late)


def _not_typed_as(g: Graph, df: pl.DataFrame, col: str, *classes: str) -> pl.DataFrame:
    for cls in classes:
        df = g.undescribed(df, col, cls)
    return df


def _with_typed_object(g: Graph, pred: str, cls: tuple[str, ...]) -> pl.DataFrame:
    """Subjects with a ``pred`` value typed with one of ``cls`` (column f)."""
    return g.p(pred).join(g.typed(cls, "o"), on="o", how="semi").select(f="s")


def _start_after_end(g: Graph, cls: str) -> pl.DataFrame:
    """Nodes of ``cls`` whose start is after their end (both zoned or both not)."""
    df = g.of(cls, "prov:startedAtTime", "s").join(
        g.p("prov:endedAtTime").rename({"s": "f", "o": "e"}), on="f"
    )
    return g.gt(df, "s", "e", same_zone=True)


_EXPLICIT: dict[str, Check] = {
    "SELECT DISTINCT ?f WHERE { { ?f a mp:TaskExecution MINUS { ?f prov:startedAtTime ?s } } "
    "UNION { ?f a mp:TaskExecution MINUS { ?f prov:endedAtTime ?e } } "
    "MINUS { ?f mp:incomplete true } }": lambda g: _union(
        g.missing(TE, "prov:startedAtTime"), g.missing(TE, "prov:endedAtTime")
    ).join(
        g.with_info(g.p("mp:incomplete"), "o")
        .filter((pl.col("o_kind") == "bool") & pl.col("o_bool").fill_null(False))
        .select(f="s"),
        on="f",
        how="anti",
    ),
    "SELECT DISTINCT ?f WHERE { ?f a mp:TaskExecution . { ?f prov:startedAtTime ?a, ?b } UNION "
    "{ ?f prov:endedAtTime ?a, ?b } FILTER(?a != ?b) }": lambda g: _union(
        g.multi(TE, "prov:startedAtTime"), g.multi(TE, "prov:endedAtTime")
    ),
    "SELECT ?f WHERE { ?f a mp:TaskExecution . MINUS { ?f mp:task ?t . ?t a mp:Task ; "
    "mp:key ?k } }": lambda g: g.typed(TE).join(
        g.p("mp:task")
        .join(g.typed("mp:Task", "o"), on="o", how="semi")
        .join(g.p("mp:key").select(o="s"), on="o", how="semi")
        .select(f="s"),
        on="f",
        how="anti",
    ),
    "SELECT ?f WHERE { ?f a mp:TaskExecution . MINUS { ?f prov:wasAssociatedWith ?a . "
    "{ ?a a mp:Thread } UNION { ?a a mp:Worker } } }": lambda g: g.typed(TE).join(
        _with_typed_object(g, "prov:wasAssociatedWith", ("mp:Thread", "mp:Worker")),
        on="f",
        how="anti",
    ),
    "SELECT ?f WHERE { ?f a mp:TaskExecution ; mp:duration ?d . FILTER(?d < 0) }": lambda g: (
        g.below(g.of(TE, "mp:duration"), "o", 0)
    ),
    "SELECT DISTINCT ?f WHERE { ?f a mp:TaskExecution ; mp:usedReplica ?r . "
    "MINUS { ?r a mp:ChunkReplica } }": lambda g: g.undescribed(
        g.of(TE, "mp:usedReplica", "r"), "r", "mp:ChunkReplica"
    ),
    "SELECT DISTINCT ?f WHERE { ?f a mp:TaskExecution ; prov:startedAtTime ?s ; "
    "mp:usedReplica/prov:wasGeneratedBy/prov:endedAtTime ?t . FILTER(?t > ?s) }": lambda g: g.gt(
        g.of(TE, "prov:startedAtTime", "s").join(
            _times(
                g,
                ("f", "mp:usedReplica", "r"),
                ("r", "prov:wasGeneratedBy", "x"),
                ("x", "prov:endedAtTime", "t"),
            ),
            on="f",
        ),
        "t",
        "s",
    ),
    "SELECT DISTINCT ?f WHERE { { ?f a mp:TaskExecution ; mp:prefix ?p . "
    "MINUS { ?p a mp:TaskPrefix } } UNION { ?f a mp:TaskExecution ; mp:prefix ?p, ?q . "
    "FILTER(?p != ?q) } }": lambda g: _union(
        g.undescribed(g.of(TE, "mp:prefix", "p"), "p", "mp:TaskPrefix"),
        g.multi(TE, "mp:prefix"),
    ),
    "SELECT DISTINCT ?f WHERE { { ?f a mp:TaskExecution ; mp:inputTransferCount ?v "
    "FILTER(?v < 1) } UNION { ?f a mp:TaskExecution ; mp:inputTransferSeconds ?v "
    "FILTER(?v < 0) } UNION { ?f a mp:TaskExecution ; mp:inputTransferBytes ?v "
    "FILTER(?v < 0) } }": lambda g: _union(
        g.below(g.of(TE, "mp:inputTransferCount"), "o", 1),
        g.below(g.of(TE, "mp:inputTransferSeconds"), "o", 0),
        g.below(g.of(TE, "mp:inputTransferBytes"), "o", 0),
    ),
    "SELECT DISTINCT ?f WHERE { { ?f a mp:TaskExecution MINUS { ?f mp:partOfRun ?r . "
    "?r a mp:Run } } UNION { ?f a mp:TaskExecution ; mp:partOfRun ?r, ?q . "
    "FILTER(?r != ?q) } }": lambda g: _union(
        g.typed(TE).join(_with_typed_object(g, "mp:partOfRun", ("mp:Run",)), on="f", how="anti"),
        g.multi(TE, "mp:partOfRun"),
    ),
    "SELECT DISTINCT ?f WHERE { ?x prov:qualifiedAssociation ?f . "
    "MINUS { ?f prov:agent ?a } }": lambda g: (
        g.p("prov:qualifiedAssociation")
        .select(f="o")
        .join(g.p("prov:agent").select(f="s"), on="f", how="anti")
    ),
    "SELECT ?f WHERE { ?f a mp:Thread . MINUS { ?f prov:actedOnBehalfOf ?p . "
    "?p a mp:WorkerProcess } }": lambda g: g.typed("mp:Thread").join(
        _with_typed_object(g, "prov:actedOnBehalfOf", ("mp:WorkerProcess",)), on="f", how="anti"
    ),
    "SELECT DISTINCT ?f WHERE { { ?f a mp:File MINUS { ?f mp:fileScope ?s } } UNION "
    '{ ?f a mp:File ; mp:fileScope ?s FILTER(?s NOT IN ("shared", "node", "process")) } UNION '
    "{ ?f a mp:File ; mp:fileScope ?s, ?t FILTER(?s != ?t) } }": lambda g: _union(
        g.missing("mp:File", "mp:fileScope"),
        g.not_in(g.of("mp:File", "mp:fileScope"), "o", ("shared", "node", "process")),
        g.multi("mp:File", "mp:fileScope"),
    ),
    "SELECT DISTINCT ?f WHERE { { ?f a mp:File ; mp:process ?p MINUS { ?p a mp:Process } } "
    "UNION { ?f a mp:File ; mp:process ?p, ?q FILTER(?p != ?q) } }": lambda g: _union(
        g.undescribed(g.of("mp:File", "mp:process", "p"), "p", "mp:Process"),
        g.multi("mp:File", "mp:process"),
    ),
    "SELECT DISTINCT ?f WHERE { ?f a mp:Process ; mp:candidateWorker ?w . "
    "MINUS { ?w a mp:Worker } }": lambda g: g.undescribed(
        g.of("mp:Process", "mp:candidateWorker", "w"), "w", "mp:Worker"
    ),
    "SELECT ?f WHERE { ?f a mp:Process . MINUS { ?f mp:darshanLog ?x } "
    "MINUS { ?f a mp:WorkerProcess } }": lambda g: g.undescribed(
        g.missing("mp:Process", "mp:darshanLog"), "f", "mp:WorkerProcess"
    ),
    "SELECT DISTINCT ?f WHERE { ?f a mp:FileVersion ; prov:wasRevisionOf ?p . "
    "MINUS { ?p a mp:FileVersion } }": lambda g: g.undescribed(
        g.of("mp:FileVersion", "prov:wasRevisionOf", "p"), "p", "mp:FileVersion"
    ),
    "SELECT DISTINCT ?f WHERE { { ?f a mp:FileVersion MINUS { ?f prov:specializationOf ?x } } "
    "UNION { ?f a mp:FileVersion ; prov:specializationOf ?x MINUS { ?x a mp:File } } }": lambda g: (
        _union(
            g.missing("mp:FileVersion", "prov:specializationOf"),
            g.undescribed(g.of("mp:FileVersion", "prov:specializationOf", "x"), "x", "mp:File"),
        )
    ),
    "SELECT ?f WHERE { ?f a mp:ProcessActivity . "
    "MINUS { ?f prov:wasAssociatedWith ?p . ?p a mp:Process } }": lambda g: g.typed(
        "mp:ProcessActivity"
    ).join(_with_typed_object(g, "prov:wasAssociatedWith", ("mp:Process",)), on="f", how="anti"),
    "SELECT ?f WHERE { ?f a mp:IOActivity . MINUS { ?f a mp:TaskExecution } "
    "MINUS { ?f a mp:ProcessActivity } }": lambda g: _not_typed_as(
        g, g.typed("mp:IOActivity"), "f", TE, "mp:ProcessActivity"
    ),
    "SELECT DISTINCT ?f WHERE { ?a prov:qualifiedUsage ?f . ?b prov:qualifiedUsage ?f . "
    "FILTER(?a != ?b) }": lambda g: (
        g.p("prov:qualifiedUsage").unique().filter(pl.len().over("o") > 1).select(f="o")
    ),
    "SELECT ?f WHERE { { ?f a mp:IOUsage ; mp:readCount ?c . FILTER(?c < 1) } UNION "
    "{ ?f a mp:IOUsage ; mp:bytesRead ?b . FILTER(?b < 0) } }": lambda g: _union(
        g.below(g.of("mp:IOUsage", "mp:readCount"), "o", 1),
        g.below(g.of("mp:IOUsage", "mp:bytesRead"), "o", 0),
    ),
    "SELECT ?f WHERE { { ?f a mp:IOUsage } UNION { ?f a mp:IOGeneration } "
    "?f mp:firstTime ?a ; mp:lastTime ?b . FILTER(?a > ?b) }": lambda g: g.gt(
        g.typed(("mp:IOUsage", "mp:IOGeneration"))
        .join(g.p("mp:firstTime").rename({"s": "f", "o": "a"}), on="f")
        .join(g.p("mp:lastTime").rename({"s": "f", "o": "b"}), on="f"),
        "a",
        "b",
    ),
    "SELECT ?f WHERE { { ?f a mp:IOUsage } UNION { ?f a mp:IOGeneration } ?f mp:linkStatus ?s . "
    'FILTER(?s NOT IN ("linked", "process", "ambiguous", "unlinked")) }': lambda g: g.not_in(
        g.typed(("mp:IOUsage", "mp:IOGeneration")).join(
            g.p("mp:linkStatus").rename({"s": "f"}), on="f"
        ),
        "o",
        ("linked", "process", "ambiguous", "unlinked"),
    ),
    "SELECT ?f WHERE { ?f a mp:FileVersion ; prov:wasGeneratedBy ?a . "
    "MINUS { ?a a mp:TaskExecution } MINUS { ?a a mp:ProcessActivity } }": lambda g: _not_typed_as(
        g, g.of("mp:FileVersion", "prov:wasGeneratedBy", "a"), "a", TE, "mp:ProcessActivity"
    ),
    "SELECT ?f WHERE { ?f a mp:IOGeneration ; prov:activity ?a . "
    "MINUS { ?a a mp:TaskExecution } MINUS { ?a a mp:ProcessActivity } }": lambda g: _not_typed_as(
        g, g.of("mp:IOGeneration", "prov:activity", "a"), "a", TE, "mp:ProcessActivity"
    ),
    "SELECT ?f WHERE { ?f a mp:IOGeneration ; mp:writeCount ?c . FILTER(?c < 1) }": lambda g: (
        g.below(g.of("mp:IOGeneration", "mp:writeCount"), "o", 1)
    ),
    "SELECT ?f WHERE { ?f a mp:IOSegment . MINUS { ?f mp:aggregatedBy ?u . ?u a mp:IOUsage } "
    "MINUS { ?f mp:aggregatedBy ?u . ?u a mp:IOGeneration } }": lambda g: (
        g.typed("mp:IOSegment")
        .join(_with_typed_object(g, "mp:aggregatedBy", ("mp:IOUsage",)), on="f", how="anti")
        .join(_with_typed_object(g, "mp:aggregatedBy", ("mp:IOGeneration",)), on="f", how="anti")
    ),
    "SELECT ?f WHERE { ?f a mp:IOSegment ; mp:linkClock ?c . "
    'FILTER(?c NOT IN ("worker-hook", "worker-exact", "scheduler", "thread-order")) }': lambda g: (
        g.not_in(
            g.of("mp:IOSegment", "mp:linkClock"),
            "o",
            ("worker-hook", "worker-exact", "scheduler", "thread-order"),
        )
    ),
    # PROV sanity checks
    "SELECT DISTINCT ?f WHERE { ?a prov:used ?f . MINUS { ?f a ?t } }": lambda g: (
        g.p("prov:used").select(f="o").join(g.anytyped(), on="f", how="anti")
    ),
    "SELECT DISTINCT ?f WHERE { ?e prov:wasGeneratedBy ?f . MINUS { ?f a ?t } }": lambda g: (
        g.p("prov:wasGeneratedBy").select(f="o").join(g.anytyped(), on="f", how="anti")
    ),
    "SELECT DISTINCT ?f WHERE { ?a prov:wasAssociatedWith ?f . MINUS { ?f a ?t } }": lambda g: (
        g.p("prov:wasAssociatedWith").select(f="o").join(g.anytyped(), on="f", how="anti")
    ),
}


def _generated_after(
    g: Graph,
    relation: str,
    via: str = "prov:wasGeneratedBy",
    f_time: str = "prov:endedAtTime",
    p_time: str = "prov:startedAtTime",
) -> pl.DataFrame:
    """Rows (f, ...) where f relates to p and p's generation (``via``, then its ``p_time``)
    is later than f's (its ``f_time``)."""
    return g.gt(
        _times(g, ("f", relation, "p"), ("f", via, "a"), ("a", f_time, "fa")).join(
            _times(g, ("p", via, "b"), ("b", p_time, "pb")), on="p"
        ),
        "pb",
        "fa",
    )


def _constraint_checks() -> dict[tuple[str, str], Check]:
    """Columnar forms of :func:`constraints.checks`, by (rule, message)."""
    activity = constraints.classes_below(PROV_NS + "Activity")
    entity = constraints.classes_below(PROV_NS + "Entity")
    return {
        ("prov:start-precedes-end", "the activity ends before it starts"): lambda g: g.gt(
            _times(g, ("f", "prov:startedAtTime", "s"), ("f", "prov:endedAtTime", "e")), "s", "e"
        ),
        (
            "prov:generation-precedes-usage",
            "the entity is used by an activity that ended before the activity generating it began",
        ): lambda g: g.gt(
            _times(
                g,
                ("u", "prov:used", "f"),
                ("f", "prov:wasGeneratedBy", "g"),
                ("g", "prov:startedAtTime", "gs"),
            ).join(g.p("prov:endedAtTime").rename({"s": "u", "o": "ue"}), on="u"),
            "gs",
            "ue",
        ),
        (
            "prov:generation-generation-ordering",
            "the entity has more than one generating activity (unique generation)",
        ): lambda g: g.multi(None, "prov:wasGeneratedBy"),
        (
            "prov:specialization-generation-ordering",
            "the entity is generated before the entity it specialises",
        ): lambda g: _generated_after(g, "prov:specializationOf"),
        (
            "prov:derivation-generation-generation-ordering",
            "the revision is generated before the entity it revises",
        ): lambda g: _generated_after(
            g, "prov:wasRevisionOf", "prov:qualifiedGeneration", "prov:atTime", "prov:atTime"
        ),
        (
            "prov:derivation-generation-generation-ordering",
            "the entity is derived from an entity generated after it",
        ): lambda g: _generated_after(g, "prov:wasDerivedFrom"),
        (
            "prov:usage-within-activity",
            "the usage's time lies outside its activity's start and end",
        ): lambda g: _within(
            g, _times(g, ("a", "prov:qualifiedUsage", "f"), ("f", "prov:atTime", "t"))
        ),
        (
            "prov:generation-within-activity",
            "the generation's time lies outside its activity's start and end",
        ): lambda g: _within(
            g,
            g.typed("prov:Generation").join(
                _times(g, ("f", "prov:activity", "a"), ("f", "prov:atTime", "t")), on="f"
            ),
        ),
        ("prov:entity-activity-disjoint", "the node is both an activity and an entity"): lambda g: (
            g.typed(activity).join(g.typed(entity), on="f", how="semi")
        ),
        (
            "metaprov:utc-time",
            "a time is not an xsd:dateTime in UTC with an explicit Z",
        ): _utc_time,
    }


def _utc_time(g: Graph) -> pl.DataFrame:
    rows = pl.concat([g.p(p) for p in constraints.TIME_PREDICATES]).rename({"s": "f"})
    rows = g.with_info(rows, "o")
    # !isLITERAL || DATATYPE != xsd:dateTime || TZ != "Z"; an invalid dateTime errs (no row)
    bad = (
        (pl.col("o_kind") == "node")
        | (pl.col("o_kind") != "dt")
        | (pl.col("o_valid") & ~pl.col("o_utc").fill_null(False))
    )
    return rows.filter(bad).select("f")


def _submitted_after_start(g: Graph) -> pl.DataFrame:
    """Batch jobs submitted after they started (both zoned or both not)."""
    df = g.of("mp:Job", "mp:submittedAt", "s").join(
        g.p("prov:startedAtTime").rename({"s": "f", "o": "e"}), on="f"
    )
    return g.gt(df, "s", "e", same_zone=True)


_EXPLICIT[JOB_SUBMITTED_AFTER_START] = _submitted_after_start

for _cls, _ in START_BEFORE_END:
    _EXPLICIT[start_after_end(_cls)] = lambda g, c=f"mp:{_cls}": _start_after_end(g, c)


@cache
def twins() -> dict[str, Check]:
    """The columnar implementation of every check, keyed by the check's SPARQL query."""
    out: dict[str, Check] = {}
    for _, query, _ in WARNING_CHECKS:
        out[query] = lambda g, q=query: g.of("mp:Run", re.search(r"mp:\w+Count", q)[0]).select("f")
    for _, query, _ in SPARQL_CHECKS + PROV_CHECKS:
        impl = _EXPLICIT.get(query) or _template(query)
        if impl is not None:
            out[query] = impl
    by_rule = _constraint_checks()
    for rule, query, message in constraints.checks():
        if (rule, message) in by_rule:
            out[query] = by_rule[(rule, message)]
    return out


def focus_values(ids: pl.Series) -> list[str]:
    """The focus nodes as the SPARQL engine names them (IRI, blank node label, literal value)."""
    import pyoxigraph as ox

    out = []
    for term in ids.cast(pl.String).to_list():
        if term.startswith("<"):
            out.append(term[1:-1])
        elif term.startswith("_:"):
            out.append(term[2:])
        else:  # a literal: its value, escapes decoded
            parsed = next(
                iter(ox.parse(f"<x:s> <x:p> {term} .".encode(), format=ox.RdfFormat.N_TRIPLES))
            )
            out.append(parsed.object.value)
    return out


def run_check(graph: Graph, query: str) -> list[str]:
    """Focus nodes (distinct, sorted) that violate the check with this SPARQL query."""
    impl = twins()[query]
    found = impl(graph).get_column("f").unique()
    return sorted(focus_values(found))


__all__ = ["read", "Graph", "twins", "run_check", "needed_predicates", "CHUNK_BYTES"]
