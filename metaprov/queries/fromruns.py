"""Questions answered straight from run directories, without a store.

Input: a question (packaged name, ``.rq`` file or SPARQL text), run directories, parameters.
Output: the answer :func:`metaprov.queries.run_question` gives on a store holding those runs,
the same columns, rows and bytes.

How (the generic path, for every question, those added later included): each run is read and
mapped as ``metaprov load`` maps it, but only the triples the question's patterns can match
(:func:`metaprov.queries.needs.selection`: its predicates and classes, plus those of the checks
every answer runs — the runs, what they lack, the names of a typo'd key) go into an in-memory
Oxigraph store, one named graph per run, and the question's own SPARQL text runs there. The
answer is the store's by construction: the same engine, the same text, the same triples for
every pattern of the query.

A question may also have a direct form (:data:`DIRECT`: a function of the runs' records, for
the few whose triples are too many to load in a minute at 10^6 tasks); a test asks every
question both ways on every run it has and compares the bytes.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from metaprov.errors import UsageError
from metaprov.queries.needs import RDF_TYPE, Selection, selection
from metaprov.queries.runcache import cached_records as read_cached  # the run's records, cached
from metaprov.queries.runcache import keep_link
from metaprov.store.embedded import EmbeddedStore

if TYPE_CHECKING:
    from metaprov.mapping import Block, ProvGraph
    from metaprov.queries.model import Question
    from metaprov.records import RunRecords


@dataclass
class Timing:
    """Where the time of an answer from run directories went (seconds)."""

    read: float = 0.0
    load: float = 0.0
    answer: float = 0.0
    #: writing the cache entries of runs read, after the answer (with ``on_answer``)
    keep: float = 0.0
    triples: int = 0
    engine: str = "store"


def query_runs(
    question: str | Question,
    runs: str | Path | Sequence[str | Path],
    params: Mapping[str, Any] | None = None,
    *,
    base: str | None = None,
    darshan: bool = True,
    cache: bool | str | Path = True,
    engine: str = "auto",
    timing: Timing | None = None,
    progress: bool = False,
    on_answer: Callable[[pd.DataFrame | bool], None] | None = None,
) -> pd.DataFrame | bool:
    """Answer a question straight from run directories (no store).

    Args:
        question: a packaged question name, ``critical-path``, a ``.rq`` file or SPARQL text.
        runs: one or more run directories.
        params: parameter values by name, as for :func:`metaprov.queries.query`.
        base: base IRI of the runs' instances (as ``metaprov load --base``).
        darshan: read the runs' Darshan logs (as ``metaprov load``; off: ``--no-darshan``).
        cache: keep what was read of each run for the next question (see
            :mod:`metaprov.queries.runcache`): True (the user cache folder), a folder, or False.
        engine: ``auto`` (a question's direct form when it has one, else the store), ``store``
            (always the in-memory store: the reference) or ``direct`` (refused for a question
            without a direct form).
        timing: filled with where the time went, when given.
        progress: show the reading of each run not in the cache (a progress bar on stderr).
        on_answer: called with the answer as soon as it is made, before the runs read are
            kept in the cache (``metaprov query`` prints it there: the answer is not kept
            waiting for the cache, seconds at 10^6 tasks).

    Returns:
        The answer, as :func:`metaprov.queries.query` returns it from a store holding the runs.

    Raises:
        InputError: a path that is not a run directory.
        QueryError: as for a store (unknown question, parameter, run, key or prefix).

    Example:
        >>> query_runs("failures", ["runs/R1"])  # doctest: +SKIP
    """
    from metaprov.queries import resolve

    q = question if not isinstance(question, str) else resolve(question)
    dirs = _run_dirs(runs)
    timing = timing if timing is not None else Timing()
    _check_engine(q, engine)
    # a direct form that reads nothing the Darshan I/O link decides answers an unlinked run
    form = _direct_form(q) if engine != "store" else None
    link = form is None or form.io
    later: list[Callable[[], None]] | None = [] if on_answer is not None else None
    t0 = time.perf_counter()
    records = [
        read_cached(d, darshan=darshan, cache=cache, progress=progress, link=link, later=later)
        for d in dirs
    ]
    timing.read = time.perf_counter() - t0
    answer = answer_records(q, records, params, base=base, engine=engine, timing=timing)
    if on_answer is not None:
        on_answer(answer)
    if later:
        t3 = time.perf_counter()
        for write in later:
            write()
        timing.keep = time.perf_counter() - t3
    if not link:  # the store path answered after all (and linked the runs): the link is kept
        for d, rec in zip(dirs, records, strict=True):
            keep_link(d, rec, darshan=darshan, cache=cache)
    return answer


def answer_records(
    q: Question,
    records: Sequence[RunRecords],
    params: Mapping[str, Any] | None = None,
    *,
    base: str | None = None,
    engine: str = "auto",
    timing: Timing | None = None,
) -> pd.DataFrame | bool:
    """Answer a resolved question from runs already read (:func:`read_cached`): what
    :func:`query_runs` does after reading, for a caller that keeps the records (``metaprov
    serve RUN_DIR...`` answers every question from the records it read once)."""
    from metaprov.queries import CRITICAL_PATH, run_question

    timing = timing if timing is not None else Timing()
    _check_engine(q, engine)
    records = list(records)
    direct = _direct_form(q)
    if direct is not None and engine != "store":
        t1 = time.perf_counter()
        answer = _direct_answer(q, direct, records, dict(params or {}), base)
        timing.answer = time.perf_counter() - t1
        if answer is not None:
            timing.engine = "direct"
            return answer
    t1 = time.perf_counter()
    wanted = selection(q.text or "", *_checks(q), *(_critical() if q.name == CRITICAL_PATH else ()))
    store = store_of(records, wanted, base=base, with_path=q.name == CRITICAL_PATH)
    timing.load = time.perf_counter() - t1
    timing.triples = sum(store.catalog_triples.values())
    t2 = time.perf_counter()
    try:
        return run_question(store, q, dict(params or {}))
    finally:
        timing.answer = time.perf_counter() - t2
        store.close()


ENGINES = ("auto", "store", "direct")


def _check_engine(q: Question, engine: str) -> None:
    """Refuse an unknown engine, and ``direct`` for a question without a direct form."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}", hint=f"use one of: {', '.join(ENGINES)}")
    if engine == "direct" and _direct_form(q) is None:
        raise UsageError(
            f"{q.name!r} has no direct form", hint="use --engine store (or auto) for it"
        )


