"""IRIs written as qualified names (``prefix:local``) by the PROV-DM syntaxes, a column at a time.

Input: a string array of IRIs, the document's namespaces (prefix -> namespace IRI, longest
first) and a :class:`Style` (how a syntax escapes a local part). Output: a string array of the
qualified names, the text the per-value rules (``prov``'s PROV-N escaping,
:func:`metaprov.write.provdm.xml_local`, the JSON escaping) give.

One polars expression per column, no Python per value: the namespace cut off, the local part's
characters replaced in one multi-pattern pass (``str.replace_many``), the prefix put before it.
A local part the replacements cannot write alone (one regex, ``Style.exact``: a character
outside ASCII in PROV-XML, outside PN_LOCAL in PROV-N, a first or last character with a rule of
its own) goes through the per-value rule (``Style.rule``); run keys make those rare. (Measured
on the 10^5-task run's 1.8 million IRIs: a numpy pass per step over the text buffer took twice
the time, one ``replace_substring`` per character three times.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.errors import FormatError

LARGE = pa.large_string()


@dataclass(frozen=True)
class Style:
    """How one syntax writes a local part."""

    #: a local part matching this regex (Rust syntax) goes through ``rule``
    exact: str
    #: the per-value rule, on an array of those local parts
    rule: Callable[[pa.Array], pa.Array]
    #: substrings of a local part and their replacements (one pass, leftmost first)
    replace: dict[str, str] = field(default_factory=dict)
    #: text around every qualified name (PROV-JSON's quotes)
    quote: str = ""


def char_class(chars: str, negate: bool = False) -> str:
    """A regex character class of the given (ASCII) characters, each written as a hex escape
    (no character of regex syntax to think about)."""
    body = "".join(f"\\x{ord(c):02X}" for c in chars)
    return f"[{'^' if negate else ''}{body}]"


def qualified_names(iris: pa.Array, ns: dict[str, str], style: Style) -> pa.Array:
    """Each IRI as ``prefix:local`` under the longest namespace of ``ns`` that holds it (with
    the style's quotes); nulls stay null."""
    iris = iris if iris.type == LARGE else pc.cast(iris, LARGE)
    if len(iris) == 0:
        return iris
    head, local = _split(iris, ns, style.quote)
    iri = pl.col("iri")
    local_col = pl.col("local")
    escaped = local_col.str.replace_many(style.replace) if style.replace else local_col
    frame = pl.DataFrame({"iri": pl.from_arrow(iris)}).with_columns(local=local)
    out = frame.select(
        name=pl.concat_str([head, escaped, pl.lit(style.quote)]),
        exact=local_col.str.contains(style.exact).fill_null(False),
        known=head.is_not_null() | iri.is_null(),
    )
    if not out["known"].all():  # pragma: no cover - the writer gave every namespace a prefix
        raise FormatError(f"no prefix for {frame['iri'].filter(~out['known'])[0]}")
    names = out["name"].to_arrow()
    names = names if names.type == LARGE else pc.cast(names, LARGE)
    if out["exact"].any():
        names = _exact_rows(frame, out, names, head, style)
    return names


def _split(iris: pa.Array, ns: dict[str, str], quote: str) -> tuple[pl.Expr, pl.Expr]:
    """(prefix and ``:``, local part) of each IRI, as polars expressions over ``iri``."""
    iri = pl.col("iri")
    heads = {p: f"{quote}{p}:" for p in ns}
    valid = len(iris) - iris.null_count
    for p, space in ns.items():
        hits = pc.sum(pc.starts_with(iris, space)).as_py() or 0
        if hits == valid:  # the common case: the column under one namespace
            return pl.lit(heads[p]), iri.str.slice(len(space))
        if hits:
            break
    head: pl.Expr | pl.When | pl.Then = pl
    local: pl.Expr | pl.When | pl.Then = pl
    for p, space in ns.items():
        hit = iri.str.starts_with(space)
        head = head.when(hit).then(pl.lit(heads[p]))  # type: ignore[union-attr]
        local = local.when(hit).then(iri.str.slice(len(space)))  # type: ignore[union-attr]
    return head.otherwise(None), local.otherwise(None)  # type: ignore[union-attr]


def _exact_rows(
    frame: pl.DataFrame, out: pl.DataFrame, names: pa.Array, head: pl.Expr, style: Style
) -> pa.Array:
    """``names`` with the rows ``out["exact"]`` marks written by the style's rule."""
    mask = out["exact"]
    rows = frame.filter(mask).select(head=head, local=pl.col("local"))
    locals_ = rows["local"].to_arrow()
    escaped = style.rule(locals_ if locals_.type == LARGE else pc.cast(locals_, LARGE))
    fixed = pl.DataFrame({"head": rows["head"], "esc": pl.from_arrow(escaped)}).select(
        pl.concat_str([pl.col("head"), pl.col("esc"), pl.lit(style.quote)])
    )
    fixed_arrow = fixed.to_series().to_arrow()
    sel = pa.array(mask.to_numpy().astype(np.bool_))
    return pc.replace_with_mask(names, sel, pc.cast(fixed_arrow, LARGE))
