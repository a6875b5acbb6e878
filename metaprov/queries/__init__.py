"""The packaged questions: named, documented SPARQL files, and the code that runs them.

Input: a question name (``slowest-tasks``), a user's ``.rq`` file, or SPARQL text, plus parameter
values. Output: the answer as a :class:`pandas.DataFrame` (or a bool for ASK).

Every packaged question is a ``<name>.rq`` file in this folder whose header says what it is::

    # title: Slowest task executions
    # description: The longest task executions, slowest first.
    # param: prefix (string, optional) only tasks of this prefix, e.g. save_file
    # param: limit (limit, default 20) how many rows

Parameter types are those of :data:`metaprov.store.sparql.PARAM_TYPES`; a ``limit`` parameter
sets the query's final LIMIT, every other parameter binds the SPARQL variable of the same name
(safely: see :mod:`metaprov.store.sparql`). A user's own ``.rq`` file may carry the same header.

``critical-path`` is a question answered in Python (networkx's longest-path programme,
vectorised, over the dependency DAG read from the store), listed with the others.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from metaprov.errors import QueryError, StoreError, UsageError
from metaprov.queries.model import Param, Question, parse_header

if TYPE_CHECKING:
    from metaprov.store import Store

CRITICAL_PATH = "critical-path"


@lru_cache(maxsize=1)
def _packaged() -> dict[str, Question]:
    out: dict[str, Question] = {}
    folder = resources.files(__name__)
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".rq"):
            name = entry.name[: -len(".rq")]
            out[name] = parse_header(entry.read_text(encoding="utf-8"), name=name, path=str(entry))
    from metaprov.queries.critical_path import QUESTION as cp

    out[CRITICAL_PATH] = cp
    return dict(sorted(out.items()))


def questions() -> list[Question]:
    """Every packaged question (``critical-path`` included), sorted by name."""
    return list(_packaged().values())


def get_question(name: str) -> Question:
    """The packaged question called ``name``.

    Raises:
        QueryError: no such question (the message suggests close names).
    """
    known = _packaged()
    if name in known:
        return known[name]
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise QueryError(
        f"no packaged question called {name!r}",
        hint=hint + "list them with: metaprov query --list (or give a .rq file or SPARQL text)",
    )


def resolve(question: str) -> Question:
    """A packaged question by name, a ``.rq`` file, or SPARQL text, as a :class:`Question`."""
    from metaprov.store.sparql import MAX_QUERY_CHARS, QueryRefused, checked_query

    if question in _packaged():
        return _packaged()[question]
    if len(question) > MAX_QUERY_CHARS:
        checked_query(question)  # refused: too long, before anything else reads it
    candidate = Path(question)
    if question.endswith(".rq") or (
        len(question) < 4096 and "\n" not in question and _is_file(candidate)
    ):
        if not _is_file(candidate):
            raise QueryError(
                f"no such query file: {question}",
                hint="give the path of a .rq file, or a question name",
            )
        try:
            with candidate.open("rb") as fh:
                raw = fh.read(4 * MAX_QUERY_CHARS + 1)
            if len(raw) > 4 * MAX_QUERY_CHARS:
                raise QueryRefused(
                    f"the query file {question} is larger than {4 * MAX_QUERY_CHARS:,} bytes",
                    hint=f"a query may hold at most {MAX_QUERY_CHARS:,} characters",
                    status=413,
                )
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise QueryError(f"cannot read the query file {question}: {exc}") from exc
        if len(text) > MAX_QUERY_CHARS:
            checked_query(text)  # refused: too long
        return parse_header(text, name=candidate.stem, path=str(candidate))
    if "{" in question or any(c.isspace() for c in question.strip()):
        # Question names have no spaces: this is SPARQL text (an update is refused later).
        return parse_header(question, name="query")
    return get_question(question)


def _is_file(path: Path) -> bool:
    """Is ``path`` a file (False for text no file can be named: too long, NUL bytes)?"""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def run_question(
    store: Store, question: str | Question, params: dict[str, Any] | None = None
) -> pd.DataFrame | bool:
    """Answer a question on an open store.

    Args:
        store: from :func:`metaprov.store.open_store`.
        question: a name, a ``.rq`` path, SPARQL text, or a :class:`Question`.
        params: values by parameter name (text from the command line, or Python values).

    Raises:
        QueryError: unknown question, unknown or missing parameter, invalid value.
    """
    q = question if isinstance(question, Question) else resolve(question)
    answer = sorted_words(_answer(store, q, dict(params or {})), q)
    if isinstance(answer, pd.DataFrame) and not len(answer) and q.name != CRITICAL_PATH:
        _explain_empty(store, q, dict(params or {}))
    if q.needs and isinstance(answer, pd.DataFrame):
        run = (params or {}).get("run_id", (params or {}).get("run"))
        answer.attrs["notes"] = gaps(store, q.needs, run=None if run is None else str(run))
    return answer


def sorted_words(answer: pd.DataFrame | bool, q: Question) -> pd.DataFrame | bool:
    """``answer`` with the words of each ``# sorted-words:`` column of ``q`` sorted (by code
    point; one space between them). SPARQL leaves the order of a GROUP_CONCAT to the engine
    (Oxigraph and Virtuoso differ, and so can one engine after another load): sorted, the
    answer has the same bytes from every engine. The column keeps its dtype; missing values
    stay missing."""
    if not isinstance(answer, pd.DataFrame) or not q.sorted_words:
        return answer
    for column in q.sorted_words:
        if column not in answer.columns:
            continue
        values = answer[column]
        known = values.notna()
        if known.any():
            answer.loc[known, column] = [" ".join(sorted(str(v).split(" "))) for v in values[known]]
    return answer


_MP = "PREFIX mp: <https://w3id.org/metaprov/ns#>\n"
#: What a value of each checked parameter names, and how to find the values the store holds.
_HELD = {
    "key": (
        "task key",
        _MP + "SELECT DISTINCT ?value WHERE { GRAPH ?g { ?run mp:runId ?run_id . "
        "?task a mp:Task ; mp:key ?value . FILTER (STRSTARTS(?value, ?start)) } } LIMIT 2000",
    ),
    "prefix": (
        "task prefix",
        _MP + "SELECT DISTINCT ?value WHERE { GRAPH ?g { ?run mp:runId ?run_id . "
        "?plan a mp:TaskPrefix ; mp:name ?value . FILTER (STRSTARTS(?value, ?start)) } } LIMIT 2000",
    ),
}
_HAS = {
    "key": _MP + "ASK { GRAPH ?g { ?run mp:runId ?run_id . ?task a mp:Task ; mp:key ?value } }",
    "prefix": _MP
    + "ASK { GRAPH ?g { ?run mp:runId ?run_id . ?plan a mp:TaskPrefix ; mp:name ?value } }",
}


def _explain_empty(store: Store, q: Question, values: dict[str, Any]) -> None:
    """An empty answer to a question given a run, key or prefix the store does not hold is a
    typo, not "no results": raise QueryError naming the nearest values the store holds.

    Only runs when the answer is empty (a few index lookups; a key's neighbours are searched
    among the keys sharing its first characters).
    """
    import difflib

    run = values.get("run_id")
    run = None if run is None or str(run) == "" else str(run)
    if run is not None and q.param("run_id") is not None:
        runs = store.runs()
        ids = runs["run_id"].astype(str).tolist()
        if run not in ids:
            names = runs["name"].astype(object).where(runs["name"].notna(), "").astype(str)
            named = [i for i, n in zip(ids, names, strict=True) if n == run]
            if named:
                hint = f"{run!r} is a run's name; give its id: --param run_id={named[0]}"
            else:
                near = difflib.get_close_matches(run, ids, n=5, cutoff=0.3) or ids[:10]
                shown = ", ".join(
                    f"{i} ({n})" if n else i for i, n in zip(ids, names, strict=True) if i in near
                )
                hint = (
                    f"nearest runs in the store: {shown} (metaprov runs lists them)"
                    if shown
                    else "the store holds no run"
                )
            raise QueryError(f"no run {run!r} in the store", hint=hint)
    for name, (what, nearby) in _HELD.items():
        value = values.get(name)
        if value is None or str(value) == "" or q.param(name) is None:
            continue
        value = str(value)
        scope = {"run_id": run} if run is not None else {}
        if store.query(_HAS[name], {"value": value, **scope}):
            continue
        where = f" of run {run}" if run is not None else ""
        found: list[str] = []
        for start in _starts(value):
            df = store.query(nearby, {"start": start, **scope})
            found = df["value"].astype(str).tolist() if len(df) else []
            if found:
                break
        near = difflib.get_close_matches(value, found, n=5, cutoff=0.0) if found else []
        hint = (
            "nearest in the store: " + ", ".join(repr(v) for v in near)
            if near
            else "the store holds none"
        )
        raise QueryError(f"no {what} {value!r} in the store{where}", hint=hint)


def _starts(value: str) -> list[str]:
    """Shorter and shorter beginnings of ``value`` to look for neighbours under, then any."""
    out = []
    for cut in (value.rfind("-"), value.find("-"), value.find(","), 8, 3, 1):
        if cut > 0 and value[:cut] not in out:
            out.append(value[:cut])
    return [*out, ""]


_FACTS = """PREFIX mp: <https://w3id.org/metaprov/ns#>
PREFIX prov: <http://www.w3.org/ns/prov#>
SELECT ?run_id ?name ?threads ?compute ?environments ?activity (GROUP_CONCAT(?missing; separator=" ") AS ?missing_inputs)
WHERE {
  GRAPH ?g {
    ?run a mp:Run ; mp:runId ?run_id .
    OPTIONAL { ?run mp:runName ?name }
    OPTIONAL { ?run mp:missingInput ?missing }
    BIND (EXISTS { ?thread a mp:Thread } AS ?threads)
    # an execution with a start time: the inner FILTER EXISTS makes it a lookup per execution
    # until one is found (the two patterns joined were a hash join of every execution: 1.5 s
    # at 10^6 tasks, on every question that says what runs lack)
    BIND (EXISTS { ?execution a mp:TaskExecution . FILTER EXISTS { ?execution prov:startedAtTime ?start } } AS ?compute)
    BIND (EXISTS { ?run prov:used ?env . ?env a mp:SoftwareEnvironment } AS ?environments)
    BIND (EXISTS { ?share a mp:ActivityShare } AS ?activity)
  }
}
GROUP BY ?run_id ?name ?threads ?compute ?environments ?activity
ORDER BY ?run_id
"""

_TRANSITION_FILES = ("scheduler_transition.csv", "worker_transition.csv")


def gaps(store: Store, needs: tuple[str, ...] | list[str], *, run: str | None = None) -> list[str]:
    """What runs in the store lack of what a question needs (``# needs:``), one sentence per run
    and gap, saying why and what it means for the answer: no thread ids (the transition files
    that carry them are missing: I/O stays with the processes), no compute windows (compute
    time unknown, not 0), no Darshan logs, no software environment records, no fine
    performance metrics (where the workers' time went: not recorded, not 0). ``run`` (an
    id or run name) narrows it to one run.
    """
    facts = store.query(_FACTS)
    assert isinstance(facts, pd.DataFrame)
    return gap_notes(facts, needs, run=run)


def gap_notes(
    facts: pd.DataFrame, needs: tuple[str, ...] | list[str], *, run: str | None = None
) -> list[str]:
    """The sentences of :func:`gaps` from the facts of each run: ``run_id``, ``name``,
    ``threads`` and ``compute`` (whether it has any), ``missing_inputs`` (space-separated)."""
    notes: list[str] = []
    for row in facts.itertuples(index=False):
        if run is not None and run not in (str(row.run_id), str(row.name)):
            continue
        missing = str(row.missing_inputs or "").split()
        lost = [m for m in _TRANSITION_FILES if m in missing]
        why = (
            f"{' and '.join(lost)} {'was' if len(lost) == 1 else 'were'} missing"
            if lost
            else "no record of the run names them"
        )
        if "threads" in needs and not row.threads:
            notes.append(
                f"run {row.run_id} has no thread ids ({why}): which thread ran a task is "
                "unknown and its Darshan I/O stays with the worker processes (not tasks or "
                "threads), so it has nothing in this answer"
            )
        if "compute" in needs and not row.compute:
            notes.append(
                f"run {row.run_id} has no compute windows ({why}): its compute time is unknown, "
                "not 0, and its task executions are left out of (or count 0 in) this answer"
            )
        if "activity" in needs and not row.activity:
            notes.append(
                f"run {row.run_id} has no fine performance metrics (metaprov.capture records "
                "them; Mofka runs and older captures have none): where its workers' time went "
                "is not recorded, not 0, and the run has no rows in this answer"
            )
        if "darshan" in needs and "*.darshan" in missing:
            notes.append(f"run {row.run_id} has no Darshan logs: no file I/O to show for it")
        if "environment" in needs and not row.environments:
            notes.append(
                f"run {row.run_id} has no software environment records (no environment/ files "
                "of metaprov.capture, no Spack environment or executables in a Mofka job's "
                "files): it has no rows in this answer"
            )
    return notes


def _answer(store: Store, q: Question, values: dict[str, Any]) -> pd.DataFrame | bool:
    if q.name == CRITICAL_PATH and not q.text:
        from metaprov.queries.critical_path import critical_path_from_store

        if "run" in values and "run_id" not in values:
            values["run_id"] = values.pop("run")  # the name it had before the others' run_id
        _check_params(q, values)
        return critical_path_from_store(store, run=values.get("run_id"))
    bound, types, limit = _check_params(q, values)
    steps = _chosen(q.text, set(bound))
    if len(steps) == 1:
        return store.query(steps[0][1], bound, types=types, limit=limit)
    from metaprov.store import results_to_frame

    # The limit caps the rows a walk adds when there is one, else the first step's rows.
    walks = any(repeat for repeat, _ in steps)
    rows = None
    for i, (repeat, step) in enumerate(steps):
        params = _params_of(step, bound)
        if repeat:
            assert rows is not None
            rows = _walk(store, step, params, types, rows, limit)
            continue
        rows = store.query_json(
            step, params, types=types, limit=limit if i == 0 and not walks else None, rows=rows
        )
    assert rows is not None
    return results_to_frame(rows)


def _params_of(step: str, bound: dict[str, Any]) -> dict[str, Any]:
    from metaprov.store.sparql import variables

    here = variables(step)
    return {k: v for k, v in bound.items() if k in here}


def _walk(
    store: Store,
    step: str,
    params: dict[str, Any],
    types: dict[str, str],
    start: dict[str, Any],
    limit: int | None,
) -> dict[str, Any]:
    """Run a repeating step breadth-first from ``start``: each round gets the rows new in the
    last round; stops when a round finds nothing new or ``limit`` rows were added. New rows of
    a round are sorted (by their terms), so the rows kept at the limit do not depend on the
    store's order. A column named ``distance`` (the walk's depth, counted by the step) is not
    part of a row's identity: a node found again further away is not new (the nearest wins)."""

    def key(row: dict[str, Any]) -> tuple[tuple[str, str, str, str], ...]:
        return tuple(
            (
                str(cell.get("type", "")),
                str(cell.get("value", "")),
                str(cell.get("datatype", "")),
                str(cell.get("xml:lang", "")),
            )
            if cell is not None
            else ("", "", "", "")
            for cell in (row.get(v) for v in names if v != "distance")
        )

    names = list(start["head"]["vars"])
    out = list(start["results"]["bindings"])
    seen = {key(r) for r in out}
    frontier = out
    added = 0
    while frontier and (limit is None or added < limit):
        rows = store.query_json(
            step,
            params,
            types=types,
            rows={"head": {"vars": names}, "results": {"bindings": frontier}},
        )
        got = rows["head"]["vars"]
        if len(got) != len(names):
            raise QueryError(
                f"a repeating step must return the columns it is given ({len(names)}); "
                f"it returned {len(got)}: {', '.join(got)}"
            )
        new = {}
        for r in rows["results"]["bindings"]:
            r = {n: r[g] for n, g in zip(names, got, strict=True) if g in r}
            k = key(r)
            if k not in seen:
                new[k] = r
        frontier = [new[k] for k in sorted(new)]
        if limit is not None:
            frontier = frontier[: limit - added]
        seen.update(new)
        out.extend(frontier)
        added += len(frontier)
    return {"head": {"vars": names}, "results": {"bindings": out}}


