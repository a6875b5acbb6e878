"""Issue 36, items 1 and 3: the SERVICE refusal decided on SPARQL's own terminals, what was
checked is what the engine runs, the engine has no network, and limits hold before the engine.

Real parts only: Oxigraph's server behind ``metaprov serve``'s guard, ``serve --follow``'s
server over a pyoxigraph store, ``metaprov query`` (library and CLI), and a real HTTP listener
on 127.0.0.1 standing for the URL a federated query would fetch (it records every request).
See docs/reliability.md ("SPARQL guard").
"""

from __future__ import annotations

import http.client
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pyoxigraph as ox
import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

import metaprov
from metaprov.cli import cli
from metaprov.errors import QueryError
from metaprov.store.offline import network_blocked, offline
from metaprov.store.sparql import (
    MAX_DEPTH,
    MAX_QUERY_CHARS,
    MAX_TOKENS,
    QueryRefused,
    checked_query,
)

pytestmark = [pytest.mark.server]

PRE = (
    "PREFIX rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#>\n"
    "PREFIX prov: <http://www.w3.org/ns/prov#>\nPREFIX ex: <http://example.org/>\n"
)


class _Listener(BaseHTTPRequestHandler):
    hits: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        type(self).hits.append(self.path)
        body = b'{"head":{"vars":["a"]},"results":{"bindings":[{"a":{"type":"literal","value":"LEAK"}}]}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/sparql-results+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[str, list[str]]]:
    """What a federated query would contact: it answers rows, and records every request."""
    hits: list[str] = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("L", (_Listener,), {"hits": hits}))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/sparql", hits
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tmp_path_factory.mktemp("sg") / "R1", tiny_files())


