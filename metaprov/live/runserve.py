"""``metaprov serve RUN_DIR...``: the packaged questions at once, ad-hoc SPARQL once loaded.

Input: finished run directories; an embedded store folder (given, or a temporary one). Output:
an HTTP server on 127.0.0.1 (by default) that answers

- ``/questions/NAME`` (``?param=value...&format=csv|json``): a packaged question, straight from
  the run directories, as ``metaprov query NAME RUN_DIR...`` answers it (the records are read
  once, from the cache when valid; the bytes are those of ``metaprov query ... -o FILE``, the
  same as a store holding the runs). ``&from=store`` asks the store instead, once it has loaded;
- ``/query``: SPARQL 1.1, read-only, over the store, once it has loaded; until then ``503`` with
  ``Retry-After`` and the load's progress in the body;
- ``/status``: JSON, the records (``reading``, ``ready``, ``failed``) and the store's load
  (``loading``, ``loaded``, ``failed``, ``stopped``; runs loaded of runs, triples loaded);
- ``/questions``: the packaged questions (as ``metaprov query --list -f json``); ``/``: a page.

Why: a 10^6-task run takes ~11 minutes to load into a store, its packaged questions a minute
from the run directory (docs/queries.md, "When to use which"). The store loads in a background
thread while the questions are answered; nothing else writes it, and it is queried only once
whole.

Policies: those of :class:`metaprov.live.server.LiveServer` (``Host`` header, the SPARQL guard,
request and answer size caps); a packaged question is named, never a file or text; its
parameters are bound as RDF terms as for ``metaprov query``; one packaged answer is computed
at a time (each maps the runs: memory bounded whatever the number of clients).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from metaprov.errors import MetaprovError, QueryError, UsageError
from metaprov.live.server import (
    DEFAULT_QUERY_TIMEOUT,
    MAX_ANSWER,
    QUERY_SCRIPT,
    Answer,
    LiveServer,
)

if TYPE_CHECKING:
    from metaprov.records import RunRecords
    from metaprov.store.base import LoadReport

log = logging.getLogger("metaprov")

#: Seconds a client is told to wait before asking again while the store loads.
RETRY_AFTER = 5

#: Query-string names a packaged question's answer reads itself (never a question's parameter).
RESERVED = ("format", "from")


@dataclass
class LoadStatus:
    """What the server can answer so far: the records and the store's background load."""

    runs: list[str]
    records: str = "reading"  # reading, ready, failed
    state: str = "loading"  # loading, loaded, failed, stopped
    loaded: int = 0  # runs whose graph is in the store
    triples: int = 0  # triples in the store so far (of the runs loaded and the one loading)
    started: float = field(default_factory=time.monotonic)
    seconds: float | None = None  # the load's duration, once it ended
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": list(self.runs),
            "records": self.records,
            "store": {
                "state": self.state,
                "runs_loaded": self.loaded,
                "runs": len(self.runs),
                "triples": self.triples,
                "seconds": round(
                    self.seconds if self.seconds is not None else time.monotonic() - self.started,
                    1,
                ),
                "error": self.error or None,
            },
        }

    def describe(self) -> str:
        """One line: how far the store's load is."""
        d = self.to_dict()["store"]
        return (
            f"store {self.state}: {self.loaded} of {len(self.runs)} runs, "
            f"{self.triples:,} triples, {d['seconds']:.0f} s"
            + (f" ({self.error})" if self.error else "")
        )


class _Stopped(Exception):
    """The server is stopping: the background load ends (its partial graph removed)."""


