"""The parse cache for growing CSV files (metaprov.ingest.csvread.ParseCache).

Every read through a cache is compared with a fresh read of the same bytes: the rows (as text),
their dictionaries' order, their 1-based file lines and the whole accounting (rows read, rows
not used with reason, line and detail, warnings) must be equal, and the cache's counters say
which way the file was parsed (so a test cannot pass by never using the cache).
Real parts: runs written by the synthetic generator and replayed row batch by row batch by the
test writer (tests/live_replay.py), whole-row snapshots taken as ``metaprov follow`` takes them,
and a real run from ../shared split at a row boundary.
"""

from __future__ import annotations

import csv
import dataclasses
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from metaprov.ingest import read_run
from metaprov.ingest.csvread import ParseCache, RowSelection, parse_cache, read_csv
from metaprov.ingest.dask_csv import CSV_FILES, SPECS
from metaprov.records import Accounting, RunRecords

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import DARSHAN_DASK_RUNS  # noqa: E402
from live_replay import Replay  # noqa: E402

SCHED = SPECS["scheduler_transition.csv"]
HEADER = b",key,start,finish,time,worker,stimulus_id\n"


def _row(i: int) -> bytes:
    # few distinct workers and stimuli: dictionary columns whose order of first appearance matters
    return (
        f"{i},\"('f-{i % 7}', {i})\",processing,memory,{1700000000 + i * 0.5},"
        f"tcp://10.0.0.{i % 3}:4000{i % 2},s-{i % 5}\n"
    ).encode()


def _rows(a: int, b: int) -> bytes:
    return b"".join(_row(i) for i in range(a, b))


def _read(path: Path, cache: ParseCache | None, spec: dict = SCHED, **kw):
    acct = Accounting()
    with parse_cache(cache):
        ct = read_csv(path, acct=acct, **spec, **kw)
    return ct, acct


def _same(path: Path, cache: ParseCache, spec: dict = SCHED):
    """Read ``path`` through ``cache`` and fresh; assert both equal; return the cached read."""
    fresh, fa = _read(path, None, spec)
    got, ga = _read(path, cache, spec)
    assert got.columns == fresh.columns
    for c in fresh.columns:
        a, b = got.arrow(c), fresh.arrow(c)
        assert a.type == b.type, c
        assert a.cast(pa.string()).to_pylist() == b.cast(pa.string()).to_pylist(), c
        if pa.types.is_dictionary(a.type) and len(a):
            # the order downstream codes come from (columns._col: unify_dictionaries)
            da = a.unify_dictionaries().chunk(0).dictionary.to_pylist()
            assert da == b.unify_dictionaries().chunk(0).dictionary.to_pylist(), c
    np.testing.assert_array_equal(got.lines, fresh.lines)
    assert ga.files == fa.files
    pd.testing.assert_frame_equal(ga.issues, fa.issues)
    return got, ga


def _issue_lines(acct: Accounting, reason: str) -> list[int]:
    iss = acct.issues
    return [int(x) for x in iss.loc[iss["reason"].str.startswith(reason), "line"]]


def test_appended_rows_are_parsed_alone_and_equal_a_fresh_parse(tmp_path: Path) -> None:
    f = tmp_path / "scheduler_transition.csv"
    f.write_bytes(HEADER + _rows(0, 50))
    cache = ParseCache()
    ct, _ = _same(f, cache)
    assert cache.stats == {"full": 1, "appended": 0, "unchanged": 0, "uncached": 0}
    with f.open("ab") as fh:
        fh.write(_rows(50, 80))
    ct, acct = _same(f, cache)
    assert cache.stats["appended"] == 1 and cache.stats["full"] == 1
    assert len(ct) == 80 and ct.lines.tolist() == list(range(2, 82))
    assert ct.arrow("key")[79].as_py() == "('f-2', 79)"
    assert acct.files["scheduler_transition.csv"].rows_read == 80
    _same(f, cache)  # nothing new
    assert cache.stats["unchanged"] == 1
    # a new directory, the same file name (each refresh's snapshot is a new directory)
    g = tmp_path / "next" / f.name
    g.parent.mkdir()
    g.write_bytes(f.read_bytes() + _rows(80, 81))
    ct, _ = _same(g, cache)
    assert cache.stats["appended"] == 2 and len(ct) == 81 and len(cache) == 1


