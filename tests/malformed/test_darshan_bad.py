"""Broken Darshan input -> a clear, accounted warning (or an InputError when asked to be strict),
never a crash and never a wrong link.

Each case writes the tiny two-task run of ``tests/runfiles.py``, one good Darshan log for the
worker process that ran task A, and one bad log. The user must see the finding (accounting and
``metaprov inspect``), the good log must still link A's I/O to A, and nothing in the bad log may
be linked to a task.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from runfiles import T1, T2, A, tiny_files, write_run

import metaprov
from metaprov.cli import cli
from metaprov.errors import InputError
from metaprov.ingest.darshan import HEADER_SIZE, read_darshan_logs
from metaprov.synthetic.darshan import log_file_name, write_darshan_log

JOB_START = 1_700_000_000.0
WORKER_CMD = "python3 -c from multiprocessing.spawn import spawn_main --multiprocessing-fork"


def _seg(pthread: int | None, n: int = 6, t0: float = 0.6) -> pd.DataFrame:
    t = t0 + np.arange(n) * 0.1
    return pd.DataFrame(
        {
            "path": [f"/scratch/a{i % 2}.bin" for i in range(n)],
            "op": ["write", "read"] * (n // 2),
            "offset": np.arange(n) * 4096,
            "length": 4096,
            "start_rel": t,
            "end_rel": t + 1e-4,
            "pthread": pd.array([pthread] * n, dtype="UInt64"),
        }
    )


def _good(run: Path) -> Path:
    """Worker 1's process: task A's I/O on thread T1 (inside A's window 0.5 .. 1.5 s)."""
    p = run / log_file_name("u", "python3", 501, 501, JOB_START)
    write_darshan_log(p, _seg(T1), start=JOB_START, cmdline=WORKER_CMD, jobid=501)
    return p


def _bad_path(run: Path, pid: int = 502, partial: bool = False) -> Path:
    return run / log_file_name("u", "python3", pid, pid, JOB_START, partial=partial)


def _b_log(run: Path, **kw: object) -> Path:
    """Worker 2's process: task B's I/O on thread T2 (inside B's window 2.0 .. 2.4 s)."""
    p = kw.pop("path", None) or _bad_path(run)
    seg = kw.pop("segments", None)
    seg = _seg(T2, 4, 2.05) if seg is None else seg
    write_darshan_log(p, seg, start=JOB_START, cmdline=WORKER_CMD, jobid=502, **kw)  # type: ignore[arg-type]
    return p


def truncated(run: Path) -> Path:
    p = _b_log(run, streams=2)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 25])  # cut inside the DXT region's last stream
    return p


def wrong_magic(run: Path) -> Path:
    p = _b_log(run)
    data = bytearray(p.read_bytes())
    struct.pack_into("<q", data, 8, 123456)
    p.write_bytes(bytes(data))
    return p


def corrupt_zlib(run: Path) -> Path:
    p = _b_log(run, streams=2)
    data = bytearray(p.read_bytes())
    off, ln = struct.unpack_from("<QQ", data, 32 + 16 + 16 * 10)
    # find where the DXT region's second stream starts, and damage its body
    d = zlib.decompressobj()
    d.decompress(bytes(data[off : off + ln]))
    second = off + ln - len(d.unused_data)
    assert off < second < off + ln
    for i in range(second + 4, min(second + 14, off + ln)):
        data[i] ^= 0xFF
    p.write_bytes(bytes(data))
    return p


def partial_no_header(run: Path) -> Path:
    return _b_log(run, path=_bad_path(run, partial=True), header=False)


def partial_with_header(run: Path) -> Path:
    return _b_log(run, path=_bad_path(run, partial=True))


def no_dxt(run: Path) -> Path:
    p = _b_log(run)
    data = bytearray(p.read_bytes())
    struct.pack_into("<QQ", data, 32 + 16 + 16 * 10, 0, 0)  # drop the DXT_POSIX region
    p.write_bytes(bytes(data))
    return p


def extra_without_pthread(run: Path) -> Path:
    return _b_log(run, segments=_seg(None, 4, 2.05), layout=96)


def unrelated_program(run: Path) -> Path:
    p = run / log_file_name("bob", "rsync", 7, 7, JOB_START - 5 * 86400)
    seg = _seg(T2, 4, 2.05)
    write_darshan_log(
        p, seg, start=JOB_START - 5 * 86400, cmdline="rsync -a x y", uid=4242, jobid=7
    )
    return p


