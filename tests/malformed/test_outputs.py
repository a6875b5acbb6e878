"""Hostile outputs: whatever ``-o`` names, metaprov writes the output and damages nothing else.

Every command that writes goes through :func:`metaprov.write.output.open_output`; these tests run
the real commands (``metaprov export``, ``metaprov query -o``) against real pipes, FIFOs, device
nodes (created by the test: never the machine's own /dev), symlinks, the run's own files, full
file systems and killed writers. See docs/reliability.md.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

from metaprov.cli import cli
from metaprov.errors import OutputError
from metaprov.write.output import PART_MARK, open_output

EXE = [sys.executable, "-m", "metaprov"]


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", tiny_files())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The N-Triples export of the tiny run, written to a plain file (once)."""
    tmp = tmp_path_factory.mktemp("exported")
    out = tmp / "reference.nt"
    run = write_run(tmp / "run", tiny_files())
    res = CliRunner().invoke(cli, ["export", str(run), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture()
def reference(exported: Path) -> bytes:
    return exported.read_bytes()


def _cli(*args: str) -> object:
    return CliRunner().invoke(cli, list(args))


def _export(*args: str, **kw: object) -> subprocess.CompletedProcess:
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(  # type: ignore[call-overload]
        [*EXE, "-q", "export", *args], stderr=subprocess.PIPE, timeout=120, **kw
    )


def _device(path: Path, major: int, minor: int) -> Path:
    """A character device node made by the test (root only), never one of the machine's own."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("creating device nodes needs root")
    return path


def test_dash_streams_through_a_real_pipe(run: Path, tmp_path: Path, reference: bytes) -> None:
    cmd = " ".join([*EXE, "-q", "export", str(run), "-f", "nt", "-o", "-"]) + " | cat"
    res = subprocess.run(cmd, shell=True, capture_output=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == reference
    assert not (tmp_path / "-").exists()  # never a file named '-'


def test_dash_needs_a_format(run: Path) -> None:
    res = _cli("export", str(run), "-o", "-")
    assert res.exit_code == 4 and "Error: " in res.output and "-f" in res.output


def test_dev_stdout_redirected_to_a_file(run: Path, tmp_path: Path, reference: bytes) -> None:
    out = tmp_path / "redirected.nt"
    with out.open("wb") as fh:
        res = _export(str(run), "-f", "nt", "-o", "/dev/stdout", stdout=fh)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == reference


def test_fifo_is_written_through_not_replaced(run: Path, tmp_path: Path, reference: bytes) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    res = _cli("export", str(run), "-f", "nt", "-o", str(fifo), "-q")
    reader.join(60)
    assert res.exit_code == 0, res.output
    assert got == [reference]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_null_device_is_written_through(run: Path, tmp_path: Path) -> None:
    null = _device(tmp_path / "null", 1, 3)
    res = _cli("export", str(run), "-f", "nt", "-o", str(null), "-q")
    assert res.exit_code == 0, res.output
    assert stat.S_ISCHR(null.lstat().st_mode)  # still the device, not a regular file
    assert [p.name for p in tmp_path.iterdir() if PART_MARK in p.name] == []


@pytest.mark.parametrize("command", ["export", "query"])
def test_full_device_is_an_error_and_stays_a_device(
    command: str, run: Path, tmp_path: Path, exported: Path
) -> None:
    full = _device(tmp_path / "full", 1, 7)
    if command == "export":
        res = _cli("export", str(run), "-f", "nt", "-o", str(full))
    else:
        res = _cli("query", "runs", "--file", str(exported), "-f", "csv", "-o", str(full))
    assert res.exit_code == OutputError.exit_code, res.output
    assert "Error: writing " in res.output and "no space left" in res.output
    assert stat.S_ISCHR(full.lstat().st_mode)


def test_symlink_is_followed_and_kept(run: Path, tmp_path: Path, reference: bytes) -> None:
    target = tmp_path / "real" / "target.nt"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "link.nt"
    link.symlink_to(target)
    res = _cli("export", str(run), "-o", str(link), "-q", "--force")
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == reference
    dangling = tmp_path / "dangling.nt"
    dangling.symlink_to(tmp_path / "real" / "new.nt")
    assert _cli("export", str(run), "-o", str(dangling), "-q").exit_code == 0
    assert dangling.is_symlink() and (tmp_path / "real" / "new.nt").read_bytes() == reference


@pytest.mark.parametrize("how", ["same-path", "symlink", "hardlink", "darshan-log"])
def test_an_input_file_is_never_the_output(run: Path, tmp_path: Path, how: str) -> None:
    victim = run / "graph.csv"
    if how == "darshan-log":
        victim = run / "u_python3_id501-501_1-1-1.darshan"
        victim.write_bytes(b"not really a log, but read as one")
    before = victim.read_bytes()
    out = {"same-path": victim, "symlink": tmp_path / "s.nt", "hardlink": tmp_path / "h.nt"}.get(
        how, victim
    )
    if how == "symlink":
        out.symlink_to(victim)
    elif how == "hardlink":
        os.link(victim, out)
    res = CliRunner().invoke(cli, ["export", str(run), "-f", "nt", "-o", str(out)])
    assert res.exit_code == OutputError.exit_code, res.output
    # the run's own file (by its path, a symlink or a hard link): refused as being in the run,
    # or as one of its files
    assert "Error: refusing to write " in res.output
    assert "sits inside the input" in res.output or "one of the inputs" in res.output
    assert victim.read_bytes() == before


def test_an_output_inside_the_run_directory_is_refused_even_with_force(run: Path) -> None:
    """Issue 36: an output never sits inside an input (the run would change under it)."""
    out = run / "prov.ttl"
    for extra in ([], ["--force"]):
        res = CliRunner().invoke(cli, ["export", str(run), "-o", str(out), "-q", *extra])
        assert res.exit_code == OutputError.exit_code, res.output
        assert "sits inside the input" in res.output and "--force does not" in res.output
        assert not out.exists()


def test_query_output_that_is_its_input_file_is_refused(exported: Path) -> None:
    nt = exported
    before = nt.read_bytes()
    res = CliRunner().invoke(cli, ["query", "runs", "--file", str(nt), "-o", str(nt)])
    assert res.exit_code == OutputError.exit_code and "one of the inputs" in res.output
    assert nt.read_bytes() == before


@pytest.mark.parametrize("command", ["export", "query"])
def test_parent_that_is_a_file(command: str, run: Path, tmp_path: Path) -> None:
    out = run / "graph.csv" / "sub" / "x.nt"
    args = (
        ["export", str(run), "-o", str(out)]
        if command == "export"
        else ["query", "runs", "--file", str(tmp_path / "none.nt"), "-o", str(out)]
    )
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == OutputError.exit_code, res.output
    assert "is a file, not a directory" in res.output and "Traceback" not in res.output


def _fsize_limited(cmd: list[str], limit: int) -> subprocess.CompletedProcess:
    """Run ``cmd`` with the file-size limit set (writes past it fail with EFBIG, a real error)."""
    import resource

    def limit_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(cmd, capture_output=True, timeout=120, preexec_fn=limit_size)


def test_output_larger_than_allowed_leaves_the_old_file(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.nt"
    out.write_bytes(b"the previous export\n")
    res = _fsize_limited([*EXE, "-q", "export", str(run), "-o", str(out), "--force"], 2000)
    assert res.returncode == OutputError.exit_code, res.stderr
    assert b"Error: writing " in res.stderr and b"Traceback" not in res.stderr
    assert b"nothing was written under its name" in res.stderr
    assert out.read_bytes() == b"the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", out.name])


def _tiny_tmpfs(path: Path) -> Path:
    path.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], capture_output=True
    )
    if res.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    return path


@pytest.mark.parametrize("command", ["export", "query"])
def test_full_file_system(command: str, run: Path, tmp_path: Path, exported: Path) -> None:
    disk = _tiny_tmpfs(tmp_path / "disk")
    try:
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        with pytest.raises(OSError):  # until the disk is full
            for _ in range(1000):
                os.write(fd, b"\0" * 1024)
        os.close(fd)
        out = disk / ("run.ttl" if command == "export" else "answer.csv")
        res = (
            _cli("export", str(run), "-o", str(out))
            if command == "export"
            else _cli(
                "query", "prefix-summary", "--file", str(exported), "-f", "csv", "-o", str(out)
            )
        )
        assert res.exit_code == OutputError.exit_code, res.output
        assert "no space left on the device" in res.output
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_gz_suffix_compresses_every_format_deterministically(run: Path, tmp_path: Path) -> None:
    for fmt in ("nq", "ttl", "provn"):
        plain, packed = tmp_path / f"a.{fmt}", tmp_path / f"a.{fmt}.gz"
        for out in (plain, packed):
            res = CliRunner().invoke(cli, ["export", str(run), "-o", str(out), "-q"])
            assert res.exit_code == 0, res.output
        assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
        first = packed.read_bytes()
        CliRunner().invoke(cli, ["export", str(run), "-o", str(packed), "-q"])
        assert packed.read_bytes() == first  # no time or name in the gzip header


def test_query_gz_and_dash(tmp_path: Path, exported: Path) -> None:
    nt = exported
    plain = tmp_path / "a.csv"
    packed = tmp_path / "a.csv.gz"
    for out in (plain, packed):
        args = ["query", "prefix-summary", "--file", str(nt), "-f", "csv", "-o", str(out)]
        assert CliRunner().invoke(cli, args).exit_code == 0
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    res = subprocess.run(
        [*EXE, "query", "prefix-summary", "--file", str(nt), "-f", "csv", "-o", "-"],
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert res.returncode == 0 and res.stdout == plain.read_bytes()


_WRITER = """
import os, sys
from metaprov.write.output import open_output
with open_output(sys.argv[1]) as out:
    out.write(b"x" * 100000)
    out.flush()
    print("writing", flush=True)
    sys.stdin.read()  # until killed
"""


def _killed_writer(target: Path) -> None:
    """A writer of ``target`` killed with SIGKILL halfway (it leaves its .part behind)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
    proc.kill()
    proc.wait(30)


def test_leftovers_of_a_killed_export_are_removed_by_the_next(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.ttl"
    _killed_writer(out)
    parts = [p for p in tmp_path.iterdir() if p.name.startswith(".run.ttl" + PART_MARK)]
    assert len(parts) == 1
    foreign = tmp_path / ".run.ttl.12345678.part"  # not ours (no marker): left alone
    foreign.write_text("someone else's")
    other = tmp_path / (".other.ttl" + PART_MARK + "abcdefgh.part")  # another output's
    other.write_text("not for this output")
    res = CliRunner().invoke(cli, ["export", str(run), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert not parts[0].exists()
    assert foreign.exists() and other.exists()


def test_a_live_writers_part_is_never_removed(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.ttl"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
        (part,) = [p for p in tmp_path.iterdir() if PART_MARK in p.name]
        res = CliRunner().invoke(cli, ["export", str(run), "-o", str(out), "-q"])
        assert res.exit_code == 0, res.output
        assert part.exists()  # still locked by its writer
    finally:
        proc.kill()
        proc.wait(30)


def test_a_failed_write_removes_its_part_and_keeps_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "answer.csv"
    out.write_text("old\n")
    with pytest.raises(RuntimeError), open_output(out, overwrite=True) as sink:
        sink.write(b"new but incomplete")
        raise RuntimeError("the producer failed")
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["answer.csv"]


def test_directory_and_block_device_are_refused(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="is a directory"), open_output(tmp_path):
        pass
    try:
        os.mknod(tmp_path / "disk", 0o600 | stat.S_IFBLK, os.makedev(7, 250))
    except PermissionError:
        return
    with pytest.raises(OutputError, match="block device"), open_output(tmp_path / "disk"):
        pass
    assert stat.S_ISBLK((tmp_path / "disk").lstat().st_mode)


def test_staging_files_of_a_killed_load_are_removed_by_the_next_load(
    run: Path, tmp_path: Path
) -> None:
    from metaprov.store.embedded import STAGED_PREFIX

    store = tmp_path / "store"
    assert CliRunner().invoke(cli, ["load", str(run), "--store", str(store)]).exit_code == 0
    orphan = store / (STAGED_PREFIX + "abcd1234.nt")
    orphan.write_bytes(b"<a> <b> <c> .\n" * 1000)
    keep = store / "notes.txt"
    shutil.copy(run / "graph.csv", keep)
    res = CliRunner().invoke(cli, ["load", str(run), "--store", str(store), "--force"])
    assert res.exit_code == 0, res.output
    assert not orphan.exists() and keep.exists()


def test_full_disk_while_staging_a_load(tmp_path: Path) -> None:
    # No room beside the store for the run's N-Triples (the bundled example: 2,526 triples,
    # ~580 KB): a clear StoreError saying what a load needs, no staging file left, and the
    # earlier load still complete.
    from metaprov.errors import StoreError
    from metaprov.store import EmbeddedStore

    run = Path(__file__).resolve().parents[2] / "examples" / "run"

    disk = tmp_path / "disk"
    disk.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], capture_output=True
    )
    if res.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        store = disk / "store"
        first = CliRunner().invoke(cli, ["load", str(run), "--store", str(store), "--json"])
        assert first.exit_code == 0, first.output
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        with pytest.raises(OSError):  # until the disk is full
            for _ in range(64 * 1024):
                os.write(fd, b"\0" * 1024)
        os.ftruncate(fd, os.fstat(fd).st_size - 384 * 1024)  # room to open the store only
        os.close(fd)
        res = CliRunner().invoke(cli, ["load", str(run), "--store", str(store), "--force"])
        assert res.exit_code == StoreError.exit_code, res.output
        assert "cannot stage the run's N-Triples" in res.output
        assert "free disk beside the store" in res.output
        assert not list(store.glob(".metaprov-load-*"))
        os.unlink(disk / "filler")
        with EmbeddedStore(store, read_only=True) as st:
            assert st.count() == json.loads(first.stdout)[0]["triples"]
    finally:
        subprocess.run(["umount", str(disk)], check=False)
