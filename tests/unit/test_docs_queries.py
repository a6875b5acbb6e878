"""docs/queries.md documents exactly the packaged questions (headers, parameters, SPARQL text)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from metaprov.queries import questions, split_steps

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_queries_doc", DOCS / "gen_queries_doc.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_queries_doc_is_in_sync() -> None:
    doc = (DOCS / "queries.md").read_text(encoding="utf-8")
    assert doc == _generator().render(), (
        "docs/queries.md is out of date; run: python docs/gen_queries_doc.py"
    )


def test_every_question_and_step_is_documented() -> None:
    doc = _generator().render()
    for q in questions():
        assert f"\n## `{q.name}`\n" in doc, q.name
        for p in q.params:
            assert f"| `{p.name}` | `{p.type}` |" in doc, (q.name, p.name)
        steps = split_steps(q.text) if q.text else []
        if len(steps) > 1:
            assert f"Step {len(steps)} of {len(steps)}:" in doc, q.name