def test_malformed_and_blank_lines_keep_their_line_numbers_in_the_prefix_and_the_new_rows(
    tmp_path: Path,
) -> None:
    f = tmp_path / "scheduler_transition.csv"
    # line 5: a stray comma; line 8: blank
    f.write_bytes(HEADER + _rows(0, 3) + b"3,x,y,z,1,2,3,4\n" + _rows(4, 6) + b"\n" + _rows(7, 9))
    cache = ParseCache()
    _same(f, cache)
    # appended: line 12 blank, line 14 too few fields, then rows
    with f.open("ab") as fh:
        fh.write(_rows(9, 10) + b"\n" + _rows(11, 12) + b"12,k\n" + _rows(13, 20))
    ct, acct = _same(f, cache)
    assert cache.stats["appended"] == 1
    assert _issue_lines(acct, "malformed row") == [5, 14]
    assert _issue_lines(acct, "blank line") == [8, 12]
    details = acct.issues.loc[acct.issues["reason"].str.startswith("malformed"), "detail"]
    assert details.tolist() == ["expected 7 fields, found 8", "expected 7 fields, found 2"]
    assert acct.files[f.name].rows_read == 20 and acct.files[f.name].rows_used == 16
    assert 14 not in ct.lines and 12 not in ct.lines and ct.lines[-1] == 21


def test_bytes_that_are_not_utf8_are_read_without_the_cache(tmp_path: Path) -> None:
    f = tmp_path / "scheduler_transition.csv"
    f.write_bytes(HEADER + _rows(0, 10))
    cache = ParseCache()
    _same(f, cache)
    with f.open("ab") as fh:  # new rows, line 13 not UTF-8
        fh.write(_rows(10, 11) + b"11,\xff\xfe,a,b,1,c,d\n" + _rows(12, 15))
    ct, acct = _same(f, cache)
    assert cache.stats["uncached"] == 1 and len(cache) == 0
    assert _issue_lines(acct, "bytes that are not UTF-8") == [13]
    assert len(ct) == 14
    with f.open("ab") as fh:  # the bad line is now in the prefix: still read without the cache
        fh.write(_rows(15, 17))
    ct, acct = _same(f, cache)
    assert cache.stats["uncached"] == 2
    assert _issue_lines(acct, "bytes that are not UTF-8") == [13] and len(ct) == 16


