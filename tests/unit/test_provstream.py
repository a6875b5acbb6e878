"""The streaming PROV-N, PROV-JSON and PROV-XML writers (issue 39) write the document the
in-memory path (``metaprov.write.provdm``, through the ``prov`` package) builds: read back by
``prov``, the two files hold the same records, on the example run and on a run with every kind
of node (transitions, a key with control characters, a job, Darshan configuration text)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from provdm_check import assert_same_document
from test_provdm import _records

from metaprov.ingest import read_run
from metaprov.mapping import to_prov
from metaprov.write import provdm, provstream

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run"
WRITERS = {
    "provn": (provdm.write_provn, provstream.write_provn),
    "provjson": (provdm.write_provjson, provstream.write_provjson),
    "provxml": (provdm.write_provxml, provstream.write_provxml),
}


def _both(graph, fmt: str) -> tuple[bytes, bytes]:  # type: ignore[no-untyped-def]
    old, new = WRITERS[fmt]
    a, b = io.BytesIO(), io.BytesIO()
    old(graph, a, force=True)
    new(graph, b)
    return a.getvalue(), b.getvalue()


@pytest.fixture(scope="module")
def graphs() -> dict:
    return {
        "example": to_prov(read_run(EXAMPLE)),
        "tiny": to_prov(_records(), detail="transitions"),
    }


@pytest.mark.parametrize("fmt", list(WRITERS))
@pytest.mark.parametrize("run", ["example", "tiny"])
def test_streamed_document_equals_the_in_memory_one(graphs: dict, run: str, fmt: str) -> None:
    expected, got = _both(graphs[run], fmt)
    assert_same_document(expected, got, fmt)
    assert got != expected  # not the same bytes: records in block order, not sorted


def test_streamed_bytes_are_deterministic(graphs: dict) -> None:
    for fmt in WRITERS:
        a, b = io.BytesIO(), io.BytesIO()
        WRITERS[fmt][1](graphs["tiny"], a)
        WRITERS[fmt][1](graphs["tiny"], b)
        assert a.getvalue() == b.getvalue(), fmt


def test_each_element_is_declared_once_when_blocks_restate_it() -> None:
    """A Darshan-linked execution is typed by the tasks step and restated (mp:IOActivity) by the
    I/O step: one activity record with both types."""
    from conftest import DARSHAN_DASK_RUNS, SKIP_REASON
    from provdm_check import document_records

    run = DARSHAN_DASK_RUNS / "long-mofka"
    if not run.is_dir():
        pytest.skip(SKIP_REASON)
    out = io.BytesIO()
    provstream.write_provn(to_prov(read_run(run)), out)
    recs = document_records(out.getvalue(), "provn")
    ids = [r[1] for r in recs if r[0] in ("ProvActivity", "ProvEntity", "ProvAgent")]
    assert len(ids) == len(set(ids))
    io_acts = [r for r in recs if r[0] == "ProvActivity" and "IOActivity" in str(r[2])]
    assert io_acts and all("TaskExecution" in str(r[2]) for r in io_acts[:1])


#: Local parts that exercise every rule: escapes, first and last bytes, non-ASCII, control
#: characters, percent-encodings good and bad, the empty local part.
TRICKY = [
    *("", "a", "_a", "1abc", ".x", "-x", "x.", ".", "-.", "9", "(.", "a.b.", "x_y__z"),
    *("a/b%2Fc", "a%zz", "a%2", "a%", "%41", "a:b(c)", "a=b", "a'b", "a b", "a&b<c>"),
    *("é", "aé_b", "日本", "\U0001f600", "a\x01b", 'a"b\\c', "tab\there"),
]


@pytest.mark.parametrize("syntax", ["provn", "provjson", "provxml"])
def test_qualified_names_follow_the_per_value_rules(syntax: str) -> None:
    """The column-at-a-time names equal ``prov``'s PROV-N escaping, ``xml_local`` and the JSON
    escaping value by value, under the longest namespace, around nulls, in a column under one
    namespace and in one mixing them."""
    import warnings

    import pyarrow as pa
    from prov.identifier import _provn_escape_local

    from metaprov.write import qnames
    from metaprov.write.provdm import xml_local
    from metaprov.write.rows import json_escape

    def rule(local: str) -> str:
        if syntax == "provxml":
            return xml_local(local)
        if syntax == "provjson":
            return json_escape(pa.array([local], pa.large_string()))[0].as_py()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _provn_escape_local(local)[0]

    ns = {"run": "http://x.org/id/run/abc/", "id": "http://x.org/id/", "mp": "http://y.org/ns#"}
    style = {
        "provn": provstream._PROVN_STYLE,
        "provjson": provstream._JSON_STYLE,
        "provxml": provstream._XML_STYLE,
    }[syntax]
    quote = '"' if syntax == "provjson" else ""
    iris, expected = [], []
    for local in TRICKY:
        for prefix, iri in ns.items():
            iris += [iri + local, None]
            expected += [f"{quote}{prefix}:{rule(local)}{quote}", None]
    got = qnames.qualified_names(pa.array(iris, pa.large_string()), ns, style)
    assert got.to_pylist() == expected
    one = qnames.qualified_names(pa.array(iris[::6], pa.large_string()), ns, style)
    assert one.to_pylist() == expected[::6]