def check_question(q: Question) -> None:
    """Check a question statically, for every choice of step variants: every step parses, each
    step's empty VALUES blocks take the previous step's columns, and every declared parameter is
    a variable of some step (or chooses a variant).

    Raises:
        QueryError: what is wrong, naming the question.
    """
    import itertools

    from metaprov.store.sparql import check_syntax, fill_values, projection, query_form, variables

    guards = guard_names(q.text)
    declared = {p.name for p in q.params}
    unknown = [g for g in guards if g not in declared]
    if unknown:
        raise QueryError(
            f"{q.name}: variants depend on undeclared parameter(s) {', '.join(unknown)}"
        )
    used: set[str] = set(guards)
    for choice in itertools.product((False, True), repeat=len(guards)):
        given = {g for g, on in zip(guards, choice, strict=True) if on}
        try:
            steps = _chosen(q.text, given)
        except QueryError as exc:
            raise QueryError(f"{q.name}: {exc.message}") from exc
        previous: list[str] = []
        for i, (repeat, step) in enumerate(steps):
            if i:
                step = fill_values(step, {"head": {"vars": previous}, "results": {"bindings": []}})
            if query_form(step) != "SELECT" and len(steps) > 1:
                raise QueryError(f"{q.name}: step {i + 1} is not a SELECT query")
            check_syntax(step)
            columns = projection(step)
            if repeat and len(columns) != len(previous):
                raise QueryError(
                    f"{q.name}: step {i + 1} repeats on its own rows, so it must return as many "
                    f"columns as it is given ({len(previous)}), not {len(columns)}"
                )
            previous = columns
            used |= variables(step)
    missing = [p.name for p in q.params if p.type != "limit" and p.name not in used]
    if missing:
        raise QueryError(
            f"{q.name}: parameter(s) {', '.join(missing)} bind no variable of the query"
        )


