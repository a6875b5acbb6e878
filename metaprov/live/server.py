"""``metaprov serve --follow``: one process owns the store, follows a run into it and serves it.

Input: an embedded store directory, a run directory being written. Output: a read-only SPARQL
1.1 endpoint (``/query``: GET or POST, results as JSON, CSV, TSV or XML; CONSTRUCT as
N-Triples) and a small query page (``/``), answering from the same pyoxigraph store the follow
loop updates, so every answer reflects the last refresh committed.

Why not Oxigraph's own server: its read-only mode reads the store as it was when it started,
and its read-write mode would accept updates from anyone who can reach it. Here the only writer
is the follow loop, in this process; the server answers queries and nothing else.

Policies: the ``Host`` header must name this server (a DNS-rebinding page cannot read it);
every query passes :func:`metaprov.store.sparql.checked_query` (``SERVICE`` and updates: 403;
too long or too many tokens: 413; too deeply nested or not SPARQL's terminals: 400) and the
engine runs its canonical text on a thread without network
(:func:`metaprov.store.offline.offline`); request bodies above 1 MiB and answers above
:data:`MAX_ANSWER` bytes are refused (413).
"""

from __future__ import annotations

import html
import logging
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from metaprov.errors import StoreError, UsageError
from metaprov.live.follow import FollowResult, ReadWriteLock, Refresh, follow, loading_graphs

log = logging.getLogger("metaprov")

MAX_BODY = 1 << 20
#: Seconds a client may stay silent in the middle of its request (then its thread is freed).
CLIENT_SILENCE = 60.0
#: Seconds a query may run on the server (``serve --timeout``; 0 there: no limit).
DEFAULT_QUERY_TIMEOUT = 60.0
#: Largest answer the server builds for one query (bytes); above it: 413.
MAX_ANSWER = 256 << 20

#: The script both pages share: ``table`` draws rows, the Run button POSTs the textarea's query
#: to ``query`` and draws its JSON answer (plain text: inserted into a page by ``format``).
QUERY_SCRIPT = """function table(vars, rows, cell) {
  const t = document.createElement("table"), head = t.insertRow();
  for (const v of vars) { const th = document.createElement("th"); th.textContent = v; head.appendChild(th); }
  for (const r of rows) { const row = t.insertRow(); for (const v of vars) row.insertCell().textContent = cell(r, v); }
  return t;
}
document.getElementById("run").onclick = async function () {
  const status = document.getElementById("status"), out = document.getElementById("out");
  status.textContent = "running..."; out.textContent = "";
  const r = await fetch("query", {method: "POST",
    headers: {"Content-Type": "application/x-www-form-urlencoded",
              "Accept": "application/sparql-results+json"},
    body: "query=" + encodeURIComponent(document.getElementById("q").value)});
  const text = await r.text();
  if (!r.ok) { status.textContent = "error " + r.status + ": " + text; return; }
  const data = JSON.parse(text);
  if ("boolean" in data) { status.textContent = String(data.boolean); return; }
  status.textContent = data.results.bindings.length + " rows";
  out.appendChild(table(data.head.vars, data.results.bindings, (b, v) => b[v] ? b[v].value : ""));
};
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>metaprov live: {title}</title>
<style>body{{font-family:sans-serif;margin:1.5em}}textarea{{width:100%;height:12em;font-family:monospace}}
table{{border-collapse:collapse;margin-top:1em}}td,th{{border:1px solid #ccc;padding:2px 6px;font-size:90%}}
#status{{color:#555}}</style></head><body>
<h1>metaprov live</h1>
<p>Store <code>{store}</code>, following <code>{run}</code>. SPARQL endpoint: <code>{endpoint}</code>
(the default graph is the union of all runs; a run in progress has <code>mp:liveState "in progress"</code>).</p>
<textarea id="q">PREFIX mp: &lt;https://w3id.org/metaprov/ns#&gt;
SELECT ?run ?state ?updated ?lag (COUNT(?task) AS ?tasks) WHERE {{
  ?run a mp:Run . OPTIONAL {{ ?run mp:liveState ?state ; mp:liveUpdated ?updated }}
  OPTIONAL {{ ?run mp:liveLag ?lag }} OPTIONAL {{ ?task a mp:Task }}
}} GROUP BY ?run ?state ?updated ?lag</textarea>
<p><button id="run">Run query</button> <span id="status"></span></p>
<div id="out"></div>
<script>
{query_script}</script></body></html>
"""

