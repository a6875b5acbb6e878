"""The one HTTP client policy of metaprov: every request to a SPARQL server goes through here.

Input: a method, a URL, a body, the credentials of the endpoint. Output: the status, headers and
body of the answer, or a :class:`~metaprov.errors.StoreError` that says what went wrong in words
that never hold a secret and never hold raw server bytes.

The policy (see docs/reliability.md, "SPARQL endpoint client"):

- **Timeouts.** Connecting may take ``connect_timeout`` seconds; the server may stay silent for
  ``read_timeout`` seconds at a time; the whole request (sending, waiting, reading the answer)
  must finish within ``deadline`` seconds, however slowly the server drips bytes. A watchdog
  closes the socket when the deadline passes, wherever the client is blocked.
- **Size caps.** An answer is read into memory up to ``max_answer_bytes`` (error bodies up to
  64 KiB); a larger answer is an error, not a MemoryError.
- **Redirects.** Followed only within the same origin (scheme, host, port), at most 5; a
  redirect to another origin is an error naming both (a Graph Store PUT would otherwise send a
  run's data, and the credentials, to whoever the server points at). A request with a body is
  followed only by 307/308 (same method, same body, same origin); never re-sent as a GET.
- **Credentials** go only to the origins of the configured endpoints: a bearer token, or a user
  and password for HTTP Basic or Digest (whichever the server asks for), from the environment, a
  netrc file or an interactive prompt. Never from the command line.
- **Redaction and sanitising.** Every URL in a message passes through :func:`redact` (no
  ``user:password@``, no value of a secret-looking query parameter); every piece of server text
  in a message passes through :func:`clean` (no terminal escape sequences or control
  characters, bounded length).
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import http.client
import io
import os
import re
import socket
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from email.message import Message
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

from metaprov.errors import MetaprovError, StoreError

#: Largest answer read into memory (bytes); ``METAPROV_ENDPOINT_MAX_BYTES`` overrides it.
DEFAULT_MAX_ANSWER_BYTES = 1 << 30
#: Largest error body read (the message shows at most 500 characters of it).
MAX_ERROR_BYTES = 64 * 1024
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Longest silence of a server within one request (seconds): also what ``--timeout`` sets.
DEFAULT_READ_TIMEOUT = 600.0
ENV_TIMEOUT = "METAPROV_ENDPOINT_TIMEOUT"
ENV_MAX_BYTES = "METAPROV_ENDPOINT_MAX_BYTES"
MAX_REDIRECTS = 5

# ---------------------------------------------------------------------------------------------
# Redaction and sanitising
# ---------------------------------------------------------------------------------------------

_USERINFO = re.compile(r"(?<=//)[^/?#\s]*@|(?<=//)[^\s@/]*:[^\s@]*@")
_PARAM = re.compile(r"([?&;])([^=&;#\s]*)=([^&;#\s]*)")
_SECRET_NAME = re.compile(
    r"(?i)(token|key|secret|pass|pwd|auth|sig|credential|session|cookie|bearer|jwt|sas|code)"
)


def redact(text: str) -> str:
    """``text`` (a URL, valid or not, or a message holding URLs) without its secrets.

    ``user:password@`` becomes ``***@``; the value of a query parameter whose name looks secret
    (token, api_key, password, sig, ...) becomes ``***``. Also control characters go (a URL is
    printed on a terminal).

    >>> redact("http://alice:pw@h:1/q?token=abc&graph=g")
    'http://***@h:1/q?token=***&graph=g'
    """
    text = _USERINFO.sub("***@", str(text))

    def param(m: re.Match[str]) -> str:
        name = m.group(2)
        return f"{m.group(1)}{name}=***" if _SECRET_NAME.search(name) else m.group(0)

    return clean(_PARAM.sub(param, text), limit=2000)


_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, screen clearing
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks, clipboard writes
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b.?"  # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)


def clean(text: str, *, limit: int = 500) -> str:
    """Server text made safe to print: escape sequences removed, other control and format
    characters (bidi overrides included) shown as ``?``, whitespace runs as one space, at most
    ``limit`` characters (``...`` marks a cut)."""
    text = _ESCAPES.sub("", str(text))
    out = []
    for ch in text:
        if ch in "\t\n\r ":
            out.append(" ")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            out.append("?")
        else:
            out.append(ch)
    flat = re.sub(r" {2,}", " ", "".join(out)).strip()
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, the port made explicit."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def _origin_text(url: str) -> str:
    scheme, host, port = origin(url)
    return redact(f"{scheme}://{host}:{port}")


# ---------------------------------------------------------------------------------------------
# Credentials
# ---------------------------------------------------------------------------------------------


@dataclass
class Credentials:
    """Who metaprov is to a server. ``repr`` never shows the secrets."""

    user: str = ""
    #: None: not given (asked for with ``prompt`` when a server wants it, else empty).
    password: str | None = field(default=None, repr=False)
    token: str = field(default="", repr=False)
    source: str = "none"
    #: Asks for a password (or user and password) when a server wants one and none was given:
    #: a callable returning ``(user, password)``, or None (never ask).
    prompt: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Credentials(user={self.user!r}, source={self.source!r}, secrets=<hidden>)"


def _hash(algorithm: str, text: str) -> str:
    name = {"MD5": "md5", "MD5-SESS": "md5", "SHA-256": "sha256", "SHA-256-SESS": "sha256"}[
        algorithm
    ]
    return hashlib.new(name, text.encode("utf-8")).hexdigest()


def _parse_challenges(headers: list[str]) -> dict[str, dict[str, str]]:
    """``WWW-Authenticate`` headers -> scheme (lower case) -> its parameters."""
    from urllib.request import parse_http_list, parse_keqv_list

    out: dict[str, dict[str, str]] = {}
    for value in headers:
        scheme, _, rest = value.strip().partition(" ")
        try:
            items = [i for i in parse_http_list(rest) if "=" in i]
            out[scheme.lower()] = {k.lower(): v for k, v in parse_keqv_list(items).items()}
        except ValueError:
            out[scheme.lower()] = {}
    return out


class _Digest:
    """RFC 7616 HTTP Digest (MD5, SHA-256 and their -sess forms; qop ``auth`` or none)."""

    def __init__(self, challenge: dict[str, str]) -> None:
        self.chal = challenge
        self.algorithm = (challenge.get("algorithm") or "MD5").upper()
        if self.algorithm not in ("MD5", "MD5-SESS", "SHA-256", "SHA-256-SESS"):
            raise StoreError(
                f"the server asks for HTTP Digest with algorithm {clean(self.algorithm, limit=40)}, "
                "which metaprov does not support",
                hint="use MD5 or SHA-256 on the server, or HTTP Basic over https",
            )
        qops = [q.strip() for q in challenge.get("qop", "").split(",") if q.strip()]
        if qops and "auth" not in qops:
            raise StoreError(
                f"the server asks for HTTP Digest with qop {clean(','.join(qops), limit=40)}, "
                "which metaprov does not support"
            )
        self.qop = "auth" if qops else ""
        self.count = 0
        self.lock = threading.Lock()

    def header(self, method: str, uri: str, user: str, password: str) -> str:
        c = self.chal
        realm, nonce = c.get("realm", ""), c.get("nonce", "")
        with self.lock:
            self.count += 1
            nc = f"{self.count:08x}"
        cnonce = hashlib.sha256(os.urandom(16)).hexdigest()[:16]
        ha1 = _hash(self.algorithm, f"{user}:{realm}:{password}")
        if self.algorithm.endswith("-SESS"):
            ha1 = _hash(self.algorithm, f"{ha1}:{nonce}:{cnonce}")
        ha2 = _hash(self.algorithm, f"{method}:{uri}")
        if self.qop:
            resp = _hash(self.algorithm, f"{ha1}:{nonce}:{nc}:{cnonce}:{self.qop}:{ha2}")
        else:
            resp = _hash(self.algorithm, f"{ha1}:{nonce}:{ha2}")

        def q(v: str) -> str:
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

        parts = [
            f"username={q(user)}",
            f"realm={q(realm)}",
            f"nonce={q(nonce)}",
            f"uri={q(uri)}",
            f"response={q(resp)}",
            f"algorithm={self.algorithm}",
        ]
        if "opaque" in c:
            parts.append(f"opaque={q(c['opaque'])}")
        if self.qop:
            parts += [f"qop={self.qop}", f"nc={nc}", f"cnonce={q(cnonce)}"]
        return "Digest " + ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------------------------


@dataclass
class Answer:
    """One HTTP answer: status, reason (cleaned), headers, body (at most the cap), final URL."""

    status: int
    reason: str
    headers: Message
    body: bytes
    url: str

    @property
    def content_type(self) -> str:
        return clean(self.headers.get("Content-Type", "") or "", limit=100)

    def text(self, limit: int = 500) -> str:
        """The body as printable text (for messages)."""
        return clean(self.body.decode("utf-8", "replace"), limit=limit)


class _Timer:
    """Closes a connection's socket when the request's deadline passes."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.fired = False
        self._conn = conn
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


