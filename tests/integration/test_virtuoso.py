"""A second real SPARQL server, end to end: Virtuoso open-source 7 (Debian
``virtuoso-opensource-7-bin``, installed by .ci/run) on 127.0.0.1, started once for the session
in a temporary directory (tests/virtuoso_server.py, the recipe of docs/store.md) and stopped
after.

A real run and the tiny test run are loaded through the Graph Store protocol with HTTP Digest, replaced, dropped and
listed, and every packaged question is asked with its parameters: the answers equal the
embedded store's — integers exact (thread ids are integers), doubles to 15 significant digits,
times with their offsets.
"""

from __future__ import annotations

import json
import os
import pty
import select
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import PMDA_RUNS
from tinyrun import recomputed_records, tiny_records
from virtuoso_server import PASSWORD, USER, Virtuoso, executables, start

import metaprov
from metaprov.cli import cli
from metaprov.errors import StoreError
from metaprov.mapping import to_prov
from metaprov.queries import questions, run_question
from metaprov.store import EmbeddedStore, EndpointStore

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(
        executables() is None,
        reason="Virtuoso is not installed (apt-get install virtuoso-opensource-7-bin; .ci/run "
        "does it when it runs as root)",
    ),
]

LIST_TASK = "list-8606d556-c6f4-465b-933b-4f2338e69364"
HELPER_TASK = "_dask_helper-191790f6-67cc-4318-98c5-df523aa88fa2"
#: Computed by subtracting nearly equal doubles: a last-digit difference in an operand (the
#: servers' sums, Virtuoso's 16-digit STR()) grows by the cancellation.
DIFFERENCES = {"deviation": 1e-12, "spread": 1e-13}


@pytest.fixture(scope="module")
def virtuoso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Virtuoso]:
    server = start(tmp_path_factory.mktemp("virtuoso"))
    try:
        yield server
    finally:
        server.stop()


def _graph(run: Path):  # noqa: ANN202
    records = metaprov.read_run(run)
    if records.darshan is not None:
        metaprov.link_io(records)
    return to_prov(records)


@pytest.fixture(scope="module")
def loaded(virtuoso: Virtuoso) -> tuple[EndpointStore, EmbeddedStore, list]:
    """A real PMDA run and the tiny run in Virtuoso (Digest, 1 MiB requests, two in flight),
    and in an embedded store."""
    if not PMDA_RUNS:
        pytest.skip("real run data not found (set METAPROV_SHARED to the shared/ folder)")
    # A real run, and the tiny run of tests/tinyrun.py (erred, retried, never-run tasks; a
    # thread id near 2^64): two runs for the campaign questions, and a few seconds of loading.
    graphs = [_graph(PMDA_RUNS[0]), to_prov(tiny_records())]
    mp = pytest.MonkeyPatch()
    mp.setenv("METAPROV_ENDPOINT_USER", USER)
    mp.setenv("METAPROV_ENDPOINT_PASSWORD", PASSWORD)
    mp.delenv("METAPROV_ENDPOINT_TOKEN", raising=False)
    try:
        remote = EndpointStore(virtuoso.query_url, chunk_bytes=1 << 20, concurrency=2)
    finally:
        mp.undo()
    local = EmbeddedStore(None)
    reports = [remote.load_graph(g) for g in graphs]
    for g in graphs:
        local.load_graph(g)
    return remote, local, reports


def _same(got: pd.DataFrame, want: pd.DataFrame, name: str) -> None:
    """Equal answers: same columns and dtypes (Int64 integers, UTC times), same rows; floats to
    15 significant digits. Rows are compared in the engines' order, except that Virtuoso sorts
    strings by its own collation: rows equal as a sorted set when the order differs."""
    assert list(got.columns) == list(want.columns), name
    assert got.dtypes.to_dict() == want.dtypes.to_dict(), name
    if not got.reset_index(drop=True).astype(str).equals(want.reset_index(drop=True).astype(str)):
        keys = [c for c in want.columns if want[c].dtype != "float64"]
        got = got.sort_values(keys, kind="stable").reset_index(drop=True)
        want = want.sort_values(keys, kind="stable").reset_index(drop=True)
    for col in want.columns:
        if want[col].dtype == "float64":
            rtol = DIFFERENCES.get(col, 1e-14)
            pd.testing.assert_series_equal(
                got[col], want[col], check_exact=False, rtol=rtol, atol=0, obj=f"{name}.{col}"
            )
        else:
            pd.testing.assert_series_equal(got[col], want[col], obj=f"{name}.{col}")


