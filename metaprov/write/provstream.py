"""PROV-N, PROV-JSON and PROV-XML written streaming, block by block, at any size.

Input: a :class:`~metaprov.mapping.ProvGraph`. Output: the PROV-DM document that
:func:`metaprov.write.provdm.build_document` builds in memory (the same records, read back by the
``prov`` package as equal documents: see ``tests/unit/test_provstream.py``), written like the
line-based RDF formats: each column block becomes its records' text in a few pyarrow
element-wise joins (:mod:`metaprov.write.rows`), its IRIs qualified names a column at a time
(:mod:`metaprov.write.qnames`), no Python object per record.

The mapping rules are those of :mod:`metaprov.write.provdm` (documented in ``docs/formats.md``):

- a node typed with a PROV class (``prov:Activity``, ``prov:Agent``, ``prov:Entity`` or a
  subclass) is that element, declared once, its other classes as ``prov:type``; a node typed
  with no PROV class is an entity, and its ``prov:atTime`` the time of its generation;
- a qualified node (the object of a ``prov:qualifiedX``) is a relation with its IRI as
  identifier, its parent as first term; a plain PROV-O relation triple is a relation without
  identifier;
- every other property is an attribute.

Two passes over the graph (the mapping is deterministic and its shared tables are computed
once): the first keeps what a block cannot know alone, the second writes.

- the parent of every qualified node (its IRI -> the subject and the ``prov:qualifiedX``
  pointing at it);
- the blocks that only add to subjects typed by another block (``Block.restates``: the
  I/O activity of task executions, ...), merged into that block's records so that every element
  is declared once;
- IRIs outside the document's namespaces (given prefixes ``ns1``, ``ns2``, ... in order).

Memory: the qualified nodes' IRIs and the restating blocks (about 250 bytes per task
execution), never the document. PROV-JSON groups records by kind (``"activity": {...}``):
each kind's records are spooled to a temporary file and the spools are concatenated at the end.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.errors import FormatError
from metaprov.mapping.block import Block, Column, byte_table, has_any_byte
from metaprov.mapping.terms import RDF, XSD
from metaprov.write.provdm import _ELEMENT_ATTRS, _QUALIFIED, _RELATIONS, namespaces
from metaprov.write.provdm import xml_local as _provdm_xml_local
from metaprov.write.qnames import Style, char_class, qualified_names
from metaprov.write.rows import BLOCKS_AHEAD, json_escape, write_text
from metaprov.write.rows import join_pieces as _join_pieces

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph

LARGE = pa.large_string()
PROV = "http://www.w3.org/ns/prov#"
_NULL = pa.scalar(None, LARGE)

#: PROV-N keyword and formal terms of each PROV-DM record kind (of an element: its positional
#: terms after the identifier).
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Entity": ("entity", ()),
    "Activity": ("activity", ("startTime", "endTime")),
    "Agent": ("agent", ()),
    "Usage": ("used", ("activity", "entity", "time")),
    "Generation": ("wasGeneratedBy", ("entity", "activity", "time")),
    "Association": ("wasAssociatedWith", ("activity", "agent", "plan")),
    "Delegation": ("actedOnBehalfOf", ("delegate", "responsible", "activity")),
    "Attribution": ("wasAttributedTo", ("entity", "agent")),
    "Specialization": ("specializationOf", ("specificEntity", "generalEntity")),
    "Alternate": ("alternateOf", ("alternate1", "alternate2")),
    "Derivation": (
        "wasDerivedFrom",
        ("generatedEntity", "usedEntity", "activity", "generation", "usage"),
    ),
    "Communication": ("wasInformedBy", ("informed", "informant")),
    "Start": ("wasStartedBy", ("activity", "trigger", "starter", "time")),
    "End": ("wasEndedBy", ("activity", "trigger", "ender", "time")),
    "Invalidation": ("wasInvalidatedBy", ("entity", "activity", "time")),
    "Influence": ("wasInfluencedBy", ("influencee", "influencer")),
    "Membership": ("hadMember", ("collection", "entity")),
}
#: Where each property of a qualified node goes: the second formal term, or a named one.
_SECOND = {PROV + k for k in ("entity", "activity", "agent", "influencer")}
_NAMED = {
    PROV + "atTime": "time",
    PROV + "hadPlan": "plan",
    PROV + "hadUsage": "usage",
    PROV + "hadGeneration": "generation",
}
#: Attributes PROV-XML must write before the others (the order of prov.xsd).
_XML_FIRST = ("prov:label", "prov:location", "prov:role", "prov:type", "prov:value")


def write_provn(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write PROV-N; returns the number of triples of the source graph."""
    return _write(graph, out, _ProvN)


