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
from metaprov.write.provdm import iri_local, relation_map, xml_local

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
    from lxml import etree

    root = etree.fromstring(xml)
    for el in root.iter():
        for attr in ("{http://www.w3.org/ns/prov#}id", "{http://www.w3.org/ns/prov#}ref"):
            v = el.get(attr)
            if v is not None:
                p, _, local = v.partition(":")
                el.set(attr, f"{p}:{iri_local(local)}")
        if el.get("{http://www.w3.org/2001/XMLSchema-instance}type") == "xsd:QName":
            p, _, local = (el.text or "").partition(":")
            el.text = f"{p}:{iri_local(local)}"
    return bytes(etree.tostring(root))


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


def test_the_three_formats_and_the_rdf_hold_the_same_records(out: dict[str, bytes]) -> None:
    import rdflib
    from prov.model import ProvDocument
    from prov.serializers.provrdf import ProvRDFSerializer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jdoc = ProvDocument.deserialize(content=out["provjson"].decode(), format="json")
        ndoc = ProvDocument.deserialize(content=out["provn"].decode(), format="provn")
        xdoc = ProvDocument.deserialize(content=_unescape_ids(out["provxml"]), format="xml")
        g = rdflib.Graph().parse(data=out["ntriples"], format="nt")
        rdoc = ProvDocument()
        ProvRDFSerializer(rdoc).decode_document(g, rdoc, relation_mapper=relation_map())
    assert _norm(jdoc) == _norm(ndoc) == _norm(xdoc)
    # the RDF read back: the same records, less the nodes PROV-DM has no record kind for
    # (transitions, Darshan counters), which the PROV-DM formats keep as entities generated at
    # their instant
    extra = _norm(jdoc) - _norm(rdoc)
    assert extra and all("/transition/" in str(r[1]) for r in extra)
    assert {r[0] for r in extra} == {"ProvEntity", "ProvGeneration"}
    assert _norm(rdoc) <= _norm(jdoc)
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
