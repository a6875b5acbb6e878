"""Start and stop a Virtuoso open-source server (Debian ``virtuoso-opensource-7-bin``) on
127.0.0.1, in a directory of its own: the recipe of docs/store.md, used by the tests and by
benchmarks/bench_virtuoso.py.

A fresh database has one administrator, ``dba`` with the password ``dba``; the SPARQL endpoint is
``/sparql`` (queries, anonymous) and the Graph Store endpoint ``/sparql-graph-crud-auth``
(writes, HTTP Digest as ``dba``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

USER = PASSWORD = "dba"

INI = """\
[Database]
DatabaseFile = {d}/virtuoso.db
ErrorLogFile = {d}/virtuoso.log
LockFile = {d}/virtuoso.lck
TransactionFile = {d}/virtuoso.trx
xa_persistent_file = {d}/virtuoso.pxa
ErrorLogLevel = 7
FileExtend = 200
MaxCheckpointRemap = 2000
Striping = 0
TempStorage = TempDatabase

[TempDatabase]
DatabaseFile = {d}/virtuoso-temp.db
TransactionFile = {d}/virtuoso-temp.trx
MaxCheckpointRemap = 2000
Striping = 0

[Parameters]
ServerPort = 127.0.0.1:{sql_port}
DisableUnixSocket = 1
DirsAllowed = ., {d}{allowed}
NumberOfBuffers = {buffers}
MaxDirtyBuffers = {dirty}
ThreadsPerQuery = 2
MaxClientConnections = 8
ServerThreads = 8
CheckpointInterval = 60
O_DIRECT = 0

[HTTPServer]
ServerPort = 127.0.0.1:{http_port}
ServerThreads = 8
MaxClientConnections = 8
EnabledDavVSP = 0

[SPARQL]
ResultSetMaxRows = 0
MaxQueryExecutionTime = 0
MaxQueryCostEstimationTime = 0
"""


def executables() -> tuple[str, str] | None:
    """``virtuoso-t`` and ``isql-vt`` (Debian's names), or None when not installed."""
    server, isql = shutil.which("virtuoso-t"), shutil.which("isql-vt") or shutil.which("isql")
    return (server, isql) if server and isql else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Virtuoso:
    """A running server: its directory, ports and process."""

    directory: Path
    http_port: int
    sql_port: int
    proc: subprocess.Popen
    isql_exe: str

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/sparql"

    @property
    def gsp_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/sparql-graph-crud-auth"

    def isql(self, *statements: str, timeout: float = 600) -> str:
        """Run SQL statements through ``isql-vt`` (the password on its command line is the
        throw-away ``dba`` of this private test server)."""
        script = "\n".join(s.rstrip().rstrip(";") + ";" for s in statements) + "\n"
        out = subprocess.run(
            [self.isql_exe, f"127.0.0.1:{self.sql_port}", USER, PASSWORD],
            input=script,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if out.returncode != 0 or "*** Error" in out.stdout:
            raise RuntimeError(f"isql failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
        return out.stdout

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start(
    directory: Path, *, buffers: int = 20000, wait: float = 120.0, allowed: Path | None = None
) -> Virtuoso:
    """Write ``virtuoso.ini`` into ``directory`` and start ``virtuoso-t`` in the foreground on
    free 127.0.0.1 ports; returns once ``/sparql`` answers. ``allowed``: a directory the bulk
    loader may read.

    Raises:
        RuntimeError: not installed, or the server did not come up (its log is in the message).
    """
    exes = executables()
    if exes is None:
        raise RuntimeError(
            "virtuoso-t / isql-vt not found (apt-get install virtuoso-opensource-7-bin)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    http_port, sql_port = free_port(), free_port()
    ini = directory / "virtuoso.ini"
    ini.write_text(
        INI.format(
            d=directory,
            sql_port=sql_port,
            http_port=http_port,
            buffers=buffers,
            dirty=buffers * 3 // 4,
            allowed=f", {allowed}" if allowed else "",
        )
    )
    log = open(directory / "stdout.log", "wb")  # noqa: SIM115 - the server's lifetime
    proc = subprocess.Popen(
        [exes[0], "+configfile", str(ini), "+foreground"],
        cwd=directory,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Virtuoso(directory, http_port, sql_port, proc, exes[1])
    deadline = time.monotonic() + wait
    url = server.query_url + "?query=ASK%7B%7D"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - 127.0.0.1
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            text = (directory / "virtuoso.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"Virtuoso did not start: {text}")
        time.sleep(0.2)
