"""Any SPARQL 1.1 server over HTTP: Graph Store HTTP Protocol for writes, SPARQL protocol for queries.

Input: N-Triples byte chunks per named graph, SPARQL text. Output: HTTP requests of bounded size,
query results. Credentials come from the environment or ``~/.netrc``, never the command line.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import pandas as pd

from metaprov.errors import QueryError, StoreError, UsageError
from metaprov.store.base import (
    _NTRIPLES,
    _RESULTS_JSON,
    DEFAULT_CHUNK_BYTES,
    ENV_PASSWORD,
    ENV_TOKEN,
    ENV_USER,
    LoadReport,
    Store,
    _triples_frame,
    results_to_frame,
    split_lines,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger("metaprov")


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


def _check_url(url: str) -> None:
    example = "give e.g. --endpoint http://127.0.0.1:7878/query"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise UsageError(
            f"{url!r} holds spaces or control characters",
            hint="percent-encode them (a space is %20); " + example,
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise UsageError(f"{url!r} is not a valid URL: {exc}", hint=example) from exc
    if parts.scheme not in ("http", "https") or not parts.netloc or not parts.hostname:
        raise UsageError(
            f"{url!r} is not an http(s) URL",
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
        f"cannot tell the Graph Store endpoint of {query_url}",
        hint="give it with --gsp URL (e.g. http://host:3030/ds/data for Fuseki)",
    )


class _BearerAuth:
    """``Authorization: Bearer <token>`` on every request (a requests auth callable)."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, request: Any) -> Any:
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request

    def __repr__(self) -> str:  # never show the token
        return "_BearerAuth(<hidden>)"