_MARK = re.compile(
    r"^#%%\s*(?P<what>then|repeat|if|unless)\b[ \t]*(?P<name>[^\n]*?)\s*$", re.MULTILINE
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class _Variant:
    """One way of writing a step: used when ``guard`` holds (always when ``guard`` is None)."""

    text: str
    guard: tuple[bool, str] | None = None  # (wanted given?, parameter name)

    def holds(self, given: set[str]) -> bool:
        return self.guard is None or (self.guard[1] in given) == self.guard[0]


@dataclass
class _Step:
    """A step: its variants, and whether it repeats on its own new rows (``#%% repeat``)."""

    repeat: bool = False
    variants: list[_Variant] = field(default_factory=list)


def _parse_steps(text: str, *, where: str = "query") -> list[_Step]:
    """The steps of a question text with their variants (see :func:`split_steps`)."""
    steps = [_Step()]
    lead = ""  # text of the current step before its first guard (comments only, or the step)
    pos = 0
    guard: tuple[bool, str] | None = None
    for m in [*_MARK.finditer(text), None]:
        chunk = text[pos : m.start() if m else len(text)]
        if guard is None:
            lead += chunk
        else:
            steps[-1].variants.append(_Variant(chunk, guard))
        if m is None:
            break
        pos = m.end()
        what, name = m.group("what"), m.group("name")
        if what in ("then", "repeat"):
            if name:
                raise QueryError(f"{where}: '#%% {what}' takes nothing after it (found {name!r})")
            _close_step(steps[-1], lead)
            if not steps[-1].variants:
                raise QueryError(f"{where}: '#%% {what}' follows no step (a step is missing)")
            steps.append(_Step(repeat=what == "repeat"))
            lead, guard = "", None
            continue
        if not _NAME.match(name):
            raise QueryError(
                f"{where}: '#%% {what}' needs a parameter name (found {name!r})",
                hint="write '#%% if prefix' / '#%% unless prefix' before each variant of a step",
            )
        guard = (what == "if", name)
    _close_step(steps[-1], lead)
    if not steps[-1].variants and len(steps) > 1:
        raise QueryError(f"{where}: the last '#%% then' or '#%% repeat' is followed by no step")
    return [s for s in steps if s.variants]


def _close_step(step: _Step, lead: str) -> None:
    """Finish a step: its text before the first variant (comments, PREFIX lines) is shared by
    every variant; without variants it is the step."""
    if step.variants:
        step.variants[:] = [
            _Variant((lead + v.text).strip() + "\n", v.guard) for v in step.variants
        ]
    elif _sparql_lines(lead):
        step.variants.append(_Variant(lead.strip() + "\n"))


def _sparql_lines(text: str) -> bool:
    return any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines())