class RunsServer(LiveServer):
    """The HTTP side of ``serve RUN_DIR...``: packaged questions from the runs' records, SPARQL
    from the store once its background load (:meth:`load`) has finished."""

    not_found = "not found: this server has /, /status, /questions, /questions/NAME and /query\n"

    def __init__(
        self,
        store: Any,
        runs: Sequence[Path],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        base: str | None = None,
        darshan: bool = True,
        cache: bool | str | Path = True,
        max_answer: int = MAX_ANSWER,
        timeout: float | None = DEFAULT_QUERY_TIMEOUT,
    ) -> None:
        super().__init__(
            store,
            host=host,
            port=port,
            run=", ".join(str(r) for r in runs),
            max_answer=max_answer,
            timeout=timeout,
        )
        self.dirs = list(runs)
        self.base = base
        self.darshan = darshan
        self.cache = cache
        self.status = LoadStatus([str(r) for r in runs])
        self.records: list[RunRecords] = []
        self.records_ready = threading.Event()
        self.loaded = threading.Event()  # set when the load ended, whatever its outcome
        self.stopping = threading.Event()
        self._answering = threading.Lock()  # one packaged answer at a time

    # --- the background work ------------------------------------------------------------
    def read(self) -> None:
        """Read the runs' records (from the cache when valid) for the packaged questions."""
        from metaprov.queries.fromruns import read_cached

        try:
            self.records = [
                read_cached(d, darshan=self.darshan, cache=self.cache) for d in self.dirs
            ]
            self.status.records = "ready"
        except Exception as exc:  # noqa: BLE001 - said on /status and in every answer
            self.status.records = "failed"
            self.status.error = self.status.error or f"reading the runs failed: {exc}"
            log.warning("reading the runs failed: %s", exc)
        finally:
            self.records_ready.set()

    def load(
        self,
        *,
        detail: str = "tasks",
        on_loaded: Callable[[LoadReport], None] | None = None,
    ) -> None:
        """Load the runs into the store, one named graph each, as ``metaprov load`` does (a run
        the store already holds from the same files is kept); progress on :attr:`status`."""
        from metaprov.store import load

        status = self.status

        def counted(n: int) -> None:
            status.triples += n
            if self.stopping.is_set():
                raise _Stopped

        def done(report: LoadReport) -> None:
            status.loaded += 1
            if report.unchanged:
                status.triples += report.triples  # kept: nothing was counted while loading
            if on_loaded is not None:
                on_loaded(report)

        self.store.on_triples = counted
        status.started = time.monotonic()
        try:
            load(
                self.dirs,
                store=self.store,
                base=self.base,
                detail=detail,
                darshan=self.darshan,
                progress=done,
            )
            status.state = "loaded"
        except _Stopped:
            status.state = "stopped"
        except Exception as exc:  # noqa: BLE001 - said on /status and to SPARQL clients
            status.state = "failed"
            status.error = str(exc).replace("\n", " ")
            log.warning("loading the store failed: %s", exc)
        finally:
            self.store.on_triples = None
            status.seconds = time.monotonic() - status.started
            self.loaded.set()

    # --- HTTP -----------------------------------------------------------------------------
    def page(self) -> str:
        import html

        from metaprov.queries import questions

        options = "".join(
            f'<option value="{html.escape(q.name)}">{html.escape(q.name)}: '
            f"{html.escape(q.title)}</option>"
            for q in questions()
        )
        return RUNS_PAGE.format(
            runs=html.escape(self.run),
            store=html.escape(str(self.store.location)),
            endpoint=html.escape(self.query_url),
            options=options,
            query_script=QUERY_SCRIPT,
        )

    def route(self, path: str, query: str, accept: str) -> Answer | None:
        from metaprov.queries import format_list

        if path == "/status":
            data = {**self.status.to_dict(), "location": str(self.store.location)}
            return 200, "application/json", _json_bytes(data)
        if path == "/questions":
            return 200, "application/json", format_list("json").encode("utf-8")
        if path.startswith("/questions/"):
            return self.packaged(path[len("/questions/") :], query, accept)
        return None

    def answer(self, query: str, accept: str) -> Answer:
        """Ad-hoc SPARQL: refused by the guard as ever; ``503`` until the store has loaded."""
        from metaprov.store.sparql import QueryRefused, checked_query

        try:
            checked_query(query)
        except QueryRefused as exc:
            return exc.status, "text/plain", f"refused: {exc}\n".encode()
        unavailable = self._store_unavailable()
        if unavailable is not None:
            return unavailable
        return super().answer(query, accept)

    def _store_unavailable(self) -> Answer | None:
        """The answer while the store cannot be asked (None once it has loaded)."""
        status = self.status
        if status.state == "loaded":
            return None
        if status.state == "loading":
            text = (
                f"still loading: the store answers SPARQL once it holds every run "
                f"({status.describe()}); the packaged questions answer now, at /questions/NAME\n"
            )
            return 503, "text/plain", text.encode(), {"Retry-After": str(RETRY_AFTER)}
        text = (
            f"the store did not load ({status.describe()}); the packaged questions still answer\n"
        )
        return 503, "text/plain", text.encode()

    def packaged(self, name: str, query: str, accept: str) -> Answer:
        """A packaged question's answer: from the runs' records, or (``from=store``) the store."""
        try:
            return self._packaged(name, query, accept)
        except QueryError as exc:
            if not exc.message.startswith("no packaged question"):
                return 400, "text/plain", f"{exc}\n".encode()
            close = (exc.hint or "").split("list them with")[0]
            text = (
                f"{exc.message}\n  hint: {close}the packaged questions are listed at /questions\n"
            )
            return 404, "text/plain", text.encode()
        except MetaprovError as exc:
            return 400, "text/plain", f"{exc}\n".encode()
        except Exception as exc:  # noqa: BLE001 - a failed answer must not kill the handler
            log.warning("question %s failed: %s", name, exc)
            return 500, "text/plain", f"the question failed: {type(exc).__name__}: {exc}\n".encode()

    def _packaged(self, name: str, query: str, accept: str) -> Answer:
        from metaprov.queries import format_result, get_question, run_question
        from metaprov.queries.fromruns import answer_records

        question = get_question(name)  # a packaged name only: never a file or SPARQL text
        args = parse_qs(query, keep_blank_values=True)
        many = sorted(k for k, v in args.items() if len(v) > 1)
        if many:
            raise UsageError(f"parameter {many[0]!r} is given more than once")
        values = {k: v[0] for k, v in args.items()}
        fmt = values.pop("format", "") or ("csv" if "text/csv" in accept else "json")
        source = values.pop("from", "runs")
        if fmt not in ("csv", "json"):
            raise UsageError(f"unknown format {fmt!r}", hint="use format=csv or format=json")
        if source not in ("runs", "store"):
            raise UsageError(f"unknown source {source!r}", hint="use from=runs or from=store")
        if source == "store":
            unavailable = self._store_unavailable()
            if unavailable is not None:
                return unavailable
            with self.lock.read():
                result = run_question(self.store, question, values)
        else:
            self.records_ready.wait()
            if self.status.records != "ready":
                return 500, "text/plain", f"{self.status.error}\n".encode()
            with self._answering:
                result = answer_records(question, self.records, values, base=self.base)
        text = format_result(result, fmt)
        body = (text if text.endswith("\n") else text + "\n").encode("utf-8")
        if len(body) > self.max_answer:
            return (
                413,
                "text/plain",
                f"refused: the answer is larger than {self.max_answer:,} bytes; give a limit "
                "or a narrower parameter\n".encode(),
            )
        ctype = "text/csv; charset=utf-8" if fmt == "csv" else "application/json"
        notes = [] if isinstance(result, bool) else list(result.attrs.get("notes", []))
        headers = {"X-Metaprov-Notes": json.dumps(notes)} if notes else {}
        return 200, ctype, body, headers


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode("utf-8")


