"""Hostile environments and inputs beyond the run files: an ``Error:`` naming the file and the fix
with the documented exit code, never a traceback; no request leaves for a service nobody allowed;
every output format keeps any Dask key. See docs/reliability.md.
"""

from __future__ import annotations

import io
import os
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyoxigraph as ox
import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

import metaprov
from metaprov.cli import cli
from metaprov.errors import InputError, QueryError, StoreError, UsageError
from metaprov.write import write


def _ok_error(res: object, code: int, *words: str) -> None:
    assert res.exit_code == code, res.output  # type: ignore[attr-defined]
    assert "Error: " in res.output and "Traceback" not in res.output  # type: ignore[attr-defined]
    for w in words:
        assert w in res.output, res.output  # type: ignore[attr-defined]


# --- files a run directory holds but cannot be read ----------------------------------------------


_LIBRARY_READ = """
import sys
import metaprov
from metaprov.errors import InputError
try:
    metaprov.read_run(sys.argv[1])
except InputError as exc:
    print(str(exc))
    sys.exit(0)
sys.exit("read_run read an unreadable file without an InputError")
"""


def test_unreadable_csv_is_an_input_error_naming_it() -> None:
    """As root every file is readable: the reads run as nobody (privileges dropped), so the
    test checks the same thing whoever runs it."""
    import shutil
    import subprocess
    import sys
    import tempfile

    as_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.fail("running as root and setpriv (util-linux) is missing to drop privileges")
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    top = Path(tempfile.mkdtemp(prefix="metaprov-unreadable-"))
    try:
        top.chmod(0o755)
        run = write_run(top / "run", tiny_files())
        for p in [run, *run.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        victim = run / "worker_transition.csv"
        victim.chmod(0)

        def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*as_user, sys.executable, *args],
                capture_output=True,
                text=True,
                cwd=top,
                timeout=120,
            )

        lib = as_nobody("-c", _LIBRARY_READ, str(run))
        assert lib.returncode == 0, lib.stderr[-2000:]
        assert "cannot read the file" in lib.stdout and victim.name in lib.stdout
        assert "chmod" in lib.stdout
        cli_ = as_nobody("-m", "metaprov", "inspect", str(run))
        assert cli_.returncode == InputError.exit_code, cli_.stderr[-2000:]
        assert "Error: " in cli_.stderr and "Traceback" not in cli_.stderr
        assert victim.name in cli_.stderr
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_csv_that_cannot_be_opened_is_an_input_error(tmp_path: Path) -> None:
    from metaprov.ingest.csvread import read_csv
    from metaprov.ingest.dask_csv import SPECS
    from metaprov.records import Accounting

    odd = tmp_path / "worker_transition.csv"
    odd.mkdir()  # open() fails for real (EISDIR), whoever runs the test
    with pytest.raises(InputError, match="cannot read the file") as exc:
        read_csv(odd, acct=Accounting(), **SPECS["worker_transition.csv"])
    assert odd.name in str(exc.value)


def test_pathologically_nested_json_is_a_warning(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", tiny_files())
    (run / "metaprov-run.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    rec = metaprov.read_run(run)
    issues = rec.accounting.issues
    assert (issues["reason"] == "not usable JSON: nested too deeply").any()
    res = CliRunner().invoke(cli, ["inspect", str(run)])
    assert res.exit_code == 0 and "Traceback" not in res.output


def test_damaged_store_is_a_store_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", tiny_files())
    store = tmp_path / "store"
    assert CliRunner().invoke(cli, ["load", str(run), "--store", str(store), "-q"]).exit_code == 0
    (store / "CURRENT").write_text("garbage\n")
    for args in (
        ["query", "runs", "--store", str(store)],
        ["load", str(run), "--store", str(store)],
    ):
        res = CliRunner().invoke(cli, args)
        _ok_error(res, StoreError.exit_code, "is damaged", "new store")


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "http://host:abc/query",
        "http://host:99999/query",
        "http://host/que ry",
        "http://host/q\x01",
        "http:///query",
        "ftp://host/query",
    ],
)
def test_malformed_urls_are_usage_errors(url: str, tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["query", "runs", "--endpoint", url])
    _ok_error(res, UsageError.exit_code, "--endpoint http://127.0.0.1:7878/query")
    run = write_run(tmp_path / "run", tiny_files())
    res = CliRunner().invoke(cli, ["load", str(run), "--endpoint", "http://h/query", "--gsp", url])
    _ok_error(res, UsageError.exit_code)


# --- SERVICE: no request leaves unless the user allows it ---------------------------------------


@pytest.fixture()
def listener() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on 127.0.0.1 recording every request it receives."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            seen.append(self.path)
            self.send_response(500)
            self.end_headers()

        do_GET = do_POST  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/sparql", seen
    httpd.shutdown()
    httpd.server_close()


