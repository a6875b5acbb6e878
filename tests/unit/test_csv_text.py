"""The one way metaprov writes CSV (``metaprov.records.csv_text``): pandas' own bytes, with a cell
holding a carriage return quoted (pandas and the csv module leave it bare when lines end in
``\\n``, and every CSV reader then ends the row there)."""

from __future__ import annotations

import csv
import io

import numpy as np
import pandas as pd
import pytest

from metaprov.records import csv_text


def _frame(text: list) -> pd.DataFrame:
    n = len(text)
    return pd.DataFrame(
        {
            "key": text,
            "count": np.arange(n, dtype="int64"),
            "seconds": [0.1, np.nan, 1e16, -0.0, 5e-324][:n],
            "when": pd.to_datetime([1.7e9 + i for i in range(n)], unit="s", utc=True),
            "ok": [True, False, True, False, True][:n],
            "kind": pd.Categorical(["a", "b,c", "a", "d", "a"][:n]),
            "label": pd.array(["x", None, 'say "hi"', "y", "z"][:n], dtype="string"),
        }
    )


PLAIN = ["inc-1", 'he said "hi", twice', "line\nbreak", "", None]


@pytest.mark.parametrize("index", [False, True])
@pytest.mark.parametrize("date_format", [None, "%Y-%m-%dT%H:%M:%SZ"])
def test_without_a_carriage_return_the_bytes_are_pandas(tmp_path, index, date_format):
    df = _frame(PLAIN)
    want = df.to_csv(index=index, lineterminator="\n", date_format=date_format)
    assert csv_text(df, index=index, date_format=date_format) == want
    csv_text(df, tmp_path / "f.csv", index=index, date_format=date_format)
    assert (tmp_path / "f.csv").read_bytes() == want.encode()


@pytest.mark.parametrize("index", [False, True])
def test_a_carriage_return_is_quoted_and_every_row_reads_back(tmp_path, index):
    text = ["odd\rkey", 'he said "hi", twice', "line\nbreak", "cr\r\nlf", None]
    df = _frame(text)
    got = csv_text(df, index=index, date_format="%Y-%m-%dT%H:%M:%SZ")
    assert '"odd\rkey"' in got and '"cr\r\nlf"' in got
    back = pd.read_csv(io.StringIO(got), dtype=str, keep_default_na=False)
    assert len(back) == len(df)
    assert back["key"].tolist() == [
        "odd\rkey",
        'he said "hi", twice',
        "line\nbreak",
        "cr\r\nlf",
        "",
    ]
    rows = list(csv.reader(io.StringIO(got, newline="")))
    assert len(rows) == len(df) + 1
    # every other cell is what pandas writes of it
    plain = df.assign(key=PLAIN).to_csv(
        index=index, lineterminator="\n", date_format="%Y-%m-%dT%H:%M:%SZ"
    )
    want = list(csv.reader(io.StringIO(plain, newline="")))
    k = 1 if index else 0
    assert [r[:k] + r[k + 1 :] for r in rows] == [r[:k] + r[k + 1 :] for r in want]
    csv_text(df, tmp_path / "f.csv", index=index, date_format="%Y-%m-%dT%H:%M:%SZ")
    assert (tmp_path / "f.csv").read_bytes() == got.encode()


def test_a_query_answer_with_a_carriage_return_reads_back():
    from metaprov.queries import format_result

    answer = pd.DataFrame({"key": ["odd\rkey", "plain"], "seconds": [0.5, 1.25]})
    text = format_result(answer, "csv")
    back = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    assert back["key"].tolist() == ["odd\rkey", "plain"]
    assert back["seconds"].tolist() == ["0.5", "1.25"]
