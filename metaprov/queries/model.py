"""What a question is: its name, header, parameters and SPARQL text (no store, no running).

Input: the ``# title:`` / ``# description:`` / ``# param:`` / ``# example:`` / ``# needs:`` /
``# sorted-words:`` header of a ``.rq`` text. Output: :class:`Question` and :class:`Param` values, shared by the registry
(:mod:`metaprov.queries`) and the questions answered in Python (:mod:`metaprov.queries.critical_path`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from metaprov.errors import QueryError
from metaprov.store.sparql import PARAM_TYPES

_HEADER = re.compile(r"^#\s*(title|description|param|example|needs|sorted-words)\s*:\s*(.*?)\s*$")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: What a question's answer depends on that some runs lack (``# needs:`` header): for each run
#: without it, the answer says so instead of silently leaving the run out (or counting 0).
NEEDS = ("threads", "compute", "darshan", "environment", "activity")
_PARAM = re.compile(
    r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*\((?P<type>[A-Za-z]+)(?P<opts>(?:\s*,\s*[^)]*)?)\)\s*(?P<desc>.*)$"
)


@dataclass(frozen=True)
class Param:
    """A declared parameter of a question.

    Attributes:
        name: the SPARQL variable it binds (without ``?``), or ``limit``.
        type: one of :data:`metaprov.store.sparql.PARAM_TYPES`.
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
    needs: tuple[str, ...] = ()
    #: Columns holding a space-separated list (a GROUP_CONCAT, whose order SPARQL leaves to the
    #: engine): their words are sorted after the engine answers (``# sorted-words:`` header), so
    #: every engine gives the same bytes.
    sorted_words: tuple[str, ...] = ()

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
    needs: list[str] = []
    sorted_words: list[str] = []
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
        elif key == "needs":
            for need in (n.strip() for n in value.split(",") if n.strip()):
                if need not in NEEDS:
                    raise QueryError(
                        f"{path or name}: unknown '# needs:' value {need!r}",
                        hint=f"use any of: {', '.join(NEEDS)}",
                    )
                needs.append(need)
        elif key == "sorted-words":
            for column in (c.strip() for c in value.split(",") if c.strip()):
                if not _COLUMN.match(column):
                    raise QueryError(
                        f"{path or name}: bad '# sorted-words:' column {column!r}",
                        hint="name the answer's columns (SPARQL variables without '?'), "
                        "separated by commas",
                    )
                sorted_words.append(column)
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
        needs=tuple(needs),
        sorted_words=tuple(sorted_words),
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


__all__ = ["Param", "Question", "parse_header"]
