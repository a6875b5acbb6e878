"""PROV-N, PROV-JSON and PROV-XML: valid against the W3C schemas shipped with ``prov``, the same
records in all three (and in the RDF export read back with ``prov``), deterministic, and keys with
characters XML 1.0 cannot carry round-trip through PROV-XML."""

from __future__ import annotations

import io
import json
import os
import warnings
from pathlib import Path

import pandas as pd
import pytest
from tinyrun import tiny_records

from metaprov.mapping import to_prov
from metaprov.records import conform
from metaprov.write import write
from metaprov.write.provdm import iri_local, xml_local

CONTROL_KEY = "ctl\x01\x1f-key\ttab"


def _schemas() -> Path:
    import prov

    path = Path(os.path.dirname(prov.__file__)) / "tests" / "schemas"
    if not (path / "prov.xsd").is_file():
        pytest.skip(f"the prov package installed has no W3C schemas at {path}")
    return path


def _records():  # type: ignore[no-untyped-def]
    """The tiny run plus a task whose key holds control characters."""
    rec = tiny_records()
    tasks = pd.concat(
        [rec.tasks, pd.DataFrame({"key": [CONTROL_KEY], "prefix": ["ctl"], "state": ["memory"]})],
        ignore_index=True,
    )
    rec.tasks = conform("tasks", tasks)
    return rec


@pytest.fixture(scope="module")
def out() -> dict[str, bytes]:
    data = {}
    for fmt in ("provn", "provjson", "provxml", "ntriples"):
        buf = io.BytesIO()
        write(to_prov(_records(), detail="transitions"), buf, fmt)
        data[fmt] = buf.getvalue()
    return data


def _norm(doc) -> set:  # type: ignore[no-untyped-def]
    """Records as comparable tuples (xsd:hexBinary values decoded, ids unescaped from XML)."""
    from prov.model import Literal

    def value(v):  # type: ignore[no-untyped-def]
        if isinstance(v, Literal) and str(v.datatype).endswith("hexBinary"):
            return bytes.fromhex(v.value).decode("utf-8")
        return str(getattr(v, "uri", v))

    return {
        (
            type(r).__name__,
            str(r.identifier.uri) if r.identifier is not None else None,
            tuple(sorted((str(getattr(a, "uri", a)), value(v)) for a, v in r.attributes)),
        )
        for r in doc.get_records()
    }


def _unescape_ids(xml: bytes) -> bytes:
    from metaprov.write.provdm import unescape_provxml

    return unescape_provxml(xml)


def test_xml_local_names_are_ncnames_and_reversible() -> None:
    import re

    ncname = re.compile(r"^[A-Za-z_][A-Za-z0-9._\-]*$")
    for local in ["task/%28%27a%27%2C%200%29/execution/0", "0", "_x", "a__b", "ü/日", "Run"]:
        assert ncname.match(xml_local(local)), local
        assert iri_local(xml_local(local)) == local
    assert xml_local("Run") == "Run"


def test_prov_xml_and_json_validate_against_the_w3c_schemas(out: dict[str, bytes]) -> None:
    from lxml import etree

    schemas = _schemas()
    xsd = etree.XMLSchema(etree.parse(str(schemas / "prov.xsd")))
    assert xsd.validate(etree.fromstring(out["provxml"])), xsd.error_log
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((schemas / "prov-json.schema.json").read_text())
    errors = list(jsonschema.Draft4Validator(schema).iter_errors(json.loads(out["provjson"])))
    assert not errors, errors[:3]
    # the derivations between results and what their executions used are PROV-DM records too
    assert b"wasDerivedFrom(" in out["provn"] and b"<prov:wasDerivedFrom>" in out["provxml"]


def test_the_three_formats_hold_the_same_records_and_the_rdfs_relations(
    out: dict[str, bytes],
) -> None:
    import rdflib
    from prov.model import ProvDocument

    from metaprov.write.provdm import document_from_rdf, relations

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jdoc = ProvDocument.deserialize(content=out["provjson"].decode(), format="json")
        ndoc = ProvDocument.deserialize(content=out["provn"].decode(), format="provn")
        xdoc = ProvDocument.deserialize(content=_unescape_ids(out["provxml"]), format="xml")
    assert _norm(jdoc) == _norm(ndoc) == _norm(xdoc)
    # the RDF export read back with document_from_rdf: the same relations
    g = rdflib.Graph().parse(data=out["ntriples"], format="nt")
    assert relations(document_from_rdf(g, {})) == relations(jdoc)
    # the run's plain associations (client, scheduler) are relations of their own, besides the
    # qualified association of each task graph (prov's RDF reader merged them into one)
    run = "https://w3id.org/metaprov/id/run/tiny0001"
    plain = {
        terms[1][1]
        for kind, ident, terms in relations(jdoc)
        if kind == "Association" and not ident and terms[0][1] == run
    }
    assert len(plain) >= 2 and any(p.endswith("/scheduler") for p in plain), plain
    # the control characters came back
    keys = {v for r in _norm(xdoc) for a, v in r[2] if a.endswith("#key")}
    assert CONTROL_KEY in keys


