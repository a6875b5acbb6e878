"""SPARQL text handling: query form, safe parameter binding, LIMIT.

Input: SPARQL query text and parameter values given by a user (strings from the command line or
Python values). Output: the query text with the parameters bound as ``VALUES`` rows of RDF terms.

Parameters are never pasted into the query as raw text: each value is first turned into an RDF
term by pyoxigraph's term constructors (``Literal``, ``NamedNode``), which validate IRIs and escape
literals, and the N-Triples form of that term is what enters the query, inside a ``VALUES`` block
placed at the start of the outermost ``WHERE`` group. A value such as ``"} UNION {?s ?p ?o}`` stays
one string literal: it cannot close a group, add a pattern or change the query's shape. The bound
text is parsed again before it is sent anywhere, so a malformed result never reaches a server.

The query is split into the terminals of the SPARQL 1.1 grammar (:func:`tokens`), so braces or
keywords inside strings, IRIs, comments and escaped names are never mistaken for structure.
Every query handed to an engine passes :func:`checked_query` (SERVICE, updates, size and depth
refused) and the engine gets the canonical text of what was checked, never the text received.
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

# The terminals of the SPARQL 1.1 grammar (https://www.w3.org/TR/sparql11-query/#sparqlGrammar),
# tried in this order at each position; whitespace is the grammar's WS (space, tab, CR, LF) only.
# A character no terminal takes is an "error" token (refused by checked_query).
_PN_BASE = (
    "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d"
    "\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd\U00010000-\U000effff"
)
_PN_U = _PN_BASE + "_"
_PN = _PN_U + r"\-0-9\u00b7\u0300-\u036f\u203f-\u2040"
_PLX = r"(?:%[0-9A-Fa-f]{2}|\\[_~.\-!$&'()*+,;=/?#@%])"
_UCHAR = r"(?:\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})"
_ECHAR = r"(?:\\[tbnrf\\\"'])"
_TOKEN = re.compile(
    "|".join(
        [
            r"(?P<ws>[ \t\r\n]+)",
            r"(?P<comment>\#[^\r\n]*)",
            rf"(?P<iri><(?:[^<>\"{{}}|^`\\\x00-\x20]|{_UCHAR})*>)",
            rf"(?P<string>'''(?:(?:'|'')?(?:[^'\\]|{_ECHAR}|{_UCHAR}))*'''"
            rf"|\"\"\"(?:(?:\"|\"\")?(?:[^\"\\]|{_ECHAR}|{_UCHAR}))*\"\"\""
            rf"|'(?:[^'\\\n\r]|{_ECHAR}|{_UCHAR})*'"
            rf"|\"(?:[^\"\\\n\r]|{_ECHAR}|{_UCHAR})*\")",
            rf"(?P<var>[?$][{_PN_U}0-9][{_PN_U}0-9\u00b7\u0300-\u036f\u203f-\u2040]*)",
            rf"(?P<bnode>_:[{_PN_U}0-9](?:[{_PN}.]*[{_PN}])?)",
            rf"(?P<pname>(?:[{_PN_BASE}](?:[{_PN}.]*[{_PN}])?)?:"
            rf"(?:(?:[{_PN_U}:0-9]|{_PLX})(?:(?:[{_PN}.:]|{_PLX})*(?:[{_PN}:]|{_PLX}))?)?)",
            r"(?P<lang>@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*)",
            r"(?P<number>[0-9]+\.[0-9]*[eE][+-]?[0-9]+|\.[0-9]+[eE][+-]?[0-9]+"
            r"|[0-9]+[eE][+-]?[0-9]+|[0-9]*\.[0-9]+|[0-9]+)",
            r"(?P<word>[A-Za-z_][A-Za-z0-9_]*)",
            r"(?P<punct>\^\^|&&|\|\||!=|<=|>=|[{}()\[\].,;*+\-/?|^!=<>])",
            r"(?P<error>.)",
        ]
    ),
    re.DOTALL,
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
        The bound query, in the canonical form :func:`check_syntax` checked (the text to hand
        the engine).

    Raises:
        QueryError: a parameter variable is not in the query, the query has no WHERE group, it
            calls another service without ``allow_service``, or it is refused or does not parse
            (:func:`checked_query`).
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
    return check_syntax(out, allow_service=allow_service)


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


#: Deepest nesting of ``{ ( [`` a query may have (the packaged questions need 8).
MAX_DEPTH = 64
#: Most tokens a query may have outside its ``VALUES`` data (the packaged questions have at
#: most ~900; the engine's parser and planner recurse on long joins, unions and paths).
MAX_TOKENS = 20_000
#: Longest query text accepted from a user or a client (characters).
MAX_QUERY_CHARS = 1 << 20

_SERVICE_REFUSED = (
    "the query calls another SPARQL service (SERVICE): federated queries send requests to "
    "the services they name, and are off by default"
)


@dataclass(frozen=True)
class Checked:
    """A query that passed :func:`checked_query`: what to hand the engine, and what it is."""

    #: The canonical text: the same tokens, with prefixed names written as full IRIs, strings
    #: and IRIs re-escaped, comments gone; the engine reads exactly the tokens checked.
    text: str
    #: ``SELECT``, ``ASK``, ``CONSTRUCT`` or ``DESCRIBE``.
    form: str
    #: Deepest nesting of brackets.
    depth: int


class QueryRefused(QueryError):
    """A query refused before it reached an engine (``status``: the HTTP status to answer)."""

    def __init__(self, message: str, *, hint: str | None = None, status: int = 400) -> None:
        super().__init__(message, hint=hint)
        self.status = status


def checked_query(
    text: str,
    *,
    allow_service: bool = False,
    max_chars: int | None = MAX_QUERY_CHARS,
    max_depth: int = MAX_DEPTH,
    max_tokens: int = MAX_TOKENS,
) -> Checked:
    """The one check before a query reaches an engine; returns the text to hand it.

    Every query metaprov sends to an engine (the embedded store, ``metaprov serve``, ``serve
    --follow``, a SPARQL endpoint) passes here. The text is split into the terminals of the
    SPARQL 1.1 grammar (:func:`tokens`), and the decision is taken on those tokens:

    1. too long (``max_chars``), a character no terminal takes (a backslash outside a string,
       an IRI or an escaped local name: ``\\u`` escapes are taken inside strings and IRIs
       only), a prefix never declared: refused;
    2. nesting deeper than ``max_depth``, or more than ``max_tokens`` tokens outside ``VALUES``
       data: refused (the engine's parser recurses, and a stack overflow kills its process);
    3. the keyword ``SERVICE`` (any case) unless ``allow_service``, a SPARQL update keyword
       (``INSERT``, ``DELETE``, ``LOAD``, ...), no query form: refused.

    What is returned is the canonical text of those tokens (prefixed names as full IRIs,
    strings and IRIs re-escaped, comments dropped), never the text received: every token in it
    is delimited beyond doubt, so the engine's parser reads the tokens that were checked, and a
    ``SERVICE`` can be in its parse tree only where a ``SERVICE`` token is in this text, which
    was refused. Whether the tokens form a query is the engine's parser's decision
    (:func:`check_syntax`).

    Raises:
        QueryRefused: with the reason (``status``: 413 for the size limits, 403 for SERVICE
            and updates, 400 otherwise).
    """
    if max_chars is not None and len(text) > max_chars:
        raise QueryRefused(
            f"the query is {len(text):,} characters long, more than the {max_chars:,} accepted",
            hint="shorten it (long lists of values belong in the data, not in the query)",
            status=413,
        )
    out: list[str] = []
    prefixes: dict[str, tuple[str, bool]] = {}  # name -> (IRI, a BASE follows the declaration)
    form = ""
    depth = deepest = counted = 0
    values_at: int | None = None  # depth of the VALUES data block being read
    values_next = False
    last_end = 0
    toks = list(tokens(text))
    i = 0
    while i < len(toks):
        tok = toks[i]
        gap = text[last_end : tok.start]
        kind = tok.kind
        if kind == "error":
            raise QueryRefused(
                f"{_where(text, tok.start)}: {tok.text!r} is not SPARQL here",
                hint="a backslash is taken only inside strings and IRIs and in escaped local "
                "names (ex:a\\#); write other characters as they are",
            )
        sep = _COMMENT.sub("", gap) if "#" in gap else gap  # whitespace, comments removed
        word = tok.text.upper() if kind == "word" else ""
        if word == "PREFIX":
            if not (
                i + 2 < len(toks)
                and toks[i + 1].kind == "pname"
                and toks[i + 1].text.endswith(":")
                and toks[i + 2].kind == "iri"
            ):
                raise QueryRefused(f"{_where(text, tok.start)}: PREFIX needs a name: and an <IRI>")
            prefixes[toks[i + 1].text[:-1]] = (_iri_value(text, toks[i + 2]), False)
            last_end = toks[i + 2].end
            i += 3
            continue
        last_end = tok.end
        if word == "BASE":
            prefixes = {k: (v, True) for k, (v, _) in prefixes.items()}
        if word in _FORMS and not form:
            form = word
        if word == "SERVICE" and not allow_service:
            raise QueryRefused(
                _SERVICE_REFUSED,
                hint="give --allow-service if the query may contact those services "
                "(library: allow_service=True)",
                status=403,
            )
        if word in _UPDATES:
            raise QueryRefused(
                f"this is a SPARQL update ({word}), not a query",
                hint="metaprov only runs read-only questions; load runs with metaprov load, "
                "remove them with metaprov drop RUN_ID",
                status=403,
            )
        if kind == "punct" and tok.text in ("{", "(", "["):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > max_depth:
                    raise QueryRefused(
                        f"{_where(text, tok.start)}: the query nests groups, brackets or blank "
                        f"nodes deeper than {max_depth} levels",
                        hint="flatten the query (the engine recurses once per level)",
                    )
            if values_next and tok.text == "{":
                values_at, values_next = depth, False
        elif kind == "punct" and tok.text in ("}", ")", "]"):
            if values_at is not None and depth == values_at:
                values_at = None
            depth -= 1
        if word == "VALUES":
            values_next = True
        if values_at is None:
            counted += 1
            if counted > max_tokens:
                raise QueryRefused(
                    f"the query has more than {max_tokens:,} tokens outside VALUES data",
                    hint="split it into smaller queries",
                    status=413,
                )
        out.append(sep + _canonical(text, tok, prefixes))
        i += 1
    if not form:
        raise QueryRefused(
            "no SELECT, ASK, CONSTRUCT or DESCRIBE found in the query",
            hint="check the query text (is it a SPARQL 1.1 query?)",
        )
    return Checked("".join(out).strip(), form, deepest)


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line}, column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


_COMMENT = re.compile(r"#[^\r\n]*")
_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}
_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)", re.DOTALL)
_IRI_BAD = re.compile(r'[<>"{}|^`\\\x00-\x20]')
_STRING_OUT = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


def _unescape(body: str, text: str, pos: int) -> str:
    """A string's or IRI's text with its ECHAR and UCHAR escapes decoded (``text`` and ``pos``
    place an error)."""
    if "\\" not in body:
        return body
    where = _where(text, pos)

    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        if len(code) > 1:
            n = int(code[1:], 16)
            if n > 0x10FFFF or 0xD800 <= n <= 0xDFFF:
                raise QueryRefused(f"{where}: \\{code} is not a character")
            return chr(n)
        if code not in _ESCAPES:
            raise QueryRefused(f"{where}: \\{code} is not a SPARQL escape")
        return _ESCAPES[code]

    return _ESCAPE.sub(one, body)


def _iri_value(text: str, tok: Token) -> str:
    value = _unescape(tok.text[1:-1], text, tok.start)
    if _IRI_BAD.search(value):
        raise QueryRefused(
            f"{_where(text, tok.start)}: an escape in the IRI {tok.text[:80]} gives a character "
            "an IRI may not hold"
        )
    return value


def _canonical(text: str, tok: Token, prefixes: Mapping[str, tuple[str, bool]]) -> str:
    """A token written so that no parser can read it as anything else."""
    if tok.kind == "iri":
        return f"<{_iri_value(text, tok)}>"
    if tok.kind == "string":
        quote = 3 if tok.text[:3] in ("'''", '"""') else 1
        value = _unescape(tok.text[quote:-quote], text, tok.start)
        return '"' + value.translate(_STRING_OUT) + '"'
    if tok.kind == "pname":
        prefix, _, local = tok.text.partition(":")
        if prefix not in prefixes:
            raise QueryRefused(
                f"{_where(text, tok.start)}: the prefix {prefix}: of {tok.text} is not declared",
                hint=f"add PREFIX {prefix}: <...> before the query",
            )
        base, based_after = prefixes[prefix]
        if based_after and ":" not in base:
            raise QueryRefused(
                f"{_where(text, tok.start)}: the prefix {prefix}: is a relative IRI and a BASE "
                "follows its declaration",
                hint="declare prefixes with absolute IRIs",
            )
        value = base + re.sub(r"\\(.)", r"\1", local)
        if _IRI_BAD.search(value):
            raise QueryRefused(f"{_where(text, tok.start)}: {tok.text} is not a valid IRI")
        return f"<{value}>"
    return tok.text


def refuse_service(text: str) -> None:
    """Refuse a query that calls another SPARQL service (``SERVICE``), or is not a query.

    A federated query makes whoever runs it (the embedded store, or the server) send requests to
    the services it names: off unless the user asks for it (``--allow-service``). The decision
    is :func:`checked_query`'s.

    Raises:
        QueryError: the query holds a SERVICE clause (or is refused for another reason).
    """
    checked_query(text, max_chars=None)


def check_syntax(text: str, *, allow_service: bool = False) -> str:
    """Check ``text`` (:func:`checked_query`) and have the engine's parser read the result.

    The parse runs on an engine thread without network (:mod:`metaprov.store.offline`), against
    an empty store (nothing is evaluated but an ``ASK``, over no data).

    Returns:
        The canonical text to hand the engine.

    Raises:
        QueryError: refused, or the engine's parser does not read it as a query.
    """
    import pyoxigraph as ox

    from metaprov.store.offline import offline

    checked = checked_query(text, allow_service=allow_service, max_chars=None)

    def parse() -> None:
        ox.Store().query(checked.text)

    try:
        offline(parse)
    except SyntaxError as exc:
        raise QueryError(
            f"the SPARQL query does not parse: {exc}", hint="check the query text"
        ) from exc
    except OSError as exc:  # an ASK that tried to reach a service it was allowed
        raise QueryError(f"the SPARQL query could not be checked: {exc}") from exc
    return checked.text


__all__ = [
    "MAX_DEPTH",
    "MAX_QUERY_CHARS",
    "MAX_TOKENS",
    "PARAM_TYPES",
    "Checked",
    "QueryRefused",
    "checked_query",
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
