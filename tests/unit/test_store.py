"""Embedded store: load/replace/drop named graphs, typed results, guards, endpoint URL rules."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from metaprov.errors import InputError, QueryError, StoreError, UsageError
from metaprov.queries import query
from metaprov.store import (
    EmbeddedStore,
    EndpointStore,
    derive_gsp,
    load,
    open_store,
    results_to_frame,
    split_lines,
)

G1 = "http://example.org/run/1/graph"
G2 = "http://example.org/run/2/graph"
XSD = "http://www.w3.org/2001/XMLSchema#"


def nt(n: int, tag: str = "a") -> list[bytes]:
    """n triples as N-Triples, in chunks of 10 lines."""
    lines = [
        f'<http://example.org/{tag}/{i}> <http://example.org/p> "{i}"^^<{XSD}integer> .\n'
        for i in range(n)
    ]
    return ["".join(lines[i : i + 10]).encode() for i in range(0, n, 10)]


def test_load_replace_drop_in_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with open_store(path) as st:
        r1 = st.load_chunks(G1, nt(25))
        r2 = st.load_chunks(G2, nt(5, "b"))
        assert (r1.triples, r1.replaced, r2.triples) == (25, False, 5)
        assert st.graphs() == [G1, G2]
        assert st.count() == 30 and st.count(G1) == 25
        # Loading the same graph again replaces it: never duplicates, never mixes.
        again = st.load_chunks(G1, nt(7, "c"))
        assert again.replaced and st.count(G1) == 7 and st.count() == 12
        assert st.drop(G2) is True and st.drop(G2) is False
        assert st.graphs() == [G1]
    # Data persists; a read-only view sees it and refuses writes.
    with open_store(path, read_only=True) as ro:
        assert ro.count() == 7
        with pytest.raises(StoreError, match="read-only"):
            ro.load_chunks(G2, nt(1))


def test_failed_load_leaves_no_partial_graph() -> None:
    st = EmbeddedStore(None)
    st.load_chunks(G1, nt(3))

    def broken():
        yield from nt(20)
        yield b"<http://example.org/x> <http://example.org/p> not-a-term .\n"

    with pytest.raises(StoreError, match="partial graph was removed"):
        st.load_chunks(G2, broken())
    assert st.graphs() == [G1] and st.count() == 3


def test_failing_producer_leaves_no_partial_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The mapping feeding the loader fails half way (after more than a pipe buffer of data):
    # its own error comes out, and the half-loaded graph is removed.
    class MappingFailed(RuntimeError):
        pass

    def failing():
        yield from nt(5000)
        raise MappingFailed("column 'x' broke")

    import metaprov.store.embedded as store_module

    monkeypatch.setattr(store_module, "LOAD_PART_BYTES", 20_000)  # parts already loaded

    with open_store(tmp_path / "s") as st:
        st.load_chunks(G1, nt(3))
        with pytest.raises(MappingFailed, match="column 'x' broke"):
            st.load_chunks(G2, failing())
        assert st.graphs() == [G1] and st.count() == 3


def test_large_stream_loads_completely_and_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import metaprov.store.embedded as store_module

    # Several MB in odd-sized chunks that cut lines: every triple arrives, counted once; the
    # staging file in the store's directory is gone after a load and after a failed one.
    data = b"".join(nt(30_000))
    chunks = [data[i : i + 99_991] for i in range(0, len(data), 99_991)]
    with open_store(tmp_path / "s") as st:
        report = st.load_chunks(G1, chunks)
        assert report.triples == 30_000 and st.count(G1) == 30_000
        # Staged in many small parts (each loaded while the next is written): the same.
        monkeypatch.setattr(store_module, "LOAD_PART_BYTES", 250_000)
        report = st.load_chunks(G1, chunks)
        assert report.triples == 30_000 and st.count(G1) == 30_000 and st.count() == 30_000
        with pytest.raises(StoreError):
            st.load_chunks(G2, [b"<urn:a> <urn:b> broken .\n"])
    assert not list((tmp_path / "s").glob(".metaprov-load-*"))


def test_store_directory_guards(tmp_path: Path) -> None:
    other = tmp_path / "documents"
    other.mkdir()
    (other / "thesis.txt").write_text("precious")
    with pytest.raises(StoreError, match="not a metaprov store"):
        open_store(other)
    assert sorted(p.name for p in other.iterdir()) == ["thesis.txt"]
    with pytest.raises(StoreError, match="no store at"):
        open_store(tmp_path / "missing", read_only=True)
    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(StoreError, match="is a file"):
        open_store(afile)
    with pytest.raises(UsageError, match="either"):
        open_store(tmp_path / "a", "http://127.0.0.1:1/query")


def test_second_writer_is_told_the_store_is_busy(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as st:
        st.load_chunks(G1, nt(1))
        with pytest.raises(StoreError, match="in use"):
            open_store(tmp_path / "s")


def test_select_results_are_typed() -> None:
    st = EmbeddedStore(None)
    st.load_chunks(G1, nt(3))
    q = f"""SELECT ?s ?v (?v * 1.5 AS ?x) (?v > 0 AS ?b) ("2024-04-19T19:01:00.5Z"^^<{XSD}dateTime> AS ?t) ?none
            WHERE {{ GRAPH ?g {{ ?s <http://example.org/p> ?v }} }} ORDER BY ?v"""
    df = st.query(q)
    assert isinstance(df, pd.DataFrame)
    assert str(df["v"].dtype) == "Int64" and list(df["v"]) == [0, 1, 2]
    assert df["x"].dtype == "float64" and df["x"].iloc[2] == 3.0
    assert str(df["b"].dtype) == "boolean" and list(df["b"]) == [False, True, True]
    assert str(df["t"].dtype) == "datetime64[us, UTC]"
    assert df["t"].iloc[0] == pd.Timestamp("2024-04-19T19:01:00.5Z")
    assert df["s"].iloc[0] == "http://example.org/a/0"
    assert df["none"].isna().all()
    assert st.query("ASK { GRAPH ?g { ?s ?p 2 } }") is True
    triples = st.query("CONSTRUCT { ?s <urn:q> ?v } WHERE { GRAPH ?g { ?s ?p ?v } }")
    assert list(triples.columns) == ["subject", "predicate", "object"] and len(triples) == 3


def test_results_to_frame_mixed_numbers_and_text() -> None:
    data = {
        "head": {"vars": ["n", "m"]},
        "results": {
            "bindings": [
                {
                    "n": {"type": "literal", "value": "0", "datatype": XSD + "integer"},
                    "m": {"type": "uri", "value": "urn:a"},
                },
                {
                    "n": {"type": "literal", "value": "2.5", "datatype": XSD + "double"},
                    "m": {"type": "literal", "value": "x"},
                },
            ]
        },
    }
    df = results_to_frame(data)
    assert df["n"].dtype == "float64" and list(df["n"]) == [0.0, 2.5]
    assert list(df["m"]) == ["urn:a", "x"]


def test_update_is_not_a_query() -> None:
    with pytest.raises(QueryError, match="update"):
        EmbeddedStore(None).query("DROP ALL")


def test_split_lines_keeps_lines_whole() -> None:
    chunks = [b"a\nbb\n" + b"a" * 5 + b"\n" + b"b" * 3 + b"\n", b"c" * 12 + b"\n", b"d\n", b"e\n"]
    pieces = list(split_lines(chunks, 8))
    assert b"".join(pieces) == b"".join(chunks)
    assert all(p.endswith(b"\n") for p in pieces)
    # Pieces stay under the bound unless one line alone is longer.
    assert all(len(p) <= 8 or p.count(b"\n") == 1 for p in pieces)
    assert b"c" * 12 + b"\n" in pieces and len(pieces) >= 4


@pytest.mark.parametrize(
    ("query_url", "gsp"),
    [
        ("http://127.0.0.1:7878/query", "http://127.0.0.1:7878/store"),
        ("http://h:3030/ds/query", "http://h:3030/ds/data"),
        ("http://h:3030/ds/sparql", "http://h:3030/ds/data"),
        ("http://h:7200/repositories/prov", "http://h:7200/repositories/prov/rdf-graphs/service"),
        ("http://h:8890/sparql", "http://h:8890/sparql-graph-crud-auth"),
    ],
)
def test_derive_gsp(query_url: str, gsp: str) -> None:
    assert derive_gsp(query_url) == gsp


def test_endpoint_url_rules() -> None:
    with pytest.raises(UsageError, match="--gsp"):
        derive_gsp("http://h/whatever")
    # A query URL of unknown layout is fine for questions (they never use the Graph Store);
    # a write asks for the GSP URL before sending anything.
    st = EndpointStore("http://127.0.0.1:1/whatever")
    with pytest.raises(UsageError, match="--gsp"):
        st.load_chunks("http://example.org/g", [b"<urn:a> <urn:b> <urn:c> .\n"])
    given = EndpointStore("http://127.0.0.1:1/whatever", gsp_url="http://127.0.0.1:1/gsp")
    assert given.endpoint.gsp == "http://127.0.0.1:1/gsp"
    with pytest.raises(UsageError, match="credentials in the endpoint URL"):
        EndpointStore("http://user:secret@127.0.0.1:7878/query")
    with pytest.raises(UsageError, match="not an http"):
        EndpointStore("ftp://127.0.0.1/query")


def test_load_and_query_files(tmp_path: Path) -> None:
    """Export files load into their graphs (quads keep theirs; triples go to the run's graph)."""
    mp = "https://w3id.org/metaprov/ns#"
    run = "http://example.org/run/9"
    body = (
        f"<{run}> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{mp}Run> .\n"
        f'<{run}> <{mp}runId> "9" .\n'
    )
    nt_file = tmp_path / "r9.nt"
    nt_file.write_text(body)
    nq_file = tmp_path / "two.nq"
    nq_file.write_text(
        '<urn:a> <urn:p> "1" <http://example.org/g/1> .\n<urn:b> <urn:p> "2" <http://example.org/g/2> .\n'
    )
    store_dir = tmp_path / "s"
    reports = load([nt_file, nq_file], store=store_dir)
    assert [r.graph for r in reports] == [
        f"{run}/graph",
        "http://example.org/g/1",
        "http://example.org/g/2",
    ]
    again = load([nq_file], store=store_dir)
    assert all(r.replaced for r in again)
    df = query("runs", store=store_dir)
    assert list(df["run_id"]) == ["9"]
    df = query("SELECT ?o WHERE { GRAPH ?g { ?s <urn:p> ?o } } ORDER BY ?o", file=nq_file)
    assert list(df["o"]) == ["1", "2"]
    with pytest.raises(InputError, match="no such run directory or file"):
        load([tmp_path / "nope"], store=store_dir)
    bad = tmp_path / "bad.nt"
    bad.write_text("<urn:a> <urn:p> .\n")
    with pytest.raises(InputError, match="not valid RDF"):
        load([bad], store=store_dir)


def test_drop_removes_a_large_graph_in_bounded_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a graph among others is removed predicate by predicate, in slices of at most
    # REMOVE_BATCH quads (one transaction for millions of quads slows down and holds them
    # all in memory); the other graphs keep every triple
    import pyoxigraph as ox

    import metaprov.store.embedded as emb

    st = EmbeddedStore(tmp_path / "s")
    fmt = ox.RdfFormat.N_TRIPLES
    big = "".join(f"<http://x/s{i}> <http://x/p{i % 3}> <http://x/o{i}> .\n" for i in range(1000))
    other = "".join(f'<http://x/t{i}> <http://x/p0> "{i}" .\n' for i in range(50))
    st.oxigraph.load(big.encode(), format=fmt, to_graph=ox.NamedNode("http://x/big"))
    st.oxigraph.load(other.encode(), format=fmt, to_graph=ox.NamedNode("http://x/other"))
    before = bytes(st.oxigraph.dump(format=fmt, from_graph=ox.NamedNode("http://x/other")))
    updates: list[str] = []
    monkeypatch.setattr(emb, "REMOVE_BATCH", 100)
    monkeypatch.setattr(st, "_store", _Spy(st.oxigraph, updates))
    assert st.drop("http://x/big") is True
    monkeypatch.undo()
    assert not st.oxigraph.contains_named_graph(ox.NamedNode("http://x/big"))
    assert bytes(st.oxigraph.dump(format=fmt, from_graph=ox.NamedNode("http://x/other"))) == before
    # 3 predicates of ~333 quads each, at most 100 a transaction: at least 4 slices each
    assert len(updates) >= 12 and all("LIMIT 100" in u for u in updates), updates[:3]
    st.close()


class _Spy:
    """A pyoxigraph store that records the SPARQL updates it is sent."""

    def __init__(self, store: object, updates: list[str]) -> None:
        self._s, self._u = store, updates

    def update(self, text: str) -> None:
        self._u.append(text)
        self._s.update(text)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._s, name)


def test_a_reader_is_told_of_a_graph_left_in_part(tmp_path: Path) -> None:
    # a follow stopped while bulk-loading (or removing) a graph leaves it marked "loading":
    # readers that do not hide it (query, report, compare) say so, naming it and the way out
    import logging
    import subprocess
    import sys

    import pyoxigraph as ox

    path = tmp_path / "s"
    st = EmbeddedStore(path)
    g = "https://example.org/run/live-x/graph"
    st.oxigraph.load(
        b"<http://x/s> <http://x/p> <http://x/o> .\n",
        format=ox.RdfFormat.N_TRIPLES,
        to_graph=ox.NamedNode(g),
    )
    graphs = st.catalog.graphs()
    graphs[g] = {"loading": True, "triples": -1}
    st.catalog.save(graphs)
    st.close()

    seen: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    log = logging.getLogger("metaprov")
    handler = _Keep(logging.WARNING)
    log.addHandler(handler)
    try:
        with EmbeddedStore(path, read_only=True) as reader:
            assert reader.partial_graphs() == [g]
    finally:
        log.removeHandler(handler)
    assert any(f"<{g}> only in part" in m and "metaprov drop" in m for m in seen), seen

    done = subprocess.run(
        [sys.executable, "-m", "metaprov", "query", "runs", "--store", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 7), done.stderr  # 7: no run in the store (the graph has none)
    assert f"<{g}> only in part" in done.stderr and "Traceback" not in done.stderr

    # a writer (a follow, a load) is not warned: it finishes or replaces the graph
    seen.clear()
    log.addHandler(handler)
    try:
        EmbeddedStore(path).close()
    finally:
        log.removeHandler(handler)
    assert not seen
