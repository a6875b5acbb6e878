"""Chunk versions (docs/model.md, decision 21): a re-executed key's result has one version per
successful execution, and every consumer uses the version that existed when it ran."""

from __future__ import annotations

import io

import pandas as pd
import pyoxigraph as ox
from tinyrun import KEY_A, KEY_B, T0, TH2, W2, tiny_records, utc

from metaprov.mapping import to_prov
from metaprov.mapping.terms import DEFAULT_BASE, quote
from metaprov.records import conform
from metaprov.write import write

RUN = f"{DEFAULT_BASE}/run/tiny0001"
P = "PREFIX prov: <http://www.w3.org/ns/prov#>\n"


def _store(rec) -> ox.Store:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    write(to_prov(rec), buf, "ntriples")
    store = ox.Store()
    store.load(buf.getvalue(), format=ox.RdfFormat.N_TRIPLES)
    return store


def _objects(store: ox.Store, s: str, p: str) -> set[str]:
    return {q.object.value for q in store.quads_for_pattern(ox.NamedNode(s), ox.NamedNode(p), None)}


def _chunk(key: str, version: int | None = None) -> str:
    base = f"{RUN}/task/{quote(key)}/chunk"
    return base if version is None else f"{base}/{version}"


def _with_rerun():  # type: ignore[no-untyped-def]
    """The tiny run, where ``a`` is computed again on W2 after the transfer and read by ``late``."""
    rec = tiny_records()
    ex = rec.executions
    extra = pd.DataFrame(
        {
            "key": [KEY_A, "late"],
            "attempt": pd.array([1, 0], dtype="Int64"),
            "worker": [W2, W2],
            "thread": pd.array([TH2, TH2], dtype="UInt64"),
            "start": utc([T0 + 7, T0 + 8]),
            "end": utc([T0 + 7.5, T0 + 8.5]),
            "outcome": ["memory", "memory"],
            "time_source": ["worker", "worker"],
        }
    )
    rec.executions = conform("executions", pd.concat([ex, extra], ignore_index=True))
    tasks = pd.concat(
        [rec.tasks, pd.DataFrame({"key": ["late"], "prefix": ["late"], "state": ["memory"]})],
        ignore_index=True,
    )
    rec.tasks = conform("tasks", tasks)
    deps = pd.DataFrame(
        {"graph": pd.array([0], dtype="Int64"), "key": ["late"], "dependency": [KEY_A]}
    )
    rec.dependencies = conform("dependencies", pd.concat([rec.dependencies, deps]))
    return rec


def _ex(key: str, attempt: int = 0) -> str:
    return f"{RUN}/task/{quote(key)}/execution/{attempt}"


def test_a_key_computed_once_keeps_one_chunk() -> None:
    store = _store(tiny_records())
    assert _objects(store, _chunk(KEY_A), "http://www.w3.org/ns/prov#wasGeneratedBy") == {
        _ex(KEY_A)
    }
    assert not _objects(store, _chunk(KEY_A, 0), "http://www.w3.org/ns/prov#wasGeneratedBy")


def test_each_successful_execution_has_its_version_and_consumers_use_the_one_of_their_time() -> (
    None
):
    store = _store(_with_rerun())
    gen = "http://www.w3.org/ns/prov#wasGeneratedBy"
    spec = "http://www.w3.org/ns/prov#specializationOf"
    used = "http://www.w3.org/ns/prov#used"
    # the key's chunk has no generator of its own; each version has one
    assert not _objects(store, _chunk(KEY_A), gen)
    assert _objects(store, _chunk(KEY_A, 0), gen) == {_ex(KEY_A, 0)}
    assert _objects(store, _chunk(KEY_A, 1), gen) == {_ex(KEY_A, 1)}
    for v in (0, 1):
        assert _objects(store, _chunk(KEY_A, v), spec) == {_chunk(KEY_A)}
    # b ran before the re-execution, late after it
    assert _objects(store, _ex(KEY_B), used) == {_chunk(KEY_A, 0)}
    assert _objects(store, _ex("late"), used) == {_chunk(KEY_A, 1)}
    # the transfer at T0+3 copied the first version; its replica specializes that version
    assert _chunk(KEY_A, 0) in _objects(store, f"{RUN}/transfer/0", used)
    replica = f"{RUN}/transfer/0/replica/{quote(KEY_A)}"
    assert _objects(store, replica, spec) == {_chunk(KEY_A, 0)}
    # a result derives from the versions its execution used (decision 28)
    derived = "http://www.w3.org/ns/prov#wasDerivedFrom"
    assert _objects(store, _chunk("late"), derived) == {_chunk(KEY_A, 1)}
    assert _chunk(KEY_A, 0) in _objects(store, _chunk(KEY_B), derived)
    assert not _objects(store, _chunk(KEY_A, 1), derived)  # a has no dependencies
    # no generation after a use, no replica before what it copies
    late = P + (
        "SELECT * WHERE { ?u prov:used ?c . ?c prov:wasGeneratedBy ?g . "
        "?g prov:startedAtTime ?gs . ?u prov:endedAtTime ?ue FILTER(?gs > ?ue) }"
    )
    assert not list(store.query(late))


def test_a_consumer_no_execution_can_have_served_uses_the_chunk_of_unrecorded_origin() -> None:
    rec = tiny_records()
    # the transfer of a (T0+3 .. T0+3.25) now ends before a's only execution starts
    ex = rec.executions.copy()
    first = (ex["key"] == KEY_A).to_numpy()
    ex.loc[first, "start"] = utc([T0 + 4]).iloc[0]
    ex.loc[first, "end"] = utc([T0 + 4.5]).iloc[0]
    rec.executions = conform("executions", ex)
    store = _store(rec)
    used = "http://www.w3.org/ns/prov#used"
    assert _chunk(KEY_A) in _objects(store, f"{RUN}/transfer/0", used)
    assert not _objects(store, _chunk(KEY_A), "http://www.w3.org/ns/prov#wasGeneratedBy")
    assert _objects(store, _chunk(KEY_A, 0), "http://www.w3.org/ns/prov#wasGeneratedBy") == {
        _ex(KEY_A)
    }


def test_every_execution_is_part_of_its_run_and_results_derive_from_what_it_used() -> None:
    rec = tiny_records()
    store = _store(rec)
    part = "https://w3id.org/metaprov/ns#partOfRun"
    n_ex = len(rec.executions)
    q = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?e <{part}> <{RUN}> }}"
    assert int(next(iter(store.query(q)))["n"].value) == n_ex
    # each derivation repeats a usage of the chunk's generator, one per used dependency chunk
    q = P + (
        "SELECT ?c ?d WHERE { ?c prov:wasDerivedFrom ?d . "
        "MINUS { ?c prov:wasGeneratedBy ?e . ?e prov:used ?d } }"
    )
    assert not list(store.query(q))
    assert _objects(store, _chunk(KEY_B), "http://www.w3.org/ns/prov#wasDerivedFrom") == {
        _chunk(KEY_A)
    }
