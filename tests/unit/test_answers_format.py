"""Answers as text: shortest round-trip floats (csv, json), shortened tables, notes (issue 17)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from metaprov.queries import format_result


def test_floats_are_written_shortest_round_trip() -> None:
    df = pd.DataFrame(
        {"x": [0.23572099999999999, 0.1 + 0.2, np.nan], "n": pd.array([1, None, 3], dtype="Int64")}
    )
    csv = format_result(df, "csv").splitlines()
    assert csv == ["x,n", "0.235721,1", "0.3,", ",3"]
    rows = json.loads(format_result(df, "json"))
    assert rows[0] == {"x": 0.235721, "n": 1} and rows[2] == {"x": None, "n": 3}
    assert (
        json.loads(format_result(pd.DataFrame({"x": [0.0015673333333333333]}), "json"))[0]["x"]
        == 0.00156733333333333
    )


def test_tables_shorten_run_iris_and_long_cells() -> None:
    df = pd.DataFrame(
        {
            "run_id": ["3a11b3998b3a66d8"],
            "graph": ["https://w3id.org/metaprov/id/run/3a11b3998b3a66d8/graph"],
            "kind": ["https://w3id.org/metaprov/ns#TaskExecution"],
            "path": ["/very/long/" + "d" * 80 + "/file.h5"],
        }
    )
    text = format_result(df, "table", width=40)
    assert "run:graph" in text and "mp:TaskExecution" in text
    assert "d" * 80 not in text and "/file.h5" in text and "..." in text
    assert "-f csv or -f json shows them whole" in text
    assert max(len(c) for c in text.splitlines()[1].split()) <= 40
    assert "d" * 80 in format_result(df, "csv")


def test_a_table_never_shortens_two_values_into_one() -> None:
    """A custom per-graph count has no run_id column: `run:graph` on every row told the runs
    apart no more; values that differ only in their middle stay apart too."""
    graphs = [f"https://w3id.org/metaprov/id/run/{h * 16}/graph" for h in "ab"]
    text = format_result(pd.DataFrame({"g": graphs, "n": [3, 4]}), "table", width=30)
    rows = text.splitlines()[1:3]
    assert rows[0].split()[0] != rows[1].split()[0]
    assert "run:graph" not in text
    middle = ["/data/" + c * 70 + "/out.h5" for c in "xy"]
    text = format_result(pd.DataFrame({"path": middle}), "table", width=30)
    cells = [line.strip() for line in text.splitlines()[1:3]]
    assert len(set(cells)) == 2 and all(len(c) < 90 for c in cells)


def test_notes_replace_no_results() -> None:
    df = pd.DataFrame({"a": pd.Series([], dtype=object)})
    df.attrs["notes"] = ["run x has no thread ids (why): effect"]
    assert format_result(df, "table") == "a\nnote: run x has no thread ids (why): effect"
