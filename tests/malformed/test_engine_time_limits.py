"""Issue 36: a query's planning and evaluation time was unbounded on ``serve --follow`` and
``query --store``: one pathological query (a cartesian product) kept an engine thread, and with
a few of them the server, busy for as long as the engine liked. Now a query past its time limit
is answered with a clear refusal (HTTP 503, or a LimitError), its thread is left to the engine
and replaced at once, and the server answers other queries meanwhile. A real HTTP server over
a real store; see docs/reliability.md ("Engine time limits")."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from metaprov.cli import cli
from metaprov.store import EmbeddedStore

#: 200^3 = 8 M solutions to count: 3-5 s of one core, whatever the limit (finite, so the
#: abandoned thread ends soon after the test).
SLOW_COUNT = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }"
#: The same product row by row: written as it is computed, ended by the deadline itself.
SLOW_ROWS = "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }"
QUICK = "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"


def _small_store(path: Path | None) -> EmbeddedStore:
    import pyoxigraph as ox

    st = EmbeddedStore(path)
    g = ox.NamedNode("urn:g")
    st.oxigraph.extend(
        ox.Quad(ox.NamedNode(f"urn:s{i}"), ox.NamedNode("urn:p"), ox.Literal(str(i)), g)
        for i in range(200)
    )
    return st


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[str, int]]:
    """``serve --follow``'s HTTP side with a 0.5 s query time limit."""
    from metaprov.live.server import LiveServer

    st = _small_store(None)
    server = LiveServer(st, port=0, timeout=0.5).start()
    try:
        yield ("127.0.0.1", server.port)
    finally:
        server.stop()


def _get(where: tuple[str, int], query: str) -> tuple[int, bytes, float]:
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(*where, timeout=60)
    conn.request(
        "GET", "/query?query=" + quote(query), headers={"Accept": "application/sparql-results+json"}
    )
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body, time.monotonic() - t0


def _abandoned_settle(seconds: float) -> int:
    from metaprov.store.offline import _POOL

    end = time.monotonic() + seconds
    while _POOL.abandoned and time.monotonic() < end:
        time.sleep(0.05)
    return _POOL.abandoned


def test_a_slow_query_is_refused_and_the_server_answers_others_meanwhile(
    live: tuple[str, int],
) -> None:
    got: dict[str, tuple[int, bytes, float]] = {}
    slow = [
        threading.Thread(target=lambda i=i: got.__setitem__(f"slow{i}", _get(live, SLOW_COUNT)))
        for i in range(2)
    ]
    for t in slow:
        t.start()
    time.sleep(0.2)  # both are being evaluated now
    status, body, took = _get(live, QUICK)
    assert status == 200 and b'"200"' in body, body
    for t in slow:
        t.join(60)
    for i in range(2):
        status, body, took = got[f"slow{i}"]
        assert status == 503, body
        assert b"refused: the query ran longer than 0.5 s" in body and b"--timeout" in body
        assert took < 5, took  # the limit, not the 3-5 s the count takes
    # the threads left to the engine end when it does; the pool never shrank meanwhile
    assert _abandoned_settle(60) == 0
    assert _get(live, QUICK)[0] == 200


def test_a_query_answered_row_by_row_is_ended_at_its_deadline(live: tuple[str, int]) -> None:
    """Written as it is computed: the deadline ends the engine's work too (no thread left)."""
    status, body, took = _get(live, SLOW_ROWS)
    assert status == 503 and b"ran longer than 0.5 s" in body, body[:300]
    assert _abandoned_settle(3) == 0


def test_query_store_timeout(tmp_path: Path) -> None:
    st = _small_store(tmp_path / "st")
    st.close()
    t0 = time.monotonic()
    res = CliRunner().invoke(
        cli, ["query", SLOW_COUNT, "--store", str(tmp_path / "st"), "--timeout", "0.5"]
    )
    assert res.exit_code == 8, res.output
    assert "ran longer than 0.5 s" in res.output and "--timeout" in res.output
    assert "Traceback" not in res.output
    assert time.monotonic() - t0 < 5
    # without --timeout: no limit on the command line (the same store answers)
    res = CliRunner().invoke(cli, ["query", QUICK, "--store", str(tmp_path / "st")])
    assert res.exit_code == 0 and "200" in res.output, res.output
    _abandoned_settle(60)


def test_serve_timeout_option() -> None:
    res = CliRunner().invoke(cli, ["serve", "--help"])
    assert "--timeout SECONDS" in res.output and "default: 60.0" in res.output
    res = CliRunner().invoke(cli, ["serve", "--timeout", "-1", "--store", "nowhere"])
    assert res.exit_code == 2 and "-1" in res.output
