"""Live provenance: follow a run while it is written, serve while following, served stores.

Real parts only: a real run's CSV rows replayed in time order by a test writer
(tests/live_replay.py), a real Oxigraph server, `metaprov follow` / `serve --follow` as real
processes (killed with SIGKILL in one case), a real LocalCluster recorded by the capture.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from conftest import DARSHAN_DASK_RUNS

from metaprov.live.follow import provisional_id
from metaprov.live.server import uses_service
from metaprov.live.snapshot import WORKER_TABLES, take_snapshot, whole_rows_size

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from live_replay import Replay  # noqa: E402

MIXED = DARSHAN_DASK_RUNS / "mixed-mofka"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run"
METAPROV = [sys.executable, "-m", "metaprov"]
INTERVAL = "0.4"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _oxigraph() -> str | None:
    here = Path(sys.executable).parent / "oxigraph"
    return str(here) if here.is_file() else shutil.which("oxigraph")


def _canonical(nquads: bytes) -> list[bytes]:
    """N-Quads as Oxigraph holds them (its literal forms), sorted: the bytes two stores agree on."""
    import pyoxigraph as ox

    st = ox.Store()
    st.load(nquads, format=ox.RdfFormat.N_QUADS)
    return sorted(bytes(st.dump(format=ox.RdfFormat.N_QUADS)).splitlines())


def _export(run: Path, tmp: Path) -> list[bytes]:
    out = tmp / "export.nq"
    r = _run("-q", "export", str(run), "-o", str(out))
    assert r.returncode == 0, r.stderr
    return _canonical(out.read_bytes())


def _run(*args: str) -> SimpleNamespace:
    """A metaprov command run in this process (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from metaprov.cli import cli

    res = CliRunner().invoke(cli, list(args))
    return SimpleNamespace(returncode=res.exit_code, stdout=res.stdout, stderr=res.stderr)


# --------------------------------------------------------------------------------------------
# Snapshots: whole rows only; the parts merged as the capture merges them
# --------------------------------------------------------------------------------------------


def test_snapshot_keeps_whole_rows_and_leaves_the_row_being_written(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "worker.csv").write_bytes(
        b",worker,action,stimulus_id,time\n0,tcp://a:1,add,,1.5\n0,tcp://b"
    )
    (run / "config.txt").write_text("x=1\n")
    snap = take_snapshot(run, tmp_path / "snap" / "run")
    assert (
        snap.path / "worker.csv"
    ).read_bytes() == b",worker,action,stimulus_id,time\n0,tcp://a:1,add,,1.5\n"
    assert snap.cut_bytes == {"worker.csv": len(b"0,tcp://b")}
    assert (snap.path / "config.txt").read_text() == "x=1\n"
    assert snap.status is None
    assert whole_rows_size(run / "config.txt") == 4
    # nothing was written into the run directory
    assert sorted(p.name for p in run.iterdir()) == ["config.txt", "worker.csv"]


def test_snapshot_merges_worker_parts_exactly_as_the_capture_does(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from metaprov.capture import merge_parts
    from metaprov.capture._files import WORKER_TABLES as CAPTURE_TABLES

    assert tuple(CAPTURE_TABLES) == WORKER_TABLES
    run = tmp_path / "run"
    parts = run / "metaprov-parts"
    parts.mkdir(parents=True)
    head = "key,start,finish,called_from,time\n"
    (parts / "worker_transition.1-aa.csv").write_text(
        head + "x,ready,executing,tcp://a:1,3.5\nx,executing,memory,tcp://a:1,4.25\n"
    )
    (parts / "worker_transition.2-bb.csv").write_text(
        head + "\"('y', 0)\",ready,executing,tcp://b:1,3.5\ny,executing,memory,tcp://b:1,1.0\nz,rea"
    )
    snap = take_snapshot(run, tmp_path / "snap" / "run")
    assert snap.parts == {"worker_transition": 4}
    assert snap.cut_bytes == {"metaprov-parts/worker_transition.2-bb.csv": 5}
    # the capture's merge of the same (completed) rows gives the same bytes
    (parts / "worker_transition.2-bb.csv").write_text(
        head + "\"('y', 0)\",ready,executing,tcp://b:1,3.5\ny,executing,memory,tcp://b:1,1.0\n"
    )
    merge_parts(run, keep_parts=True)
    assert (snap.path / "worker_transition.csv").read_bytes() == (
        run / "worker_transition.csv"
    ).read_bytes()


def test_snapshot_of_arrow_parts_being_written_takes_their_whole_chunks(tmp_path: Path) -> None:
    """Today's workers write Arrow chunks: a snapshot taken while one is being written reads the
    whole chunks of every part (the one being written is left for the next snapshot, its bytes
    counted), merged exactly as the capture's merge does once the worker is done."""
    pytest.importorskip("distributed")
    from metaprov.capture import merge_parts
    from metaprov.capture._files import WORKER_TRANSITION, PartSink

    run = tmp_path / "run"
    parts = run / "metaprov-parts"
    parts.mkdir(parents=True)
    a = PartSink(parts / "worker_transition.1-aa.arrows", WORKER_TRANSITION, key=0)
    b = PartSink(parts / "worker_transition.2-bb.arrows", WORKER_TRANSITION, key=0)
    a.append(("x", "ready", "executing", "tcp://a:1", 3.5))
    a.append(("x", "executing", "memory", "tcp://a:1", 4.25))
    b.append((("y", 0), "ready", "executing", "tcp://b:1", 3.5))
    a.close()
    b.flush()
    whole = (parts / "worker_transition.2-bb.arrows").stat().st_size
    b.append(("y", "executing", "memory", "tcp://b:1", 1.0))
    b.flush()
    data = (parts / "worker_transition.2-bb.arrows").read_bytes()
    (parts / "worker_transition.2-bb.arrows").write_bytes(data[: whole + 100])  # mid-write
    snap = take_snapshot(run, tmp_path / "snap" / "run")
    assert snap.parts == {"worker_transition": 3}
    assert snap.cut_bytes == {"metaprov-parts/worker_transition.2-bb.arrows": 100}
    (parts / "worker_transition.2-bb.arrows").write_bytes(data[:whole])  # as if not yet written
    merge_parts(run, keep_parts=True)
    assert (snap.path / "worker_transition.csv").read_bytes() == (
        run / "worker_transition.csv"
    ).read_bytes()
    assert (run / "worker_transition.csv").read_text().splitlines()[1:] == [
        "0,x,ready,executing,tcp://a:1,3.5",
        "1,\"('y', 0)\",ready,executing,tcp://b:1,3.5",
        "2,x,executing,memory,tcp://a:1,4.25",
    ]


def test_service_queries_are_recognised_outside_strings_and_iris() -> None:
    assert uses_service("SELECT * { SERVICE <http://x/> { ?s ?p ?o } }")
    assert uses_service("select * { service\n<http://x/> { ?s ?p ?o } }")
    assert not uses_service('SELECT * { ?s ?p "SERVICE" } # SERVICE')
    assert not uses_service("SELECT * { ?s <http://x/SERVICE> ?o }")


def test_follow_refuses_what_it_cannot_follow(tmp_path: Path) -> None:
    r = _run("follow", str(tmp_path / "absent" / "run"), "--store", str(tmp_path / "st"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "absent" in r.stderr
    r = _run("follow", str(tmp_path), "--store", str(tmp_path / "st"), "--interval", "0")
    assert r.returncode != 0 and "--interval" in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------------------------------------
# A Mofka-schema run being appended, followed into a real SPARQL server, a reader polling
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oxigraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = _oxigraph()
    if exe is None:
        pytest.skip("the oxigraph server is not installed (pip install oxigraph)")
    port = _free_port()
    location = tmp_path_factory.mktemp("live-oxigraph")
    proc = subprocess.Popen(
        [exe, "serve", "--location", str(location), "--bind", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(base + "/query", params={"query": "ASK {}"}, timeout=2)
            break
        except requests.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.skip("oxigraph server did not start")
            time.sleep(0.1)
    yield base
    proc.terminate()
    proc.wait(10)


class Poller:
    """Counts the triples of every graph of a server as fast as it can, until stopped."""

    def __init__(self, query_url: str) -> None:
        self.url = query_url
        self.seen: list[dict[str, tuple[int, int]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        q = (
            "SELECT ?g (COUNT(*) AS ?n) "
            "(SUM(IF(?p = <https://w3id.org/metaprov/ns#liveUpdated>, 1, 0)) AS ?u) "
            "WHERE { GRAPH ?g { ?s ?p ?o } } GROUP BY ?g"
        )
        while not self.stop.is_set():
            try:
                r = requests.post(
                    self.url,
                    data={"query": q},
                    headers={"Accept": "application/sparql-results+json"},
                    timeout=10,
                )
                rows = r.json()["results"]["bindings"]
                self.seen.append(
                    {b["g"]["value"]: (int(b["n"]["value"]), int(b["u"]["value"])) for b in rows}
                )
            except (requests.RequestException, ValueError, KeyError):
                pass
            time.sleep(0.02)

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(20)


def _follow_proc(run: Path, endpoint: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*METAPROV, "follow", str(run), "--endpoint", endpoint, "--interval", INTERVAL]
        + ["--quiet-period", "3", "--json"],
        stdout=open(out, "ab"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.PIPE,
    )


def _refreshes(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


@pytest.mark.realdata
@pytest.mark.server
def test_mofka_run_being_appended_kill_9_and_restart_converge_to_the_export(
    oxigraph_server: str, tmp_path: Path
) -> None:
    if not MIXED.is_dir():
        pytest.skip(f"real run not found: {MIXED}")
    run = tmp_path / "mixed-mofka"
    rep = Replay(MIXED, run, steps=8)
    rep.step()
    endpoint = oxigraph_server + "/query"
    log = tmp_path / "refreshes.jsonl"
    writer = threading.Thread(target=rep.run, args=(0.5,), daemon=True)

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 60
        while len(_refreshes(log)) < n and time.monotonic() < deadline:
            time.sleep(0.05)

    with Poller(endpoint) as poller:
        first = _follow_proc(run, endpoint, log)
        wait_for(1)
        writer.start()
        wait_for(2)
        # kill -9 in the middle of its work (reading, converting or updating)
        time.sleep(0.2)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = _follow_proc(run, endpoint, log)
        writer.join(60)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 0, err.decode()
        time.sleep(0.3)
    refreshes = _refreshes(log)
    progress = [r for r in refreshes if r["state"] == "in progress"]
    final = refreshes[-1]
    assert final["state"] == "complete" and final["reason"] == "quiet"
    assert len(progress) >= 3
    # the tasks known only grow (graphs are submitted as the run goes), so does the graph
    tasks = [r["tasks"] for r in progress]
    assert tasks == sorted(tasks) and tasks[-1] == final["tasks"] == 124, tasks
    assert progress[-1]["triples"] > progress[0]["triples"]
    # the store's graph is the offline export, byte for byte (as N-Quads in the store's forms)
    r = requests.get(
        oxigraph_server + "/store",
        params={"graph": final["graph"]},
        headers={"Accept": "application/n-triples"},
        timeout=30,
    )
    nq = b"".join(
        line[:-2] + f" <{final['graph']}> .\n".encode()
        for line in r.content.splitlines(keepends=True)
    )
    assert _canonical(nq) == _export(run, tmp_path)
    # the provisional graph is gone, and only the final graph is left
    assert provisional_id(run) in progress[0]["graph"]
    assert (
        requests.get(
            oxigraph_server + "/store", params={"graph": progress[0]["graph"]}, timeout=10
        ).status_code
        == 404
    )
    # the reader never saw half a graph: a provisional graph always holds exactly one update
    # time (its deletes and inserts land together), the final graph is whole from the start
    assert len(poller.seen) > 20
    polled = [(g, n, u) for snap in poller.seen for g, (n, u) in snap.items()]
    assert {g for g, _, _ in polled} <= {progress[0]["graph"], final["graph"]}
    assert all(u == 1 for g, _, u in polled if g == progress[0]["graph"])
    assert {n for g, n, _ in polled if g == final["graph"]} <= {final["triples"]}
    assert any(g == progress[0]["graph"] for g, _, _ in polled)
    # and the counts it saw were committed by a refresh (both processes logged theirs)
    committed = {r["triples"] for r in refreshes}
    seen_counts = {n for _, n, _ in polled}
    assert len(seen_counts - committed) <= 1, sorted(seen_counts - committed)


# --------------------------------------------------------------------------------------------
# Served stores: load and drop refuse, naming the server
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedded store holding the real run mixed-mofka (loaded once, copied per test)."""
    if not MIXED.is_dir():
        pytest.skip(f"real run not found: {MIXED}")
    import metaprov

    store = tmp_path_factory.mktemp("live-loaded") / "store"
    metaprov.load(MIXED, store=store, darshan=False)
    return store


def _tiny_store(tmp: Path, loaded: Path) -> tuple[Path, Path]:
    store = tmp / "store"
    shutil.copytree(loaded, store)
    return store, MIXED


@pytest.mark.realdata
@pytest.mark.server
def test_load_and_drop_refuse_on_a_served_store_naming_the_server(
    tmp_path: Path, loaded_store: Path
) -> None:
    if _oxigraph() is None:
        pytest.skip("the oxigraph server is not installed")
    store, run = _tiny_store(tmp_path, loaded_store)
    port = _free_port()
    server = subprocess.Popen(
        [*METAPROV, "serve", "--store", str(store), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "Serving" in server.stdout.readline()
        before = set(os.listdir(store))
        for args in (
            ("load", str(run), "--store", str(store), "--force"),
            ("drop", "mixed-mofka", "--store", str(store)),
        ):
            r = _run(*args)
            assert r.returncode != 0, r.stdout
            assert "Traceback" not in r.stderr
            assert "in use by metaprov serve" in r.stderr
            assert f"127.0.0.1:{port}" in r.stderr and f"pid {server.pid}" in r.stderr
        # a second read-only server may share the store; the data is unchanged
        assert set(os.listdir(store)) - before <= {p for p in os.listdir(store) if "owner" in p}
        rows = _query(
            f"http://127.0.0.1:{port}/query",
            "SELECT ?n { ?r <https://w3id.org/metaprov/ns#runName> ?n }",
        )
        assert [b["n"]["value"] for b in rows] == ["mixed-mofka"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(20)
    # stopped: the owner file is gone and drop works again
    assert not [p for p in os.listdir(store) if p.startswith("metaprov-owner")]
    r = _run("drop", "mixed-mofka", "--store", str(store))
    assert r.returncode == 0, r.stderr


@pytest.mark.realdata
def test_a_dead_servers_owner_file_does_not_block_loads(tmp_path: Path, loaded_store: Path) -> None:
    store, run = _tiny_store(tmp_path, loaded_store)
    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()
    (store / f"metaprov-owner-{dead.pid}.json").write_text(
        json.dumps({"pid": dead.pid, "role": "serve", "url": "http://127.0.0.1:1"})
    )
    r = _run("-q", "drop", "mixed-mofka", "--store", str(store))
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------------------------
# serve --follow on a real LocalCluster recorded by the capture
# --------------------------------------------------------------------------------------------


def _query(url: str, q: str) -> list[dict]:
    r = requests.post(
        url, data={"query": q}, headers={"Accept": "application/sparql-results+json"}, timeout=30
    )
    assert r.status_code == 200, r.text
    return r.json()["results"]["bindings"]


_TASKS = """PREFIX mp: <https://w3id.org/metaprov/ns#>
SELECT ?run ?state (COUNT(?t) AS ?tasks) WHERE {
  GRAPH ?g { ?run a mp:Run . OPTIONAL { ?run mp:liveState ?state } OPTIONAL { ?t a mp:Task } }
} GROUP BY ?run ?state"""


@pytest.mark.cluster
def test_serve_follow_answers_while_a_captured_cluster_run_goes(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    import metaprov.capture as capture

    run = tmp_path / "now"
    store = tmp_path / "live-store"
    port = _free_port()
    served = subprocess.Popen(
        [*METAPROV, "serve", "--store", str(store), "--port", str(port), "--follow", str(run)]
        + ["--interval", INTERVAL],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/query"
    seen: list[int] = []
    try:
        assert "Serving" in served.stdout.readline()
        # the server's policies: its own Host only, no SERVICE, no writes
        assert (
            requests.get(
                url, params={"query": "ASK {}"}, headers={"Host": "evil.example:80"}, timeout=5
            ).status_code
            == 403
        )
        assert (
            requests.post(
                url,
                data={"query": "SELECT * { SERVICE <http://127.0.0.1:9/> { ?s ?p ?o } }"},
                timeout=5,
            ).status_code
            == 403
        )
        assert (
            requests.put(f"http://127.0.0.1:{port}/store", data=b"", timeout=5).status_code == 405
        )
        # load into the followed store refuses, naming the follow
        # (any existing run: the bundled example when ../shared is absent)
        r = _run("load", str(MIXED if MIXED.is_dir() else EXAMPLE), "--store", str(store))
        assert r.returncode != 0 and "in use by metaprov follow" in r.stderr
        # and Oxigraph's read-only server may not open it behind the follow's back either
        r = _run("serve", "--store", str(store), "--port", "0")
        assert r.returncode != 0 and "in use by metaprov follow" in r.stderr, r.stderr

        with (
            LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                host="127.0.0.1",
            ) as cluster,
            Client(cluster) as client,
        ):
            with capture.record(client, run, flush_interval=0.3):
                for wave in range(4):
                    futs = client.map(
                        lambda x, w=wave: (time.sleep(0.002), x * w)[1], range(120), pure=False
                    )
                    client.gather(futs)
                    # the served graph catches up with the run while it goes (the next wave
                    # waits for it: each snapshot below holds this wave's tasks)
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline:
                        rows = _query(url, _TASKS)
                        live = [r for r in rows if r.get("state", {}).get("value") == "in progress"]
                        if live and int(live[0]["tasks"]["value"]) >= 120 * (wave + 1):
                            seen.append(int(live[0]["tasks"]["value"]))
                            break
                        time.sleep(0.1)
                    # a run in progress claims no task "never ran": its tasks that have not
                    # run are waiting or running, and their mp:state says which
                    never = _query(
                        url,
                        "PREFIX mp: <https://w3id.org/metaprov/ns#> "
                        "SELECT (COUNT(?t) AS ?n) { ?r mp:liveState ?s . ?t mp:neverRan true }",
                    )
                    assert never[0]["n"]["value"] == "0"
        deadline = time.monotonic() + 60
        final: list[dict] = []
        while time.monotonic() < deadline:
            rows = _query(url, _TASKS)
            final = [r for r in rows if "state" not in r]
            if final and not [r for r in rows if "state" in r]:
                break
            time.sleep(0.2)
        # the capture is complete: the graph is the export, byte for byte
        nt = requests.post(
            url,
            data={"query": "CONSTRUCT { ?s ?p ?o } WHERE { GRAPH ?g { ?s ?p ?o } }"},
            headers={"Accept": "application/n-triples"},
            timeout=60,
        ).content
        graph = final[0]["run"]["value"] + "/graph"
        nq = b"".join(ln[:-2] + f" <{graph}> .\n".encode() for ln in nt.splitlines(keepends=True))
        assert _canonical(nq) == _export(run, tmp_path)
        assert int(final[0]["tasks"]["value"]) == 480
    finally:
        alive = served.poll() is None
        served.send_signal(signal.SIGTERM)
        _, err = served.communicate(timeout=60)
        assert alive, f"serve --follow died: {err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    assert seen == [120, 240, 360, 480], seen
    assert not [p for p in os.listdir(store) if p.startswith("metaprov-owner")]


@pytest.mark.realdata
def test_report_of_a_run_in_progress_reads_whole_rows_and_says_waiting(tmp_path: Path) -> None:
    pytest.importorskip("bokeh")
    src = DARSHAN_DASK_RUNS / "mixed-metaprov"
    if not src.is_dir():
        pytest.skip(f"real run not found: {src}")
    run = tmp_path / "mixed-metaprov"
    rep = Replay(src, run, steps=4)
    rep.step()
    rep.step()
    (run / "metaprov-run.json").write_text(json.dumps({"status": "recording"}))
    out = tmp_path / "report.html"
    r = _run("-q", "report", str(run), "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "in progress" in text and "not run yet (waiting or running)" in text
    # the rows being written were left out, not misread (no "implausible time" from a cut row)
    assert "implausible" not in r.stderr + text


@pytest.mark.parametrize("max_update", [1 << 30, 1], ids=["one-transaction", "bulk-under-lock"])
def test_embedded_refreshes_apply_the_diff_whatever_their_size(max_update: int) -> None:
    from metaprov.live.follow import EmbeddedTarget
    from metaprov.store import EmbeddedStore

    st = EmbeddedStore(None)
    target = EmbeddedTarget(st)
    target.max_update = max_update
    g, old = "http://x/prov/graph", "http://x/old/graph"
    line = lambda i: f'<http://x/s{i}> <http://x/p> "{i}" .\n'.encode()  # noqa: E731
    target.apply(old, [], [line(0)])
    target.apply(g, [], [line(i) for i in range(5)])
    target.apply(g, [line(1), line(3)], [line(7), line(8)])
    assert target.current(g) == {line(i) for i in (0, 2, 4, 7, 8)}
    target.apply("http://x/final/graph", [], [line(9)], drop=(g, old))
    assert st.graphs() == ["http://x/final/graph"]
    assert target.current("http://x/final/graph") == {line(9)}


def test_a_run_whose_client_and_worker_files_hold_only_their_header_reads(tmp_path: Path) -> None:
    # the first snapshot of a run: transitions written, no client, worker or graph row yet
    import metaprov
    from metaprov.synthetic import generate_run

    run = generate_run(tmp_path / "run", 40, seed=3)
    for name in ("client.csv", "worker.csv", "graph.csv"):
        head = (run / name).read_text().splitlines(keepends=True)[0]
        (run / name).write_text(head)
    records = metaprov.read_run(run, darshan=False)
    assert len(records.tasks) == 40
    assert len(records.clients) == 0


@pytest.mark.server
def test_endpoint_refreshes_larger_than_a_request_are_split_and_still_exact(
    oxigraph_server: str,
) -> None:
    from metaprov.live.follow import EndpointTarget
    from metaprov.store import EndpointStore

    target = EndpointTarget(EndpointStore(oxigraph_server + "/query"), max_request=600)
    g, final = "http://x/split/prov", "http://x/split/final"
    line = lambda i: f'<http://x/s{i}> <http://x/p> "{i}" .\n'.encode()  # noqa: E731
    target.apply(g, [], [line(i) for i in range(40)])
    target.apply(g, [line(i) for i in range(0, 40, 2)], [line(i) for i in range(40, 50)])
    assert target.current(g) == {line(i) for i in (*range(1, 40, 2), *range(40, 50))}
    target.apply(final, [], [line(i) for i in range(60)], drop=(g,))
    assert target.current(final) == {line(i) for i in range(60)}
    assert target.current(g) == set()


def test_serve_follow_stops_on_ctrl_c(tmp_path: Path) -> None:
    """SIGINT, as a terminal's Ctrl-C sends it (a new session: SIGINT not ignored), stops
    `serve --follow` once the run is complete and it only serves (it once waited forever: the
    signal reached another thread while the main one waited without a timeout)."""
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    served = subprocess.Popen(
        [*METAPROV, "serve", "--store", str(tmp_path / "st"), "--port", "0", "--follow", str(run)]
        + ["--interval", INTERVAL],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        for line in served.stdout:
            if line.startswith("run complete"):
                break
        served.send_signal(signal.SIGINT)
        assert served.wait(timeout=30) == 0
    finally:
        if served.poll() is None:
            served.kill()
            served.wait()
