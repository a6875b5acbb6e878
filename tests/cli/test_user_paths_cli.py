"""Issue 29: the dead ends a new user met, each closed (exit codes and messages asserted, the
outputs re-read): .gz exports round-trip, a campaign named like a file, typos in parameters,
-q on a campaign, a missing extra, a bad --license, serve on a port in use."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from metaprov.cli import cli
from metaprov.errors import QueryError
from metaprov.synthetic import generate_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "run"
RUN_ID = "3a11b3998b3a66d8"  # the bundled example's run id


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ex") / "store"
    res = invoke("load", str(EXAMPLE), "--store", str(path))
    assert res.exit_code == 0, res.output
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exports")
    for name in ("run.nt", "run.nt.gz", "run.nq.gz"):
        res = invoke("export", str(EXAMPLE), "-o", str(out / name), "-q")
        assert res.exit_code == 0, res.output
    return out


# --- 5: .gz round-trips; PROV-N says why it does not load ----------------------------------------
def test_gz_exports_validate_load_and_query(exports: Path, tmp_path: Path) -> None:
    plain = (exports / "run.nt").read_bytes()
    assert gzip.decompress((exports / "run.nt.gz").read_bytes()) == plain
    res = invoke("validate", str(exports / "run.nt.gz"), "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["conforms"] and report["triples"] == plain.count(b"\n")
    assert report["source"] == str(exports / "run.nt.gz")
    res = invoke("load", str(exports / "run.nq.gz"), "--store", str(tmp_path / "s"), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["triples"] == plain.count(b"\n")
    res = invoke("query", "runs", "--file", str(exports / "run.nt.gz"), "-f", "json")
    assert res.exit_code == 0, res.output
    assert [r["run_id"] for r in json.loads(res.stdout)] == [RUN_ID]


def test_broken_gz_and_provn_are_refused_saying_why(exports: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.nq.gz"
    cut.write_bytes((exports / "run.nq.gz").read_bytes()[:200])
    res = invoke("load", str(cut), "--store", str(tmp_path / "s"))
    assert res.exit_code == 3 and f"{cut}: cannot decompress" in res.stderr
    assert not (tmp_path / "s").exists()  # a failed first load leaves no store
    bad = tmp_path / "bad.nt.gz"
    bad.write_bytes(gzip.compress(b"not n-triples\n"))
    res = invoke("validate", str(bad))
    assert res.exit_code == 3 and f"{bad} (decompressed), line 1: not valid N-Triples" in res.stderr
    provn = tmp_path / "run.provn"  # refused by its name, before it is read
    provn.write_text("document\nendDocument\n")
    res = invoke("load", str(provn), "--store", str(tmp_path / "s"))
    assert res.exit_code == 2
    assert "cannot load provn files into a store" in res.stderr
    assert "not an RDF syntax" in res.stderr and ".nq" in res.stderr and ".gz" in res.stderr
    res = invoke("query", "runs", "--file", str(provn))
    assert res.exit_code == 2 and "not an RDF syntax" in res.stderr


# --- 6: a campaign named like a file --------------------------------------------------------------
def test_campaign_refuses_a_file_name(tmp_path: Path) -> None:
    generate_run(tmp_path / "runs" / "R1", 20, seed=1)
    generate_run(tmp_path / "runs" / "R2", 20, seed=2)
    out = tmp_path / "out" / "pmda.ttl"
    res = invoke("export", str(tmp_path / "runs"), "-o", str(out), "--backend", "in-process")
    assert res.exit_code == 2
    assert "named like a turtle file" in res.stderr and "into a directory" in res.stderr
    assert "metaprov export RUN -o RUN.ttl" in res.stderr
    assert not out.exists()


# --- 7: typos are not "(no results)" -------------------------------------------------------------
def test_unknown_run_key_and_prefix_name_the_nearest(store: Path) -> None:
    res = invoke("query", "slowest-tasks", "--param", "run_id=nope", "--store", str(store))
    assert res.exit_code == 7
    assert "no run 'nope' in the store" in res.stderr and RUN_ID in res.stderr
    res = invoke("query", "runs", "--param", f"run_id={RUN_ID[:-1]}", "--store", str(store))
    assert res.exit_code == 7 and f"nearest runs in the store: {RUN_ID}" in res.stderr
    res = invoke("query", "runs", "--param", "run_id=run", "--store", str(store))
    assert res.exit_code == 7 and f"give its id: --param run_id={RUN_ID}" in res.stderr
    res = invoke("query", "lineage", "--param", "key=('sum-abc', 0)", "--store", str(store))
    assert res.exit_code == 7 and "no task key \"('sum-abc', 0)\" in the store" in res.stderr
    assert "('sum-cd19d9f86b5a6929a6af9a5cc4cdff24', 0)" in res.stderr
    res = invoke("query", "lineage", "--param", "key=nonexistent", "--store", str(store))
    assert res.exit_code == 7 and "nearest in the store: " in res.stderr
    res = invoke(
        "query", "slowest-tasks", "--param", "prefix=summ", "--param", f"run_id={RUN_ID}",
        "--store", str(store),
    )  # fmt: skip
    assert res.exit_code == 7
    assert f"no task prefix 'summ' in the store of run {RUN_ID}" in res.stderr
    assert "'sum'" in res.stderr
    # the right values answer as before
    key = "('sum-cd19d9f86b5a6929a6af9a5cc4cdff24', 0)"
    res = invoke("query", "lineage", "--param", f"key={key}", "--store", str(store), "-f", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["item"] == key
    res = invoke("query", "slowest-tasks", "--param", "prefix=sum", "--store", str(store))
    assert res.exit_code == 0 and "sum-cd19" in res.stdout


def test_typos_raise_in_the_library_too(store: Path) -> None:
    from metaprov.queries import query

    with pytest.raises(QueryError, match="no run 'nope'"):
        query("problem-tasks", {"run_id": "nope"}, store=store)
    # an empty answer to a value the store holds stays an empty answer (the example has no
    # Darshan I/O), and a question with an answer answers
    assert not len(query("io-per-prefix", {"run_id": RUN_ID}, store=store))
    failures = query("failures", {"run_id": RUN_ID}, store=store)
    assert sorted(failures["exception_type"]) == ["RuntimeError", "ValueError"]


# --- 8: -q quiets a campaign; workers' warnings keep their level ---------------------------------
@pytest.mark.cluster
def test_quiet_campaign_on_a_local_cluster(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    generate_run(runs / "R1", 20, seed=1)
    generate_run(runs / "R2", 20, seed=2)
    client = runs / "R1" / "client.csv"
    lines = client.read_text().splitlines()
    client.write_text("\n".join([lines[0] + ",extra"] + [x + ",1" for x in lines[1:]]) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "metaprov", "export", str(runs), "--backend", "local"]
    cmd += ["--local-workers", "1"]
    quiet = subprocess.run([*cmd, "-o", str(tmp_path / "a"), "-q"], capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert quiet.returncode == 0, quiet.stderr
    assert "INFO" not in quiet.stderr and "WARNING" not in quiet.stderr, quiet.stderr
    assert "runs converted" not in quiet.stderr and quiet.stdout == ""
    loud = subprocess.run([*cmd, "-o", str(tmp_path / "b")], capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert loud.returncode == 0, loud.stderr
    assert "WARNING: client.csv line 1: unknown extra column ignored" in loud.stderr
    assert "INFO:" not in loud.stderr and "8787" not in loud.stderr
    assert "2 of 2 runs converted" in loud.stderr


# --- 10: one exit code for a missing extra; --license is an SPDX id; serve on a busy port ------
def test_a_missing_extra_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bokeh", None)
    res = invoke("report", str(EXAMPLE), "-o", str(tmp_path / "r.html"))
    assert res.exit_code == 2 and "pip install 'metaprov[report]'" in res.stderr
    monkeypatch.setitem(sys.modules, "rocrate", None)
    monkeypatch.setitem(sys.modules, "rocrate.rocrate", None)
    res = invoke("crate", str(EXAMPLE), "-o", str(tmp_path / "c"))
    assert res.exit_code == 2 and "pip install 'metaprov[crate]'" in res.stderr
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "c").exists()


def test_license_must_be_an_spdx_id(tmp_path: Path) -> None:
    from metaprov.crate.metadata import license_entity

    res = invoke("crate", str(EXAMPLE), "-o", str(tmp_path / "c"), "--license", "CC-BY-4")
    assert res.exit_code == 2
    assert "'CC-BY-4' is not an SPDX license identifier" in res.stderr
    assert "did you mean CC-BY-4.0" in res.stderr
    assert not (tmp_path / "c").exists()
    res = invoke("crate", str(EXAMPLE), "-o", str(tmp_path / "c"), "--license", "MIT OR 0BSD")
    assert res.exit_code == 2 and "neither an SPDX license identifier nor a URL" in res.stderr
    ent = license_entity("cc-by-4.0")
    assert ent["@id"] == "https://spdx.org/licenses/CC-BY-4.0" and ent["identifier"] == "CC-BY-4.0"
    assert license_entity("https://example.org/l")["@id"] == "https://example.org/l"


@pytest.mark.server
def test_serve_on_a_busy_port_fails_before_its_banner(store: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "metaprov", "serve", "--store", str(store), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    assert proc.returncode == 6
    assert proc.stdout == ""  # no "Serving ..." banner
    assert f"cannot serve on 127.0.0.1:{port}" in proc.stderr and "--port 0" in proc.stderr


# --- 11: load maps to one staging file, frees the run, then bulk-loads it -----------------------
def test_load_run_stages_then_loads_and_cleans_up(store: Path, exports: Path) -> None:
    from metaprov.store import EmbeddedStore

    assert not list(store.glob(".metaprov-load-*"))  # the staging file is gone
    triples = (exports / "run.nt").read_bytes().count(b"\n")
    with EmbeddedStore(store, read_only=True) as st:
        (graph,) = st.graphs()
        assert st.count(graph) == triples
        assert st.cached_critical_path(graph) is not None  # derived before the run was let go
    res = invoke("load", str(EXAMPLE), "--store", str(store), "--force", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["replaced"] is True
    with EmbeddedStore(store, read_only=True) as st:
        assert st.count() == triples


def _nt_lines(text: bytes) -> list[bytes]:
    return sorted(line for line in text.split(b"\n") if line)


def test_load_run_in_parts_is_the_export_and_the_same_critical_path(
    store: Path, exports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run staged in many small parts, each bulk-loaded by its own call: the graph is the
    # export's, triple for triple, and the critical path recorded is the one-part load's.
    import pyoxigraph as ox

    import metaprov.store.embedded as embedded
    from metaprov.store import EmbeddedStore

    loaded: list[int] = []
    original = embedded.EmbeddedStore._stage_parts

    def stage_parts(self, graph, staged, *rest):  # count the parts, then load as usual
        n = original(self, graph, staged, *rest)
        loaded.append(len(staged))
        return n

    monkeypatch.setattr(embedded, "LOAD_PART_BYTES", 20_000)
    monkeypatch.setattr(embedded.EmbeddedStore, "_stage_parts", stage_parts)
    with EmbeddedStore(tmp_path / "parts") as st:
        report = st.load_run(EXAMPLE)
        dumped = st.oxigraph.dump(format=ox.RdfFormat.N_QUADS)
        parts_path = st.cached_critical_path(report.graph)
    assert loaded and loaded[0] > 5  # really in parts
    assert not list((tmp_path / "parts").glob(".metaprov-load-*"))
    export = (exports / "run.nt").read_bytes()
    assert report.triples == export.count(b"\n")
    quads = _nt_lines(dumped)
    suffix = f" <{report.graph}> .".encode()
    assert all(q.endswith(suffix) for q in quads)
    as_triples = EmbeddedStore(None)
    as_triples.oxigraph.load(export, format=ox.RdfFormat.N_TRIPLES)
    expected = _nt_lines(
        as_triples.oxigraph.dump(format=ox.RdfFormat.N_TRIPLES, from_graph=ox.DefaultGraph())
    )
    assert [q[: -len(suffix)] + b" ." for q in quads] == expected
    with EmbeddedStore(store, read_only=True) as st:  # loaded in one part (the fixture)
        assert parts_path == st.cached_critical_path(report.graph) and parts_path["tasks"]


def test_load_run_failing_while_staging_keeps_the_earlier_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The mapping fails after some parts are written: its error comes out, the parts are
    # gone, and the graph loaded before is still there, complete (the old graph is dropped
    # only once the new run is staged).
    import metaprov.store.embedded as embedded
    from metaprov.mapping import ProvGraph
    from metaprov.store import EmbeddedStore

    class MappingFailed(RuntimeError):
        pass

    original = ProvGraph.blocks

    def failing(self, ahead=0):
        for i, block in enumerate(original(self, ahead)):
            if i == 6:
                raise MappingFailed("block 6 broke")
            yield block

    with EmbeddedStore(tmp_path / "s") as st:
        report = st.load_run(EXAMPLE)
        monkeypatch.setattr(embedded, "LOAD_PART_BYTES", 5_000)
        monkeypatch.setattr(ProvGraph, "blocks", failing)
        with pytest.raises(MappingFailed, match="block 6 broke"):
            st.load_run(EXAMPLE, force=True)
        assert not list((tmp_path / "s").glob(".metaprov-load-*"))
        assert st.graphs() == [report.graph] and st.count(report.graph) == report.triples


class _CountingStore:
    """The real pyoxigraph store, counting its compactions (``optimize``)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.optimized = 0

    def optimize(self) -> None:
        self.optimized += 1
        self.inner.optimize()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_a_run_loaded_in_parts_is_compacted_when_it_is_most_of_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each bulk-load call adds its own sorted files; a run spread over many is slower to query,
    # so a load in parts compacts the store when the run is the larger part of it (an empty
    # store), and not when a small run joins a larger store (compacting rewrites everything).
    from runfiles import tiny_files, write_run

    import metaprov.store.embedded as embedded
    from metaprov.store import EmbeddedStore

    monkeypatch.setattr(embedded, "LOAD_PART_BYTES", 20_000)

    def sst_files(where: Path) -> int:
        return len(list(where.glob("*.sst")))

    with EmbeddedStore(tmp_path / "compacted") as st:
        spy = _CountingStore(st._store)
        st._store = spy
        st.load_run(EXAMPLE)
        assert spy.optimized == 1
        compacted = sst_files(tmp_path / "compacted")
        tiny = write_run(tmp_path / "tiny", tiny_files())
        monkeypatch.setattr(embedded, "LOAD_PART_BYTES", 500)
        st.load_run(tiny)  # in parts too, but much smaller than the store
        assert spy.optimized == 1
        st._store = spy.inner
    monkeypatch.setattr(embedded, "LOAD_PART_BYTES", 20_000)
    monkeypatch.setattr(embedded.EmbeddedStore, "_compact", lambda self, *args: None)
    with EmbeddedStore(tmp_path / "not-compacted") as st:
        st.load_run(EXAMPLE)
    # the same run, uncompacted, is spread over more files
    assert compacted < sst_files(tmp_path / "not-compacted")