def write_provjson(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write PROV-JSON; returns the number of triples of the source graph."""
    return _write(graph, out, _ProvJson)


def write_provxml(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write PROV-XML; returns the number of triples of the source graph."""
    return _write(graph, out, _ProvXml)


def _write(graph: ProvGraph, out: IO[bytes], syntax: type[_Syntax]) -> int:
    """Pass 1 (:func:`_survey`), then every block's records through ``syntax``."""
    ctx = graph.shared_context()
    try:
        plan = _survey(graph)
        names = _Names({**namespaces(graph), **plan.extra_ns})
        writer = syntax(out, names)
        writer.begin()
        n = 0
        for block in graph.blocks(ahead=BLOCKS_AHEAD):
            n += block.n_triples()
            if block.restates:
                continue
            for recs in _records(_merged(block, plan), plan):
                writer.write(recs)
        for block in plan.leftovers():
            for recs in _records(block, plan):
                writer.write(recs)
        writer.end()
        return n
    finally:
        del ctx
        graph.release_context()


# ---------------------------------------------------------------------------------------------
# Pass 1: what a block cannot know alone
# ---------------------------------------------------------------------------------------------


@dataclass
class _Plan:
    #: qualified node IRI -> position in ``parents`` / ``kinds``
    qualified: pd.Index
    parents: pa.Array
    kinds: np.ndarray  # index into _QUALIFIED_LIST
    restating: list[tuple[Block, pd.Index, np.ndarray]]  # block, its subjects, rows used
    extra_ns: dict[str, str]

    def leftovers(self) -> Iterator[Block]:
        """The rows of restating blocks whose subject no other block typed."""
        for block, _, used in self.restating:
            if not used.all():
                yield _take(block, ~used)


_QUALIFIED_LIST = list(_QUALIFIED)


def _survey(graph: ProvGraph) -> _Plan:
    """Pass 1: the qualified nodes' parents, the restating blocks, IRIs outside namespaces."""
    known = tuple(namespaces(graph).values()) + (str(RDF.type)[: -len("type")],)
    q_iri: list[pa.Array] = []
    q_parent: list[pa.Array] = []
    q_kind: list[np.ndarray] = []
    restating: list[tuple[Block, pd.Index, np.ndarray]] = []
    outside: set[str] = set()
    for block in graph.blocks(ahead=BLOCKS_AHEAD):
        if block.restates:
            restating.append(
                (block, pd.Index(block.subjects.to_pandas()), np.zeros(len(block), bool))
            )
        for col in block.columns:
            if col.predicate.startswith(PROV) and col.predicate[len(PROV) :] in _QUALIFIED:
                subj, obj = _pairs(block.subjects, col)
                q_iri.append(obj)
                q_parent.append(subj)
                kind = _QUALIFIED_LIST.index(col.predicate[len(PROV) :])
                q_kind.append(np.full(len(obj), kind, np.int8))
        outside |= _outside(block, known)
    iris = pa.concat_arrays(q_iri) if q_iri else pa.array([], LARGE)
    index = pd.Index(iris.to_pandas())
    if not index.is_unique:
        dup = index[index.duplicated()][0]
        raise FormatError(f"{dup} qualifies more than one relation; PROV-DM cannot write it")
    extra = {f"ns{i + 1}": ns for i, ns in enumerate(sorted(outside))}
    return _Plan(
        index,
        pa.concat_arrays(q_parent) if q_parent else pa.array([], LARGE),
        np.concatenate(q_kind) if q_kind else np.zeros(0, np.int8),
        restating,
        extra,
    )


def _outside(block: Block, known: tuple[str, ...]) -> set[str]:
    """Namespaces (the IRI up to its last ``/`` or ``#``) of the block's IRIs under no prefix."""
    found: set[str] = set()
    arrays = [block.subjects]
    for col in block.columns:
        if col.kind == "iri":
            if isinstance(col.values, str):
                arrays.append(pa.array([col.values], LARGE))
            else:
                arrays.append(pc.list_flatten(col.values) if col.multi else col.values)
        if not isinstance(col.values, str) or col.kind != "iri":
            arrays.append(pa.array([col.predicate], LARGE))
        if col.datatype:
            arrays.append(pa.array([col.datatype], LARGE))
    for arr in arrays:
        arr = arr.drop_null()
        if not len(arr):
            continue
        inside = pc.starts_with(arr, known[0])
        for ns in known[1:]:
            inside = pc.or_(inside, pc.starts_with(arr, ns))
        for iri in arr.filter(pc.invert(inside)).unique().to_pylist():
            cut = max(iri.rfind("/"), iri.rfind("#"))
            found.add(iri[: cut + 1] if cut > 0 else iri)
    return found


def _pairs(subjects: pa.Array, col: Column) -> tuple[pa.Array, pa.Array]:
    """(subject, object) of every triple of a column (lists flattened, nulls left out)."""
    vals = col.values
    if isinstance(vals, str):
        return subjects, pa.repeat(pa.scalar(vals, LARGE), len(subjects))
    if col.multi:
        subj = subjects.take(pc.list_parent_indices(vals))
        flat = pc.list_flatten(vals)
        return subj, flat
    valid = pc.is_valid(vals)
    return subjects.filter(valid), vals.filter(valid)


def _take(block: Block, mask: np.ndarray) -> Block:
    """The rows of a block where ``mask`` holds (constant columns kept as they are)."""
    sel = pa.array(mask)
    cols = [
        Column(
            c.predicate,
            c.values if isinstance(c.values, str) else c.values.filter(sel),
            c.kind,
            c.datatype,
        )
        for c in block.columns
    ]
    return Block(block.subjects.filter(sel), cols, restates=False)


def _merged(block: Block, plan: _Plan) -> Block:
    """The block with the columns of restating blocks about its subjects appended (their
    rows marked used)."""
    if not plan.restating:
        return block
    extra: list[Column] = []
    subjects = block.subjects.to_pandas()
    for rblock, index, used in plan.restating:
        pos = index.get_indexer(subjects)
        hit = pos >= 0
        if not hit.any():
            continue
        used[pos[hit]] = True
        take = pa.array(np.where(hit, pos, 0))
        mask = pa.array(~hit)
        for col in rblock.columns:
            if isinstance(col.values, str):
                vals: Any = pc.if_else(pa.array(hit), pa.scalar(col.values, LARGE), _NULL)
            else:
                vals = col.values.take(take)
                vals = pc.if_else(mask, pa.scalar(None, vals.type), vals)
            extra.append(Column(col.predicate, vals, col.kind, col.datatype))
    if not extra:
        return block
    return Block(block.subjects, [*block.columns, *extra], restates=False)


# ---------------------------------------------------------------------------------------------
# Blocks -> record sets
# ---------------------------------------------------------------------------------------------


@dataclass
class Term:
    """One value per row (a column, or a list column for several, or a constant)."""

    kind: str  # iri, str, typed, time
    values: pa.Array | str
    datatype: str | None = None

    @property
    def multi(self) -> bool:
        return isinstance(self.values, (pa.ListArray, pa.LargeListArray))


@dataclass
class Records:
    """Records of one kind, one per row: identifier, formal terms, attributes."""

    kind: str  # a key of KINDS
    n: int
    ident: pa.Array | None
    formals: dict[str, Term] = field(default_factory=dict)
    attrs: list[tuple[str, Term]] = field(default_factory=list)  # (attribute IRI, value)

    def only_where(self, mask: pa.Array) -> Records:
        """The records of rows where ``mask`` holds."""
        if pc.all(mask).as_py():
            return self

        def keep(t: Term) -> Term:
            if isinstance(t.values, str):
                return t
            return Term(t.kind, t.values.filter(mask), t.datatype)

        return Records(
            self.kind,
            int(pc.sum(mask).as_py() or 0),
            None if self.ident is None else self.ident.filter(mask),
            {k: keep(v) for k, v in self.formals.items()},
            [(a, keep(v)) for a, v in self.attrs],
        )


def _records(block: Block, plan: _Plan) -> Iterator[Records]:
    """The block's records: its qualified nodes' relations, else its elements, and the plain
    relations and generations its columns state."""
    if not len(block):
        return
    pos = plan.qualified.get_indexer(block.subjects.to_pandas())
    is_q = pos >= 0
    if is_q.all():
        yield from _qualified(block, plan, pos)
        return
    if is_q.any():
        yield from _qualified(_take(block, is_q), plan, pos[is_q])
        block = _take(block, ~is_q)
    yield from _elements(block)


def _base_kind(iri: str) -> str | None:
    from prov.model import PROV_BASE_CLS

    for q, base in PROV_BASE_CLS.items():
        if q.uri == iri:
            return str(base.localpart)
    return None


def _elements(block: Block) -> Iterator[Records]:
    """Each subject an element record; its plain relation columns relations of their own."""
    types = [
        c.values for c in block.columns if c.predicate == RDF.type and isinstance(c.values, str)
    ]
    kinds = {k for k in map(_base_kind, types) if k in ("Entity", "Activity", "Agent")}
    if len(kinds) > 1:
        raise FormatError(
            f"{block.subjects[0].as_py()} is not one PROV element (types: {sorted(types)})"
        )
    kind = kinds.pop() if kinds else "Entity"
    own = PROV + kind
    rec = Records(kind, len(block), block.subjects)
    typed_prov = bool(kinds)
    for col in block.columns:
        p = col.predicate
        local = p[len(PROV) :] if p.startswith(PROV) else None
        if p == RDF.type:
            if col.values != own:
                rec.attrs.append((PROV + "type", Term("iri", col.values)))
        elif local in _RELATIONS:
            yield _plain(block.subjects, col, local)
        elif local in _QUALIFIED:
            continue
        elif p in _ELEMENT_ATTRS:
            name = _ELEMENT_ATTRS[p]
            if kind == "Activity" and name in ("startTime", "endTime"):
                rec.formals[name] = _term(col)
            else:
                rec.attrs.append((PROV + name, _term(col)))
        elif p == PROV + "atTime" and not typed_prov:
            # the instant of a node PROV-DM has no record for: the time of its generation
            yield Records(
                "Generation",
                len(block),
                pc.if_else(pc.is_valid(col.values), _cat(block.subjects, "/generation"), _NULL),
                {"entity": Term("iri", block.subjects), "time": _term(col)},
            ).only_where(pc.is_valid(col.values))
        else:
            rec.attrs.append((p, _term(col)))
    yield rec


def _plain(subjects: pa.Array, col: Column, local: str) -> Records:
    kind, extra = _RELATIONS[local]
    subj, obj = _pairs(subjects, col)
    first, second = KINDS[kind][1][:2]
    out = Records(kind, len(subj), None, {first: Term("iri", subj), second: Term("iri", obj)})
    if extra:
        out.attrs.append((PROV + "type", Term("iri", PROV + extra)))
    return out


def _qualified(block: Block, plan: _Plan, pos: np.ndarray) -> Iterator[Records]:
    """Each qualified node a relation record (grouped by kind when a block mixes them)."""
    kinds = plan.kinds[pos]
    for code in np.unique(kinds).tolist():
        rows = kinds == code
        part = block if rows.all() else _take(block, rows)
        parents = plan.parents.take(pa.array(pos[rows]))
        kind, extra = _QUALIFIED[_QUALIFIED_LIST[code]]
        formal = KINDS[kind][1]
        rec = Records(kind, len(part), part.subjects, {formal[0]: Term("iri", parents)})
        if extra:
            rec.attrs.append((PROV + "type", Term("iri", PROV + extra)))
        for col in part.columns:
            p = col.predicate
            if p == RDF.type:
                if col.values not in (PROV + kind, PROV + str(extra)):
                    rec.attrs.append((PROV + "type", _term(col)))
            elif p in _SECOND:
                rec.formals[formal[1]] = _term(col)
            elif p == PROV + "hadActivity":
                rec.formals[{"Start": "starter", "End": "ender"}.get(kind, "activity")] = _term(col)
            elif p in _NAMED:
                rec.formals[_NAMED[p]] = _term(col)
            else:
                rec.attrs.append((p, _term(col)))
        yield rec


def _term(col: Column) -> Term:
    if col.kind == "iri":
        return Term("iri", col.values)
    if col.kind == "str" or col.datatype in (None, XSD.string):
        return Term("str", col.values)
    if col.datatype == XSD.dateTime:
        return Term("time", col.values)
    return Term("typed", col.values, col.datatype)


def join_pieces(pieces: list[Any], skip_nulls: bool = False) -> pa.Array:
    """:func:`metaprov.write.rows.join_pieces`, also for a single array (which pyarrow's
    element-wise join shortens when it holds nulls and ``skip_nulls`` is set)."""
    arrays = [p for p in pieces if not isinstance(p, str)]
    if len(arrays) == 1 and len(pieces) == 1:
        only = arrays[0]
        return pc.fill_null(only, "") if skip_nulls else only
    return _join_pieces(pieces, skip_nulls)


#: Values :func:`by_unique` looks at before hashing a whole column.
_PROBE = 4096


def by_unique(
    values: pa.Array, fn: Callable[[pa.Array], pa.Array], unique: bool = False
) -> pa.Array:
    """``fn`` over the distinct values only when they repeat (agents, plans, the run's IRI in
    every row), taken back to every row; nulls stay null. ``unique``: the caller knows they do
    not (a block's subjects). A column whose first :data:`_PROBE` values are nearly all
    distinct is taken as it is (hashing it whole cost more than the names it would save)."""
    if unique or len(values) < 64:
        return fn(values)
    if len(values) > 2 * _PROBE:
        probe = pc.count_distinct(values.slice(0, _PROBE)).as_py()
        if probe > 0.9 * _PROBE:
            return fn(values)
    enc = pc.dictionary_encode(values)
    if 2 * len(enc.dictionary) > len(values):
        return fn(values)
    return fn(enc.dictionary).take(enc.indices)


def _cat(*parts: Any) -> pa.Array:
    return join_pieces(list(parts))


# ---------------------------------------------------------------------------------------------
# Names and values
# ---------------------------------------------------------------------------------------------


class _Names:
    """IRIs as ``prefix:local`` (the longest namespace that holds them)."""

    def __init__(self, ns: dict[str, str]) -> None:
        self.ns = dict(sorted(ns.items(), key=lambda kv: -len(kv[1])))
        self._const: dict[str, str] = {}

    def split(self, iris: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(prefix, local part) of each IRI (nulls stay null)."""
        valid = len(iris) - iris.null_count
        for p, ns in self.ns.items():
            # the common case: every IRI of the column under one namespace
            n_hit = pc.sum(pc.starts_with(iris, ns)).as_py() or 0
            if n_hit == valid:
                local = pc.utf8_slice_codeunits(iris, len(ns))
                prefix = pc.if_else(pc.is_valid(iris), pa.scalar(p, LARGE), _NULL)
                return prefix, local
            if n_hit:
                break
        prefix = pa.nulls(len(iris), LARGE)
        local = pa.nulls(len(iris), LARGE)
        todo = pc.is_valid(iris)
        for p, ns in self.ns.items():
            hit = pc.and_(todo, pc.starts_with(iris, ns))
            if not pc.any(hit).as_py():
                continue
            prefix = pc.if_else(hit, pa.scalar(p, LARGE), prefix)
            local = pc.if_else(hit, pc.utf8_slice_codeunits(iris, len(ns)), local)
            todo = pc.and_(todo, pc.invert(hit))
        if pc.any(todo).as_py():  # pragma: no cover - _survey gave every namespace a prefix
            raise FormatError(f"no prefix for {iris.filter(todo)[0].as_py()}")
        return prefix, local

    def qname(self, iri: str) -> str:
        """One IRI (a predicate, a class, a datatype) as ``prefix:local``."""
        if iri not in self._const:
            for p, ns in self.ns.items():
                if iri.startswith(ns):
                    self._const[iri] = f"{p}:{iri[len(ns) :]}"
                    break
            else:  # pragma: no cover - _survey gave every namespace a prefix
                raise FormatError(f"no prefix for {iri}")
        return self._const[iri]


def _iso(values: pa.Array) -> pa.Array:
    """``xsd:dateTime`` lexical forms as Python's ``isoformat`` writes the parsed value (what
    ``prov`` writes): ``Z`` as ``+00:00``, no fraction when it is zero."""
    z = pc.ends_with(values, "Z")
    if not pc.all(pc.or_(z, pc.is_null(values))).as_py():
        import datetime as dt

        from prov.model import parse_xsd_datetime

        def one(v: str | None) -> str | None:
            if v is None or v.endswith("Z"):
                return v
            parsed = parse_xsd_datetime(v)
            return parsed.isoformat() if isinstance(parsed, dt.datetime) else v

        values = pa.array([one(v) for v in values.to_pylist()], LARGE)
    out = pc.replace_substring_regex(values, r"\.0+Z$", "Z")
    out = pc.replace_substring_regex(out, r"\.(\d{1,5})Z$", ".\\1Z")
    out = _pad_fraction(out)
    return pc.replace_substring_regex(out, "Z$", "+00:00")


def _pad_fraction(values: pa.Array) -> pa.Array:
    """A fraction of fewer than six digits padded to six (as ``isoformat`` writes it)."""
    short = pc.match_substring_regex(values, r"\.\d{1,5}Z$")
    if not pc.any(short).as_py():
        return values
    fixed = values
    for k in range(1, 6):
        fixed = pc.replace_substring_regex(fixed, rf"\.(\d{{{k}}})Z$", ".\\1" + "0" * (6 - k) + "Z")
    return fixed


def _flat(term: Term, n: int) -> tuple[pa.Array, pa.Array | None]:
    """(values, parent row of each) of a term: lists flattened; constants repeated."""
    if isinstance(term.values, str):
        return pa.repeat(pa.scalar(term.values, LARGE), n), None
    if term.multi:
        return pc.list_flatten(term.values), pc.list_parent_indices(term.values)
    return term.values, None


def _regroup(text: pa.Array, parents: pa.Array | None, n: int, sep: str) -> pa.Array:
    """Flattened texts back to one text per row, joined with ``sep`` (null: none)."""
    if parents is None:
        return text
    idx = parents.to_numpy(zero_copy_only=False)
    counts = np.bincount(idx, minlength=n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    order = np.argsort(idx, kind="stable")
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), text.take(pa.array(order)))
    joined = pc.binary_join(lists, pa.scalar(sep, LARGE))
    return pc.if_else(pc.equal(pa.array(counts), 0), _NULL, joined)


# ---------------------------------------------------------------------------------------------
# Syntaxes
# ---------------------------------------------------------------------------------------------


class _Syntax:
    def __init__(self, out: IO[bytes], names: _Names) -> None:
        self.out = out
        self.names = names

    def begin(self) -> None:
        raise NotImplementedError

    def write(self, recs: Records) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError

    def attr_order(self, recs: Records) -> list[tuple[str, str, Term]]:
        named = [(self.names.qname(a), a, t) for a, t in recs.attrs]
        return sorted(named, key=lambda x: x[0])


# --- PROV-N ----------------------------------------------------------------------------------

#: PROV-N local parts (``prov``'s rules): the characters PN_LOCAL holds as they are, its
#: metacharacters backslash-escaped; a value with any other character (outside ASCII too), a
#: ``%`` not followed by two hex digits, a leading ``-``/``.`` or a trailing ``.`` goes through
#: ``prov``'s own escaping.
_PROVN_META = "='(),:;[]"
_PROVN_PLAIN = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-/@~&+*?#$!.%"
_HEXDIGIT = char_class("0123456789ABCDEFabcdef")
_NOT_HEX = char_class("0123456789ABCDEFabcdef", negate=True)


def _provn_rule(local: pa.Array) -> pa.Array:
    from prov.identifier import _provn_escape_local

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pa.array([_provn_escape_local(v)[0] for v in local.to_pylist()], LARGE)


_PROVN_STYLE = Style(
    exact="|".join(
        [
            char_class(_PROVN_PLAIN + _PROVN_META, negate=True),
            f"%(?:$|{_NOT_HEX}|{_HEXDIGIT}(?:$|{_NOT_HEX}))",
            r"^[\x2D\x2E]",
            r"\x2E$",
        ]
    ),
    rule=_provn_rule,
    replace={c: "\\" + c for c in _PROVN_META},
)


def _provn_string(values: pa.Array) -> pa.Array:
    """PROV-N string literals (``prov``'s rule: ``\\`` and ``"`` escaped; a text with a line
    feed triple-quoted, else CR written ``\\r``)."""
    s = pc.replace_substring(values, "\\", "\\\\")
    s = pc.replace_substring(s, '"', '\\"')
    multi = pc.fill_null(pc.match_substring(s, "\n"), False)
    short = join_pieces(['"', pc.replace_substring(s, "\r", "\\r"), '"'])
    long = join_pieces(['"""', s, '"""'])
    return pc.if_else(multi, long, short)


class _ProvN(_Syntax):
    def begin(self) -> None:
        lines = ["document"]
        lines += [
            f"  prefix {p} <{ns}>" for p, ns in self.names.ns.items() if p not in ("prov", "xsd")
        ]
        self.out.write(("\n".join(lines) + "\n  \n").encode())

    def end(self) -> None:
        self.out.write(b"endDocument")

    def bare(self, iris: pa.Array, unique: bool = False) -> pa.Array:
        return by_unique(iris, self._bare, unique)

    def _bare(self, iris: pa.Array) -> pa.Array:
        return qualified_names(iris, self.names.ns, _PROVN_STYLE)

    def value(self, term: Term, n: int) -> tuple[list[Any], pa.Array | None]:
        """The pieces of each value's text (joined by the caller) and the row of each value
        (None: one per row)."""
        vals, parents = _flat(term, n)
        if term.kind == "iri":
            return ["'", self.bare(vals), "'"], parents
        if term.kind == "str":
            return [_provn_string(vals)], parents
        if term.kind == "time":
            return ['"', _iso(vals), '" %% xsd:dateTime'], parents
        dt = self.names.qname(str(term.datatype))
        return [_provn_string(vals), f" %% {dt}"], parents

    def write(self, recs: Records) -> None:
        keyword, formal = KINDS[recs.kind]
        pieces: list[Any] = [f"  {keyword}("]
        items: list[Any] = []
        if recs.ident is not None:
            ident = self.bare(recs.ident, unique=True)
            if recs.kind in ("Entity", "Activity", "Agent"):
                items.append(ident)
            else:
                pieces += [ident, "; "]
        for name in formal:
            term = recs.formals.get(name)
            if term is None:
                items.append("-")
                continue
            vals, _ = _flat(term, recs.n)
            text = _iso(vals) if term.kind == "time" else self.bare(vals)
            items.append(pc.fill_null(text, "-"))
        for i, item in enumerate(items):
            pieces += ([] if i == 0 else [", "]) + [item]
        attrs = [self._attribute(qn, term, recs.n) for qn, _, term in self.attr_order(recs)]
        if attrs and attrs[0][1] == "dense":
            # the first attribute on every row: the others spliced in after it
            pieces.append(", [" if items else "[")
            for i, (lead, how, parts) in enumerate(attrs):
                lead = lead[2:] if i == 0 else lead
                if how == "dense":
                    pieces += [lead, *parts]
                else:
                    pieces.append(join_pieces([lead, *parts]) if how == "sparse" else parts[0])
            pieces.append("]")
        elif attrs:
            extra = [
                parts[0] if how == "lists" else join_pieces([lead, *parts])
                for lead, how, parts in attrs
            ]
            joined = join_pieces(extra, skip_nulls=True)
            has = pc.greater(pc.binary_length(joined), 0)
            wrapped = join_pieces(
                [", " if items else "", "[", pc.utf8_slice_codeunits(joined, 2), "]"]
            )
            pieces.append(pc.if_else(has, wrapped, pa.scalar("", LARGE)))
        pieces.append(")\n")
        write_text(self.out, join_pieces(pieces, skip_nulls=True))

    def _attribute(self, qn: str, term: Term, n: int) -> tuple[str, str, list[Any]]:
        """``, qn=``, how its values come ("dense": one on every row; "sparse": one or none;
        "lists": several, already joined with their ``, qn=``) and the pieces of the value."""
        lead = f", {qn}="
        if isinstance(term.values, str):  # a constant: its text written once
            one = Term(term.kind, pa.array([term.values], LARGE), term.datatype)
            return lead, "dense", [str(join_pieces(self.value(one, 1)[0])[0].as_py())]
        parts, parents = self.value(term, n)
        if parents is not None:
            return lead, "lists", [_regroup(join_pieces([lead, *parts]), parents, n, "")]
        dense = all(isinstance(p, str) or not p.null_count for p in parts)
        return lead, "dense" if dense else "sparse", parts


# --- PROV-JSON -------------------------------------------------------------------------------


#: PROV-JSON names: quoted, local parts as they are; a value with a character JSON escapes goes
#: through :func:`~metaprov.write.rows.json_escape`.
_JSON_STYLE = Style(
    exact=char_class("".join(map(chr, range(0x20))) + '\\"'), rule=json_escape, quote='"'
)


def _json_members(parts: list[tuple[str, pa.Array | str, str]], n: int) -> list[Any]:
    """The pieces of a record's members, ``,``-separated, after ``{`` (nothing when a row has
    none; else each on its line and ``\n    `` before the closing brace). When the first member
    is on every row, the pieces are spliced straight into the row's join."""

    def dense(text: pa.Array | str) -> bool:
        return isinstance(text, str) or text.null_count == 0

    if not parts:
        return []
    if dense(parts[0][1]):
        pieces: list[Any] = []
        for i, (before, text, after) in enumerate(parts):
            lead = before if i == 0 else "," + before
            pieces += [lead, text, after] if dense(text) else [join_pieces([lead, text, after])]
        return [*pieces, "\n    "]
    members = [
        join_pieces(["," + before, _column(text, n), after]) for before, text, after in parts
    ]
    body = join_pieces(members, skip_nulls=True)
    empty = pc.equal(pc.binary_length(body), 0)
    inner = join_pieces([pc.utf8_slice_codeunits(body, 1), "\n    "])
    return [pc.if_else(empty, pa.scalar("", LARGE), inner)]


