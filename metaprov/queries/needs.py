"""Which triples a SPARQL query can match: the predicates and classes its patterns name.

Input: SPARQL text (any query form, any number of ``#%%`` steps). Output: a :class:`Selection`
(predicate IRIs, ``rdf:type`` classes, or "everything" when a pattern's predicate is a variable
or a negated property set). A store holding only the triples a selection keeps gives every
query of the selection the answer a store holding the whole graph gives: a triple pattern with a
constant predicate matches no triple of another predicate, ``?x a mp:Thread`` no triple typing
another class.

The selection is read from the parse tree (rdflib's SPARQL algebra), never from the text: IRIs in
comments or string literals are not patterns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"


@dataclass(frozen=True)
class Selection:
    """The triples some queries can match.

    Attributes:
        predicates: predicate IRIs named by a pattern (``rdf:type`` excluded).
        classes: classes named as the object of an ``rdf:type`` pattern.
        all_types: some ``rdf:type`` pattern has a variable object: every type triple counts.
        everything: some pattern has a variable predicate (or a negated property set).
    """

    predicates: frozenset[str] = field(default_factory=frozenset)
    classes: frozenset[str] = field(default_factory=frozenset)
    all_types: bool = False
    everything: bool = False

    def __or__(self, other: Selection) -> Selection:
        return Selection(
            self.predicates | other.predicates,
            self.classes | other.classes,
            self.all_types or other.all_types,
            self.everything or other.everything,
        )

    def keeps(self, predicate: str) -> bool:
        """Whether triples of ``predicate`` (other than rdf:type) are kept."""
        return self.everything or predicate in self.predicates

    def keeps_type(self, cls: str) -> bool:
        """Whether ``?s rdf:type <cls>`` triples are kept."""
        return self.everything or self.all_types or cls in self.classes


def selection(*texts: str) -> Selection:
    """The triples the queries ``texts`` can match (each may hold ``#%%`` steps and variants).

    Raises:
        QueryError: a text that does not parse.
    """
    from metaprov.queries import step_variants

    out = Selection()
    for text in texts:
        for _, variants in step_variants(text):
            for _, step in variants:
                out = out | _step_selection(step)
    return out


@lru_cache(maxsize=256)
def _step_selection(text: str) -> Selection:
    """The selection of one SPARQL text, from its parse tree with prefixes resolved (rdflib's
    own first step; its algebra is not used: it drops the patterns of an EXISTS inside a BIND).
    """
    import functools

    from rdflib.plugins.sparql import algebra, parser

    from metaprov.errors import QueryError

    try:
        parsed = parser.parseQuery(text)
        prologue = algebra.translatePrologue(parsed[0], None)
        tree = algebra.traverse(
            parsed[1], visitPost=functools.partial(algebra.translatePName, prologue=prologue)
        )
    except Exception as exc:  # noqa: BLE001 - pyparsing/rdflib raise many kinds
        raise QueryError(f"the query does not parse: {exc}") from exc
    found: dict[str, Any] = {"p": set(), "c": set(), "all_types": False, "everything": False}
    if getattr(prologue, "base", None):
        found["everything"] = True  # relative IRIs: resolved by the store, not here

    def visit(node: Any) -> None:
        if getattr(node, "name", None) in ("TriplesBlock", "TriplesTemplate"):
            for flat in node["triples"] if "triples" in node else []:
                items = list(flat)
                for i in range(0, len(items) - 2, 3):
                    _pattern(_unwrapped(items[i + 1]), items[i + 2], found)
        return None

    algebra.traverse(tree, visitPre=visit)
    return Selection(
        frozenset(found["p"]), frozenset(found["c"]), found["all_types"], found["everything"]
    )


def _unwrapped(p: Any) -> Any:
    """A parsed path of one plain IRI (``mp:a`` parses as an alternative of a sequence of one
    element) as that IRI; any other path as parsed."""
    while getattr(p, "name", None) in ("PathAlternative", "PathSequence"):
        parts = p["part"] if "part" in p else None
        if isinstance(parts, (str, bytes)) or not hasattr(parts, "__len__") or len(parts) != 1:
            return p
        p = parts[0]
    if getattr(p, "name", None) == "PathElt" and "mod" not in p:
        return p["part"]
    return p


def _pattern(p: Any, o: Any, found: dict[str, Any]) -> None:
    """Record what the pattern ``?s p o`` (``p`` an IRI, a variable or a parsed path) names."""
    from rdflib import URIRef, Variable

    if isinstance(p, URIRef):
        if str(p) == RDF_TYPE:
            if isinstance(o, URIRef):
                found["c"].add(str(o))
            else:
                found["all_types"] = True
        else:
            found["p"].add(str(p))
    elif isinstance(p, Variable) or getattr(p, "name", None) is None:
        found["everything"] = True
    else:
        _path(p, found)


def _path(p: Any, found: dict[str, Any]) -> None:
    """Every IRI of a parsed property path counts, with any object (``a`` in a path: every
    type); a negated property set keeps everything."""
    from rdflib import URIRef

    if isinstance(p, URIRef):
        if str(p) == RDF_TYPE:
            found["all_types"] = True
        else:
            found["p"].add(str(p))
    elif getattr(p, "name", None) == "PathNegatedPropertySet":
        found["everything"] = True
    elif isinstance(p, (list, tuple)):
        for part in p:
            _path(part, found)
    elif hasattr(p, "values"):
        for part in p.values():
            _path(part, found)


__all__ = ["RDF_TYPE", "Selection", "selection"]
