"""IRIs and vocabulary: the percent-encoder matches urllib byte for byte; terms match the ontology."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import rdflib

from metaprov.mapping import terms
from metaprov.mapping.terms import MP, RunIris, quote, quote_array, run_id_of

ONTOLOGY = Path(terms.__file__).resolve().parents[1] / "ontology" / "metaprov.ttl"

KEYS = [
    "list-8606d556-0a1b",
    "('array-8838909ee9756e34565341881e2e6f0c', 127)",
    "('save_file-331f', 137, 0, 0, 0)",
    "a/b/c",
    "with space",
    "quote\"and'single",
    "back\\slash",
    "ünïcødé 日本語 🚀",
    "percent%41",
    "new\nline\rcr\ttab",
    "~unreserved_.-",
    "",
    "#?&=+;,:@!$*[]",
]


def test_quote_array_matches_urllib_byte_for_byte() -> None:
    got = quote_array(KEYS).to_pylist()
    assert got == [urllib.parse.quote(k, safe="") for k in KEYS]


def test_quote_array_random_unicode_matches_urllib() -> None:
    rng = np.random.default_rng(7)
    # Code points across ASCII, Latin-1, BMP and astral planes (no surrogates: not valid text).
    cps = np.concatenate(
        [
            rng.integers(0, 0x80, 400),
            rng.integers(0x80, 0xD7FF, 300),
            rng.integers(0x10000, 0x10FFFF, 100),
        ]
    )
    rng.shuffle(cps)
    values = ["".join(chr(c) for c in cps[i : i + 9]) for i in range(0, len(cps), 9)]
    assert quote_array(values).to_pylist() == [urllib.parse.quote(v, safe="") for v in values]


def test_quote_array_keeps_nulls_and_slices() -> None:
    arr = pa.array(["x", "y y", None, "z/"], pa.large_string()).slice(1)
    assert quote_array(arr).to_pylist() == ["y%20y", None, "z%2F"]
    series = pd.Series(["a b", None], dtype="str")
    assert quote_array(series).to_pylist() == ["a%20b", None]


def test_quote_array_repairs_lone_surrogates_to_valid_utf8() -> None:
    out = quote_array(["ok", "bad\udcff"]).to_pylist()
    assert out[0] == "ok"
    assert out[1] == urllib.parse.quote("bad\ufffd", safe="")


def test_scalar_quote() -> None:
    assert quote("tcp://10.0.0.1:8786") == "tcp%3A%2F%2F10.0.0.1%3A8786"


def test_run_iris_shapes() -> None:
    iris = RunIris("https://example.org/prov/", "r 1")
    assert iris.run == "https://example.org/prov/run/r%201"
    assert iris.graph == iris.run + "/graph"
    task = iris.tasks(["x/y"])
    assert task.to_pylist() == [iris.run + "/task/x%2Fy"]
    assert iris.executions(task, [2]).to_pylist() == [iris.run + "/task/x%2Fy/execution/2"]
    w = iris.workers(["tcp://1.2.3.4:5"])
    tid = pa.array([2**64 - 1], pa.uint64())
    assert iris.threads(w, tid).to_pylist() == [
        iris.run + "/worker/tcp%3A%2F%2F1.2.3.4%3A5/thread/18446744073709551615"
    ]
    assert iris.job("123.pbs") == "https://example.org/prov/job/123.pbs"
    assert iris.job(None) == iris.run + "/job"


def test_iris_are_valid_rdf_iris() -> None:
    iris = RunIris(terms.DEFAULT_BASE, "abc")
    for iri in iris.tasks(KEYS).to_pylist():
        # rdflib refuses IRIs with spaces, quotes, braces...; pyoxigraph is stricter still.
        import pyoxigraph

        pyoxigraph.NamedNode(iri)
        assert rdflib.URIRef(iri)


def test_namespace_rejects_unknown_terms() -> None:
    assert MP.TaskExecution == terms.VOCAB + "TaskExecution"
    with pytest.raises(AttributeError):
        _ = MP.TaskExecutoin


def test_terms_match_ontology() -> None:
    g = rdflib.Graph().parse(ONTOLOGY)
    declared = {
        str(s)[len(terms.VOCAB) :]
        for s in g.subjects()
        if isinstance(s, rdflib.URIRef) and str(s).startswith(terms.VOCAB)
    }
    assert declared == set(terms.MP_TERMS)


def test_every_class_and_property_has_label_definition_level_step() -> None:
    g = rdflib.Graph().parse(ONTOLOGY)
    owl = rdflib.OWL
    skos = rdflib.SKOS
    mp = rdflib.Namespace(terms.VOCAB)
    kinds = (owl.Class, owl.ObjectProperty, owl.DatatypeProperty)
    checked = 0
    for kind in kinds:
        for s in g.subjects(rdflib.RDF.type, kind):
            if s in (mp.Level, mp.Category, mp.Step):
                continue
            assert g.value(s, rdflib.RDFS.label) is not None, s
            assert g.value(s, skos.definition) is not None, s
            assert g.value(s, mp.level) is not None, f"{s} has no mp:level"
            assert g.value(s, mp.step) is not None, f"{s} has no mp:step"
            checked += 1
    assert checked > 50


def test_ontology_is_versioned() -> None:
    g = rdflib.Graph().parse(ONTOLOGY)
    onto = rdflib.URIRef(terms.ONTOLOGY_IRI)
    assert (onto, rdflib.OWL.versionIRI, rdflib.URIRef(terms.ONTOLOGY_VERSION_IRI)) in g
    assert str(g.value(onto, rdflib.OWL.versionInfo)) == terms.ONTOLOGY_VERSION


def test_run_id_is_content_derived() -> None:
    from metaprov.records import RunRecords, conform

    def make(path: str) -> RunRecords:
        rec = RunRecords(path=path)
        rec.scheduler = {"address": "tcp://10.0.0.1:8786"}
        rec.clients = conform(
            "clients",
            pd.DataFrame(
                {"client": ["Client-1"], "added": pd.to_datetime([1.7e9], unit="s", utc=True)}
            ),
        )
        return rec

    a, b = make("/x/run"), make("/elsewhere/run-copy")
    assert run_id_of(a) == run_id_of(b)
    assert len(run_id_of(a)) == 16
    b.scheduler = {"address": "tcp://10.0.0.2:8786"}
    assert run_id_of(a) != run_id_of(b)
    a.run_id = "given"
    assert run_id_of(a) == "given"


def test_quote_array_in_slices_matches_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    values = [f"('x-{i}', {i})" if i % 7 else None for i in range(2000)] + ["ü/" * 50]
    whole = quote_array(values).to_pylist()
    monkeypatch.setattr(terms, "QUOTE_CHUNK_BYTES", 37)  # many slices, cut mid-way everywhere
    assert quote_array(values).to_pylist() == whole
    assert whole[1] == urllib.parse.quote("('x-1', 1)", safe="")
    assert whole[0] is None
