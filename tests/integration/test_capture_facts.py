"""What a task was, end to end on a real LocalCluster: capture -> export -> SPARQL.

The workload has a task that raises (and is retried), a ``functools.partial`` task, tasks with
an argument whose ``repr`` fails and with a large argument, a fused dask.array chain, and a graph
submitted from a notebook-like context (a cell run through IPython's ``run_cell``). Each fact is
asserted in the PROV export through SPARQL, and through the packaged questions.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import metaprov  # noqa: E402
from metaprov.capture import record  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

PREFIXES = """PREFIX mp: <https://w3id.org/metaprov/ns#>
PREFIX prov: <http://www.w3.org/ns/prov#>
"""


def fail(x: int) -> int:
    raise ValueError(f"bad input {x}")


def scale(x: int, factor: int) -> int:
    return x * factor


def first(x: object, _other: object) -> object:
    return x


class Opaque:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def _line() -> int:
    """Line number of the caller (the line of the submit call it sits on)."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


CELL = "cell_future = client.submit(scale, 4, 5, key='from-cell-1')\ncell_future.result()\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("facts")
    lines: dict[str, int] = {}
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
        record(client, base / "run", arguments=True, tracebacks=True, fused_ops=True),
    ):
        failing, lines["fail"] = client.submit(fail, 7, key="fail-1", retries=1), _line()
        with pytest.raises(ValueError, match="bad input 7"):
            failing.result()
        part = client.submit(functools.partial(scale, factor=3), 5, key="scaled-1")
        assert part.result() == 15
        assert client.submit(first, 1, Opaque(), key="opaque-1").result() == 1
        assert client.submit(first, 2, np.zeros(10_000), key="big-1").result() == 2
        chain = ((da.ones((40, 40), chunks=(20, 20)) + 1) * 2).sum(axis=0)
        result, lines["array"] = chain.compute(), _line()
        assert float(result[0]) == 160.0
        cell = None
        try:
            from IPython.core.interactiveshell import InteractiveShell
        except ImportError:
            pass
        else:
            shell = InteractiveShell.instance()
            try:
                shell.user_ns.update(client=client, scale=scale)
                outcome = shell.run_cell(CELL)
                assert outcome.success, outcome.error_in_exec
                cell = True
            finally:
                InteractiveShell.clear_instance()
    export = base / "run.nt"
    metaprov.write(metaprov.to_prov(metaprov.read_run(base / "run")), export)
    return {"dir": base / "run", "export": export, "lines": lines, "cell": cell}


def select(run, where: str) -> list[dict[str, str]]:
    df = metaprov.query(f"{PREFIXES}SELECT * WHERE {{ {where} }}", file=run["export"])
    return [{k: str(v) for k, v in row.items()} for row in df.to_dict("records")]


def test_every_attempt_of_a_failing_task_carries_its_exception(run):
    rows = select(
        run,
        "?e mp:task/mp:key 'fail-1' ; mp:attempt ?attempt ; mp:exceptionType ?type ;"
        " mp:exceptionMessage ?message ; mp:traceback ?tb",
    )
    assert sorted(r["attempt"] for r in rows) == ["0", "1"]  # the retry failed too
    assert {r["type"] for r in rows} == {"ValueError"}
    assert {r["message"] for r in rows} == {"bad input 7"}
    assert all("in fail" in r["tb"] for r in rows)
    # problem-tasks shows it; failures groups both attempts under the exception and function
    problems = metaprov.query("problem-tasks", {"problem": "erred"}, file=run["export"])
    mine = problems[problems["key"] == "fail-1"]
    assert list(mine["exception_type"]) == ["ValueError"]
    assert list(mine["exception_message"]) == ["bad input 7"]
    failures = metaprov.query("failures", file=run["export"])
    assert len(failures) == 1
    row = failures.iloc[0]
    assert (row["exception_type"], row["function"]) == ("ValueError", f"{__name__}.fail")
    assert (int(row["attempts"]), int(row["tasks"]), row["prefix"]) == (2, 1, "fail")


def test_functions_are_the_plans_implementation_partial_included(run):
    rows = select(
        run,
        "?plan a mp:TaskPrefix ; mp:name 'scaled' ; mp:implementation ?f ."
        "?f mp:functionModule ?module ; mp:qualifiedName ?name ; mp:callableKind ?kind",
    )
    assert [(r["module"], r["name"], r["kind"]) for r in rows] == [(__name__, "scale", "partial")]
    group = select(
        run, "?g a mp:TaskGroup ; mp:name 'fail' ; mp:implementation/mp:qualifiedName ?n"
    )
    assert [r["n"] for r in group] == ["fail"]