def test_a_file_rewritten_in_its_middle_is_parsed_whole(tmp_path: Path) -> None:
    f = tmp_path / "scheduler_transition.csv"
    body = _rows(0, 40)
    f.write_bytes(HEADER + body)
    cache = ParseCache()
    _same(f, cache)
    # same length, one cell changed in the middle (as a merge re-sorting rows would), then rows
    data = bytearray(HEADER + body)
    at = data.index(b"processing", len(data) // 2)
    data[at : at + 10] = b"PROCESSING"
    f.write_bytes(bytes(data) + _rows(40, 45))
    ct, _ = _same(f, cache)
    assert cache.stats == {"full": 2, "appended": 0, "unchanged": 0, "uncached": 0}
    assert "PROCESSING" in ct.arrow("start").cast(pa.string()).to_pylist()
    # ... and the new parse is the one kept: rows appended now are parsed alone
    with f.open("ab") as fh:
        fh.write(_rows(45, 47))
    ct, _ = _same(f, cache)
    assert cache.stats["appended"] == 1 and len(ct) == 47


def test_a_changed_header_a_shrunk_file_and_a_cut_last_row_are_parsed_whole(
    tmp_path: Path,
) -> None:
    f = tmp_path / "scheduler_transition.csv"
    f.write_bytes(HEADER + _rows(0, 20))
    cache = ParseCache()
    _same(f, cache)
    # a column added to the header (same rows, one more field each)
    f.write_bytes(HEADER[:-1] + b",thread\n" + b"".join(r[:-1] + b",7\n" for r in _split(20)))
    ct, _ = _same(f, cache)
    assert cache.stats["full"] == 2 and "thread" in ct.columns
    f.write_bytes(HEADER + _rows(0, 10))  # shrunk
    ct, _ = _same(f, cache)
    assert cache.stats["full"] == 3 and len(ct) == 10
    # rows appended, the last cut in half (no line end): read, reported, and not kept
    f.write_bytes(HEADER + _rows(0, 12) + _row(12)[:9])
    ct, acct = _same(f, cache)
    assert cache.stats["appended"] == 1 and len(cache) == 0
    assert _issue_lines(acct, "malformed row") == [14]
    f.write_bytes(HEADER + _rows(0, 14))  # the row completed: parsed whole
    ct, _ = _same(f, cache)
    assert cache.stats["full"] == 4 and len(ct) == 14


def _split(n: int) -> list[bytes]:
    return [_row(i) for i in range(n)]


def test_selected_reads_and_large_rows(tmp_path: Path) -> None:
    f = tmp_path / "scheduler_transition.csv"
    f.write_bytes(HEADER + _rows(0, 20))
    cache = ParseCache()
    sel = RowSelection(lambda t: (np.ones(t.num_rows, bool), np.ones(t.num_rows, bool)), True)
    ct, _ = _read(f, cache, select=sel)
    assert len(ct) == 20 and len(cache) == 0 and sum(cache.stats.values()) == 0
    # graph.csv: one row per submitted graph, parsed as one block
    g = tmp_path / "graph.csv"
    big = ";".join(f"('k', {i})" for i in range(20000))
    g.write_bytes(b",client,keys,dependencies,time\n" + f'0,c1,"{big}",,1.5\n'.encode())
    _same(g, cache, SPECS["graph.csv"])
    with g.open("ab") as fh:
        fh.write(f'1,c2,"{big}",,2.5\n'.encode())
    ct, _ = _same(g, cache, SPECS["graph.csv"])
    assert cache.stats["appended"] == 1 and ct.lines.tolist() == [2, 3]


def _assert_records_equal(a: RunRecords, b: RunRecords) -> int:
    """Every table and the whole accounting equal; returns the rows compared."""
    rows = 0
    for f in dataclasses.fields(RunRecords):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, pd.DataFrame):
            pd.testing.assert_frame_equal(x, y, obj=f.name)
            rows += len(x)
        elif isinstance(x, Accounting):
            assert x.files == y.files
            pd.testing.assert_frame_equal(x.issues, y.issues)
            assert x.notes == y.notes
            assert x.to_dict() == y.to_dict()
        elif f.name == "darshan":
            assert (x is None) == (y is None)
            if x is not None:
                for k, v in vars(x).items():
                    if isinstance(v, pd.DataFrame):
                        pd.testing.assert_frame_equal(v, getattr(y, k), obj=f"darshan.{k}")
        else:
            assert x == y, f.name
    return rows