def _chosen(text: str, given: set[str] | frozenset[str]) -> list[tuple[bool, str]]:
    """(repeats?, text) of each step as run when the parameters in ``given`` have values."""
    out = []
    for i, step in enumerate(_parse_steps(text)):
        chosen = next((v for v in step.variants if v.holds(set(given))), None)
        if chosen is None:
            names = sorted({v.guard[1] for v in step.variants if v.guard})
            raise QueryError(
                f"step {i + 1} of the query has no variant for the parameters given "
                f"({', '.join(sorted(given)) or 'none'}; its variants depend on {', '.join(names)})"
            )
        out.append((step.repeat, chosen.text))
    return out


def split_steps(text: str, given: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The steps of a question as run when the parameters named in ``given`` have values.

    Steps are SELECT queries separated by a line ``#%% then``. Each step after the first holds
    an empty ``VALUES (?a ?b) { }`` block that the previous step's rows fill: a few rows found
    by scans in step 1 are then looked up one by one in step 2, which stores do much faster than
    joining two scans of millions of rows. Every step is plain SPARQL 1.1, so multi-step
    questions run on any server.

    A step after ``#%% repeat`` (instead of ``#%% then``) is a breadth-first walk: it is run on
    the previous step's rows, then again on the rows it found that are new, until it finds no
    new row or the question's ``limit`` is reached; its answer is the previous step's rows
    followed by the new rows, level by level. Its projection has the columns of its VALUES block.
    A walk of ``dependsOn`` this way stops after ``limit`` tasks, where a property path
    (``mp:dependsOn+``) computes the whole closure first (half a million tasks: 10 s).

    A step may be written in variants, each after a line ``#%% if NAME`` (used when parameter
    NAME is given) or ``#%% unless NAME`` (when it is not); the first variant that applies is
    run; the step's text before its first variant (PREFIX lines) is shared by all. A filter on
    a parameter can make a different join order the fast one: the slowest executions of one
    prefix start from the prefix's plan, the slowest of all from a scan.

    Raises:
        QueryError: a malformed ``#%%`` line, or a step with no variant for ``given``.
    """
    return [t for _, t in _chosen(text, given)]


def step_variants(
    text: str,
) -> list[tuple[bool, list[tuple[tuple[bool, str] | None, str]]]]:
    """Every step of a question: whether it repeats, and all its variants as ``(guard, text)``
    pairs; the guard is None for a step without variants, else ``(given?, parameter name)``:
    ``(True, "prefix")`` for ``#%% if prefix``, ``(False, "prefix")`` for ``#%% unless prefix``."""
    return [(s.repeat, [(v.guard, v.text) for v in s.variants]) for s in _parse_steps(text)]