#: Set by the command line's ``--timeout`` for the command it runs.
TIMEOUT_OVERRIDE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "metaprov_endpoint_timeout", default=None
)


def env_timeout(default: float = DEFAULT_READ_TIMEOUT) -> float:
    """The request time limit: ``--timeout`` of the running command, else
    ``$METAPROV_ENDPOINT_TIMEOUT`` (seconds) when set, else ``default``."""
    given = TIMEOUT_OVERRIDE.get()
    if given is not None:
        return given
    raw = os.environ.get(ENV_TIMEOUT)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        from metaprov.errors import UsageError

        raise UsageError(
            f"{ENV_TIMEOUT}={clean(raw, limit=40)} is not a positive number of seconds"
        )
    return value


def env_max_bytes() -> int:
    raw = os.environ.get(ENV_MAX_BYTES)
    if not raw:
        return DEFAULT_MAX_ANSWER_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        from metaprov.errors import UsageError

        raise UsageError(
            f"{ENV_MAX_BYTES}={clean(raw, limit=40)} is not a positive number of bytes"
        )
    return value


class _Body(io.RawIOBase):
    """An answer's body as a file: read in pieces of at most 1 MiB, each kept in :attr:`buf`;
    it ends early (as if the body ended) when the deadline passed or the cap is exceeded
    (:attr:`over`; an error body is cut at the cap instead, ``keep_cut``)."""

    def __init__(
        self, resp: http.client.HTTPResponse, cap: int, timer: _Timer, *, keep_cut: bool
    ) -> None:
        super().__init__()
        self.buf = bytearray()
        self.over = False
        self.error: BaseException | None = None
        self._resp, self._cap, self._timer, self._keep_cut = resp, cap, timer, keep_cut
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._done:
            return 0
        try:
            chunk = self._resp.read1(min(len(b), 1 << 20))
        except (OSError, http.client.HTTPException) as exc:
            # kept for the caller: a parser reading this file would hide what went wrong
            self.error, self._done = exc, True
            return 0
        if self._timer.fired or not chunk:
            self._done = True
            return 0
        self.buf += chunk
        if len(self.buf) > self._cap:
            self._done = True
            if self._keep_cut:
                del self.buf[self._cap :]
                self._resp.close()
            else:
                self.over = True
            return 0
        b[: len(chunk)] = chunk
        return len(chunk)

    def drain(self) -> None:
        """Read what is left of the body (under the same cap and deadline)."""
        scratch = bytearray(1 << 20)
        while self.readinto(scratch):
            pass


