"""W3C PROV-CONSTRAINTS checks across nodes, as SPARQL over the export (any size).

Input: an Oxigraph store holding an export. Output: the violations of the PROV-CONSTRAINTS
rules that apply to what metaprov writes, each naming its rule (the constraint's name in
https://www.w3.org/TR/prov-constraints/) and the offending node.

Times in PROV are instants of events; an export gives activities a window (start, end) and some
usages/generations an instant (``prov:atTime``). A constraint between two events is violated
when no choice of instants inside the windows satisfies it: e.g. *generation-precedes-usage*
fails when the generating activity started after the using activity had ended (a generation
lies in its activity's window, a usage in its own). Each rule is one query that joins by index
from the predicates it needs (no property paths, no ``NOT EXISTS``), so it runs in seconds on
an export of 10^6 tasks.

The class-level rules use the ontology's class hierarchy (:func:`classes_below`), so a node typed
with a metaprov class counts as the PROV class it specialises even when the base type is absent.
"""

from __future__ import annotations

from functools import cache

from metaprov.mapping.terms import PROV_NS, VOCAB, base_types

#: Predicates whose objects are instants (xsd:dateTime): they must carry an explicit UTC offset.
TIME_PREDICATES = (
    f"<{PROV_NS}startedAtTime>",
    f"<{PROV_NS}endedAtTime>",
    f"<{PROV_NS}atTime>",
    f"<{PROV_NS}generatedAtTime>",
    f"<{PROV_NS}invalidatedAtTime>",
    f"<{VOCAB}firstTime>",
    f"<{VOCAB}lastTime>",
    f"<{VOCAB}addedAt>",
    f"<{VOCAB}removedAt>",
)


@cache
def classes_below(prov_class: str) -> tuple[str, ...]:
    """``prov_class`` and every metaprov class the ontology puts below it, as SPARQL IRIs."""
    from metaprov.mapping.terms import _base_types

    below = sorted(c for c, sup in _base_types().items() if c and prov_class in sup)
    return tuple(f"<{c}>" for c in [prov_class, *below])


def _values(var: str, iris: tuple[str, ...]) -> str:
    return f"VALUES ?{var} {{ {' '.join(iris)} }}"


