"""Safe parameter binding: values become RDF terms in a VALUES row and cannot change the query."""

from __future__ import annotations

import pyoxigraph as ox
import pytest

from metaprov.errors import QueryError
from metaprov.store import EmbeddedStore
from metaprov.store.sparql import bind, make_term, query_form, tokens, variables

P = "http://example.org/key"
INJECTIONS = [
    '"} UNION {?s ?p ?o}',
    "'} UNION {?s ?p ?o} #",
    '" . ?s ?p ?o . FILTER("1"="1',
    '"""} UNION {?s ?p ?o}"""',
    'x\\" } UNION { ?s ?p ?o }',
    "a\n} UNION {?s ?p ?o}\n#",
    '"^^<http://www.w3.org/2001/XMLSchema#string> } UNION { ?s ?p ?o',
    "} } SELECT * WHERE { ?s ?p ?o",
]


@pytest.fixture()
def store() -> EmbeddedStore:
    """Three subjects with keys; one key is itself an injection string."""
    st = EmbeddedStore(None)
    nt = "".join(
        f"<http://example.org/s{i}> <{P}> {ox.Literal(k)} .\n"
        for i, k in enumerate(["plain", 'q"uote', INJECTIONS[0]])
    )
    st.load_chunks("http://example.org/g", [nt.encode()])
    return st


QUERY = f"SELECT ?s WHERE {{ GRAPH ?g {{ ?s <{P}> ?key }} }}"


@pytest.mark.parametrize("value", INJECTIONS)
def test_injected_value_stays_one_literal(store: EmbeddedStore, value: str) -> None:
    df = store.query(QUERY, {"key": value})
    # Only a subject whose key is exactly this text may come back: never all triples.
    expected = ["http://example.org/s2"] if value == INJECTIONS[0] else []
    assert list(df["s"]) == expected


def test_value_with_quote_matches_exactly(store: EmbeddedStore) -> None:
    assert list(store.query(QUERY, {"key": 'q"uote'})["s"]) == ["http://example.org/s1"]
    assert list(store.query(QUERY, {"key": "plain"})["s"]) == ["http://example.org/s0"]


def test_unbound_parameter_leaves_query_open(store: EmbeddedStore) -> None:
    assert len(store.query(QUERY)) == 3


@pytest.mark.parametrize("value", INJECTIONS)
def test_bound_text_has_the_same_shape(value: str) -> None:
    """The bound query differs from a benign binding only inside literal tokens (one per group)."""
    benign = bind(QUERY, {"key": make_term("x")})
    evil = bind(QUERY, {"key": make_term(value)})
    kinds = [(t.kind, t.text) for t in tokens(benign)]
    evil_kinds = [(t.kind, t.text) for t in tokens(evil)]
    assert len(kinds) == len(evil_kinds)
    diff = [(a, b) for a, b in zip(kinds, evil_kinds, strict=True) if a != b]
    assert diff and all(a[0] == "string" and b[0] == "string" for a, b in diff)
    assert all(b[1] == make_term(value) for _, b in diff)


def test_iri_parameter_rejects_bad_iris() -> None:
    for bad in ["http://x> } UNION {", "relative/path", "http://a b", "<http://x>>"]:
        with pytest.raises(QueryError, match="not a valid iri"):
            make_term(bad, "iri", name="graph")
    assert make_term("<http://example.org/a>", "iri") == "<http://example.org/a>"


@pytest.mark.parametrize(
    ("type_", "value", "term"),
    [
        ("integer", "42", '"42"^^<http://www.w3.org/2001/XMLSchema#integer>'),
        ("integer", 7, '"7"^^<http://www.w3.org/2001/XMLSchema#integer>'),
        ("double", "1.5", '"1.5"^^<http://www.w3.org/2001/XMLSchema#double>'),
        ("boolean", "yes", '"true"^^<http://www.w3.org/2001/XMLSchema#boolean>'),
        (
            "dateTime",
            "2024-04-19T19:01:00+02:00",
            '"2024-04-19T17:01:00.000000Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>',
        ),
        ("string", "a\nb", '"a\\nb"'),
    ],
)
def test_make_term_types(type_: str, value: object, term: str) -> None:
    assert make_term(value, type_) == term


