"""Triple stores: load runs as named graphs, replace or drop them, and ask SPARQL questions.

Input: PROV graphs of runs (:class:`~metaprov.mapping.ProvGraph`, run directories, or export files
in any RDF format) and SPARQL query text. Output: one named graph per run in

- an **embedded** Oxigraph store (pyoxigraph) kept in a directory: no server to start;
- any **SPARQL 1.1 server** reached over HTTP: the Graph Store HTTP Protocol (GSP) for writes,
  the SPARQL protocol for queries (Oxigraph server, Apache Jena Fuseki, GraphDB, Virtuoso, ...);

and query results as :class:`pandas.DataFrame` (SELECT, CONSTRUCT), or ``bool`` (ASK).

Each run lives in its own named graph ``<base>/run/<run-id>/graph``. Loading a run whose graph is
already there replaces it (drop, then load), so a store never holds a run twice. Loads stream:
N-Triples byte chunks flow from the mapping into a staging file that Oxigraph's bulk loader
parses in parallel, or into a series of HTTP requests of bounded size, so the whole graph is
never held in Python memory.

Credentials for a server come from the environment (``METAPROV_ENDPOINT_USER`` and
``METAPROV_ENDPOINT_PASSWORD``, or ``METAPROV_ENDPOINT_TOKEN`` for a bearer token) or from a
``~/.netrc`` entry for the server's host, never from the command line.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import pandas as pd

from metaprov.errors import InputError, QueryError, StoreError, UsageError

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph

log = logging.getLogger("metaprov")

#: Store directory used when neither ``--store`` nor ``--endpoint`` is given.
DEFAULT_STORE = "metaprov-store"
ENV_STORE = "METAPROV_STORE"
ENV_ENDPOINT = "METAPROV_ENDPOINT"
ENV_GSP = "METAPROV_GSP"
ENV_USER = "METAPROV_ENDPOINT_USER"
ENV_PASSWORD = "METAPROV_ENDPOINT_PASSWORD"
ENV_TOKEN = "METAPROV_ENDPOINT_TOKEN"

#: Upper bound of one HTTP request body when loading into a server. A GSP PUT or POST is one
#: transaction on the server: a 1.6 GB body took 300 s and 13 GB of server memory on Oxigraph,
#: so large graphs go as one PUT (replacing the graph) followed by POSTs (appending) of this size.
DEFAULT_CHUNK_BYTES = 32 * 1024 * 1024

#: Size of the N-Triples files a load into the embedded store is staged in: each is bulk-loaded
#: while the next is written (see :meth:`EmbeddedStore._bulk_load`).
LOAD_PART_BYTES = 512 * 1024 * 1024

#: File in an embedded store's directory recording which input produced which graph.
CATALOG = "metaprov-catalog.json"

_RESULTS_JSON = "application/sparql-results+json"
_NTRIPLES = "application/n-triples"
XSD = "http://www.w3.org/2001/XMLSchema#"
_INT_TYPES = {
    XSD + t
    for t in (
        "integer",
        "int",
        "long",
        "short",
        "byte",
        "nonNegativeInteger",
        "positiveInteger",
        "nonPositiveInteger",
        "negativeInteger",
        "unsignedLong",
        "unsignedInt",
        "unsignedShort",
        "unsignedByte",
    )
}
_FLOAT_TYPES = {XSD + "double", XSD + "float", XSD + "decimal"}


@dataclass
class LoadReport:
    """What one load did.

    Attributes:
        graph: IRI of the named graph written.
        triples: triples sent to the store.
        seconds: wall time of the load (mapping included when loading from records).
        replaced: the graph was already in the store and was replaced.
        source: what was loaded (run directory, file or run id).
        requests: HTTP requests used (servers only).
        unchanged: the same input was loaded before with the same options, and the graph is
            still there and complete: nothing was written (see :meth:`Store.load_run`).
    """

    graph: str
    triples: int
    seconds: float
    replaced: bool
    source: str = ""
    requests: int = 0
    unchanged: bool = False

    @property
    def rate(self) -> float:
        """Triples per second."""
        return self.triples / self.seconds if self.seconds > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "graph": self.graph,
            "source": self.source,
            "triples": self.triples,
            "seconds": round(self.seconds, 3),
            "triples_per_second": None if self.seconds <= 0 else round(self.rate),
            "replaced": self.replaced,
            "unchanged": self.unchanged,
        }


# ---------------------------------------------------------------------------------------------
# Byte streams
# ---------------------------------------------------------------------------------------------


def _unlink_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def split_lines(chunks: Iterable[bytes], max_bytes: int) -> Iterator[bytes]:
    """Re-cut byte chunks of whole lines into pieces of at most ``max_bytes`` (line-aligned).

    A single line longer than ``max_bytes`` becomes a piece of its own.
    """
    pending = bytearray()
    for chunk in chunks:
        pending += chunk
        while len(pending) >= max_bytes:
            cut = pending.rfind(b"\n", 0, max_bytes)
            if cut < 0:
                cut = pending.find(b"\n", max_bytes)
                if cut < 0:
                    break
            piece = bytes(pending[: cut + 1])
            del pending[: cut + 1]
            yield piece
    if pending:
        yield bytes(pending)


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


def results_to_frame(data: Mapping[str, Any]) -> pd.DataFrame:
    """SPARQL JSON results (``application/sparql-results+json``) as a DataFrame.

    A column whose bound values are all literals of one numeric, boolean or dateTime type gets
    that dtype (``Int64``, ``float64``, ``boolean``, ``datetime64[us, UTC]``); anything else is
    text (IRIs as plain strings). Unbound values are missing values.
    """
    names = list(data.get("head", {}).get("vars", []))
    rows = data.get("results", {}).get("bindings", [])
    cols: dict[str, pd.Series] = {}
    for name in names:
        cells = [r.get(name) for r in rows]
        cols[name] = _column(cells)
    return pd.DataFrame(cols, columns=names)


def _column(cells: list[dict[str, Any] | None]) -> pd.Series:
    values = [None if c is None else c.get("value") for c in cells]
    bound = [c for c in cells if c is not None]
    if bound and all(c.get("type") in ("literal", "typed-literal") for c in bound):
        types = {c.get("datatype") for c in bound}
        if types <= _INT_TYPES:
            return pd.Series(
                pd.array([None if v is None else int(v) for v in values], dtype="Int64")
            )
        if types <= _INT_TYPES | _FLOAT_TYPES:
            # Aggregates mix integer and decimal/double (SUM of nothing is the integer 0).
            return pd.Series(
                pd.to_numeric(pd.Series(values, dtype=object), errors="coerce"), dtype="float64"
            )
        if types == {XSD + "boolean"}:
            return pd.Series(
                pd.array(
                    [None if v is None else v in ("true", "1") for v in values], dtype="boolean"
                )
            )
        if types == {XSD + "dateTime"}:
            return pd.Series(
                pd.to_datetime(pd.Series(values, dtype=object), utc=True, format="ISO8601")
            ).astype("datetime64[us, UTC]")
    if any(v is None for v in values):
        return pd.Series(values, dtype=object)
    return pd.Series(values, dtype="str")


def _term_text(term: Any) -> str:
    """A pyoxigraph term as text: IRIs plain, literals and blank nodes in N-Triples form."""
    import pyoxigraph as ox

    if isinstance(term, ox.NamedNode):
        return term.value
    return str(term)


def _triples_frame(triples: Iterable[Any]) -> pd.DataFrame:
    rows = [(_term_text(t.subject), _term_text(t.predicate), _term_text(t.object)) for t in triples]
    return pd.DataFrame(rows, columns=["subject", "predicate", "object"])


# ---------------------------------------------------------------------------------------------
# Stores
# ---------------------------------------------------------------------------------------------


class Store(ABC):
    """A triple store holding one named graph per run. Use :func:`open_store` to get one."""

    location: str = ""

    # --- writing ---------------------------------------------------------------------------
    @abstractmethod
    def load_chunks(self, graph: str, chunks: Iterable[bytes], *, source: str = "") -> LoadReport:
        """Replace named graph ``graph`` with N-Triples given as byte chunks of whole lines."""

    @abstractmethod
    def drop(self, graph: str) -> bool:
        """Remove a named graph; returns whether it was there."""

    def load_graph(self, graph: ProvGraph, *, source: str = "") -> LoadReport:
        """Load (or replace) one run's PROV graph, streaming it block by block.

        A store that can keep derived facts (the embedded one) also records the run's critical
        path, computed from the records at hand: reading a whole DAG of 10^6 tasks back out of
        the store takes minutes, computing it from the records takes seconds.
        """
        from metaprov.write import iter_ntriples

        t0 = time.perf_counter()
        derived: dict[str, Any] = {}

        def chunks() -> Iterator[bytes]:
            yield from iter_ntriples(graph)
            if self.keeps_derived:
                # Computed once the mapping is done, while the store still loads what it got.
                from metaprov.critical_path import path_summary

                derived["critical_path"] = path_summary(graph)

        report = self.load_chunks(graph.graph_iri, chunks(), source=source or graph.run_id)
        if self.keeps_derived:
            self._remember(report, **derived)
        report.seconds = time.perf_counter() - t0
        return report

    #: Whether the store records derived facts (load fingerprints, critical paths) beside the data.
    keeps_derived = False

    def cached_critical_path(self, graph: str) -> dict[str, Any] | None:
        """The critical path recorded when ``graph`` was loaded, if still valid (else None)."""
        return None

    def load_run(
        self,
        run: str | Path,
        *,
        base: str | None = None,
        detail: str = "tasks",
        darshan: bool = True,
        force: bool = False,
    ) -> LoadReport:
        """Read a run directory, map it and load it (replacing an earlier load of the same run).

        When this store already holds the graph loaded from the very same files with the same
        options (same fingerprint, same triple count), nothing is read or written and the report
        says ``unchanged``: the export is deterministic, so replacing it would write the same
        graph, and dropping a large graph from an on-disk store is slow. ``force`` replaces anyway.
        """
        from metaprov.ingest import read_run
        from metaprov.mapping import to_prov
        from metaprov.mapping.terms import DEFAULT_BASE

        t0 = time.perf_counter()
        base = base or DEFAULT_BASE
        fingerprint = run_fingerprint(run, base=base, detail=detail, darshan=darshan)
        known = None if force else self._unchanged(fingerprint)
        if known is not None:
            graph_iri, triples = known
            return LoadReport(
                graph_iri, triples, time.perf_counter() - t0, False, str(run), unchanged=True
            )
        records = read_run(run, darshan=darshan)
        _maybe_link(records)
        graph = to_prov(records, base=base, detail=detail)
        report = self.load_graph(graph, source=str(run))
        self._remember(report, fingerprint=fingerprint)
        report.seconds = time.perf_counter() - t0
        return report

    def _unchanged(self, fingerprint: str) -> tuple[str, int] | None:
        """(graph, triples) when a load with this fingerprint is still complete in the store."""
        return None

    def _remember(self, report: LoadReport, **facts: Any) -> None:  # noqa: B027 - optional hook
        """Record facts about a graph just loaded (stores that keep derived facts)."""

    def load_file(self, path: str | Path, format: str | None = None) -> list[LoadReport]:
        """Load an export file (any RDF format pyoxigraph reads), one report per named graph.

        N-Quads and TriG keep their named graphs. A file of triples (N-Triples, Turtle, JSON-LD,
        RDF/XML) goes into the graph of the mp:Run it describes (``<run>/graph``), or a graph named
        after the file when it describes no run. Every graph written is replaced first.
        """
        t0 = time.perf_counter()
        p = Path(path)
        fmt = _rdf_format(p, format)
        graphs = _file_graphs(p, fmt)
        reports = []
        for graph_iri, chunks in graphs:
            reports.append(self.load_chunks(graph_iri, chunks, source=str(p)))
        for r in reports:
            r.seconds = time.perf_counter() - t0
        return reports

    # --- reading ---------------------------------------------------------------------------
    @abstractmethod
    def _select_json(self, text: str) -> dict[str, Any]: ...

    @abstractmethod
    def _ask(self, text: str) -> bool: ...

    @abstractmethod
    def _select_csv(self, text: str) -> bytes: ...

    def select_strings(self, sparql: str) -> pd.DataFrame:
        """A SELECT answer as plain text columns, read in bulk (SPARQL CSV results).

        For internal bulk reads of millions of rows (IRIs and lexical forms, no typing, empty
        string for unbound): much faster than typed results. No parameters: the caller builds
        the query from trusted parts only.
        """
        from metaprov.queries.sparql import check_syntax, query_form

        if query_form(sparql) != "SELECT":
            raise QueryError("select_strings runs SELECT queries only")
        check_syntax(sparql)
        data = self._select_csv(sparql)
        if not data.strip():
            return pd.DataFrame()
        return pd.read_csv(
            io.BytesIO(data), dtype=str, keep_default_na=False, na_filter=False, engine="c"
        )

    @abstractmethod
    def _construct(self, text: str) -> pd.DataFrame: ...

    def query(
        self,
        sparql: str,
        params: Mapping[str, Any] | None = None,
        *,
        types: Mapping[str, str] | None = None,
        limit: int | None = None,
    ) -> pd.DataFrame | bool:
        """Run a SPARQL query; parameters are bound safely (see :mod:`metaprov.queries.sparql`).

        Args:
            sparql: SELECT, ASK, CONSTRUCT or DESCRIBE text.
            params: variable name (without ``?``) -> value; bound as RDF terms in a VALUES row.
            types: variable name -> parameter type (``string`` when absent; values written
                ``<...>`` are IRIs).
            limit: replaces the query's final LIMIT.

        Returns:
            A DataFrame (SELECT: one column per variable; CONSTRUCT/DESCRIBE: subject, predicate,
            object) or a bool (ASK).

        Raises:
            QueryError: the query or a parameter is invalid.
            StoreError: the store cannot be read or reached.
        """
        from metaprov.queries.sparql import query_form

        text = self._bound(sparql, params, types, limit)
        form = query_form(text)
        if form == "SELECT":
            return results_to_frame(self._select_json(text))
        if form == "ASK":
            return self._ask(text)
        return self._construct(text)

    def query_json(
        self,
        sparql: str,
        params: Mapping[str, Any] | None = None,
        *,
        types: Mapping[str, str] | None = None,
        limit: int | None = None,
        rows: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run a SELECT query and return its SPARQL JSON results (``head``, ``results``).

        ``rows`` (the JSON results of an earlier query) fill the query's empty ``VALUES (...) {}``
        block: this is how a multi-step question hands a few rows to its next step, which the
        store then joins by lookups instead of scanning (see :mod:`metaprov.queries`).
        """
        from metaprov.queries.sparql import fill_values, query_form

        if rows is not None:
            sparql = fill_values(sparql, rows)
        text = self._bound(sparql, params, types, limit)
        if query_form(text) != "SELECT":
            raise QueryError("query_json runs SELECT queries only")
        return self._select_json(text)

    def _bound(
        self,
        sparql: str,
        params: Mapping[str, Any] | None,
        types: Mapping[str, str] | None,
        limit: int | None,
    ) -> str:
        from metaprov.queries.sparql import bind, make_term

        terms = {}
        for name, value in (params or {}).items():
            type_ = (types or {}).get(name)
            if type_ is None:
                type_ = (
                    "iri"
                    if isinstance(value, str) and value.startswith("<") and value.endswith(">")
                    else "string"
                )
            terms[name] = make_term(value, type_, name=name)
        return bind(sparql, terms, limit=limit)

    @abstractmethod
    def graphs(self) -> list[str]:
        """IRIs of the named graphs in the store, sorted."""

    def count(self, graph: str | None = None) -> int:
        """Triples in one named graph, or quads in all named graphs."""
        from metaprov.queries.sparql import make_term

        if graph is None:
            text = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }"
        else:
            text = f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH {make_term(graph, 'iri', name='graph')} {{ ?s ?p ?o }} }}"
        df = results_to_frame(self._select_json(text))
        return int(df["n"].iloc[0]) if len(df) else 0

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the store (files, connections)."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_fingerprint(run: str | Path, *, base: str, detail: str, darshan: bool) -> str:
    """A hash of everything a run's graph is made from.

    The names and contents of the run directory's files, the mapping options and the metaprov
    version: the same fingerprint gives the same graph (the export is deterministic).
    """
    import hashlib

    from metaprov import __version__

    h = hashlib.blake2b(digest_size=20)
    h.update(f"metaprov {__version__}\nbase={base}\ndetail={detail}\ndarshan={darshan}\n".encode())
    root = Path(run)
    if not root.is_dir():
        raise InputError("no such run directory", path=root)
    for p in sorted(root.iterdir()):
        if not p.is_file():
            continue
        h.update(f"{p.name}\0{p.stat().st_size}\0".encode())
        with open(p, "rb") as f:
            while block := f.read(1 << 22):
                h.update(block)
    return h.hexdigest()