def guard_names(text: str) -> list[str]:
    """The parameters whose presence chooses between variants of a step (sorted)."""
    return sorted({v.guard[1] for s in _parse_steps(text) for v in s.variants if v.guard})


def _check_params(
    q: Question, values: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str], int | None]:
    declared = {p.name: p for p in q.params}
    bound: dict[str, Any] = {}
    types: dict[str, str] = {}
    limit: int | None = None
    if declared:
        unknown = sorted(set(values) - set(declared))
        if unknown:
            raise QueryError(
                f"question {q.name!r} has no parameter {', '.join(repr(u) for u in unknown)}",
                hint=f"its parameters are: {', '.join(p.signature() for p in q.params)}",
            )
    for p in q.params:
        value = values.get(p.name, p.default)
        if value is None:
            if p.required:
                raise QueryError(
                    f"question {q.name!r} needs the parameter {p.name!r}",
                    hint=f"give --param {p.name}=VALUE ({p.type}: {p.description})",
                )
            continue
        if p.type == "limit":
            try:
                limit = int(str(value))
            except ValueError as exc:
                raise QueryError(f"parameter {p.name!r}: {value!r} is not a whole number") from exc
            if limit < 0:
                raise QueryError(f"parameter {p.name!r} must not be negative")
            continue
        bound[p.name] = value
        types[p.name] = p.type
    for name, value in values.items():
        if name not in declared:
            bound[name] = value
    return bound, types, limit