class RowCounter:
    """Counts the rows of an answer while it is read (:meth:`count` reads the body as a file
    and raises once the rows are too many); :meth:`cannot_exceed` says when an answer of a
    known size cannot hold too many (then nothing is counted)."""

    def cannot_exceed(self, size: int) -> bool:
        return False

    def count(self, body: io.RawIOBase) -> None:
        raise NotImplementedError


class HttpClient:
    """Requests under the policy above. Thread-safe: one kept-alive connection per thread and
    origin.

    Args:
        trusted: URLs whose origins may receive the credentials (the configured endpoints).
        credentials: what to authenticate with (nothing by default).
        read_timeout: longest silence of the server, in seconds.
        deadline: longest request, in seconds (default: ``read_timeout``).
        max_answer_bytes: largest answer body read.
    """

    def __init__(
        self,
        trusted: list[str],
        credentials: Credentials | None = None,
        *,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        deadline: float | None = None,
        max_answer_bytes: int | None = None,
        user_agent: str = "metaprov",
    ) -> None:
        self.trusted = {origin(u) for u in trusted if u}
        self.credentials = credentials or Credentials()
        self.read_timeout = float(read_timeout)
        self.connect_timeout = min(float(connect_timeout), self.read_timeout)
        self.deadline = float(deadline) if deadline else self.read_timeout
        self.max_answer_bytes = int(max_answer_bytes or env_max_bytes())
        self.user_agent = user_agent
        self._local = threading.local()
        self._scheme = ""  # "basic" or "digest" once a server asked for it
        self._digest: _Digest | None = None
        self._lock = threading.Lock()

    # --- connections -------------------------------------------------------------------------
    def _conn(self, key: tuple[str, str, int]) -> http.client.HTTPConnection:
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
        conn = pool.get(key)
        if conn is None:
            scheme, host, port = key
            cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            conn = cls(host, port, timeout=self.connect_timeout)
            pool[key] = conn
        return conn

    def _forget(self, key: tuple[str, str, int]) -> None:
        pool = getattr(self._local, "pool", {})
        conn = pool.pop(key, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for key in list(getattr(self._local, "pool", {})):
            self._forget(key)

    # --- authentication ----------------------------------------------------------------------
    def _auth_header(self, method: str, url: str) -> str | None:
        if origin(url) not in self.trusted:
            return None
        cred = self.credentials
        if cred.token:
            return f"Bearer {cred.token}"
        if not cred.user:
            return None
        if self._scheme == "digest" and self._digest is not None:
            parts = urlsplit(url)
            uri = parts.path + ("?" + parts.query if parts.query else "")
            return self._digest.header(method, uri or "/", cred.user, cred.password or "")
        if self._scheme == "basic":
            raw = f"{cred.user}:{cred.password or ''}".encode()
            return "Basic " + base64.b64encode(raw).decode("ascii")
        return None

    def _challenged(self, answer: Answer, url: str) -> bool:
        """A 401: pick the scheme the server asks for (asking for a password when none was
        given and a prompt is allowed). True when the request should be sent again."""
        cred = self.credentials
        if origin(url) not in self.trusted or cred.token:
            return False
        chal = _parse_challenges(answer.headers.get_all("WWW-Authenticate") or [])
        with self._lock:
            if "digest" in chal:
                stale = chal["digest"].get("stale", "").lower() == "true"
                retry = self._scheme != "digest" or stale
                self._scheme, self._digest = "digest", _Digest(chal["digest"])
            elif "basic" in chal:
                retry = self._scheme != "basic"
                self._scheme = "basic"
            else:
                return False
        if not retry:
            return False
        if not cred.user or cred.password is None:
            if cred.prompt is None:
                return bool(cred.user)
            user, password = cred.prompt(cred.user, _origin_text(url))
            if not user:
                return False
            cred.user, cred.password, cred.source = user, password, "prompt"
        return True

    # --- requests ----------------------------------------------------------------------------
    def request(
        self,
        method: str,
        url: str,
        *,
        what: str,
        params: dict[str, str] | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        rows: RowCounter | None = None,
    ) -> Answer:
        """Send one request (following same-origin redirects, answering one auth challenge).

        ``rows``: counts the rows of a successful answer while it is read (see
        :class:`RowCounter`); it stops the read with its error once they are too many.

        Raises:
            StoreError: unreachable, too slow, too large, redirected elsewhere; the message
                names the URL redacted and the server's words cleaned.
        """
        if params:
            url = url + ("&" if urlsplit(url).query else "?") + urlencode(params)
        started = time.monotonic()
        first_url = url
        challenged = False
        for _hop in range(MAX_REDIRECTS + 1):
            answer = self._once(
                method, url, body, headers or {}, what=what, started=started, rows=rows
            )
            if answer.status == 401 and not challenged and self._challenged(answer, url):
                challenged = True
                answer = self._once(
                    method, url, body, headers or {}, what=what, started=started, rows=rows
                )
            if answer.status not in (301, 302, 303, 307, 308):
                return answer
            location = answer.headers.get("Location")
            if not location:
                return answer
            target = urljoin(url, location.strip())
            if origin(target) != origin(first_url) or urlsplit(target).scheme not in (
                "http",
                "https",
            ):
                raise StoreError(
                    f"the SPARQL server at {redact(url)} redirected ({answer.status}) {what} to "
                    f"another origin, {_origin_text(target) if urlsplit(target).scheme in ('http', 'https') else redact(target)}: "
                    "metaprov does not follow it (the request, its data and credentials would go "
                    "there)",
                    hint="if you trust the new location, give it yourself with --endpoint/--gsp",
                )
            if method not in ("GET", "HEAD") and answer.status not in (307, 308):
                raise StoreError(
                    f"the SPARQL server at {redact(url)} redirected ({answer.status}) {what} to "
                    f"{redact(target)}, which would turn the {method} into a GET",
                    hint="give the URL the server redirects to with --endpoint/--gsp",
                )
            url = target
        raise StoreError(
            f"the SPARQL server at {redact(first_url)} redirected {what} more than "
            f"{MAX_REDIRECTS} times",
            hint="check the endpoint URL",
        )

    def _once(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: dict[str, str],
        *,
        what: str,
        started: float,
        rows: RowCounter | None = None,
    ) -> Answer:
        parts = urlsplit(url)
        key = origin(url)
        target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        hdrs = {"User-Agent": self.user_agent, "Accept-Encoding": "identity", **headers}
        auth = self._auth_header(method, url)
        if auth:
            hdrs["Authorization"] = auth
        for attempt in (0, 1):
            conn = self._conn(key)
            reused = conn.sock is not None
            remaining = self.deadline - (time.monotonic() - started)
            if remaining <= 0:
                raise self._too_slow(url, what)
            timer = _Timer(conn, remaining)
            try:
                if conn.sock is None:
                    conn.connect()
                conn.sock.settimeout(self.read_timeout)
                try:
                    conn.request(method, target, body=body, headers=hdrs)
                except (BrokenPipeError, ConnectionResetError):
                    # A server may answer (401, 413) and hang up before the body is all sent:
                    # its answer is what matters; without one, the error below stands.
                    if timer.fired:
                        raise
                    resp = conn.getresponse()
                    resp.will_close = True
                else:
                    resp = conn.getresponse()
                data = self._read(resp, url, what, timer, rows)
            except MetaprovError:
                self._forget(key)
                raise
            except (
                http.client.RemoteDisconnected,
                BrokenPipeError,
                ConnectionResetError,
            ) as exc:
                self._forget(key)
                if timer.fired:
                    raise self._too_slow(url, what) from exc
                if reused and attempt == 0:
                    continue  # a kept-alive connection the server had closed: once more, fresh
                raise StoreError(
                    f"the SPARQL server at {redact(url)} closed the connection ({what})",
                    hint="the server may have crashed or refused the request size; see its log",
                ) from exc
            except TimeoutError as exc:
                self._forget(key)
                if timer.fired:
                    raise self._too_slow(url, what) from exc
                raise StoreError(
                    f"the SPARQL server at {redact(url)} did not answer within "
                    f"{self.read_timeout:g} s ({what})",
                    hint="the server may be overloaded; try again with a larger --timeout, or "
                    "load smaller pieces",
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                self._forget(key)
                if timer.fired:
                    raise self._too_slow(url, what) from exc
                raise StoreError(
                    f"cannot reach the SPARQL server at {redact(url)} ({what}): "
                    f"{clean(_reason(exc), limit=200)}",
                    hint="is the server running, and is the URL (host, port, path) right?",
                ) from exc
            finally:
                timer.cancel()
            if resp.will_close:
                self._forget(key)
            return Answer(resp.status, clean(resp.reason or "", limit=80), resp.msg, data, url)
        raise AssertionError("unreachable")

    def _read(
        self,
        resp: http.client.HTTPResponse,
        url: str,
        what: str,
        timer: _Timer,
        rows: RowCounter | None = None,
    ) -> bytes:
        """The answer's body, read in pieces under the size cap and the deadline; a successful
        answer's rows counted by ``rows`` as they arrive (its error ends the read)."""
        cap = self.max_answer_bytes if resp.status < 300 else MAX_ERROR_BYTES
        length = resp.getheader("Content-Length")
        if length and length.strip().isdigit() and int(length) > cap and resp.status < 300:
            raise self._too_large(url, what, int(length))
        body = _Body(resp, cap, timer, keep_cut=resp.status >= 300)
        if rows is not None and resp.status < 300:
            announced = int(length) if length and length.strip().isdigit() else None
            if announced is None or not rows.cannot_exceed(announced):
                rows.count(body)
        body.drain()
        if body.error is not None:
            raise body.error
        if timer.fired:
            raise self._too_slow(url, what)
        if body.over:
            raise self._too_large(url, what, None)
        resp.close()  # read to its end: the connection can carry the next request
        return bytes(body.buf)

    def _too_slow(self, url: str, what: str) -> StoreError:
        return StoreError(
            f"the SPARQL server at {redact(url)} did not finish {what} within "
            f"{self.deadline:g} s (the total time allowed for one request)",
            hint="a slow or stuck server; raise --timeout (or $METAPROV_ENDPOINT_TIMEOUT) if the "
            "server is just busy",
        )

    def _too_large(self, url: str, what: str, size: int | None) -> StoreError:
        said = f" ({size:,} bytes announced)" if size is not None else ""
        return StoreError(
            f"the answer of the SPARQL server at {redact(url)} ({what}) is larger than "
            f"{self.max_answer_bytes:,} bytes{said}",
            hint=f"ask for less (LIMIT), or raise {ENV_MAX_BYTES} if you expect an answer this large",
        )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "Connection refused"
    if isinstance(exc, socket.gaierror):
        return "Name or service not known"
    return str(exc) or type(exc).__name__
