"""Column text of the hot paths: xsd:dateTime literals and N-Triples rows (vectorised), checked
against the plain definitions they replace."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow as pa

from metaprov.mapping.block import Block, lit_time
from metaprov.mapping.terms import RDF, XSD
from metaprov.timeutil import xsd_datetime
from metaprov.write.rows import write_nt

LARGE = pa.large_string()


def _by_definition(values: pd.Series) -> list[str | None]:
    return [t or None for t in xsd_datetime(values)]


def test_lit_time_is_xsd_datetime_with_nulls_for_nat() -> None:
    rng = np.random.default_rng(7)
    us = rng.integers(-62_135_596_800_000_000, 253_402_300_800_000_000, 20_000)
    edges = [0, -1, 1, 951_782_399_999_999, 951_868_800_000_000, 253_402_300_799_999_999]
    us[: len(edges)] = edges  # epoch, just before it, 2000-02-29 boundaries, last instant of 9999
    us[-1] = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
    values = pd.Series(us.view("datetime64[us]")).dt.tz_localize("UTC")
    values[[3, 500]] = pd.NaT
    got = lit_time(values)
    assert got.type == LARGE
    assert got.to_pylist() == _by_definition(values)
    assert got.null_count == 2
    # a slice of a frame's column, all-NaT and empty columns
    part = values.iloc[400:600]
    assert lit_time(part).to_pylist() == _by_definition(part)
    assert lit_time(values.iloc[[3, 500]]).to_pylist() == [None, None]
    assert lit_time(values.iloc[:0]).to_pylist() == []


def test_lit_time_outside_years_1_to_9999_takes_the_general_path() -> None:
    values = pd.Series(np.array([-70_000_000_000_000_000, 0], "datetime64[us]")).dt.tz_localize(
        "UTC"
    )
    assert lit_time(values).to_pylist() == _by_definition(values)


def test_write_nt_rows_are_the_blocks_triples() -> None:
    subjects = pa.array([f"urn:x:s{i}" for i in range(5)], LARGE)
    blk = Block(subjects)
    blk.add(RDF.type, "urn:x:C")
    blk.add("urn:x:dense", pa.array([f"urn:x:o{i}" for i in range(5)], LARGE))
    blk.add("urn:x:sparse", pa.array(['a "q"\n', None, "b\\", None, "c"], LARGE), "str")
    blk.add("urn:x:n", pa.array(["1", "2", None, "4", "5"], LARGE), "typed", XSD.integer)
    lists = pa.array([["urn:x:a", "urn:x:b"], [], None, ["urn:x:c"], []], pa.large_list(LARGE))
    blk.add("urn:x:multi", lists)
    out = io.BytesIO()
    write_nt(blk, out)
    lines = out.getvalue().decode().split("\n")
    assert lines[-1] == ""  # every line ends in a newline
    expected = [
        f"{s} {p} {o} ."
        for ss, p, oo in blk.triples()
        for s, o in zip(ss.to_pylist(), oo.to_pylist(), strict=True)
    ]
    assert sorted(lines[:-1]) == sorted(expected)
    assert len(lines) - 1 == blk.n_triples() == 5 + 5 + 3 + 4 + 3
    # grouped by subject, in row order
    firsts = [line.split(" ")[0] for line in lines[:-1]]
    assert firsts == sorted(firsts, key=lambda s: int(s[len("<urn:x:s") : -1]))