#: Parameters an empty answer is checked against (a run, key or prefix the store lacks is a
#: typo, reported with its neighbours): the store path answers such a question.
_CHECKED = ("run_id", "run", "key", "prefix")


def _direct_answer(
    q: Question, form: Any, records: list[RunRecords], params: dict[str, Any], base: str | None
) -> pd.DataFrame | None:
    """The direct form's answer, with the notes of what the runs lack (``# needs:``); None when
    the store path must answer (parameters the form leaves to it, an empty answer to a
    question naming a run, key or prefix: the store path explains it)."""
    from metaprov.queries import CRITICAL_PATH, _check_params, gap_notes, sorted_words
    from metaprov.queries.direct import (
        DirectUnsupported,
        facts_of_graphs,
        no_triples,
        triple_tables,
    )

    if q.name == CRITICAL_PATH and "run" in params and "run_id" not in params:
        params["run_id"] = params.pop("run")  # as the store path accepts it
    _check_params(q, dict(params))  # unknown, missing or invalid parameters: the same errors
    from metaprov.mapping import to_prov
    from metaprov.mapping.terms import DEFAULT_BASE

    # one mapping context per run, shared by the form's triples and the facts of what it lacks
    graphs = [to_prov(r, base=base or DEFAULT_BASE, link=form.io) for r in records]
    for graph in graphs:
        graph.shared_context()
    tables = (
        [
            no_triples(g, form.predicates)
            if form.empty is not None and form.empty(g.records)
            else triple_tables(g, form.predicates, form.steps)
            for g in graphs
        ]
        if form.predicates
        else []
    )
    try:
        answer = (
            form.answer(tables, params, records) if form.records else form.answer(tables, params)
        )
    except DirectUnsupported:
        return None
    if not len(answer) and any(params.get(p) not in (None, "") for p in _CHECKED):
        return None
    answer = sorted_words(answer, q)
    if q.needs:
        run = params.get("run_id", params.get("run"))
        answer.attrs["notes"] = gap_notes(
            facts_of_graphs(graphs), q.needs, run=None if run is None else str(run)
        )
    return answer


def _direct_form(q: Question) -> Any:
    """The packaged question's direct form (None for other questions and texts)."""
    from metaprov.queries import questions
    from metaprov.queries.direct import FORMS

    form = FORMS.get(q.name)
    packaged = next((p for p in questions() if p.name == q.name), None)
    return form if packaged is not None and packaged.text == q.text else None


def _run_dirs(runs: str | Path | Sequence[str | Path]) -> list[Path]:
    from metaprov.ingest import check_run_directory

    items = [runs] if isinstance(runs, (str, Path)) else list(runs)
    if not items:
        raise UsageError("no run directory given", hint="give one or more run directories")
    return [check_run_directory(p) for p in items]


