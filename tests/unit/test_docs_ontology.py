"""Files derived from the ontology stay in sync: docs/ontology.md and ontology/context.jsonld."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

from tinyrun import tiny_records

from metaprov.mapping import to_prov
from metaprov.write import write
from metaprov.write.jsonld import build_context, context_path, context_text

ROOT = Path(__file__).resolve().parents[2]


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "gen_ontology_doc", ROOT / "docs" / "gen_ontology_doc.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ontology_reference_is_in_sync() -> None:
    doc = (ROOT / "docs" / "ontology.md").read_text(encoding="utf-8")
    assert doc == _generator().render(), "run: python docs/gen_ontology_doc.py"
    assert "`mp:TaskExecution`" in doc


def test_shipped_context_is_in_sync() -> None:
    assert context_path().read_text(encoding="utf-8") == context_text(build_context()), (
        "run: python docs/gen_ontology_doc.py"
    )


def test_every_exported_property_is_compact_in_jsonld() -> None:
    buf = io.BytesIO()
    write(to_prov(tiny_records(), detail="transitions"), buf, "json-ld")
    keys = {k for node in json.loads(buf.getvalue())["@graph"] for k in node}
    assert not [k for k in keys if "://" in k], (
        "a predicate is missing from the context or typed differently"
    )