def serve_runs(
    runs: Sequence[str | Path],
    store: str | Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 7878,
    base: str | None = None,
    detail: str = "tasks",
    darshan: bool = True,
    cache: bool | str | Path = True,
    timeout: float | None = DEFAULT_QUERY_TIMEOUT,
    on_listen: Callable[[RunsServer], None] | None = None,
    on_loaded: Callable[[LoadReport], None] | None = None,
    on_complete: Callable[[LoadStatus], None] | None = None,
    stop: threading.Event | None = None,
    gate: threading.Event | None = None,
) -> LoadStatus:
    """Serve the packaged questions of ``runs`` at once, and SPARQL once their store has loaded.

    Args:
        runs: finished run directories.
        store: the embedded store folder the runs are loaded into (kept after; a run it already
            holds from the same files is not loaded again); None: a temporary folder, removed
            when the server stops.
        host, port: where to listen (port 0: any free port).
        base, detail, darshan: as for ``metaprov load``.
        cache: the records' cache for the packaged questions (as :func:`query_runs`).
        timeout: seconds a SPARQL query may run on the store (None or 0: no limit); a longer
            one is answered 503 while the server goes on answering others.
        on_listen: called once the server listens (its URL is ``server.url``).
        on_loaded: called after each run's graph is in the store.
        on_complete: called once the load ended (loaded, failed or stopped).
        stop: set it to stop the server (the CLI sets it on Ctrl-C).
        gate: the store's load starts once it is set (a test makes the load observable).

    Returns:
        The load's status when the server stopped.

    Raises:
        InputError: a path that is not a run directory.
        StoreError: the store is served or written by another process, or the port is taken.
    """
    from metaprov.ingest import check_run_directory
    from metaprov.store import EmbeddedStore
    from metaprov.store.owner import check_not_owned, owning, update_owner
    from metaprov.write.output import refuse_overlap

    if not 0 <= int(port) <= 65535:
        raise UsageError(f"port {port} is out of range", hint="give a port from 1 to 65535, or 0")
    if not runs:
        raise UsageError("no run directory given", hint="give one or more run directories")
    dirs = [check_run_directory(r) for r in runs]
    stop = stop or threading.Event()
    with ExitStack() as stack:
        if store is None:
            path = Path(tempfile.mkdtemp(prefix="metaprov-serve-"))
            stack.callback(shutil.rmtree, path, ignore_errors=True)
        else:
            path = Path(store)
            refuse_overlap(path, inputs=dirs)  # the store never is or holds a run it loads
            check_not_owned(path, action="serve this store and load runs into it")
        st = EmbeddedStore(path)
        stack.callback(st.close)
        stack.enter_context(owning(path, role="serve", run=", ".join(str(d) for d in dirs)))
        server = RunsServer(
            st,
            dirs,
            host=host,
            port=port,
            base=base,
            darshan=darshan,
            cache=cache,
            timeout=timeout,
        )
        server.start()
        stack.callback(server.stop)
        update_owner(path, url=server.url)

        def work() -> None:
            server.read()
            while gate is not None and not gate.wait(0.1):
                if stop.is_set():
                    server.status.state = "stopped"
                    server.loaded.set()
                    return
            server.load(detail=detail, on_loaded=on_loaded)
            if on_complete is not None:
                on_complete(server.status)

        worker = threading.Thread(target=work, name="metaprov-serve-load", daemon=True)
        worker.start()
        if on_listen is not None:
            on_listen(server)
        # A wait with a timeout: Ctrl-C's handler runs only when the main thread wakes.
        while not stop.wait(0.25):
            pass
        server.stopping.set()
        while worker.is_alive():  # a load stops after the part it is loading (the store closes
            worker.join(0.5)  # after it: never under a writer)
        return server.status


