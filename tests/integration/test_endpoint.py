"""A real SPARQL server (``oxigraph serve`` from the ``oxigraph`` PyPI package) on 127.0.0.1:
load every real run through the Graph Store protocol, answer every question like the embedded
store does, and report unreachable servers, missing or wrong credentials and HTTP errors clearly.

A small reverse proxy in front of the server demands credentials (HTTP Basic or a bearer
token), so the credential paths (environment variables, ~/.netrc) are tested end to end.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
import requests
from click.testing import CliRunner
from conftest import FULL, PMDA_RUNS, REAL_RUNS

import metaprov
from metaprov.cli import cli
from metaprov.errors import QueryError, StoreError
from metaprov.mapping import to_prov
from metaprov.queries import questions, run_question
from metaprov.store import EmbeddedStore, EndpointStore, open_store

pytestmark = [pytest.mark.server]

USER, PASSWORD, TOKEN = "prov-user", "s3cret:with:colons", "tok-123"
LIST_TASK = "list-8606d556-c6f4-465b-933b-4f2338e69364"
HELPER_TASK = "_dask_helper-191790f6-67cc-4318-98c5-df523aa88fa2"


def _oxigraph() -> str | None:
    """The ``oxigraph`` executable installed by the oxigraph PyPI package (next to python)."""
    here = Path(sys.executable).parent / "oxigraph"
    return str(here) if here.exists() else shutil.which("oxigraph")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``oxigraph serve`` on a free local port; yields its base URL; stopped afterwards."""
    exe = _oxigraph()
    if exe is None:
        pytest.skip("the oxigraph server is not installed (pip install oxigraph)")
    port = _free_port()
    location = tmp_path_factory.mktemp("oxigraph")
    log = open(location.parent / "oxigraph.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            exe,
            "serve",
            "--location",
            str(location),
            "--bind",
            f"127.0.0.1:{port}",
            "--union-default-graph",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(base + "/query", params={"query": "ASK {}"}, timeout=2)
                break
            except requests.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"oxigraph serve did not start: {(location.parent / 'oxigraph.log').read_text()}"
                    )
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class _Proxy(BaseHTTPRequestHandler):
    """Forwards to the server when the request carries the right credentials."""

    upstream = ""

    def _handle(self) -> None:
        if self.path.startswith("/broken"):
            self._reply(500, b"database on fire", "text/plain")
            return
        auth = self.headers.get("Authorization", "")
        good = {
            "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode(),
            f"Bearer {TOKEN}",
        }
        if not auth:
            self._reply(
                401,
                b"authentication required",
                "text/plain",
                {"WWW-Authenticate": 'Basic realm="prov"'},
            )
            return
        if auth not in good:
            self._reply(403, b"forbidden", "text/plain")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
        resp = requests.request(
            self.command, self.upstream + self.path, data=body, headers=headers, timeout=120
        )
        self._reply(resp.status_code, resp.content, resp.headers.get("Content-Type", "text/plain"))

    def _reply(
        self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _handle

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass


@pytest.fixture(scope="module")
def proxy(server: str) -> Iterator[str]:
    handler = type("Proxy", (_Proxy,), {"upstream": server})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture()
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("METAPROV_ENDPOINT_USER", "METAPROV_ENDPOINT_PASSWORD", "METAPROV_ENDPOINT_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))


#: The real runs loaded into the server: two PMDA runs (two graphs of one workflow) by default,
#: every real run with METAPROV_FULL=1 (the ImageProcessing run alone is 149,000 triples).
ENDPOINT_RUNS = REAL_RUNS if FULL else PMDA_RUNS[:2]


@pytest.fixture(scope="module")
def graphs() -> list:
    """PROV graphs of the real runs (read once; loaded into the server and an embedded store)."""
    if not ENDPOINT_RUNS:
        pytest.skip("real run data not found (set METAPROV_SHARED to the shared/ folder)")
    out = []
    for run in ENDPOINT_RUNS:
        records = metaprov.read_run(run)
        if records.darshan is not None:
            metaprov.link_io(records)
        out.append(to_prov(records))
    return out


@pytest.fixture(scope="module")
def loaded(server: str, graphs: list) -> tuple[EndpointStore, EmbeddedStore, list]:
    # 256 KiB requests: the larger runs go as one PUT and many POSTs (never one huge transaction).
    remote = EndpointStore(server + "/query", chunk_bytes=256 * 1024)
    local = EmbeddedStore(None)
    reports = [remote.load_graph(g) for g in graphs]
    for g in graphs:
        local.load_graph(g)
    return remote, local, reports


@pytest.mark.realdata
def test_load_every_run_through_the_graph_store_protocol(loaded: tuple, graphs: list) -> None:
    remote, local, reports = loaded
    assert remote.graphs() == local.graphs() == sorted(g.graph_iri for g in graphs)
    assert remote.count() == local.count() == sum(r.triples for r in reports)
    assert max(r.requests for r in reports) > 2  # chunked: PUT then POSTs
    # Loading again replaces (PUT first): the totals do not move.
    total = remote.count()
    again = remote.load_graph(graphs[1])
    assert again.replaced and remote.count() == total
    assert remote.count(graphs[1].graph_iri) == again.triples


@pytest.mark.realdata
def test_every_question_answers_as_on_the_embedded_store(loaded: tuple) -> None:
    remote, local, _ = loaded
    for q in questions():
        key = HELPER_TASK if q.name == "downstream" else LIST_TASK
        params = {"key": key} if q.param("key") and q.param("key").required else {}
        if q.name == "critical-path":
            params = {"run": PMDA_RUNS[0].name}
        got = run_question(remote, q.name, params)
        want = run_question(local, q.name, params)
        assert isinstance(got, pd.DataFrame) and isinstance(want, pd.DataFrame)
        pd.testing.assert_frame_equal(got, want, check_dtype=False, obj=q.name)
    runs = run_question(
        remote, "runs", {"run_id": metaprov.read_run(PMDA_RUNS[0], darshan=False).run_id}
    )
    assert (runs["tasks"].iloc[0], runs["executions"].iloc[0], runs["workers"].iloc[0]) == (9, 9, 8)


@pytest.mark.realdata
def test_report_of_the_server_equals_the_embedded_stores(
    server: str, loaded: tuple, no_credentials: None, tmp_path: Path
) -> None:
    pytest.importorskip("bokeh", reason="the report needs the 'report' extra (Bokeh)")
    from metaprov.report import write_store_report

    _, local, _ = loaded
    got = write_store_report(tmp_path / "remote.html", endpoint=server + "/query").facts["store"]
    want = write_store_report(tmp_path / "local.html", store=local).facts["store"]
    assert len(got["runs"]) == len(ENDPOINT_RUNS)
    assert got["notes"] == want["notes"]
    for part in ("runs", "prefixes", "slowest"):  # averages: the servers may sum in any order
        assert len(got[part]) == len(want[part]), part
        for g, w in zip(got[part], want[part], strict=True):
            assert g.keys() == w.keys()
            for k, v in w.items():
                assert g[k] == (pytest.approx(v, rel=1e-9) if isinstance(v, float) else v), (
                    part,
                    k,
                )


@pytest.mark.realdata
@pytest.mark.parametrize(
    "evil", ['"} UNION {?s ?p ?o}', "') } UNION { ?s ?p ?o } #", 'x" . ?s ?p ?o . #']
)
def test_injected_values_cannot_change_the_query_on_the_server(loaded: tuple, evil: str) -> None:
    remote, _, _ = loaded
    # the value stays one literal: nothing matches it, so it is named as not in the store
    for name, params, what in (
        ("lineage", {"key": evil}, "task key"),
        ("slowest-tasks", {"prefix": evil}, "task prefix"),
        ("runs", {"run_id": evil}, "run"),
    ):
        with pytest.raises(QueryError, match=f"no {what} .* in the store") as err:
            run_question(remote, name, params)
        assert repr(evil) in str(err.value)


def test_unreachable_server(no_credentials: None) -> None:
    port = _free_port()
    with pytest.raises(
        StoreError, match=r"cannot reach the SPARQL server at http://127\.0\.0\.1:\d+/query"
    ) as err:
        run_question(EndpointStore(f"http://127.0.0.1:{port}/query", timeout=5), "runs")
    assert "is the server running" in str(err.value)


def test_wrong_graph_store_path_is_an_http_error(server: str, no_credentials: None) -> None:
    st = EndpointStore(server + "/query", gsp_url=server + "/no-such-endpoint")
    with pytest.raises(StoreError, match=r"HTTP 404"):
        st.load_chunks("http://example.org/g", [b"<urn:a> <urn:b> <urn:c> .\n"])


class _BlackHole(BaseHTTPRequestHandler):
    """A Graph Store that accepts every write (204) and keeps nothing."""

    def _accept(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.end_headers()

    do_PUT = do_POST = do_DELETE = _accept  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


def test_a_store_that_keeps_nothing_is_an_error(server: str, no_credentials: None) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _BlackHole)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        gsp = f"http://127.0.0.1:{httpd.server_address[1]}/store"
        st = EndpointStore(server + "/query", gsp_url=gsp)
        with pytest.raises(StoreError, match=r"accepted 2 triples .* finds 0") as err:
            st.load_chunks("http://example.org/kept-nothing", [b"<urn:a> <urn:b> <urn:c> .\n"] * 2)
        assert "same dataset" in str(err.value)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_server_error_is_reported(proxy: str, no_credentials: None) -> None:
    with pytest.raises(StoreError, match="HTTP 500.*database on fire") as err:
        EndpointStore(proxy + "/broken/query").query("ASK { ?s ?p ?o }")
    assert "see its log" in str(err.value)


def test_missing_and_wrong_credentials(
    proxy: str, no_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(StoreError, match=r"requires credentials \(HTTP 401\)") as err:
        EndpointStore(proxy + "/query").query("ASK { ?s ?p ?o }")
    assert "METAPROV_ENDPOINT_USER" in str(err.value) and ".netrc" in str(err.value)
    monkeypatch.setenv("METAPROV_ENDPOINT_USER", USER)
    monkeypatch.setenv("METAPROV_ENDPOINT_PASSWORD", "wrong")
    with pytest.raises(StoreError, match=r"refused access \(HTTP 403\)") as err:
        EndpointStore(proxy + "/query").query("ASK { ?s ?p ?o }")
    assert "were not accepted" in str(err.value)


def test_credentials_from_environment(
    proxy: str, no_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("METAPROV_ENDPOINT_USER", USER)
    monkeypatch.setenv("METAPROV_ENDPOINT_PASSWORD", PASSWORD)
    st = EndpointStore(proxy + "/query", gsp_url=proxy + "/store")
    report = st.load_chunks("http://example.org/env/graph", [b"<urn:a> <urn:b> <urn:c> .\n"])
    assert report.triples == 1 and st.count("http://example.org/env/graph") == 1
    monkeypatch.delenv("METAPROV_ENDPOINT_USER")
    monkeypatch.setenv("METAPROV_ENDPOINT_TOKEN", TOKEN)
    assert EndpointStore(proxy + "/query").drop("http://example.org/env/graph") is True


def _use_netrc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    """A private netrc file with an entry for the test server, found through NETRC."""
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {password}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))


def test_credentials_from_netrc(
    proxy: str, no_credentials: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_netrc(tmp_path, monkeypatch, PASSWORD)
    st = open_store(endpoint=proxy + "/query")
    assert st.auth_source == "netrc"
    assert st.query("ASK { ?s ?p ?o }") in (True, False)


def test_token_wins_over_a_netrc_entry(
    proxy: str, no_credentials: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # requests would let ~/.netrc replace a bare Bearer header with Basic auth (wrong password
    # here: the proxy would answer 403); the token must be what reaches the server.
    _use_netrc(tmp_path, monkeypatch, "wrong")
    monkeypatch.setenv("METAPROV_ENDPOINT_TOKEN", TOKEN)
    st = open_store(endpoint=proxy + "/query")
    assert st.auth_source == "METAPROV_ENDPOINT_TOKEN" and TOKEN not in repr(st.credentials)
    assert st.query("ASK { ?s ?p ?o }") in (True, False)


def test_server_rejecting_a_query_is_a_query_error(server: str, no_credentials: None) -> None:
    # Valid SPARQL that fails on the server after the answer started: a SERVICE it may not call.
    st = EndpointStore(server + "/query", timeout=30)
    with pytest.raises(QueryError, match="federated queries"):  # refused before it is sent
        st.query("SELECT * WHERE { SERVICE <http://127.0.0.1:1/sparql> { ?s ?p ?o } }")
    st.allow_service = True
    with pytest.raises(QueryError, match="port 1 is not allowed"):
        st.query("SELECT * WHERE { SERVICE <http://127.0.0.1:1/sparql> { ?s ?p ?o } }")


@pytest.mark.realdata
def test_cli_load_and_query_through_the_endpoint(server: str, no_credentials: None) -> None:
    if not PMDA_RUNS:
        pytest.skip("real run data not found")
    runner = CliRunner()
    res = runner.invoke(cli, ["load", str(PMDA_RUNS[0]), "--endpoint", server + "/query", "--json"])
    assert res.exit_code == 0, res.output
    (report,) = json.loads(res.output)
    res = runner.invoke(
        cli,
        [
            "query",
            "runs",
            "--endpoint",
            server + "/query",
            "-f",
            "json",
            "--param",
            f"run_id={report['graph'].split('/')[-2]}",
        ],
    )
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)
    assert (row["tasks"], row["workers"]) == (9, 8)
    res = runner.invoke(
        cli, ["query", "runs", "--endpoint", f"http://127.0.0.1:{_free_port()}/query"]
    )
    assert (
        res.exit_code == StoreError.exit_code
        and "Error: cannot reach the SPARQL server" in res.output
    )
    assert os.environ.get("METAPROV_ENDPOINT_PASSWORD") is None


def test_cli_drop_through_the_endpoint(server: str, no_credentials: None) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "run"
    runner = CliRunner()
    assert (
        runner.invoke(cli, ["load", str(example), "--endpoint", server + "/query"]).exit_code == 0
    )
    res = runner.invoke(
        cli, ["drop", "3a11b3998b3a66d8", "--endpoint", server + "/query", "--json"]
    )
    assert res.exit_code == 0, res.output
    (dropped,) = json.loads(res.output)
    with EndpointStore(server + "/query") as st:
        assert dropped["graph"] not in st.graphs()
    res = runner.invoke(cli, ["drop", "3a11b3998b3a66d8", "--endpoint", server + "/query"])
    assert res.exit_code == StoreError.exit_code and "no run '3a11b3998b3a66d8'" in res.output


def test_cli_load_campaign_shards_through_the_endpoint(
    server: str, no_credentials: None, tmp_path: Path
) -> None:
    """`load OUTDIR --endpoint URL`: each shard of a campaign (one run partitioned) replaces its
    run's graph on the server; the campaign questions answer over them."""
    from metaprov.synthetic import generate_run

    generate_run(tmp_path / "runs" / "C1", 120, seed=11)
    generate_run(tmp_path / "runs" / "C2", 90, seed=12, retried_fraction=0.05)
    out = tmp_path / "out"
    out.mkdir()  # outputs never create a missing parent folder (docs/reliability.md)
    runner = CliRunner()
    for args in (["--backend", "in-process"], ["--partitions", "2", "--backend", "in-process"]):
        res = runner.invoke(
            cli, ["export", str(tmp_path / "runs"), "-o", str(out / args[1]), "-f", "nq", *args]
        )
        assert res.exit_code == 0, res.output
    manifest = json.loads((out / "2" / "manifest.json").read_text())
    graphs = {e["graph_iri"]: e["triples"] for e in manifest["runs"]}
    endpoint = server + "/query"
    for outdir in (out / "in-process", out / "2" / "manifest.json"):  # the second replaces
        res = runner.invoke(cli, ["load", str(outdir), "--endpoint", endpoint, "--json"])
        assert res.exit_code == 0, res.output
        assert sorted(r["graph"] for r in json.loads(res.stdout)) == sorted(graphs)
        with EndpointStore(endpoint) as st:
            assert {g: st.count(g) for g in graphs} == graphs
    ids = [g.split("/")[-2] for g in graphs]
    res = runner.invoke(cli, ["query", "runs", "--endpoint", endpoint, "-f", "json"])
    assert res.exit_code == 0, res.output
    assert {r["run_id"] for r in json.loads(res.stdout)} >= set(ids)
    res = runner.invoke(cli, ["query", "prefix-across-runs", "--endpoint", endpoint, "-f", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    # each run's prefixes compared with the other's (and any other run on the server)
    assert {r["run_id"] for r in rows if r["runs"] >= 2} >= set(ids)
