"""Issue 36, item 7: ``export --scheduler`` pointed at a server that does not speak Dask's
protocol: a clear error, not a numpy allocation traceback ("6.64 EiB"). A real TCP server on
127.0.0.1 answers garbage; the real command runs against it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

from metaprov.cli import cli
from metaprov.errors import UsageError
from metaprov.export.backend import Backend, open_backend

pytest.importorskip("distributed")


@pytest.fixture()
def garbage() -> Iterator[str]:
    """A server sending bytes Dask reads as a frame of exabytes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            try:
                conn.settimeout(2)
                conn.recv(65536)
                conn.sendall(b"\xff" * 64 + b"garbage" * 100)
            except OSError:
                pass
            finally:
                conn.close()

    threading.Thread(target=loop, daemon=True).start()
    yield f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    srv.close()


def test_a_scheduler_sending_garbage_is_a_clear_error(garbage: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not speak Dask's protocol"):
        with open_backend(Backend("scheduler", "--scheduler given", address=garbage)):
            pass
    runs = [write_run(tmp_path / f"R{i}", tiny_files()) for i in range(2)]
    res = CliRunner().invoke(
        cli, ["export", *map(str, runs), "-o", str(tmp_path / "out"), "--scheduler", garbage]
    )
    assert res.exit_code == 2, res.output
    assert "Error: " in res.output and "does not speak Dask's protocol" in res.output
    assert "Traceback" not in res.output and "EiB" not in res.output
