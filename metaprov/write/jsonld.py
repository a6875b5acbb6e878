"""JSON-LD writer (streaming) and the JSON-LD context it compacts with.

Input: a :class:`~metaprov.mapping.ProvGraph`. Output: one JSON document
``{"@context": {...}, "@graph": [node, ...]}`` with the context of ``ontology/context.jsonld``
inlined first (streaming parsers need it before the nodes), one compact node object per subject
(``@id`` and ``@type`` first), values as strings whose datatype the context supplies.

:func:`build_context` derives the context from ``ontology/metaprov.ttl``; the shipped file is
kept equal to it by a test (regenerate with ``python docs/gen_ontology_doc.py``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import IO, TYPE_CHECKING, Any

from metaprov.mapping.terms import PREFIXES, PROV_NS, VOCAB, XSD_NS
from metaprov.write.ntriples import block_triples
from metaprov.write.rows import BLOCKS_AHEAD, JsonLdTerms, write_jsonld_rows

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph

#: PROV-O properties metaprov uses, with their JSON-LD coercion.
PROV_PROPERTIES: dict[str, str | None] = {
    **{
        name: "@id"
        for name in (
            "actedOnBehalfOf activity agent atLocation entity generated hadActivity hadPlan "
            "qualifiedAssociation qualifiedDelegation qualifiedGeneration qualifiedUsage "
            "specializationOf used wasAssociatedWith "
            "wasAttributedTo wasDerivedFrom wasEndedBy wasGeneratedBy wasInformedBy wasRevisionOf "
            "wasStartedBy"
        ).split()
    },
    **{
        name: "xsd:dateTime"
        for name in "atTime endedAtTime generatedAtTime invalidatedAtTime startedAtTime".split()
    },
}


def context_path() -> Any:
    """The shipped context file (``metaprov/ontology/context.jsonld``)."""
    return resources.files("metaprov").joinpath("ontology").joinpath("context.jsonld")


@lru_cache(maxsize=1)
def load_context() -> dict[str, Any]:
    """The shipped JSON-LD context (parsed once)."""
    return json.loads(context_path().read_text(encoding="utf-8"))


def build_context() -> dict[str, Any]:
    """Derive the JSON-LD context from the ontology (object properties -> ``@id``, typed ranges)."""
    import rdflib
    from rdflib.namespace import OWL, RDF, RDFS

    g = rdflib.Graph().parse(
        str(resources.files("metaprov").joinpath("ontology").joinpath("metaprov.ttl")),
        format="turtle",
    )
    terms: dict[str, Any] = {}
    for kind in (OWL.ObjectProperty, OWL.DatatypeProperty, OWL.AnnotationProperty):
        for prop in g.subjects(RDF.type, kind):
            iri = str(prop)
            if not iri.startswith(VOCAB):
                continue
            local = iri[len(VOCAB) :]
            rng = g.value(prop, RDFS.range)
            spec: dict[str, str] = {"@id": f"mp:{local}"}
            if kind == OWL.ObjectProperty or (rng is not None and not str(rng).startswith(XSD_NS)):
                spec["@type"] = "@id"
            elif rng is not None and str(rng) != XSD_NS + "string":
                spec["@type"] = "xsd:" + str(rng)[len(XSD_NS) :]
            terms[local] = spec
    for local, coercion in PROV_PROPERTIES.items():
        if local in terms:
            raise ValueError(f"JSON-LD term {local!r} is both mp: and prov:")
        spec = {"@id": f"prov:{local}"}
        if coercion:
            spec["@type"] = coercion
        terms[local] = spec
    ctx: dict[str, Any] = dict(PREFIXES)
    for k in sorted(terms):
        ctx[k] = terms[k]
    assert PREFIXES["prov"] == PROV_NS
    return {"@context": ctx}


def context_text(context: dict[str, Any] | None = None) -> str:
    """The context as the exact text of the shipped file."""
    return json.dumps(context or build_context(), indent=2, ensure_ascii=False) + "\n"


def write_jsonld(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write compact JSON-LD; returns the number of triples."""
    context = load_context()
    terms = JsonLdTerms(context)
    inline = json.dumps(context["@context"], indent=2, ensure_ascii=False).replace("\n", "\n  ")
    out.write(f'{{\n  "@context": {inline},\n  "@graph": ['.encode())
    first = True
    n = 0
    for block in graph.blocks(ahead=BLOCKS_AHEAD):
        write_jsonld_rows(block, out, terms, first)
        first = False
        n += block_triples(block)
    out.write(b"\n  ]\n}\n")
    return n
