"""The Darshan reader on logs written by the project's writer and on the two real format samples."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from metaprov.ingest.darshan import (
    HEADER_SIZE,
    classify_role,
    parse_pthread_extra,
    read_darshan_logs,
)
from metaprov.records import SCHEMAS, Accounting
from metaprov.synthetic.darshan import (
    log_file_name,
    pthread_extra_info,
    record_id,
    write_darshan_log,
)
from metaprov.timeutil import utc_to_epoch

START = (1_713_553_287, 429_820_057)


def _segments(n: int = 200, seed: int = 1, pthreads: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    start = np.sort(rng.random(n) * 5.0)
    tids = (rng.integers(1, 2**62, pthreads).astype(np.uint64) << np.uint64(1)) | np.uint64(1)
    return pd.DataFrame(
        {
            "path": [f"/lus/grand/run/file{i % 7}.h5" for i in range(n)],
            "op": np.where(rng.random(n) < 0.25, "write", "read"),
            "offset": rng.integers(0, 10**9, n),
            "length": rng.integers(0, 10**6, n),
            "start_rel": start,
            "end_rel": start + rng.random(n) * 1e-3,
            "pthread": pd.array(tids[rng.integers(0, pthreads, n)], dtype="UInt64"),
        }
    )


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["path", "op", "start_rel"]).reset_index(drop=True)


@pytest.mark.parametrize("layout", [32, 40, 96, 104])
@pytest.mark.parametrize(
    "compression,streams", [("zlib", 1), ("zlib", 4), ("bzip2", 2), ("none", 1)]
)
def test_round_trip_every_layout_and_compression(
    tmp_path: Path, layout: int, compression: str, streams: int
) -> None:
    seg = _segments()
    p = tmp_path / log_file_name("alice", "python3.10", 77, 4242, 1.7e9)
    write_darshan_log(
        p,
        seg,
        start=START,
        layout=layout,
        compression=compression,
        streams=streams,
        jobid=77,
        cmdline="python3 -c from multiprocessing.spawn import spawn_main --multiprocessing-fork",
    )
    recs = read_darshan_logs([p])
    got = _sorted(recs.segments)
    want = _sorted(seg)
    assert len(got) == len(want)
    assert (got["path"].to_numpy() == want["path"].to_numpy()).all()
    assert (got["op"].to_numpy() == want["op"].to_numpy()).all()
    assert (got["offset"].to_numpy() == want["offset"].to_numpy()).all()
    assert (got["length"].to_numpy() == want["length"].to_numpy()).all()
    assert np.array_equal(got["start_rel"].to_numpy(), want["start_rel"].to_numpy())
    if layout == 32:
        assert got["pthread"].isna().all()
    else:
        assert got["pthread"].equals(want["pthread"])
    row = recs.logs.iloc[0]
    assert row["layout"] == layout
    assert row["compression"] == compression
    assert row["pid"] == 4242 and row["jobid"] == 77
    assert row["role"] == "worker"
    assert row["status"] == "ok", row["problems"]
    assert row["n_segments"] == len(seg)
    assert row["hostname"] == "node0"
    assert "lustre\t/lus/grand" in row["mounts"]


def test_absolute_times_are_job_start_plus_relative_seconds(tmp_path: Path) -> None:
    seg = _segments(20)
    p = tmp_path / log_file_name("u", "python3", 1, 2, 1.7e9)
    write_darshan_log(p, seg, start=START)
    got = _sorted(read_darshan_logs([p]).segments)
    want = START[0] + START[1] * 1e-9 + _sorted(seg)["start_rel"].to_numpy()
    assert np.abs(utc_to_epoch(got["start"]) - want).max() <= 1e-6
    assert str(got["start"].dtype) == "datetime64[us, UTC]"


def test_tables_follow_their_schemas(tmp_path: Path) -> None:
    p = tmp_path / log_file_name("u", "python3", 1, 2, 1.7e9)
    write_darshan_log(p, _segments(30), start=START)
    recs = read_darshan_logs(tmp_path)
    for name in ("logs", "names", "counters", "segments"):
        df = getattr(recs, name)
        schema = SCHEMAS[f"darshan_{name}"]
        assert list(df.columns) == [c for c, _, _ in schema]
        for c, t, _ in schema:
            assert str(df[c].dtype) == str(t), (name, c)


def test_counters_long_format_without_zeros(tmp_path: Path) -> None:
    seg = _segments(100)
    p = tmp_path / log_file_name("u", "python3", 1, 2, 1.7e9)
    write_darshan_log(p, seg, start=START)
    c = read_darshan_logs([p]).counters
    assert (c["value"] != 0).all()
    reads = c[c["counter"] == "POSIX_READS"].set_index("path")["value"]
    want = seg[seg["op"] == "read"].groupby("path").size()
    assert reads.sort_index().astype(int).to_dict() == want.sort_index().to_dict()
    assert set(c["module"]) == {"POSIX"}


def test_segment_layout_is_detected_from_size_not_version(tmp_path: Path) -> None:
    """A 96-byte log whose DXT_POSIX version says 2 (the 40-byte layout's number) still reads."""
    seg = _segments(50)
    p = tmp_path / log_file_name("u", "python3", 1, 2, 1.7e9)
    write_darshan_log(p, seg, start=START, layout=96)
    data = bytearray(p.read_bytes())
    struct.pack_into("<I", data, 32 + 16 + 16 * 64 + 4 * 10, 2)
    p.write_bytes(bytes(data))
    got = _sorted(read_darshan_logs([p]).segments)
    assert got["pthread"].equals(_sorted(seg)["pthread"])


def test_extra_info_is_cut_at_the_first_nul() -> None:
    tids = np.array([1, 22984061784064, 2**64 - 1, 140456403461952], dtype=np.uint64)
    extra = pthread_extra_info(tids)
    # stale digits after the NUL must not extend the number
    extra[:, 40:] = ord("9")
    val, ok = parse_pthread_extra(extra)
    assert ok.all()
    assert val.tolist() == tids.tolist()


def test_extra_info_without_pthread_or_with_overflow() -> None:
    rows = [b"mode=unknown", b"pthread_id=", b"pthread_id=99999999999999999999", b"x pthread_id=42"]
    extra = np.zeros((len(rows), 64), dtype=np.uint8)
    for i, r in enumerate(rows):
        extra[i, : len(r)] = np.frombuffer(r, dtype=np.uint8)
    val, ok = parse_pthread_extra(extra)
    assert ok.tolist() == [False, False, False, True]
    assert int(val[3]) == 42


@pytest.mark.parametrize(
    "cmdline,role",
    [
        ("mpiexec -n 8 --ppn 8 dask worker --scheduler-file=s.json", "launcher"),
        ("/x/bin/python3.10 /x/bin/dask worker --scheduler-file=scheduler.json", "nanny"),
        (
            "/x/bin/python3.10 -c from multiprocessing.spawn import spawn_main; "
            "spawn_main(tracker_fd=11, pipe_handle=17) --multiprocessing-fork",
            "worker",
        ),
        (
            "/x/bin/python3.10 -c from multiprocessing.resource_tracker import main;main(10)",
            "resource_tracker",
        ),
        ("/x/bin/python3.10 /x/bin/dask scheduler --port 8786", "scheduler"),
        ("uname -p", "other"),
        ("", "other"),
    ],
)
def test_roles_from_command_lines(cmdline: str, role: str) -> None:
    assert classify_role(cmdline) == role


def test_names_table_maps_record_ids(tmp_path: Path) -> None:
    seg = _segments(10)
    p = tmp_path / log_file_name("u", "python3", 1, 2, 1.7e9)
    write_darshan_log(p, seg, start=START)
    names = read_darshan_logs([p]).names
    got = dict(zip(names["record_id"].astype("uint64").tolist(), names["path"], strict=True))
    for path in seg["path"].unique():
        assert got[record_id(path)] == path


def test_mpiio_module_and_ranks(tmp_path: Path) -> None:
    seg = _segments(40).assign(rank=lambda d: np.arange(len(d)) % 4)
    p = tmp_path / log_file_name("u", "python3", 1, 2, 1.7e9)
    write_darshan_log(p, seg, start=START, module="DXT_MPIIO", layout=40, counters=False)
    got = read_darshan_logs([p]).segments
    assert set(got["module"]) == {"DXT_MPIIO"}
    assert sorted(got["rank"].unique().tolist()) == [0, 1, 2, 3]


def test_header_size_constant_matches_real_logs() -> None:
    assert HEADER_SIZE == 8 + 8 + 8 + 8 + 16 + 64 * 16 + 64 * 4


# ---- the two real logs of ../shared/data/darshan-formats -------------------------------------


@pytest.mark.parametrize("folder,layout", [("dxt-fork-96byte", 96), ("dxt-upstream-40byte", 40)])
def test_real_format_samples_match_truth(shared_data: Path, folder: str, layout: int) -> None:
    d = shared_data / "darshan-formats" / folder
    truth = pd.DataFrame(json.loads((d / "truth.json").read_text()))
    acct = Accounting()
    recs = read_darshan_logs(d, acct)
    assert recs.logs["layout"].tolist() == [layout]
    assert recs.logs["status"].tolist() == ["ok"]
    seg = recs.segments
    io = seg[seg["path"].isin(truth["path"])]
    assert set(io["path"]) == set(truth["path"])
    m = io.merge(truth, on="path")
    assert len(m) == len(io)
    # every segment's thread id is the get_ident() of the thread that did the I/O
    assert (
        m["pthread"].astype("uint64").to_numpy() == m["get_ident"].astype("uint64").to_numpy()
    ).all()
    # and its times lie within 10 ms of the truth interval
    s = utc_to_epoch(m["start"])
    e = utc_to_epoch(m["end"])
    assert (s >= m["t0"] - 0.010).all() and (e <= m["t1"] + 0.010).all()
    assert (recs.logs["pid"] == truth["pid"].iloc[0]).all()