_RESULT_TYPES = (
    ("application/sparql-results+json", "JSON"),
    ("application/json", "JSON"),
    ("text/csv", "CSV"),
    ("text/tab-separated-values", "TSV"),
    ("application/sparql-results+xml", "XML"),
)


def uses_service(query: str) -> bool:
    """Whether :func:`metaprov.store.sparql.checked_query` refuses a query for its SERVICE."""
    from metaprov.store.sparql import QueryRefused, checked_query

    try:
        checked_query(query, max_chars=None)
    except QueryRefused as exc:
        return exc.status == 403 and "SERVICE" in exc.message
    return False


#: An HTTP answer: status, content type, body and, optionally, more headers.
Answer = tuple[int, str, bytes] | tuple[int, str, bytes, dict[str, str]]


class AnswerTooLarge(Exception):
    """An answer grew past the server's cap while it was being written."""


class _Capped:
    """A bytes buffer that refuses to grow past ``cap`` (pyoxigraph serialises into it), nor
    to be written after ``deadline`` (monotonic seconds; the query is then ended from here:
    the engine computes the rows as they are written)."""

    def __init__(self, cap: int, deadline: float | None = None, seconds: float = 0.0) -> None:
        self.cap = cap
        self.parts: list[bytes] = []
        self.size = 0
        self.deadline = deadline
        self.seconds = seconds

    def write(self, data: bytes) -> int:
        if self.deadline is not None and time.monotonic() > self.deadline:
            from metaprov.store.offline import TimedOut

            raise TimedOut(self.seconds)
        self.size += len(data)
        if self.size > self.cap:
            raise AnswerTooLarge
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def value(self) -> bytes:
        return b"".join(self.parts)


class QuietHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server whose failed requests (a client that went away mid-answer or
    stayed silent past its time) are a debug log line, not a traceback on stderr."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # broken pipe, reset, timeout: the client's doing
            log.debug("http: request from %s ended: %s", client_address, exc)
            return
        log.warning("http: request from %s failed: %s", client_address, exc)


