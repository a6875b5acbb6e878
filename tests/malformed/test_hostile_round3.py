"""Issue 36, the hostile re-test: cases not tried before, against run directories, stores,
served pages and queries. Each failed before its fix (a hang, gigabytes of memory, a traceback,
terminal escapes reaching the terminal, a question answered from a forged file); see
docs/reliability.md ("Hostile re-test, round 3")."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

import metaprov
from metaprov.cli import cli
from metaprov.errors import terminal_safe

OSC = "\x1b]0;owned\x07\x1b[2J"


def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()`` on a thread; fails the test (instead of hanging it) after ``seconds``."""
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert box, f"still running after {seconds} s (a hang)"
    return box[0]


def _sparse(path: Path, size: int = 3 << 30) -> None:
    path.write_bytes(b"")
    os.truncate(path, size)


def _holes_kept(path: Path) -> bool:
    st = path.stat()
    return st.st_blocks * 512 < st.st_size


@pytest.fixture()
def fifo_run(tmp_path: Path) -> Iterator[Path]:
    """A run whose small files are a FIFO (no writer), links to /dev/zero, sparse 3 GiB files."""
    run = write_run(tmp_path / "R1", tiny_files())
    os.mkfifo(run / "metaprov-run.json")
    os.mkfifo(run / "123.srv.OU")  # a PBS job output name
    (run / "scheduler.e").symlink_to("/dev/zero")
    (run / "PBS_NODEFILE").symlink_to("/dev/zero")
    _sparse(run / "config.json")
    _sparse(run / "dask-config.json")
    _sparse(run / "124.srv.OU")
    _sparse(run / "u_x_id1-2_1-1-1.darshan")
    if not _holes_kept(run / "config.json"):
        pytest.skip("this file system does not keep holes")
    yield run
    # a reader left blocked on a FIFO by a failed test: give it an end
    for name in ("metaprov-run.json", "123.srv.OU"):
        try:
            fd = os.open(run / name, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass


def test_small_files_that_are_fifos_devices_or_sparse_are_read_bounded(fifo_run: Path) -> None:
    """metaprov-run.json as a FIFO or a link to /dev/zero hung inspect (6.4 GB before the
    timeout); 3 GiB sparse configurations took 3.3 GB each; a 3 GiB sparse Darshan log 9.6 GB
    and a minute. Now: regular files only, read up to a limit, a sparse Darshan log not read."""
    from metaprov.live.partial import live_state

    tracemalloc.start()
    try:
        assert _within(30, lambda: live_state(fifo_run))[0] is False
        records = _within(120, lambda: metaprov.read_run(fifo_run))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 << 20, peak  # the 3 GiB files were never read whole
    assert len(records.tasks) == 2  # the run itself is read as before
    text = json.dumps(records.accounting.to_dict(max_examples=20), default=str)
    assert "config.json" in text and "larger than 16,777,216 bytes" in text
    assert "a sparse file: only its first 0 of 3,221,225,472 bytes" in text
    assert "124.srv.OU" in text and "larger than 67,108,864 bytes" in text


def test_metaprov_run_json_linked_to_dev_zero(tmp_path: Path) -> None:
    from metaprov.live.snapshot import read_status

    run = write_run(tmp_path / "R1", tiny_files())
    (run / "metaprov-run.json").symlink_to("/dev/zero")
    assert _within(30, lambda: read_status(run)) == (None, {})
    res = _within(120, lambda: CliRunner().invoke(cli, ["inspect", str(run)]))
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output


def test_escape_sequences_in_file_names_never_reach_the_terminal(tmp_path: Path) -> None:
    """A Darshan log named with an OSC sequence was printed raw by inspect (and any error or
    warning naming a run's file could be)."""
    run = write_run(tmp_path / "R1", tiny_files())
    (run / f"{OSC}evil.darshan").write_bytes(b"junk")
    res = CliRunner().invoke(cli, ["inspect", str(run)])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "\\x1b]0;owned\\x07\\x1b[2Jevil.darshan" in res.output
    # an error naming a path with escapes
    res = CliRunner().invoke(cli, ["inspect", str(tmp_path / f"{OSC}gone")])
    assert res.exit_code == 3 and "\x1b" not in res.output and "\\x1b" in res.output
    assert terminal_safe("a\tb\nc\u202ed\x00") == "a\tb\nc\\u202ed\\x00"


@pytest.fixture(scope="module")
def store_copy(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    top = tmp_path_factory.mktemp("st")
    run = write_run(top / "R1", tiny_files())
    metaprov.load([run], store=top / "st")

    def copy(name: str) -> Path:
        import shutil

        dst = top / name
        shutil.copytree(top / "st", dst)
        return dst

    return copy


@pytest.mark.parametrize(
    "forged",
    [
        {"tasks": [{"a": 1}, None], "weights": "heavy"},
        {"tasks": ["http://x/> . } } SELECT * { ?s ?p ?o } #"], "weights": [1.0]},
        {"tasks": ["http://x/a", "http://x/b"], "weights": [1.0, float("nan")]},
        {"tasks": ["http://x/a"], "weights": [True]},
    ],
    ids=["wrong-types", "iri-injection", "nan", "bool"],
)
def test_a_forged_critical_path_in_the_catalog_is_no_path(
    store_copy: Callable[[str], Path], forged: dict
) -> None:
    """weights 'heavy' gave a ValueError traceback; an IRI ending the IRI a QueryError. The
    catalog is a file anyone with write access can forge: a path of another shape is computed
    again from the graph (the same answer as the true one)."""
    st = store_copy("st-" + str(abs(hash(json.dumps(forged)))))
    truth = CliRunner().invoke(cli, ["query", "critical-path", "--store", str(st)])
    assert truth.exit_code == 0, truth.output
    cat = st / "metaprov-catalog.json"
    data = json.loads(cat.read_text())
    for entry in data["graphs"].values():
        entry["critical_path"] = forged
    cat.write_text(json.dumps(data))
    res = CliRunner().invoke(cli, ["query", "critical-path", "--store", str(st)])
    assert res.exit_code == 0, res.output
    assert res.output == truth.output


# --- serve --follow's HTTP side -----------------------------------------------------------------


@pytest.fixture()
def live(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    import metaprov.live.server as srv
    from metaprov.store import EmbeddedStore

    monkeypatch.setattr(srv, "CLIENT_SILENCE", 1.0)
    st = EmbeddedStore(None)
    server = srv.LiveServer(st, port=0).start()
    try:
        yield server.port
    finally:
        server.stop()


def _raw(port: int, request: bytes, *, close_early: bool = False) -> bytes:
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(request)
    if close_early:
        s.close()
        return b""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    s.close()
    return out


def test_live_server_edge_requests(live: int, capfd: pytest.CaptureFixture[str]) -> None:
    """A body shorter than its length held a thread forever (no socket timeout); a client
    gone before the answer printed a BrokenPipeError traceback; two queries were answered
    (the first), where the guard of serve refuses them."""
    host = f"Host: 127.0.0.1:{live}\r\n".encode()
    t0 = time.monotonic()
    out = _raw(
        live,
        b"POST /query HTTP/1.1\r\n" + host + b"Content-Type: application/sparql-query\r\n"
        b"Content-Length: 100\r\n\r\nASK {}",
    )
    assert time.monotonic() - t0 < 10 and out == b""  # the thread let the silent client go
    two = b"query=ASK%7B%7D&query=SELECT%20*%20%7B%7D"
    out = _raw(
        live,
        b"POST /query HTTP/1.1\r\n" + host + b"Content-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: " + str(len(two)).encode() + b"\r\nConnection: close\r\n\r\n" + two,
    )
    assert out.startswith(b"HTTP/1.0 400") and b"exactly one query" in out, out
    out = _raw(live, b"GET /query?query=ASK%7B%7D&update=x HTTP/1.1\r\n" + host + b"\r\n")
    assert out.startswith(b"HTTP/1.0 405"), out
    for _ in range(20):  # gone before the answer
        _raw(live, b"GET / HTTP/1.1\r\n" + host + b"\r\n", close_early=True)
    time.sleep(0.5)
    out = _raw(live, b"GET /query?query=ASK%7B%7D HTTP/1.1\r\n" + host + b"\r\n")
    assert out.startswith(b"HTTP/1.0 200"), out
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err


def test_crate_include_inputs_never_writes_out_a_sparse_file(tmp_path: Path) -> None:
    """A 3 GiB sparse config.txt became 3.1 GB of zeros on disk in the crate."""
    run = write_run(tmp_path / "R1", tiny_files())
    _sparse(run / "config.txt")
    if not _holes_kept(run / "config.txt"):
        pytest.skip("this file system does not keep holes")
    out = tmp_path / "crate"
    res = CliRunner().invoke(cli, ["crate", str(run), "--include-inputs", "-o", str(out)])
    assert res.exit_code == 0, res.output
    used = sum(p.stat().st_blocks * 512 for p in out.rglob("*") if p.is_file())
    assert used < 64 << 20, used
    meta = (out / "ro-crate-metadata.json").read_text()
    assert "not included: a sparse file, only its first 0 of 3,221,225,472 bytes" in meta
    assert not list(out.rglob("config.txt"))
