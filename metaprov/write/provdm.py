"""The PROV-DM document of a graph built in memory through the ``prov`` package (small runs).

The registered PROV-N, PROV-JSON and PROV-XML writers are :mod:`metaprov.write.provstream`
(streaming, any size); this module is the reference they are tested against, and what
``metaprov validate`` uses to read an RDF twin as PROV-DM (:func:`document_from_rdf`).

Input: a :class:`~metaprov.mapping.ProvGraph`. Output: the same provenance as a PROV-DM document.
The document is built straight from the graph's triples (:func:`document_from_rdf`), so the
three formats state every relation of the RDF with the same terms: activities, agents and
entities are declared once each (what several blocks say about one node is one record); each
plain PROV-O relation triple (``run prov:wasAssociatedWith scheduler``) is a relation without
identifier, and each qualified node (usage, generation, association) a relation with its IRI as
identifier and its time, plan and attributes, the two kept apart (``prov``'s own RDF reader
merges a plain triple into whichever qualified node of the subject it met last, in hash order);
``wasRevisionOf`` is a revision, and metaprov properties are attributes of their records.
Records and attributes are sorted: the bytes do not depend on the hash seed. Identifiers are qualified names under ``run:`` (the run's IRI),
``id:`` (the base), ``mp:``, ``prov:`` and ``xsd:``.

PROV-XML identifiers must be XML QNames, whose local part is an NCName: instance IRIs (``run:
task/%28...%29/execution/0``) are not. In PROV-XML every local part is therefore escaped
(:func:`xml_local`: ``_`` -> ``__``, any character other than a letter, digit, ``.`` or ``-``
-> ``_`` and its two hex digits, so ``/`` -> ``_2F``, ``%`` -> ``_25``, a leading digit ``0`` ->
``_30``); :func:`iri_local` undoes it. Text that XML 1.0 cannot carry at all (C0 control
characters other than tab, LF and CR) is written as its UTF-8 bytes in an ``xsd:hexBinary``
value. Both are documented in docs/formats.md.

The ``prov`` package holds the whole document in memory (a few thousand triples per second),
so these formats refuse graphs above ``PROV_LIMIT`` triples (see :mod:`metaprov.write`) unless
``force`` is given.
"""

from __future__ import annotations

import io
import re
import warnings
from typing import IO, TYPE_CHECKING, Any

from metaprov.errors import LimitError
from metaprov.mapping.block import Block
from metaprov.mapping.terms import PREFIXES, XSD
from metaprov.write.ntriples import block_triples
from metaprov.write.rows import write_nt

#: Largest graph (in triples) this in-memory path builds without ``force``; the registered
#: writers (:mod:`metaprov.write.provstream`) stream and have no limit.
PROV_LIMIT = 200_000

if TYPE_CHECKING:
    from prov.model import ProvDocument

    from metaprov.mapping import ProvGraph

#: Characters XML 1.0 cannot carry, not even as character references.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_NCNAME_SAFE = re.compile(r"[A-Za-z0-9.\-]")
_PROV = "http://www.w3.org/ns/prov#"


def _refuse(fmt: str, limit: int, what: str) -> LimitError:
    return LimitError(
        f"{fmt} goes through the prov package's in-memory document and is limited to "
        f"{limit:,} triples; this run has {what}",
        hint="use a streaming format (turtle, ntriples, nquads, trig, json-ld), "
        "or pass --force to wait (and use the memory)",
    )


def _limit(graph: ProvGraph, force: bool, fmt: str) -> list[Block]:
    """The graph's blocks, refusing (before any heavy work when possible) above the limit."""
    rec = graph.records
    # A task has at least 5 triples and an execution at least 9: refuse big runs up front.
    at_least = 5 * len(rec.tasks) + 9 * len(rec.executions)
    if at_least > PROV_LIMIT and not force:
        raise _refuse(fmt, PROV_LIMIT, f"at least {at_least:,}")
    blocks: list[Block] = []
    n = 0
    for block in graph.blocks():
        n += block_triples(block)
        if n > PROV_LIMIT and not force:
            raise _refuse(fmt, PROV_LIMIT, "more")
        blocks.append(block)
    return blocks


def namespaces(graph: ProvGraph) -> dict[str, str]:
    """Prefixes of the PROV-DM documents: the run, the base and the vocabularies."""
    ns = {"run": graph.run_iri + "/", "id": graph.base + "/"}
    ns.update({p: iri for p, iri in PREFIXES.items() if p in ("mp", "prov", "xsd")})
    return ns