RUNS_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>metaprov serve</title>
<style>body{{font-family:sans-serif;margin:1.5em}}textarea{{width:100%;height:10em;font-family:monospace}}
table{{border-collapse:collapse;margin-top:1em}}td,th{{border:1px solid #ccc;padding:2px 6px;font-size:90%}}
.status{{color:#555}}input[type=text]{{width:40em}}</style></head><body>
<h1>metaprov serve</h1>
<p>Runs <code>{runs}</code>; store <code>{store}</code>.</p>
<p id="load" class="status">...</p>
<h2>Packaged questions (answered now, from the run directories)</h2>
<p><select id="name">{options}</select>
parameters <input type="text" id="params" placeholder="limit=10&amp;run_id=..."></p>
<p><button id="ask">Ask</button> <span id="qstatus" class="status"></span></p>
<div id="qout"></div>
<h2>SPARQL (once the store has loaded)</h2>
<p>Endpoint <code>{endpoint}</code> (read-only; the default graph is the union of all runs).</p>
<textarea id="q">PREFIX mp: &lt;https://w3id.org/metaprov/ns#&gt;
SELECT ?run_id (COUNT(?task) AS ?tasks) WHERE {{
  GRAPH ?g {{ ?run a mp:Run ; mp:runId ?run_id . ?task a mp:Task }}
}} GROUP BY ?run_id</textarea>
<p><button id="run">Run query</button> <span id="status" class="status"></span></p>
<div id="out"></div>
<script>
{query_script}async function poll() {{
  const s = await (await fetch("status")).json(), st = s.store;
  document.getElementById("load").textContent = "records: " + s.records + "; store " + st.state +
    ": " + st.runs_loaded + " of " + st.runs + " runs, " + st.triples.toLocaleString() +
    " triples, " + st.seconds + " s" + (st.error ? " (" + st.error + ")" : "");
  document.getElementById("run").disabled = st.state !== "loaded";
  if (st.state === "loading") setTimeout(poll, 2000);
}}
poll();
document.getElementById("ask").onclick = async function () {{
  const status = document.getElementById("qstatus"), out = document.getElementById("qout");
  status.textContent = "answering..."; out.textContent = "";
  const p = document.getElementById("params").value.trim();
  const r = await fetch("questions/" + encodeURIComponent(document.getElementById("name").value) +
    "?format=json" + (p ? "&" + p : ""));
  const text = await r.text();
  if (!r.ok) {{ status.textContent = "error " + r.status + ": " + text; return; }}
  const rows = JSON.parse(text);
  if (!Array.isArray(rows)) {{ status.textContent = String(rows); return; }}
  const vars = rows.length ? Object.keys(rows[0]) : [];
  status.textContent = rows.length + " rows" + (r.headers.get("X-Metaprov-Notes") ? "; notes: " +
    JSON.parse(r.headers.get("X-Metaprov-Notes")).join(" ") : "");
  out.appendChild(table(vars, rows, (row, v) => row[v] === null ? "" : String(row[v])));
}};
</script></body></html>
"""


__all__ = ["RESERVED", "RETRY_AFTER", "LoadStatus", "RunsServer", "serve_runs"]
