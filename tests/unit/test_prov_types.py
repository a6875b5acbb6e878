"""PROV base types on instances (docs/model.md, decision 22): ``?x a prov:Activity`` finds every
activity without a reasoner, and the ``prov`` package reads the RDF export back."""

from __future__ import annotations

import collections
import io
import warnings

import pyoxigraph as ox
import pytest
from tinyrun import tiny_records

from metaprov.mapping import to_prov
from metaprov.mapping.terms import MP, PROV, base_types
from metaprov.write import write


@pytest.fixture(scope="module")
def nt() -> bytes:
    buf = io.BytesIO()
    write(to_prov(tiny_records(), detail="transitions"), buf, "ntriples")
    return buf.getvalue()


def test_base_types_come_from_the_ontology() -> None:
    assert base_types(MP.TaskExecution) == (PROV.Activity,)
    assert base_types(MP.Thread) == (PROV.Agent, PROV.SoftwareAgent)
    assert base_types(MP.TaskPrefix) == (PROV.Entity, PROV.Plan)
    assert base_types(MP.User) == (PROV.Agent, PROV.Person)
    assert base_types(MP.DarshanCounter) == ()


def test_every_instance_of_a_prov_class_says_so(nt: bytes) -> None:
    store = ox.Store()
    store.load(nt, format=ox.RdfFormat.N_TRIPLES)
    rdf_type = ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
    types: dict[str, set[str]] = collections.defaultdict(set)
    for q in store.quads_for_pattern(None, rdf_type, None):
        types[q.subject.value].add(q.object.value)
    checked = 0
    for subject, classes in types.items():
        for cls in classes:
            missing = set(base_types(cls)) - classes
            assert not missing, (subject, cls, missing)
            checked += bool(base_types(cls))
    assert checked > 20
    # no duplicate triple anywhere (an execution with I/O is not typed twice)
    lines = nt.splitlines()
    assert len(lines) == len(set(lines))


def test_prov_reads_the_rdf_back(nt: bytes) -> None:
    from prov.model import ProvActivity, ProvAgent, ProvDocument, ProvEntity

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = ProvDocument.deserialize(content=nt.decode(), format="rdf", rdf_format="nt")
    kinds = collections.Counter(type(r) for r in doc.get_records())
    store = ox.Store()
    store.load(nt, format=ox.RdfFormat.N_TRIPLES)

    def count(cls: str) -> int:
        q = f"SELECT (COUNT(DISTINCT ?x) AS ?n) WHERE {{ ?x a <{cls}> }}"
        return int(next(iter(store.query(q)))["n"].value)

    assert kinds[ProvActivity] == count(PROV.Activity) > 0
    assert kinds[ProvAgent] == count(PROV.Agent) > 0
    assert kinds[ProvEntity] == count(PROV.Entity) > 0