def test_result_types_are_on_the_data_chunks(run):
    rows = select(
        run, "?c a mp:DataChunk ; mp:task/mp:key ?key ; mp:valueType ?type ; mp:nbytes ?n"
    )
    types = {r["key"]: r["type"] for r in rows}
    assert types["scaled-1"] == "int"
    arrays = {t for k, t in types.items() if k.startswith("('sum")}
    assert arrays == {"numpy.ndarray"}
    assert "fail-1" not in types  # an erred task has no result


def test_fused_array_chain_and_its_inner_operations(run):
    rows = select(
        run,
        "?g a mp:TaskGroup ; mp:implementation ?f ; mp:operationCount ?n ."
        "?f mp:callableKind 'fused' ; mp:qualifiedName ?name",
    )
    assert rows and all(int(r["n"]) >= 3 for r in rows)
    ops = select(
        run,
        "?g mp:fusedOperation ?op . ?op mp:position ?pos ; mp:name ?name ."
        "OPTIONAL { ?op mp:operationInput/mp:position ?input }",
    )
    order = {int(r["pos"]): r["name"] for r in ops}
    names = [order[i] for i in sorted(order)]
    assert names.index("add") < names.index("mul")  # lineage order inside the fused task
    mul_inputs = {r["input"] for r in ops if r["name"] == "mul"}
    assert mul_inputs == {str(names.index("add"))}


def test_literal_arguments_are_used_entities_summarised_when_needed(run):
    rows = select(
        run,
        "?e mp:task ?t ; prov:used ?a . ?t mp:key ?key . ?a a mp:Argument ;"
        " mp:argumentPosition ?pos ; mp:valueType ?type ; mp:valueStatus ?status ."
        "OPTIONAL { ?a prov:value ?value } OPTIONAL { ?a mp:valueSize ?size }",
    )
    by = {(r["key"], r["pos"]): r for r in rows}
    assert by[("scaled-1", "0")]["value"] == "5"
    assert by[("scaled-1", "partial.factor")]["value"] == "3"
    opaque = by[("opaque-1", "1")]
    assert opaque["status"].startswith("repr failed: RuntimeError")
    assert "value" not in opaque or opaque["value"] in ("", "None", "nan")
    big = by[("big-1", "1")]
    assert (big["type"], big["status"], big["size"]) == ("numpy.ndarray", "too large", "80000")


def test_call_sites_are_on_the_graphs_generation(run):
    rows = select(
        run,
        "?g a mp:TaskGraph ; prov:qualifiedGeneration ?gen . ?gen a prov:Generation ;"
        " prov:atLocation ?site . ?site a mp:CallSite ; mp:sourceFile ?file ; mp:lineNumber ?line",
    )
    here = {int(r["line"]) for r in rows if r["file"] == __file__}
    assert {run["lines"]["fail"], run["lines"]["array"]} <= here
    config = metaprov.query("configuration", file=run["export"])
    submitted = set(config.loc[config["category"] == "submission", "value"])
    assert f"{__file__}:{run['lines']['fail']}" in submitted


def test_a_notebook_cell_is_the_call_site_of_its_graph(run):
    if run["cell"] is None:
        pytest.skip("IPython is not installed (pip install ipython): no notebook-like context")
    rows = select(
        run,
        "?site mp:sourceFile ?file ; mp:notebookCell ?cell ; mp:cellSource ?source ; mp:lineNumber ?line",
    )
    assert len(rows) == 1
    row = rows[0]
    assert row["file"].startswith("<ipython-input-")
    assert row["source"] == CELL
    assert int(row["line"]) == 1
    key = select(
        run,
        "?t mp:key 'from-cell-1' ; mp:inGraph ?g . ?g prov:qualifiedGeneration/prov:atLocation ?site . ?site mp:notebookCell ?c",
    )
    assert [r["c"] for r in key] == [row["cell"]]


def test_files_next_to_the_mofka_schema_leave_the_readers_unchanged(run):
    """The facts are extra files; the Mofka-schema files have exactly their columns."""
    from metaprov.capture import EXTRA_FILES, MOFKA_FILES

    for name, columns in {**MOFKA_FILES, **EXTRA_FILES}.items():
        path = Path(run["dir"], name)
        if name in ("task_argument.csv", "task_fused_op.csv") or path.exists():
            header = path.read_text(encoding="utf-8").splitlines()[0].split(",")
            assert header == ["", *columns], name


def test_the_export_with_every_fact_validates_with_every_engine(run):
    from metaprov.validate import validate

    for engine in ("shacl", "sparql", "columnar"):
        report = validate(run["export"], engine=engine)
        assert report.conforms, report.text()
