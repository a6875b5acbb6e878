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

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metaprov.errors import InputError, UsageError
from metaprov.store.base import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_STORE,
    ENV_ENDPOINT,
    ENV_GSP,
    ENV_STORE,
    LoadReport,
    Store,
    results_to_frame,
    split_lines,
)
from metaprov.store.catalog import run_fingerprint
from metaprov.store.embedded import EmbeddedStore
from metaprov.store.endpoint import Endpoint, EndpointStore, derive_gsp
from metaprov.store.files import campaign_shards

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph

log = logging.getLogger("metaprov")


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
        runs: run directories, RDF export files, PROV graphs (from :func:`metaprov.to_prov`),
            or campaigns (the output directory of ``metaprov export`` or its ``manifest.json``:
            each shard replaces its run's graph).
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
            shards = None if isinstance(item, ProvGraph) else campaign_shards(item)
            if shards is not None:
                done = [r for shard in shards for r in st.load_file(shard)]
            elif isinstance(item, ProvGraph):
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


def __getattr__(name: str) -> Any:
    # Deprecated path: running packaged questions is the questions' job, not the store's.
    if name == "query":
        import warnings

        warnings.warn(
            "metaprov.store.query moved to metaprov.queries.query (or metaprov.query)",
            DeprecationWarning,
            stacklevel=2,
        )
        from metaprov.queries import query

        return query
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