def test_a_replayed_run_read_refresh_by_refresh_equals_fresh_reads(tmp_path: Path) -> None:
    from metaprov.live.snapshot import take_snapshot
    from metaprov.synthetic import generate_run

    csv.field_size_limit(1 << 30)  # graph rows list many dependencies
    src = generate_run(
        tmp_path / "src" / "run",
        400,
        seed=11,
        graphs=2,
        erred_fraction=0.05,
        retried_fraction=0.05,
        transfer_fraction=0.2,
    )
    rep = Replay(src, tmp_path / "live", steps=5)
    cache = ParseCache()
    tasks = []
    k = 0
    while not rep.finished:
        rep.step()
        k += 1
        snap = take_snapshot(tmp_path / "live", tmp_path / f"snap{k}").path
        fresh = read_run(snap)
        with parse_cache(cache):
            cached = read_run(snap)
        assert _assert_records_equal(cached, fresh) > 0
        tasks.append(len(fresh.transitions))
    assert tasks == sorted(tasks) and tasks[0] > 0 and tasks[-1] > tasks[0]
    with parse_cache(cache):  # the last snapshot again: nothing parsed, graph literals kept
        again = read_run(snap)
    assert _assert_records_equal(again, fresh) > 0
    # the cache was used: each CSV parsed whole once, then only its new rows
    assert cache.stats["full"] == len(CSV_FILES) and cache.stats["appended"] >= 2 * len(CSV_FILES)
    assert cache.stats["uncached"] == 0 and cache.stats["unchanged"] >= len(CSV_FILES)


def test_derived_results_are_kept_while_the_file_is_unchanged(tmp_path: Path) -> None:
    f = tmp_path / "scheduler_transition.csv"
    f.write_bytes(HEADER + _rows(0, 5))
    made: list[int] = []

    def count(ct) -> list[str]:
        made.append(len(ct))
        return ct.arrow("key").cast(pa.string()).to_pylist()

    ct, _ = _read(f, None)
    assert ct.derived("k", lambda: count(ct)) is not ct.derived("k", lambda: count(ct))
    assert made == [5, 5]  # without a cache: made each time
    cache = ParseCache()
    one, _ = _read(f, cache)
    first = one.derived("k", lambda: count(one))
    two, _ = _read(f, cache)  # unchanged: the same result, not made again
    assert two.derived("k", lambda: count(two)) is first and made == [5, 5, 5]
    with f.open("ab") as fh:
        fh.write(_rows(5, 7))
    three, _ = _read(f, cache)  # rows appended: made again, from all the rows
    assert len(three.derived("k", lambda: count(three))) == 7 and made == [5, 5, 5, 7]
    assert three.take(np.ones(7, bool)).memo is None  # a subset keeps nothing


