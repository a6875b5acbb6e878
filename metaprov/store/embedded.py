"""The embedded store: Oxigraph (pyoxigraph) in a directory or in memory, no server to start.

Input: N-Triples byte chunks per named graph, SPARQL text. Output: the store directory, query
results. Bulk loads stream through staging files that Oxigraph's bulk loader parses in parallel.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd

from metaprov.errors import LimitError, QueryError, StoreError
from metaprov.store.base import LOAD_PART_BYTES, LoadReport, Store, _triples_frame, _unlink_quietly
from metaprov.store.catalog import Catalog
from metaprov.store.owner import check_not_owned

T = TypeVar("T")

if TYPE_CHECKING:
    pass

log = logging.getLogger("metaprov")


#: Name prefix of the N-Triples files a load stages in the store directory.
STAGED_PREFIX = ".metaprov-load-"


class EmbeddedStore(Store):
    """An Oxigraph store in a directory (or in memory), through pyoxigraph.

    Args:
        path: the store directory (created when absent); None for an in-memory store.
        read_only: open for queries only (other processes may keep it open for writing).
        query_timeout: seconds a query may run (None: the running command's ``--timeout``, or
            no limit); a longer one is a :class:`~metaprov.errors.LimitError`.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        read_only: bool = False,
        query_timeout: float | None = None,
    ) -> None:
        import pyoxigraph as ox

        self.query_timeout = query_timeout
        self.path = None if path is None else Path(path)
        self.location = "memory" if path is None else str(self.path)
        self.read_only = read_only
        self.catalog = Catalog(self.path)
        #: The directory was absent (or empty) before: this store was created here.
        self.created = self.path is not None and not read_only and _absent_or_empty(self.path)
        self._was_dir = self.path is not None and self.path.is_dir()
        try:
            if self.path is None:
                self._store = ox.Store()
            else:
                check_store_dir(self.path, create=not read_only)
                if not read_only:
                    check_not_owned(self.path, action="write to it")
                self._store = (
                    ox.Store.read_only(str(self.path)) if read_only else ox.Store(str(self.path))
                )
                if not read_only:
                    self._remove_staged()
                else:
                    self._warn_partial()
        except RuntimeError as exc:  # RocksDB: "Corruption: ..."
            raise _damaged(self.location, exc) from exc
        except OSError as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise StoreError(
                    f"the store {self.location} is in use by another process",
                    hint="wait for the other metaprov load to finish (queries can run meanwhile)",
                ) from exc
            raise StoreError(f"cannot open the store {self.location}: {text}") from exc

    def partial_graphs(self) -> list[str]:
        """Graphs a writer marked ``loading`` in the catalog: being written now, or left part
        written by a process that was stopped (a follow's bulk load or its removal of the
        provisional graph); a follow started again finishes them."""
        return self.catalog.partial()

    def _warn_partial(self) -> None:
        warn_partial_graphs(self.catalog, self.location)

    def _remove_staged(self) -> None:
        """Remove the staging files a killed load left in the store directory.

        Only a writer stages files (``.metaprov-load-*.nt``, see :meth:`_bulk_load`), and a
        writer holds the store's lock: once this process holds it, any staging file is an
        orphan of an earlier load that was killed.
        """
        assert self.path is not None
        for p in self.path.glob(STAGED_PREFIX + "*.nt"):
            try:
                size = p.stat().st_size
                p.unlink()
            except OSError:
                continue
            log.warning(
                "removed %s (%s bytes), left by an earlier interrupted load", p, f"{size:,}"
            )

    @property
    def oxigraph(self) -> Any:
        """The underlying :class:`pyoxigraph.Store` (for advanced use)."""
        return self._store

    def load_chunks(self, graph: str, chunks: Iterable[bytes], *, source: str = "") -> LoadReport:
        self._writable()
        t0 = time.perf_counter()
        node = _named_node(graph)
        replaced = self.drop(graph)
        before = self._own_bytes()
        try:
            lines, parts, nbytes = self._bulk_load(chunks, node)
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
        self._compact(parts, nbytes, before)
        return LoadReport(graph, lines, time.perf_counter() - t0, replaced, source)

    def _load_mapped(self, mapped: list[Any], *, source: str) -> LoadReport:
        """Map a run to staging files, let the run's records and graph go, then bulk-load the
        files one after the other.

        In this order, each step holding its own memory only (measured at 10^6 tasks, 37 M
        triples; docs/benchmarks.md, "Load memory at 10^6 tasks"):

        1. the critical path, from the records' columns, before the mapping builds its tables;
        2. the mapping, written as N-Triples straight into staging files of about
           :data:`LOAD_PART_BYTES` (the export's own writer: the same bytes);
        3. the records and the graph are let go, and the memory they held is handed back;
        4. Oxigraph bulk-loads the files in order, each removed once loaded. Its bulk loader
           holds memory in proportion to what one call loads (1.8 GB for a 3.7 M-triple file,
           0.7 GB in 128 MiB parts, for the same CPU time), so parts bound it whatever the
           run's size, and the mapping (step 2) and the loader (step 4) never hold their
           memory at the same time.

        The price is disk: the run's N-Triples (about 230 bytes per triple, 8.6 GB at 10^6
        tasks) sit in the store's directory until loaded.
        """
        import pyoxigraph as ox

        from metaprov.analysis.critical_path import path_summary

        self._writable()
        t0 = time.perf_counter()
        graph = mapped.pop()
        iri = graph.graph_iri
        node = _named_node(iri)
        derived = {"critical_path": path_summary(graph)}
        _release_memory()
        staged: list[str] = []
        counts: list[int] = []  # triples of each staged part
        try:
            try:
                lines = self._stage_parts(graph, staged, counts)
            except OSError as exc:  # writing a staging file (a full disk)
                raise StoreError(
                    f"cannot stage the run's N-Triples in {self.location}: {exc}",
                    hint="loading a run needs free disk beside the store for its N-Triples "
                    "(about 230 bytes per triple) until they are loaded",
                ) from exc
            del graph
            _release_memory()
            replaced = self.drop(iri)
            before = self._own_bytes()
            nbytes = sum(os.path.getsize(name) for name in staged)
            try:
                for name, count in zip(staged, counts, strict=True):
                    self._store.bulk_load(path=name, format=ox.RdfFormat.N_TRIPLES, to_graph=node)
                    _unlink_quietly(name)
                    if self.on_triples is not None:
                        self.on_triples(count)  # may raise to stop the load: graph removed
            except (SyntaxError, OSError, ValueError) as exc:
                self._remove_quietly(node)  # bulk_load is not transactional across parts
                raise StoreError(
                    f"loading graph <{iri}> into {self.location} failed: {exc}",
                    hint="the partial graph was removed; fix the cause and load again",
                ) from exc
            except BaseException:
                self._remove_quietly(node)
                raise
            self._store.flush()
            self._compact(len(staged), nbytes, before)
        finally:
            for name in staged:
                _unlink_quietly(name)
        report = LoadReport(iri, lines, time.perf_counter() - t0, replaced, source)
        self._remember(report, **derived)
        return report

    def _stage_parts(self, graph: Any, staged: list[str], counts: list[int]) -> int:
        """Write the graph's N-Triples into new staging files of about :data:`LOAD_PART_BYTES`
        each (a part ends after the block that reaches the size), appending each file's name
        to ``staged`` as soon as it exists and its number of triples to ``counts``; returns the
        number of triples.

        Blocks are mapped one ahead in a background thread while the current one is written,
        as ``metaprov export`` does, with the same writer: the parts, concatenated, are the
        export's bytes.
        """
        from metaprov.write.rows import BLOCKS_AHEAD, write_nt

        triples = 0
        out = None
        try:
            for block in graph.blocks(ahead=BLOCKS_AHEAD):
                if out is None:
                    name = self._stage_file()
                    staged.append(name)
                    counts.append(0)
                    out = open(name, "wb")  # noqa: SIM115 - closed below or in finally
                write_nt(block, out, None)
                n = block.n_triples()
                triples += n
                counts[-1] += n
                if out.tell() >= LOAD_PART_BYTES:
                    out.close()
                    out = None
        finally:
            if out is not None:
                out.close()
        return triples

    def _stage_file(self) -> str:
        """A new staging file for N-Triples in the store's directory (a temporary directory
        for an in-memory store); removed by the caller, or by the next writer that opens the
        store when this process dies first."""
        import tempfile

        fd, name = tempfile.mkstemp(
            prefix=STAGED_PREFIX, suffix=".nt", dir=str(self.path) if self.path else None
        )
        os.close(fd)
        return name

    def _bulk_load(self, chunks: Iterable[bytes], node: Any) -> tuple[int, int, int]:
        """Stage the N-Triples chunks in files of about :data:`LOAD_PART_BYTES` and bulk-load
        each file while the next one is written; returns the number of lines, of parts and
        of bytes loaded.

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
        lines = nbytes = 0
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
            fd, name = tempfile.mkstemp(prefix=STAGED_PREFIX, suffix=".nt", dir=where)
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
                nbytes += len(chunk)
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
        return lines, len(staged), nbytes

    def _own_bytes(self) -> int:
        """Bytes of the store's own files (its directory, staging files and catalog aside)."""
        if self.path is None:
            return 0
        total = 0
        with os.scandir(self.path) as it:
            for entry in it:
                if entry.name.startswith(STAGED_PREFIX) or not entry.is_file(follow_symlinks=False):
                    continue
                with contextlib.suppress(OSError):  # RocksDB may remove a file meanwhile
                    total += entry.stat(follow_symlinks=False).st_size
        return total

    def _compact(self, parts: int, nbytes: int, before: int) -> None:
        """Compact the store after a graph was bulk-loaded in several parts, when that graph
        is at least as large as what the store held before (``before`` bytes).

        Each bulk-load call adds its own sorted files, and a graph spread over several sets of
        them is slower to query: on a 3.7 M-triple run loaded in 7 parts `problem-tasks` took
        5.9-7.5 s against 3.0-3.8 s loaded in one call; compacted (11 s), 2.8-3.3 s
        (docs/benchmarks.md). Compacting rewrites the whole store, so it is done only when
        this graph is the larger part of it (its cost then stays within about twice the
        graph's own): a store loaded run after run is compacted by its large loads only.
        """
        if self.path is None or parts < 2 or nbytes < before:
            return
        try:
            self._store.optimize()
        except OSError as exc:  # a full disk while compacting: the data are loaded, keep them
            log.warning(
                "could not compact %s after loading (%s): queries may be slower", self.location, exc
            )

    # --- catalog: per graph, what it was loaded from and facts derived at load time -------------
    # A JSON file beside the store's own files (RocksDB ignores files it did not write).
    keeps_derived = True

    def _entry(self, graph: str) -> dict[str, Any] | None:
        """The catalog entry of ``graph`` while the store holds that graph."""
        entry = self.catalog.graphs().get(graph)
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
        for graph, entry in self.catalog.graphs().items():
            if isinstance(entry, dict) and entry.get("fingerprint") == fingerprint:
                valid = self._valid_entry(graph)
                return None if valid is None else (graph, int(valid["triples"]))
        return None

    def _remember(self, report: LoadReport, **facts: Any) -> None:
        if not self.read_only:
            self.catalog.remember(report.graph, report.triples, report.source, **facts)

    def _forget(self, graph: str) -> None:
        self.catalog.forget(graph)

    def cached_critical_path(self, graph: str) -> dict[str, Any] | None:
        # No full recount here (seconds on tens of millions of quads): the caller checks that the
        # path's tasks are still in the graph, and metaprov forgets the entry whenever it drops
        # or replaces the graph.
        entry = self._entry(graph)
        found = entry.get("critical_path") if entry is not None else None
        # the catalog is a file anyone with write access to the store can forge: a path of
        # another shape is no path (computed again from the graph)
        return found if _path_shaped(found) else None

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
                remove_graph_in_batches(self._store, graph, REMOVE_BATCH)
        except OSError as exc:
            raise StoreError(f"cannot drop graph <{graph}> from {self.location}: {exc}") from exc
        return True

    def graphs(self) -> list[str]:
        import pyoxigraph as ox

        return sorted(g.value for g in self._store.named_graphs() if isinstance(g, ox.NamedNode))

    def _run(self, text: str, read: Callable[[Any], T]) -> T:
        """``read(answer)`` of a query, computed on an engine thread without network (the
        answer of a SELECT is computed as it is read: the reading runs there too)."""
        from metaprov.store.http import TIMEOUT_OVERRIDE
        from metaprov.store.offline import EngineBusy, TimedOut, offline_within

        def run() -> T:
            return read(self._store.query(text, use_default_graph_as_union=True))

        # the command's --timeout: the longest a query may run (none by default)
        seconds = self.query_timeout if self.query_timeout else TIMEOUT_OVERRIDE.get()
        try:
            return offline_within(seconds, run)
        except (TimedOut, EngineBusy) as exc:
            raise LimitError(
                f"the query on the store {self.location} ran longer than {seconds:g} s (the "
                "time limit given) and was abandoned"
                if isinstance(exc, TimedOut)
                else f"the query on the store {self.location} was not started: {exc}",
                hint="narrow the query (fewer patterns joined, a LIMIT), or raise --timeout",
            ) from exc
        except SyntaxError as exc:
            raise QueryError(f"the SPARQL query does not parse: {exc}") from exc
        except RuntimeError as exc:
            raise _damaged(self.location, exc) from exc
        except OSError as exc:
            raise StoreError(f"reading the store {self.location} failed: {exc}") from exc

    def _select_json(self, text: str) -> dict[str, Any]:
        import pyoxigraph as ox

        data = self._run(text, lambda res: res.serialize(format=ox.QueryResultsFormat.JSON))
        return dict(json.loads(data))

    def _ask(self, text: str) -> bool:
        return self._run(text, bool)

    def _select_csv(self, text: str) -> bytes:
        import pyoxigraph as ox

        return self._run(text, lambda res: bytes(res.serialize(format=ox.QueryResultsFormat.CSV)))

    def _construct(self, text: str) -> pd.DataFrame:
        return self._run(text, _triples_frame)

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