def _every_question_answers_as_on_the_embedded_store(loaded: tuple) -> None:
    remote, local, reports = loaded
    assert max(r.requests for r in reports) > 2  # chunked: one PUT, then POSTs
    pd.testing.assert_frame_equal(remote.runs(), local.runs())
    run_graphs = set(local.graphs())
    assert run_graphs <= set(remote.graphs())  # Virtuoso also keeps its own system graphs
    for g in run_graphs:
        assert remote.count(g) == local.count(g)
    for q in questions():
        key = HELPER_TASK if q.name == "downstream" else LIST_TASK
        params = {"key": key} if q.param("key") and q.param("key").required else {}
        if q.name == "critical-path":
            params = {"run": PMDA_RUNS[0].name}
        got, want = run_question(remote, q.name, params), run_question(local, q.name, params)
        assert isinstance(got, pd.DataFrame) and isinstance(want, pd.DataFrame)
        _same(got, want, q.name)
    # thread ids are integers above 2^44 in the real runs, and one near 2^64 in the tiny run:
    # exact, never through a float (Virtuoso keeps them as decimals, Oxigraph cannot compare
    # the largest)
    threads = run_question(remote, "thread-utilisation")["thread"]
    assert str(threads.dtype) == "UInt64" and 18_446_744_073_709_551_000 in threads.tolist()
    assert any(2**44 < t < 2**53 for t in threads.dropna())
    assert threads.tolist() == run_question(local, "thread-utilisation")["thread"].tolist()
    # the command line lists the same runs
    res = CliRunner().invoke(cli, ["query", "runs", "--endpoint", remote.location, "-f", "json"])
    assert res.exit_code == 0, res.output
    assert [r["run_id"] for r in json.loads(res.output)] == local.runs()["run_id"].tolist()
    # with parameters
    run_id = str(local.runs()["run_id"].iloc[0])
    for name, params in (
        ("runs", {"run_id": run_id}),
        ("slowest-tasks", {"prefix": "list"}),
        ("configuration", {"run_id": run_id}),
        ("file-access", {"key": LIST_TASK}),
        # the tiny run: a retried task, a task that never ran (its dependencies' last
        # executions), a task with two levels upstream
        ("lineage", {"key": "err"}),
        ("lineage", {"key": "never"}),
        ("lineage", {"key": "x/y z"}),
    ):
        _same(run_question(remote, name, params), run_question(local, name, params), name)
    # a run with re-executed keys (lineage rows are the executions that fed the row below),
    # loaded for this check only
    graph = to_prov(recomputed_records())
    alone = EmbeddedStore(None)
    alone.load_graph(graph)
    remote.load_graph(graph)
    try:
        for key in ("x/y z", "never", "('b-1f', 0)"):
            params = {"key": key, "run_id": graph.run_id}
            want = run_question(alone, "lineage", params)
            _same(run_question(remote, "lineage", params), want, f"lineage {key}")
            assert want["attempt"].notna().any()
    finally:
        remote.drop(graph.graph_iri)


def _replace_drop_and_list_a_run(virtuoso: Virtuoso) -> None:
    """The tiny run (loaded by the fixture): drop it, load it, load it again, drop it."""
    remote = EndpointStore(virtuoso.query_url)
    graph = to_prov(tiny_records())
    ask = f"ASK {{ GRAPH <{graph.graph_iri}> {{ ?s ?p ?o }} }}"
    assert remote.query(ask) is True and graph.run_id in set(remote.runs()["run_id"])
    assert remote.drop(graph.graph_iri) is True
    assert remote.query(ask) is False and graph.run_id not in set(remote.runs()["run_id"])
    first = remote.load_graph(graph)
    assert not first.replaced and remote.count(graph.graph_iri) == first.triples
    again = remote.load_graph(graph)  # PUT first: replaces, does not add
    assert again.replaced and remote.count(graph.graph_iri) == first.triples
    listed = remote.runs()
    assert graph.run_id in set(listed["run_id"]) and len(listed) == 2
    assert remote.drop(graph.graph_iri) is True
    assert graph.run_id not in set(remote.runs()["run_id"])
    assert remote.count(graph.graph_iri) == 0