def bzip2_bomb(run: Path) -> Path:
    """A DXT region of a few dozen bytes that claims 4 MiB: bzip2 of zeros (a decompression bomb;
    the same bytes repeated claim gigabytes)."""
    import bz2

    p = _b_log(run, compression="bzip2")
    data = bytearray(p.read_bytes())
    c = bz2.BZ2Compressor(9)
    bomb = c.compress(bytes(4 << 20)) + c.flush()
    struct.pack_into("<QQ", data, 32 + 16 + 16 * 10, len(data), len(bomb))
    p.write_bytes(bytes(data) + bomb)
    return p


def too_short(run: Path) -> Path:
    p = _bad_path(run)
    p.write_bytes(b"3.41\0\0\0\0" + b"\x01" * 100)
    return p


def random_bytes(run: Path) -> Path:
    p = _bad_path(run)
    p.write_bytes(np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    return p


@dataclass
class Case:
    id: str
    build: Callable[[Path], Path]
    reason: str  # substring of the accounting reason for the bad log
    status: str  # the bad log's status in darshan.logs
    segments_kept: int | None = None  # segments still read from the bad log


CASES = [
    Case("truncated-log", truncated, "DXT_POSIX region truncated", "damaged", 2),
    Case("wrong-magic", wrong_magic, "not a readable Darshan log", "unreadable", 0),
    Case("corrupt-zlib-stream", corrupt_zlib, "DXT_POSIX region corrupt", "damaged", 2),
    Case("partial-without-header", partial_no_header, "partial log without header", "partial", 0),
    Case("partial-with-header", partial_with_header, "partial log", "partial", 4),
    Case("no-dxt", no_dxt, "no DXT trace", "ok", 0),
    Case("extra-info-without-pthread", extra_without_pthread, "without thread id", "ok", 4),
    Case("unrelated-program", unrelated_program, "log from an unrelated program", "ok", 4),
    Case("bzip2-bomb", bzip2_bomb, "DXT_POSIX region corrupt", "damaged", 0),
    Case("shorter-than-header", too_short, "not a readable Darshan log", "unreadable", 0),
    Case("random-bytes", random_bytes, "not a readable Darshan log", "unreadable", 0),
]


def _run(tmp: Path, case: Case) -> tuple[Path, Path]:
    run = write_run(tmp / "run", tiny_files())
    _good(run)
    bad = case.build(run)
    return run, bad


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_darshan_log_is_reported_and_links_stay_right(tmp_path: Path, case: Case) -> None:
    run, bad = _run(tmp_path, case)
    records = metaprov.read_run(run)
    logs = records.darshan.logs.set_index("log")
    assert logs.loc[bad.name, "status"] == case.status
    assert case.reason in logs.loc[bad.name, "problems"]
    issues = records.accounting.issues
    mine = issues[issues["file"] == bad.name]
    assert mine["reason"].str.contains(case.reason, regex=False).any(), mine
    seg = records.darshan.segments
    if case.segments_kept is not None:
        assert int((seg["log"] == bad.name).sum()) == case.segments_kept
    metaprov.link_io(records)
    links = records.io.segments
    good = links[links["log"] != bad.name]
    assert (good["status"] == "linked").all() and (good["key"] == A).all()
    # nothing from the bad log is linked to a task it did not come from
    from_bad = links[links["log"] == bad.name]
    if case.id in ("unrelated-program", "extra-info-without-pthread"):
        assert (from_bad["status"] == "unlinked").all()
    else:
        assert from_bad["key"].isna().all() or (from_bad["key"] != A).all()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_darshan_log_through_the_cli(tmp_path: Path, case: Case) -> None:
    run, bad = _run(tmp_path, case)
    result = CliRunner().invoke(cli, ["inspect", str(run)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "darshan" in result.output
    assert case.reason in result.output


def test_strict_reading_raises_an_input_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", tiny_files())
    bad = wrong_magic(run)
    with pytest.raises(InputError) as exc:
        read_darshan_logs([bad], strict=True)
    assert bad.name in str(exc.value) and "bad magic number" in str(exc.value)


def test_missing_path_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        read_darshan_logs(tmp_path / "nope")


def test_header_size_file_is_not_read_past_its_end(tmp_path: Path) -> None:
    p = tmp_path / "x.darshan"
    p.write_bytes(b"\0" * HEADER_SIZE)
    recs = read_darshan_logs([p])
    assert recs.logs["status"].tolist() == ["unreadable"]


def test_a_decompression_bomb_is_cut_at_its_bound(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", tiny_files())
    bad = bzip2_bomb(run)
    logs = read_darshan_logs([bad]).logs
    assert "decompresses to more than the 1,048,576 bytes" in logs["problems"].iloc[0]