def format_list(fmt: str = "text") -> str:
    """The packaged questions for ``metaprov query --list``: ``text``, or ``json`` (a list of
    ``name``, ``title``, ``description``, ``params`` [``name``, ``type``, ``optional``,
    ``default``, ``description``], ``needs`` and ``examples``)."""
    import json as _json

    if fmt == "json":
        return _json.dumps(
            [
                {
                    "name": q.name,
                    "title": q.title,
                    "description": q.description,
                    "params": [
                        {
                            "name": p.name,
                            "type": p.type,
                            "optional": not p.required,
                            "default": p.default,
                            "description": p.description,
                        }
                        for p in q.params
                    ],
                    "needs": list(q.needs),
                    "examples": list(q.examples),
                }
                for q in questions()
            ],
            indent=2,
            ensure_ascii=False,
        )
    lines = []
    for q in questions():
        lines.append(f"{q.name}\n    {q.title}. {q.description}".rstrip())
        for p in q.params:
            lines.append(f"    --param {p.signature()}: {p.description}")
    return "\n".join(lines)


#: Significant digits of the floats of csv and json answers: a double's precision, without the
#: noise of its last bit (sums of decimal values: ``0.235721``, not ``0.23572099999999999``).
ANSWER_DIGITS = 15

#: Widest cell of a ``table`` answer; longer values are shortened in the middle (``...``).
TABLE_CELL = 60

