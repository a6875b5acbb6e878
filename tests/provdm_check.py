"""Relation-by-relation comparison of a PROV-DM file with its RDF twin, read independently of
the writer (plain PROV-O relation triples and qualified nodes from the N-Triples)."""

from __future__ import annotations

import collections
import datetime as dt
import warnings

from metaprov.write.provdm import unescape_provxml

P = "http://www.w3.org/ns/prov#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
PLAIN = {
    "used": "Usage",
    "wasGeneratedBy": "Generation",
    "wasAssociatedWith": "Association",
    "actedOnBehalfOf": "Delegation",
    "wasAttributedTo": "Attribution",
    "specializationOf": "Specialization",
    "wasDerivedFrom": "Derivation",
    "wasRevisionOf": "Derivation",
    "wasInformedBy": "Communication",
    "hadMember": "Membership",
}
QUALIFIED = {
    f"qualified{v}": v
    for v in (
        "Usage",
        "Generation",
        "Association",
        "Delegation",
        "Attribution",
        "Derivation",
        "Communication",
    )
}
QUALIFIED["qualifiedRevision"] = "Derivation"
ELEMENTS = {
    "Entity": "Entity",
    "Plan": "Entity",
    "Collection": "Entity",
    "Activity": "Activity",
    "Agent": "Agent",
    "Person": "Agent",
    "SoftwareAgent": "Agent",
    "Organization": "Agent",
}


def _time(text: str) -> str:
    return dt.datetime.fromisoformat(text).astimezone(dt.timezone.utc).isoformat()


def rdf_statements(nt: bytes) -> tuple[set, set, dict]:
    """(relations, elements, instants) the N-Triples state: relations as (kind, identifier,
    first, second, other formal terms), elements as (kind, IRI)."""
    import pyoxigraph as ox

    by_subject: dict[str, list] = {}
    qualified: dict[str, tuple[str, str]] = {}
    for t in ox.parse(nt, format=ox.RdfFormat.N_TRIPLES):
        s, p, o = t.subject.value, t.predicate.value, t.object
        by_subject.setdefault(s, []).append((p, o))
        if p.startswith(P) and p[len(P) :] in QUALIFIED:
            qualified[o.value] = (QUALIFIED[p[len(P) :]], s)
    relations, elements, instants = set(), set(), {}
    for s, pos in by_subject.items():
        if s in qualified:
            kind, first = qualified[s]
            second, other = None, []
            for p, o in pos:
                name = p[len(P) :] if p.startswith(P) else None
                if name in ("entity", "activity", "agent"):
                    second = o.value
                elif name == "atTime":
                    other.append(_time(o.value))
                elif name == "hadPlan":
                    other.append(o.value)
            relations.add((kind, s, first, second, frozenset(other)))
            continue
        kinds = {
            ELEMENTS.get(o.value[len(P) :])
            for p, o in pos
            if p == RDF_TYPE and o.value.startswith(P)
        } - {None}
        assert len(kinds) <= 1, (s, kinds)
        elements.add((kinds.pop() if kinds else "Entity", s))
        for p, o in pos:
            name = p[len(P) :] if p.startswith(P) else None
            if name in PLAIN:
                relations.add((PLAIN[name], "", s, o.value, frozenset()))
            elif name == "atTime" and not kinds:
                instants[s] = _time(o.value)
    return relations, elements, instants


def file_statements(data: bytes, fmt: str) -> tuple[set, set]:
    from prov.model import ProvElement, ProvRelation

    if fmt == "provxml":
        data = unescape_provxml(data)
    pformat = {"provn": "provn", "provjson": "json", "provxml": "xml"}[fmt]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from prov.model import ProvDocument

        doc = ProvDocument.deserialize(content=data.decode("utf-8"), format=pformat)

    def text(v):  # type: ignore[no-untyped-def]
        if isinstance(v, dt.datetime):
            return v.astimezone(dt.timezone.utc).isoformat()
        return None if v is None else str(getattr(v, "uri", v))

    rels = set()
    for r in doc.get_records():
        if isinstance(r, ProvRelation):
            values = [text(v) for _, v in r.formal_attributes]
            ident = "" if r.identifier is None else r.identifier.uri
            rels.add(
                (
                    r.get_type().localpart,
                    ident,
                    values[0],
                    values[1],
                    frozenset(v for v in values[2:] if v is not None),
                )
            )
    elements = {
        (r.get_type().localpart, r.identifier.uri)
        for r in doc.get_records()
        if isinstance(r, ProvElement)
    }
    assert len(rels) == sum(isinstance(r, ProvRelation) for r in doc.get_records())
    return rels, elements


def assert_same_relations(nt: bytes, data: bytes, fmt: str) -> None:
    """Every relation of the N-Triples is in the PROV-DM file with the same terms; the only extra
    relations are the generations at their instant of nodes PROV-DM has no record kind for."""
    rdf_rel, rdf_el, instants = rdf_statements(nt)
    assert rdf_rel
    rel, el = file_statements(data, fmt)
    missing = rdf_rel - rel
    assert not missing, (fmt, len(missing), sorted(missing)[:3])
    extra = rel - rdf_rel
    for kind, ident, first, second, other in extra:
        assert (kind, ident, second) == ("Generation", f"{first}/generation", None), fmt
        assert other == {instants[first]}, fmt
    assert len(extra) == len(instants), fmt
    assert el == rdf_el, (fmt, sorted(el ^ rdf_el)[:3])


def document_records(data: bytes, fmt: str) -> collections.Counter:
    """The records of a PROV-N/JSON/XML file read back by ``prov``, as a multiset of
    (record class, identifier, attributes) with every value compared by its text, type and
    datatype (what ``prov``'s record equality compares); anonymous identifiers (PROV-JSON's
    ``_:idN``) left out; PROV-XML identifiers unescaped first, ``xsd:hexBinary`` decoded."""
    from prov.model import Literal, ProvDocument

    if fmt == "provxml":
        data = unescape_provxml(data)
    pformat = {"provn": "provn", "provjson": "json", "provxml": "xml"}[fmt]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = ProvDocument.deserialize(content=data.decode("utf-8"), format=pformat)

    def value(v):  # type: ignore[no-untyped-def]
        if isinstance(v, Literal) and str(v.datatype).endswith("hexBinary"):
            return ("str", bytes.fromhex(v.value).decode("utf-8"), "")
        return (type(v).__name__, str(getattr(v, "uri", v)), str(getattr(v, "datatype", "")))

    out: collections.Counter = collections.Counter()
    for r in doc.get_records():
        ident = None if r.identifier is None else str(r.identifier.uri)
        if ident is not None and ident.startswith("_:"):
            ident = None
        attrs = tuple(sorted((str(getattr(a, "uri", a)), value(v)) for a, v in r.attributes))
        out[(type(r).__name__, ident, attrs)] += 1
    return out


def assert_same_document(expected: bytes, got: bytes, fmt: str) -> None:
    """The two files read back by ``prov`` hold the same records (see :func:`document_records`)."""
    a, b = document_records(expected, fmt), document_records(got, fmt)
    assert a == b, (fmt, sorted(a - b)[:2], sorted(b - a)[:2])