def rdf_graph(graph: ProvGraph, blocks: list[Block], *, xml_safe: bool = False) -> Any:
    """The blocks as an rdflib Graph with the PROV-DM prefixes bound.

    Args:
        xml_safe: replace text XML 1.0 cannot carry by its UTF-8 bytes (``xsd:hexBinary``).
    """
    import pyoxigraph as ox
    import rdflib

    g = rdflib.Graph(bind_namespaces="none")
    for prefix, iri in namespaces(graph).items():
        g.bind(prefix, iri, override=True, replace=True)
    string = XSD.string
    hex_binary = rdflib.URIRef(XSD.string[: -len("string")] + "hexBinary")

    def term(t: Any) -> Any:
        if isinstance(t, ox.NamedNode):
            return rdflib.URIRef(t.value)
        dt = t.datatype.value
        if xml_safe and _NOT_XML.search(t.value):
            return rdflib.Literal(t.value.encode("utf-8").hex().upper(), datatype=hex_binary)
        return rdflib.Literal(t.value, datatype=None if dt == string else rdflib.URIRef(dt))

    for block in blocks:
        buf = io.BytesIO()
        write_nt(block, buf)
        g.addN(
            (term(t.subject), term(t.predicate), term(t.object), g)
            for t in ox.parse(buf.getvalue(), format=ox.RdfFormat.N_TRIPLES)
        )
    return g


def _as_entities(g: Any) -> None:
    """Nodes PROV-DM has no record for (state transitions, Darshan counters and records) become
    entities with their metaprov class as ``prov:type``, so the PROV-DM formats lose nothing.

    A node is left as it is when it is typed with a PROV class or is a qualified relation (the
    object of a ``prov:qualified*`` property); every other subject becomes an entity.
    """
    import rdflib
    from prov.model import PROV_BASE_CLS

    known = {rdflib.URIRef(q.uri) for q in PROV_BASE_CLS}
    qualified_nodes = {o for p in _QUALIFIED for o in g.objects(None, rdflib.URIRef(_PROV + p))}
    typed: dict[Any, bool] = {}
    for s in g.subjects(unique=True):
        typed[s] = s in qualified_nodes
    for s, _, o in g.triples((None, rdflib.RDF.type, None)):
        typed[s] = typed.get(s, False) or o in known
    entity = rdflib.URIRef(_PROV + "Entity")
    at_time = rdflib.URIRef(_PROV + "atTime")
    qualified = rdflib.URIRef(_PROV + "qualifiedGeneration")
    generation = rdflib.URIRef(_PROV + "Generation")
    for s in sorted(s for s, has in typed.items() if not has):
        g.add((s, rdflib.RDF.type, entity))
        # the instant of an event: the generation of its record (an entity has no prov:atTime)
        for t in list(g.objects(s, at_time)):
            gen = rdflib.URIRef(f"{s}/generation")
            g.remove((s, at_time, t))
            g.add((s, qualified, gen))
            g.add((gen, rdflib.RDF.type, generation))
            g.add((gen, at_time, t))


#: PROV-O relation property -> (PROV-DM record type, prov:type it adds or None).
_RELATIONS = {
    "used": ("Usage", None),
    "wasGeneratedBy": ("Generation", None),
    "wasAssociatedWith": ("Association", None),
    "actedOnBehalfOf": ("Delegation", None),
    "wasAttributedTo": ("Attribution", None),
    "specializationOf": ("Specialization", None),
    "alternateOf": ("Alternate", None),
    "wasDerivedFrom": ("Derivation", None),
    "wasRevisionOf": ("Derivation", "Revision"),
    "wasQuotedFrom": ("Derivation", "Quotation"),
    "hadPrimarySource": ("Derivation", "PrimarySource"),
    "wasInformedBy": ("Communication", None),
    "wasStartedBy": ("Start", None),
    "wasEndedBy": ("End", None),
    "wasInvalidatedBy": ("Invalidation", None),
    "wasInfluencedBy": ("Influence", None),
    "hadMember": ("Membership", None),
}
#: ``prov:qualifiedX`` property -> (PROV-DM record type, prov:type it adds or None).
_QUALIFIED = {
    "qualifiedUsage": ("Usage", None),
    "qualifiedGeneration": ("Generation", None),
    "qualifiedAssociation": ("Association", None),
    "qualifiedDelegation": ("Delegation", None),
    "qualifiedAttribution": ("Attribution", None),
    "qualifiedDerivation": ("Derivation", None),
    "qualifiedRevision": ("Derivation", "Revision"),
    "qualifiedQuotation": ("Derivation", "Quotation"),
    "qualifiedPrimarySource": ("Derivation", "PrimarySource"),
    "qualifiedCommunication": ("Communication", None),
    "qualifiedStart": ("Start", None),
    "qualifiedEnd": ("End", None),
    "qualifiedInvalidation": ("Invalidation", None),
    "qualifiedInfluence": ("Influence", None),
}
#: Properties of a qualified node naming a formal attribute other than its first.
_INFLUENCERS = ("entity", "activity", "agent", "influencer")
_FORMAL_OF_QUALIFIED = {
    "atTime": "time",
    "hadPlan": "plan",
    "hadUsage": "usage",
    "hadGeneration": "generation",
}
#: Element properties PROV-DM names differently (prov's PREDICATE_MAP).
_ELEMENT_ATTRS = {
    _PROV + "startedAtTime": "startTime",
    _PROV + "endedAtTime": "endTime",
    _PROV + "atLocation": "location",
    "http://www.w3.org/2000/01/rdf-schema#label": "label",
}