_SHORT_NAMESPACES = {
    "mp:": "https://w3id.org/metaprov/ns#",
    "prov:": "http://www.w3.org/ns/prov#",
    "xsd:": "http://www.w3.org/2001/XMLSchema#",
    "rdf:": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs:": "http://www.w3.org/2000/01/rdf-schema#",
}
_RUN_IRI = r"^https?://\S*?/run/[0-9a-f]{16}/"


def format_result(
    result: pd.DataFrame | bool, fmt: str = "table", *, width: int = TABLE_CELL
) -> str:
    """An answer as text: ``table`` (aligned columns), ``csv`` or ``json`` (a list of records).

    Times are ISO 8601 UTC; floats are written with :data:`ANSWER_DIGITS` significant digits at
    most, in their shortest form (csv, json); missing values
    are empty (csv), null (json) or blank (table). An ASK answer is ``true`` or ``false``.

    A ``table`` is for reading: IRIs of a run's instances are written ``run:<rest>`` (the row's
    run is in its ``run_id`` column), vocabulary IRIs with their prefixes (``mp:``, ``prov:``),
    and cells longer than ``width`` characters are shortened in the middle; a footer says so
    (``-f csv`` and ``-f json`` keep every value whole). The notes of a question about runs
    that lack what it needs (:func:`gaps`) follow the table, or replace ``(no results)``.
    """
    import json as _json

    from metaprov.records import csv_text, float_texts, text_columns

    if isinstance(result, bool):
        return _json.dumps(result) if fmt == "json" else ("true" if result else "false")
    notes = list(result.attrs.get("notes", []))
    if fmt == "csv":
        shown = text_columns(result, digits=ANSWER_DIGITS)
        return str(csv_text(shown))
    df = result.copy()
    for col in df.columns:
        if isinstance(df[col].dtype, pd.DatetimeTZDtype):
            text = df[col].dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            df[col] = text.where(df[col].notna(), None)
    if fmt == "json":
        for col in df.columns:
            if df[col].dtype.kind == "f":
                texts = float_texts(df[col], digits=ANSWER_DIGITS)
                df[col] = pd.Series([None if t is None else float(t) for t in texts], dtype=object)
        rows = df.astype(object).where(df.notna(), None).to_dict(orient="records")
        return _json.dumps(rows, indent=2, ensure_ascii=False, default=_json_scalar)
    if fmt != "table":
        raise QueryError(f"unknown result format {fmt!r}", hint="use table, csv or json")
    if not len(df):
        head = "" if not len(df.columns) else " ".join(df.columns) + "\n"
        return head + ("\n".join(f"note: {n}" for n in notes) if notes else "(no results)")
    shown, footer = _shortened(df.astype(object).where(df.notna(), ""), width)
    text = str(shown.to_string(index=False))
    return "\n".join([text, *footer, *(f"note: {n}" for n in notes)])