def _release_memory() -> None:
    """Hand what Python, Arrow and the C library freed back to the system (each keeps freed
    memory for itself otherwise), so the bulk loader can use what the mapping let go of."""
    import ctypes
    import gc
    import sys

    gc.collect()
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        pass
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (e.g. musl): nothing to trim
            pass


def _damaged(location: str, exc: BaseException) -> StoreError:
    return StoreError(
        f"the store {location} is damaged: {exc}",
        hint="load the runs again into a new store (--store NEWDIR); the damaged directory can "
        "then be deleted",
    )


def _absent_or_empty(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def remove_created(store: EmbeddedStore) -> None:
    """Remove a store this process created and left without a single graph (a first load that
    failed), so no empty store remains to answer "(no results)"; an empty directory given by
    the user stays as it was."""
    import shutil

    if not store.created or store.path is None:
        return
    if store._store is not None and store.graphs():
        return
    store.close()
    shutil.rmtree(store.path, ignore_errors=True)
    if store._was_dir:
        store.path.mkdir(exist_ok=True)


def check_store_dir(path: Path, *, create: bool) -> None:
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


def warn_partial_graphs(catalog: Catalog, location: str) -> None:
    """Tell a reader (a query, a report, a read-only server) that the store holds a graph that
    is not whole (its answers include part of it): which graph, and how to finish or remove it."""
    try:
        partial = catalog.partial()
    except (OSError, ValueError):  # an unreadable catalog reads as empty where it is read
        return
    for g in (g if g.isprintable() else repr(g) for g in partial):
        log.warning(
            "the store %s holds graph <%s> only in part (a follow or load is writing it, or was "
            "stopped while writing it): answers include part of it; start the follow again to "
            "finish it, or remove it with `metaprov drop %s --store %s`",
            location,
            g,
            g,
            location,
        )


#: Largest number of quads one transaction of :func:`remove_graph_in_batches` deletes.
REMOVE_BATCH = 100_000


def remove_graph_in_batches(store: Any, graph: str, batch: int = REMOVE_BATCH) -> None:
    """Remove a named graph from a pyoxigraph store in transactions of at most ``batch`` quads:
    one ``DELETE WHERE`` per predicate the graph uses (a predicate holding more quads: repeated
    on ``LIMIT``-ed slices until none is left), then ``remove_graph`` of the graph left empty.

    Oxigraph has no bulk delete: one transaction for the whole graph (``DELETE WHERE { GRAPH <g>
    { ?s ?p ?o } }``, or ``remove_graph`` alone) slows down as it grows and holds the whole
    change in memory. Measured on an on-disk store, 3.5 M triples (docs/benchmarks.md):
    ``remove_graph`` 340 s; one ``DELETE WHERE`` 116-135 s and +3.2 GB of memory; this way
    90-107 s and +1.4-1.6 GB (at 10^4 tasks: 9.2 s against 5.2 s). Not one transaction: a
    process killed meanwhile leaves part of the graph (removing it again finishes the job).
    The predicates come from the store's own answer (IRIs, written back in N-Triples form)."""
    node = _named_node(graph)
    if not store.contains_named_graph(node):
        return
    g = f"<{graph}>"
    counts = store.query(
        f"SELECT ?p (COUNT(*) AS ?n) WHERE {{ GRAPH {g} {{ ?s ?p ?o }} }} GROUP BY ?p"
    )
    for p, n in [(str(row[0]), int(row[1].value)) for row in counts]:
        if n <= batch:
            store.update(f"DELETE WHERE {{ GRAPH {g} {{ ?s {p} ?o }} }}")
            continue
        while store.query(f"ASK {{ GRAPH {g} {{ ?s {p} ?o }} }}"):
            store.update(
                f"DELETE {{ GRAPH {g} {{ ?s {p} ?o }} }} WHERE {{ {{ SELECT ?s ?o "
                f"WHERE {{ GRAPH {g} {{ ?s {p} ?o }} }} LIMIT {batch} }} }}"
            )
    store.remove_graph(node)  # empty now: only its name goes


def _named_node(iri: str) -> Any:
    import pyoxigraph as ox

    try:
        return ox.NamedNode(iri)
    except ValueError as exc:
        raise StoreError(f"{iri!r} is not a valid graph IRI: {exc}") from exc


#: An absolute IRI as N-Triples and SPARQL write it between ``<>`` (nothing that would end it).
_IRI = re.compile(r'[A-Za-z][A-Za-z0-9+.-]*:[^\x00-\x20<>"{}|^`\\]*\Z')


def _path_shaped(found: Any) -> bool:
    """Is ``found`` a recorded critical path: ``tasks`` (IRIs) and ``weights`` (finite
    numbers), lists of the same length?"""
    if not isinstance(found, dict):
        return False
    tasks, weights = found.get("tasks"), found.get("weights")
    return (
        isinstance(tasks, list)
        and isinstance(weights, list)
        and len(tasks) == len(weights)
        and all(isinstance(t, str) and _IRI.match(t) for t in tasks)
        and all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w)
            for w in weights
        )
    )
