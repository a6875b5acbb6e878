"""Reading the capture's worker part files (Arrow chunks, and the CSV parts of older captures):
whole chunks only, every cell as the csv module writes it, nothing from a broken file guessed."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from metaprov.ingest.parts import EOS, INT_SUFFIX, part_files, read_part

COLUMNS = ("key", "start", "finish", "called_from", "time")


def _chunk(rows: list[tuple], names=COLUMNS, types=None) -> bytes:
    cols = list(zip(*rows, strict=True))
    types = types or [pa.string()] * 4 + [pa.float64()]
    batch = pa.RecordBatch.from_arrays(
        [pa.array(c, t) for c, t in zip(cols, types, strict=True)], names=list(names)
    )
    return batch.schema.serialize().to_pybytes() + batch.serialize().to_pybytes() + EOS


ROWS_A = [("a", "ready", "executing", "tcp://w:1", 1.5), ("b,c", "ready", None, "tcp://w:1", 0.1)]
ROWS_B = [("('x', 1)", "executing", "memory", "tcp://w:1", 1e16)]


def test_whole_chunks_are_read_and_every_cell_is_csv_text(tmp_path: Path) -> None:
    f = tmp_path / "worker_transition.1-a.arrows"
    f.write_bytes(_chunk(ROWS_A) + _chunk(ROWS_B))
    got = read_part(f, COLUMNS)
    assert got.cut_bytes == 0 and got.notes == []
    assert got.frame.values.tolist() == [
        ["a", "ready", "executing", "tcp://w:1", "1.5"],
        ["b,c", "ready", "", "tcp://w:1", "0.1"],
        ["('x', 1)", "executing", "memory", "tcp://w:1", "1e+16"],
    ]


def test_a_file_cut_anywhere_gives_its_whole_chunks_and_counts_the_rest(tmp_path: Path) -> None:
    """A worker killed mid-write (or a snapshot taken while it writes) leaves a partial chunk:
    at every cut, the chunks before it are read whole and the bytes after them counted."""
    first, second = _chunk(ROWS_A), _chunk(ROWS_B)
    data = first + second
    f = tmp_path / "worker_transition.1-a.arrows"
    for cut in range(len(data) + 1):
        f.write_bytes(data[:cut])
        got = read_part(f, COLUMNS)
        rows = 0 if got.frame is None else len(got.frame)
        whole = (cut >= len(first) - len(EOS)) + (cut >= len(data) - len(EOS))
        assert rows == len(ROWS_A) * (whole >= 1) + len(ROWS_B) * (whole == 2), cut
        assert 0 <= got.cut_bytes <= cut
        assert rows or got.cut_bytes == cut  # nothing read: every byte accounted as cut


@pytest.mark.parametrize(
    "data",
    [
        b"PAR1" + os.urandom(200),
        b"\xff\xff\xff\xff" + (10**9).to_bytes(4, "little") + b"x" * 16,  # claims a gigabyte
        b"key,start\n",
    ],
)
def test_bytes_that_are_not_a_part_are_counted_never_read_as_rows(tmp_path, data) -> None:
    f = tmp_path / "worker_transition.1-a.arrows"
    f.write_bytes(_chunk(ROWS_A) + data)
    got = read_part(f, COLUMNS)
    assert len(got.frame) == len(ROWS_A)
    assert got.cut_bytes == len(data)


def test_a_chunk_without_the_tables_columns_or_of_an_unknown_type_is_named(tmp_path) -> None:
    f = tmp_path / "worker_transition.1-a.arrows"
    odd_type = [pa.string()] * 4 + [pa.bool_()]
    rows_bool = [("a", "ready", "executing", "tcp://w:1", True)]
    f.write_bytes(
        _chunk(ROWS_A)
        + _chunk([("a", "b")], names=("key", "start"), types=[pa.string()] * 2)
        + _chunk(rows_bool, types=odd_type)
        + _chunk(ROWS_B)
    )
    got = read_part(f, COLUMNS)
    assert got.frame["key"].tolist() == ["a", "b,c", "('x', 1)"]
    assert got.notes == [
        f"{f.name}: chunk 2: columns ['finish', 'called_from', 'time'] missing; chunk skipped",
        f"{f.name}: chunk 3: a column of type bool; chunk skipped",
    ]


def test_a_column_of_floats_and_ints_is_read_as_one(tmp_path: Path) -> None:
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(["a", "b", "c"]),
            pa.array([0.25, None, None], pa.float64()),
            pa.array([None, 7, None], pa.int64()),
        ],
        names=["key", "value", "value" + INT_SUFFIX],
    )
    f = tmp_path / "worker_metric.1-a.arrows"
    f.write_bytes(batch.schema.serialize().to_pybytes() + batch.serialize().to_pybytes() + EOS)
    got = read_part(f)
    assert list(got.frame.columns) == ["key", "value"]
    assert got.frame["value"].tolist() == ["0.25", "7", ""]


def test_csv_parts_of_older_captures_are_read_by_whole_rows(tmp_path: Path) -> None:
    f = tmp_path / "worker_transition.1-a.csv"
    f.write_text("key,start,finish,called_from,time\na,ready,executing,tcp://w:1,1.5\nb,rea")
    got = read_part(f, COLUMNS)
    assert got.frame.values.tolist() == [["a", "ready", "executing", "tcp://w:1", "1.5"]]
    assert got.cut_bytes == len("b,rea")
    (tmp_path / "worker_transition.2-b.arrows").write_bytes(_chunk(ROWS_B))
    (tmp_path / "worker_transfer.1-a.arrows").write_bytes(b"")
    assert [p.name for p in part_files(tmp_path, "worker_transition")] == [
        "worker_transition.1-a.csv",
        "worker_transition.2-b.arrows",
    ]
    empty = read_part(tmp_path / "worker_transfer.1-a.arrows", COLUMNS)
    assert len(empty.frame) == 0 and empty.cut_bytes == 0 and empty.notes == []