def _records_from_rdf(g: Any, doc: Any) -> list[tuple[Any, Any, list[tuple[Any, Any]]]]:
    """Every PROV-DM record the RDF states, as (type, identifier, attributes), straight from
    its triples: one element record per node, one relation record per plain PROV-O relation
    triple (no identifier) and one per qualified node (its IRI the identifier).

    Plain and qualified relations are kept apart: a plain ``run prov:wasAssociatedWith
    scheduler`` is its own association even when the run also has qualified associations
    (prov's RDF reader merges the plain triple into one of the qualified nodes, whichever it
    met last in set order). Values are decoded as ``prov``'s reader decodes them.
    """
    import rdflib
    from prov.model import PROV, PROV_BASE_CLS, PROV_REC_CLS
    from prov.serializers.provrdf import ProvRDFSerializer

    dec = ProvRDFSerializer(doc)
    cache: dict[Any, Any] = {}

    def value(t: Any) -> Any:
        if isinstance(t, rdflib.URIRef):
            v = cache.get(t)
            if v is None:
                v = cache[t] = dec.decode_rdf_representation(t, g)
            return v
        return dec.decode_rdf_representation(t, g)

    rdf_type = rdflib.RDF.type
    base = {rdflib.URIRef(q.uri): b for q, b in PROV_BASE_CLS.items()}
    element_kinds = {PROV["Entity"], PROV["Activity"], PROV["Agent"]}
    relation_of = {rdflib.URIRef(_PROV + k): v for k, v in _RELATIONS.items()}
    qualified_of = {rdflib.URIRef(_PROV + k): v for k, v in _QUALIFIED.items()}
    influencers = {rdflib.URIRef(_PROV + k) for k in _INFLUENCERS}
    formal_of_q = {rdflib.URIRef(_PROV + k): PROV[v] for k, v in _FORMAL_OF_QUALIFIED.items()}
    element_attr = {rdflib.URIRef(k): PROV[v] for k, v in _ELEMENT_ATTRS.items()}
    prov_type = PROV["type"]

    out: list[tuple[Any, Any, list[tuple[Any, Any]]]] = []
    # the qualified nodes: who points at each, and as what
    qnodes: dict[Any, tuple[Any, str, str | None]] = {}
    for s, p, o in g:
        if p in qualified_of:
            if o in qnodes:
                raise ValueError(f"{o} qualifies more than one relation")
            qnodes[o] = (s, *qualified_of[p])
    subjects: dict[Any, list[tuple[Any, Any]]] = {}
    for s, p, o in g:
        subjects.setdefault(s, []).append((p, o))
    for s, pos in subjects.items():
        if s in qnodes:
            first, kind, extra_type = qnodes[s]
            rtype = PROV[kind]
            formal = PROV_REC_CLS[rtype].FORMAL_ATTRIBUTES
            attrs: list[tuple[Any, Any]] = [(formal[0], value(first))]
            if extra_type:
                attrs.append((prov_type, PROV[extra_type]))
            for p, o in pos:
                if p == rdf_type:
                    if o not in (rdflib.URIRef(rtype.uri), rdflib.URIRef(_PROV + str(extra_type))):
                        attrs.append((prov_type, value(o)))
                elif p in influencers:
                    attrs.append((formal[1], value(o)))
                elif p == rdflib.URIRef(_PROV + "hadActivity"):
                    name = {"Start": "starter", "End": "ender"}.get(kind, "activity")
                    attrs.append((PROV[name], value(o)))
                elif p in formal_of_q:
                    attrs.append((formal_of_q[p], value(o)))
                else:
                    attrs.append((value(p), value(o)))
            out.append((rtype, value(s), attrs))
            continue
        kinds = {base[o] for p, o in pos if p == rdf_type and o in base} & element_kinds
        if len(kinds) != 1:
            raise ValueError(f"{s} is not one PROV element (types: {sorted(map(str, kinds))})")
        (rtype,) = kinds
        attrs = []
        for p, o in pos:
            if p == rdf_type:
                if o != rdflib.URIRef(rtype.uri):
                    attrs.append((prov_type, value(o)))
            elif p in relation_of:
                kind, extra_type = relation_of[p]
                rel = PROV[kind]
                formal = PROV_REC_CLS[rel].FORMAL_ATTRIBUTES
                rattrs = [(formal[0], value(s)), (formal[1], value(o))]
                if extra_type:
                    rattrs.append((prov_type, PROV[extra_type]))
                out.append((rel, None, rattrs))
            elif p in qualified_of:
                continue  # the qualified node is a record of its own
            elif p in element_attr:
                attrs.append((element_attr[p], value(o)))
            else:
                attrs.append((value(p), value(o)))
        out.append((rtype, value(s), attrs))
    return out