def _column(text: pa.Array | str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(text, LARGE), n) if isinstance(text, str) else text


class _ProvJson(_Syntax):
    """Records spooled per kind; the document is the prefixes and the spools in kind order."""

    def begin(self) -> None:
        self.spools: dict[str, IO[bytes]] = {}
        self.anon = 0

    def spool(self, keyword: str) -> IO[bytes]:
        if keyword not in self.spools:
            self.spools[keyword] = tempfile.TemporaryFile()
        return self.spools[keyword]

    def name(self, iris: pa.Array, unique: bool = False) -> pa.Array:
        return by_unique(iris, self._name, unique)

    def _name(self, iris: pa.Array) -> pa.Array:
        return qualified_names(iris, self.names.ns, _JSON_STYLE)

    def value(self, term: Term, n: int) -> tuple[pa.Array, pa.Array | None]:
        vals, parents = _flat(term, n)
        if term.kind == "iri":
            text = join_pieces(['{"$": ', self.name(vals), ', "type": "xsd:QName"}'])
        elif term.kind == "str":
            text = join_pieces(['"', json_escape(vals), '"'])
        elif term.kind == "time":
            text = join_pieces(['{"$": "', _iso(vals), '", "type": "xsd:dateTime"}'])
        else:
            dt = self.names.qname(str(term.datatype))
            text = join_pieces(['{"$": "', json_escape(vals), f'", "type": "{dt}"}}'])
        return text, parents

    def _values(self, terms: list[Term], n: int) -> pa.Array | str:
        """The comma-separated values of one attribute per row (null: none); one constant
        value as a plain text."""
        if len(terms) == 1 and isinstance(terms[0].values, str):
            t = terms[0]
            text, _ = self.value(Term(t.kind, pa.array([t.values], LARGE), t.datatype), 1)
            return str(text[0].as_py())
        if len(terms) == 1 and not terms[0].multi:
            return self.value(terms[0], n)[0]
        texts = []
        for term in terms:
            text, parents = self.value(term, n)
            texts.append(_regroup(join_pieces([", ", text]), parents, n, ""))
        joined = join_pieces(texts, skip_nulls=True)
        has = pc.greater(pc.binary_length(joined), 0)
        return pc.if_else(has, pc.utf8_slice_codeunits(joined, 2), _NULL)

    def write(self, recs: Records) -> None:
        keyword, formal = KINDS[recs.kind]
        if recs.ident is not None:
            ident = self.name(recs.ident, unique=True)
        else:
            ids = np.arange(self.anon + 1, self.anon + recs.n + 1)
            self.anon += recs.n
            ident = join_pieces(['"_:id', pc.cast(pa.array(ids), LARGE), '"'])
        # each part: (text before, value text, text after); left out where the value is null
        parts: list[tuple[str, pa.Array | str, str]] = []
        for name in formal:
            term = recs.formals.get(name)
            if term is None:
                continue
            vals, _ = _flat(term, recs.n)
            text = join_pieces(['"', _iso(vals), '"']) if term.kind == "time" else self.name(vals)
            parts.append((f'\n      "prov:{name}": ', text, ""))
        by_attr: dict[str, list[Term]] = {}
        for qn, _, term in self.attr_order(recs):
            by_attr.setdefault(qn, []).append(term)
        for qn, terms in by_attr.items():
            parts.append((f'\n      "{qn}": [', self._values(terms, recs.n), "]"))
        rows = join_pieces([",\n    ", ident, ": {", *_json_members(parts, recs.n), "}"], True)
        write_text(self.spool(keyword), rows)

    def end(self) -> None:
        import json

        prefixes = {p: ns for p, ns in self.names.ns.items() if p not in ("prov", "xsd")}
        self.out.write(
            b'{\n  "prefix": ' + json.dumps(prefixes, indent=4).replace("\n}", "\n  }").encode()
        )
        order = [k for k, _ in KINDS.values()]
        for keyword in sorted(self.spools, key=order.index):
            spool = self.spools[keyword]
            spool.seek(0)
            first = spool.read(2)  # the separator of the first record
            assert first in (b",\n", b"")
            self.out.write(f',\n  "{keyword}": {{\n'.encode())
            while chunk := spool.read(8 << 20):
                self.out.write(chunk)
            self.out.write(b"\n  }")
            spool.close()
        self.out.write(b"\n}\n")