def _digest_credentials_from_environment_netrc_and_refusals(
    virtuoso: Virtuoso, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nt = [b"<urn:a> <urn:b> <urn:c> .\n"]
    for var in ("METAPROV_ENDPOINT_USER", "METAPROV_ENDPOINT_PASSWORD", "METAPROV_ENDPOINT_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(StoreError, match=r"requires credentials \(HTTP 401\)"):
        EndpointStore(virtuoso.query_url, interactive=False).load_chunks("urn:g:auth", nt)
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    st = EndpointStore(virtuoso.query_url)
    assert st.auth_source == "netrc"
    assert st.load_chunks("urn:g:auth", nt).triples == 1 and st.count("urn:g:auth") == 1
    monkeypatch.setenv("METAPROV_ENDPOINT_USER", USER)
    monkeypatch.setenv("METAPROV_ENDPOINT_PASSWORD", "wrong-PW-xyz")
    with pytest.raises(StoreError, match="were not accepted") as err:
        EndpointStore(virtuoso.query_url).drop("urn:g:auth")
    assert "wrong-PW-xyz" not in str(err.value)
    monkeypatch.setenv("METAPROV_ENDPOINT_PASSWORD", PASSWORD)
    assert EndpointStore(virtuoso.query_url).drop("urn:g:auth") is True


def _password_prompt_on_a_terminal(virtuoso: Virtuoso, tmp_path: Path) -> None:
    """No password anywhere: on a terminal metaprov asks (not echoed) and Digest succeeds."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("METAPROV_ENDPOINT") and k not in ("NETRC",)
    }
    env.update(METAPROV_ENDPOINT_USER=USER, NETRC=str(tmp_path / "none"), HOME=str(tmp_path))
    nt = tmp_path / "one.nt"
    nt.write_text("<urn:a> <urn:b> <urn:c> .\n")
    # the Graph Store endpoint is derived from /sparql: /sparql-graph-crud-auth (Digest)
    args = [sys.executable, "-m", "metaprov", "load", str(nt), "--endpoint", virtuoso.query_url]
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session whose terminal is the pty
        os.execve(sys.executable, args, env)
    out = b""
    deadline = time.monotonic() + 60
    answered = False
    status = None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            out += chunk
            if not answered and b"password of dba" in out:
                os.write(fd, PASSWORD.encode() + b"\n")
                answered = True
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail(f"no end: {out!r}")
    try:
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            out += chunk
    except OSError:
        pass
    os.close(fd)
    assert answered, out
    assert os.waitstatus_to_exitcode(status) == 0, out
    assert PASSWORD.encode() + b"\r\n" not in out.split(b"password of dba", 1)[1][:40]  # not echoed


@pytest.mark.realdata
def test_virtuoso_end_to_end(
    virtuoso: Virtuoso, loaded: tuple, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One test, so that one server serves every check, whatever worker runs it (starting
    Virtuoso costs seconds; pytest-xdist's grouping does not work with this pytest)."""
    _every_question_answers_as_on_the_embedded_store(loaded)
    monkeypatch.delenv("METAPROV_ENDPOINT_TOKEN", raising=False)
    monkeypatch.setenv("METAPROV_ENDPOINT_USER", USER)
    monkeypatch.setenv("METAPROV_ENDPOINT_PASSWORD", PASSWORD)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    _replace_drop_and_list_a_run(virtuoso)
    _digest_credentials_from_environment_netrc_and_refusals(virtuoso, monkeypatch, tmp_path)
    _password_prompt_on_a_terminal(virtuoso, tmp_path)
