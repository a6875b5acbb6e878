"""The end of a followed run in an embedded store, and readers pointed at a run being written.

Real parts only: runs made by the synthetic generator or replayed from real runs in time order
(tests/live_replay.py), an on-disk Oxigraph store, the in-process server of ``serve --follow``
queried while the final graph replaces the provisional one, the CLI.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import DARSHAN_DASK_RUNS

from metaprov.live.partial import live_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from live_replay import Replay  # noqa: E402

COUNT = "SELECT ?g (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } GROUP BY ?g"


def _run(*args: str) -> SimpleNamespace:
    from click.testing import CliRunner

    from metaprov.cli import cli

    res = CliRunner().invoke(cli, list(args))
    return SimpleNamespace(returncode=res.exit_code, stdout=res.stdout, stderr=res.stderr)


def _canonical(nquads: bytes) -> list[bytes]:
    import pyoxigraph as ox

    st = ox.Store()
    st.load(nquads, format=ox.RdfFormat.N_QUADS)
    return sorted(bytes(st.dump(format=ox.RdfFormat.N_QUADS)).splitlines())


# --------------------------------------------------------------------------------------------
# The final swap into an on-disk embedded store, served meanwhile by serve --follow
# --------------------------------------------------------------------------------------------


def test_final_swap_is_a_bulk_load_readers_never_see_both_graphs_and_load_says_unchanged(
    tmp_path: Path,
) -> None:
    import pyoxigraph as ox

    from metaprov.export import export
    from metaprov.live.follow import provisional_id
    from metaprov.live.server import serve_follow
    from metaprov.store import EmbeddedStore
    from metaprov.synthetic import generate_run

    run = generate_run(tmp_path / "run", 600, seed=5)
    (run / "metaprov-run.json").write_text(json.dumps({"status": "recording"}))
    exported = export(run, tmp_path / "export.nq", darshan=False)
    final = exported.graph_iri
    store = tmp_path / "store"
    # a follow killed while bulk-loading the final graph left part of it, marked "loading"
    st = EmbeddedStore(store)
    part = b"".join((tmp_path / "export.nq").read_bytes().splitlines(keepends=True)[:500])
    st.oxigraph.load(part, format=ox.RdfFormat.N_QUADS)
    st.catalog.save({final: {"loading": True, "triples": -1}})
    st.close()

    seen: list[tuple[tuple[str, int], ...]] = []
    stop, polling = threading.Event(), threading.Event()
    refreshes = []

    def poll(server) -> None:  # noqa: ANN001
        while not polling.is_set():
            status, _, body = server.answer(COUNT, "application/sparql-results+json")
            assert status == 200, body
            rows = json.loads(body)["results"]["bindings"]
            seen.append(tuple(sorted((b["g"]["value"], int(b["n"]["value"])) for b in rows)))
            polling.wait(0.005)

    threads: list[threading.Thread] = []

    def on_listen(server) -> None:  # noqa: ANN001
        threads.append(threading.Thread(target=poll, args=(server,), daemon=True))
        threads[0].start()

    def on_refresh(r) -> None:  # noqa: ANN001
        refreshes.append(r)
        if r.number == 2:  # two refreshes in progress, then the capture says complete
            (run / "metaprov-run.json").write_text(json.dumps({"status": "complete"}))

    def on_complete(result) -> None:  # noqa: ANN001
        # let the poller see the final state for a moment, then stop serving
        threading.Timer(0.5, stop.set).start()

    serve_follow(
        run,
        store,
        port=0,
        interval=0.3,
        darshan=False,
        on_listen=on_listen,
        on_refresh=on_refresh,
        on_complete=on_complete,
        stop=stop,
    )
    polling.set()
    threads[0].join(20)
    assert [r.state for r in refreshes] == ["in progress", "in progress", "complete"]
    prov = refreshes[0].graph
    assert provisional_id(run) in prov and refreshes[-1].graph == final
    n_prov, n_final = refreshes[0].triples, refreshes[-1].triples
    assert n_final == exported.triples
    # a reader saw the provisional graph whole, or the final graph whole: never both, never a
    # part (nor the partial graph left by the killed follow)
    states = Counter(seen)
    assert set(states) <= {(), ((prov, n_prov),), ((final, n_final),)}, states
    assert states[((prov, n_prov),)] and states[((final, n_final),)], states
    # the store holds the export's graph, byte for byte, and nothing else
    st = EmbeddedStore(store, read_only=True)
    assert st.graphs() == [final]
    nq = bytes(st.oxigraph.dump(format=ox.RdfFormat.N_QUADS, from_graph=ox.NamedNode(final)))
    nq = b"".join(ln[:-2] + f" <{final}> .\n".encode() for ln in nq.splitlines(keepends=True))
    assert _canonical(nq) == _canonical((tmp_path / "export.nq").read_bytes())
    # the run's derived facts are recorded as `metaprov load` records them
    entry = st.catalog.graphs()[final]
    assert entry["triples"] == n_final and "loading" not in entry
    assert entry["critical_path"]["tasks"] and entry["fingerprint"]
    st.close()
    # so loading the finished run reads nothing and writes nothing
    r = _run("load", str(run), "--store", str(store), "--no-darshan")
    assert r.returncode == 0, r.stderr
    assert "unchanged" in r.stdout + r.stderr, r.stdout + r.stderr


def test_follow_store_of_a_complete_run_records_what_metaprov_load_would(
    tmp_path: Path,
) -> None:
    """Plain ``follow --store`` (no server) of a finished capture: one refresh, the final one."""
    from metaprov.synthetic import generate_run

    run = generate_run(tmp_path / "run", 200, seed=6)
    (run / "metaprov-run.json").write_text(json.dumps({"status": "complete"}))
    r = _run("follow", str(run), "--store", str(tmp_path / "st"), "--json", "--no-darshan")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [x["state"] for x in lines] == ["complete"]
    assert lines[0]["triples"] == lines[0]["added"] > 0 and lines[0]["removed"] == 0
    r = _run("load", str(run), "--store", str(tmp_path / "st"), "--no-darshan")
    assert r.returncode == 0 and "unchanged" in r.stdout + r.stderr


# --------------------------------------------------------------------------------------------
# inspect, report, export pointed at a run directory being written
# --------------------------------------------------------------------------------------------


def _replayed(name: str, tmp: Path, *, recording: bool) -> Path:
    src = DARSHAN_DASK_RUNS / name
    if not src.is_dir():
        pytest.skip(f"real run not found: {src}")
    run = tmp / name
    rep = Replay(src, run, steps=4)
    rep.step()
    rep.step()  # every file now ends in the first half of a row
    if recording:
        (run / "metaprov-run.json").write_text(json.dumps({"status": "recording"}))
    return run


@pytest.mark.realdata
@pytest.mark.parametrize(
    ("name", "recording", "why"),
    [
        ("mixed-mofka", False, "ends in an incomplete row: being written, or cut"),
        ("mixed-metaprov", True, "metaprov-run.json says recording"),
    ],
    ids=["mofka-cut-mid-row", "capture-recording"],
)
def test_inspect_of_a_run_being_written_reads_whole_rows_and_says_in_progress(
    tmp_path: Path, name: str, recording: bool, why: str
) -> None:
    run = _replayed(name, tmp_path, recording=recording)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    r = _run("inspect", str(run), "--no-darshan")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "state      in progress (" in out and why in out, out
    assert "read up to the last whole row of each file" in out
    assert "not run yet (waiting or running)" in out and "never ran" not in out
    # the rows being written were left out, not read as malformed rows
    assert "malformed" not in out + r.stderr and "truncated" not in out + r.stderr
    r = _run("inspect", str(run), "--no-darshan", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["run"]["in_progress"] is True
    assert summary["run"]["rows_being_written"]
    assert summary["tasks"]["never_ran"] > 0  # tasks not run yet, shown as such above
    # nothing was written into the run directory
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    # the export of the run so far: whole rows, no "never ran" claim, and it says so
    r = _run("export", str(run), "--no-darshan", "-o", str(tmp_path / "now.nt"))
    assert r.returncode == 0, r.stderr
    assert "the run is in progress" in r.stderr and "export it again" in r.stderr
    assert b"neverRan" not in (tmp_path / "now.nt").read_bytes()


@pytest.mark.realdata
def test_a_complete_run_with_a_cut_row_is_damage_not_progress(tmp_path: Path) -> None:
    run = _replayed("mixed-metaprov", tmp_path, recording=False)
    (run / "metaprov-run.json").write_text(json.dumps({"status": "complete"}))
    assert live_state(run) == (False, "")
    r = _run("inspect", str(run), "--no-darshan")
    assert r.returncode == 0, r.stderr
    assert "in progress" not in r.stdout and "never ran" in r.stdout
    assert "malformed row" in r.stdout  # the cut row is reported, not hidden


def test_live_state_tells_a_run_being_written_from_a_finished_one(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "worker.csv").write_bytes(b",worker,action,time\n0,tcp://a:1,add,1.5\n")
    assert live_state(run) == (False, "")
    with (run / "worker.csv").open("ab") as fh:
        fh.write(b"1,tcp://b:1,ad")
    assert live_state(run)[0] and live_state(run)[1].startswith("worker.csv ends in an incomplete")
    (run / "metaprov-parts").mkdir()
    (run / "worker.csv").write_bytes(b",worker,action,time\n")
    assert live_state(run)[0] and "metaprov-parts" in live_state(run)[1]


@pytest.mark.parametrize("bulk_min", [1, 1 << 40], ids=["bulk-loaded", "one-transaction"])
def test_a_new_graph_is_shown_whole_and_nothing_stays_hidden(tmp_path: Path, bulk_min: int) -> None:
    from metaprov.live.follow import EmbeddedTarget, ReadWriteLock
    from metaprov.store import EmbeddedStore

    st = EmbeddedStore(tmp_path / "st")
    lock = ReadWriteLock()
    target = EmbeddedTarget(st, lock)
    target.bulk_min = bulk_min
    line = lambda i: f'<http://x/s{i}> <http://x/p> "{i}" .\n'.encode()  # noqa: E731
    g, final = "http://x/prov/graph", "http://x/final/graph"
    target.apply(g, [], [line(i) for i in range(50)])
    assert lock.hidden == frozenset() and target.current(g) == {line(i) for i in range(50)}
    target.apply(g, [line(0)], [line(50)])
    assert target.current(g) == {line(i) for i in range(1, 51)}
    target.apply(final, [], [line(i) for i in range(60)], drop=(g,))
    assert lock.hidden == frozenset() and st.graphs() == [final]
    # no staging file is left in the store's directory, no "loading" mark in its catalog
    assert not [p for p in (tmp_path / "st").iterdir() if p.name.startswith(".metaprov-load")]
    assert not any(e.get("loading") for e in st.catalog.graphs().values())
    st.close()


# --------------------------------------------------------------------------------------------
# Removing the provisional graph: several bounded transactions, hidden until it is gone
# --------------------------------------------------------------------------------------------


def _provisional(st, run: Path, lock=None, batch: int = 0):  # noqa: ANN001, ANN202
    """The provisional graph of ``run`` written into the open store ``st``: (target, graph,
    triples)."""
    from metaprov.live.follow import EmbeddedTarget, convert, provisional_id, state_lines
    from metaprov.mapping.terms import DEFAULT_BASE, RunIris

    pid = provisional_id(run)
    prov = RunIris(DEFAULT_BASE, pid).graph
    conv = convert(run, run, base=DEFAULT_BASE, detail="tasks", darshan=False, run_id=pid)
    target = EmbeddedTarget(st, lock)
    if batch:
        target.remove_batch = batch
    target.apply(prov, [], conv.lines + state_lines(conv.run_iri, updated=time.time(), lag=0))
    return target, prov, st.count(prov)


def test_the_provisional_graph_goes_in_bounded_transactions_unseen_other_runs_untouched(
    tmp_path: Path,
) -> None:
    import pyoxigraph as ox

    from metaprov.live.follow import ReadWriteLock, final_graph, loading_graphs
    from metaprov.live.server import LiveServer
    from metaprov.mapping.terms import DEFAULT_BASE
    from metaprov.store import EmbeddedStore
    from metaprov.synthetic import generate_run

    st = EmbeddedStore(tmp_path / "store")
    other = st.load_run(generate_run(tmp_path / "a", 300, seed=7), darshan=False)
    g_other, n_other = other.graph, other.triples
    other_nq = bytes(
        st.oxigraph.dump(format=ox.RdfFormat.N_QUADS, from_graph=ox.NamedNode(g_other))
    )
    run = generate_run(tmp_path / "b", 600, seed=8)
    lock = ReadWriteLock()
    # transactions of at most 300 quads: every predicate of the graph needs several
    target, prov, n_prov = _provisional(st, run, lock, batch=300)
    server = LiveServer(st, lock=lock)  # queried in-process, as its HTTP handler does
    served: list[tuple[tuple[str, int], ...]] = []
    raw: list[int] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            status, _, body = server.answer(COUNT, "application/sparql-results+json")
            assert status == 200, body
            rows = json.loads(body)["results"]["bindings"]
            served.append(tuple(sorted((b["g"]["value"], int(b["n"]["value"])) for b in rows)))
            # the store itself, not through the server: the removal's steps
            raw.append(st.count(prov))

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    fin = final_graph(run, run, base=DEFAULT_BASE, detail="tasks", darshan=False)
    n_final = target.replace(fin, (prov,), source=str(run))
    time.sleep(0.1)
    done.set()
    poller.join(20)
    # the server's readers saw the provisional graph whole or the final graph whole, beside the
    # other run's whole graph: never both, never a part
    states = Counter(served)
    whole_prov = tuple(sorted([(g_other, n_other), (prov, n_prov)]))
    whole_final = tuple(sorted([(g_other, n_other), (fin.graph_iri, n_final)]))
    assert set(states) <= {whole_prov, whole_final}, states
    assert states[whole_prov] and states[whole_final], states
    # while the store went through the removal's several transactions
    assert any(0 < n < n_prov for n in raw), sorted(set(raw))
    # the provisional graph is gone, name and all; nothing is left hidden or marked
    assert st.count(prov) == 0 and not st.oxigraph.contains_named_graph(ox.NamedNode(prov))
    assert sorted(st.graphs()) == sorted([g_other, fin.graph_iri])
    assert st.count(fin.graph_iri) == n_final and not lock.hidden
    assert prov not in st.catalog.graphs() and not loading_graphs(st)
    # the other run's graph keeps every triple, byte for byte
    assert (
        bytes(st.oxigraph.dump(format=ox.RdfFormat.N_QUADS, from_graph=ox.NamedNode(g_other)))
        == other_nq
    )
    st.close()


def test_a_follow_killed_while_removing_the_provisional_graph_restarts_and_converges(
    tmp_path: Path,
) -> None:
    import contextlib
    import os
    import signal
    import subprocess

    import pyoxigraph as ox

    from metaprov.export import export
    from metaprov.live.follow import EmbeddedTarget, ReadWriteLock, follow, loading_graphs
    from metaprov.store import EmbeddedStore
    from metaprov.store.catalog import Catalog
    from metaprov.synthetic import generate_run

    run = generate_run(tmp_path / "run", 1000, seed=9)
    exported = export(run, tmp_path / "export.nq", darshan=False)
    store = tmp_path / "store"
    st = EmbeddedStore(store)
    target, prov, n_prov = _provisional(st, run)
    st.close()
    del target  # it holds the Oxigraph store open
    (run / "metaprov-run.json").write_text(json.dumps({"status": "complete"}))
    # a follow (another process) that removes in transactions of 20 quads, killed -9 as soon
    # as it starts removing the provisional graph
    script = (
        "import sys\n"
        "from metaprov.live.follow import EmbeddedTarget, follow\n"
        "EmbeddedTarget.remove_batch = 20\n"
        "follow(sys.argv[1], sys.argv[2], darshan=False, interval=0.1)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(run), str(store)])
    marked = False
    deadline = time.monotonic() + 60
    while not marked and proc.poll() is None and time.monotonic() < deadline:
        marked = prov in loading_graphs(SimpleNamespace(catalog=Catalog(store)))
        time.sleep(0.002)
    time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert marked and proc.returncode == -signal.SIGKILL, (marked, proc.returncode)
    # what it left: the final graph whole, what is left of the provisional one marked
    # "loading" (serve --follow hides it from the start)
    st = EmbeddedStore(store)
    left = st.count(prov)
    assert 0 < left <= n_prov and prov in loading_graphs(st)
    assert prov in EmbeddedTarget(st, ReadWriteLock()).lock.hidden
    assert st.count(exported.graph_iri) == exported.triples
    st.close()
    # a follow started again finishes the removal and converges to the export
    result = follow(run, store, darshan=False, interval=0.1)
    assert result.refreshes[-1].state == "complete"
    st = EmbeddedStore(store, read_only=True)
    assert st.graphs() == [exported.graph_iri]
    assert not st.oxigraph.contains_named_graph(ox.NamedNode(prov)) and not loading_graphs(st)
    node = ox.NamedNode(exported.graph_iri)
    nq = bytes(st.oxigraph.dump(format=ox.RdfFormat.N_QUADS, from_graph=node))
    nq = b"".join(
        ln[:-2] + f" <{exported.graph_iri}> .\n".encode() for ln in nq.splitlines(keepends=True)
    )
    assert _canonical(nq) == _canonical((tmp_path / "export.nq").read_bytes())
    st.close()
