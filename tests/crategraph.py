"""A crate's ro-crate-metadata.json as an rdflib graph, with the RO-Crate and workflow-run
contexts read from ../shared/data/rocrate-contexts (no network): for SPARQL over a crate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHARED

CONTEXTS = SHARED / "data" / "rocrate-contexts"
PREFIXES = (
    "PREFIX s: <http://schema.org/>\n"
    "PREFIX wfrun: <https://w3id.org/ro/terms/workflow-run#>\n"
    "PREFIX bs: <https://bioschemas.org/>\n"
)


def crate_graph(crate: Path):  # type: ignore[no-untyped-def]
    rdflib = pytest.importorskip("rdflib")
    if not CONTEXTS.is_dir():
        pytest.skip("RO-Crate contexts not found (../shared/data/rocrate-contexts)")
    meta = json.loads((crate / "ro-crate-metadata.json").read_text(encoding="utf-8"))
    local = {
        "https://w3id.org/ro/crate/1.1/context": CONTEXTS / "ro-crate-1.1-context.jsonld",
        "https://w3id.org/ro/terms/workflow-run/context": CONTEXTS / "workflow-run-context.json",
    }
    merged: dict = {}
    ctx = meta["@context"]
    for c in ctx if isinstance(ctx, list) else [ctx]:
        merged.update(json.loads(local[c].read_text())["@context"] if isinstance(c, str) else c)
    meta["@context"] = merged
    return rdflib.Graph().parse(data=json.dumps(meta), format="json-ld", base=crate.as_uri() + "/")
