"""The safe literal parser: shapes, normalisation, fallbacks, and that nothing is ever evaluated."""

from __future__ import annotations

import ast

import numpy as np
import pandas as pd
import pytest

from metaprov.ingest.literals import normalise_key, parse_cells


def _items(p):
    return list(zip(p.cell.tolist(), p.key.tolist(), p.value.tolist(), strict=True))


def test_dict_int_plain_and_tuple_keys():
    cells = pd.Series(
        ["{'_dask_helper-94': 50208}", "{('array-88', 116): 336, ('array-88', 100): 336}"]
    )
    p = parse_cells(cells, "dict_int")
    assert _items(p) == [
        (0, "_dask_helper-94", 50208.0),
        (1, "('array-88', 116)", 336.0),
        (1, "('array-88', 100)", 336.0),
    ]
    assert len(p.bad_cells) == 0


def test_tuple_keys_normalise_to_str_of_tuple():
    keys = [("x-1", 0), ("a'b", 3, 0, 0, 0), ("ünï", 1), ("q", -2)]
    cell = "{" + ", ".join(f"{k!r}: 1" for k in keys) + "}"
    p = parse_cells(pd.Series([cell]), "dict_int")
    assert p.key.tolist() == [str(k) for k in keys]


@pytest.mark.parametrize(
    "key",
    [
        'quote"inside',
        "apostrophe'inside",
        "back\\slash",
        "ünïcödé-ключ-键",
        "tab\tkey",
        "{brace}: , colon",
        "x" * 5000,
    ],
)
def test_string_keys_round_trip(key):
    cell = repr({key: 7})
    p = parse_cells(pd.Series([cell]), "dict_int")
    assert p.key.tolist() == [key]
    assert p.value.tolist() == [7.0]


def test_very_long_tuple_key():
    key = ("save_file-331f", *range(300))
    p = parse_cells(pd.Series([repr({key: 1})]), "dict_int")
    assert p.key.tolist() == [str(key)]


def test_nested_tuple_key_falls_back_to_literal_parser():
    key = ("x", ("y", 1))
    p = parse_cells(pd.Series([repr({key: 4})]), "dict_int")
    assert p.key.tolist() == [str(key)]


def test_deps_shape():
    deps = {"list-8": {"h1", "h2"}, "h2": set(), ("a", 1): {("b", 0), "h1"}}
    p = parse_cells(pd.Series([repr(deps)]), "deps")
    got = sorted((k, v) for k, v in zip(p.key.tolist(), p.value.tolist(), strict=True))
    assert got == sorted(
        [
            ("list-8", "h1"),
            ("list-8", "h2"),
            ("h2", None),
            ("('a', 1)", "('b', 0)"),
            ("('a', 1)", "h1"),
        ]
    )


def test_set_shape_and_empty_set():
    p = parse_cells(pd.Series(["{'list-1'}", "set()", "{('x', 1), 'y'}"]), "set")
    assert _items(p) == [(0, "list-1", None), (2, "('x', 1)", None), (2, "y", None)]


@pytest.mark.parametrize(
    "cell",
    [
        "{'a': 1",  # unbalanced
        "not a literal",
        "{'a': 'b'}",  # value is not a byte count
        "['a', 1]",
        "{'a': 1}}",
    ],
)
def test_malformed_cells_are_reported_not_raised(cell):
    p = parse_cells(pd.Series(["{'ok': 1}", cell, "{'ok2': 2}"]), "dict_int")
    assert p.bad_cells.tolist() == [1]
    assert p.key.tolist() == ["ok", "ok2"]  # neighbours are not disturbed
    assert p.bad_detail[0]


def test_code_in_a_cell_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    evil = f"{{__import__('os').system('touch {marker}'): 1}}"
    evil2 = f"{{'a': __import__('pathlib').Path('{marker}').touch()}}"
    p = parse_cells(pd.Series([evil, evil2]), "dict_int")
    assert p.bad_cells.tolist() == [0, 1]
    assert not marker.exists()


def test_deeply_nested_cell_is_malformed_not_a_crash():
    cell = "{" + "(" * 100000 + ")" * 100000 + ": 1}"
    p = parse_cells(pd.Series([cell]), "dict_int")
    assert p.bad_cells.tolist() == [0]


def test_matches_ast_on_many_random_cells():
    rng = np.random.default_rng(0)
    cells, expected = [], []
    for i in range(300):
        d = {}
        for j in range(int(rng.integers(0, 5))):
            if rng.random() < 0.5:
                d[f"k-{i}-{j}"] = int(rng.integers(0, 10**9))
            else:
                d[(f"arr-{i}", int(rng.integers(0, 99)), j)] = int(rng.integers(0, 10**6))
        cells.append(repr(d))
        expected.extend(
            (i, normalise_key(k), float(v)) for k, v in ast.literal_eval(repr(d)).items()
        )
    p = parse_cells(pd.Series(cells), "dict_int")
    assert _items(p) == expected