# --- PROV-XML --------------------------------------------------------------------------------

#: Characters XML 1.0 cannot carry (as in :mod:`metaprov.write.provdm`).
_NOT_XML = "[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]"
#: PROV-XML local parts (:func:`metaprov.write.provdm.xml_local`): ASCII letters, digits, ``.``
#: and ``-`` as they are, ``_`` doubled, any other ASCII character as ``_`` and two hex digits;
#: a value with a character outside ASCII, or starting with a digit, ``.`` or ``-``, goes
#: through ``xml_local`` itself.
_XML_NAME = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-"
_XML_STYLE = Style(
    exact=r"[^\x00-\x7F]|^[0-9\x2D\x2E]",
    rule=lambda local: pa.array([_provdm_xml_local(v) for v in local.to_pylist()], LARGE),
    replace={
        chr(c): "__" if chr(c) == "_" else f"_{c:02X}"
        for c in range(128)
        if chr(c) not in _XML_NAME
    },
)


#: Bytes of the characters :data:`_NOT_XML` names (0xEF: the lead byte of U+FFFE and U+FFFF).
_MAYBE_NOT_XML = byte_table(bytes([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xEF]))
_XML_ESCAPED = byte_table(b"&<>\r")


def _xml_text(values: pa.Array) -> pa.Array:
    """Text as XML element content (``&``, ``<``, ``>`` and CR escaped)."""
    if not has_any_byte(values, _XML_ESCAPED, "[&<>\r]"):
        return values
    out = pc.replace_substring(values, "&", "&amp;")
    out = pc.replace_substring(out, "<", "&lt;")
    out = pc.replace_substring(out, ">", "&gt;")
    return pc.replace_substring(out, "\r", "&#13;")