@pytest.mark.realdata
def test_a_real_run_split_at_a_row_boundary(tmp_path: Path) -> None:
    run = DARSHAN_DASK_RUNS / "mixed-mofka"
    if not run.is_dir():
        pytest.skip(f"real run not found: {run}")
    first = tmp_path / "first"
    shutil.copytree(run, first)
    grew = 0
    for p in sorted(first.glob("*.csv")):
        data = p.read_bytes()
        cut = data.rfind(b"\n", 0, len(data) * 3 // 5) + 1
        if cut > data.find(b"\n") + 1:
            grew += 1
            p.chmod(0o644)
            p.write_bytes(data[:cut])
    assert grew >= 3
    cache = ParseCache()
    with parse_cache(cache):
        head = read_run(first)
    assert _assert_records_equal(head, read_run(first)) > 0
    with parse_cache(cache):
        cached = read_run(run)
    assert cache.stats["appended"] == grew
    assert _assert_records_equal(cached, read_run(run)) > 0


def test_keys_holding_nul_are_reported_on_every_read(tmp_path: Path) -> None:
    from metaprov.ingest.dask_csv.columns import _read as read_file

    f = tmp_path / "scheduler_transition.csv"
    f.write_bytes(HEADER + _rows(0, 3) + b'3,"a\x00b",x,y,1,w,s\n' + _rows(4, 6))
    cache = ParseCache()

    def both() -> Accounting:
        fresh, got = Accounting(), Accounting()
        read_file(tmp_path, f.name, fresh)
        with parse_cache(cache):
            read_file(tmp_path, f.name, got)
        pd.testing.assert_frame_equal(got.issues, fresh.issues)
        assert got.files == fresh.files
        return got

    for _ in range(2):  # parsed, then unchanged (the NUL test's result kept)
        assert _issue_lines(both(), "key holds a NUL byte") == [5]
    with f.open("ab") as fh:
        fh.write(b'6,"c\x00",x,y,1,w,s\n')
    assert _issue_lines(both(), "key holds a NUL byte") == [5, 8]
    assert cache.stats == {"full": 1, "appended": 1, "unchanged": 1, "uncached": 0}


def test_a_line_end_inside_a_quoted_value_is_never_a_cut(tmp_path: Path) -> None:
    f = tmp_path / "scheduler_transition.csv"
    # the file ends inside a quoted value (its line end is part of the key, not a row's end)
    f.write_bytes(HEADER + _rows(0, 5) + b'5,"k\n')
    cache = ParseCache()
    ct, acct = _same(f, cache)
    assert len(cache) == 0 and cache.stats["uncached"] == 1
    assert _issue_lines(acct, "malformed row") == [7]
    with f.open("ab") as fh:
        fh.write(b'x",processing,memory,3.5,w,s\n' + _rows(6, 8))
    ct, _ = _same(f, cache)
    assert "k\nx" in ct.arrow("key").cast(pa.string()).to_pylist() and len(ct) == 8
    # a quoted line end anywhere: not kept (the file's line ends are not its rows' ends)
    assert len(cache) == 0 and cache.stats["uncached"] == 2
    f.write_bytes(HEADER + _rows(0, 5))
    _same(f, cache)
    assert len(cache) == 1
    with f.open("ab") as fh:  # ... also when it comes with the appended rows
        fh.write(_rows(5, 6) + b'6,"a\nb",processing,memory,3.5,w,s\n')
    ct, _ = _same(f, cache)
    assert cache.stats["uncached"] == 3 and len(cache) == 0 and len(ct) == 7


def test_appended_lines_over_the_field_limit_are_cut_in_bounded_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 36: a 200 MB row appended during follow made 9.9 GB RSS. A line holding a run of
    bytes longer than a field may be (or a line longer than its fields may hold) is counted and
    dropped with its line, never parsed; the rows around it keep their lines and equal a fresh
    parse (LF, CR LF, a quoted value)."""
    from metaprov.ingest.csvread import MAX_FIELD_BYTES

    big = b"k" * (2 * MAX_FIELD_BYTES + 3)
    f = tmp_path / "scheduler_transition.csv"
    f.write_bytes(HEADER + _rows(0, 5))
    cache = ParseCache()
    _same(f, cache)
    with f.open("ab") as fh:
        fh.write(b"5," + big + b",processing,memory,1,w,s\n")  # line 7
        fh.write(_rows(6, 8))
        fh.write(b'8,"' + big + b'",processing,memory,1,w,s\r\n')  # line 10, CR LF
        fh.write(b"9,b," + big + b",memory,1,w,s\n")  # line 11, not the first field
        fh.write(_rows(10, 12))
    fresh, fa = _read(f, None)
    got, ga = _read(f, cache)
    assert cache.stats["appended"] == 1 and cache.stats["uncached"] == 0
    np.testing.assert_array_equal(got.lines, fresh.lines)
    assert got.lines.tolist() == [2, 3, 4, 5, 6, 8, 9, 12, 13]
    assert got.arrow("key").to_pylist() == fresh.arrow("key").to_pylist()
    reason = f"a field longer than {MAX_FIELD_BYTES:,} bytes"
    assert _issue_lines(ga, reason) == _issue_lines(fa, reason) == [7, 10, 11]
    assert ga.files == fa.files  # rows read and not used, by reason
    assert "scheduler_transition.csv line 10: a field longer than" in caplog.text
    # kept: read again, the cut rows are still counted (and nothing parsed again)
    again, aa = _read(f, cache)
    assert cache.stats["unchanged"] == 1 and _issue_lines(aa, reason) == [7, 10, 11]
