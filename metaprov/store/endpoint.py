"""Any SPARQL 1.1 server over HTTP: Graph Store HTTP Protocol for writes, SPARQL protocol for queries.

Input: N-Triples byte chunks per named graph, SPARQL text. Output: HTTP requests of bounded size,
query results. Credentials come from the environment or ``~/.netrc``, never the command line.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import pandas as pd

from metaprov.errors import LimitError, QueryError, StoreError, UsageError
from metaprov.store.base import (
    _NTRIPLES,
    _RESULTS_JSON,
    DEFAULT_CHUNK_BYTES,
    ENV_PASSWORD,
    ENV_TOKEN,
    ENV_USER,
    XSD,
    LoadReport,
    Store,
    _triples_frame,
    results_to_frame,
    split_lines,
)
from metaprov.store.http import (
    Answer,
    Credentials,
    HttpClient,
    RowCounter,
    clean,
    env_timeout,
    redact,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger("metaprov")

ENV_CONCURRENCY = "METAPROV_ENDPOINT_CONCURRENCY"


# ---------------------------------------------------------------------------------------------
# Remote endpoints
# ---------------------------------------------------------------------------------------------


@dataclass
class Endpoint:
    """Where a SPARQL server listens.

    Attributes:
        query: the SPARQL query endpoint (``http://host:7878/query`` for Oxigraph,
            ``http://host:3030/ds/query`` for Fuseki, ``http://host:7200/repositories/r`` for
            GraphDB, ``http://host:8890/sparql`` for Virtuoso).
        gsp: the Graph Store HTTP Protocol endpoint (derived from ``query`` when not given).
    """

    query: str
    gsp_given: str = ""
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_url(cls, query: str, gsp: str | None = None) -> Endpoint:
        """Validate the URLs (the GSP endpoint is derived when first needed: queries never do)."""
        for url in (query, gsp):
            if url:
                _check_url(url)
        return cls(query=query, gsp_given=gsp or "")

    @property
    def gsp(self) -> str:
        """The Graph Store endpoint: as given, else derived for the known server layouts.

        Raises:
            UsageError: not given, and the query URL has no known layout.
        """
        return self.gsp_given or derive_gsp(self.query)


def _shown(url: str) -> str:
    """An invalid URL as an error message may show it: credentials redacted and no query string
    or fragment (their values may be secrets whatever their names)."""
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    return redact(url if cut < 0 else url[:cut] + "?...")


#: Most rows of a SPARQL JSON answer read into memory (a row takes ~10x its bytes as Python
#: objects); ``METAPROV_ENDPOINT_MAX_ROWS`` overrides it.
DEFAULT_MAX_ROWS = 2_000_000
ENV_MAX_ROWS = "METAPROV_ENDPOINT_MAX_ROWS"


def max_rows() -> int:
    """The row cap: ``$METAPROV_ENDPOINT_MAX_ROWS`` or :data:`DEFAULT_MAX_ROWS`.

    Raises:
        UsageError: ``METAPROV_ENDPOINT_MAX_ROWS`` is not a positive integer.
    """
    raw = os.environ.get(ENV_MAX_ROWS)
    if not raw:
        return DEFAULT_MAX_ROWS
    cap = int(raw) if raw.strip().isdigit() else 0
    if cap <= 0:
        raise UsageError(f"{ENV_MAX_ROWS}={clean(raw, limit=40)} is not a positive integer")
    return cap


#: The start of SPARQL JSON results whose head comes first (a UTF-8 byte order mark allowed).
_HEAD_FIRST = re.compile(rb'\A(?:\xef\xbb\xbf)?\s*\{\s*"head"\s*:')


class _Prefixed(io.RawIOBase):
    """``first``, then the rest of ``body`` (bytes already read from it put back in front)."""

    def __init__(self, first: bytes, body: io.RawIOBase) -> None:
        super().__init__()
        self._first, self._body = memoryview(first), body

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._first:
            n = min(len(b), len(self._first))
            b[:n] = self._first[:n]
            self._first = self._first[n:]
            return n
        return self._body.readinto(b)


class _Rows(RowCounter):
    """The rows of an answer in ``fmt`` (``json``: SPARQL JSON results, counted by pyoxigraph's
    streaming parser one row at a time; ``csv``: SPARQL CSV results, records counted by their
    line ends outside quotes (RFC 4180, as the CSV reader reads them); ``nt``: N-Triples
    lines), counted while the answer arrives: more than the cap is a :class:`LimitError` as
    soon as the row after the cap has been read, before the rest is."""

    def __init__(self, fmt: str, where: str) -> None:
        self.fmt, self.where, self.cap = fmt, where, max_rows()
        self.unread = False  # the streaming parser could not read the answer (JSON)

    def cannot_exceed(self, size: int) -> bool:
        return size <= 3 * self.cap  # a row takes at least 3 bytes ("{},", "x\r\n")

    def count(self, body: io.RawIOBase) -> None:
        if self.fmt == "json":
            self._json(body)
        else:
            self._lines(body, quoted=self.fmt == "csv")

    def _too_many(self, read: int) -> LimitError:
        return LimitError(
            f"the SPARQL server at {self.where} answered more than {self.cap:,} rows (found "
            f"after {read:,} bytes; the rest was not read): more than metaprov reads into memory",
            hint=f"ask for fewer rows (LIMIT, a narrower pattern), or raise {ENV_MAX_ROWS} "
            "if this machine has the memory (about 300 bytes a cell)",
        )

    def _json(self, body: io.RawIOBase) -> None:
        import pyoxigraph as ox

        # pyoxigraph keeps every row of an answer whose rows come before its head (SPARQL
        # allows either order; servers write the head first) until it reads the head: such
        # an answer is not counted, and read only while it cannot hold too many rows
        first = bytearray()
        piece = bytearray(1 << 12)
        while len(first) < 64 and (n := body.readinto(piece)):
            first += piece[:n]
        if not _HEAD_FIRST.match(bytes(first)):
            self._uncounted(body)
            return
        try:
            answer = ox.parse_query_results(
                io.BufferedReader(_Prefixed(bytes(first), body), 1 << 16),
                format=ox.QueryResultsFormat.JSON,
            )
            if isinstance(answer, ox.QueryBoolean):
                return
            rows = 0
            for _ in answer:
                rows += 1
                if rows > self.cap:
                    raise self._too_many(len(body.buf))  # type: ignore[attr-defined]
        except (SyntaxError, ValueError, OSError):
            self._uncounted(body)  # not SPARQL JSON: the reading after says what it is

    def _uncounted(self, body: io.RawIOBase) -> None:
        """An answer whose rows cannot be counted: read on only while it cannot hold more rows
        than the cap (a small one is then read as before, and says what it is)."""
        self.unread = True
        piece = bytearray(1 << 20)
        while body.readinto(piece):
            got = len(body.buf)  # type: ignore[attr-defined]
            if not self.cannot_exceed(got):
                tail = bytes(body.buf[-200:]).decode("utf-8", "replace")  # type: ignore[attr-defined]
                raise StoreError(
                    f"the SPARQL server at {self.where} sent more than {got:,} bytes that are not "
                    "SPARQL JSON results with their head first (whose rows metaprov counts as "
                    f"they arrive); the rest was not read. They end with: {clean(tail, limit=200)}",
                    hint="is this URL the query endpoint? (a server that fails while sending cuts "
                    "its answer off; its message is at the end)",
                )

    def _lines(self, body: io.RawIOBase, *, quoted: bool) -> None:
        import numpy as np

        rows = -1 if quoted else 0  # (a CSV answer's first record is its header)
        inside = 0  # quotes seen so far, mod 2: inside a quoted value when 1
        chunk = bytearray(1 << 20)
        while n := body.readinto(chunk):
            a = np.frombuffer(chunk, dtype=np.uint8, count=n)
            ends = a == 0x0A
            if quoted:
                parity = (np.cumsum(a == 0x22) + inside) & 1
                inside = int(parity[-1])
                ends &= parity == 0
            rows += int(np.count_nonzero(ends))
            if rows > self.cap:
                raise self._too_many(len(body.buf))  # type: ignore[attr-defined]


def _check_url(url: str) -> None:
    example = "give e.g. --endpoint http://127.0.0.1:7878/query"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise UsageError(
            f"{_shown(url)!r} holds spaces or control characters",
            hint="percent-encode them (a space is %20); " + example,
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise UsageError(
            f"{_shown(url)!r} is not a valid URL: {_shown(str(exc))}", hint=example
        ) from exc
    if parts.scheme not in ("http", "https") or not parts.netloc or not parts.hostname:
        raise UsageError(
            f"{_shown(url)!r} is not an http(s) URL",
            hint="give e.g. --endpoint http://127.0.0.1:7878/query",
        )
    if parts.username or parts.password:
        raise UsageError(
            "credentials in the endpoint URL are refused (they would end up in the shell history)",
            hint=f"set {ENV_USER} and {ENV_PASSWORD} (or {ENV_TOKEN}), or add the host to ~/.netrc",
        )


def derive_gsp(query_url: str) -> str:
    """The Graph Store endpoint of a server, from its query endpoint.

    - GraphDB / RDF4J ``.../repositories/<id>`` -> ``.../repositories/<id>/rdf-graphs/service``;
    - Oxigraph ``http://host:port/query`` -> ``http://host:port/store``;
    - Fuseki ``http://host:port/<dataset>/query`` (or ``/sparql``) -> ``.../<dataset>/data``;
    - Virtuoso ``http://host:port/sparql`` -> ``http://host:port/sparql-graph-crud-auth``.

    Raises:
        UsageError: an unknown layout; give the GSP endpoint explicitly (``--gsp``).
    """
    parts = urlsplit(query_url)
    path = parts.path.rstrip("/")
    segs = [s for s in path.split("/") if s]

    def with_path(p: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, p, "", ""))

    if len(segs) >= 2 and segs[-2] == "repositories":
        return with_path(path + "/rdf-graphs/service")
    if segs == ["query"]:
        return with_path("/store")
    if len(segs) >= 2 and segs[-1] in ("query", "sparql"):
        return with_path("/" + "/".join(segs[:-1]) + "/data")
    if segs == ["sparql"]:
        return with_path("/sparql-graph-crud-auth")
    raise UsageError(
        f"cannot tell the Graph Store endpoint of {redact(query_url)}",
        hint="give it with --gsp URL (e.g. http://host:3030/ds/data for Fuseki)",
    )


def resolve_credentials(query_url: str, *, interactive: bool | None = None) -> Credentials:
    """Who to be to the server: a token (``$METAPROV_ENDPOINT_TOKEN``), else a user
    (``$METAPROV_ENDPOINT_USER``) with the password from ``$METAPROV_ENDPOINT_PASSWORD`` or the
    netrc entry of that user, else the netrc entry of the host (``$NETRC`` or ``~/.netrc``);
    without a password, one is asked for on the terminal when a server wants it (interactive use
    only). Never from the command line."""
    token = os.environ.get(ENV_TOKEN)
    if token:
        return Credentials(token=token, source=ENV_TOKEN)
    if interactive is None:
        interactive = _interactive()
    prompt = _tty_prompt if interactive else None
    host = urlsplit(query_url).hostname or ""
    entry = _netrc_entry(host)
    user = os.environ.get(ENV_USER)
    if user:
        password = os.environ.get(ENV_PASSWORD)
        if password is None and entry is not None and entry[0] == user:
            password = entry[1]
        return Credentials(user=user, password=password, source=ENV_USER, prompt=prompt)
    if entry is not None:
        return Credentials(user=entry[0], password=entry[1], source="netrc", prompt=prompt)
    return Credentials(source="none", prompt=prompt)


def _interactive() -> bool:
    import sys

    try:
        return sys.stdin.isatty() and sys.stderr.isatty() and os.path.exists("/dev/tty")
    except (AttributeError, ValueError):
        return False


def _tty_prompt(user: str, where: str) -> tuple[str, str]:
    """Ask on the terminal (the password is not echoed)."""
    import getpass

    try:
        if not user:
            with open("/dev/tty", "r+", encoding="utf-8") as tty:
                tty.write(f"user for the SPARQL server at {where}: ")
                tty.flush()
                user = tty.readline().strip()
            if not user:
                return "", ""
        password = getpass.getpass(f"password of {user} for the SPARQL server at {where}: ")
    except (OSError, EOFError, KeyboardInterrupt):
        return "", ""
    return user, password


class EndpointStore(Store):
    """A SPARQL 1.1 server over HTTP: GSP for loading/dropping graphs, the SPARQL protocol for queries.

    Every request goes through :class:`metaprov.store.http.HttpClient` (timeouts, size caps,
    same-origin redirects only, redacted messages).

    Args:
        query_url: the query endpoint.
        gsp_url: the Graph Store endpoint (default: derived, see :func:`derive_gsp`).
        timeout: the longest one request may take, in seconds, whatever the server does
            (default ``$METAPROV_ENDPOINT_TIMEOUT`` or 600).
        chunk_bytes: largest request body when loading (see :data:`DEFAULT_CHUNK_BYTES`).
        concurrency: request bodies in flight at once when loading (each a transaction of its
            own on the server); default ``$METAPROV_ENDPOINT_CONCURRENCY`` or 1.
        interactive: ask for a missing password on the terminal (default: when on a terminal).
    """

    def __init__(
        self,
        query_url: str,
        gsp_url: str | None = None,
        *,
        timeout: float | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        concurrency: int | None = None,
        interactive: bool | None = None,
    ) -> None:
        self.endpoint = Endpoint.from_url(query_url, gsp_url)
        self.location = redact(self.endpoint.query)
        if timeout is None:
            timeout = env_timeout()
        if not (timeout > 0) or timeout == float("inf"):
            raise UsageError(f"the timeout must be a positive number of seconds, not {timeout}")
        self.timeout = float(timeout)
        self.chunk_bytes = int(chunk_bytes)
        raw = concurrency if concurrency is not None else os.environ.get(ENV_CONCURRENCY) or 1
        try:
            self.concurrency = int(raw)
        except ValueError:
            self.concurrency = 0
        if not 1 <= self.concurrency <= 64:
            raise UsageError(
                f"the number of requests in flight must be 1 to 64, not {clean(str(raw), limit=20)}",
                hint=f"check {ENV_CONCURRENCY}",
            )
        self.credentials = resolve_credentials(query_url, interactive=interactive)
        self.auth_source = self.credentials.source
        #: The server is Virtuoso (told by its ``Server`` header): see :func:`_exact_doubles`.
        self.virtuoso = False
        trusted = [self.endpoint.query, self.endpoint.gsp_given]
        try:
            trusted.append(self.endpoint.gsp)
        except UsageError:
            pass
        self._http = HttpClient(
            trusted,
            self.credentials,
            read_timeout=self.timeout,
            deadline=self.timeout,
            user_agent=_user_agent(),
        )

    # --- HTTP --------------------------------------------------------------------------------
    def _request(self, method: str, url: str, *, what: str, **kw: Any) -> Answer:
        answer = self._http.request(method, url, what=what, **kw)
        if (answer.headers.get("Server") or "").startswith("Virtuoso/"):
            self.virtuoso = True
        if answer.status in (401, 403):
            word = "requires credentials" if answer.status == 401 else "refused access"
            raise StoreError(
                f"the SPARQL server at {redact(url)} {word} (HTTP {answer.status}) while {what}",
                hint=f"set {ENV_USER} and {ENV_PASSWORD} (or {ENV_TOKEN}) in the environment, or add "
                f"'machine {clean(urlsplit(url).hostname or '', limit=100)} login ... password ...' "
                "to ~/.netrc"
                + (
                    f"; the credentials given ({self.auth_source}) were not accepted"
                    if self.auth_source != "none"
                    else ""
                ),
            )
        return answer

    def _fail(self, resp: Answer, what: str, *, query: bool = False) -> None:
        body = resp.text()
        msg = (
            f"the SPARQL server at {redact(resp.url)} answered HTTP {resp.status} "
            f"{resp.reason} while {what}"
        )
        if body:
            msg += f": {body}"
        if query and resp.status == 400:
            raise QueryError(
                msg,
                hint="the server rejected the query; check its syntax and the server's SPARQL support",
            )
        hint = (
            "the server had a problem; see its log"
            if resp.status >= 500
            else "check the URL and the request"
        )
        raise StoreError(msg, hint=hint)

    # --- writing -------------------------------------------------------------------------------
    def load_chunks(self, graph: str, chunks: Iterable[bytes], *, source: str = "") -> LoadReport:
        """Replace ``graph`` on the server: one PUT with the first piece, then POSTs of the rest,
        ``self.concurrency`` of them in flight (each its own connection and transaction), then
        a count through the query endpoint to check that the server holds every triple."""
        from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

        from metaprov.store.sparql import make_term

        make_term(graph, "iri", name="graph")
        gsp = self.endpoint.gsp  # before anything is sent: a UsageError when unknown
        t0 = time.perf_counter()
        # One lookup, not a list of every graph (which Virtuoso makes from all its quads).
        replaced = self._ask(
            f"ASK {{ GRAPH {make_term(graph, 'iri', name='graph')} {{ ?s ?p ?o }} }}"
        )
        triples = 0
        requests_made = 0
        headers = {"Content-Type": _NTRIPLES}

        def send(method: str, piece: bytes, sent_before: int) -> None:
            what = f"{'replacing' if method == 'PUT' else 'appending to'} graph <{graph}>"
            resp = self._request(
                method, gsp, what=what, params={"graph": graph}, body=piece, headers=headers
            )
            if resp.status >= 300:
                if method != "PUT":
                    log.warning(
                        "graph <%s> is incomplete on the server after a failed append", graph
                    )
                    what += (
                        f" (after {sent_before:,} triples; the graph is incomplete: load it again)"
                    )
                self._fail(resp, what)

        pieces = split_lines(chunks, self.chunk_bytes)
        first = next(pieces, b"")  # an empty graph still replaces what was there
        send("PUT", first, 0)
        triples += first.count(b"\n")
        requests_made += 1
        pending: set[Future[None]] = set()
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            try:
                for piece in pieces:
                    while len(pending) >= self.concurrency:  # at most this many bodies in memory
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for f in done:
                            f.result()
                    pending.add(pool.submit(send, "POST", piece, triples))
                    triples += piece.count(b"\n")
                    requests_made += 1
                for f in pending:
                    f.result()
            finally:
                for f in pending:
                    f.cancel()
        self._check_stored(graph, triples, gsp)
        return LoadReport(graph, triples, time.perf_counter() - t0, replaced, source, requests_made)

    def _check_stored(self, graph: str, sent: int, gsp: str) -> None:
        """Ask the query endpoint how many triples the graph holds now: a server (or a wrong
        --gsp URL) may accept every request and keep nothing."""
        held = self.count(graph)
        if held != sent:
            raise StoreError(
                f"the server accepted {sent:,} triples for <{graph}> at {redact(gsp)}, but its "
                f"query endpoint {redact(self.endpoint.query)} finds {held:,} in that graph",
                hint="check that --gsp and --endpoint are the Graph Store and query endpoints of "
                "the same dataset, and that the server keeps what it is sent; then load again",
            )

    def drop(self, graph: str) -> bool:
        resp = self._request(
            "DELETE", self.endpoint.gsp, what=f"dropping graph <{graph}>", params={"graph": graph}
        )
        if resp.status == 404:
            return False
        if resp.status >= 300:
            self._fail(resp, f"dropping graph <{graph}>")
        return True

    # --- reading -------------------------------------------------------------------------------
    def _post_query(self, text: str, accept: str, rows: _Rows | None = None) -> Answer:
        """Run a query; ``rows`` counts the answer's rows as it arrives (by default, in the
        format asked for: the cap holds however the answer is read)."""
        if rows is None:
            fmt = {_RESULTS_JSON: "json", "text/csv": "csv", _NTRIPLES: "nt"}.get(accept, "nt")
            rows = _Rows(fmt, redact(self.endpoint.query))
        resp = self._request(
            "POST",
            self.endpoint.query,
            what="running a query",
            body=urlencode({"query": text}).encode("ascii"),
            headers={"Accept": accept, "Content-Type": "application/x-www-form-urlencoded"},
            rows=rows,
        )
        if resp.status >= 300:
            self._fail(resp, "running a query", query=True)
        return resp

    def _select_json(self, text: str) -> dict[str, Any]:
        if self.virtuoso:
            exact = _with_lexical_forms(text)
            if exact is not None:
                return _exact_doubles(self._select_json_once(exact[0]), exact[1])
        data = self._select_json_once(text)
        if self.virtuoso and _has_doubles(data):
            exact = _with_lexical_forms(text)
            if exact is not None:  # learnt from this very answer that the server is Virtuoso
                return _exact_doubles(self._select_json_once(exact[0]), exact[1])
        return data

    def _select_json_once(self, text: str) -> dict[str, Any]:
        where = redact(self.endpoint.query)
        rows = _Rows("json", where)
        resp = self._post_query(text, _RESULTS_JSON, rows)
        if rows.unread and not rows.cannot_exceed(len(resp.body)):
            # no streaming parser counted its rows, and it could hold more than the cap: not
            # read into Python objects (about 8 bytes of memory a byte)
            raise StoreError(
                f"the SPARQL server at {where} sent {len(resp.body):,} bytes that are not SPARQL "
                "JSON results with their head first (whose rows metaprov counts as they "
                f"arrive); they end with: {clean(resp.body[-200:].decode('utf-8', 'replace'), limit=200)}",
                hint="is this URL the query endpoint? (a server that fails while sending cuts "
                "its answer off; its message is at the end)",
            )
        try:
            data = json.loads(resp.body)
        except RecursionError as exc:
            raise StoreError(
                f"the SPARQL server at {where} sent JSON nested too deeply to read",
                hint="this is not a SPARQL JSON result; is the URL the query endpoint?",
            ) from exc
        except ValueError as exc:
            ctype = resp.content_type or "?"
            if "sparql-results+json" in ctype:
                # Servers stream answers: an error during evaluation cuts the JSON off, and the
                # server's message is what follows the cut.
                tail = clean(resp.body[-300:].decode("utf-8", "replace"), limit=300)
                raise QueryError(
                    f"the SPARQL server at {where} failed while sending the answer: {tail}",
                    hint="the query started but could not finish on the server; see the message",
                ) from exc
            raise StoreError(
                f"the SPARQL server at {where} did not answer with SPARQL JSON results",
                hint=f"is this URL the query endpoint? (Content-Type was {ctype})",
            ) from exc
        check_results(data, where)
        return dict(data)

    def _ask(self, text: str) -> bool:
        data = self._select_json(text)
        if "boolean" in data:
            return bool(data["boolean"])
        # Virtuoso 7.2 answers ASK as a one-row SELECT of ?__ASK_RETVAL (1 or 0).
        rows = data.get("results", {}).get("bindings", [])
        if data.get("head", {}).get("vars") == ["__ASK_RETVAL"] and len(rows) <= 1:
            return bool(rows) and rows[0].get("__ASK_RETVAL", {}).get("value") in ("1", "true")
        raise StoreError(
            f"the SPARQL server at {redact(self.endpoint.query)} answered an ASK query without "
            "true or false",
            hint="is this URL the query endpoint?",
        )

    def _select_csv(self, text: str) -> bytes:
        if not self.virtuoso:
            self._probe()
        exact = _with_lexical_forms(text, only=True) if self.virtuoso else None
        if exact is None:
            return self._post_query(text, "text/csv").body
        # Virtuoso writes doubles with 6 digits in CSV too: ask for STR() of every column (the
        # same text as CSV for IRIs and literals) and give the columns their own names back.
        body = self._post_query(exact[0], "text/csv").body
        head, nl, rest = body.partition(b"\n")
        return head.replace(_LEX.encode(), b"") + nl + rest

    def _probe(self) -> None:
        """One small query, once: tells a Virtuoso server by its Server header."""
        if not getattr(self, "_probed", False):
            self._probed = True
            self._post_query("ASK {}", _RESULTS_JSON)

    def _construct(self, text: str) -> pd.DataFrame:
        import pyoxigraph as ox

        resp = self._post_query(text, _NTRIPLES)
        try:
            return _triples_frame(ox.parse(resp.body, ox.RdfFormat.N_TRIPLES))
        except SyntaxError as exc:
            raise StoreError(
                f"the SPARQL server at {redact(self.endpoint.query)} sent invalid N-Triples: "
                f"{clean(str(exc), limit=300)}"
            ) from exc

    def graphs(self) -> list[str]:
        # ``GRAPH ?g { }`` lists the graphs without reading them (Oxigraph, Fuseki), but
        # Virtuoso 7.2 answers it with one unbound row: there, ask for the graphs of the quads.
        data = self._select_json("SELECT DISTINCT ?g WHERE { GRAPH ?g { } }")
        if self.virtuoso or any("g" not in row for row in data["results"]["bindings"]):
            data = self._select_json("SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
        df = results_to_frame(data)
        return sorted(str(g) for g in df["g"].dropna()) if "g" in df else []

    def close(self) -> None:
        self._http.close()


_TERM_TYPES = frozenset({"uri", "literal", "typed-literal", "bnode", "triple"})


_DOUBLES = frozenset({XSD + "double", XSD + "float"})
_LEX = "__metaprov_lexical_"


def _with_lexical_forms(text: str, *, only: bool = False) -> tuple[str, list[str]] | None:
    """The query wrapped so that it also returns ``STR(?v)`` (as ``?__metaprov_lexical_v``) of
    every variable it returns, in the same order; or None when it cannot be (``SELECT *``, an
    ORDER BY on something it does not return).

    Virtuoso 7.2 writes ``xsd:double`` values with 6 significant digits in every SELECT result
    format (``0.0794634`` for ``0.079463354231058``; upstream issue openlink/virtuoso-opensource
    #1006), while ``STR()`` of the same value gives all its digits: asking for both and taking
    the digits from the second keeps doubles exact, with one query. (Virtuoso refuses ``STR()``
    of an aggregate's name in the same projection, hence the sub-select.)"""
    from metaprov.store.sparql import _matching_close, _where_open, projection, tokens

    toks = list(tokens(text))
    i = next(
        (k for k, t in enumerate(toks) if t.kind == "word" and t.text.upper() == "SELECT"), None
    )
    if i is None:
        return None
    names = projection(text)
    if not names or any(t.text == "*" for t in toks[i + 1 : i + 3]):
        return None
    where = _where_open(toks, "SELECT")
    if where is None:
        return None
    close = _matching_close(toks, where)
    order = next(
        (
            k
            for k in range(close + 1, len(toks))
            if toks[k].kind == "word" and toks[k].text.upper() in ("ORDER", "LIMIT", "OFFSET")
        ),
        None,
    )
    modifiers = text[toks[order].start :] if order is not None else ""
    if order is not None and any(t.kind == "var" and t.text[1:] not in names for t in toks[order:]):
        return None
    if any(t.kind == "word" and t.text.upper() == "VALUES" for t in toks[close + 1 :]):
        return None
    inner = text[toks[i].start :]
    extra = " ".join(
        (f"(STR(?{n}) AS ?{_LEX}{n})" if only else f"?{n} (STR(?{n}) AS ?{_LEX}{n})") for n in names
    )
    wrapped = f"{text[: toks[i].start]}SELECT {extra}\nWHERE {{\n{inner}\n}}\n{modifiers}"
    return wrapped, names


def _has_doubles(data: dict[str, Any]) -> bool:
    for row in data.get("results", {}).get("bindings", []):
        for term in row.values():
            if term.get("datatype") in _DOUBLES:
                return True
    return False


def _exact_doubles(data: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Results of :func:`_with_lexical_forms`' query: each double takes its lexical form from its
    companion; the companions are removed."""
    head = data.get("head", {})
    head["vars"] = [v for v in head.get("vars", []) if not v.startswith(_LEX)]
    for row in data.get("results", {}).get("bindings", []):
        for name in names:
            lex = row.pop(_LEX + name, None)
            term = row.get(name)
            if term is not None and lex is not None and term.get("datatype") in _DOUBLES:
                term["value"] = lex.get("value", term.get("value"))
        for key in [k for k in row if k.startswith(_LEX)]:
            del row[key]
    return data


def check_results(data: Any, where: str) -> None:
    """Refuse SPARQL JSON results of the wrong shape (a server's answer is untrusted input).

    Raises:
        StoreError: naming what is wrong (``head.vars`` not a list of names, ``bindings`` not a
            list of objects, a term without a string ``type``/``value``, ...).
    """

    def bad(what: str) -> StoreError:
        return StoreError(
            f"the SPARQL server at {where} sent malformed SPARQL JSON results: {what}",
            hint="the server is not answering SPARQL 1.1 JSON results; is the URL the query endpoint?",
        )

    if not isinstance(data, dict):
        raise bad(f"the answer is a JSON {type(data).__name__}, not an object")
    if "boolean" in data:
        if not isinstance(data["boolean"], bool):
            raise bad("'boolean' is not true or false")
        return
    head, results = data.get("head"), data.get("results")
    if not isinstance(head, dict) or not isinstance(head.get("vars", []), list):
        raise bad("'head' has no list 'vars'")
    if not all(isinstance(v, str) for v in head.get("vars", [])):
        raise bad("'head.vars' holds something other than variable names")
    if not isinstance(results, dict) or not isinstance(results.get("bindings"), list):
        raise bad("'results.bindings' is not a list")
    for i, row in enumerate(results["bindings"]):
        if not isinstance(row, dict):
            raise bad(f"row {i + 1} of 'results.bindings' is not an object")
        for name, term in row.items():
            if (
                not isinstance(term, dict)
                or term.get("type") not in _TERM_TYPES
                or not isinstance(term.get("value"), (str, dict))
                or not isinstance(term.get("datatype", ""), str)
                or not isinstance(term.get("xml:lang", ""), str)
            ):
                raise bad(f"row {i + 1}, variable ?{clean(str(name), limit=60)} is not an RDF term")


def _netrc_entry(host: str) -> tuple[str, str] | None:
    """(login, password) of ``host`` in ``$NETRC`` or ``~/.netrc``, or None."""
    import netrc

    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        if not os.path.isfile(path):
            return None
        found = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError, UnicodeDecodeError):
        return None
    if found is None:
        return None
    login, _account, password = found
    return (login or "", password or "")


def _user_agent() -> str:
    from metaprov._version import __version__

    return f"metaprov/{__version__}"