class _ProvXml(_Syntax):
    def begin(self) -> None:
        # PROV-XML names XML Schema's types in its namespace without the "#" of the RDF one
        xsd = "http://www.w3.org/2001/XMLSchema"
        decl = " ".join(
            f'xmlns:{p}="{xsd if p == "xsd" else ns}"'
            for p, ns in [
                *self.names.ns.items(),
                ("xsi", "http://www.w3.org/2001/XMLSchema-instance"),
            ]
        )
        self.out.write(f"<?xml version='1.0' encoding='UTF-8'?>\n<prov:document {decl}>\n".encode())

    def end(self) -> None:
        self.out.write(b"</prov:document>\n")

    def qname(self, iris: pa.Array, unique: bool = False) -> pa.Array:
        """Qualified names (XML names: nothing in them to escape in an attribute)."""
        return by_unique(iris, self._qname, unique)

    def _qname(self, iris: pa.Array) -> pa.Array:
        return qualified_names(iris, self.names.ns, _XML_STYLE)

    def value(self, qn: str, term: Term, n: int) -> tuple[list[Any], pa.Array | None]:
        """The pieces of each value's element (joined by the caller) and the row of each value
        (None: one per row)."""
        vals, parents = _flat(term, n)
        open_ = f"\n    <{qn}"
        if term.kind == "iri":
            return [open_ + ' xsi:type="xsd:QName">', self.qname(vals), f"</{qn}>"], parents
        if term.kind == "time":
            return [open_ + ' xsi:type="xsd:dateTime">', _iso(vals), f"</{qn}>"], parents
        if term.kind != "str":
            dt = self.names.qname(str(term.datatype))
            return [open_ + f' xsi:type="{dt}">', _xml_text(vals), f"</{qn}>"], parents
        plain = [open_ + ">", _xml_text(vals), f"</{qn}>"]
        if not has_any_byte(vals, _MAYBE_NOT_XML, _NOT_XML):
            return plain, parents
        bad = pc.fill_null(pc.match_substring_regex(vals, _NOT_XML), False)
        if not pc.any(bad).as_py():
            return plain, parents
        hexed = pa.array(
            [None if v is None else v.encode("utf-8").hex().upper() for v in vals.to_pylist()],
            LARGE,
        )
        coded = join_pieces([open_, ' xsi:type="xsd:hexBinary">', hexed, f"</{qn}>"])
        return [pc.if_else(bad, coded, join_pieces(plain))], parents

    def attr_order(self, recs: Records) -> list[tuple[str, str, Term]]:
        named = super().attr_order(recs)
        first = {q: i for i, q in enumerate(_XML_FIRST)}
        return sorted(named, key=lambda x: (first.get(x[0], len(first)), x[0]))

    def write(self, recs: Records) -> None:
        keyword, formal = KINDS[recs.kind]
        tag = f"prov:{keyword}"
        pieces: list[Any] = [f"  <{tag}"]
        if recs.ident is not None:
            pieces += [' prov:id="', self.qname(recs.ident, unique=True), '"']
        pieces.append(">")
        for name in formal:
            term = recs.formals.get(name)
            if term is None:
                continue
            vals, _ = _flat(term, recs.n)
            if term.kind == "time":
                text = join_pieces([f"\n    <prov:{name}>", _iso(vals), f"</prov:{name}>"])
            else:
                text = join_pieces([f'\n    <prov:{name} prov:ref="', self.qname(vals), '"/>'])
            pieces.append(text)
        for qn, _, term in self.attr_order(recs):
            if isinstance(term.values, str):  # a constant: its element written once
                one = Term(term.kind, pa.array([term.values], LARGE), term.datatype)
                parts, _ = self.value(qn, one, 1)
                pieces.append(str(join_pieces(parts)[0].as_py()))
                continue
            parts, parents = self.value(qn, term, recs.n)
            if parents is None and all(isinstance(p, str) or not p.null_count for p in parts):
                pieces += parts  # on every row: spliced straight into the row's join
            else:
                pieces.append(_regroup(join_pieces(parts), parents, recs.n, ""))
        pieces.append(f"\n  </{tag}>\n")
        write_text(self.out, join_pieces(pieces, skip_nulls=True))
