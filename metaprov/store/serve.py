"""Serve an embedded store over HTTP with Oxigraph's own read-only SPARQL server.

Input: an embedded store directory (from ``metaprov load``).
Output: a running ``oxigraph serve-read-only`` process on 127.0.0.1 (by default): the SPARQL 1.1
query endpoint at ``/query`` and Oxigraph's query page (YASGUI) at ``/``, so the store can be
browsed in a web browser, from Jupyter (SPARQLWrapper, rdflib's SPARQLStore, sparql-kernel) or
from any SPARQL client, and queried by ``metaprov query --endpoint URL``.

The server is the ``oxigraph`` command of the PyPI package ``oxigraph`` (``pip install
'metaprov[serve]'``). It opens the store read-only: several servers and ``metaprov query`` may read
it at once, but nothing may load into it while it is served: ``load`` and ``drop`` refuse, naming the
server (its owner file ``metaprov-owner-<pid>.json`` in the store). Queries see
the union of all runs' graphs as the default graph, as ``metaprov query`` does.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metaprov.errors import MissingDependency, StoreError, UsageError

#: Port Oxigraph's server uses by default.
DEFAULT_PORT = 7878


def oxigraph_command() -> str:
    """Path of the ``oxigraph`` executable: beside this Python's (a virtual environment's
    ``bin``), else on ``PATH``.

    Raises:
        MissingDependency: it is not installed.
    """
    here = Path(sys.executable).parent / ("oxigraph.exe" if os.name == "nt" else "oxigraph")
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("oxigraph")
    if found:
        return found
    raise MissingDependency(
        "metaprov serve needs Oxigraph's server (the 'oxigraph' command), which is not installed",
        hint="pip install 'metaprov[serve]' (or pip install oxigraph)",
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running Oxigraph server over a store (stop it with :meth:`stop`, or use ``with``).

    Attributes:
        process: the ``oxigraph serve-read-only`` process.
        url: base URL; the query page is ``url + "/"``.
        store: the store directory served.
    """

    process: subprocess.Popen[bytes]
    url: str
    store: str
    guard: Any = None
    #: This server's owner file in the store (load and drop refuse while it names a live server).
    owner: Path | None = None

    @property
    def query_url(self) -> str:
        """The SPARQL query endpoint (for ``metaprov query --endpoint`` and SPARQL clients)."""
        return self.url + "/query"

    def stop(self, timeout: float = 10.0) -> int:
        """Stop the server; returns its exit code."""
        if self.guard is not None:
            self.guard.stop()
            self.guard = None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.owner is not None:
            self.owner.unlink(missing_ok=True)
            self.owner = None
        return int(self.process.returncode)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    store: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    timeout: float | None = None,
    cors: bool = False,
    wait: float = 30.0,
) -> Server:
    """Start Oxigraph's read-only SPARQL server over an embedded store and wait until it answers.

    Args:
        store: the store directory (written by :func:`metaprov.load`).
        host: address to listen on (127.0.0.1: this machine only).
        port: TCP port; 0 picks a free one.
        timeout: seconds a query may run on the server (None: no limit).
        cors: allow cross-origin requests (a web page elsewhere querying this server).
        wait: seconds to wait for the server to listen.

    Returns:
        A running :class:`Server`.

    Raises:
        MissingDependency: the ``oxigraph`` command is not installed.
        StoreError: no store there, or the server did not start (its message is quoted).
    """
    from metaprov.store.embedded import check_store_dir
    from metaprov.store.owner import _write, check_not_owned, owner_file, owners

    path = Path(store)
    check_store_dir(path, create=False)
    # Several read-only servers may share a store; a follow writing it may not be served so.
    check_not_owned(path, action="serve it read-only", readers_ok=True)
    owners(path, clean=True)
    from metaprov.store.catalog import Catalog
    from metaprov.store.embedded import warn_partial_graphs

    warn_partial_graphs(Catalog(path), str(path))
    if not 0 <= int(port) <= 65535:
        raise UsageError(f"port {port} is out of range", hint="give a port from 1 to 65535, or 0")
    from metaprov.store.guard import Guard

    program = oxigraph_command()
    try:
        guard = Guard(host, int(port), ("127.0.0.1", 0))
    except OSError as exc:
        import errno

        if exc.errno != errno.EADDRINUSE:
            raise UsageError(
                f"cannot listen on {host!r} port {port}: {exc.strerror or exc}",
                hint="give an address of this machine with --host (127.0.0.1: this machine "
                "only), and a free port (--port 0: any)",
            ) from exc
        raise StoreError(
            f"cannot serve on {host}:{port}: {exc.strerror or exc}",
            hint="another program uses the port: give another --port, or --port 0 (any free one)",
        ) from exc
    except (ValueError, TypeError, UnicodeError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(
            f"cannot listen on {host!r} port {port}: {reason}",
            hint="give an address of this machine with --host (127.0.0.1: this machine only), "
            "and a free port (--port 0: any)",
        ) from exc
    port = guard.port
    inner = free_port("127.0.0.1")  # Oxigraph's own port, reached only through the guard
    cmd = [
        program,
        "serve-read-only",
        "--location",
        str(path),
        "--bind",
        f"127.0.0.1:{inner}",
        "--union-default-graph",
    ]
    if cors:
        cmd.append("--cors")
    if timeout is not None:
        cmd += ["--timeout-s", str(max(1, math.ceil(timeout)))]
    from metaprov.store.offline import offline_command

    # no outgoing connection from the server (a SERVICE the guard missed fails there), and a
    # large stack for its query threads (its parser recurses once per nesting level)
    cmd, env = offline_command(cmd)
    try:
        proc = subprocess.Popen(  # noqa: S603 - a fixed program and arguments, no shell
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except BaseException:
        guard.stop()
        raise
    guard.backend = ("127.0.0.1", inner)
    server = Server(proc, f"http://{_url_host(host)}:{port}", str(path), guard)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            guard.stop()
            out = proc.stdout.read().decode(errors="replace").strip() if proc.stdout else ""
            raise StoreError(
                f"Oxigraph's server did not start: {out[-500:] or 'no message'}",
                hint="is the store being loaded right now?",
            )
        if _listening("127.0.0.1", inner) and proc.poll() is None:
            guard.start()
            server.owner = owner_file(path)
            _write(
                server.owner,
                {
                    "pid": os.getpid(),
                    "server_pid": proc.pid,
                    "role": "serve",
                    "url": server.url,
                    "started": time.time(),
                },
            )
            return server
        time.sleep(0.05)
    server.stop()
    raise StoreError(f"Oxigraph's server did not listen on {host}:{port} within {wait:.0f} s")


def _check_port_free(host: str, port: int) -> None:
    """Raise StoreError when ``host:port`` cannot be bound (another program listens there)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            s.bind((host, port))
        except OSError as exc:
            raise StoreError(
                f"cannot serve on {host}:{port}: {exc.strerror or exc}",
                hint="another program uses the port: give another --port, or --port 0 (any free one)",
            ) from exc


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def client_hints(server: Server) -> list[str]:
    """How to point a browser, metaprov, Jupyter and other SPARQL clients at ``server``."""
    q = server.query_url
    return [
        f"query page (YASGUI):  {server.url}/",
        f"SPARQL endpoint:      {q}",
        f"metaprov:             metaprov query runs --endpoint {q}",
        f'Jupyter / Python:     SPARQLWrapper("{q}")  or  rdflib.plugins.stores.sparqlstore.SPARQLStore("{q}")',
        f"YASGUI / any client:  endpoint {q} (GET or POST, SPARQL 1.1 protocol; read-only)",
    ]


__all__ = ["DEFAULT_PORT", "Server", "client_hints", "free_port", "oxigraph_command", "serve"]