def test_each_element_is_declared_once_and_qualified_nodes_are_relations(
    out: dict[str, bytes],
) -> None:
    from prov.model import ProvDocument, ProvElement, ProvUsage

    doc = ProvDocument.deserialize(content=out["provjson"].decode(), format="json")
    ids = [r.identifier for r in doc.get_records() if isinstance(r, ProvElement)]
    assert len(ids) == len(set(ids))
    assoc = [r for r in doc.get_records() if "/association" in str(r.identifier)]
    assert assoc and all(type(r).__name__ == "ProvAssociation" for r in assoc)
    assert any(isinstance(r, ProvUsage) for r in doc.get_records())


def test_prov_dm_output_is_deterministic(out: dict[str, bytes]) -> None:
    for fmt in ("provn", "provjson", "provxml"):
        again = io.BytesIO()
        write(to_prov(_records(), detail="transitions"), again, fmt)
        assert again.getvalue() == out[fmt], fmt


def test_prov_dm_bytes_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    """Issue 25: the run's plain association used to be merged into whichever qualified
    association prov's reader met last in set order, so the bytes changed with PYTHONHASHSEED."""
    import subprocess
    import sys

    run = Path(__file__).resolve().parents[2] / "examples" / "run"
    script = (
        "import sys\n"
        "from metaprov import read_run, to_prov, write\n"
        "g = to_prov(read_run(sys.argv[1]))\n"
        "for f in sys.argv[2:]: write(g, f)\n"
    )
    outs = {}
    for seed in ("1", "3"):
        files = [str(tmp_path / f"s{seed}.{ext}") for ext in ("provn", "provjson", "provx")]
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", script, str(run), *files], env=env, check=True)
        outs[seed] = [Path(f).read_bytes() for f in files]
    for a, b in zip(outs["1"], outs["3"], strict=True):
        assert a == b


def test_validate_compares_a_prov_dm_file_with_its_rdf_twin(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from metaprov.cli import cli
    from metaprov.validate import validate

    graph = to_prov(_records(), detail="transitions")
    write(graph, tmp_path / "run.nt")
    write(graph, tmp_path / "run.provjson")
    write(graph, tmp_path / "run.provx")
    for name in ("run.provjson", "run.provx"):
        report = validate(tmp_path / name)  # the twin run.nt found beside it
        assert report.conforms, report.text()
        assert any("relations compared with the RDF twin" in n for n in report.notes)
    # a file whose task graph association names the scheduler instead of the client
    doc = json.loads((tmp_path / "run.provjson").read_text())
    assoc = doc["wasAssociatedWith"]
    key = next(k for k, v in assoc.items() if "taskgraph" in k)
    assoc[key]["prov:agent"] = "run:scheduler"
    (tmp_path / "bad.provjson").write_text(json.dumps(doc))
    report = validate(tmp_path / "bad.provjson", twin=tmp_path / "run.nt")
    assert not report.conforms
    assert {v.shape for v in report.violations} == {"provdm:sameRelationsAsRdf"}
    assert {v.message for v in report.violations} == {
        "stated by the RDF twin, missing from the file",
        "stated by the file, not by the RDF twin",
    }
    result = CliRunner().invoke(
        cli, ["validate", str(tmp_path / "bad.provjson"), "--twin", str(tmp_path / "run.nt")]
    )
    assert result.exit_code == 5, result.output
    assert "stated by the file, not by the RDF twin" in result.output
    # without a twin beside it, validate says relations were not compared
    report = validate(tmp_path / "bad.provjson")
    assert report.conforms and any("no RDF twin" in n for n in report.notes)
    result = CliRunner().invoke(
        cli, ["validate", str(tmp_path / "bad.provjson"), "--twin", str(tmp_path / "nope.nt")]
    )
    assert result.exit_code != 0 and "no such twin" in result.output
