"""Issue 41: metaprov's crates answer the Workflow Run Crate community's own competency
questions, run as published (tests/data/wrroc-cq, SOURCE.md there) on crates of real runs.

Each script's ``QUERY*`` strings are taken with Python's parser (``ast``: nothing executed) and
asked of the crate's metadata read as RDF with the RO-Crate contexts from ../shared."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import PMDA_RUNS, SHARED
from crategraph import crate_graph

pytest.importorskip("rocrate", reason="the crate extra (rocrate) is not installed")

from metaprov.crate import crate  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CQ = REPO / "tests" / "data" / "wrroc-cq"
DCT = "PREFIX dct: <http://purl.org/dc/terms/>\n"


def questions(n: int) -> list[str]:
    """The SPARQL texts of competency question ``n`` (``QUERY``, ``QUERY1``, ...), in order;
    ``dct:`` declared where a query uses it undeclared (cq4.py upstream)."""
    tree = ast.parse((CQ / f"cq{n}.py").read_text(encoding="utf-8"))
    out = []
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.startswith("QUERY")
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            text = node.value.value
            if "dct:" in text and "PREFIX dct:" not in text and "PREFIX\tdct:" not in text:
                text = DCT + text
            out.append(text)
    assert out, f"cq{n}.py has no QUERY"
    return out


def answers(graph, n: int) -> list[list]:  # type: ignore[no-untyped-def]
    return [list(graph.query(q)) for q in questions(n)]


@pytest.fixture(scope="module")
def example_crate(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The bundled example run (captured inside Docker, whose image the capture cannot see),
    with the image named by the user."""
    out = tmp_path_factory.mktemp("cq") / "example"
    crate(
        [REPO / "examples" / "run"],
        out,
        formats=("turtle",),
        report=False,
        license="CC-BY-4.0",
        container_image="docker.io/library/python:3.11-slim",
    )
    return crate_graph(out)


@pytest.fixture(scope="module")
def pmda_crate(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The last PMDA run (Darshan logs), not used to build the inputs' rules."""
    if not PMDA_RUNS:
        pytest.skip(f"real run data not found under {SHARED}/data")
    out = tmp_path_factory.mktemp("cq") / "pmda"
    crate([PMDA_RUNS[-1]], out, formats=("turtle",), report=False, license="CC-BY-4.0")
    return crate_graph(out)


@pytest.mark.realdata
def test_cq8_the_workflow_has_inputs_and_outputs(pmda_crate, example_crate) -> None:  # type: ignore[no-untyped-def]
    inputs, outputs = answers(pmda_crate, 8)
    named = {str(r.obj) for r in inputs if r.obj is not None}
    # the run's Darshan-traced input files (read by its tasks, written by none) and its Dask
    # configuration; no library or interpreter file
    assert any(n.endswith(".gro") for n in named), named
    assert any("dask-config.json" in n for n in named) or len(named) >= 1
    assert not any(n.endswith((".py", ".so", ".pyc")) for n in named), named
    assert [r.res for r in outputs if r.res is not None]  # at least the results in memory
    inputs, _ = answers(example_crate, 8)
    assert any("dask-config.json" in str(r.obj) for r in inputs)


@pytest.mark.realdata
@pytest.mark.parametrize("n", [2, 5, 6, 7, 9])
def test_the_questions_that_answered_still_do(pmda_crate, n: int) -> None:  # type: ignore[no-untyped-def]
    assert all(rows for rows in answers(pmda_crate, n)), f"CQ{n} has no answer"


def test_cq1_and_cq10_on_the_example(example_crate) -> None:  # type: ignore[no-untyped-def]
    (images,) = answers(example_crate, 1)
    assert [str(r.container_name) for r in images] == ["library/python"]
    assert {str(r.container_tag) for r in images} == {"3.11-slim"}
    # the configuration is an input of the run, not an object of the engine's OrganizeAction:
    # the profile's check 8.3 (roc-validator 0.13.0) wants ControlActions only there
    assert answers(example_crate, 3) == [[]]
    (wrapped,) = answers(example_crate, 10)
    mains = {str(r.main_req) for r in wrapped}
    assert any(m.endswith("/script/capture_example.py") for m in mains), mains
    assert any("pypi.org/project/numpy/" in m for m in mains), mains
    assert all(str(r.version) for r in wrapped)


def test_cq11_is_not_applicable_to_a_dask_run(example_crate) -> None:  # type: ignore[no-untyped-def]
    """A Dask task graph has no workflow-level formal parameters (docs/crate.md says why)."""
    assert answers(example_crate, 11) == [[]]
