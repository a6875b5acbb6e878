"""Issue 36 item 4: huge values, bounded. A 20 MB field made load and follow fail with a
MemoryError traceback from the store's bulk loader (16 MiB line buffer) while export worked; a
3 GiB sparse worker_transfer.csv filled TMPDIR during follow and killed inspect. Now the row is
counted and dropped with its file, line and column, the same way by every command (in ingest),
and a sparse file is never expanded. See docs/reliability.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

import metaprov
from metaprov.cli import cli
from metaprov.errors import InputError
from metaprov.ingest.csvread import MAX_FIELD_BYTES

EXE = [sys.executable, "-m", "metaprov"]
HUGE = 20 << 20


@pytest.fixture(scope="module")
def huge_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny run with one more scheduler row whose key is 20 MB (file line 8)."""
    files = tiny_files()
    first = files["scheduler_transition.csv"].splitlines()[1].split(",")
    row = ["6", "k" * HUGE, *first[2:]]
    files["scheduler_transition.csv"] += ",".join(row) + "\n"
    return write_run(tmp_path_factory.mktemp("huge") / "R1", files)


def _dropped(report: dict) -> list[dict]:
    return [
        d
        for d in report["accounting"]["files"]["scheduler_transition.csv"].get("dropped", [])
        if "longer than" in json.dumps(d)
    ]


