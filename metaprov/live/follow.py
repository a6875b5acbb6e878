"""Keep a store's graph of a run current while the run is being written.

Input: a run directory being written (metaprov's capture, or Mofka-Dask CSV writers), a store
(an embedded store directory, or a SPARQL server). Output: the run's named graph in the store,
refreshed at every interval, and finally the run's graph exactly as ``metaprov export`` writes it.

**One refresh.** Take a whole-row snapshot of the run directory (:mod:`metaprov.live.snapshot`),
read and map it as any run (one conversion of the run so far), add the state triples, and hand
the store the difference with the previous refresh: the triples to delete and to insert, in one
SPARQL Update request (``DELETE DATA {...} ; INSERT DATA {...}``), which Oxigraph (embedded and
server) applies in one transaction. Readers see the previous or the new refresh, never a mix.
The difference is found on Arrow lines and 128-bit keys (:mod:`metaprov.live.lines`): the graph
is never held as one Python object per triple, and only the changed lines become text. A
snapshot equal to the previous one is not converted again: only its state triples change.

**Identity while in progress.** A run's id (hence its graph's and instances' IRIs) is derived
from its content, task count included, so it would change at every refresh. While the run is in
progress its graph uses a *provisional* id derived from the run directory's absolute path
(:func:`provisional_id`), stable across refreshes and restarts; the graph holds the run's state
(``mp:liveState "in progress"``, ``mp:liveUpdated``, ``mp:liveLag``). When the run is complete
the provisional graph is replaced by the final one: in an embedded store as ``metaprov load``
writes a run (bulk loader; the in-process server shows the final graph only once whole, and
hides the provisional one in the same step before removing it; the run's derived facts
recorded, see :meth:`EmbeddedTarget.replace`); on a server in one request when it fits (else:
the final graph is sent in pieces, then the provisional one dropped).

**Complete** when ``metaprov-run.json`` says ``complete`` (the capture's last write), or, for
runs without it (Mofka-Dask writers, a capture that died), when no file of the run directory
changed for ``quiet`` seconds.

**Restart.** Nothing is kept outside the store: a new ``follow`` reads the provisional graph back
from the store, so its first refresh sends only the difference, and a follow killed at any moment
converges to the same final graph when started again.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metaprov.errors import InputError, StoreError, UsageError
from metaprov.live.snapshot import FINISHED, take_snapshot

if TYPE_CHECKING:
    import pyarrow as pa

    from metaprov.live.lines import LineSet

log = logging.getLogger("metaprov")

#: Seconds between refreshes by default.
DEFAULT_INTERVAL = 2.0
#: Seconds without any change after which a run without a completion signal is complete.
DEFAULT_QUIET = 120.0
#: Largest SPARQL Update request sent to a server (bytes); larger changes are split.
DEFAULT_MAX_REQUEST = 32 << 20
#: State of a run being followed (``mp:liveState``).
IN_PROGRESS = "in progress"


@dataclass
class Refresh:
    """One refresh of the followed run's graph.

    Attributes:
        number: 1, 2, ...
        state: ``in progress`` or ``complete``.
        graph: the graph written.
        tasks: tasks in the graph.
        triples: triples in the graph.
        added, removed: triples inserted and deleted by this refresh.
        seconds: wall time of the refresh (snapshot, conversion, store update).
        convert_seconds: of which reading and mapping the run (N-Triples included).
        diff_seconds: of which finding the triples to delete and insert (in progress; the
            final swap's diff is counted in ``store_seconds``).
        store_seconds: of which updating the store.
        snapshot_time: when the snapshot was taken (epoch seconds).
        newest_row: time of the newest row in the snapshot (epoch seconds; None if unknown).
        lag: seconds between the newest row and the snapshot.
        reason: why the run is complete (``capture``: metaprov-run.json; ``quiet``).
        method: how the difference was found: ``full`` (the whole snapshot formatted and
            keyed), ``rows`` (only the rows that changed formatted), ``unchanged`` (the same
            snapshot: only the state moved) or ``final`` (the final swap).
        rows_formatted: rows of the mapped blocks formatted as N-Triples by this refresh
            (the rows path: the rows new or gone since the previous refresh).
        rows_mapped: rows of the mapped blocks (subjects of the run's classes; a refresh in
            progress only).
        files_appended: CSV files of which only the rows appended since the previous refresh
            were parsed (:class:`~metaprov.ingest.csvread.ParseCache`).
    """

    number: int
    state: str
    graph: str
    tasks: int
    triples: int
    added: int
    removed: int
    seconds: float
    convert_seconds: float
    store_seconds: float
    diff_seconds: float
    snapshot_time: float
    newest_row: float | None
    lag: float | None
    reason: str = ""
    method: str = ""
    rows_formatted: int = 0
    rows_mapped: int = 0
    files_appended: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FollowResult:
    """What :func:`follow` did: the refreshes, the final graph."""

    run: str
    graph: str = ""
    refreshes: list[Refresh] = field(default_factory=list)
    complete: bool = False


def provisional_id(run: str | Path) -> str:
    """The run id used while ``run`` is in progress: from its absolute path (stable across
    refreshes and restarts; the final graph uses the content-derived id)."""
    path = os.path.abspath(os.fspath(run))
    return "live-" + hashlib.sha256(b"metaprov-live\x1f" + os.fsencode(path)).hexdigest()[:16]


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---------------------------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------------------------


@dataclass
class Converted:
    """A snapshot read and mapped: its graph IRI, its run's IRI, its N-Triples lines (Arrow
    ``large_string`` chunks over the writer's text: no Python object per line), its task count
    and the time of its newest row."""

    graph: str
    run_iri: str
    text: pa.ChunkedArray
    tasks: int
    newest_row: float | None
    #: the mapped blocks the lines were formatted from (for the next refresh's row difference)
    blocks: list[Any] = field(default_factory=list)

    @property
    def lines(self) -> list[bytes]:
        """The lines as Python bytes (one object per line: for small graphs and the final
        swap; refreshes in progress diff :attr:`text` instead, see :mod:`metaprov.live.lines`)."""
        from metaprov.live.lines import as_bytes_lines

        return as_bytes_lines(self.text)


def convert(
    snapshot: Path,
    run: Path,
    *,
    base: str,
    detail: str,
    darshan: bool,
    run_id: str | None,
    lines: bool = True,
    cache: Any = None,
) -> Converted:
    """Read and map a snapshot as the run ``run`` (its name, its path); ``run_id`` overrides the
    content-derived id (the provisional id while in progress). ``lines=False``: the mapped
    blocks only, no N-Triples (a refresh that formats only the rows that changed,
    :mod:`metaprov.live.rows`)."""
    import pyarrow as pa

    from metaprov.live.lines import SEEDS, split_lines
    from metaprov.live.rows import row_keys
    from metaprov.mapping.terms import MP, RunIris
    from metaprov.write.rows import BLOCKS_AHEAD, write_nt

    graph = final_graph(
        snapshot, run, base=base, detail=detail, darshan=darshan, run_id=run_id, cache=cache
    )
    records = graph.records
    chunks = []
    blocks = []
    for block in graph.blocks(ahead=BLOCKS_AHEAD):
        if run_id is not None:
            # "never ran" is a fact of a finished run: while in progress a task without an
            # execution is waiting or running (its mp:state says which), so the claim is left
            # out until the end
            block.columns = [c for c in block.columns if c.predicate != MP.neverRan]
        blocks.append(block)
        if not lines:
            # the rows path's keys, computed while the mapping thread maps the next block
            row_keys(block, SEEDS)
            continue
        buf = io.BytesIO()
        write_nt(block, buf)
        if buf.tell():
            chunks.append(split_lines(buf.getbuffer()))
    return Converted(
        graph.graph_iri,
        RunIris(base, records.run_id).run,
        pa.chunked_array(chunks, type=pa.large_string()),
        len(records.tasks),
        _newest(records),
        blocks,
    )


def final_graph(
    snapshot: Path,
    run: Path,
    *,
    base: str,
    detail: str,
    darshan: bool,
    run_id: str | None = None,
    cache: Any = None,
) -> Any:
    """The run's PROV graph (:class:`~metaprov.mapping.ProvGraph`), mapped from a snapshot
    exactly as ``metaprov export`` and ``metaprov load`` map the run directory; ``run_id``
    overrides the content-derived id (the provisional id while in progress); ``cache``: a
    :class:`~metaprov.ingest.csvread.ParseCache` kept across refreshes (only the rows appended
    since the previous read are parsed; the same records)."""
    from metaprov.ingest import read_run
    from metaprov.ingest.csvread import parse_cache
    from metaprov.mapping import to_prov
    from metaprov.store.base import _maybe_link

    with parse_cache(cache):
        records = read_run(snapshot, darshan=darshan)
    records.path = str(run)
    if run_id is not None:
        records.run_id = run_id
    _maybe_link(records)
    return to_prov(records, base=base, detail=detail)


def _newest(records: Any) -> float | None:
    last = records.span[1]
    return None if last is None else float(last.value) / 1e9


def _same_fingerprint(
    snapshot: Path, run: Path, *, base: str, detail: str, darshan: bool
) -> str | None:
    """The run directory's load fingerprint (:func:`metaprov.store.catalog.run_fingerprint`)
    when the snapshot converted holds the same files (so ``metaprov load RUN`` would write this
    very graph and may say "unchanged"), else None (e.g. the workers' parts of a capture that
    died were merged into the snapshot only, or the run changed since). The files' names and
    sizes are compared first: when they differ the fingerprints do too, and nothing is read (a
    sparse file's hole, never copied into the snapshot, would be read as gigabytes of zeros)."""
    from metaprov.store.catalog import run_fingerprint

    try:
        if _names_and_sizes(snapshot) != _names_and_sizes(run):
            return None
        fp = run_fingerprint(run, base=base, detail=detail, darshan=darshan)
        same = run_fingerprint(snapshot, base=base, detail=detail, darshan=darshan) == fp
    except (InputError, OSError):
        return None
    return fp if same else None


def _names_and_sizes(directory: Path) -> list[tuple[str, int]]:
    """The name and size of each file a fingerprint hashes (before each file's bytes)."""
    from metaprov.store.catalog import fingerprint_files

    return [(p.name, p.stat().st_size) for p in fingerprint_files(directory)]


def state_lines(run_iri: str, *, updated: float, lag: float | None) -> list[bytes]:
    """The state triples of a run in progress (absent from the final graph)."""
    from metaprov.mapping.terms import MP

    xsd = "http://www.w3.org/2001/XMLSchema#"
    out = [
        f'<{run_iri}> <{MP.liveState}> "{IN_PROGRESS}" .\n',
        f'<{run_iri}> <{MP.liveUpdated}> "{_utc(updated)}"^^<{xsd}dateTime> .\n',
    ]
    if lag is not None:
        out.append(f'<{run_iri}> <{MP.liveLag}> "{max(lag, 0.0):.3f}"^^<{xsd}decimal> .\n')
    return [s.encode() for s in out]


def same_triples_apart(removed: list[bytes], added: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The lines to delete and insert without the triples both state (in different lexical
    forms of the same literal, e.g. the store's canonical ``"...12.57095Z"`` and the mapping's
    ``"...12.570950Z"``). Compared as RDF terms by Oxigraph itself (an in-memory store: the two
    sides in two graphs, their common triples deleted from both in one SPARQL Update), so
    nothing is compared by hand; the insertions left come back in Oxigraph's forms (the same
    triples). After a restart ~30 % of a graph read back from the store differs only so."""
    import pyoxigraph as ox

    if not removed or not added:
        return removed, added
    fmt = ox.RdfFormat.N_TRIPLES
    g_del, g_add = ox.NamedNode("urn:metaprov:delete"), ox.NamedNode("urn:metaprov:insert")
    tmp = ox.Store()
    tmp.load(b"".join(removed), format=fmt, to_graph=g_del)
    tmp.load(b"".join(added), format=fmt, to_graph=g_add)
    tmp.update(
        f"DELETE {{ GRAPH <{g_del.value}> {{ ?s ?p ?o }} GRAPH <{g_add.value}> {{ ?s ?p ?o }} }}"
        f" WHERE {{ GRAPH <{g_del.value}> {{ ?s ?p ?o }} GRAPH <{g_add.value}> {{ ?s ?p ?o }} }}"
    )
    out = []
    for g in (g_del, g_add):
        out.append(bytes(tmp.dump(format=fmt, from_graph=g)).splitlines(keepends=True))
    return out[0], out[1]


def _split_state(text: bytes, run_iri: str) -> tuple[LineSet, set[bytes]]:
    """A provisional graph read back from the store: (its mapped lines, its state lines)."""
    import pyarrow.compute as pc

    from metaprov.live.lines import LineSet, as_bytes_lines, split_lines
    from metaprov.mapping.terms import MP

    if not text:
        return LineSet.of([]), set()
    lines = split_lines(text)
    mask = None
    for p in (MP.liveState, MP.liveUpdated, MP.liveLag):
        m = pc.starts_with(lines, f"<{run_iri}> <{p}> ")
        mask = m if mask is None else pc.or_(mask, m)
    return LineSet.of([lines.filter(pc.invert(mask))]), set(as_bytes_lines(lines.filter(mask)))


@dataclass
class _Change:
    """What one refresh in progress sends: the conversion, the lines to delete and to insert,
    the triples the graph then holds, how it was found, and when each step ended."""

    conv: Converted
    removed: list[bytes]
    added: list[bytes]
    triples: int
    method: str
    rows: int
    rows_mapped: int
    converted: float
    diffed: float


class _Provisional:
    """The provisional graph as the store holds it, and the difference a new snapshot makes.

    Two ways to find the difference (:attr:`incremental` picks): **full**, every line of the
    snapshot's conversion formatted and keyed, matched with the lines held
    (:func:`metaprov.live.lines.diff`); **rows**, only the rows of the mapped blocks that are new
    or gone since the previous refresh formatted (:mod:`metaprov.live.rows`, the same answer).
    The first refresh of a process is full (it reads the graph back from the store: a restart
    resumes from whatever the store holds); the rows path needs the previous refresh's blocks.
    """

    def __init__(self, target: Any, graph: str, *, incremental: bool) -> None:
        from metaprov.ingest.csvread import ParseCache

        #: the run's CSV parses, kept across refreshes (only appended rows parsed again)
        self.cache = ParseCache() if incremental else None
        self.target = target
        self.graph = graph
        self.incremental = incremental
        self.body: LineSet | None = None  # mapped lines held (full path)
        self.rows: Any = None  # RowState of the graph held (rows path)
        self.state: set[bytes] | None = None  # state lines held; None: not read back yet
        self.conv: Converted | None = None  # the conversion the store holds
        self.signature: tuple[Any, ...] | None = None  # of the snapshot it came from

    def forget(self) -> None:
        """Let go of what the refreshes held (before the final conversion; the parse cache is
        kept for it)."""
        self.body = self.rows = self.conv = self.state = self.signature = None

    def _read_back(self, run_iri: str) -> None:
        self.body, self.state = _split_state(self.target.current_text(self.graph), run_iri)

    def change(self, signature: tuple[Any, ...], conv_of: Callable[[bool], Converted]) -> _Change:
        """The difference a snapshot (its signature; ``conv_of(lines)`` converts it) makes to
        the mapped lines held (the state lines are the caller's)."""
        from metaprov.live.lines import SEEDS, LineSet, diff
        from metaprov.live.rows import advance, all_lines, start

        if self.conv is not None and signature == self.signature:
            # same snapshot as the last refresh: only the state moves
            t = time.monotonic()
            held = len(self.rows) if self.rows is not None else len(self.body or ())
            return _Change(self.conv, [], [], held, "unchanged", 0, 0, t, t)
        if self.rows is not None:
            conv = conv_of(False)
            converted = time.monotonic()
            step = advance(self.rows, conv.blocks, SEEDS)
            if step is not None:
                removed, added, self.rows, n_rows = step
                return self._held(signature, conv, removed, added, "rows", n_rows, converted)
            # a 64-bit collision among the keys: the full path decides exactly
            conv.text = all_lines(conv.blocks)
            self.rows = self.body = None
        else:
            conv = conv_of(True)
            converted = time.monotonic()
        read_back = self.body is None
        if read_back:
            self._read_back(conv.run_iri)
        assert self.body is not None
        new_body = LineSet.of(conv.text.chunks)
        removed, added = diff(self.body, new_body)
        if read_back:
            # the store writes some literals in its own forms ("...12.57095Z" for our
            # "...12.570950Z"): the same triples, not a change to send
            removed, added = same_triples_apart(removed, added)
        # the row state from the lines just keyed (not keyed again)
        self.rows = start(conv.blocks, new_body, SEEDS) if self.incremental else None
        self.body = None if self.rows is not None else new_body
        return self._held(signature, conv, removed, added, "full", None, converted, len(new_body))

    def _held(
        self,
        signature: tuple[Any, ...],
        conv: Converted,
        removed: list[bytes],
        added: list[bytes],
        method: str,
        n_rows: int | None,
        converted: float,
        triples: int | None = None,
    ) -> _Change:
        """The change, with the conversion kept as the one the store holds; ``n_rows``: rows
        formatted (None: every row mapped)."""
        import pyarrow as pa

        mapped = sum(len(b) for b in conv.blocks)
        if n_rows is None:
            n_rows = mapped
        # what the next refreshes need of the conversion: its IRIs, counts and times (the
        # blocks live on in the row state, the lines in the held LineSet)
        conv.text = pa.chunked_array([], type=pa.large_string())
        conv.blocks = []
        self.conv, self.signature = conv, signature
        if triples is None:
            triples = len(self.rows)
        return _Change(
            conv, removed, added, triples, method, n_rows, mapped, converted, time.monotonic()
        )


# ---------------------------------------------------------------------------------------------
# Targets: how a refresh reaches a store
# ---------------------------------------------------------------------------------------------


class ReadWriteLock:
    """Many readers or one writer (the in-process server's queries against a large final swap
    that cannot be one transaction)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        #: Named graphs the in-process server leaves out of every answer: a graph being
        #: bulk-loaded (not whole yet), or a graph being dropped (replaced by a whole one).
        #: Changed only under :meth:`write`, read under :meth:`read`.
        self.hidden: frozenset[str] = frozenset()

    def set_hidden(self, graphs: Iterable[str]) -> None:
        """Change which graphs readers do not see, between two queries (never during one)."""
        with self.write():
            self.hidden = frozenset(graphs)

    def read(self) -> Any:
        lock = self

        class _Read:
            def __enter__(self) -> None:
                with lock._cond:
                    while lock._writer:
                        lock._cond.wait()
                    lock._readers += 1

            def __exit__(self, *exc: object) -> None:
                with lock._cond:
                    lock._readers -= 1
                    lock._cond.notify_all()

        return _Read()

    def write(self) -> Any:
        lock = self

        class _Write:
            def __enter__(self) -> None:
                with lock._cond:
                    while lock._writer:
                        lock._cond.wait()
                    lock._writer = True
                    while lock._readers:
                        lock._cond.wait()

            def __exit__(self, *exc: object) -> None:
                with lock._cond:
                    lock._writer = False
                    lock._cond.notify_all()

        return _Write()


def _data_block(keyword: str, graph: str, lines: Iterable[bytes]) -> bytes:
    body = b"".join(lines)
    if not body:
        return b""
    return f"{keyword} {{ GRAPH <{graph}> {{\n".encode() + body + b"} }"


def _update_text(
    drop: Iterable[str], graph: str, removed: list[bytes], added: list[bytes]
) -> bytes:
    parts = [f"DROP SILENT GRAPH <{g}>".encode() for g in drop]
    if removed:
        parts.append(_data_block("DELETE DATA", graph, removed))
    if added:
        parts.append(_data_block("INSERT DATA", graph, added))
    return b" ;\n".join(parts)


def loading_graphs(store: Any) -> set[str]:
    """Graphs of an embedded store that a follow was bulk-loading or removing when it stopped
    (the catalog's ``loading`` mark): not whole, so hidden from readers until a follow replaces
    or removes them."""
    catalog = getattr(store, "catalog", None)
    return set(catalog.partial()) if catalog is not None else set()


class EmbeddedTarget:
    """Refreshes into an embedded store (pyoxigraph).

    A change to a graph the store already shows is one transaction (a SPARQL Update) when it
    fits in :attr:`max_update` bytes, else applied under the exclusive lock (the in-process
    server's queries wait for it). A graph the store does not hold yet (the first refresh, the
    final graph) is written by Oxigraph's bulk loader, as ``metaprov load`` writes a run, while
    the in-process server leaves it out of its answers (:attr:`ReadWriteLock.hidden`) until it
    is whole; a graph replaced by another (the provisional graph, at the final swap) is hidden
    in the same step as its replacement appears, then removed.
    """

    #: Above this many bytes a change to a shown graph is not one SPARQL Update (memory): it
    #: runs under the exclusive lock instead, so the in-process server's queries wait for it.
    max_update = 256 << 20
    #: From this many bytes of N-Triples a new graph is bulk-loaded rather than inserted in one
    #: transaction (Oxigraph's transactional insert: ~15 k triples/s on disk; its bulk loader:
    #: ~100 k/s). A replacing graph (``drop`` given) is always bulk-loaded.
    bulk_min = 1 << 20
    #: At most this many quads are deleted per transaction when a graph is removed
    #: (:meth:`_remove`): Oxigraph's transactions slow down and grow in memory beyond.
    remove_batch = 100_000

    def __init__(self, store: Any, lock: ReadWriteLock | None = None) -> None:
        self.store = store
        self.ox = store.oxigraph if hasattr(store, "oxigraph") else store._store
        self.lock = lock or ReadWriteLock()
        self.location = store.location
        #: Seconds of the last final swap's steps (written by :meth:`replace`).
        self.timings: dict[str, float] = {}
        # a graph a killed follow was bulk-loading is not whole: hidden until replaced
        partial = loading_graphs(store)
        if partial - self.lock.hidden:
            self.lock.set_hidden(self.lock.hidden | partial)

    # --- the catalog's "loading" marks: a bulk load in progress (or killed mid-way) ----------
    def _mark_loading(self, graph: str) -> None:
        catalog = getattr(self.store, "catalog", None)
        if catalog is not None:
            catalog.mark_partial(graph)

    def _node(self, graph: str) -> Any:
        import pyoxigraph as ox

        return ox.NamedNode(graph)

    def _has(self, graph: str) -> bool:
        return bool(self.ox.contains_named_graph(self._node(graph)))

    def current(self, graph: str) -> set[bytes]:
        return set(self.current_text(graph).splitlines(keepends=True))

    def current_text(self, graph: str) -> bytes:
        """The graph as the store holds it, as N-Triples text (empty when absent)."""
        import pyoxigraph as ox

        node = ox.NamedNode(graph)
        if not self.ox.contains_named_graph(node):
            return b""
        return bytes(self.ox.dump(format=ox.RdfFormat.N_TRIPLES, from_graph=node))

    def apply(
        self, graph: str, removed: list[bytes], added: list[bytes], drop: tuple[str, ...] = ()
    ) -> None:
        """Make ``graph`` lose ``removed`` and gain ``added``; then remove the graphs ``drop``
        (which ``graph`` replaces: readers of the in-process server see them or ``graph``,
        never both, never a part of either)."""
        for g in (graph, *drop):
            self.store._forget(g)
        if not (removed or added or drop):
            return
        try:
            fresh = not removed and not self._has(graph)
            size = sum(map(len, added))
            if drop:
                self.lock.set_hidden(self.lock.hidden | {graph})
            if fresh and (drop or size >= self.bulk_min):
                self._bulk_hidden(graph, lambda: [b"".join(added)])
                if not drop:
                    self.lock.set_hidden(self.lock.hidden - {graph})
            elif removed or added:
                text = _update_text((), graph, removed, added)
                if len(text) <= self.max_update:
                    self.ox.update(text.decode("utf-8"))
                else:
                    self._apply_locked(graph, removed, added)
            if drop:
                self._swap(graph, drop)
        except (OSError, SyntaxError, ValueError, RuntimeError) as exc:
            raise StoreError(f"updating <{graph}> in {self.location} failed: {exc}") from exc
        finally:
            self.ox.flush()

    def _apply_locked(self, graph: str, removed: list[bytes], added: list[bytes]) -> None:
        """A change too large for one transaction, under the exclusive lock (this process's
        server waits): deletions first, then the bulk loader."""
        import pyoxigraph as ox

        node = self._node(graph)
        with self.lock.write():
            for t in ox.parse(b"".join(removed), format=ox.RdfFormat.N_TRIPLES):
                self.ox.remove(ox.Quad(t.subject, t.predicate, t.object, node))
            if added:
                self.ox.bulk_load(b"".join(added), format=ox.RdfFormat.N_TRIPLES, to_graph=node)

    def _bulk_hidden(self, graph: str, chunks: Callable[[], Iterable[bytes]]) -> int:
        """Bulk-load ``chunks()`` into the new graph ``graph`` while the in-process server
        leaves it out (it stays hidden: the caller shows it); returns the lines loaded.

        The N-Triples go through the store's own staged bulk load (files of about 128 MiB in
        its directory, each loaded while the next is written), as ``metaprov load`` does, so the
        loader's memory stays bounded whatever the run's size. The graph is marked ``loading`` in the
        catalog meanwhile: a follow killed here leaves a partial graph that the next follow
        (or ``metaprov load``) replaces, and that ``serve --follow`` hides when it starts.
        """
        self.lock.set_hidden(self.lock.hidden | {graph})
        node = self._node(graph)
        self._mark_loading(graph)
        try:
            lines, _parts, _bytes = self.store._bulk_load(chunks(), node)
            self.ox.flush()
        except BaseException:
            with contextlib.suppress(Exception):  # not transactional: leave nothing half
                self.ox.remove_graph(node)
            raise
        finally:
            self.store._forget(graph)  # the "loading" mark (only a killed process leaves it)
        return lines

    def _swap(self, graph: str, drop: Iterable[str]) -> None:
        """Show ``graph`` and hide ``drop`` in one step (between two queries), then remove the
        hidden graphs (:meth:`_remove`). Each is marked ``loading`` in the catalog until it is
        gone: its removal takes several transactions, and a follow killed meanwhile leaves part
        of it, which ``serve --follow`` hides when it starts and the next follow removes."""
        drop = [g for g in drop if g != graph]
        self.lock.set_hidden((self.lock.hidden - {graph}) | set(drop))
        for g in drop:
            if self._has(g):
                self._mark_loading(g)
                self._remove(g)
            self.store._forget(g)
        self.ox.flush()
        self.lock.set_hidden(self.lock.hidden - set(drop))

    def _remove(self, graph: str) -> None:
        """Remove a named graph in transactions of at most :attr:`remove_batch` quads
        (:func:`metaprov.store.embedded.remove_graph_in_batches`: per predicate, ``LIMIT``-ed
        slices for the largest; one transaction for the whole graph slows down as it grows)."""
        from metaprov.store.embedded import remove_graph_in_batches

        remove_graph_in_batches(self.ox, graph, self.remove_batch)

    def replace(
        self,
        graph: Any,
        drop: tuple[str, ...],
        *,
        source: str,
        fingerprint: str | None = None,
    ) -> int:
        """The final swap: the run's final graph (a mapped :class:`~metaprov.mapping.ProvGraph`)
        replaces the graphs ``drop`` (the provisional one), written as ``metaprov load`` writes a
        run (the bulk loader, from a staging file); the run's derived facts (triples, critical
        path, and ``fingerprint``: the run directory's, when it is what was converted) are
        recorded as ``metaprov load`` records them, so a later load of the finished run says
        "unchanged". Readers of the in-process server see the provisional graph until the final
        one is whole, then the final one; never both, never a part. Returns the triples.

        A final graph already in the store (a follow killed after loading it) is kept when the
        catalog says it is whole and of this content, else replaced.
        """
        from metaprov.analysis.critical_path import path_summary
        from metaprov.write import iter_ntriples

        iri = graph.graph_iri
        node = self._node(iri)
        t0 = time.perf_counter()
        try:
            known = self.store._unchanged(fingerprint) if fingerprint else None
            if known is not None and known[0] == iri:
                lines = known[1]
                facts: dict[str, Any] = {}
                cached = self.store.cached_critical_path(iri)
                if cached is not None:
                    facts["critical_path"] = cached
            else:
                self.lock.set_hidden(self.lock.hidden | {iri})
                if self.ox.contains_named_graph(node):  # not whole, or of other content
                    self._mark_loading(iri)
                    self._remove(iri)
                facts = {}

                def chunks() -> Iterator[bytes]:
                    yield from iter_ntriples(graph)
                    facts["critical_path"] = path_summary(graph)

                lines = self._bulk_hidden(iri, chunks)
            if fingerprint:
                facts["fingerprint"] = fingerprint
            self.store.catalog.remember(iri, lines, source, **facts)
            t1 = time.perf_counter()
            self._swap(iri, drop)
            self.timings = {"final_load_s": t1 - t0, "drop_s": time.perf_counter() - t1}
        except (OSError, SyntaxError, ValueError, RuntimeError) as exc:
            raise StoreError(
                f"writing the final graph <{iri}> into {self.location} failed: {exc}",
                hint="start the follow again: it replaces what was written",
            ) from exc
        finally:
            self.ox.flush()
        return lines


class EndpointTarget:
    """Refreshes into a SPARQL server: SPARQL Update requests (one per refresh when it fits)."""

    def __init__(
        self, store: Any, update_url: str | None = None, max_request: int = DEFAULT_MAX_REQUEST
    ):
        self.store = store
        self.update_url = update_url or derive_update(store.endpoint.query)
        self.max_request = max_request
        self.location = store.location
        self.split_warned = False

    def current(self, graph: str) -> set[bytes]:
        return set(self.current_text(graph).splitlines(keepends=True))

    def current_text(self, graph: str) -> bytes:
        """The graph as the server holds it, as N-Triples text (empty when absent)."""
        resp = self.store._request(
            "GET",
            self.store.endpoint.gsp,
            what=f"reading graph <{graph}>",
            params={"graph": graph},
            headers={"Accept": "application/n-triples"},
        )
        if resp.status == 404:
            return b""
        if resp.status >= 300:
            self.store._fail(resp, f"reading graph <{graph}>")
        return bytes(resp.body)

    def _post(self, text: bytes, what: str) -> None:
        resp = self.store._request(
            "POST",
            self.update_url,
            what=what,
            body=text,
            headers={"Content-Type": "application/sparql-update; charset=utf-8"},
        )
        if resp.status >= 300:
            self.store._fail(resp, what)

    def apply(
        self, graph: str, removed: list[bytes], added: list[bytes], drop: tuple[str, ...] = ()
    ) -> None:
        text = _update_text(drop, graph, removed, added)
        if not text:
            return
        if len(text) <= self.max_request:
            self._post(text, f"updating graph <{graph}>")
            return
        if not self.split_warned:
            log.warning(
                "a refresh of <%s> is larger than %d bytes: sent as several requests (until the "
                "last one, readers see a state between two refreshes; a final graph being "
                "written beside the provisional one)",
                graph,
                self.max_request,
            )
            self.split_warned = True
        for keyword, lines in (("DELETE DATA", removed), ("INSERT DATA", added)):
            piece: list[bytes] = []
            size = 0
            for line in lines:
                if size + len(line) > self.max_request and piece:
                    self._post(_data_block(keyword, graph, piece), f"updating graph <{graph}>")
                    piece, size = [], 0
                piece.append(line)
                size += len(line)
            if piece:
                self._post(_data_block(keyword, graph, piece), f"updating graph <{graph}>")
        # the final graph is whole: only now is the provisional one dropped
        for g in drop:
            self._post(f"DROP SILENT GRAPH <{g}>".encode(), f"dropping graph <{g}>")


def derive_update(query_url: str) -> str:
    """The SPARQL Update endpoint of a server, from its query endpoint (Oxigraph ``/query`` ->
    ``/update``; Fuseki ``/ds/query`` -> ``/ds/update``; GraphDB ``/repositories/r`` ->
    ``/repositories/r/statements``; Virtuoso ``/sparql`` -> itself).

    Raises:
        UsageError: an unknown layout (give ``--update URL``).
    """
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(query_url)
    segs = [s for s in parts.path.rstrip("/").split("/") if s]

    def with_path(p: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, p, "", ""))

    if len(segs) >= 2 and segs[-2] == "repositories":
        return with_path("/" + "/".join(segs) + "/statements")
    if segs and segs[-1] == "query":
        return with_path("/" + "/".join([*segs[:-1], "update"]))
    if segs == ["sparql"]:
        return with_path("/sparql")
    if len(segs) >= 2 and segs[-1] == "sparql":
        return with_path("/" + "/".join([*segs[:-1], "update"]))
    raise UsageError(
        f"cannot tell the SPARQL Update endpoint of {query_url}",
        hint="give it with --update URL (e.g. http://host:3030/ds/update for Fuseki)",
    )


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------


@dataclass
class _Mapping:
    """The mapping options of a follow (as for ``metaprov export``)."""

    base: str
    detail: str
    darshan: bool


@dataclass
class _Outcome:
    """What one refresh did to the store (see :class:`Refresh`); ``converted``/``diffed``: when
    its conversion and its difference ended (monotonic clock)."""

    state: str
    graph: str
    tasks: int
    newest_row: float | None
    triples: int
    added: int
    removed: int
    converted: float
    diffed: float
    method: str
    rows: int = 0
    rows_mapped: int = 0
    files_appended: int = 0


def _in_progress(
    held: _Provisional,
    signature: tuple[Any, ...],
    parts: Iterable[str],
    snap_dir: Path,
    run: Path,
    snap_time: float,
    mapping: _Mapping,
    prov_id: str,
) -> _Outcome:
    """A refresh in progress: the provisional graph brought to the snapshot (its mapped lines'
    difference and its state lines), in one update."""

    def conv_of(lines: bool) -> Converted:
        return convert(
            snap_dir,
            run,
            base=mapping.base,
            detail=mapping.detail,
            darshan=mapping.darshan,
            run_id=prov_id,
            lines=lines,
            cache=held.cache,
        )

    appended = 0
    if held.cache is not None:
        # the snapshot's merge of a capture's worker part files re-sorts them by time: not
        # append-only, so not worth checking against the kept parse
        held.cache.skip = {f"{table}.csv" for table in parts}
        appended = held.cache.stats["appended"]
    ch = held.change(signature, conv_of)
    if held.cache is not None:
        appended = held.cache.stats["appended"] - appended
    conv = ch.conv
    lag = None if conv.newest_row is None else snap_time - conv.newest_row
    state_now = state_lines(conv.run_iri, updated=snap_time, lag=lag)
    was = held.state or set()  # the rows path kept it; the full path read it back
    removed = ch.removed + sorted(was - set(state_now))
    added = ch.added + [ln for ln in state_now if ln not in was]
    held.target.apply(held.graph, removed, added)
    held.state = set(state_now)
    return _Outcome(
        IN_PROGRESS,
        held.graph,
        conv.tasks,
        conv.newest_row,
        ch.triples + len(state_now),
        len(added),
        len(removed),
        ch.converted,
        ch.diffed,
        ch.method,
        ch.rows,
        ch.rows_mapped,
        appended,
    )


def _final(
    target: Any, snap_dir: Path, run: Path, prov_graph: str, mapping: _Mapping, cache: Any
) -> _Outcome:
    """The final swap: the run's final graph (the export's) replaces the provisional one."""
    kw = {"base": mapping.base, "detail": mapping.detail, "darshan": mapping.darshan}
    if isinstance(target, EmbeddedTarget):
        # written as `metaprov load` writes a run: the bulk loader, then the provisional graph
        # removed; the run's derived facts recorded
        final = final_graph(snap_dir, run, cache=cache, **kw)
        graph, tasks, newest = final.graph_iri, len(final.records.tasks), _newest(final.records)
        converted = time.monotonic()
        fingerprint = _same_fingerprint(snap_dir, run, **kw)
        n = target.replace(final, (prov_graph,), source=str(run), fingerprint=fingerprint)
        return _Outcome("complete", graph, tasks, newest, n, n, 0, converted, converted, "final")
    from metaprov.live.lines import LineSet, diff

    conv = convert(snap_dir, run, run_id=None, cache=cache, **kw)
    converted = time.monotonic()
    # what the server may hold of the final graph already (a follow stopped while sending it),
    # and the final graph, matched as keyed Arrow lines (as refreshes are)
    held = LineSet.from_text(target.current_text(conv.graph) if conv.graph != prov_graph else b"")
    new = LineSet.of(conv.text.chunks)
    removed, added = diff(held, new)
    # the final graph replaces the provisional one in one request when it fits
    target.apply(conv.graph, removed, added, drop=(prov_graph,))
    return _Outcome(
        "complete",
        conv.graph,
        conv.tasks,
        conv.newest_row,
        len(new),
        len(added),
        len(removed),
        converted,
        converted,
        "final",
    )


def refuse_store_in_run(store: Path, run: Path) -> None:
    """A followed run's store never is, holds or sits inside the run: its own writes would
    change the run it watches (the quiet period would never end), and the run's files are not
    the store's (:func:`metaprov.write.output.refuse_overlap`)."""
    from metaprov.write.output import refuse_overlap

    refuse_overlap(store, inputs=[run])


#: Prefix of a follow's working folder in the temporary directory:
#: ``metaprov-follow-<pid>-XXXXXXXX``, locked (``flock`` on its ``.lock``) while the follow lives.
WORK_PREFIX = "metaprov-follow-"
_WORK_LOCK = ".lock"


def _work_dir(guard: contextlib.ExitStack) -> Path:
    """A new working folder for the snapshots, locked for this follow's life; the leftovers of
    earlier follows that were killed (``kill -9``: no ``finally`` ran) are removed first."""
    import fcntl

    remove_work_leftovers()
    work = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-"))
    fd = os.open(work / _WORK_LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    guard.callback(os.close, fd)
    return work


def remove_work_leftovers(where: str | Path | None = None) -> list[Path]:
    """Remove the working folders of killed follows of this user; returns their paths.

    Only ours: a directory (not a link) in the temporary directory named
    ``metaprov-follow-<pid>-XXXXXXXX``, owned by this user, whose process is gone (no such pid)
    and whose ``.lock`` nobody holds (a pid reused by another process holds no lock on it).
    Anything else (another user's, a live follow's, an older name without a pid) is left alone.
    """
    import fcntl
    import re
    import stat as stat_

    pattern = re.compile(re.escape(WORK_PREFIX) + r"(\d{1,10})-[A-Za-z0-9_]{8}")
    base = Path(where) if where is not None else Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat_.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        if _pid_alive(int(m.group(1))):
            continue
        try:
            fd = os.open(
                os.path.join(entry.path, _WORK_LOCK), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
            )
        except OSError:
            continue  # no lock file: not provably a follow's folder
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
            log.warning("removed %s, left by an earlier follow that was killed", entry.path)
        finally:
            os.close(fd)
    return removed


def _pid_alive(pid: int) -> bool:
    if pid <= 0 or pid > 2**22:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


class _Watched:
    """The followed run directory's identity, once it exists: it must not vanish or be swapped
    for another folder (a symlink pointed elsewhere) while followed."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.seen: tuple[str, int, int] | None = None

    def check(self) -> bool:
        """True when the run is there to read; False while it is not created yet.

        Raises:
            InputError: the run directory disappeared, or is now another folder.
        """
        try:
            st = os.stat(self.run)
            real = os.path.realpath(self.run)
        except OSError:
            st = None
        if st is None or not os.path.isdir(self.run):
            if self.seen is None:
                return False
            raise InputError(
                "the run directory disappeared while it was followed (removed, renamed, or "
                "a link to it removed); the store keeps the graph of the last refresh",
                path=self.run,
                hint="follow the run where it is now, or load it when it is complete",
            )
        now = (real, st.st_dev, st.st_ino)
        if self.seen is None:
            self.seen = now
        elif now != self.seen:
            raise InputError(
                f"the run directory is now another folder ({real}, was {self.seen[0]}): "
                "a link to it was changed, or it was replaced while followed; the store keeps "
                "the graph of the last refresh",
                path=self.run,
                hint="follow the run you mean again",
            )
        return True


def _open_target(
    store: str | Path | Any | None,
    endpoint: str | None,
    gsp: str | None,
    update: str | None,
    max_request: int,
    lock: ReadWriteLock | None,
    run: Path,
    guard: contextlib.ExitStack,
) -> EmbeddedTarget | EndpointTarget:
    """Where the refreshes go: an embedded store (owned for the follow's time: ``load``/``drop``
    refuse it meanwhile) or a SPARQL server. A store opened here is closed by ``guard``."""
    from metaprov.store import ENV_ENDPOINT, EmbeddedStore, open_store

    if store is not None and not isinstance(store, (str, os.PathLike)):
        st = store
        if isinstance(st, EmbeddedStore) and st.path is not None:
            refuse_store_in_run(st.path, run)
    else:
        if store is not None:
            refuse_store_in_run(Path(store), run)  # before it is created
        elif endpoint is None and not os.environ.get(ENV_ENDPOINT):
            from metaprov.store import DEFAULT_STORE, ENV_STORE

            refuse_store_in_run(Path(os.environ.get(ENV_STORE) or DEFAULT_STORE), run)
        st = open_store(store, endpoint, gsp=gsp)
        if isinstance(st, EmbeddedStore) and st.path is not None:
            from metaprov.store.owner import owning

            try:
                guard.enter_context(owning(st.path, role="follow", run=str(run)))
            except BaseException:
                st.close()
                raise
        guard.callback(st.close)  # closed before the ownership is released
    if isinstance(st, EmbeddedStore):
        return EmbeddedTarget(st, lock)
    return EndpointTarget(st, update, max_request)


def follow(
    run: str | Path,
    store: str | Path | Any | None = None,
    endpoint: str | None = None,
    *,
    gsp: str | None = None,
    update: str | None = None,
    interval: float = DEFAULT_INTERVAL,
    quiet: float = DEFAULT_QUIET,
    base: str | None = None,
    detail: str = "tasks",
    darshan: bool = True,
    on_refresh: Callable[[Refresh], None] | None = None,
    stop: threading.Event | None = None,
    lock: ReadWriteLock | None = None,
    max_request: int = DEFAULT_MAX_REQUEST,
    incremental: bool = True,
) -> FollowResult:
    """Keep the graph of ``run`` current in a store until the run is complete.

    Args:
        run: the run directory being written.
        store: an embedded store directory (or an open embedded store), or None with ``endpoint``.
        endpoint: a SPARQL server's query endpoint (updates go to its Update endpoint).
        gsp: the server's Graph Store endpoint (read back the graph after a restart).
        update: the server's SPARQL Update endpoint (default: derived from ``endpoint``).
        interval: seconds between the starts of two refreshes; a refresh that takes longer
            delays the next one (refreshes never overlap).
        quiet: seconds without any change after which a run without a completion signal is
            complete (0: never; follow until stopped).
        base, detail, darshan: the mapping options (as for ``metaprov export``).
        on_refresh: called after every refresh.
        stop: set it to stop following (the graph stays as the last refresh left it).
        lock: readers' lock of an in-process server (see :class:`ReadWriteLock`).
        max_request: largest SPARQL Update request sent to a server, in bytes.
        incremental: after the first refresh, format only the rows of the mapped run that
            changed (:mod:`metaprov.live.rows`); False: every refresh formats and keys the whole
            run (the same graph; for comparison).

    Returns:
        A :class:`FollowResult`; ``complete`` is False when stopped before the run completed.

    Raises:
        InputError: ``run`` is not a directory; it disappeared or became another folder (a
            symlink changed) while followed.
        OutputError: the store is, holds or sits inside ``run``.
        StoreError: the store refused an update (the follow stops; start it again to resume).

    Example:
        >>> follow("runs/now", store="live-store", interval=2)  # doctest: +SKIP
    """
    from metaprov.mapping.terms import DEFAULT_BASE, RunIris

    run_path = Path(run)
    # A run directory not created yet is waited for (follow started before the job), as long
    # as the folder it will be created in exists.
    if (run_path.exists() and not run_path.is_dir()) or (
        not run_path.exists() and not run_path.absolute().parent.is_dir()
    ):
        raise InputError(
            "no such directory" if not run_path.exists() else "not a directory",
            path=run_path,
            hint="give the run directory being written (the capture's or the Mofka writers'); "
            "it may not exist yet, but the folder it will be created in must",
        )
    if interval <= 0:
        raise UsageError(f"--interval must be positive (got {interval})")
    if quiet < 0:
        raise UsageError(f"--quiet must be 0 or more (got {quiet})")
    base = base or DEFAULT_BASE
    stop = stop or threading.Event()
    prov_id = provisional_id(run_path)
    prov_graph = RunIris(base, prov_id).graph
    guard = contextlib.ExitStack()
    try:
        target = _open_target(store, endpoint, gsp, update, max_request, lock, run_path, guard)
    except BaseException:
        guard.close()
        raise
    result = FollowResult(str(run_path))
    mapping = _Mapping(base, detail, darshan)
    # the provisional graph the store holds, and how a snapshot changes it
    held = _Provisional(target, prov_graph, incremental=incremental)
    last_sig: tuple[Any, ...] | None = None
    last_change = time.monotonic()
    watched = _Watched(run_path)
    try:
        work = _work_dir(guard)
    except BaseException:
        guard.close()
        raise
    try:
        while True:
            t0 = time.monotonic()
            if not watched.check():
                if stop.wait(interval):
                    return result
                continue
            # the snapshot's time is when it began: every row on disk then is in it (rows
            # written while it is copied may be too), so a refresh's duration counts the copy
            snap_time = time.time()
            try:
                snap_dir = work / f"s{len(result.refreshes)}" / (run_path.resolve().name or "run")
                snap = take_snapshot(run_path, snap_dir)
            except OSError:
                watched.check()  # the run vanished or was swapped since it was checked: say so
                raise
            if snap.signature != last_sig:
                last_sig, last_change = snap.signature, t0
            complete, reason = False, ""
            if snap.status in FINISHED:
                complete, reason = True, "capture"
            elif quiet > 0 and result.refreshes and t0 - last_change >= quiet:
                complete, reason = True, "quiet"
            from metaprov.ingest import is_run_directory

            if not is_run_directory(snap_dir):
                shutil.rmtree(snap_dir.parent, ignore_errors=True)
                if stop.wait(interval):
                    return result
                continue
            c0 = time.monotonic()
            if complete:
                # what the in-progress refreshes held is not needed any more (3.5 M lines at
                # 10^5 tasks): let it go before the final conversion
                held.forget()
                if held.cache is not None:
                    held.cache.skip = set()
                out = _final(target, snap_dir, run_path, prov_graph, mapping, held.cache)
                if held.cache is not None:
                    held.cache.clear()
            else:
                out = _in_progress(
                    held,
                    snap.signature,
                    snap.parts,
                    snap_dir,
                    run_path,
                    snap_time,
                    mapping,
                    prov_id,
                )
            t1 = time.monotonic()
            shutil.rmtree(snap_dir.parent, ignore_errors=True)
            r = Refresh(
                number=len(result.refreshes) + 1,
                state=out.state,
                graph=out.graph,
                tasks=out.tasks,
                triples=out.triples,
                added=out.added,
                removed=out.removed,
                seconds=t1 - t0,
                convert_seconds=out.converted - c0,
                store_seconds=t1 - out.diffed,
                diff_seconds=out.diffed - out.converted,
                snapshot_time=snap_time,
                newest_row=out.newest_row,
                lag=None if out.newest_row is None else snap_time - out.newest_row,
                reason=reason,
                method=out.method,
                rows_formatted=out.rows,
                rows_mapped=out.rows_mapped,
                files_appended=out.files_appended,
            )
            result.refreshes.append(r)
            result.graph = r.graph
            if on_refresh is not None:
                on_refresh(r)
            if complete:
                result.complete = True
                return result
            # the next refresh starts one interval after this one started, or at once if this
            # one took longer: never two at a time
            if stop.wait(max(0.0, interval - (time.monotonic() - t0))):
                return result
    finally:
        shutil.rmtree(work, ignore_errors=True)
        guard.close()


__all__ = [
    "DEFAULT_INTERVAL",
    "DEFAULT_QUIET",
    "EmbeddedTarget",
    "EndpointTarget",
    "FollowResult",
    "IN_PROGRESS",
    "ReadWriteLock",
    "Refresh",
    "convert",
    "derive_update",
    "follow",
    "loading_graphs",
    "provisional_id",
    "state_lines",
]
