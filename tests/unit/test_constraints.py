"""PROV-CONSTRAINTS checks across nodes (metaprov.validate.constraints): clean exports pass,
deliberately broken copies fail with the rule named, whichever engine runs the shapes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import real_run_params
from tinyrun import tiny_records

from metaprov.mapping import to_prov
from metaprov.validate import validate
from metaprov.validate.constraints import checks, classes_below
from metaprov.write import write

A_EXEC = "/task/a/execution/0>"
PROV = "http://www.w3.org/ns/prov#"


@pytest.fixture(scope="module")
def nt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("constraints") / "run.nt"
    write(to_prov(tiny_records(), detail="transitions"), out)
    return out


def _broken(nt: Path, lines: list[str] | None = None, sub: tuple[str, str] | None = None) -> Path:
    text = nt.read_text(encoding="utf-8")
    if sub:
        assert re.search(sub[0], text, flags=re.M), sub[0]
        text = re.sub(sub[0], sub[1], text, flags=re.M)
    text += "".join(line + "\n" for line in lines or [])
    out = nt.with_name("broken.nt")
    out.write_text(text, encoding="utf-8")
    return out


def _iri(nt: Path, pattern: str) -> str:
    m = re.search(rf"^(<[^>]*{pattern}[^>]*>)", nt.read_text(encoding="utf-8"), flags=re.M)
    assert m, pattern
    return m.group(1)


def test_every_rule_is_a_query_naming_its_rule() -> None:
    rules = {rule for rule, _, _ in checks()}
    assert {
        "prov:start-precedes-end",
        "prov:generation-precedes-usage",
        "prov:generation-generation-ordering",
        "prov:entity-activity-disjoint",
        "metaprov:utc-time",
    } <= rules
    assert "<https://w3id.org/metaprov/ns#TaskExecution>" in classes_below(PROV + "Activity")


@pytest.mark.parametrize("engine", ["shacl", "sparql", "columnar"])
def test_broken_copies_fail_with_their_rule(engine: str, nt: Path) -> None:
    assert validate(nt, engine=engine).conforms
    execution = _iri(nt, re.escape(A_EXEC[:-1]))
    chunk = _iri(nt, "/task/a/chunk")
    other = _iri(nt, re.escape("/task/%28%27b-1f%27%2C%200%29/execution/0"))
    cases = {
        # a's execution (the generator of a's chunk) moved after its consumers ended
        "prov:generation-precedes-usage": {
            "sub": (
                rf"^({re.escape(execution)} <{PROV}(started|ended)AtTime> \")2024-04-19",
                r"\g<1>2030-01-01",
            )
        },
        "metaprov:utc-time": {
            "sub": (rf"^({re.escape(execution)} <{PROV}startedAtTime> \"[^\"]*)Z\"", r'\1"')
        },
        "prov:entity-activity-disjoint": {
            "lines": [
                f"{execution} <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{PROV}Entity> ."
            ]
        },
        "prov:generation-generation-ordering": {
            "lines": [f"{chunk} <{PROV}wasGeneratedBy> {other} ."]
        },
        # a's chunk (generated first) said to derive from b's chunk (generated after it)
        "prov:derivation-generation-generation-ordering": {
            "lines": [
                f"{chunk} <{PROV}wasDerivedFrom> {_iri(nt, re.escape('/task/%28%27b-1f%27%2C%200%29/chunk'))} ."
            ]
        },
    }
    for rule, change in cases.items():
        report = validate(_broken(nt, **change), engine=engine)
        assert not report.conforms, rule
        assert rule in {v.shape for v in report.violations}, (rule, report.text())
        assert rule in report.text()


@pytest.mark.parametrize("engine", ["sparql", "columnar"])
def test_a_metaprov_entity_class_on_an_activity_is_caught(engine: str, nt: Path) -> None:
    execution = _iri(nt, re.escape(A_EXEC[:-1]))
    line = (
        f"{execution} <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> "
        "<https://w3id.org/metaprov/ns#DataChunk> ."
    )
    report = validate(_broken(nt, lines=[line]), engine=engine)
    assert "prov:entity-activity-disjoint" in {v.shape for v in report.violations}


@pytest.mark.realdata
@pytest.mark.parametrize("run", real_run_params())
def test_real_runs_satisfy_the_constraints(run: Path) -> None:
    report = validate(run, engine="sparql")
    assert report.conforms, report.text()