def _checks(q: Question) -> tuple[str, ...]:
    """Texts an answer to ``q`` may run besides the question: the runs (always), what they
    lack (a question with ``# needs:``), a typo's neighbours (a question with a key or prefix
    parameter). Their triples are kept too."""
    from metaprov.queries import _FACTS, _HAS, _HELD

    runs = (
        "PREFIX mp: <https://w3id.org/metaprov/ns#>\n"
        "SELECT ?run_id ?name ?graph WHERE { GRAPH ?graph { ?run a mp:Run ; mp:runId ?run_id ."
        " OPTIONAL { ?run mp:runName ?name } } }"
    )
    out = [runs, _FACTS] if q.needs else [runs]
    for name in _HAS:
        if q.param(name) is not None:
            out += [_HAS[name], _HELD[name][1]]
    return tuple(out)


def _critical() -> tuple[str, ...]:
    """The texts of the critical-path question (it is answered in Python over them)."""
    from metaprov.queries.critical_path import _DETAILS, _DURATIONS, _EDGES, _EXEC_TASK

    g = "<urn:metaprov:g>"
    return (
        _DETAILS.format(g=g, tasks="<urn:metaprov:t>"),
        _EDGES.format(g=g),
        _EXEC_TASK.format(g=g),
        _DURATIONS.format(g=g),
    )


def store_of(
    records: Sequence[RunRecords],
    wanted: Selection,
    *,
    base: str | None = None,
    with_path: bool = False,
) -> MemoryStore:
    """An in-memory store holding, per run, the triples of its graph that ``wanted`` keeps.

    With ``with_path``, the store also keeps each run's critical path computed from the records,
    as ``metaprov load`` records it in an embedded store's catalog.
    """
    from metaprov.mapping import to_prov
    from metaprov.mapping.terms import DEFAULT_BASE

    store = MemoryStore()
    for rec in records:
        graph = to_prov(rec, base=base or DEFAULT_BASE)
        report = store.load_chunks(graph.graph_iri, _chunks(graph, wanted), source=rec.path)
        store.catalog_triples[graph.graph_iri] = report.triples
        if with_path:
            from metaprov.analysis.critical_path import path_summary

            store.paths[graph.graph_iri] = path_summary(graph)
    return store


class MemoryStore(EmbeddedStore):
    """An in-memory embedded store that keeps each run's critical path beside its graph (as an
    embedded store's catalog does for ``metaprov load``)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.paths: dict[str, dict[str, Any]] = {}
        self.catalog_triples: dict[str, int] = {}

    def cached_critical_path(self, graph: str) -> dict[str, Any] | None:
        return self.paths.get(graph)


def _chunks(graph: ProvGraph, wanted: Selection) -> Iterator[bytes]:
    """N-Triples of the graph's triples that ``wanted`` keeps, block by block (the export's
    writer on each block narrowed to the kept columns: the same terms as ``metaprov load``)."""
    from metaprov.write.rows import BLOCKS_AHEAD, write_nt

    for block in graph.blocks(ahead=BLOCKS_AHEAD):
        kept = narrowed(block, wanted)
        if kept is None:
            continue
        out = io.BytesIO()
        write_nt(kept, out, None)
        yield _without_blank_lines(out.getvalue())


def _without_blank_lines(data: bytes) -> bytes:
    """The text without its empty lines (rows whose kept columns are all null leave one)."""
    if b"\n\n" not in data and not data.startswith(b"\n"):
        return data
    return b"\n".join(line for line in data.split(b"\n") if line) + b"\n"


def narrowed(block: Block, wanted: Selection) -> Block | None:
    """The block with only the columns ``wanted`` keeps (None when it keeps none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from metaprov.mapping import Block as _Block

    if wanted.everything:
        return block
    columns = []
    for col in block.columns:
        if col.predicate != RDF_TYPE:
            if wanted.keeps(col.predicate):
                columns.append(col)
            continue
        if isinstance(col.values, str):
            if wanted.keeps_type(col.values):
                columns.append(col)
        elif wanted.all_types:
            columns.append(col)
        elif not col.multi:
            keep = pc.is_in(col.values, value_set=pa.array(sorted(wanted.classes), col.values.type))
            values = pc.if_else(keep, col.values, pa.scalar(None, col.values.type))
            if values.null_count < len(values):
                columns.append(type(col)(col.predicate, values, col.kind, col.datatype))
        else:
            columns.append(col)  # a list of types: kept whole (more triples, same answers)
    if not columns:
        return None
    return _Block(block.subjects, columns, restates=True)


__all__ = [
    "ENGINES",
    "Timing",
    "answer_records",
    "narrowed",
    "query_runs",
    "read_cached",
    "store_of",
]
