"""The store interface every backend implements, its load report and result tables.

Input: N-Triples byte chunks, PROV graphs, run directories and SPARQL text. Output:
:class:`LoadReport` values and query results as :class:`pandas.DataFrame` (or ``bool`` for ASK).
Backends: :mod:`metaprov.store.embedded` (Oxigraph in a directory) and
:mod:`metaprov.store.endpoint` (any SPARQL 1.1 server).
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from metaprov.errors import QueryError, StoreError
from metaprov.store.catalog import run_fingerprint
from metaprov.store.files import _file_graphs, _rdf_format

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

#: Size of the N-Triples files a load into the embedded store is staged in, each bulk-loaded by
#: its own call (see :meth:`EmbeddedStore._load_mapped` and :meth:`EmbeddedStore._bulk_load`).
#: Oxigraph's bulk loader holds memory in proportion to what one call loads: a 3.7 M-triple
#: file (857 MB) took 1.8 GB in one call, 0.7 GB in 128 MiB parts and 1.2 GB in 256 MiB parts,
#: for the same CPU time (41 s, 2 cores; docs/benchmarks.md, "Load memory at 10^6 tasks").
LOAD_PART_BYTES = 128 * 1024 * 1024


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
        try:
            cols[name] = _column(cells)
        except (ValueError, TypeError, OverflowError) as exc:
            from metaprov.errors import StoreError
            from metaprov.store.http import clean

            raise StoreError(
                f"the answer holds a value of ?{clean(name, limit=60)} that is not of its "
                f"datatype: {clean(str(exc), limit=200)}",
                hint="the store or server sent an invalid typed literal",
            ) from exc
    return pd.DataFrame(cols, columns=names)


def _column(cells: list[dict[str, Any] | None]) -> pd.Series:
    values = [None if c is None else c.get("value") for c in cells]
    bound = [c for c in cells if c is not None]
    if bound and all(c.get("type") in ("literal", "typed-literal") for c in bound):
        types = {c.get("datatype") for c in bound}
        if types <= _INT_TYPES or (
            # integers a server keeps as decimals (Virtuoso 7.2: those past 2^31) beside true
            # integers: the column stays integer (a decimal such as 2.0 never does)
            types <= _INT_TYPES | {XSD + "decimal"}
            and types & _INT_TYPES
            and all(
                _big_integral(str(c.get("value", "")))
                for c in bound
                if c.get("datatype") == XSD + "decimal"
            )
        ):
            return _integers([None if v is None else int(str(v).split(".")[0]) for v in values])
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


_INTEGRAL = re.compile(r"^[+-]?[0-9]+(?:\.0*)?$")


def _big_integral(text: str) -> bool:
    return bool(_INTEGRAL.match(text)) and abs(int(text.split(".")[0])) >= 2**31


def _integers(ints: list[int | None]) -> pd.Series:
    """Exact integers: ``Int64``, else ``UInt64`` (thread ids up to 2^64), else Python ints."""
    try:
        return pd.Series(pd.array(ints, dtype="Int64"))
    except (OverflowError, TypeError, ValueError):
        pass
    known = [i for i in ints if i is not None]
    if known and min(known) >= 0 and max(known) < 2**64:
        return pd.Series(pd.array(ints, dtype="UInt64"))
    return pd.Series(ints, dtype=object)


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

    #: Called with the number of triples of each chunk as a load hands it to the store (a
    #: progress bar's ``update``); None: nothing is counted.
    on_triples: Callable[[int], Any] | None = None

    def _counted(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            if self.on_triples is not None:
                self.on_triples(chunk.count(b"\n"))
            yield chunk

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
            yield from self._counted(iter_ntriples(graph))
            if self.keeps_derived:
                # Computed once the mapping is done, while the store still loads what it got.
                from metaprov.analysis.critical_path import path_summary

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
        mapped = [to_prov(records, base=base, detail=detail)]
        del records  # the graph holds them: a store may let both go before it loads
        report = self._load_mapped(mapped, source=str(run))
        self._remember(report, fingerprint=fingerprint)
        report.seconds = time.perf_counter() - t0
        return report

    def _load_mapped(self, mapped: list[ProvGraph], *, source: str) -> LoadReport:
        """Load the graph ``mapped`` holds (popped from the list: this call may hold the only
        reference, and free the run's records before the store itself needs memory)."""
        return self.load_graph(mapped.pop(), source=source)

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
            reports.append(self.load_chunks(graph_iri, self._counted(chunks), source=str(p)))
        for r in reports:
            r.seconds = time.perf_counter() - t0
        return reports

    # --- reading ---------------------------------------------------------------------------
    #: May queries call other SPARQL services (``SERVICE <...>``)? Off: see
    #: :func:`metaprov.store.sparql.checked_query`.
    allow_service: bool = False

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
        from metaprov.store.sparql import check_syntax, query_form

        if query_form(sparql) != "SELECT":
            raise QueryError("select_strings runs SELECT queries only")
        data = self._select_csv(check_syntax(sparql))
        if not data.strip():
            return pd.DataFrame()
        import warnings

        try:
            # index_col=False: a row of more fields than the header is never an index; its
            # "loss of data" warning is an error here (nothing dropped silently)
            with warnings.catch_warnings():
                warnings.simplefilter("error", pd.errors.ParserWarning)
                return pd.read_csv(
                    io.BytesIO(data),
                    dtype=str,
                    keep_default_na=False,
                    na_filter=False,
                    engine="c",
                    index_col=False,
                    encoding="utf-8",
                )
        except (
            pd.errors.ParserError,
            pd.errors.ParserWarning,
            UnicodeDecodeError,
            ValueError,
        ) as exc:
            # a server's answer is untrusted input: not SPARQL CSV results is a clear error
            from metaprov.store.http import clean

            raise StoreError(
                f"the store answered CSV results that cannot be read: {clean(str(exc), limit=200)}",
                hint="is the endpoint URL the server's SPARQL query endpoint?",
            ) from exc

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
        """Run a SPARQL query; parameters are bound safely (see :mod:`metaprov.store.sparql`).

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
        from metaprov.store.sparql import query_form

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
        from metaprov.store.sparql import fill_values, query_form

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
        from metaprov.store.sparql import bind, make_term

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
        return bind(sparql, terms, limit=limit, allow_service=self.allow_service)

    @abstractmethod
    def graphs(self) -> list[str]:
        """IRIs of the named graphs in the store, sorted."""

    def runs(self) -> pd.DataFrame:
        """The runs in the store: ``run_id``, ``name`` (run directory name) and ``graph`` IRI,
        one row per run, sorted by run id."""
        text = (
            "PREFIX mp: <https://w3id.org/metaprov/ns#>\n"
            "SELECT ?run_id ?name ?graph WHERE { GRAPH ?graph { ?run a mp:Run ; mp:runId ?run_id ."
            " OPTIONAL { ?run mp:runName ?name } } } ORDER BY ?run_id"
        )
        return results_to_frame(self._select_json(text))

    def count(self, graph: str | None = None) -> int:
        """Triples in one named graph, or quads in all named graphs."""
        from metaprov.store.sparql import make_term

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


def _maybe_link(records: Any) -> None:
    """Link Darshan I/O to tasks when logs were read and the link stage is available."""
    if getattr(records, "darshan", None) is None or getattr(records, "io", None) is not None:
        return
    try:
        from metaprov.link import link_io
    except ImportError:  # pragma: no cover - link stage not installed
        return
    link_io(records)