class LiveServer:
    """The HTTP side of ``serve --follow`` over an open embedded store."""

    def __init__(
        self,
        store: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lock: ReadWriteLock | None = None,
        run: str = "",
        max_answer: int = MAX_ANSWER,
        timeout: float | None = DEFAULT_QUERY_TIMEOUT,
    ) -> None:
        self.store = store
        self.max_answer = max_answer
        self.timeout = timeout or None  # seconds a query may run (None or 0: no limit)
        self.lock = lock or ReadWriteLock()
        self.run = run
        handler = _handler(self)
        try:
            self.httpd = QuietHTTPServer((host, port), handler)
        except OSError as exc:
            raise StoreError(
                f"cannot listen on {host}:{port}: {exc}", hint="is the port in use? try --port 0"
            ) from exc
        self.httpd.daemon_threads = True
        self.host = host
        self.port = int(self.httpd.server_address[1])
        h = f"[{host}]" if ":" in host else host
        self.url = f"http://{h}:{self.port}"
        self.allowed_hosts = {f"{h}:{self.port}".lower()}
        if host in ("127.0.0.1", "::1", "localhost"):
            self.allowed_hosts |= {
                f"localhost:{self.port}",
                f"127.0.0.1:{self.port}",
                f"[::1]:{self.port}",
            }
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name="metaprov-live-http", daemon=True
        )

    @property
    def query_url(self) -> str:
        return self.url + "/query"

    def start(self) -> LiveServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    #: The body of a 404 (a subclass with more paths names them).
    not_found = "not found: this server has / and /query\n"

    def page(self) -> str:
        """The query page (``/``)."""
        return PAGE.format(
            title=html.escape(Path(self.run).name or "store"),
            store=html.escape(str(self.store.location)),
            run=html.escape(self.run),
            endpoint=html.escape(self.query_url),
            query_script=QUERY_SCRIPT,
        )

    def route(self, path: str, query: str, accept: str) -> Answer | None:
        """The answer to a GET of another path than ``/`` and ``/query`` (None: 404)."""
        return None

    def answer(self, query: str, accept: str) -> Answer:
        """(status, content type, body[, headers]) of one query (never raises: errors are
        answers)."""
        try:
            return self._answer(query, accept)
        except Exception as exc:  # noqa: BLE001 - a failed query must not kill the handler
            log.warning("query failed: %s", exc)
            return 500, "text/plain", f"the query failed: {type(exc).__name__}: {exc}\n".encode()

    def _answer(self, query: str, accept: str) -> tuple[int, str, bytes]:
        import pyoxigraph as ox

        from metaprov.store.offline import EngineBusy, TimedOut, offline_within
        from metaprov.store.sparql import QueryRefused, checked_query

        try:
            checked = checked_query(query)
        except QueryRefused as exc:
            return exc.status, "text/plain", f"refused: {exc}\n".encode()
        accept = accept or ""
        seconds = self.timeout
        deadline = None if seconds is None else time.monotonic() + seconds

        def run() -> tuple[int, str, bytes]:
            res = self._query(checked.text)
            if isinstance(res, ox.QueryTriples):
                fmt = ox.RdfFormat.TURTLE if "text/turtle" in accept else ox.RdfFormat.N_TRIPLES
            else:
                name = next((n for m, n in _RESULT_TYPES if m in accept), "JSON")
                fmt = getattr(ox.QueryResultsFormat, name)
            out = _Capped(self.max_answer, deadline, seconds or 0.0)
            res.serialize(out, format=fmt)
            return 200, fmt.media_type, out.value()

        with self.lock.read():
            try:
                return offline_within(seconds, run)
            except TimedOut:
                # the engine's thread is left to end (or ended by the deadline between rows);
                # other queries run on the other threads meanwhile
                return (
                    503,
                    "text/plain",
                    f"refused: the query ran longer than {seconds:g} s, this server's limit "
                    "(serve --timeout); narrow it (fewer patterns joined, a LIMIT)\n".encode(),
                )
            except EngineBusy as exc:
                return (
                    503,
                    "text/plain",
                    f"refused: {exc}; try again later\n".encode(),
                )
            except SyntaxError as exc:
                return 400, "text/plain", f"the query does not parse: {exc}\n".encode()
            except AnswerTooLarge:
                return (
                    413,
                    "text/plain",
                    f"refused: the answer is larger than {self.max_answer:,} bytes; add a LIMIT "
                    "or ask for fewer rows\n".encode(),
                )
            except (OSError, RuntimeError, ValueError) as exc:
                return 500, "text/plain", f"the query failed: {exc}\n".encode()

    def _query(self, query: str) -> Any:
        """Run a query (under the read lock) over every graph but the hidden ones (a graph
        being bulk-loaded, or being dropped for the one that replaces it)."""
        import pyoxigraph as ox

        store = self.store.oxigraph
        hidden = self.lock.hidden
        if not hidden:
            return store.query(query, use_default_graph_as_union=True)
        shown = [
            g
            for g in store.named_graphs()
            if not (isinstance(g, ox.NamedNode) and g.value in hidden)
        ]
        return store.query(query, default_graph=[ox.DefaultGraph(), *shown], named_graphs=shown)


