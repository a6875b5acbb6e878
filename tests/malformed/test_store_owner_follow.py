"""Issue 36 items 6 and 7: forged owner files in a store; follow when its run disappears or is
swapped, and the working folders of a killed follow. Each case runs the real command; see
docs/reliability.md."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from runfiles import tiny_files, write_run

import metaprov
from metaprov.errors import InputError, StoreError

EXE = [sys.executable, "-m", "metaprov"]
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m\u202e"


def _run(*args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXE, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw
    )


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "R1", tiny_files())


@pytest.fixture()
def store(run: Path, tmp_path: Path) -> Path:
    st = tmp_path / "st"
    metaprov.load([run], store=st)
    return st


def _forge(store: Path, data: object | str, name: str = "metaprov-owner-77.json") -> Path:
    path = store / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# --- item 6: owner files are untrusted -----------------------------------------------------------


def test_an_owner_url_with_escape_sequences_is_printed_escaped(store: Path, run: Path) -> None:
    # a live process (this test) named as a follow's owner, with a url full of escapes
    _forge(
        store, {"pid": os.getpid(), "role": "follow", "url": f"http://x{ESCAPES}", "run": ESCAPES}
    )
    for args in (
        ["load", run, "--store", store],
        ["drop", "R1", "--store", store],
        ["follow", run, "--store", store],
    ):
        res = _run(*args)
        assert res.returncode == StoreError.exit_code, res.stderr
        assert "in use by metaprov follow" in res.stderr and "Traceback" not in res.stderr
        assert "\x1b" not in res.stderr and "\x07" not in res.stderr and "\u202e" not in res.stderr
        assert "\\x1b]0;owned\\x07" in res.stderr and "\\u202e" in res.stderr


@pytest.mark.parametrize(
    "forged",
    [
        {"pid": 2**80, "role": "follow"},
        {"pid": -1, "server_pid": 2**63, "started": "yesterday"},
        {"pid": True, "started": float("inf")},
        "[" * 200_000 + "]" * 200_000,
        '{"pid": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "x" * (1 << 20),
    ],
    ids=["huge-pid", "negative-pid", "bool-pid", "deep-list", "deep-field", "one-megabyte"],
)
def test_a_forged_owner_file_is_no_owner_and_no_traceback(
    forged: object, store: Path, run: Path
) -> None:
    from click.testing import CliRunner

    from metaprov.cli import cli

    _forge(store, forged)
    res = CliRunner().invoke(cli, ["load", str(run), "--store", str(store), "--force"])
    assert res.exit_code == 0 and res.exception is None, res.output


def test_an_owner_file_linked_to_a_device_is_never_read(store: Path, run: Path) -> None:
    (store / "metaprov-owner-78.json").symlink_to("/dev/zero")
    os.mkfifo(store / "metaprov-owner-79.json")
    (store / "metaprov-catalog.json").unlink(missing_ok=True)
    res = _run("load", run, "--store", store, timeout=60)
    assert res.returncode == 0, res.stderr


# --- item 7: follow's run disappears or is swapped; its leftovers ---------------------------------


def _follow(run: Path, store: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *EXE,
            "follow",
            str(run),
            "--store",
            str(store),
            "--interval",
            "0.3",
            "--quiet-period",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_refreshed(store: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Until the follow prints its first refresh (one line on stdout per refresh)."""
    import threading

    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    t.start()
    t.join(timeout)
    assert got and got[0], f"the follow never refreshed: {proc.poll()}"


@pytest.mark.parametrize("how", ["removed", "symlink-swapped"])
def test_follow_says_when_its_run_disappears_and_stops(how: str, tmp_path: Path) -> None:
    real = write_run(tmp_path / "real", tiny_files())
    other = write_run(tmp_path / "other", tiny_files())
    link = tmp_path / "now"
    link.symlink_to(real, target_is_directory=True)
    store = tmp_path / "st"
    proc = _follow(link, store)
    try:
        _wait_refreshed(store, proc)
        if how == "removed":
            link.unlink()
        else:
            # swapped in one step (rename over the link), as `ln -sfn` + `mv -T` do: an
            # unlink-then-create leaves a moment with no run at all, which follow rightly reports
            # as "disappeared" if it looks then
            swap = tmp_path / "now.new"
            swap.symlink_to(other, target_is_directory=True)
            os.replace(swap, link)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == InputError.exit_code, err
    assert "Traceback" not in err
    assert ("disappeared" if how == "removed" else "is now another folder") in err


def test_a_killed_follows_working_folder_is_removed_by_the_next(tmp_path: Path) -> None:
    """kill -9 leaves metaprov-follow-<pid>-*; the next follow removes it (ours only)."""
    from metaprov.live.follow import WORK_PREFIX, remove_work_leftovers

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    run = write_run(tmp_path / "R1", tiny_files())
    proc = subprocess.Popen(
        [
            *EXE,
            "follow",
            str(run),
            "--store",
            str(tmp_path / "st"),
            "--interval",
            "0.3",
            "--quiet-period",
            "0",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_refreshed(tmp_path / "st", proc)
        left = [p for p in tmp.iterdir() if p.name.startswith(WORK_PREFIX)]
        assert len(left) == 1
        # a live follow's folder is never removed
        assert remove_work_leftovers(tmp) == []
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert left[0].exists()  # the kill left it
    # not ours: another prefix, a link, an older name without a pid, another user's
    (tmp / "metaprov-follow-abcdefgh").mkdir()
    (tmp / f"{WORK_PREFIX}99999999-linkedxx").symlink_to(tmp_path / "R1")
    (tmp / "unrelated").mkdir()
    theirs = tmp / f"{WORK_PREFIX}4194303-theirsxx"
    theirs.mkdir()
    (theirs / ".lock").write_text("")
    os.chown(theirs, 65534, 65534)
    store2 = tmp_path / "st2"
    res = subprocess.run(
        [
            *EXE,
            "follow",
            str(run),
            "--store",
            str(store2),
            "--quiet-period",
            "1",
            "--interval",
            "0.3",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the run never completes by itself (no metaprov-run.json): the quiet period ends it
    assert res.returncode == 0, res.stderr
    assert "left by an earlier follow that was killed" in res.stderr
    names = sorted(p.name for p in tmp.iterdir())
    assert left[0].name not in names
    assert sorted(names) == sorted(
        ["metaprov-follow-abcdefgh", f"{WORK_PREFIX}99999999-linkedxx", "unrelated", theirs.name]
    )
    assert (tmp_path / "R1" / "graph.csv").is_file()
    assert tempfile.gettempdir() != str(tmp)  # this process's TMPDIR was never changed
