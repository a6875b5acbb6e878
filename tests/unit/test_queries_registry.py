"""The packaged question library: headers, parameters, registry errors, result formatting."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from metaprov.errors import QueryError
from metaprov.queries import (
    CRITICAL_PATH,
    check_question,
    format_list,
    format_result,
    get_question,
    guard_names,
    parse_header,
    questions,
    resolve,
    run_question,
    split_steps,
)
from metaprov.store import EmbeddedStore
from metaprov.store.sparql import (
    PARAM_TYPES,
    bind,
    fill_values,
    make_term,
    query_form,
    tokens,
    variables,
)

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"

SAMPLE = {
    "string": "x",
    "integer": "1",
    "double": "1.5",
    "decimal": "1.5",
    "boolean": "true",
    "dateTime": "2024-01-01T00:00:00Z",
    "iri": "http://example.org/x",
}


def test_at_least_twelve_documented_sparql_questions() -> None:
    sparql = [q for q in questions() if q.text]
    assert len(sparql) >= 12
    assert CRITICAL_PATH in [q.name for q in questions()]
    for q in questions():
        assert q.title and len(q.description) > 30, q.name
        for p in q.params:
            assert p.type in PARAM_TYPES and p.description, (q.name, p.name)


@pytest.mark.parametrize("q", [q for q in questions() if q.text], ids=lambda q: q.name)
def test_each_question_parses_and_binds_every_parameter(q) -> None:
    check_question(q)  # every step parses and hands the next step the columns it expects
    values = {p.name: make_term(SAMPLE[p.type], p.type) for p in q.params if p.type != "limit"}
    steps = split_steps(q.text, set(values))  # the variants run when every parameter is given
    assert all(query_form(step) == "SELECT" for step in steps)
    limit = 3 if any(p.type == "limit" for p in q.params) else None
    first = bind(
        steps[0], {k: v for k, v in values.items() if k in variables(steps[0])}, limit=limit
    )
    if limit is not None:
        assert "LIMIT 3" in first
    bound_somewhere = set()
    for step in steps:
        here = {k: v for k, v in values.items() if k in variables(step)}
        filled = step
        if step is not steps[0]:
            empty = {"head": {"vars": ["x"] * _block_width(step)}, "results": {"bindings": []}}
            filled = fill_values(step, empty)
        out = bind(filled, here)
        bound_somewhere |= {k for k in here if f"VALUES (?{k})" in out or f"?{k} " in out}
    assert bound_somewhere == set(values)


VARIANTS = """# title: t
PREFIX ex: <http://example.org/>
#%% if name
SELECT ?x WHERE { ?x ex:name ?name }
#%% unless name
SELECT ?x WHERE { ?x a ex:Thing }
#%% then
PREFIX ex: <http://example.org/>
SELECT ?x ?label WHERE { VALUES (?x) { } OPTIONAL { ?x ex:label ?label } }
"""


def test_a_step_variant_is_chosen_by_the_parameters_given() -> None:
    with_name = split_steps(VARIANTS, {"name"})
    without = split_steps(VARIANTS)
    assert len(with_name) == len(without) == 2
    # the PREFIX line before the variants is shared by both; the chosen variant alone follows
    assert "PREFIX ex:" in with_name[0] and "ex:name ?name" in with_name[0]
    assert "a ex:Thing" not in with_name[0]
    assert "PREFIX ex:" in without[0] and "a ex:Thing" in without[0]
    assert "ex:name" not in without[0]
    assert with_name[1] == without[1] and "ex:label" in without[1]
    assert guard_names(VARIANTS) == ["name"]
    # a question without variants is one text per step, whatever is given
    assert split_steps("SELECT * WHERE { ?s ?p ?o }", {"x"}) == ["SELECT * WHERE { ?s ?p ?o }\n"]


def test_step_variants_run_on_a_store() -> None:
    import pyoxigraph as ox

    store = EmbeddedStore(None)
    ex = "http://example.org/"
    for s, p, o in [
        ("a", "name", ox.Literal("A")),
        ("a", "label", ox.Literal("first")),
        ("b", "type", ox.NamedNode(ex + "Thing")),
    ]:
        pred = ox.NamedNode(ex + p) if p != "type" else ox.NamedNode(str(RDF_TYPE))
        store.oxigraph.add(ox.Quad(ox.NamedNode(ex + s), pred, o))
    q = parse_header("# param: name (string, optional) a name\n" + VARIANTS, name="t")
    check_question(q)
    by_name = run_question(store, q, {"name": "A"})
    assert by_name["x"].tolist() == [ex + "a"] and by_name["label"].tolist() == ["first"]
    assert run_question(store, q, {})["x"].tolist() == [ex + "b"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT * WHERE {}\n#%% if\nSELECT * WHERE {}\n", "'#%% if' needs a parameter name"),
        ("SELECT * WHERE {}\n#%% unless a b\nSELECT * WHERE {}\n", "needs a parameter name"),
        ("SELECT * WHERE {}\n#%% then x\nSELECT * WHERE {}\n", "takes nothing after it"),
    ],
)
def test_malformed_variant_lines_are_refused(text: str, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        split_steps(text)


def test_a_step_without_a_variant_for_the_parameters_given_is_refused() -> None:
    text = "# param: name (string, optional) n\n#%% if name\nSELECT ?name WHERE { ?s ?p ?name }\n"
    assert len(split_steps(text, {"name"})) == 1
    with pytest.raises(QueryError, match="step 1 of the query has no variant .*depend on name"):
        split_steps(text)
    with pytest.raises(QueryError, match="has no variant"):
        check_question(parse_header(text, name="q"))
    undeclared = "#%% if other\nSELECT * WHERE { ?s ?p ?o }\n#%% unless other\nSELECT * WHERE {}\n"
    with pytest.raises(QueryError, match="undeclared parameter"):
        check_question(parse_header(undeclared, name="q"))


def _block_width(step: str) -> int:
    toks = list(tokens(step))
    k = next(
        i for i, t in enumerate(toks) if t.text.upper() == "VALUES" and toks[i + 1].text == "("
    )
    j = k + 2
    while toks[j].kind == "var":
        j += 1
    return j - k - 2


def test_multi_step_rows_are_passed_as_terms() -> None:
    rows = {
        "head": {"vars": ["a", "b"]},
        "results": {
            "bindings": [
                {
                    "a": {"type": "uri", "value": "http://x/1"},
                    "b": {"type": "literal", "value": 'q"} UNION {'},
                },
                {
                    "a": {
                        "type": "literal",
                        "value": "3",
                        "datatype": "http://www.w3.org/2001/XMLSchema#integer",
                    }
                },
            ]
        },
    }
    out = fill_values("SELECT * WHERE { VALUES (?x ?y) { } ?x ?p ?y }", rows)
    assert '(<http://x/1> "q\\"} UNION {")' in out
    assert '("3"^^<http://www.w3.org/2001/XMLSchema#integer> UNDEF)' in out
    with pytest.raises(QueryError, match="names 1 variables"):
        fill_values("SELECT * WHERE { VALUES ?x { } }", rows)
    with pytest.raises(QueryError, match="blank"):
        fill_values(
            "SELECT * WHERE { VALUES ?x { } }",
            {
                "head": {"vars": ["a"]},
                "results": {"bindings": [{"a": {"type": "bnode", "value": "b0"}}]},
            },
        )


@pytest.mark.parametrize("q", [q for q in questions() if q.text], ids=lambda q: q.name)
def test_each_question_runs_on_an_empty_store(q) -> None:
    params = {p.name: SAMPLE.get(p.type, "5") for p in q.params if p.required}
    if {"key", "prefix", "run_id"} & set(params):
        # a value the store does not hold is a typo, not "no results" (issue 29)
        with pytest.raises(QueryError, match=r"no (task key|task prefix|run) .* in the store"):
            run_question(EmbeddedStore(None), q.name, params)
        return
    df = run_question(EmbeddedStore(None), q.name, params)
    assert isinstance(df, pd.DataFrame) and len(df) == 0


def test_list_shows_every_question_and_parameter() -> None:
    text = format_list()
    for q in questions():
        assert q.name in text and q.title in text
        for p in q.params:
            assert f"--param {p.signature()}" in text


def test_registry_errors() -> None:
    with pytest.raises(QueryError, match="did you mean slowest-tasks"):
        get_question("slowest-task")
    with pytest.raises(QueryError, match="needs the parameter 'key'"):
        run_question(EmbeddedStore(None), "lineage", {})
    with pytest.raises(QueryError, match="has no parameter 'nope'"):
        run_question(EmbeddedStore(None), "runs", {"nope": "1"})
    with pytest.raises(QueryError, match="not a whole number"):
        run_question(EmbeddedStore(None), "slowest-tasks", {"limit": "ten"})
    with pytest.raises(QueryError, match="no such query file"):
        resolve("missing.rq")


def test_header_parsing_and_user_files(tmp_path: Path) -> None:
    q = parse_header(
        "# title: T\n# description: line one\n# description: line two\n"
        "# param: n (integer, default 3) how many\n# param: who (iri, optional) an agent\n"
        "SELECT ?s WHERE { ?s ?p ?n }",
        name="t",
    )
    assert q.description == "line one line two"
    assert [p.signature() for p in q.params] == ["n (integer, default 3)", "who (iri, optional)"]
    with pytest.raises(QueryError, match="bad '# param:' line"):
        parse_header("# param: broken\nSELECT * WHERE {}")
    with pytest.raises(QueryError, match="unknown type"):
        parse_header("# param: n (number) x\nSELECT * WHERE {}")
    f = tmp_path / "mine.rq"
    f.write_text(
        "# param: n (integer) min\nSELECT ?s WHERE { GRAPH ?g { ?s <urn:p> ?v FILTER(?v >= ?n) } }"
    )
    st = EmbeddedStore(None)
    st.load_chunks(
        "urn:g", [b'<urn:a> <urn:p> "4"^^<http://www.w3.org/2001/XMLSchema#integer> .\n']
    )
    assert len(run_question(st, str(f), {"n": "4"})) == 1
    assert len(run_question(st, str(f), {"n": "5"})) == 0
    # Undeclared parameters of ad-hoc SPARQL are strings, or IRIs when written <...>.
    df = run_question(st, "SELECT ?v WHERE { GRAPH ?g { ?s <urn:p> ?v } }", {"s": "<urn:a>"})
    assert list(df["v"]) == [4]


def test_sorted_words_give_one_answer_whatever_the_engines_order(tmp_path: Path) -> None:
    """A ``# sorted-words:`` column (a GROUP_CONCAT) has its words sorted after the engine
    answers; its dtype and missing values kept; a bad column name is refused."""
    text = (
        "# sorted-words: hosts\n"
        'SELECT ?j (GROUP_CONCAT(?h; separator=" ") AS ?hosts) '
        "WHERE { GRAPH ?g { ?j <urn:node> ?n . OPTIONAL { ?n <urn:host> ?h } } } GROUP BY ?j"
    )
    q = parse_header(text, name="hosts")
    assert q.sorted_words == ("hosts",)
    st = EmbeddedStore(None)
    nt = "".join(
        f"<urn:j1> <urn:node> <urn:{h}> .\n<urn:{h}> <urn:host> {json.dumps(h)} .\n"
        for h in ("n10", "n02", "b", "n1")
    )
    st.load_chunks("urn:g", [nt.encode(), b"<urn:j2> <urn:node> <urn:none> .\n"])
    got = run_question(st, q).set_index("j")["hosts"]
    assert got["urn:j1"] == "b n02 n1 n10"
    raw = st.query(text).set_index("j")["hosts"]  # what the engine said, same words
    assert sorted(raw["urn:j1"].split()) == got["urn:j1"].split()
    assert got.dtype == raw.dtype and got["urn:j2"] == raw["urn:j2"]
    with pytest.raises(QueryError, match="bad '# sorted-words:' column"):
        parse_header("# sorted-words: ?hosts\nSELECT * WHERE {}")


def test_format_result() -> None:
    df = pd.DataFrame(
        {
            "key": ["a", "b"],
            "n": pd.array([1, None], dtype="Int64"),
            "t": pd.to_datetime(["2024-04-19T19:01:00.5Z", None], utc=True).astype(
                "datetime64[us, UTC]"
            ),
        }
    )
    rows = json.loads(format_result(df, "json"))
    assert rows == [
        {"key": "a", "n": 1, "t": "2024-04-19T19:01:00.500000Z"},
        {"key": "b", "n": None, "t": None},
    ]
    csv = format_result(df, "csv").splitlines()
    assert csv[0] == "key,n,t" and csv[2] == "b,,"
    assert "2024-04-19T19:01:00.500000Z" in format_result(df, "table")
    assert format_result(df.iloc[:0], "table").endswith("(no results)")
    assert format_result(True, "json") == "true"
    with pytest.raises(QueryError):
        format_result(df, "xml")