def build_document(
    graph: ProvGraph,
    force: bool = False,
    fmt: str = "PROV",
    *,
    blocks: list[Block] | None = None,
    xml_safe: bool = False,
) -> ProvDocument:
    """The graph as a ``prov`` ProvDocument, built straight from its triples.

    Args:
        graph: the mapped run.
        force: build it even above the limit.
        fmt: format name for the error message.
        blocks: the graph's blocks when the caller already has them.
        xml_safe: text XML 1.0 cannot carry as ``xsd:hexBinary`` (for PROV-XML).

    Raises:
        LimitError: above :data:`metaprov.write.PROV_LIMIT` triples without ``force``.
    """
    if blocks is None:
        blocks = _limit(graph, force, fmt)
    return document_from_rdf(rdf_graph(graph, blocks, xml_safe=xml_safe), namespaces(graph))


def document_from_rdf(g: Any, ns: dict[str, str]) -> ProvDocument:
    """The PROV-DM document of an rdflib graph of a metaprov export (see :func:`_records_from_rdf`):
    records and their attributes sorted, so the same graph gives the same bytes whatever the
    hash seed. The graph gains the entities of :func:`_as_entities`."""
    from prov.model import ProvDocument

    doc = ProvDocument()
    for prefix, iri in ns.items():
        if prefix != "prov":
            doc.add_namespace(prefix, iri)
    _as_entities(g)
    records = _records_from_rdf(g, doc)
    out = ProvDocument()
    for prefix, iri in ns.items():
        if prefix != "prov":
            out.add_namespace(prefix, iri)
    keyed = []
    for rtype, ident, attrs in records:
        attrs = sorted(attrs, key=lambda a: (str(a[0]), str(a[1])))
        keyed.append(
            (
                (str(rtype), str(ident or ""), [(str(a), str(v)) for a, v in attrs]),
                rtype,
                ident,
                attrs,
            )
        )
    keyed.sort(key=lambda k: k[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, rtype, ident, attrs in keyed:
            out.new_record(rtype, ident, attrs)
    return out


def relation_map() -> dict[Any, str]:
    """The PROV-O relations ``prov``'s RDF reader maps, plus ``prov:wasRevisionOf`` (a revision),
    which it leaves as an attribute.

    ``prov``'s reader merges a plain relation triple into a qualified node of the same subject
    (whichever it meets last), so it does not give the records of the PROV-N/JSON/XML exports
    when a node has both; :func:`document_from_rdf` does.
    """
    import rdflib
    from prov.serializers.provrdf import RELATION_MAP

    return {**RELATION_MAP, rdflib.URIRef(_PROV + "wasRevisionOf"): "revision"}


def relations(doc: Any) -> set[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """Every relation record of a PROV-DM document as ``(type, identifier, formal terms)``:
    identifiers and terms as full IRIs, times as UTC ISO text, absent terms left out. Two
    documents state the same relations when these sets are equal (what ``metaprov validate``
    compares between a PROV-N/JSON/XML file and its RDF twin)."""
    import datetime as dt

    from prov.model import ProvRelation

    def text(v: Any) -> str:
        if isinstance(v, dt.datetime):
            if v.tzinfo is not None:
                v = v.astimezone(dt.timezone.utc)
            return v.isoformat()
        return str(getattr(v, "uri", v))

    out = set()
    for r in doc.get_records():
        if isinstance(r, ProvRelation):
            terms = tuple((a.uri, text(v)) for a, v in r.formal_attributes if v is not None)
            ident = "" if r.identifier is None else r.identifier.uri
            out.add((r.get_type().localpart, ident, terms))
    return out


def unescape_provxml(xml: bytes) -> bytes:
    """A PROV-XML export with its identifiers turned back into the qualified names of the other
    formats (:func:`iri_local` on every ``prov:id``, ``prov:ref`` and ``xsd:QName`` value), for
    a reader that does not know the escaping (``prov``'s reader then gives the run's IRIs)."""
    from lxml import etree

    root = etree.fromstring(xml, etree.XMLParser(resolve_entities=False, no_network=True))
    prov_id, prov_ref = f"{{{_PROV}}}id", f"{{{_PROV}}}ref"
    xsi_type = "{http://www.w3.org/2001/XMLSchema-instance}type"

    def fix(qname: str) -> str:
        prefix, sep, local = qname.partition(":")
        return f"{prefix}:{iri_local(local)}" if sep else iri_local(qname)

    for el in root.iter():
        for attr in (prov_id, prov_ref):
            value = el.get(attr)
            if value is not None:
                el.set(attr, fix(value))
        if el.get(xsi_type) == "xsd:QName" and el.text:
            el.text = fix(el.text)
    return bytes(etree.tostring(root))


def xml_local(local: str) -> str:
    """A qualified name's local part as an XML NCName (reversible: :func:`iri_local`).

    ``_`` becomes ``__``; a character other than an ASCII letter, digit, ``.`` or ``-`` (or a
    first character that is not a letter) becomes ``_`` and its code in two (or, above U+00FF,
    ``_u`` and four/``_U`` and eight) upper-case hex digits.
    """
    out = []
    for i, c in enumerate(local):
        if c == "_":
            out.append("__")
        elif _NCNAME_SAFE.fullmatch(c) and (i > 0 or c.isalpha()):
            out.append(c)
        elif ord(c) <= 0xFF:
            out.append(f"_{ord(c):02X}")
        elif ord(c) <= 0xFFFF:
            out.append(f"_u{ord(c):04X}")
        else:
            out.append(f"_U{ord(c):08X}")
    return "".join(out)


_ESCAPE = re.compile(r"__|_u([0-9A-F]{4})|_U([0-9A-F]{8})|_([0-9A-F]{2})")


def iri_local(escaped: str) -> str:
    """Undo :func:`xml_local`."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "__":
            return "_"
        return chr(int(next(g for g in m.groups() if g), 16))

    return _ESCAPE.sub(one, escaped)


def _xml_qnames(xml: bytes) -> bytes:
    """Escape every qualified name of a PROV-XML document into an XML QName (:func:`xml_local`)."""
    from lxml import etree

    root = etree.fromstring(xml)
    prov_id, prov_ref = f"{{{_PROV}}}id", f"{{{_PROV}}}ref"
    xsi_type = "{http://www.w3.org/2001/XMLSchema-instance}type"

    def fix(qname: str) -> str:
        prefix, sep, local = qname.partition(":")
        return f"{prefix}:{xml_local(local)}" if sep else xml_local(qname)

    for el in root.iter():
        for attr in (prov_id, prov_ref):
            value = el.get(attr)
            if value is not None:
                el.set(attr, fix(value))
        if el.get(xsi_type) == "xsd:QName" and el.text:
            el.text = fix(el.text)
    return bytes(etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True))


def _serialize(graph: ProvGraph, out: IO[bytes], fmt: str, label: str, force: bool) -> int:
    blocks = _limit(graph, force, label)
    doc = build_document(graph, force, label, blocks=blocks, xml_safe=fmt == "xml")
    text = (
        doc.serialize(None, format=fmt, indent=2)
        if fmt == "json"
        else doc.serialize(None, format=fmt)
    )
    if text is None:  # pragma: no cover - prov returns the text when no destination is given
        raise RuntimeError("prov returned no text")
    data = text.encode("utf-8") if isinstance(text, str) else text
    if fmt == "xml":
        data = _xml_qnames(data)
    out.write(data)
    return sum(block_triples(b) for b in blocks)


def write_provn(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write PROV-N; returns the number of triples of the source graph."""
    return _serialize(graph, out, "provn", "PROV-N", force)


def write_provjson(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write PROV-JSON; returns the number of triples of the source graph."""
    return _serialize(graph, out, "json", "PROV-JSON", force)


def write_provxml(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write PROV-XML; returns the number of triples of the source graph."""
    return _serialize(graph, out, "xml", "PROV-XML", force)
