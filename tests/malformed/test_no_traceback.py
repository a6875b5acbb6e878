"""Issue 26 items 15 and 16: files the user may not read (the test drops privileges, so it runs
as root too), a run directory whose name is not UTF-8, Darshan logs that give no table or no
linked segment, and findings that used to vanish (a Latin-1 ``config.txt``, a garbage
``workers_info.csv``, NUL in a key). Never a traceback, never a silent loss.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from runfiles import A, tiny_files, write_run

import metaprov

EXE = [sys.executable, "-m", "metaprov"]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
UNREADABLE = {
    "config.json": b'{"a": 1}',
    "123.pbs01.OU": b"==> In environment /x\n",
    "metaprov-run.json": b"{}",
    "u_python3_id7-7_1-1-1.darshan": b"\0" * 100,
}


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may enter and write (pytest's own is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="metaprov-h26-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_nobody(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop privileges")
    cmd = [*NOBODY, *EXE, *args] if os.geteuid() == 0 else [*EXE, *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)


def test_unreadable_run_files_are_reported_never_a_traceback(open_dir: Path) -> None:
    run = write_run(open_dir / "run", tiny_files())
    for name, data in UNREADABLE.items():
        (run / name).write_bytes(data)
    for p in [run, *run.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    for name in UNREADABLE:
        (run / name).chmod(0)
    commands = [["load", str(run), "--store", str(open_dir / "st")]]
    if pytest.importorskip("rocrate", reason="crate extra") is not None:
        commands.append(["crate", str(run), "-o", str(open_dir / "c"), "--no-report"])
    for cmd in commands:
        proc = _as_nobody(*cmd, cwd=open_dir)
        assert "Traceback" not in proc.stderr, (cmd[0], proc.stderr[-2000:])
        assert proc.returncode == 0, (cmd[0], proc.stderr[-2000:])
    proc = _as_nobody("inspect", str(run), "--json", cwd=open_dir)
    for name in ("config.json", "123.pbs01.OU", "metaprov-run.json"):
        assert name in proc.stdout  # reported in the accounting


def test_a_run_directory_whose_name_is_not_utf8(tmp_path: Path) -> None:
    run = write_run(Path(os.fsdecode(os.fsencode(tmp_path) + b"/run-\xff\xfe")), tiny_files())
    for cmd in (["inspect", str(run)], ["export", str(run), "-o", str(tmp_path / "x.ttl")]):
        proc = subprocess.run([*EXE, *cmd], capture_output=True, timeout=120)
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 3 and "Traceback" not in err, err
        assert "not UTF-8" in err and "rename" in err


def test_report_of_a_run_whose_darshan_gives_nothing(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", tiny_files())
    (run / "u_python3_id7-7_1-1-1.darshan").write_bytes(b"\0" * 100)  # no table at all
    rec = metaprov.read_run(run)
    assert rec.darshan is not None and len(rec.darshan.logs) == 1
    out = tmp_path / "r.html"
    proc = subprocess.run(
        [*EXE, "report", str(run), "-o", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert out.stat().st_size > 0


def test_findings_of_files_without_rows_are_reported(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", tiny_files())
    (run / "config.txt").write_bytes(b"DARSHAN_LOGPATH=/caf\xe9\n")  # one Latin-1 byte
    (run / "workers_info.csv").write_bytes(b"\x00\x01garbage\xff\n1,2,3\n")
    acct = metaprov.read_run(run).accounting.to_dict()["files"]
    assert "config.txt" in acct and acct["config.txt"]["findings"]
    assert "workers_info.csv" in acct and acct["workers_info.csv"]["findings"]
    proc = subprocess.run([*EXE, "inspect", str(run)], capture_output=True, text=True)
    assert "config.txt" in proc.stdout.split("accounting", 1)[1]
    assert "workers_info.csv" in proc.stdout.split("accounting", 1)[1]


def test_nul_in_a_key_is_escaped_in_every_text_format(tmp_path: Path) -> None:
    from metaprov.export import export

    files = {
        k: (v.replace(A, "inc\x00-1111") if k.startswith("scheduler") else v)
        for k, v in tiny_files().items()
    }
    run = write_run(tmp_path / "run", files)
    for suffix in ("nt", "ttl", "jsonld"):
        out = tmp_path / f"x.{suffix}"
        export(run, out)
        data = out.read_bytes()
        assert b"\x00" not in data and b"\\u0000" in data, suffix
