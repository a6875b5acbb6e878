"""The guard in front of ``metaprov serve``: a small HTTP proxy that only lets read queries through.

Input: HTTP requests from anyone who can reach the address ``metaprov serve`` listens on
(untrusted: a web page in the user's browser can send cross-site GETs, and a DNS-rebinding page
can send any request with its own ``Host``).
Output: the answers of Oxigraph's server, which listens on a private port of 127.0.0.1.

What passes (everything else is refused with an HTTP error and a one-line reason):

* ``Host`` must name this server: ``localhost``, an IP address literal, this machine's name, or
  the ``--host`` given, with the port (a DNS-rebinding page sends its own name: 421).
* ``GET``/``HEAD`` of the query page and its assets.
* A SPARQL query (``GET /query?query=``, ``POST /query`` as a form or ``application/sparql-query``)
  that passes :func:`metaprov.store.sparql.checked_query`: no ``SERVICE`` (a federated query
  would make the server fetch URLs for whoever sent it: 403), no update keyword (403), at most
  :data:`~metaprov.store.sparql.MAX_QUERY_CHARS` characters and
  :data:`~metaprov.store.sparql.MAX_TOKENS` tokens (413), nested at most
  :data:`~metaprov.store.sparql.MAX_DEPTH` levels and only SPARQL's terminals (400). What is
  forwarded is the canonical text of the checked tokens (one ``POST`` with
  ``application/sparql-query``), so the server cannot read another query than the one checked.
  Behind this, Oxigraph's server runs without outgoing connections
  (:func:`metaprov.store.offline.offline_command`).
* Updates, Graph Store writes and other methods: 405.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

#: Largest query body accepted (bytes).
MAX_BODY = 8 << 20
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"}


def allowed_host(value: str | None, port: int, names: set[str]) -> bool:
    """Does a request's ``Host`` header name this server (not a foreign DNS name)?"""
    if not value:
        return False
    value = value.strip().lower()
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return False
        given = rest[1:] if rest else ""
    elif ":" in value:
        host, _, given = value.rpartition(":")
    else:
        host, given = value, ""
    if (int(given) if given.isdigit() else (80 if given == "" else -1)) != port:
        return False
    host = host.rstrip(".")
    if host in names:
        return True
    try:
        ipaddress.ip_address(host)  # an address literal: nothing was resolved by name
        return True
    except ValueError:
        return False


def _names(bind_host: str) -> set[str]:
    names = {"localhost", bind_host.strip("[]").lower()}
    if bind_host in ("0.0.0.0", "::", ""):
        for n in (socket.gethostname(), socket.getfqdn()):
            names.add(n.lower().rstrip("."))
    return names


class _Handler(BaseHTTPRequestHandler):
    """One request to the guard: checked, then forwarded to the backend or refused."""

    #: seconds a client may stay silent mid-request (a body shorter than its length): then its
    #: thread is freed
    timeout = 60.0

    server: _Server

    server_version = "metaprov-serve"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet, as Oxigraph's server is
        pass

    def _refuse(self, code: int, reason: str) -> None:
        body = (reason + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.close_connection = True

    def _host_ok(self) -> bool:
        if allowed_host(self.headers.get("Host"), self.server.server_address[1], self.server.names):
            return True
        self._refuse(421, "this server answers only under its own name (Host refused)")
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        if url.path.rstrip("/") in ("/query", "/update", "/store"):
            if url.path.rstrip("/") != "/query":
                return self._refuse(405, "this server is read-only")
            params = parse_qsl(url.query, keep_blank_values=True)
            return self._query(params, None)
        self._forward("GET", self.path, None, {})

    def do_HEAD(self) -> None:  # noqa: N802
        if self._host_ok():
            self._forward("HEAD", urlsplit(self.path).path or "/", None, {})

    def do_POST(self) -> None:  # noqa: N802
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        if url.path.rstrip("/") != "/query":
            return self._refuse(405, "this server is read-only: only queries are answered")
        try:
            size = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            size = -1
        if not 0 <= size <= MAX_BODY:
            return self._refuse(413, f"a query body must be at most {MAX_BODY:,} bytes")
        body = self.rfile.read(size)
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        params = parse_qsl(url.query, keep_blank_values=True)
        if ctype == "application/sparql-query":
            return self._query(params, body)
        if ctype == "application/x-www-form-urlencoded":
            try:
                form = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
            except UnicodeDecodeError:
                return self._refuse(400, "the form is not UTF-8")
            return self._query(params + form, None)
        return self._refuse(415, "send a SPARQL query (application/sparql-query or a form)")

    def _method_refused(self) -> None:
        if self._host_ok():
            self._refuse(405, "this server is read-only")

    do_PUT = do_DELETE = do_PATCH = _method_refused  # noqa: N815

    def do_OPTIONS(self) -> None:  # noqa: N802 - a CORS preflight (answered with --cors)
        if self._host_ok():
            self._forward("OPTIONS", urlsplit(self.path).path or "/", None, {})

    def _query(self, params: list[tuple[str, str]], body: bytes | None) -> None:
        texts = [v for k, v in params if k == "query"]
        if any(k == "update" for k, _ in params):
            return self._refuse(405, "this server is read-only: no updates")
        if body is not None:
            try:
                texts.append(body.decode("utf-8"))
            except UnicodeDecodeError:
                return self._refuse(400, "the query is not UTF-8")
        if len(texts) != 1:
            return self._refuse(400, "give exactly one query")
        from metaprov.store.sparql import QueryRefused, checked_query

        try:
            checked = checked_query(texts[0])
        except QueryRefused as exc:
            return self._refuse(exc.status, f"refused: {exc}")
        rest = [(k, v) for k, v in params if k in ("default-graph-uri", "named-graph-uri")]
        path = "/query" + (("?" + urlencode(rest)) if rest else "")
        self._forward(
            "POST",
            path,
            checked.text.encode("utf-8"),
            {"Content-Type": "application/sparql-query; charset=utf-8"},
        )

    def _forward(self, method: str, path: str, body: bytes | None, extra: dict) -> None:
        headers = {
            k: v
            for k, v in self.headers.items()
            if k.lower() not in _HOP and k.lower() not in ("content-length", "content-type")
        }
        headers.update(extra)
        where = self.server.backend
        headers["Host"] = f"{where[0]}:{where[1]}"
        conn = http.client.HTTPConnection(*where, timeout=None)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError:
            return self._refuse(502, "the SPARQL server behind this one does not answer")
        try:
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if method != "HEAD":
                while chunk := resp.read1(1 << 16):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True  # the client went away
        finally:
            conn.close()


class _Server(ThreadingHTTPServer):
    """The guard's listening socket; its handlers read ``names`` and ``backend`` from it."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that went away or stayed silent: not a traceback on the server's stderr
        import sys

        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handle_error(request, client_address)

    def __init__(self, host: str, port: int, names: set[str], backend: tuple[str, int]) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.names = names
        self.backend = backend
        super().__init__((host.strip("[]"), port), _Handler)


class Guard:
    """The proxy: listens on ``(host, port)``, forwards to ``backend`` (127.0.0.1:PORT)."""

    def __init__(self, host: str, port: int, backend: tuple[str, int]) -> None:
        self.httpd = _Server(host, port, _names(host), backend)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name="metaprov-serve-guard", daemon=True
        )

    @property
    def backend(self) -> tuple[str, int]:
        """Where queries go (may be set after the guard is bound, before it starts)."""
        return self.httpd.backend

    @backend.setter
    def backend(self, value: tuple[str, int]) -> None:
        self.httpd.backend = value

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


__all__ = ["Guard", "allowed_host", "MAX_BODY"]
