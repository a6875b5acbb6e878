"""What the utilisation and failures questions count, on the bundled example run.

The utilisation questions count task executions only: transfers are associated with workers too
(and have durations), so a question that joined every association with every duration would
count them as busy time. failures names the function that raised, and no other: an erred task
whose function was not recorded has no function (it used to be listed under every function).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import metaprov
from metaprov.store import EmbeddedStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run"
MP = "PREFIX mp: <https://w3id.org/metaprov/ns#> PREFIX prov: <http://www.w3.org/ns/prov#> "


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, metaprov.RunRecords]:
    store = tmp_path_factory.mktemp("counts") / "store"
    metaprov.load(EXAMPLE, store)
    return store, metaprov.read_run(EXAMPLE)


def test_utilisation_counts_task_executions_only(example) -> None:
    store, records = example
    with EmbeddedStore(store, read_only=True) as s:
        transfers = s.query(
            MP + "SELECT ?t ?d WHERE { GRAPH ?g { ?t a mp:Transfer ; prov:wasAssociatedWith ?w ;"
            " mp:duration ?d . ?w a mp:Worker } }"
        )
    # the case this test is about: transfers have workers and durations
    assert len(transfers) > 0 and pd.to_numeric(transfers["d"]).sum() > 0
    ex = records.executions
    busy = (ex["end"] - ex["start"]).dt.total_seconds()
    workers = metaprov.query("worker-utilisation", store=store)
    assert workers["executions"].sum() == len(ex)
    assert workers["busy"].sum() == pytest.approx(busy.sum(), abs=1e-6)
    threads = metaprov.query("thread-utilisation", store=store)
    known = ex["thread"].notna()
    assert threads["executions"].sum() == known.sum()
    assert threads["busy"].sum() == pytest.approx(busy[known].sum(), abs=1e-6)


def test_failures_without_a_recorded_function(example, tmp_path: Path) -> None:
    store, _ = example
    both = metaprov.query("failures", store=store).set_index("exception_type")
    assert both.loc["ValueError", "function"] == "__main__.validate"
    assert both.loc["RuntimeError", "function"] == "__main__.normalise"
    # The same run, its validate function not recorded.
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    functions = pd.read_csv(run / "task_function.csv", index_col=0)
    functions[functions["group"] != "validate"].to_csv(run / "task_function.csv")
    metaprov.load(run, tmp_path / "store")
    got = metaprov.query("failures", store=tmp_path / "store")
    assert sorted(got["exception_type"]) == ["RuntimeError", "ValueError"]
    row = got.set_index("exception_type").loc["ValueError"]
    assert pd.isna(row["function"]) and row["attempts"] == 1 and row["prefix"] == "validate"
    assert got.set_index("exception_type").loc["RuntimeError", "function"] == "__main__.normalise"