def checks() -> list[tuple[str, str, str]]:
    """(rule, SPARQL selecting ?f, message) of every cross-node PROV-CONSTRAINTS check."""
    activity = classes_below(PROV_NS + "Activity")
    entity = classes_below(PROV_NS + "Entity")
    assert base_types(VOCAB + "TaskExecution")  # the ontology is readable
    return [
        (
            "prov:start-precedes-end",
            "SELECT ?f WHERE { ?f prov:startedAtTime ?s ; prov:endedAtTime ?e . FILTER(?s > ?e) }",
            "the activity ends before it starts",
        ),
        (
            "prov:generation-precedes-usage",
            "SELECT DISTINCT ?f WHERE { ?u prov:used ?f . ?f prov:wasGeneratedBy ?g . "
            "?g prov:startedAtTime ?gs . ?u prov:endedAtTime ?ue . FILTER(?gs > ?ue) }",
            "the entity is used by an activity that ended before the activity generating it began",
        ),
        (
            "prov:generation-generation-ordering",
            "SELECT DISTINCT ?f WHERE { ?f prov:wasGeneratedBy ?a, ?b . FILTER(?a != ?b) }",
            "the entity has more than one generating activity (unique generation)",
        ),
        (
            "prov:specialization-generation-ordering",
            "SELECT DISTINCT ?f WHERE { ?f prov:specializationOf ?e ; prov:wasGeneratedBy ?a . "
            "?e prov:wasGeneratedBy ?b . ?b prov:startedAtTime ?bs . ?a prov:endedAtTime ?ae . "
            "FILTER(?bs > ?ae) }",
            "the entity is generated before the entity it specialises",
        ),
        (
            "prov:derivation-generation-generation-ordering",
            "SELECT DISTINCT ?f WHERE { ?f prov:wasRevisionOf ?p ; prov:qualifiedGeneration ?g . "
            "?g prov:atTime ?t . ?p prov:qualifiedGeneration ?h . ?h prov:atTime ?u . "
            "FILTER(?u > ?t) }",
            "the revision is generated before the entity it revises",
        ),
        (
            "prov:derivation-generation-generation-ordering",
            "SELECT DISTINCT ?f WHERE { ?f prov:wasDerivedFrom ?p ; prov:wasGeneratedBy ?a . "
            "?p prov:wasGeneratedBy ?b . ?b prov:startedAtTime ?bs . ?a prov:endedAtTime ?ae . "
            "FILTER(?bs > ?ae) }",
            "the entity is derived from an entity generated after it",
        ),
        (
            "prov:usage-within-activity",
            # each branch binds ?t itself: a FILTER in a UNION branch sees only that branch's
            # variables (a filter on an outer ?t is an error there, and never fires)
            "SELECT DISTINCT ?f WHERE { "
            "{ ?a prov:qualifiedUsage ?f . ?f prov:atTime ?t . ?a prov:startedAtTime ?s "
            "FILTER(?t < ?s) } UNION "
            "{ ?a prov:qualifiedUsage ?f . ?f prov:atTime ?t . ?a prov:endedAtTime ?e "
            "FILTER(?t > ?e) } }",
            "the usage's time lies outside its activity's start and end",
        ),
        (
            "prov:generation-within-activity",
            "SELECT DISTINCT ?f WHERE { "
            "{ ?f a prov:Generation ; prov:activity ?a ; prov:atTime ?t . "
            "?a prov:startedAtTime ?s FILTER(?t < ?s) } UNION "
            "{ ?f a prov:Generation ; prov:activity ?a ; prov:atTime ?t . "
            "?a prov:endedAtTime ?e FILTER(?t > ?e) } }",
            "the generation's time lies outside its activity's start and end",
        ),
        (
            "prov:entity-activity-disjoint",
            f"SELECT DISTINCT ?f WHERE {{ {_values('c', activity)} ?f a ?c . "
            f"{_values('d', entity)} ?f a ?d . }}",
            "the node is both an activity and an entity",
        ),
        (
            "metaprov:utc-time",
            f"SELECT DISTINCT ?f WHERE {{ {_values('p', TIME_PREDICATES)} ?f ?p ?t . "
            'FILTER(!isLITERAL(?t) || DATATYPE(?t) != xsd:dateTime || TZ(?t) != "Z") }',
            "a time is not an xsd:dateTime in UTC with an explicit Z",
        ),
    ]


@cache
def hierarchy() -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """(class, superclass) and (property, superproperty) pairs of the ontology's hierarchy,
    transitively closed, for the metaprov terms (the RDFS subclass/subproperty rules)."""
    from importlib import resources

    import pyoxigraph as ox

    text = resources.files("metaprov").joinpath("ontology").joinpath("metaprov.ttl").read_bytes()
    rdfs = "http://www.w3.org/2000/01/rdf-schema#"
    edges: dict[str, dict[str, set[str]]] = {"subClassOf": {}, "subPropertyOf": {}}
    for t in ox.parse(text, format=ox.RdfFormat.TURTLE):
        kind = t.predicate.value[len(rdfs) :] if t.predicate.value.startswith(rdfs) else ""
        if kind in edges and isinstance(t.object, ox.NamedNode):
            edges[kind].setdefault(t.subject.value, set()).add(t.object.value)
    out = []
    for kind in ("subClassOf", "subPropertyOf"):
        pairs = []
        for term in sorted(edges[kind]):
            if not term.startswith(VOCAB):
                continue
            seen: set[str] = set()
            todo = [term]
            while todo:
                for sup in edges[kind].get(todo.pop(), ()):
                    if sup not in seen:
                        seen.add(sup)
                        todo.append(sup)
            pairs += [(term, sup) for sup in sorted(seen)]
        out.append(tuple(pairs))
    return out[0], out[1]


def inference_updates() -> list[str]:
    """SPARQL updates adding what the ontology's hierarchy implies (types, super-properties)."""
    classes, props = hierarchy()
    cv = " ".join(f"(<{c}> <{s}>)" for c, s in classes)
    pv = " ".join(f"(<{p}> <{s}>)" for p, s in props)
    return [
        f"INSERT {{ ?x a ?s }} WHERE {{ VALUES (?c ?s) {{ {cv} }} ?x a ?c }}",
        f"INSERT {{ ?x ?s ?y }} WHERE {{ VALUES (?p ?s) {{ {pv} }} ?x ?p ?y }}",
    ]
