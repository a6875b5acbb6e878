"""The packaged questions: named, documented SPARQL files, and the code that runs them.

Input: a question name (``slowest-tasks``), a user's ``.rq`` file, or SPARQL text, plus parameter
values. Output: the answer as a :class:`pandas.DataFrame` (or a bool for ASK).

Every packaged question is a ``<name>.rq`` file in this folder whose header says what it is::

    # title: Slowest task executions
    # description: The longest task executions, slowest first.
    # param: prefix (string, optional) only tasks of this prefix, e.g. save_file
    # param: limit (limit, default 20) how many rows

Parameter types are those of :data:`metaprov.queries.sparql.PARAM_TYPES`; a ``limit`` parameter
sets the query's final LIMIT, every other parameter binds the SPARQL variable of the same name
(safely: see :mod:`metaprov.queries.sparql`). A user's own ``.rq`` file may carry the same header.

``critical-path`` is a question answered in Python (networkx over the dependency DAG read from
the store), listed with the others.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metaprov.errors import QueryError
from metaprov.queries.sparql import PARAM_TYPES

if TYPE_CHECKING:
    import pandas as pd

    from metaprov.store import Store

CRITICAL_PATH = "critical-path"

_HEADER = re.compile(r"^#\s*(title|description|param|example)\s*:\s*(.*?)\s*$")
_PARAM = re.compile(
    r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*\((?P<type>[A-Za-z]+)(?P<opts>(?:\s*,\s*[^)]*)?)\)\s*(?P<desc>.*)$"
)


@dataclass(frozen=True)
class Param:
    """A declared parameter of a question.

    Attributes:
        name: the SPARQL variable it binds (without ``?``), or ``limit``.
        type: one of :data:`metaprov.queries.sparql.PARAM_TYPES`.
        description: one line for ``metaprov query --list``.
        optional: the question runs without it (the variable is then left free).
        default: value used when not given (as text), or None.
    """

    name: str
    type: str
    description: str = ""
    optional: bool = False
    default: str | None = None

    @property
    def required(self) -> bool:
        return not self.optional and self.default is None

    def signature(self) -> str:
        """``name (type)`` with ``optional`` / ``default`` as declared."""
        extra = ""
        if self.default is not None:
            extra = f", default {self.default}"
        elif self.optional:
            extra = ", optional"
        return f"{self.name} ({self.type}{extra})"


@dataclass(frozen=True)
class Question:
    """A question: its name, header and SPARQL text (empty for ``critical-path``)."""

    name: str
    title: str
    description: str
    params: tuple[Param, ...] = ()
    text: str = ""
    path: str = ""
    examples: tuple[str, ...] = field(default_factory=tuple)

    def param(self, name: str) -> Param | None:
        """The declared parameter called ``name``."""
        return next((p for p in self.params if p.name == name), None)


def parse_header(text: str, *, name: str = "", path: str = "") -> Question:
    """Read the ``# title:`` / ``# description:`` / ``# param:`` header of a ``.rq`` text.

    Raises:
        QueryError: a ``# param:`` line that does not read ``name (type[, optional|, default X]) text``.
    """
    title = ""
    desc: list[str] = []
    params: list[Param] = []
    examples: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        m = _HEADER.match(stripped)
        if not m:
            continue
        key, value = m.group(1), m.group(2)
        if key == "title":
            title = value
        elif key == "description":
            desc.append(value)
        elif key == "example":
            examples.append(value)
        else:
            params.append(_parse_param(value, where=path or name))
    return Question(
        name=name,
        title=title,
        description=" ".join(desc),
        params=tuple(params),
        text=text,
        path=path,
        examples=tuple(examples),
    )


def _parse_param(value: str, *, where: str) -> Param:
    m = _PARAM.match(value)
    if not m:
        raise QueryError(
            f"{where}: bad '# param:' line {value!r}",
            hint="write '# param: name (type[, optional | , default VALUE]) description'",
        )
    type_ = m.group("type")
    if type_ not in PARAM_TYPES:
        raise QueryError(
            f"{where}: parameter {m.group('name')!r} has unknown type {type_!r}",
            hint=f"use one of: {', '.join(PARAM_TYPES)}",
        )
    optional = False
    default = None
    for opt in (o.strip() for o in m.group("opts").split(",") if o.strip()):
        if opt == "optional":
            optional = True
        elif opt.startswith("default "):
            default = opt[len("default ") :].strip()
        else:
            raise QueryError(f"{where}: parameter {m.group('name')!r}: unknown option {opt!r}")
    return Param(m.group("name"), type_, m.group("desc").strip(), optional, default)


@lru_cache(maxsize=1)
def _packaged() -> dict[str, Question]:
    out: dict[str, Question] = {}
    folder = resources.files(__name__)
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".rq"):
            name = entry.name[: -len(".rq")]
            out[name] = parse_header(entry.read_text(encoding="utf-8"), name=name, path=str(entry))
    from metaprov.critical_path import QUESTION as cp

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
    if question in _packaged():
        return _packaged()[question]
    candidate = Path(question)
    if question.endswith(".rq") or (
        len(question) < 4096 and "\n" not in question and candidate.is_file()
    ):
        if not candidate.is_file():
            raise QueryError(
                f"no such query file: {question}",
                hint="give the path of a .rq file, or a question name",
            )
        try:
            text = candidate.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise QueryError(f"cannot read the query file {question}: {exc}") from exc
        return parse_header(text, name=candidate.stem, path=str(candidate))
    if "{" in question or any(c.isspace() for c in question.strip()):
        # Question names have no spaces: this is SPARQL text (an update is refused later).
        return parse_header(question, name="query")
    return get_question(question)


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
    values = dict(params or {})
    if q.name == CRITICAL_PATH and not q.text:
        from metaprov.critical_path import critical_path_from_store

        _check_params(q, values)
        return critical_path_from_store(store, run=values.get("run"))
    bound, types, limit = _check_params(q, values)
    steps = split_steps(q.text)
    if len(steps) == 1:
        return store.query(q.text, bound, types=types, limit=limit)
    from metaprov.queries.sparql import variables
    from metaprov.store import results_to_frame

    rows = None
    for i, step in enumerate(steps):
        here = variables(step)
        rows = store.query_json(
            step,
            {k: v for k, v in bound.items() if k in here},
            types=types,
            limit=limit if i == 0 else None,
            rows=rows,
        )
    assert rows is not None
    return results_to_frame(rows)


def check_question(q: Question) -> None:
    """Check a question statically: every step parses, each step's empty VALUES blocks take the
    previous step's columns, and every declared parameter is a variable of some step.

    Raises:
        QueryError: what is wrong, naming the question.
    """
    from metaprov.queries.sparql import check_syntax, fill_values, projection, query_form, variables

    steps = split_steps(q.text)
    previous: list[str] = []
    used: set[str] = set()
    for i, step in enumerate(steps):
        if i:
            step = fill_values(step, {"head": {"vars": previous}, "results": {"bindings": []}})
        if query_form(step) != "SELECT" and len(steps) > 1:
            raise QueryError(f"{q.name}: step {i + 1} is not a SELECT query")
        check_syntax(step)
        previous = projection(step)
        used |= variables(step)
    missing = [p.name for p in q.params if p.type != "limit" and p.name not in used]
    if missing:
        raise QueryError(
            f"{q.name}: parameter(s) {', '.join(missing)} bind no variable of the query"
        )


_STEP = re.compile(r"^#%%\s*then\s*$", re.MULTILINE)


def split_steps(text: str) -> list[str]:
    """The steps of a question: SELECT queries separated by a line ``#%% then``.

    Each step after the first holds an empty ``VALUES (?a ?b) { }`` block that the previous
    step's rows fill: a few rows found by scans in step 1 are then looked up one by one in step
    2, which stores do much faster than joining two scans of millions of rows. Every step is
    plain SPARQL 1.1, so multi-step questions run on any server.
    """
    return [part.strip() + "\n" for part in _STEP.split(text) if part.strip()]


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


def format_list() -> str:
    """The packaged questions as text for ``metaprov query --list``."""
    lines = []
    for q in questions():
        lines.append(f"{q.name}\n    {q.title}. {q.description}".rstrip())
        for p in q.params:
            lines.append(f"    --param {p.signature()}: {p.description}")
    return "\n".join(lines)


def format_result(result: pd.DataFrame | bool, fmt: str = "table") -> str:
    """An answer as text: ``table`` (aligned columns), ``csv`` or ``json`` (a list of records).

    Times are ISO 8601 UTC; missing values are empty (csv), null (json) or blank (table). An
    ASK answer is ``true`` or ``false``.
    """
    import json as _json

    import pandas as pd

    if isinstance(result, bool):
        return _json.dumps(result) if fmt == "json" else ("true" if result else "false")
    df = result.copy()
    for col in df.columns:
        if isinstance(df[col].dtype, pd.DatetimeTZDtype):
            text = df[col].dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            df[col] = text.where(df[col].notna(), None)
    if fmt == "csv":
        return str(df.to_csv(index=False, lineterminator="\n"))
    if fmt == "json":
        records = _json.loads(
            df.to_json(orient="records", double_precision=15, default_handler=str)
        )
        return _json.dumps(records, indent=2, ensure_ascii=False)
    if fmt != "table":
        raise QueryError(f"unknown result format {fmt!r}", hint="use table, csv or json")
    if not len(df):
        return "(no results)" if not len(df.columns) else " ".join(df.columns) + "\n(no results)"
    shown = df.astype(object).where(df.notna(), "")
    return str(shown.to_string(index=False))


__all__ = [
    "CRITICAL_PATH",
    "Param",
    "Question",
    "check_question",
    "format_list",
    "format_result",
    "get_question",
    "parse_header",
    "questions",
    "resolve",
    "run_question",
    "split_steps",
]
