"""SPARQL text handling: query form, safe parameter binding, LIMIT.

Input: SPARQL query text and parameter values given by a user (strings from the command line or
Python values). Output: the query text with the parameters bound as ``VALUES`` rows of RDF terms.

Parameters are never pasted into the query as raw text: each value is first turned into an RDF
term by pyoxigraph's term constructors (``Literal``, ``NamedNode``), which validate IRIs and escape
literals, and the N-Triples form of that term is what enters the query, inside a ``VALUES`` block
placed at the start of the outermost ``WHERE`` group. A value such as ``"} UNION {?s ?p ?o}`` stays
one string literal: it cannot close a group, add a pattern or change the query's shape. The bound
text is parsed again before it is sent anywhere, so a malformed result never reaches a server.

The query is scanned by a small lexer that knows SPARQL's strings, IRIs, comments and variables,
so braces or keywords inside them are never mistaken for structure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from metaprov.errors import QueryError

XSD = "http://www.w3.org/2001/XMLSchema#"

#: Parameter types a question may declare, with the XSD datatype of their literal.
PARAM_TYPES: dict[str, str | None] = {
    "string": XSD + "string",
    "integer": XSD + "integer",
    "double": XSD + "double",
    "decimal": XSD + "decimal",
    "boolean": XSD + "boolean",
    "dateTime": XSD + "dateTime",
    "iri": None,
    "limit": None,
}

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n\r]*)
  | (?P<string>'''(?:[^'\\]|\\.|'(?!''))*'''
              |\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\"
              |'(?:[^'\\\n\r]|\\.)*'
              |"(?:[^"\\\n\r]|\\.)*")
  | (?P<iri><[^<>"{}|^`\\\x00-\x20]*>)
  | (?P<var>[?$][A-Za-z0-9_\u00B7\u00C0-\U000EFFFF]+)
  | (?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)
  | (?P<word>[A-Za-z_\u00C0-\U000EFFFF][A-Za-z0-9_\-\u00B7\u00C0-\U000EFFFF]*(?::[^\s{}()<>"',;]*)?
            |:[^\s{}()<>"',;]*)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_FORMS = {"SELECT", "ASK", "CONSTRUCT", "DESCRIBE"}
_UPDATES = {"INSERT", "DELETE", "LOAD", "CLEAR", "DROP", "CREATE", "ADD", "MOVE", "COPY", "WITH"}


@dataclass(frozen=True)
class Token:
    """One lexical token: its kind (see ``_TOKEN``), text and position in the query."""

    kind: str
    text: str
    start: int
    end: int


def tokens(text: str) -> Iterator[Token]:
    """The tokens of a SPARQL query, whitespace and comments excluded."""
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "punct"
        if kind in ("ws", "comment"):
            continue
        yield Token(kind, m.group(), m.start(), m.end())


def query_form(text: str) -> str:
    """``SELECT``, ``ASK``, ``CONSTRUCT`` or ``DESCRIBE``.

    Raises:
        QueryError: an update (INSERT, DELETE, DROP, ...) or no query form at all.
    """
    for tok in tokens(text):
        if tok.kind != "word":
            continue
        word = tok.text.upper()
        if word in _FORMS:
            return word
        if word in _UPDATES:
            raise QueryError(
                f"this is a SPARQL update ({word}), not a query",
                hint="metaprov query only runs read-only questions; load runs with metaprov load, "
                "remove them with metaprov drop RUN_ID",
            )
    raise QueryError(
        "no SELECT, ASK, CONSTRUCT or DESCRIBE found in the query",
        hint="check the query text (is it a SPARQL 1.1 query?)",
    )


def variables(text: str) -> set[str]:
    """Names of the variables used in a query (without ``?``/``$``)."""
    return {t.text[1:] for t in tokens(text) if t.kind == "var"}


def _where_open(toks: list[Token], form: str) -> int | None:
    """Index of the ``{`` that opens the outermost WHERE group (None: the query has none)."""
    i = next((k for k, t in enumerate(toks) if t.kind == "word" and t.text.upper() == form), None)
    if i is None:
        return None
    i += 1
    if form == "CONSTRUCT" and i < len(toks) and toks[i].text == "{":
        # CONSTRUCT { template } WHERE { ... }: skip the template.
        depth = 0
        while i < len(toks):
            if toks[i].text == "{":
                depth += 1
            elif toks[i].text == "}":
                depth -= 1
                if depth == 0:
                    i += 1
                    break
            i += 1
    parens = 0
    while i < len(toks):
        t = toks[i]
        if t.text == "(":
            parens += 1
        elif t.text == ")":
            parens -= 1
        elif t.text == "{" and parens == 0:
            return i
        i += 1
    return None


def _matching_close(toks: list[Token], open_index: int) -> int:
    depth = 0
    for k in range(open_index, len(toks)):
        if toks[k].text == "{":
            depth += 1
        elif toks[k].text == "}":
            depth -= 1
            if depth == 0:
                return k
    raise QueryError("unbalanced braces in the query", hint="every '{' needs its '}'")


# ---------------------------------------------------------------------------------------------
# Terms
# ---------------------------------------------------------------------------------------------


def make_term(value: Any, type_: str = "string", *, name: str = "value") -> str:
    """The N-Triples form of ``value`` as an RDF term of ``type_``, built by pyoxigraph.

    Args:
        value: a Python value or the text given on the command line.
        type_: one of :data:`PARAM_TYPES`.
        name: the parameter name (for error messages).

    Returns:
        The term in N-Triples syntax (an escaped literal or an ``<iri>``).

    Raises:
        QueryError: the value is not a valid ``type_`` (e.g. ``abc`` as an integer, a relative IRI).
    """
    import pyoxigraph as ox

    if type_ not in PARAM_TYPES or type_ == "limit":
        raise QueryError(
            f"parameter {name!r}: unknown type {type_!r}",
            hint=f"use one of: {', '.join(t for t in PARAM_TYPES if t != 'limit')}",
        )
    try:
        if type_ == "iri":
            text = str(value)
            if text.startswith("<") and text.endswith(">"):
                text = text[1:-1]
            return str(ox.NamedNode(text))
        datatype = ox.NamedNode(str(PARAM_TYPES[type_]))
        lexical = _lexical(value, type_)
        if type_ == "string":
            return str(ox.Literal(lexical))
        return str(ox.Literal(lexical, datatype=datatype))
    except (ValueError, TypeError) as exc:
        raise QueryError(
            f"parameter {name!r}: {value!r} is not a valid {type_}: {exc}",
            hint="an IRI must be absolute (https://...), numbers plain (42, 1.5), booleans true/false,"
            " times ISO 8601 with a zone (2024-04-19T19:01:00Z)",
        ) from exc


def _lexical(value: Any, type_: str) -> str:
    """Canonical lexical form of a value of ``type_`` (raises ValueError when it is not one)."""
    if type_ == "string":
        return str(value)
    if type_ == "integer":
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("not an integer")
        return str(int(str(value).strip()) if not isinstance(value, int) else value)
    if type_ in ("double", "decimal"):
        num = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
        if not math.isfinite(num):
            raise ValueError("not a finite number")
        return repr(num)
    if type_ == "boolean":
        if isinstance(value, bool):
            return "true" if value else "false"
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return "true"
        if text in ("false", "0", "no"):
            return "false"
        raise ValueError("not a boolean")
    if type_ == "dateTime":
        if isinstance(value, datetime):
            when = value
        else:
            when = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        if when.tzinfo is None:
            raise ValueError("the time has no zone; add Z for UTC")
        return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    raise ValueError(f"unknown type {type_}")


# ---------------------------------------------------------------------------------------------
# Binding
# ---------------------------------------------------------------------------------------------


def bind(
    text: str, values: Mapping[str, str], limit: int | None = None, *, allow_service: bool = False
) -> str:
    """Bind parameters (given as N-Triples terms, see :func:`make_term`) and set the LIMIT.

    The terms go into ``VALUES (?a ?b) { (ta tb) }`` rows placed at the start of every group
    pattern (``{ ... }`` of WHERE, OPTIONAL, GRAPH, UNION branches, MINUS, EXISTS, sub-selects)
    that mentions the variable. SPARQL evaluates groups bottom-up, so a FILTER inside ``GRAPH ?g
    { ... }`` or a sub-select would not see one outer VALUES row; binding every group that
    uses the variable gives a parameter the same value everywhere in the question, like the
    substitution of SEP-0007 (what pyoxigraph's ``substitutions`` do), and works on any server.

    Args:
        text: the query.
        values: variable name -> N-Triples term.
        limit: if given, the value of every LIMIT clause (added at the end when there is none).
        allow_service: let the query hold ``SERVICE`` clauses (see :func:`refuse_service`).

    Returns:
        The bound query text.

    Raises:
        QueryError: a parameter variable is not in the query, the query has no WHERE group, or
            it calls another service without ``allow_service``.
    """
    import pyoxigraph as ox

    toks = list(tokens(text))
    form = query_form(text)
    used = {t.text[1:] for t in toks if t.kind == "var"}
    for name in values:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise QueryError(
                f"{name!r} is not a valid parameter name", hint="use letters, digits and _"
            )
        if name not in used:
            raise QueryError(
                f"the query has no variable ?{name} to bind",
                hint=f"its variables are: {', '.join('?' + v for v in sorted(used)) or 'none'}",
            )
    # Terms must parse back as exactly one term each (defence in depth: they come from
    # pyoxigraph's constructors, but a caller may hand in anything).
    for name, term in values.items():
        _check_term(name, term, ox)
    pieces: list[tuple[int, int, str]] = []  # (start, end, replacement)
    if values:
        where = _where_open(toks, form)
        if where is None:
            raise QueryError(
                "the query has no WHERE group to bind parameters in",
                hint="write the question as ... WHERE { ... }",
            )
        for k in _group_opens(toks, form):
            close = _matching_close(toks, k)
            inside = {t.text[1:] for t in toks[k:close] if t.kind == "var"}
            names = sorted(values) if k == where else sorted(n for n in values if n in inside)
            # BIND (... AS ?x) may not follow a VALUES of ?x in the same group: such a group
            # gets no row; the enclosing group's row still joins with what the BIND computes.
            names = [n for n in names if n not in _bind_targets(toks, k, close)]
            if names:
                pieces.append((toks[k].end, toks[k].end, _values_block(values, names)))
    if limit is not None:
        if isinstance(limit, bool) or int(limit) < 0:
            raise QueryError(f"limit must be a non-negative integer, not {limit!r}")
        pieces.extend(_limit_pieces(toks, text, int(limit)))
    out = text
    for start, end, repl in sorted(pieces, key=lambda p: p[0], reverse=True):
        out = out[:start] + repl + out[end:]
    check_syntax(out, allow_service=allow_service)
    return out


def _bind_targets(toks: list[Token], open_index: int, close_index: int) -> set[str]:
    """Variables assigned by ``AS ?x`` directly in the group (not in nested groups)."""
    out: set[str] = set()
    depth = 0
    for j in range(open_index + 1, close_index):
        t = toks[j]
        if t.text == "{":
            depth += 1
        elif t.text == "}":
            depth -= 1
        elif (
            depth == 0 and t.kind == "word" and t.text.upper() == "AS" and toks[j + 1].kind == "var"
        ):
            out.add(toks[j + 1].text[1:])
    return out


def _group_opens(toks: list[Token], form: str) -> list[int]:
    """Indices of the ``{`` tokens that open group graph patterns (where VALUES may go).

    Left out: the CONSTRUCT template, VALUES data blocks, and the brace of a sub-select
    (``{ SELECT``), whose own WHERE group is a group pattern.
    """
    skip: set[int] = set()
    if form == "CONSTRUCT":
        i = next(
            k for k, t in enumerate(toks) if t.kind == "word" and t.text.upper() == "CONSTRUCT"
        )
        if i + 1 < len(toks) and toks[i + 1].text == "{":
            skip.update(range(i + 1, _matching_close(toks, i + 1) + 1))
    for k, t in enumerate(toks):
        if t.kind == "word" and t.text.upper() == "VALUES":
            j = k + 1
            if j < len(toks) and toks[j].text == "(":
                while j < len(toks) and toks[j].text != ")":
                    j += 1
            j += 1
            if j < len(toks) and toks[j].text == "{":
                skip.add(j)
    return [
        k
        for k, t in enumerate(toks)
        if t.text == "{"
        and t.kind == "punct"
        and k not in skip
        and not (
            k + 1 < len(toks)
            and toks[k + 1].kind == "word"
            and toks[k + 1].text.upper() == "SELECT"
        )
    ]


def _values_block(values: Mapping[str, str], names: list[str]) -> str:
    row = " ".join(values[n] for n in names)
    return f"\n  VALUES ({' '.join('?' + n for n in names)}) {{ ({row}) }}\n"


def _check_term(name: str, term: str, ox: Any) -> None:
    try:
        parsed = list(ox.parse(f"<urn:s> <urn:p> {term} .", ox.RdfFormat.N_TRIPLES))
    except SyntaxError as exc:
        raise QueryError(f"parameter {name!r}: {term!r} is not one RDF term") from exc
    if len(parsed) != 1:
        raise QueryError(f"parameter {name!r}: {term!r} is not one RDF term")


def _limit_pieces(toks: list[Token], text: str, limit: int) -> list[tuple[int, int, str]]:
    """Set every ``LIMIT n`` of the query to ``limit``; add one at the end when there is none."""
    found = [
        (t.start, toks[k + 1].end, f"LIMIT {limit}")
        for k, t in enumerate(toks[:-1])
        if t.kind == "word" and t.text.upper() == "LIMIT" and toks[k + 1].kind == "number"
    ]
    if found:
        return found
    # A trailing VALUES clause (after the outermost group) must stay last.
    depth = 0
    for k, t in enumerate(toks):
        if t.text == "{":
            depth += 1
        elif t.text == "}":
            depth -= 1
        elif (
            depth == 0
            and t.kind == "word"
            and t.text.upper() == "VALUES"
            and any(x.text == "}" for x in toks[:k])
        ):
            return [(t.start, t.start, f"LIMIT {limit}\n")]
    end = len(text.rstrip())
    return [(end, end, f"\nLIMIT {limit}")]


def projection(text: str) -> list[str]:
    """The variables a SELECT query returns, in order (``SELECT *`` gives every variable)."""
    toks = list(tokens(text))
    i = next(
        (k for k, t in enumerate(toks) if t.kind == "word" and t.text.upper() == "SELECT"), None
    )
    if i is None:
        return []
    out: list[str] = []
    depth = 0
    for k in range(i + 1, len(toks)):
        t = toks[k]
        if depth == 0 and (
            t.text == "{" or (t.kind == "word" and t.text.upper() in ("WHERE", "FROM"))
        ):
            break
        if t.text == "(":
            depth += 1
        elif t.text == ")":
            depth -= 1
        elif t.text == "*" and depth == 0:
            return sorted(variables(text))
        elif t.kind == "var" and (
            depth == 0 or (toks[k - 1].kind == "word" and toks[k - 1].text.upper() == "AS")
        ):
            out.append(t.text[1:])
    return out


def fill_values(text: str, rows: Mapping[str, Any]) -> str:
    """Fill every empty ``VALUES (?a ?b) { }`` block of a query with rows of SPARQL JSON results.

    A block names one variable per column of the previous step, in the same order (its names
    may differ: a sub-select may rename them). Each value becomes an RDF term through
    pyoxigraph's constructors (IRIs validated, literals escaped, datatype and language kept); an
    unbound value becomes ``UNDEF``. A step may hold several empty blocks (e.g. one in its main
    pattern and one in a sub-select that aggregates the same rows); each gets all the rows.

    Raises:
        QueryError: the query has no empty VALUES block, or a value is a blank node.
    """
    import pyoxigraph as ox

    toks = list(tokens(text))
    blocks: list[tuple[int, int, list[str]]] = []
    for k, t in enumerate(toks):
        if not (t.kind == "word" and t.text.upper() == "VALUES"):
            continue
        j = k + 1
        names: list[str] = []
        if j < len(toks) and toks[j].text == "(":
            j += 1
            while j < len(toks) and toks[j].kind == "var":
                names.append(toks[j].text[1:])
                j += 1
            if j >= len(toks) or toks[j].text != ")":
                continue
        elif j < len(toks) and toks[j].kind == "var":
            names.append(toks[j].text[1:])
        else:
            continue
        j += 1
        if j + 1 < len(toks) and toks[j].text == "{" and toks[j + 1].text == "}":
            blocks.append((t.start, toks[j + 1].end, names))
    if not blocks:
        raise QueryError("this step has no empty VALUES (...) { } block to take the previous rows")
    bindings = rows.get("results", {}).get("bindings", [])
    columns = list(rows.get("head", {}).get("vars", []))
    out = text
    for start, end, names in reversed(blocks):
        if len(names) != len(columns):
            raise QueryError(
                f"a VALUES block names {len(names)} variables but the previous step gave "
                f"{len(columns)} columns ({', '.join('?' + c for c in columns)})"
            )
        lines = ["(" + " ".join(_json_term(b.get(c), ox) for c in columns) + ")" for b in bindings]
        head = "(" + " ".join("?" + n for n in names) + ")"
        block = f"VALUES {head} {{\n    " + "\n    ".join(lines) + "\n  }"
        out = out[:start] + block + out[end:]
    return out


def _json_term(cell: Mapping[str, Any] | None, ox: Any) -> str:
    if cell is None:
        return "UNDEF"
    kind, value = cell.get("type"), str(cell.get("value", ""))
    if kind == "uri":
        return str(ox.NamedNode(value))
    if kind in ("literal", "typed-literal"):
        if cell.get("xml:lang"):
            return str(ox.Literal(value, language=cell["xml:lang"]))
        if cell.get("datatype"):
            return str(ox.Literal(value, datatype=ox.NamedNode(cell["datatype"])))
        return str(ox.Literal(value))
    raise QueryError(
        f"a blank node ({kind}) cannot be passed to the next step of a question",
        hint="return IRIs or literals from the step before",
    )


def refuse_service(text: str) -> None:
    """Refuse a query that names another SPARQL service (``SERVICE <...>``).

    A federated query makes whoever runs it (the embedded store, or the server) send requests to
    the services it names: off unless the user asks for it (``--allow-service``). The lexer
    tells the keyword from the same word inside a string, an IRI or a comment.

    Raises:
        QueryError: the query holds a SERVICE clause.
    """
    for tok in tokens(text):
        if tok.kind == "word" and tok.text.upper() == "SERVICE":
            raise QueryError(
                "the query calls another SPARQL service (SERVICE): federated queries send "
                "requests to the services they name, and are off by default",
                hint="give --allow-service if the query may contact those services "
                "(library: allow_service=True)",
            )


def check_syntax(text: str, *, allow_service: bool = False) -> None:
    """Parse ``text`` as a SPARQL query (against an empty store); raise QueryError when invalid.

    A ``SERVICE`` clause is refused first (see :func:`refuse_service`) unless ``allow_service``:
    even parsing runs the query, which would contact the service.
    """
    import pyoxigraph as ox

    if not allow_service:
        refuse_service(text)

    try:
        ox.Store().query(text)
    except SyntaxError as exc:
        raise QueryError(
            f"the SPARQL query does not parse: {exc}", hint="check the query text"
        ) from exc


__all__ = [
    "PARAM_TYPES",
    "bind",
    "check_syntax",
    "fill_values",
    "projection",
    "make_term",
    "query_form",
    "refuse_service",
    "tokens",
    "variables",
]