def _handler(server: LiveServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "metaprov-live"
        # a client that stops sending (a body shorter than its length, a request never ended)
        # frees its thread after this many seconds of silence
        timeout = CLIENT_SILENCE

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the CLI prints refreshes
            log.debug("http: " + fmt, *args)

        def _send(
            self, status: int, ctype: str, body: bytes, headers: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _host_ok(self) -> bool:
            host = (self.headers.get("Host") or "").strip().lower()
            if host in server.allowed_hosts:
                return True
            self._send(
                403,
                "text/plain",
                b"this server answers only requests addressed to it (Host header)\n",
            )
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if not self._host_ok():
                return
            parts = urlsplit(self.path)
            if parts.path in ("/", "/index.html"):
                self._send(
                    200,
                    "text/html; charset=utf-8",
                    server.page().encode("utf-8", "backslashreplace"),
                )
                return
            if parts.path == "/query":
                self._one_query(parse_qsl(parts.query, keep_blank_values=True))
                return
            routed = server.route(parts.path, parts.query, self.headers.get("Accept", ""))
            if routed is not None:
                self._send(*routed)
                return
            self._send(404, "text/plain", server.not_found.encode())

        do_HEAD = do_GET  # noqa: N815

        def do_POST(self) -> None:  # noqa: N802
            if not self._host_ok():
                return
            if urlsplit(self.path).path != "/query":
                self._send(405, "text/plain", b"read-only: only queries are answered, at /query\n")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY:
                self._send(413, "text/plain", b"request body missing a length or above 1 MiB\n")
                return
            body = self.rfile.read(length)
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                self._send(400, "text/plain", b"the body is not UTF-8\n")
                return
            params = parse_qsl(urlsplit(self.path).query, keep_blank_values=True)
            if ctype == "application/sparql-query":
                self._one_query(params, text)
            elif ctype == "application/x-www-form-urlencoded":
                self._one_query(params + parse_qsl(text, keep_blank_values=True))
            else:
                self._send(
                    415, "text/plain", b"POST application/sparql-query or a form with 'query'\n"
                )

        def _one_query(self, params: list[tuple[str, str]], body: str | None = None) -> None:
            """Answer the request's one query (as the guard of ``metaprov serve`` does: two
            queries, which a proxy and this server could pick differently, are refused)."""
            if any(k == "update" for k, _ in params):
                self._send(405, "text/plain", b"read-only: no updates\n")
                return
            texts = [v for k, v in params if k == "query"] + ([body] if body is not None else [])
            if len(texts) != 1:
                self._send(400, "text/plain", b"give exactly one query (the 'query' parameter)\n")
                return
            self._send(*server.answer(texts[0], self.headers.get("Accept", "")))

        def _refuse(self) -> None:
            if self._host_ok():
                self._send(405, "text/plain", b"read-only: only queries are answered\n")

        do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

    return Handler


def serve_follow(
    run: str | Path,
    store: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 7878,
    interval: float = 2.0,
    quiet: float = 120.0,
    base: str | None = None,
    detail: str = "tasks",
    darshan: bool = True,
    on_listen: Callable[[LiveServer], None] | None = None,
    on_refresh: Callable[[Refresh], None] | None = None,
    on_complete: Callable[[FollowResult], None] | None = None,
    stop: threading.Event | None = None,
    timeout: float | None = DEFAULT_QUERY_TIMEOUT,
) -> FollowResult:
    """Follow ``run`` into the embedded store ``store`` and serve the store meanwhile.

    Serves until ``stop`` is set (Ctrl-C in the CLI), also after the run is complete. A query
    that runs longer than ``timeout`` seconds (None or 0: no limit) is answered 503.

    Raises:
        StoreError: the store is served or followed by another process, or the port is taken.
    """
    from metaprov.store import EmbeddedStore
    from metaprov.store.owner import owning, update_owner

    if not 0 <= int(port) <= 65535:
        raise UsageError(f"port {port} is out of range", hint="give a port from 1 to 65535, or 0")
    stop = stop or threading.Event()
    lock = ReadWriteLock()
    path = Path(store)
    from metaprov.live.follow import refuse_store_in_run

    refuse_store_in_run(path, Path(run))  # before the store is created
    with ExitStack() as stack:
        st = EmbeddedStore(path)
        stack.callback(st.close)
        stack.enter_context(owning(path, role="follow", run=str(run)))
        # a graph an earlier follow was bulk-loading when it was killed is not whole: not shown
        lock.set_hidden(loading_graphs(st))
        server = LiveServer(
            st, host=host, port=port, lock=lock, run=str(run), timeout=timeout
        ).start()
        stack.callback(server.stop)
        update_owner(path, url=server.url)
        if on_listen is not None:
            on_listen(server)
        result = follow(
            run,
            st,
            interval=interval,
            quiet=quiet,
            base=base,
            detail=detail,
            darshan=darshan,
            on_refresh=on_refresh,
            stop=stop,
            lock=lock,
        )
        if on_complete is not None:
            on_complete(result)
        # A wait with a timeout: a signal delivered to another thread (the HTTP server's, the
        # store's) only sets Python's flag, and a main thread blocked without a timeout would
        # never run the handler that sets ``stop`` (Ctrl-C was ignored).
        while not stop.wait(0.25):
            pass
        return result


def describe_refresh(r: Refresh) -> str:
    """One line per refresh for the terminal."""
    lag = "" if r.lag is None else f", {r.lag:.1f} s behind the newest row"
    return (
        f"refresh {r.number}: {r.state}, {r.tasks:,} tasks, {r.triples:,} triples "
        f"(+{r.added:,} -{r.removed:,}) in {r.seconds:.2f} s{lag}"
    )


__all__ = ["LiveServer", "describe_refresh", "serve_follow", "uses_service"]
