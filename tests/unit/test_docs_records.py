"""docs/records.md documents exactly the schemas the code uses."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_records_doc_is_in_sync():
    spec = importlib.util.spec_from_file_location("gen_records_doc", DOCS / "gen_records_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (DOCS / "records.md").read_text(encoding="utf-8") == mod.render(), (
        "run: python docs/gen_records_doc.py"
    )