@pytest.mark.parametrize(
    ("type_", "value"),
    [
        ("integer", "4 UNION"),
        ("integer", "1.5"),
        ("double", "nan"),
        ("boolean", "maybe"),
        ("dateTime", "2024-04-19T19:01:00"),
        ("nosuchtype", "x"),
    ],
)
def test_make_term_rejects(type_: str, value: str) -> None:
    with pytest.raises(QueryError):
        make_term(value, type_, name="p")


def test_typed_parameter_compares_as_number() -> None:
    st = EmbeddedStore(None)
    st.load_chunks(
        "http://example.org/g",
        [
            b'<http://example.org/a> <http://example.org/n> "3"^^<http://www.w3.org/2001/XMLSchema#integer> .\n'
        ],
    )
    q = "SELECT ?s WHERE { GRAPH ?g { ?s <http://example.org/n> ?v FILTER(?v > ?min) } }"
    assert len(st.query(q, {"min": 2}, types={"min": "integer"})) == 1
    assert len(st.query(q, {"min": 3}, types={"min": "integer"})) == 0


def test_unknown_variable_is_refused() -> None:
    with pytest.raises(QueryError, match=r"no variable \?nope"):
        bind(QUERY, {"nope": make_term("x")})


def test_bad_parameter_name_and_foreign_term_are_refused() -> None:
    with pytest.raises(QueryError, match="not a valid parameter name"):
        bind(QUERY, {"key) } UNION {": '"x"'})
    with pytest.raises(QueryError, match="not one RDF term"):
        bind(QUERY, {"key": '"x" } UNION { ?s ?p ?o'})


def test_values_go_into_every_group_that_mentions_the_variable() -> None:
    q = (
        "SELECT ?s ?n WHERE { { SELECT ?s (COUNT(?o) AS ?n) WHERE { ?s <urn:p> ?o ; <urn:k> ?key } "
        "GROUP BY ?s } ?s <urn:k> ?key }"
    )
    out = bind(q, {"key": make_term("a")})
    # the outer WHERE, the sub-select's WHERE (the sub-select's own brace cannot take VALUES)
    assert out.count('VALUES (?key) { ("a") }') == 2
    q2 = "SELECT ?s WHERE { { SELECT ?s WHERE { ?s <urn:p> ?o } } ?s <urn:k> ?key }"
    assert bind(q2, {"key": make_term("a")}).count("VALUES") == 1
    q3 = "SELECT ?s WHERE { ?s <urn:p> ?o OPTIONAL { ?s <urn:k> ?key } VALUES ?o { 1 2 } }"
    assert bind(q3, {"key": make_term("a")}).count("VALUES (?key)") == 2


def test_construct_template_is_skipped() -> None:
    q = "CONSTRUCT { ?s <urn:p> ?key } WHERE { ?s <urn:k> ?key }"
    out = bind(q, {"key": make_term("a")})
    assert out.index("VALUES") > out.index("WHERE")


def test_limit_replaces_every_limit_or_is_added() -> None:
    q = "SELECT ?s WHERE { { SELECT ?s WHERE { ?s ?p ?o } LIMIT 20 } } ORDER BY ?s LIMIT 20"
    assert bind(q, {}, limit=5).count("LIMIT 5") == 2
    assert bind("SELECT ?s WHERE { ?s ?p ?o }", {}, limit=3).rstrip().endswith("LIMIT 3")
    with pytest.raises(QueryError):
        bind(q, {}, limit=-1)


def test_braces_in_strings_iris_and_comments_are_not_structure() -> None:
    q = "# { not a group\nSELECT ?s WHERE { ?s <urn:a#WHERE> '''}{''' . ?s <urn:k> ?key } # }"

    out = bind(q, {"key": make_term("v")})
    assert out.index("VALUES") > out.index("WHERE {")
    assert variables(q) == {"s", "key"}


def test_query_form_and_updates() -> None:
    assert query_form("PREFIX a: <urn:a#> ASK { ?s ?p ?o }") == "ASK"
    assert query_form("# SELECT in a comment\nCONSTRUCT WHERE { ?s ?p ?o }") == "CONSTRUCT"
    for update in ["DROP ALL", "INSERT DATA { <urn:a> <urn:b> <urn:c> }", "CLEAR DEFAULT"]:
        with pytest.raises(QueryError, match="update"):
            query_form(update)
    with pytest.raises(QueryError, match="does not parse"):
        bind("SELECT ?s WHERE { ?s ?p }", {})