def _maybe_link(records: Any) -> None:
    """Link Darshan I/O to tasks when logs were read and the link stage is available."""
    if getattr(records, "darshan", None) is None or getattr(records, "io", None) is not None:
        return
    try:
        from metaprov.link import link_io
    except ImportError:  # pragma: no cover - link stage not installed
        return
    link_io(records)


class EmbeddedStore(Store):
    """An Oxigraph store in a directory (or in memory), through pyoxigraph.

    Args:
        path: the store directory (created when absent); None for an in-memory store.
        read_only: open for queries only (other processes may keep it open for writing).
    """

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        import pyoxigraph as ox

        self.path = None if path is None else Path(path)
        self.location = "memory" if path is None else str(self.path)
        self.read_only = read_only
        self._memory_catalog: dict[str, Any] = {}
        try:
            if self.path is None:
                self._store = ox.Store()
            else:
                _check_store_dir(self.path, create=not read_only)
                self._store = (
                    ox.Store.read_only(str(self.path)) if read_only else ox.Store(str(self.path))
                )
        except OSError as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise StoreError(
                    f"the store {self.location} is in use by another process",
                    hint="wait for the other metaprov load to finish (queries can run meanwhile)",
                ) from exc
            raise StoreError(f"cannot open the store {self.location}: {text}") from exc

    @property
    def oxigraph(self) -> Any:
        """The underlying :class:`pyoxigraph.Store` (for advanced use)."""
        return self._store

    def load_chunks(self, graph: str, chunks: Iterable[bytes], *, source: str = "") -> LoadReport:
        self._writable()
        t0 = time.perf_counter()
        node = _named_node(graph)
        replaced = self.drop(graph)
        try:
            lines = self._bulk_load(chunks, node)
        except (SyntaxError, OSError, ValueError) as exc:
            # bulk_load is not transactional: never leave half a run behind.
            self._remove_quietly(node)
            done = getattr(exc, "metaprov_lines", None)
            after = f" after {done:,} triples" if done is not None else ""
            raise StoreError(
                f"loading graph <{graph}> into {self.location} failed{after}: {exc}",
                hint="the partial graph was removed; fix the cause and load again",
            ) from exc
        except BaseException:
            self._remove_quietly(node)
            raise
        self._store.flush()
        return LoadReport(graph, lines, time.perf_counter() - t0, replaced, source)

    def _bulk_load(self, chunks: Iterable[bytes], node: Any) -> int:
        """Stage the N-Triples chunks in files of about :data:`LOAD_PART_BYTES` and bulk-load
        each file while the next one is written; returns the number of lines.

        Oxigraph's bulk loader parses a file given by path in parallel (it splits the file
        between its threads); fed from a stream it parses on one thread. Measured at 10^5 tasks
        (2.8 M triples, 2 cores): one file 24 s, pipe 29 s, Python stream 33 s. Loading part k
        (Rust, without the GIL) while the mapping writes part k+1 keeps both cores busy, and
        at most two parts are on disk at a time. The files sit in the store's own directory
        and are removed whatever happens.
        """
        import tempfile
        import threading

        import pyoxigraph as ox

        where = str(self.path) if self.path else None
        lines = 0
        failure: list[BaseException] = []
        loader: threading.Thread | None = None
        staged: list[str] = []

        def load_part(name: str) -> None:
            try:
                self._store.bulk_load(path=name, format=ox.RdfFormat.N_TRIPLES, to_graph=node)
            except BaseException as exc:  # re-raised in the caller's thread
                failure.append(exc)
            finally:
                _unlink_quietly(name)

        def open_part() -> Any:
            fd, name = tempfile.mkstemp(prefix=".metaprov-load-", suffix=".nt", dir=where)
            staged.append(name)
            return os.fdopen(fd, "wb")

        def hand_over(name: str | None) -> None:
            """Wait for the part being loaded (raising its failure), then start loading ``name``."""
            nonlocal loader
            if loader is not None:
                loader.join()
                loader = None
            if failure:
                raise failure[0]
            if name is not None:
                loader = threading.Thread(target=load_part, args=(name,), name="metaprov-load")
                loader.start()

        out = None
        try:
            size = 0
            for chunk in chunks:
                if not chunk:
                    continue
                if out is None:
                    out, size = open_part(), 0
                lines += chunk.count(b"\n")
                cut = chunk.rfind(b"\n") + 1 if size + len(chunk) >= LOAD_PART_BYTES else 0
                if not cut:  # below the part size, or no line ends in this chunk
                    out.write(chunk)
                    size += len(chunk)
                    continue
                # the part ends at a line end; the rest of the chunk starts the next part
                out.write(chunk[:cut])
                out.close()
                out = None
                hand_over(staged[-1])
                if cut < len(chunk):
                    out = open_part()
                    out.write(chunk[cut:])
                    size = len(chunk) - cut
            if out is not None:
                out.close()
                out = None
                hand_over(staged[-1])
            hand_over(None)
        except (SyntaxError, OSError, ValueError) as exc:
            exc.metaprov_lines = lines  # type: ignore[attr-defined]
            raise
        finally:
            if out is not None:
                out.close()
            if loader is not None:
                loader.join()
            for name in staged:
                _unlink_quietly(name)
        return lines

    # --- catalog: per graph, what it was loaded from and facts derived at load time -------------
    # A JSON file beside the store's own files (RocksDB ignores files it did not write).
    keeps_derived = True

    def _catalog(self) -> dict[str, Any]:
        if self.path is None:
            return self._memory_catalog
        try:
            data = json.loads((self.path / CATALOG).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        graphs = data.get("graphs") if isinstance(data, dict) else None
        return graphs if isinstance(graphs, dict) else {}

    def _save_catalog(self, graphs: dict[str, Any]) -> None:
        if self.path is None:
            self._memory_catalog = graphs
            return
        tmp = self.path / (CATALOG + ".part")
        tmp.write_text(json.dumps({"graphs": graphs}, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path / CATALOG)

    def _entry(self, graph: str) -> dict[str, Any] | None:
        """The catalog entry of ``graph`` while the store holds that graph."""
        entry = self._catalog().get(graph)
        if not isinstance(entry, dict) or not self._store.contains_named_graph(_named_node(graph)):
            return None
        return entry

    def _valid_entry(self, graph: str) -> dict[str, Any] | None:
        """The catalog entry of ``graph`` when the store still holds exactly what was loaded."""
        entry = self._entry(graph)
        if entry is None:
            return None
        return entry if self.count(graph) == int(entry.get("triples", -1)) else None

    def _unchanged(self, fingerprint: str) -> tuple[str, int] | None:
        for graph, entry in self._catalog().items():
            if isinstance(entry, dict) and entry.get("fingerprint") == fingerprint:
                valid = self._valid_entry(graph)
                return None if valid is None else (graph, int(valid["triples"]))
        return None

    def _remember(self, report: LoadReport, **facts: Any) -> None:
        if self.read_only:
            return
        graphs = self._catalog()
        entry = graphs.get(report.graph)
        if not isinstance(entry, dict) or entry.get("triples") != report.triples:
            entry = {}
        entry.update({"triples": report.triples, "source": report.source}, **facts)
        graphs[report.graph] = entry
        self._save_catalog(graphs)

    def _forget(self, graph: str) -> None:
        graphs = self._catalog()
        if graphs.pop(graph, None) is not None:
            self._save_catalog(graphs)

    def cached_critical_path(self, graph: str) -> dict[str, Any] | None:
        # No full recount here (seconds on tens of millions of quads): the caller checks that the
        # path's tasks are still in the graph, and metaprov forgets the entry whenever it drops
        # or replaces the graph.
        entry = self._entry(graph)
        found = entry.get("critical_path") if entry is not None else None
        return found if isinstance(found, dict) else None

    def _remove_quietly(self, node: Any) -> None:
        try:
            self._store.remove_graph(node)
        except Exception:  # noqa: BLE001 - best effort cleanup while another error propagates
            log.warning("could not remove the partial graph %s", node)

    def drop(self, graph: str) -> bool:
        self._writable()
        node = _named_node(graph)
        if not self._store.contains_named_graph(node):
            return False
        self._forget(graph)
        try:
            others = any(g != node for g in self._store.named_graphs())
            if not others and not self._store.query("ASK { ?s ?p ?o }"):
                # The only graph: clear() drops whole key ranges at once, while removing a graph
                # deletes quad by quad from six indexes (minutes for tens of millions of quads).
                self._store.clear()
            else:
                self._store.remove_graph(node)
        except OSError as exc:
            raise StoreError(f"cannot drop graph <{graph}> from {self.location}: {exc}") from exc
        return True

    def graphs(self) -> list[str]:
        import pyoxigraph as ox

        return sorted(g.value for g in self._store.named_graphs() if isinstance(g, ox.NamedNode))

    def _run(self, text: str) -> Any:
        try:
            return self._store.query(text, use_default_graph_as_union=True)
        except SyntaxError as exc:
            raise QueryError(f"the SPARQL query does not parse: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"reading the store {self.location} failed: {exc}") from exc

    def _select_json(self, text: str) -> dict[str, Any]:
        import pyoxigraph as ox

        res = self._run(text)
        try:
            data = res.serialize(format=ox.QueryResultsFormat.JSON)
        except OSError as exc:
            raise StoreError(f"reading the store {self.location} failed: {exc}") from exc
        return dict(json.loads(data))

    def _ask(self, text: str) -> bool:
        return bool(self._run(text))

    def _select_csv(self, text: str) -> bytes:
        import pyoxigraph as ox

        try:
            return bytes(self._run(text).serialize(format=ox.QueryResultsFormat.CSV))
        except OSError as exc:
            raise StoreError(f"reading the store {self.location} failed: {exc}") from exc

    def _construct(self, text: str) -> pd.DataFrame:
        return _triples_frame(self._run(text))

    def _writable(self) -> None:
        if self.read_only:
            raise StoreError(f"the store {self.location} was opened read-only")

    def close(self) -> None:
        if getattr(self, "_store", None) is not None and not self.read_only:
            try:
                self._store.flush()
            except OSError:
                pass
        self._store = None


def _check_store_dir(path: Path, *, create: bool) -> None:
    """Refuse to turn a directory holding other files into a store (or to read a non-store)."""
    if path.exists() and not path.is_dir():
        raise StoreError(
            f"{path} is a file, not a store directory", hint="give a directory for --store"
        )
    if path.is_dir():
        entries = list(path.iterdir())
        if entries and not (path / "CURRENT").exists():
            raise StoreError(
                f"{path} is not a metaprov store (it holds other files)",
                hint="give an empty or new directory for --store, or the directory of an existing store",
            )
        if not entries and not create:
            raise StoreError(
                f"the store {path} is empty",
                hint="load runs into it first: metaprov load RUN --store DIR",
            )
        return
    if not create:
        raise StoreError(
            f"no store at {path}",
            hint="load runs first (metaprov load RUN --store DIR), or give --store DIR / --endpoint URL",
        )
    path.mkdir(parents=True, exist_ok=True)


def _named_node(iri: str) -> Any:
    import pyoxigraph as ox

    try:
        return ox.NamedNode(iri)
    except ValueError as exc:
        raise StoreError(f"{iri!r} is not a valid graph IRI: {exc}") from exc


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
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
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
        from metaprov.queries.sparql import make_term

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
        return LoadReport(graph, triples, time.perf_counter() - t0, replaced, source, requests_made)

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
    from metaprov import __version__

    return f"metaprov/{__version__}"


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

_QUAD_FORMATS = ("N_QUADS", "TRIG")


def _rdf_format(path: Path, format: str | None) -> Any:
    import pyoxigraph as ox

    if not path.is_file():
        raise InputError(
            "no such file", path=path, hint="give a run directory or an RDF export file"
        )
    if format:
        from metaprov.write import get_format

        name = get_format(format).name
        mapping = {
            "turtle": ox.RdfFormat.TURTLE,
            "ntriples": ox.RdfFormat.N_TRIPLES,
            "nquads": ox.RdfFormat.N_QUADS,
            "trig": ox.RdfFormat.TRIG,
            "json-ld": ox.RdfFormat.JSON_LD,
            "rdf-xml": ox.RdfFormat.RDF_XML,
        }
        if name not in mapping:
            raise UsageError(
                f"cannot load {name} files into a store",
                hint="export to N-Quads, N-Triples or Turtle",
            )
        return mapping[name]
    suffix = path.suffix.lstrip(".").lower()
    fmt = ox.RdfFormat.from_extension(suffix) if suffix else None
    if suffix == "json":
        fmt = ox.RdfFormat.JSON_LD
    if fmt is None:
        raise InputError(
            f"cannot tell the RDF format of {path.name!r} from its suffix",
            path=path,
            hint="use .nq, .nt, .ttl, .trig, .jsonld or .rdf, or give the format",
        )
    return fmt


def _file_graphs(path: Path, fmt: Any) -> list[tuple[str, Iterator[bytes]]]:
    """(graph IRI, N-Triples chunks) for each graph of an RDF file, read lazily."""
    import pyoxigraph as ox

    from metaprov.mapping.terms import MP, RDF

    is_quads = fmt in (ox.RdfFormat.N_QUADS, ox.RdfFormat.TRIG)
    names: list[str] = []
    run_iri = None
    try:
        # Pass 1: which graphs (quad formats), or which run (triple formats) the file holds.
        for q in ox.parse(path=str(path), format=fmt):
            if is_quads:
                g = q.graph_name
                if (
                    isinstance(g, ox.NamedNode)
                    and (not names or names[-1] != g.value)
                    and g.value not in names
                ):
                    names.append(g.value)
            elif (
                run_iri is None
                and isinstance(q.subject, ox.NamedNode)
                and q.predicate.value == RDF.type
                and isinstance(q.object, ox.NamedNode)
                and q.object.value == MP.Run
            ):
                run_iri = q.subject.value
                break
    except (SyntaxError, ValueError) as exc:
        raise InputError(f"not valid RDF: {exc}", path=path) from exc
    if not is_quads:
        graph = f"{run_iri}/graph" if run_iri else path.resolve().as_uri()
        return [(graph, _triples_of(path, fmt, None))]
    return [(g, _triples_of(path, fmt, g)) for g in names]


def _triples_of(path: Path, fmt: Any, graph: str | None, batch: int = 200_000) -> Iterator[bytes]:
    """N-Triples chunks of the triples of ``graph`` (None: all) in an RDF file."""
    import pyoxigraph as ox

    out: list[Any] = []
    try:
        for q in ox.parse(path=str(path), format=fmt):
            if graph is not None and not (
                isinstance(q.graph_name, ox.NamedNode) and q.graph_name.value == graph
            ):
                continue
            out.append(q.triple)
            if len(out) >= batch:
                yield ox.serialize(out, format=ox.RdfFormat.N_TRIPLES)
                out = []
    except (SyntaxError, ValueError) as exc:
        raise InputError(f"not valid RDF: {exc}", path=path) from exc
    if out:
        yield ox.serialize(out, format=ox.RdfFormat.N_TRIPLES)


# ---------------------------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------------------------


def open_store(
    store: str | Path | None = None,
    endpoint: str | None = None,
    *,
    gsp: str | None = None,
    read_only: bool = False,
    timeout: float = 600.0,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Store:
    """Open the store to use: a server (``endpoint``), else an embedded store directory.

    Args:
        store: embedded store directory (default: ``$METAPROV_STORE`` or ``./metaprov-store``).
        endpoint: SPARQL query endpoint URL of a server (default: ``$METAPROV_ENDPOINT``).
        gsp: the server's Graph Store endpoint (default: ``$METAPROV_GSP`` or derived).
        read_only: open an embedded store for queries only.
        timeout: seconds to wait for a server's answer.
        chunk_bytes: largest request body when loading into a server.

    Returns:
        An :class:`EmbeddedStore` or :class:`EndpointStore`; use it as a context manager.

    Raises:
        UsageError: both a store directory and an endpoint were given.
        StoreError: the store cannot be opened.
    """
    if store is not None and endpoint is not None:
        raise UsageError("give either a store directory or an endpoint, not both")
    if store is None and endpoint is None:
        endpoint = os.environ.get(ENV_ENDPOINT) or None
    if endpoint:
        return EndpointStore(
            endpoint,
            gsp or os.environ.get(ENV_GSP) or None,
            timeout=timeout,
            chunk_bytes=chunk_bytes,
        )
    path = Path(store) if store is not None else Path(os.environ.get(ENV_STORE) or DEFAULT_STORE)
    return EmbeddedStore(path, read_only=read_only)


def load(
    runs: str | Path | ProvGraph | Sequence[str | Path | ProvGraph],
    store: str | Path | Store | None = None,
    endpoint: str | None = None,
    *,
    gsp: str | None = None,
    base: str | None = None,
    detail: str = "tasks",
    darshan: bool = True,
    force: bool = False,
    progress: Any = None,
) -> list[LoadReport]:
    """Load runs into a store, each into its own named graph, replacing earlier loads.

    Args:
        runs: run directories, RDF export files, or PROV graphs (from :func:`metaprov.to_prov`).
        store: an open :class:`Store`, or an embedded store directory.
        endpoint: SPARQL query endpoint of a server (instead of ``store``).
        gsp: the server's Graph Store endpoint (default: derived from ``endpoint``).
        base: base IRI for instances when mapping run directories.
        detail: mapping detail for run directories (``tasks`` or ``transitions``).
        darshan: read Darshan logs of run directories.
        force: replace a run's graph even when the same files were loaded before, unchanged.
        progress: a callable ``progress(report)`` called after each load.

    Returns:
        One :class:`LoadReport` per named graph written.

    Example:
        >>> load(["runs/R1", "runs/R2"], store="prov-store")  # doctest: +SKIP
    """
    from metaprov.mapping import ProvGraph

    items: list[Any] = [runs] if isinstance(runs, (str, Path, ProvGraph)) else list(runs)
    own = not isinstance(store, Store)
    st = store if isinstance(store, Store) else open_store(store, endpoint, gsp=gsp)
    reports: list[LoadReport] = []
    try:
        for item in items:
            if isinstance(item, ProvGraph):
                done = [st.load_graph(item)]
            elif Path(item).is_dir():
                done = [st.load_run(item, base=base, detail=detail, darshan=darshan, force=force)]
            elif Path(item).is_file():
                done = st.load_file(item)
            else:
                raise InputError(
                    "no such run directory or file",
                    path=item,
                    hint="give run directories or RDF export files",
                )
            for r in done:
                log.info(
                    "loaded %s: %d triples into <%s> in %.2f s",
                    r.source,
                    r.triples,
                    r.graph,
                    r.seconds,
                )
                if progress is not None:
                    progress(r)
            reports.extend(done)
    finally:
        if own:
            st.close()
    return reports


def query(
    question: str,
    params: Mapping[str, Any] | None = None,
    store: str | Path | Store | None = None,
    endpoint: str | None = None,
    *,
    file: str | Path | Sequence[str | Path] | None = None,
    gsp: str | None = None,
) -> pd.DataFrame | bool:
    """Ask a packaged question (by name), a ``.rq`` file, or SPARQL text.

    Args:
        question: a packaged question name (see :func:`metaprov.queries.questions`), ``critical-path``,
            a path to a ``.rq`` file, or SPARQL text.
        params: parameter values by name (bound safely as RDF terms).
        store: an open :class:`Store` or an embedded store directory.
        endpoint: SPARQL query endpoint of a server.
        file: export file(s) to query instead of a store (loaded into memory).
        gsp: the server's Graph Store endpoint (unused for queries; accepted for symmetry).

    Returns:
        A DataFrame (or a bool for ASK questions).

    Example:
        >>> query("slowest-tasks", {"prefix": "save_file"}, store="prov-store")  # doctest: +SKIP
    """
    from metaprov.queries import run_question

    if file is not None:
        if store is not None or endpoint is not None:
            raise UsageError("give either export files or a store/endpoint, not both")
        mem = EmbeddedStore(None)
        for f in [file] if isinstance(file, (str, Path)) else list(file):
            mem.load_file(f)
        return run_question(mem, question, params)
    if isinstance(store, Store):
        return run_question(store, question, params)
    with open_store(store, endpoint, gsp=gsp, read_only=True) as st:
        return run_question(st, question, params)


__all__ = [
    "DEFAULT_STORE",
    "DEFAULT_CHUNK_BYTES",
    "Endpoint",
    "EmbeddedStore",
    "EndpointStore",
    "LoadReport",
    "Store",
    "derive_gsp",
    "load",
    "open_store",
    "query",
    "results_to_frame",
    "run_fingerprint",
    "split_lines",
]
