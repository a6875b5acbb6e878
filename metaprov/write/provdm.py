"""PROV-N, PROV-JSON and PROV-XML writers through the ``prov`` package (small runs only).

Input: a :class:`~metaprov.mapping.ProvGraph`. Output: the same provenance as a PROV-DM document.
The document is what the ``prov`` package itself reads from the RDF export (its PROV-O
decoder): the three formats hold the same records as the RDF, by construction. So activities,
agents and entities are declared once each (what several blocks say about one node is one
record), qualified usages, generations and associations are ``used``/``wasGeneratedBy``/
``wasAssociatedWith`` relations with their identifiers and attributes (not entities),
``wasRevisionOf`` is a revision, ``generatedAtTime`` a generation time, and metaprov properties
are attributes of their records. Identifiers are qualified names under ``run:`` (the run's IRI),
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
    from metaprov.write import PROV_LIMIT

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
    _as_entities(g)
    return g


def _as_entities(g: Any) -> None:
    """Nodes PROV-DM has no record for (state transitions, Darshan counters and records) become
    entities with their metaprov class as ``prov:type``, so the PROV-DM formats lose nothing."""
    import rdflib
    from prov.model import PROV_BASE_CLS

    known = {rdflib.URIRef(q.uri) for q in PROV_BASE_CLS}
    typed: dict[Any, bool] = {}
    for s, _, o in g.triples((None, rdflib.RDF.type, None)):
        typed[s] = typed.get(s, False) or o in known
    entity = rdflib.URIRef(_PROV + "Entity")
    at_time = rdflib.URIRef(_PROV + "atTime")
    qualified = rdflib.URIRef(_PROV + "qualifiedGeneration")
    generation = rdflib.URIRef(_PROV + "Generation")
    for s in [s for s, has in typed.items() if not has]:
        g.add((s, rdflib.RDF.type, entity))
        # the instant of an event: the generation of its record (an entity has no prov:atTime)
        for t in list(g.objects(s, at_time)):
            gen = rdflib.URIRef(f"{s}/generation")
            g.remove((s, at_time, t))
            g.add((s, qualified, gen))
            g.add((gen, rdflib.RDF.type, generation))
            g.add((gen, at_time, t))


def build_document(
    graph: ProvGraph,
    force: bool = False,
    fmt: str = "PROV",
    *,
    blocks: list[Block] | None = None,
    xml_safe: bool = False,
) -> ProvDocument:
    """The graph as a ``prov`` ProvDocument: what ``prov`` reads from the RDF export.

    Args:
        graph: the mapped run.
        force: build it even above the limit.
        fmt: format name for the error message.
        blocks: the graph's blocks when the caller already has them.
        xml_safe: text XML 1.0 cannot carry as ``xsd:hexBinary`` (for PROV-XML).

    Raises:
        LimitError: above :data:`metaprov.write.PROV_LIMIT` triples without ``force``.
    """
    from prov.model import ProvDocument
    from prov.serializers.provrdf import ProvRDFSerializer

    if blocks is None:
        blocks = _limit(graph, force, fmt)
    g = rdf_graph(graph, blocks, xml_safe=xml_safe)
    doc = ProvDocument()
    for prefix, iri in namespaces(graph).items():
        if prefix != "prov":
            doc.add_namespace(prefix, iri)
    with warnings.catch_warnings():
        # every statement has a PROV reading (decision 22); prov warns about none of ours
        warnings.simplefilter("ignore")
        ProvRDFSerializer(doc).decode_document(g, doc, relation_mapper=relation_map())
    # records in a fixed order (prov keeps them in the order its reader met them)
    out = ProvDocument()
    for prefix, iri in namespaces(graph).items():
        if prefix != "prov":
            out.add_namespace(prefix, iri)
    for rec in sorted(doc.get_records(), key=_record_key):
        # attributes in a fixed order too (prov keeps them in sets)
        attrs = sorted(rec.attributes, key=lambda a: (str(a[0]), str(a[1])))
        out.new_record(rec.get_type(), rec.identifier, attrs)
    return out


def _record_key(rec: Any) -> tuple[str, str, list[tuple[str, str]]]:
    attrs = sorted((str(a), str(v)) for a, v in rec.attributes)
    return (str(rec.get_type()), str(rec.identifier or ""), attrs)


def relation_map() -> dict[Any, str]:
    """The PROV-O relations ``prov``'s RDF reader maps, plus ``prov:wasRevisionOf`` (a revision),
    which it leaves as an attribute. Read a metaprov RDF export with it to get the records of the
    PROV-N/JSON/XML exports::

        doc = ProvDocument()
        ProvRDFSerializer(doc).decode_document(graph, doc, relation_mapper=relation_map())
    """
    import rdflib
    from prov.serializers.provrdf import RELATION_MAP

    return {**RELATION_MAP, rdflib.URIRef(_PROV + "wasRevisionOf"): "revision"}


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