@pytest.fixture(scope="module")
def store(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sg-store") / "st"
    metaprov.load([run], store=path)
    return path


@pytest.fixture(scope="module")
def served(store: Path) -> Iterator[tuple[tuple[str, int], object]]:
    """``metaprov serve`` over the store: (guard address, the Server)."""
    from metaprov.store.serve import oxigraph_command, serve

    try:
        oxigraph_command()
    except Exception:  # noqa: BLE001
        pytest.skip("the oxigraph server is not installed (pip install 'metaprov[serve]')")
    server = serve(store, port=0)
    try:
        yield ("127.0.0.1", int(server.url.rsplit(":", 1)[1])), server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def live(run: Path) -> Iterator[tuple[str, int]]:
    """``serve --follow``'s HTTP side over a pyoxigraph store holding the run."""
    from metaprov.live.server import LiveServer
    from metaprov.store import EmbeddedStore

    st = EmbeddedStore(None)
    st.load_run(run)
    server = LiveServer(st, port=0, run=str(run)).start()
    try:
        yield ("127.0.0.1", server.port)
    finally:
        server.stop()


def request(where: tuple[str, int], query: str, how: str = "get") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(*where, timeout=60)
    headers = {"Accept": "application/sparql-results+json"}
    if how == "get":
        conn.request("GET", "/query?query=" + quote(query), headers=headers)
    elif how == "form":
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request("POST", "/query", body=("query=" + quote(query)).encode(), headers=headers)
    else:
        headers["Content-Type"] = "application/sparql-query"
        conn.request("POST", "/query", body=query.encode(), headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


COUNT = "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"


def bypasses(url: str) -> dict[str, str]:
    """The issue's bypasses of the old lexers, and more of their kind."""
    svc = f"SERVICE <{url}> {{ ?a ?b ?c }}"
    return {
        "bnode-glued": PRE + f"SELECT * WHERE {{ ?s rdf:type[]{svc} }}",
        "anon-glued": PRE + f"SELECT * WHERE {{ [ a prov:Activity]{svc} }}",
        "escaped-quote": PRE
        + f"SELECT * WHERE {{ OPTIONAL {{ ?s ex:a\\' ?o }} {svc} FILTER(?a != 'q') }}",
        "escaped-hash": PRE + f"SELECT * WHERE {{ ?s ex:a\\# ?o . {svc} }}",
        "lower-case": f"select * where {{ service <{url}> {{ ?a ?b ?c }} }}",
        "silent-variable": f"SELECT * WHERE {{ BIND(<{url}> AS ?u) SERVICE SILENT ?u {{ ?a ?b ?c }} }}",
        "values-endpoint": f"SELECT * WHERE {{ VALUES ?u {{ <{url}> }} SERVICE ?u {{ ?a ?b ?c }} }}",
        "after-long-string": f"SELECT * WHERE {{ ?s ?p '''it's'''. {svc} }}",
        "after-comment-in-iri": f"SELECT * WHERE {{ ?s <urn:x#> ?o . {svc} }}",
        "u-escape": f"SELECT * WHERE {{ \\u0053ERVICE <{url}> {{ ?a ?b ?c }} }}",
        "nested-exists": f"SELECT * WHERE {{ ?s ?p ?o FILTER EXISTS {{ {svc} }} }}",
        "ask": f"ASK {{ {svc} }}",
    }


LEGIT = [
    # SERVICE only inside strings, IRIs, comments, names: answered
    PRE + "SELECT ?s WHERE { ?s ?p ?o . FILTER(?o != 'SERVICE <http://x/> { }') } LIMIT 1",
    PRE + "SELECT ?s WHERE { ?s ?p ?o # SERVICE <http://x/> { ?a ?b ?c }\n } LIMIT 1",
    PRE + "SELECT ?s WHERE { ?s <http://x/SERVICE> ?o } LIMIT 1",
    PRE + "SELECT ?SERVICE WHERE { ?SERVICE ex:a\\#SERVICE ?o } LIMIT 1",
    COUNT,
]


# --- the decision, on the tokens; the engine's view agrees --------------------------------------


def test_every_bypass_is_refused_by_the_check(listener: tuple[str, list[str]]) -> None:
    url, hits = listener
    for name, q in bypasses(url).items():
        with pytest.raises(QueryRefused) as caught:
            checked_query(q)
        if name != "u-escape":
            assert caught.value.status == 403 and "SERVICE" in caught.value.message, name
    for q in LEGIT:
        assert checked_query(q).form in ("SELECT", "ASK")
    assert not hits


def test_the_engine_runs_the_canonical_text_of_what_was_checked() -> None:
    q = PRE + 'SELECT ?o WHERE { ?s ex:a\\#b \'x\\\'y\' ; rdf:type """q"r""" # c\n }'
    text = checked_query(q).text
    # names are full IRIs, strings re-escaped, comments gone, prefixes no longer needed
    assert "<http://example.org/a#b>" in text and '"x\'y"' in text and '"q\\"r"' in text
    assert "#" not in text.replace("a#b", "").replace("rdf-syntax-ns#", "") and "PREFIX" not in text
    ox.Store().query(text)  # the engine's parser reads it


def test_the_old_lexer_agreement_holds_on_the_issue_cases(listener: tuple[str, list[str]]) -> None:
    """The engine itself (no guard, no sandbox: what the guard protects) reaches the listener
    for these queries: the cases are real, and the check refuses every one of them."""
    url, hits = listener
    engine = ox.Store()
    s, rdf_type = ox.NamedNode("urn:s"), ox.NamedNode(PRE.split("<")[1].split(">")[0] + "type")
    engine.add(ox.Quad(s, rdf_type, ox.NamedNode("http://www.w3.org/ns/prov#Activity")))
    engine.add(ox.Quad(s, ox.NamedNode("http://example.org/a#"), s))
    reached = []
    for name, q in bypasses(url).items():
        before = len(hits)
        try:
            list(engine.query(q)) if "ASK" not in q else engine.query(q)
        except (SyntaxError, OSError, RuntimeError):
            continue
        if len(hits) > before:
            reached.append(name)
    assert {"bnode-glued", "anon-glued", "escaped-quote", "escaped-hash"} <= set(reached)


# --- defence in depth: the engine has no network ---------------------------------------------------


def test_engine_threads_cannot_connect(listener: tuple[str, list[str]]) -> None:
    if not network_blocked():
        pytest.skip("no seccomp filter on this system: the check is the only wall")
    url, hits = listener
    before = len(hits)
    with pytest.raises(OSError, match="ermission denied"):
        offline(
            lambda: list(ox.Store().query(f"SELECT * WHERE {{ SERVICE <{url}> {{ ?a ?b ?c }} }}"))
        )
    assert len(hits) == before
    # the rest of the process keeps its network
    conn = http.client.HTTPConnection("127.0.0.1", int(url.split(":")[2].split("/")[0]), timeout=5)
    conn.request("GET", "/ok")
    assert conn.getresponse().status == 200
    assert len(hits) == before + 1


def test_oxigraphs_server_cannot_connect(served: tuple, listener: tuple[str, list[str]]) -> None:
    """Behind the guard, even a query sent straight to Oxigraph's own port fetches nothing."""
    if not network_blocked():
        pytest.skip("no seccomp filter on this system")
    _, server = served
    url, hits = listener
    before = len(hits)
    status, data = request(
        server.guard.backend, f"SELECT * WHERE {{ SERVICE <{url}> {{ ?a ?b ?c }} }}", "body"
    )
    # the server starts its answer, then fails on the refused connection
    assert len(hits) == before and b"LEAK" not in data, data
    assert status != 200 or b"Permission denied" in data, data
    status, _ = request(server.guard.backend, COUNT, "body")
    assert status == 200


# --- every surface refuses every bypass, nothing is fetched -------------------------------------


@pytest.mark.parametrize("how", ["get", "form", "body"])
def test_serve_refuses_every_bypass(
    served: tuple, listener: tuple[str, list[str]], how: str
) -> None:
    where, _ = served
    url, hits = listener
    before = len(hits)
    for name, q in bypasses(url).items():
        status, data = request(where, q, how)
        assert status in (400, 403) and b"refused" in data, (name, status, data)
    for q in LEGIT:
        status, data = request(where, q, how)
        assert status == 200, (q, data)
    assert len(hits) == before


@pytest.mark.parametrize("how", ["get", "form"])
def test_serve_follow_refuses_every_bypass(
    live: tuple[str, int], listener: tuple[str, list[str]], how: str
) -> None:
    url, hits = listener
    before = len(hits)
    for name, q in bypasses(url).items():
        status, data = request(live, q, how)
        assert status in (400, 403) and b"refused" in data, (name, status, data)
    for q in LEGIT:
        status, data = request(live, q, how)
        assert status == 200, (q, data)
    assert len(hits) == before


def test_query_library_and_cli_refuse_every_bypass(
    store: Path, listener: tuple[str, list[str]]
) -> None:
    url, hits = listener
    before = len(hits)
    runner = CliRunner()
    for name, q in bypasses(url).items():
        with pytest.raises(QueryError):
            metaprov.query(q, store=store)
        res = runner.invoke(cli, ["query", q, "--store", str(store)])
        assert res.exit_code == 7 and "Error: " in res.output, (name, res.output)
        assert "Traceback" not in res.output and "LEAK" not in res.output
    for q in LEGIT:
        assert metaprov.query(q, store=store) is not None
    assert len(hits) == before


def test_allow_service_still_reaches_nothing_from_the_embedded_engine(
    store: Path, listener: tuple[str, list[str]]
) -> None:
    """--allow-service lifts the check; the embedded engine's threads still have no network,
    so the answer is a clear error (the sandbox is not lifted by a flag a web page can send)."""
    if not network_blocked():
        pytest.skip("no seccomp filter on this system")
    url, hits = listener
    before = len(hits)
    res = CliRunner().invoke(
        cli,
        [
            "query",
            f"SELECT * WHERE {{ SERVICE <{url}> {{ ?a ?b ?c }} }}",
            "--store",
            str(store),
            "--allow-service",
        ],
    )
    assert res.exit_code != 0 and "Error: " in res.output and "Traceback" not in res.output
    assert len(hits) == before


# --- limits before the engine ----------------------------------------------------------------------

DEEP = "SELECT * WHERE { " + "{ " * 3000 + "?s ?p ?o " + "} " * 3000 + "}"


def test_deep_nesting_is_refused_and_the_servers_live(served: tuple, live: tuple[str, int]) -> None:
    where, _ = served
    for address in (where, live):
        status, data = request(address, DEEP, "get")
        assert status == 400 and b"deeper than" in data, data
        for shape in ("(" * 3000 + "1" + ")" * 3000, "[ ex:p " * 3000 + "1" + " ]" * 3000):
            q = PRE + f"SELECT * WHERE {{ ?s ?p {shape} }}"
            status, data = request(address, q, "body" if address == where else "form")
            assert status == 400 and b"deeper than" in data, data
        status, _ = request(address, COUNT, "get")
        assert status == 200  # still serving


def test_deep_nesting_in_metaprov_query_is_an_error_not_a_crash(store: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "metaprov", "query", DEEP, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 7, res.stderr
    assert "Error: " in res.stderr and "deeper than" in res.stderr and "Traceback" not in res.stderr
    with pytest.raises(QueryRefused, match="deeper than"):
        metaprov.query(DEEP, store=store)


def test_size_and_token_limits(served: tuple, live: tuple[str, int], store: Path) -> None:
    where, _ = served
    huge = COUNT + " #" + "x" * MAX_QUERY_CHARS
    many = "SELECT * WHERE { " + " . ".join(["?s ?p ?o"] * (MAX_TOKENS // 4 + 1)) + " }"
    status, data = request(where, huge, "body")
    assert status == 413 and b"characters long" in data
    status, data = request(where, many, "body")
    assert status == 413 and b"tokens" in data
    status, data = request(live, many, "form")
    assert status == 413 and b"tokens" in data
    res = CliRunner().invoke(cli, ["query", many, "--store", str(store)])
    assert res.exit_code == 7 and "Error: " in res.output and "tokens" in res.output
    with pytest.raises(QueryRefused, match="characters long"):
        metaprov.query(huge, store=store)


def test_at_the_limits_the_engines_survive(
    served: tuple, live: tuple[str, int], store: Path
) -> None:
    """Queries at the depth limit run: the engines' parsers recurse once per level, and their
    threads have the stack for it (Oxigraph's server through RUST_MIN_STACK). A one-line query
    too long to be a file name is SPARQL text, not an error."""
    where, _ = served
    shapes = {
        "braces": "SELECT * WHERE " + "{ " * MAX_DEPTH + "?s ?p ?o " + "} " * MAX_DEPTH,
        "parens": "SELECT * WHERE { ?s ?p ?o FILTER"
        + "(" * (MAX_DEPTH - 1)
        + "?o"
        + ")" * (MAX_DEPTH - 1)
        + " }",
        "bnodes": "SELECT * WHERE { ?s ?p "
        + "[ <urn:p> " * (MAX_DEPTH - 1)
        + "?o"
        + " ]" * (MAX_DEPTH - 1)
        + " }",
        "path": "SELECT * WHERE { ?s " + "/".join(["<urn:p>"] * 40) + " ?o }",
        "join": "SELECT * WHERE { "
        + " . ".join(f"?s{i} <urn:p> ?s{i + 1}" for i in range(40))
        + " }",
    }
    for name, q in shapes.items():
        checked_query(q)  # passes the check
        for address, how in ((where, "body"), (live, "form")):
            status, data = request(address, q, how)
            assert status == 200, (name, address, data[:300])
        assert metaprov.query(q, store=store) is not None
    for address in (where, live):
        assert request(address, COUNT, "get")[0] == 200


def test_a_huge_answer_is_refused_by_serve_follow(run: Path) -> None:
    from metaprov.live.server import LiveServer
    from metaprov.store import EmbeddedStore

    st = EmbeddedStore(None)
    st.load_run(run)
    server = LiveServer(st, port=0, max_answer=2000).start()
    try:
        status, data = request(("127.0.0.1", server.port), "SELECT * WHERE { ?s ?p ?o }")
        assert status == 413 and b"larger than 2,000 bytes" in data
        status, _ = request(("127.0.0.1", server.port), COUNT)
        assert status == 200
    finally:
        server.stop()


# --- the fuzzer ------------------------------------------------------------------------------------


def _pieces(url: str) -> list[str]:
    return [
        # names with escapes, IRIs with quotes and '#', strings, comments
        "ex:a\\'",
        "ex:a\\#",
        "ex:a\\(",
        "ex:%41b",
        "ex:a.b",
        "rdf:type",
        "ex:",
        "ex:SERVICE",
        "<urn:x#>",
        "<http://e/x'y>",
        "<http://e/SERVICE>",
        "<urn:a\\u0023b>",
        '<urn:q"x>',
        "'a'",
        '"b"',
        "'it\\'s'",
        '"q\\"x"',
        "'''x'y'''",
        '"""a""b"""',
        "'SERVICE'",
        '"#"',
        "'<'",
        "'\\u0027'",
        '"\\u0022"',
        "# SERVICE <u> { }\n",
        "#'\n",
        '#"\n',
        "# \\\n",
        # structure
        "{",
        "}",
        "{ ?a ?b ?c }",
        "OPTIONAL {",
        "UNION",
        "[",
        "]",
        "[]",
        "[ a prov:Activity]",
        "(",
        ")",
        ".",
        ";",
        ",",
        "FILTER(",
        "FILTER EXISTS {",
        "BIND(",
        "AS ?u )",
        "VALUES ?u {",
        "GRAPH ?g {",
        # the keyword, in every disguise, and its endpoints
        "SERVICE",
        "service",
        "SeRvIcE",
        "SERVICE SILENT",
        "\\u0053ERVICE",
        "SERV\\u0049CE",
        f"<{url}>",
        "?u",
        "$u",
        "?SERVICE",
        f"SERVICE <{url}> {{ ?a ?b ?c }}",
        "SERVICE SILENT ?u { ?a ?b ?c }",
        f"BIND(<{url}> AS ?u)",
        # terms
        "?s",
        "?p",
        "?o",
        "1",
        "1.5e3",
        "true",
        "_:b1",
        "a",
        "@en",
        "^^",
        "!=",
        "<",
        ">",
    ]


def _fuzz_queries(url: str, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pieces = _pieces(url)
    seps = ["", " ", "\n", "\t"]
    out = []
    for _ in range(count):
        body = "".join(rng.choice(pieces) + rng.choice(seps) for _ in range(rng.randint(1, 14)))
        if rng.random() < 0.5:
            body += f" SERVICE <{url}> {{ ?a ?b ?c }}"
        head = rng.choice(["SELECT * WHERE { ", "ASK { ", "SELECT ?a WHERE { ?s ?p ?o "])
        out.append(PRE + head + body + " }")
    return out


def test_fuzz_nothing_the_check_passes_reaches_the_network(listener: tuple[str, list[str]]) -> None:
    """Generated token sequences: whatever the check lets through, the bare engine (no sandbox:
    the check alone is tested) runs without fetching anything; whatever the bare engine would
    fetch with, the check refused. Never a crash: a refusal or an answer."""
    url, hits = listener
    for q in _fuzz_queries(url, 400, seed=36):
        before = len(hits)
        try:
            text = checked_query(q).text
        except QueryRefused:
            text = None
        if text is not None:
            try:
                res = ox.Store().query(text)
                if not isinstance(res, bool) and not isinstance(res, ox.QueryBoolean):
                    list(res)
            except (SyntaxError, OSError, RuntimeError):
                pass
            assert len(hits) == before, q
        else:
            assert len(hits) == before


def test_fuzz_through_the_real_servers(
    served: tuple, live: tuple[str, int], listener: tuple[str, list[str]]
) -> None:
    where, _ = served
    url, hits = listener
    before = len(hits)
    for i, q in enumerate(_fuzz_queries(url, 80, seed=3636)):
        for address in (where, live):
            status, data = request(address, q, ("get", "form", "body")[i % 3])
            assert status in (200, 400, 403), (q, status, data)
            assert b"LEAK" not in data
    assert len(hits) == before
    assert request(where, COUNT)[0] == 200 and request(live, COUNT)[0] == 200
