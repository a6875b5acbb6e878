"""Triple stores: load runs as named graphs, replace or drop them, and ask SPARQL questions.

Input: PROV graphs of runs (:class:`~metaprov.mapping.ProvGraph`, run directories, or export files
in any RDF format) and SPARQL query text. Output: one named graph per run in

- an **embedded** Oxigraph store (pyoxigraph) kept in a directory: no server to start;
- any **SPARQL 1.1 server** reached over HTTP: the Graph Store HTTP Protocol (GSP) for writes,
  the SPARQL protocol for queries (Oxigraph server, Apache Jena Fuseki, GraphDB, Virtuoso, ...);

and query results as :class:`pandas.DataFrame` (SELECT, CONSTRUCT), or ``bool`` (ASK).

Each run lives in its own named graph ``<base>/run/<run-id>/graph``. Loading a run whose graph is
already there replaces it (drop, then load), so a store never holds a run twice. Loads stream:
N-Triples flow from the mapping into staging files of bounded size that Oxigraph's bulk loader
parses in parallel (one call per file, which bounds its memory), or into a series of HTTP
requests of bounded size, so the whole graph is never held in memory.

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

from metaprov.errors import InputError, StoreError, UsageError
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
from metaprov.store.embedded import EmbeddedStore, check_store_dir, remove_created
from metaprov.store.endpoint import Endpoint, EndpointStore, derive_gsp
from metaprov.store.files import MANIFEST, campaign_shards
from metaprov.store.owner import check_not_owned

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
    timeout: float | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Store:
    """Open the store to use: a server (``endpoint``), else an embedded store directory.

    Args:
        store: embedded store directory (default: ``$METAPROV_STORE`` or ``./metaprov-store``).
        endpoint: SPARQL query endpoint URL of a server (default: ``$METAPROV_ENDPOINT``).
        gsp: the server's Graph Store endpoint (default: ``$METAPROV_GSP`` or derived).
        read_only: open an embedded store for queries only.
        timeout: the longest one request to a server may take (default: $METAPROV_ENDPOINT_TIMEOUT or 600 s).
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
        progress: a callable ``progress(report)`` called after each load, or True for
            progress bars on stderr (inputs loaded, and triples handed to the store).

    Returns:
        One :class:`LoadReport` per named graph written.

    Example:
        >>> load(["runs/R1", "runs/R2"], store="prov-store")  # doctest: +SKIP
    """
    from metaprov.ingest import check_run_directory
    from metaprov.mapping import ProvGraph

    items: list[Any] = [runs] if isinstance(runs, (str, Path, ProvGraph)) else list(runs)
    for item in items:  # before a store is created for them
        if isinstance(item, ProvGraph) or Path(item).is_file():
            continue
        if Path(item).is_dir() and (Path(item) / MANIFEST).is_file():
            continue  # a campaign's output directory: its shards are loaded below
        if not Path(item).exists():
            raise InputError(
                "no such run directory or file",
                path=item,
                hint="give run directories or RDF export files",
            )
        check_run_directory(item)
    own = not isinstance(store, Store)
    if own and endpoint is None and not os.environ.get(ENV_ENDPOINT):
        where = (
            Path(store) if store is not None else Path(os.environ.get(ENV_STORE) or DEFAULT_STORE)
        )
        # the store never is, holds or sits inside a run or file it loads (docs/reliability.md)
        from metaprov.write.output import refuse_overlap

        refuse_overlap(where, inputs=[i for i in items if not isinstance(i, ProvGraph)])
        check_not_owned(where, action="load into it")
    st = store if isinstance(store, Store) else open_store(store, endpoint, gsp=gsp)
    reports: list[LoadReport] = []
    bars: list[Any] = []
    if progress is True:
        from tqdm.auto import tqdm

        bars = [
            tqdm(total=len(items), desc="loading", unit="input", leave=False),
            tqdm(desc="triples", unit=" triples", unit_scale=True, leave=False),
        ]
        st.on_triples = bars[1].update
    if isinstance(progress, bool):
        progress = None
    current: Any = None
    committed = False  # is the current input's graph loaded?
    try:
        for current in items:
            item, committed = current, False
            if bars:
                bars[0].set_postfix_str(getattr(item, "run_id", None) or Path(item).name)
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
            reports.extend(done)
            committed = True
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
            if bars:
                bars[0].update(1)
    except KeyboardInterrupt as exc:
        at = items.index(current) if current is not None else 0
        stopped_in = None if committed else _name(current)
        raise LoadInterrupted(reports, stopped_in, [_name(i) for i in items[at + 1 :]]) from exc
    finally:
        for bar in bars:
            bar.close()
        st.on_triples = None
        if own:
            if not reports and isinstance(st, EmbeddedStore):
                remove_created(st)  # a failed first load leaves no empty store behind
            st.close()
    return reports


def to_store(graph: ProvGraph, store: str | Path | None = None) -> EmbeddedStore:
    """The PROV graph loaded into an embedded store (in memory, or in the directory ``store``),
    in its run's named graph: ask it packaged questions (``metaprov.query(q, store=st)``) or use
    its :attr:`~EmbeddedStore.oxigraph` store directly.

    Example:
        >>> st = metaprov.to_store(metaprov.to_prov(metaprov.read_run("examples/run")))  # doctest: +SKIP
        >>> metaprov.query("runs", store=st)  # doctest: +SKIP
    """
    st = EmbeddedStore(store)
    st.load_graph(graph)
    return st


def to_oxigraph(graph: ProvGraph) -> Any:
    """The PROV graph in an in-memory :class:`pyoxigraph.Store` (in its run's named graph), for
    users who continue in pyoxigraph."""
    return to_store(graph).oxigraph


def drop(
    runs: str | Sequence[str],
    store: str | Path | Store | None = None,
    endpoint: str | None = None,
    *,
    gsp: str | None = None,
) -> list[tuple[str, str]]:
    """Remove runs from a store: each run's named graph (and what the store recorded about it).

    Args:
        runs: run ids (as ``metaprov query runs`` lists them), run directory names, or graph IRIs.
        store: an open :class:`Store`, or an embedded store directory (it must exist).
        endpoint: SPARQL query endpoint of a server (its Graph Store endpoint drops the graph).
        gsp: the server's Graph Store endpoint (default: derived from ``endpoint``).

    Returns:
        ``(run id, graph IRI)`` of each run dropped.

    Raises:
        StoreError: a run is not in the store (the message lists those it holds); nothing is
            dropped then.

    Example:
        >>> drop("3a11b3998b3a66d8", store="example-store")  # doctest: +SKIP
    """
    wanted = [runs] if isinstance(runs, str) else list(runs)
    if not wanted:
        raise UsageError("no run given", hint="give run ids (see metaprov runs)")
    if isinstance(store, Store):
        return _drop(store, wanted)
    if endpoint is None and not os.environ.get(ENV_ENDPOINT):
        path = (
            Path(store) if store is not None else Path(os.environ.get(ENV_STORE) or DEFAULT_STORE)
        )
        check_store_dir(path, create=False)  # dropping never creates a store
        check_not_owned(path, action="drop from it")
    with open_store(store, endpoint, gsp=gsp) as st:
        return _drop(st, wanted)


def _drop(st: Store, wanted: list[str]) -> list[tuple[str, str]]:
    runs = st.runs()
    ids = runs["run_id"].astype(str).tolist()
    names = runs["name"].astype(object).where(runs["name"].notna(), "").astype(str).tolist()
    graphs = runs["graph"].astype(str).tolist()
    found: list[tuple[str, str]] = []
    for run in wanted:
        hits = [
            i
            for i in range(len(ids))
            if run in (ids[i], graphs[i]) or (run == names[i] and names.count(run) == 1)
        ]
        if not hits:
            held = ", ".join(f"{i} ({n})" if n else i for i, n in zip(ids, names, strict=True))
            raise StoreError(
                f"no run {run!r} in {st.location}",
                hint=f"runs in the store: {held}" if held else "the store holds no run",
            )
        found.append((ids[hits[0]], graphs[hits[0]]))
    for _, graph in found:
        st.drop(graph)
    return found


class LoadInterrupted(KeyboardInterrupt):
    """A load stopped by Ctrl-C (or SIGTERM turned into it): what was committed and what was not.

    Attributes:
        reports: the graphs loaded completely before the interruption (committed).
        interrupted: the input being loaded when it came (its graph may be incomplete: load it
            again; an incomplete load is not remembered, so it is not taken as unchanged).
        not_started: the inputs after it, not loaded.
    """

    def __init__(self, reports: list[LoadReport], interrupted: str | None, not_started: list[str]):
        super().__init__()
        self.reports = reports
        self.interrupted = interrupted
        self.not_started = not_started


def _name(item: Any) -> str | None:
    """An input as the user gave it (a run id for a graph given in memory)."""
    if item is None:
        return None
    return str(getattr(item, "run_id", None) or item)


__all__ = [
    "LoadInterrupted",
    "DEFAULT_STORE",
    "DEFAULT_CHUNK_BYTES",
    "Endpoint",
    "EmbeddedStore",
    "EndpointStore",
    "LoadReport",
    "Store",
    "derive_gsp",
    "drop",
    "load",
    "open_store",
    "query",
    "results_to_frame",
    "run_fingerprint",
    "split_lines",
    "to_oxigraph",
    "to_store",
]