def test_service_is_refused_unless_allowed(tmp_path: Path, listener: tuple) -> None:
    url, seen = listener
    nt = tmp_path / "run.nt"
    run = write_run(tmp_path / "run", tiny_files())
    assert CliRunner().invoke(cli, ["export", str(run), "-o", str(nt), "-q"]).exit_code == 0
    text = f"SELECT * WHERE {{ SERVICE <{url}> {{ ?s ?p ?o }} }}"
    res = CliRunner().invoke(cli, ["query", text, "--file", str(nt)])
    _ok_error(res, QueryError.exit_code, "federated queries", "--allow-service")
    with pytest.raises(QueryError, match="federated"):
        metaprov.query(
            f"SELECT * WHERE {{ ?x ?y ?z OPTIONAL {{ SERVICE <{url}> {{}} }} }}", file=nt
        )
    assert seen == []  # nothing was sent
    # the word inside a string, an IRI or a comment is not a SERVICE clause
    res = CliRunner().invoke(
        cli, ["query", 'SELECT * WHERE { ?s ?p "SERVICE" } # SERVICE', "--file", str(nt)]
    )
    assert res.exit_code == 0, res.output
    # allowed, the guard lets it through, but the embedded engine has no network at all
    # (store/offline.py): still nothing is sent, and no traceback
    res = CliRunner().invoke(cli, ["query", text, "--file", str(nt), "--allow-service"])
    assert seen == [], "the embedded engine reached the network"
    assert "Traceback" not in res.output


# --- control characters in keys: every format keeps them -----------------------------------------

CONTROL_KEY = "k-\x01\x0b\x1f\x7f\ufffe\\u0041 \\ end"  # (a CSV cell cannot hold a bare \r)
RDF = {
    "turtle": ox.RdfFormat.TURTLE,
    "ntriples": ox.RdfFormat.N_TRIPLES,
    "nquads": ox.RdfFormat.N_QUADS,
    "trig": ox.RdfFormat.TRIG,
    "json-ld": ox.RdfFormat.JSON_LD,
    "rdf-xml": ox.RdfFormat.RDF_XML,
}


@pytest.fixture(scope="module")
def control_graph(tmp_path_factory: pytest.TempPathFactory) -> object:
    files = tiny_files()
    for name in files:
        files[name] = files[name].replace("inc-1111", CONTROL_KEY.replace("\\", "\\\\"))
    run = write_run(tmp_path_factory.mktemp("ctl") / "run", files)
    records = metaprov.read_run(run)
    assert CONTROL_KEY in set(records.tasks["key"])
    return metaprov.to_prov(records)


def _keys(quads: object) -> set[str]:
    return {q.object.value for q in quads if q.predicate.value.endswith("#key")}  # type: ignore[attr-defined]


@pytest.mark.parametrize("fmt", sorted(RDF))
def test_every_rdf_format_keeps_control_characters(fmt: str, control_graph: object) -> None:
    from metaprov.write.rdfxml import unescape_literal

    buf = io.BytesIO()
    write(control_graph, buf, fmt)  # type: ignore[arg-type]
    data = buf.getvalue()
    keys = _keys(ox.parse(data, format=RDF[fmt]))
    if fmt == "rdf-xml":
        ET.fromstring(data)  # well-formed XML 1.0
        import rdflib

        g = rdflib.Graph().parse(data=data, format="xml")  # a conforming XML parser
        keys = {unescape_literal(str(o)) for _, p, o in g if str(p).endswith("#key")}
    assert CONTROL_KEY in keys


def test_xml_escape_round_trips_through_a_conforming_parser() -> None:
    import rdflib

    from metaprov.write.rdfxml import escape_literal, needs_escape, unescape_literal

    for text in ["a\rb", "a\r\nb", "\x00\x08\x0c", "\uffff", "C:\\users\\u1234", "plain"]:
        lit = ox.Literal(escape_literal(text) if needs_escape(text) else text)
        triple = ox.Triple(ox.NamedNode("http://e/s"), ox.NamedNode("http://e/p"), lit)
        data = ox.serialize([triple], format=ox.RdfFormat.RDF_XML)
        (o,) = [o for _, _, o in rdflib.Graph().parse(data=data, format="xml")]
        assert unescape_literal(str(o)) == text


def test_rdfxml_export_says_it_escaped_and_load_undoes_it(
    control_graph: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "run.rdf"
    write(control_graph, out)  # type: ignore[arg-type]
    assert "XML 1.0 cannot carry" in caplog.text
    from metaprov.store import open_store

    store = open_store(tmp_path / "store")
    with store:
        store.load_file(out)
        keys = set(store.query("SELECT ?k WHERE { ?t <https://w3id.org/metaprov/ns#key> ?k }")["k"])
    assert CONTROL_KEY in keys