def _json_scalar(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return str(value)


def _shortened(df: pd.DataFrame, width: int) -> tuple[pd.DataFrame, list[str]]:
    """Text cells of a table shortened (see :func:`format_result`), and the footer saying how.

    A shortening never makes two different values of a column look the same: ``run:`` stands
    for a run's IRI only beside a ``run_id`` column (which tells the runs apart), and a column
    whose values a shortening would merge keeps more of them (the middle cut widens, up to whole
    values)."""
    runs = cut = False
    width = max(int(width), 12)
    by_run = "run_id" in df.columns
    for col in df.columns:
        s = df[col]
        if s.dtype != object or not s.map(type).eq(str).all():
            continue
        s = s.astype(str)
        distinct = s.nunique()
        iri = s.str.match(r"^https?://")
        if iri.any():
            compact = s
            if by_run:
                compact = s.str.replace(_RUN_IRI, "run:", regex=True)
            for prefix, ns in _SHORT_NAMESPACES.items():
                compact = compact.str.replace("^" + re.escape(ns), prefix, regex=True)
            compact = s.where(~iri, compact)
            if compact.nunique() == distinct:
                runs = runs or bool(
                    (compact.str.startswith("run:") & ~s.str.startswith("run:")).any()
                )
                s = compact
        for w in (width, 2 * width, 4 * width):
            long = s.str.len() > w
            if not long.any():
                break
            head, tail = (w - 3) // 2, w - 3 - (w - 3) // 2
            shorter = s.where(~long, s.str.slice(0, head) + "..." + s.str.slice(-tail))
            if shorter.nunique() == distinct:
                cut, s = True, shorter
                break
        df[col] = s
    footer = []
    if runs:
        footer.append("(run: = the IRI of the row's run, <base>/run/<run_id>/)")
    if cut:
        footer.append(
            f"(cells over {width} characters shortened in the middle; -f csv or -f json shows "
            "them whole)"
        )
    return df, footer


def query(
    question: str,
    params: Mapping[str, Any] | None = None,
    store: str | Path | Store | None = None,
    endpoint: str | None = None,
    *,
    file: str | Path | Sequence[str | Path] | None = None,
    gsp: str | None = None,
    allow_service: bool = False,
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
        allow_service: let the query call other SPARQL services (``SERVICE <...>``); refused
            otherwise, before anything is sent.

    Returns:
        A DataFrame (or a bool for ASK questions).

    Example:
        >>> query("slowest-tasks", {"prefix": "save_file"}, store="prov-store")  # doctest: +SKIP
    """
    from metaprov.store import EmbeddedStore, Store, open_store

    def ask(st: Store) -> pd.DataFrame | bool:
        before = st.allow_service
        st.allow_service = allow_service
        try:
            return run_question(st, question, params)
        finally:
            st.allow_service = before

    if file is not None:
        if store is not None or endpoint is not None:
            raise UsageError("give either export files or a store/endpoint, not both")
        mem = EmbeddedStore(None)
        for f in [file] if isinstance(file, (str, Path)) else list(file):
            mem.load_file(f)
        return ask(mem)
    if isinstance(store, Store):
        return ask(store)
    with open_store(store, endpoint, gsp=gsp, read_only=True) as st:
        if isinstance(st, EmbeddedStore) and not st.graphs():
            raise StoreError(
                f"the store {st.location} holds no run, so it has no answer",
                hint=f"load runs into it first: metaprov load RUN --store {st.location}",
            )
        return ask(st)


__all__ = [
    "CRITICAL_PATH",
    "Param",
    "Question",
    "check_question",
    "format_list",
    "format_result",
    "get_question",
    "guard_names",
    "parse_header",
    "query",
    "questions",
    "resolve",
    "run_question",
    "sorted_words",
    "split_steps",
    "step_variants",
]