def test_a_20_mb_field_is_counted_and_dropped_by_every_command(
    huge_run: Path, tmp_path: Path
) -> None:
    assert HUGE > MAX_FIELD_BYTES
    records = metaprov.read_run(huge_run, darshan=False)
    text = json.dumps(records.accounting.to_dict(), default=str)
    assert "a field longer than" in text and '"key"' in text and "8" in text
    assert len(records.tasks) == 2  # the two real tasks, nothing invented
    out = tmp_path / "run.nt"
    res = CliRunner().invoke(cli, ["export", str(huge_run), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size < 1 << 20
    # load: the same decision (it used to die in the bulk loader with a MemoryError)
    res = subprocess.run(
        [*EXE, "load", str(huge_run), "--store", str(tmp_path / "st")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "MemoryError" not in res.stderr
    res = subprocess.run(
        [*EXE, "inspect", str(huge_run)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0 and "longer than" in res.stdout + res.stderr, res.stdout


def test_follow_of_a_run_with_a_20_mb_field(huge_run: Path, tmp_path: Path) -> None:
    res = subprocess.run(
        [
            *EXE,
            "follow",
            str(huge_run),
            "--store",
            str(tmp_path / "st"),
            "--interval",
            "0.3",
            "--quiet-period",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "run complete" in res.stdout


def test_a_sparse_csv_is_never_expanded(tmp_path: Path) -> None:
    run = write_run(tmp_path / "R1", tiny_files())
    sparse = run / "worker_transfer.csv"
    os.truncate(sparse, 3 << 30)  # 3 GiB, all but the first rows a hole
    st = sparse.stat()
    if st.st_blocks * 512 >= st.st_size:
        pytest.skip("this file system does not keep holes")
    # inspect (and export, load): read up to the hole, the rest counted as left out
    res = subprocess.run([*EXE, "inspect", str(run)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "incomplete rows left out (worker_transfer.csv)" in res.stdout, res.stdout
    # the reader itself never expands it either: a clear error naming where the data ends
    from metaprov.ingest.csvread import read_csv
    from metaprov.records import Accounting

    with pytest.raises(InputError, match="a sparse file: only its first 4,096 of"):
        read_csv(sparse, required=["start"], optional=[], acct=Accounting())
    # follow copies what was written before the hole, never the hole (it used to fill TMPDIR)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    res = subprocess.run(
        [
            *EXE,
            "follow",
            str(run),
            "--store",
            str(tmp_path / "st"),
            "--interval",
            "0.3",
            "--quiet-period",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "No space" not in res.stderr, res.stderr
    assert sparse.stat().st_size == 3 << 30  # the run's file is as it was


def test_follow_reads_no_file_to_tell_a_cut_snapshot_from_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the final refresh follow asks whether its snapshot holds the run's very files (then
    ``load`` may later say "unchanged"): files of other sizes answer no before any byte is
    hashed (a sparse run's 3 GiB hole, never copied into the snapshot, was read as zeros)."""
    import shutil

    from metaprov.live.follow import _same_fingerprint
    from metaprov.store.catalog import run_fingerprint

    run = write_run(tmp_path / "R1", tiny_files())
    snap = tmp_path / "snap"
    shutil.copytree(run, snap)
    opts = {"base": "https://w3id.org/metaprov/id", "detail": "transitions", "darshan": False}
    assert _same_fingerprint(snap, run, **opts) == run_fingerprint(run, **opts)
    cut = snap / "worker_transfer.csv"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    hashed: list[Path] = []
    monkeypatch.setattr(
        "metaprov.store.catalog.run_fingerprint", lambda path, **kw: hashed.append(path) or "x"
    )
    assert _same_fingerprint(snap, run, **opts) is None and hashed == []


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io")
def test_the_load_fingerprint_never_reads_a_hole(tmp_path: Path) -> None:
    """``load`` fingerprints the run's files (to say "unchanged" later): a sparse file is
    hashed up to its first hole and by its size, never read as gigabytes of zeros."""
    from metaprov.store.catalog import run_fingerprint

    def bytes_read() -> int:
        text = Path("/proc/self/io").read_text()
        return int(text.split("rchar:")[1].split()[0])

    run = write_run(tmp_path / "R1", tiny_files())
    opts = {"base": "https://w3id.org/metaprov/id", "detail": "tasks", "darshan": False}
    whole = run_fingerprint(run, **opts)
    sparse = run / "worker_transfer.csv"
    os.truncate(sparse, 3 << 30)
    if sparse.stat().st_blocks * 512 >= sparse.stat().st_size:
        pytest.skip("this file system does not keep holes")
    before = bytes_read()
    three = run_fingerprint(run, **opts)
    assert bytes_read() - before < 1 << 20
    os.truncate(sparse, 2 << 30)  # the same data, a shorter hole: another fingerprint
    assert run_fingerprint(run, **opts) not in (three, whole)
    assert run_fingerprint(run, **opts) == run_fingerprint(run, **opts)


def _hwm_kib(pid: int) -> int:
    """The peak resident memory of a live process (VmHWM, KiB)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_a_200_mb_row_appended_during_follow_is_dropped_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """A 200 MB row appended to a followed run made 9.9 GB RSS: the appended bytes are read
    in pieces, the row counted and dropped with its file and line (a warning), never parsed."""
    import signal
    import threading
    import time

    run = write_run(tmp_path / "R1", tiny_files())
    proc = subprocess.Popen(
        [*EXE, "follow", str(run), "--store", str(tmp_path / "st"), "--interval", "0.3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out: list[str] = []
    errs: list[str] = []
    for stream, into in ((proc.stdout, out), (proc.stderr, errs)):
        threading.Thread(target=lambda s=stream, i=into: i.extend(s), daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not out and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out, "the follow never refreshed"
        before = _hwm_kib(proc.pid)
        first = tiny_files()["scheduler_transition.csv"].splitlines()[1].split(",")
        row = b"6," + b"k" * (200 << 20) + ",".join(["", *first[2:]]).encode() + b"\n"
        with (run / "scheduler_transition.csv").open("ab") as fh:
            fh.write(row)  # line 8
        del row
        while not any("line 8" in e for e in errs) and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        peak = _hwm_kib(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    time.sleep(0.2)  # the readers take the last lines
    err = "".join(errs)
    assert "Traceback" not in err and "MemoryError" not in err, err
    assert "scheduler_transition.csv line 8: a field longer than 4,194,304 bytes" in err, err
    # the row is 200 MiB; the follow's peak grew by less than half of it (it was 9.9 GB)
    assert peak - before < 100 << 10, (before, peak)
