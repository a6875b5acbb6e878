"""Mapping stage: :class:`~metaprov.records.RunRecords` -> W3C PROV triples (lazily, in column blocks).

Input: the records of one run. Output: a :class:`ProvGraph`, which builds nothing until a
writer (or the store) pulls its blocks. The mapping is an ordered list of ``add_*`` steps, one
module per part of the model (see ``docs/model.md``)::

    job          run, job, user, nodes, run files (configurations)
    agents       clients, scheduler, workers, worker processes, threads
    graphs       task graphs, task prefixes, task groups
    tasks        tasks, executions (+ qualified associations, dependency usage), data chunks
    transfers    transfers and the replicas they generate
    transitions  state transitions (only with ``detail="transitions"``)
    activity     where the workers' time went (activity shares), their memory over time

Another module adds its part with :func:`register_step`, or by being listed in
:data:`OPTIONAL_STEPS` (module, function, position): the Darshan file-I/O part lives in
``metaprov/mapping/fileio.py`` (``add_io(ctx) -> Iterator[Block]``, after ``transfers``).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from metaprov.errors import UsageError
from metaprov.mapping.block import Block
from metaprov.mapping.terms import DEFAULT_BASE, RunIris, run_id_of

if TYPE_CHECKING:
    from metaprov.records import RunRecords

log = logging.getLogger("metaprov")

DETAILS = ("tasks", "transitions")
#: Darshan I/O detail: per (activity, file, operation) aggregates, or also every traced call.
IO_DETAILS = ("aggregate", "segments")

#: (step name, module, function, after which step): parts of the model in optional modules.
OPTIONAL_STEPS: list[tuple[str, str, str, str]] = [
    ("io", "metaprov.mapping.fileio", "add_io", "transfers"),
    ("facts", "metaprov.mapping.facts", "add_facts", "transfers"),
    ("environment", "metaprov.mapping.environment", "add_environment", "facts"),
    ("activity", "metaprov.mapping.activity", "add_activity", "environment"),
]
DEFAULT_CHUNK_ROWS = 25_000

Step = Callable[["MapContext"], Iterator[Block]]


@dataclass
class _StepEntry:
    name: str
    func: Step


_STEPS: list[_StepEntry] = []


def register_step(name: str, func: Step, *, after: str | None = None) -> None:
    """Add a mapping step (a function ``MapContext -> Iterator[Block]``).

    Args:
        name: unique step name (re-registering a name replaces the step in place).
        func: the step.
        after: insert right after this step; default at the end.
    """
    for i, entry in enumerate(_STEPS):
        if entry.name == name:
            _STEPS[i] = _StepEntry(name, func)
            return
    entry = _StepEntry(name, func)
    if after is None:
        _STEPS.append(entry)
        return
    names = [e.name for e in _STEPS]
    if after not in names:
        raise ValueError(f"no mapping step {after!r}; steps are {names}")
    _STEPS.insert(names.index(after) + 1, entry)


def steps() -> list[str]:
    """Names of the registered mapping steps, in order."""
    _ensure_builtin_steps()
    return [e.name for e in _STEPS]


def _ensure_builtin_steps() -> None:
    if any(e.name == "job" for e in _STEPS):
        return
    from metaprov.mapping import agents, graphs, job, tasks, transfers, transitions

    builtin = [
        ("job", job.add_job),
        ("agents", agents.add_agents),
        ("graphs", graphs.add_graphs),
        ("tasks", tasks.add_tasks),
        ("transfers", transfers.add_transfers),
        ("transitions", transitions.add_transitions),
    ]
    # Optional parts of the model living in their own modules (e.g. Darshan file I/O): picked
    # up when the module exists, placed after the step they name.
    for name, module, func_name, after in OPTIONAL_STEPS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        names = [b[0] for b in builtin]
        builtin.insert(
            names.index(after) + 1 if after in names else len(builtin),
            (name, getattr(mod, func_name)),
        )
    # Built-ins go first, in this order, ahead of anything registered by other modules.
    for i, (name, func) in enumerate(builtin):
        _STEPS.insert(i, _StepEntry(name, func))


@dataclass
class MapContext:
    """What every step sees: the records, the IRI minter, options and a cache for shared columns."""

    records: RunRecords
    iris: RunIris
    detail: str = "tasks"
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    cache: dict[str, Any] = field(default_factory=dict)
    io_detail: str = "aggregate"

    def cached(self, name: str, make: Callable[[], Any]) -> Any:
        """Compute a shared value once per export (e.g. the set of keys that have a data chunk)."""
        if name not in self.cache:
            self.cache[name] = make()
        return self.cache[name]


class ProvGraph:
    """The PROV graph of one run, built lazily, block by block, when a writer pulls it.

    Attributes:
        records: the run's records.
        run_id: content-derived run id.
        run_iri: IRI of the mp:Run.
        graph_iri: IRI of the named graph holding this run (N-Quads, TriG).
        base: instance base IRI.
        detail: ``tasks`` or ``transitions``.
        io_detail: ``aggregate`` or ``segments`` (Darshan I/O).
    """

    def __init__(
        self,
        records: RunRecords,
        base: str = DEFAULT_BASE,
        detail: str = "tasks",
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        io_detail: str = "aggregate",
        link: bool = True,
    ) -> None:
        if detail not in DETAILS:
            raise UsageError(f"unknown detail {detail!r}", hint=f"use one of: {', '.join(DETAILS)}")
        if io_detail not in IO_DETAILS:
            raise UsageError(
                f"unknown I/O detail {io_detail!r}", hint=f"use one of: {', '.join(IO_DETAILS)}"
            )
        if link and records.darshan is not None and records.io is None:
            # Darshan logs read but not linked yet: link now, so the I/O step sees task links.
            from metaprov.link import link_io

            link_io(records)
        self.io_detail = io_detail
        _check_base(base)
        self.records = records
        self.base = base.rstrip("/")
        self.detail = detail
        self.chunk_rows = chunk_rows
        self.run_id = run_id_of(records)
        self.iris = RunIris(self.base, self.run_id)
        self.run_iri = self.iris.run
        self.graph_iri = self.iris.graph
        self._shared: MapContext | None = None

    def blocks(self, ahead: int = 0, *, steps: Collection[str] | None = None) -> Iterator[Block]:
        """Every block of the graph, step by step (a fresh pass each call; deterministic order).

        Args:
            ahead: map up to this many blocks ahead in a background thread while the caller
                formats the current one (the column kernels release the GIL, so mapping and
                formatting use both cores of a small machine). 0: map in the caller's thread.
            steps: only the blocks of these mapping steps (:func:`steps`), the same blocks a
                whole pass gives for them; None: every step.
        """
        if ahead > 0:
            return _ahead(self._blocks(steps), ahead)
        return self._blocks(steps)

    def shared_context(self) -> MapContext:
        """A :class:`MapContext` kept across passes until :meth:`release_context`.

        Its cached tables (task index, executions in order, I/O aggregates, ...) are computed
        once and reused by every later pass and by callers that compute from the same tables
        (e.g. the per-prefix figures of a crate); without it each pass builds its own.
        """
        if self._shared is None:
            self._shared = MapContext(
                self.records, self.iris, self.detail, self.chunk_rows, io_detail=self.io_detail
            )
        return self._shared

    def release_context(self) -> None:
        """Drop the shared context (and the memory its cached tables hold)."""
        self._shared = None

    def _blocks(self, steps: Collection[str] | None = None) -> Iterator[Block]:
        _ensure_builtin_steps()
        ctx = self._shared or MapContext(
            self.records, self.iris, self.detail, self.chunk_rows, io_detail=self.io_detail
        )
        for entry in list(_STEPS):
            if steps is not None and entry.name not in steps:
                continue
            for block in entry.func(ctx):
                if len(block):
                    yield block.with_base_types()

    def batches(self) -> Iterator[tuple[pa.Array, pa.Array, pa.Array]]:
        """Column batches of N-Triples terms: (subjects, predicates, objects) string arrays."""
        for block in self.blocks():
            for s, p, o in block.triples():
                yield s, pa.repeat(pa.scalar(p, pa.large_string()), len(s)), o

    def count_triples(self) -> int:
        """Number of triples (builds the blocks, formats nothing)."""
        return sum(block.n_triples() for block in self.blocks())


_DONE = object()


def _ahead(items: Iterator[Block], depth: int) -> Iterator[Block]:
    """``items`` produced by a background thread, at most ``depth`` ahead of the consumer.

    Same items, same order; an exception in the producer is raised in the consumer; when the
    consumer stops early (or fails), the producer stops at its next item.
    """
    import queue
    import threading

    q: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any, exc: BaseException | None = None) -> bool:
        while not stop.is_set():
            try:
                q.put((item, exc), timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            put(_DONE, exc)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=run, name="metaprov-map", daemon=True)
    thread.start()

    def consume() -> Iterator[Block]:
        try:
            while True:
                item, exc = q.get()
                if item is _DONE:
                    if exc is not None:
                        raise exc
                    return
                yield item
        finally:
            stop.set()
            thread.join()

    return consume()


def to_prov(
    records: RunRecords,
    base: str = DEFAULT_BASE,
    detail: str = "tasks",
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    io_detail: str = "aggregate",
    link: bool = True,
) -> ProvGraph:
    """Map a run's records to W3C PROV (lazily).

    Args:
        records: the run (from :func:`metaprov.read_run`).
        base: base IRI for instances; IRIs are ``<base>/run/<run-id>/...``.
        detail: ``"tasks"`` (executions, chunks, transfers, ...) or ``"transitions"`` (also every
            state transition as an mp:Transition event).
        chunk_rows: rows per block for the large tables (bounds memory, not the output).
        io_detail: Darshan I/O (when ``records.darshan`` is set; linked here with
            :func:`metaprov.link_io` unless ``records.io`` is already set): ``"aggregate"``
            (per activity, file and operation: bytes, counts, first/last time, offsets) or
            ``"segments"`` (also every traced call as an mp:IOSegment).
        link: link the Darshan I/O to tasks when it is not linked yet. False: leave
            ``records.io`` as it is; an unlinked run's graph then lacks what the link decides
            (the I/O step and the I/O figures of prefixes and processes), for a caller that
            reads none of it (the direct forms of :mod:`metaprov.queries.direct`).

    Returns:
        A :class:`ProvGraph`; pass it to :func:`metaprov.write`.

    Example:
        >>> graph = to_prov(read_run("runs/R1"), base="https://example.org/prov")  # doctest: +SKIP
        >>> write(graph, "r1.ttl")  # doctest: +SKIP
    """
    return ProvGraph(
        records, base=base, detail=detail, chunk_rows=chunk_rows, io_detail=io_detail, link=link
    )


def _check_base(base: str) -> None:
    bad = set(' <>"{}|^`\\\n\r\t')
    if "://" not in base and not base.startswith("urn:"):
        raise UsageError(
            f"base IRI {base!r} is not absolute", hint="give e.g. --base https://example.org/prov"
        )
    if any(c in bad for c in base):
        raise UsageError(
            f"base IRI {base!r} contains characters not allowed in an IRI",
            hint="percent-encode them",
        )


__all__ = ["to_prov", "ProvGraph", "MapContext", "register_step", "steps", "Block"]