class EndpointStore(Store):
    """A SPARQL 1.1 server over HTTP: GSP for loading/dropping graphs, the SPARQL protocol for queries.

    Args:
        query_url: the query endpoint.
        gsp_url: the Graph Store endpoint (default: derived, see :func:`derive_gsp`).
        timeout: seconds to wait for the server to answer a request.
        chunk_bytes: largest request body when loading (see :data:`DEFAULT_CHUNK_BYTES`).
    """

    def __init__(
        self,
        query_url: str,
        gsp_url: str | None = None,
        *,
        timeout: float = 600.0,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> None:
        import requests

        self.endpoint = Endpoint.from_url(query_url, gsp_url)
        self.location = self.endpoint.query
        self.timeout = timeout
        self.chunk_bytes = int(chunk_bytes)
        self._session = requests.Session()
        self._session.headers["User-Agent"] = _user_agent()
        user, password, token = (
            os.environ.get(ENV_USER),
            os.environ.get(ENV_PASSWORD),
            os.environ.get(ENV_TOKEN),
        )
        if token:
            # As an auth object, not a bare header: requests would otherwise let a ~/.netrc
            # entry for the host replace it with Basic auth.
            self._session.auth = _BearerAuth(token)
            self.auth_source = ENV_TOKEN
        elif user:
            self._session.auth = (user, password or "")
            self.auth_source = ENV_USER
        else:
            # requests reads ~/.netrc (or $NETRC) for the host when no auth is set.
            self.auth_source = "netrc" if _netrc_has(query_url) else "none"

    # --- HTTP --------------------------------------------------------------------------------
    def _request(self, method: str, url: str, *, what: str, **kw: Any) -> Any:
        import requests

        kw.setdefault("timeout", (10.0, self.timeout))
        try:
            resp = self._session.request(method, url, **kw)
        except requests.exceptions.ConnectionError as exc:
            raise StoreError(
                f"cannot reach the SPARQL server at {url} ({what}): {_short(exc)}",
                hint="is the server running, and is the URL (host, port, path) right?",
            ) from exc
        except requests.exceptions.Timeout as exc:
            raise StoreError(
                f"the SPARQL server at {url} did not answer within {self.timeout:.0f} s ({what})",
                hint="the server may be overloaded; try again, or load smaller pieces",
            ) from exc
        except requests.exceptions.RequestException as exc:
            raise StoreError(f"request to {url} failed ({what}): {_short(exc)}") from exc
        if resp.status_code in (401, 403):
            word = "requires credentials" if resp.status_code == 401 else "refused access"
            raise StoreError(
                f"the SPARQL server at {url} {word} (HTTP {resp.status_code}) while {what}",
                hint=f"set {ENV_USER} and {ENV_PASSWORD} (or {ENV_TOKEN}) in the environment, or add "
                f"'machine {urlsplit(url).hostname} login ... password ...' to ~/.netrc"
                + (
                    "; the credentials given were not accepted"
                    if self.auth_source != "none"
                    else ""
                ),
            )
        return resp

    def _fail(self, resp: Any, what: str, *, query: bool = False) -> None:
        body = (resp.text or "").strip().replace("\n", " ")
        msg = f"the SPARQL server at {resp.url} answered HTTP {resp.status_code} {resp.reason} while {what}"
        if body:
            msg += f": {body[:500]}"
        if query and resp.status_code == 400:
            raise QueryError(
                msg,
                hint="the server rejected the query; check its syntax and the server's SPARQL support",
            )
        hint = (
            "the server had a problem; see its log"
            if resp.status_code >= 500
            else "check the URL and the request"
        )
        raise StoreError(msg, hint=hint)

    # --- writing -------------------------------------------------------------------------------
    def load_chunks(self, graph: str, chunks: Iterable[bytes], *, source: str = "") -> LoadReport:
        from metaprov.store.sparql import make_term

        make_term(graph, "iri", name="graph")
        gsp = self.endpoint.gsp  # before anything is sent: a UsageError when unknown
        t0 = time.perf_counter()
        replaced = graph in set(self.graphs())
        triples = 0
        requests_made = 0
        first = True
        headers = {"Content-Type": _NTRIPLES}
        for piece in split_lines(chunks, self.chunk_bytes):
            triples += piece.count(b"\n")
            method = "PUT" if first else "POST"
            what = f"{'replacing' if first else 'appending to'} graph <{graph}>"
            resp = self._request(
                method,
                gsp,
                what=what,
                params={"graph": graph},
                data=piece,
                headers=headers,
            )
            requests_made += 1
            if resp.status_code >= 300:
                if not first:
                    log.warning(
                        "graph <%s> is incomplete on the server after a failed append", graph
                    )
                self._fail(
                    resp,
                    what
                    + (
                        ""
                        if first
                        else f" (after {triples} triples; the graph is incomplete: load it again)"
                    ),
                )
            first = False
        if first:
            # An empty graph still replaces what was there.
            resp = self._request(
                "PUT",
                self.endpoint.gsp,
                what=f"replacing graph <{graph}>",
                params={"graph": graph},
                data=b"",
                headers=headers,
            )
            requests_made += 1
            if resp.status_code >= 300:
                self._fail(resp, f"replacing graph <{graph}>")
        self._check_stored(graph, triples, gsp)
        return LoadReport(graph, triples, time.perf_counter() - t0, replaced, source, requests_made)

    def _check_stored(self, graph: str, sent: int, gsp: str) -> None:
        """Ask the query endpoint how many triples the graph holds now: a server (or a wrong
        --gsp URL) may accept every request and keep nothing."""
        held = self.count(graph)
        if held != sent:
            raise StoreError(
                f"the server accepted {sent:,} triples for <{graph}> at {gsp}, but its query "
                f"endpoint {self.endpoint.query} finds {held:,} in that graph",
                hint="check that --gsp and --endpoint are the Graph Store and query endpoints of "
                "the same dataset, and that the server keeps what it is sent; then load again",
            )

    def drop(self, graph: str) -> bool:
        resp = self._request(
            "DELETE", self.endpoint.gsp, what=f"dropping graph <{graph}>", params={"graph": graph}
        )
        if resp.status_code == 404:
            return False
        if resp.status_code >= 300:
            self._fail(resp, f"dropping graph <{graph}>")
        return True

    # --- reading -------------------------------------------------------------------------------
    def _post_query(self, text: str, accept: str) -> Any:
        resp = self._request(
            "POST",
            self.endpoint.query,
            what="running a query",
            data={"query": text},
            headers={"Accept": accept, "Content-Type": "application/x-www-form-urlencoded"},
        )
        if resp.status_code >= 300:
            self._fail(resp, "running a query", query=True)
        return resp

    def _select_json(self, text: str) -> dict[str, Any]:
        resp = self._post_query(text, _RESULTS_JSON)
        try:
            return dict(resp.json())
        except ValueError as exc:
            ctype = resp.headers.get("Content-Type", "?")
            if "sparql-results+json" in ctype:
                # Servers stream answers: an error during evaluation cuts the JSON off, and the
                # server's message is what follows the cut.
                tail = (resp.text or "")[-300:].replace("\n", " ")
                raise QueryError(
                    f"the SPARQL server at {self.endpoint.query} failed while sending the answer: {tail}",
                    hint="the query started but could not finish on the server; see the message",
                ) from exc
            raise StoreError(
                f"the SPARQL server at {self.endpoint.query} did not answer with SPARQL JSON results",
                hint=f"is this URL the query endpoint? (Content-Type was {ctype})",
            ) from exc

    def _ask(self, text: str) -> bool:
        return bool(self._select_json(text).get("boolean"))

    def _select_csv(self, text: str) -> bytes:
        return bytes(self._post_query(text, "text/csv").content)

    def _construct(self, text: str) -> pd.DataFrame:
        import pyoxigraph as ox

        resp = self._post_query(text, _NTRIPLES)
        try:
            return _triples_frame(ox.parse(resp.content, ox.RdfFormat.N_TRIPLES))
        except SyntaxError as exc:
            raise StoreError(
                f"the SPARQL server at {self.endpoint.query} sent invalid N-Triples: {exc}"
            ) from exc

    def graphs(self) -> list[str]:
        df = results_to_frame(self._select_json("SELECT DISTINCT ?g WHERE { GRAPH ?g { } }"))
        return sorted(str(g) for g in df["g"]) if "g" in df else []

    def close(self) -> None:
        self._session.close()


def _short(exc: BaseException) -> str:
    text = str(exc)
    # urllib3 errors repeat the whole pool description; the last reason is what matters.
    if "Caused by" in text or "Failed to establish" in text:
        for marker in (
            "Connection refused",
            "Name or service not known",
            "No route to host",
            "timed out",
        ):
            if marker in text:
                return marker
    return text[:300]


def _netrc_has(url: str) -> bool:
    try:
        import netrc

        path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
        if not os.path.exists(path):
            return False
        return netrc.netrc(path).authenticators(urlsplit(url).hostname or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _user_agent() -> str:
    from metaprov._version import __version__

    return f"metaprov/{__version__}"
