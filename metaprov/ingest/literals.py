"""Safe, vectorised parsing of the Python-literal cells of the Mofka-Dask CSVs.

Input: a column of cells such as ``{'a': 50208}``, ``{('x', 1): 336, ('x', 2): 336}``,
``{'list-1'}`` or ``{'b': {'a', 'c'}, 'a': set()}``.
Output: flat, columnar tables (cell index, key, value / dependency).

Nothing here evaluates code. Three tiers, each handling what the one before does not accept:

1. A byte scanner (:func:`_scan`) reads the column's Arrow buffer with numpy: string literals are
   found by quote parity, every other byte is classified through a lookup table, and the token
   sequence is checked against the literal's grammar with array operations. Key texts are cut out of
   the buffer as Arrow strings: no Python object per token, so a 100 MB dependency dict costs about
   a second. It accepts only plain cells (no ``"``, backslash or newline; canonical tuples; integers;
   single spaces between tokens), which is what Dask writes.
2. The regular-expression tokeniser (:func:`_parse_regex`) for the other cells: escapes,
   double-quoted strings, floats, odd spacing.
3. :func:`ast.literal_eval` (which only builds literals) for cells neither accepts (nested tuples,
   ...); a cell that is no literal of the expected shape is reported as malformed with its row.

Tier 1 accepts a cell only when tier 2 would produce exactly the same tokens, so the result does not
depend on which tier read a cell.

Keys are normalised to ``str(key)`` — the form of the ``key`` column of the transition files — so
``('x', 1)`` inside a dict and ``"('x', 1)"`` in a transition row are the same task.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

_S1 = r"'(?:[^'\\\n]|\\.)*'"
_S2 = r'"(?:[^"\\\n]|\\.)*"'
_NUM = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
_ATOM = rf"(?:{_S1}|{_S2}|{_NUM}|None|True|False)"
# Spaces inside a tuple never include the "\n" that separates cells: a token cannot span two cells.
_W = r"[^\S\n]*"
_TUPLE = rf"\({_W}(?:{_ATOM}{_W},{_W})*(?:{_ATOM}{_W})?\)"
# Cells are joined with "\n" (a CSV cell read line by line cannot hold one) and split again by it.
_TOKEN = re.compile(rf"{_S1}|{_S2}|{_TUPLE}|set\(\)|{_NUM}|[{{}}:,\n]|[^\s{{}}:,]+")

# A tuple exactly as repr() writes it (then its text already equals str(key)).
_CANON_TUPLE = r"^\((?:'[^'\\\n]*'|-?\d+)(?:, (?:'[^'\\\n]*'|-?\d+))*,?\)$"

# token kinds
K_SEP, K_OPEN, K_CLOSE, K_COLON, K_COMMA, K_STR, K_TUP, K_NUM, K_EMPTYSET, K_BAD = range(10)


@dataclass
class Parsed:
    """Result of parsing a column of literal cells.

    Attributes:
        cell: for each parsed item, the index (0-based position) of its cell in the input column.
        key: normalised key text of each item.
        value: for dict->int cells, the int value; for dependency dicts, the dependency key text
            (``None`` for a key without dependencies).
        bad_cells: positions of cells that are not literals of the expected shape.
        bad_detail: a short reason per bad cell.
    """

    cell: np.ndarray
    key: np.ndarray
    value: np.ndarray
    bad_cells: np.ndarray
    bad_detail: list[str]


def _kinds(tokens: pa.Array) -> np.ndarray:
    first = pc.utf8_slice_codeunits(tokens, 0, 1).to_numpy(zero_copy_only=False).astype(object)
    tok = tokens.to_numpy(zero_copy_only=False).astype(object)
    kinds = np.full(len(tok), K_BAD, dtype=np.int8)
    kinds[first == "\n"] = K_SEP
    kinds[first == "{"] = K_OPEN
    kinds[first == "}"] = K_CLOSE
    kinds[first == ":"] = K_COLON
    kinds[first == ","] = K_COMMA
    kinds[(first == "'") | (first == '"')] = K_STR
    kinds[first == "("] = K_TUP
    kinds[tok == "set()"] = K_EMPTYSET
    numeric = pc.match_substring_regex(tokens, rf"^{_NUM}$").to_numpy(zero_copy_only=False)
    kinds[numeric] = K_NUM
    # A "(" token that is not a whole tuple (e.g. a call) was split by the catch-all: bad.
    is_tup = kinds == K_TUP
    if is_tup.any():
        ok = pc.match_substring_regex(tokens, rf"^{_TUPLE}$").to_numpy(zero_copy_only=False)
        kinds[is_tup & ~ok] = K_BAD
    return kinds


class _BadKey(Exception):
    """Key tokens no literal parser reads (e.g. ``007``): their cells are malformed."""

    def __init__(self, cells: np.ndarray) -> None:
        super().__init__(cells)
        self.cells = cells


def _key_text(tokens: np.ndarray, kinds: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Normalise string / tuple literal tokens (of cells ``cells``) to ``str(key)``.

    Raises:
        _BadKey: naming the cells of the tokens that are not literals.
    """
    out = np.empty(len(tokens), dtype=object)
    if len(tokens) == 0:
        return out
    arr = pa.array(tokens, type=pa.string())
    is_str = kinds == K_STR
    has_bs = pc.match_substring(arr, "\\").to_numpy(zero_copy_only=False)
    stripped = pc.utf8_slice_codeunits(arr, 1, -1).to_numpy(zero_copy_only=False).astype(object)
    simple_str = is_str & ~has_bs
    out[simple_str] = stripped[simple_str]
    canon = pc.match_substring_regex(arr, _CANON_TUPLE).to_numpy(zero_copy_only=False)
    canon_tup = (kinds == K_TUP) & canon
    out[canon_tup] = tokens[canon_tup]
    slow = np.flatnonzero(~(simple_str | canon_tup))
    bad: list[int] = []
    for i in slow:  # rare: escapes, double-quoted tuple members, floats, odd spacing
        try:
            out[i] = normalise_key(ast.literal_eval(tokens[i]))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            bad.append(int(i))
    if bad:
        raise _BadKey(cells[bad])
    return out


def normalise_key(value: object) -> str:
    """``str(key)`` as Dask writes it in the transition files."""
    return value if isinstance(value, str) else str(value)


def _tokenise(cells: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    flat = cells.fillna("").astype(str).str.replace("\n", " ", regex=False)
    text = "\n".join(flat.tolist()) + "\n"
    toks = _TOKEN.findall(text)
    tokens = pa.array(toks, type=pa.string())
    kinds = _kinds(tokens)
    cell = np.cumsum(kinds == K_SEP) - (kinds == K_SEP)
    return np.asarray(toks, dtype=object), kinds, cell


def _grammar_ok(
    kinds: np.ndarray,
    cell: np.ndarray,
    ncells: int,
    allowed: set[tuple[int, int]],
    depth: np.ndarray,
) -> np.ndarray:
    """Per cell: does every (previous symbol, symbol) pair belong to the grammar?"""
    # A separator is at depth 0 whatever the cell before it left open, so that a malformed cell
    # never makes the next one malformed too.
    sym = kinds.astype(np.int16) * 8 + np.clip(np.where(kinds == K_SEP, 0, depth), 0, 7)
    prev = np.empty_like(sym)
    prev[0] = -1
    prev[1:] = sym[:-1]
    table = np.zeros((81, 81), dtype=bool)
    for a, b in allowed:
        table[a + 1, b + 1] = True
    ok_tok = table[prev + 1, sym + 1]
    bad_cell = np.zeros(ncells, dtype=bool)
    np.logical_or.at(bad_cell, cell[~ok_tok], True)
    return ~bad_cell


def _pairs_ok(kinds: np.ndarray, depth: np.ndarray, cell: np.ndarray, ncells: int) -> np.ndarray:
    """dict_int, per cell: is every key followed by ':' and every value by ',' or '}'?

    The grammar's number symbol stands for a key and for a value, so alone it would accept
    ``{'a': 1, 2}`` (and pair keys with the wrong values).
    """
    item = ((kinds == K_STR) | (kinds == K_TUP) | (kinds == K_NUM)) & (depth == 1)
    after_colon = np.zeros(len(kinds), dtype=bool)
    after_colon[1:] = kinds[:-1] == K_COLON
    nxt = np.full(len(kinds), -1, dtype=np.int16)
    nxt[:-1] = kinds[1:]
    nxt[:-1][cell[1:] != cell[:-1]] = -1
    bad = item & np.where(after_colon, (nxt != K_COMMA) & (nxt != K_CLOSE), nxt != K_COLON)
    ok = np.ones(ncells, dtype=bool)
    ok[cell[bad]] = False
    return ok


def _sym(kind: int, depth_before: int) -> int:
    return kind * 8 + depth_before


def _depth_before(kinds: np.ndarray, cell: np.ndarray) -> np.ndarray:
    step = (kinds == K_OPEN).astype(np.int64) - (kinds == K_CLOSE).astype(np.int64)
    cum = np.cumsum(step)
    # depth resets at each cell separator
    start_of_cell = np.zeros(cell.max() + 1 if len(cell) else 0, dtype=np.int64)
    sep_idx = np.flatnonzero(kinds == K_SEP)
    start_of_cell[1:] = cum[sep_idx[:-1]] if len(sep_idx) > 1 else start_of_cell[1:]
    before = cum - step - start_of_cell[cell]
    return np.where(kinds == K_CLOSE, before, before)


_SEP0 = _sym(K_SEP, 0)


def _set_grammar() -> set[tuple[int, int]]:
    key = [_sym(K_STR, 1), _sym(K_TUP, 1), _sym(K_NUM, 1)]
    g = {(-1, _sym(K_OPEN, 0)), (-1, _sym(K_EMPTYSET, 0)), (-1, _SEP0)}
    g |= {(_SEP0, _sym(K_OPEN, 0)), (_SEP0, _sym(K_EMPTYSET, 0)), (_SEP0, _SEP0)}
    g |= {(_sym(K_OPEN, 0), k) for k in key}
    g |= {(k, _sym(K_COMMA, 1)) for k in key} | {(k, _sym(K_CLOSE, 1)) for k in key}
    g |= {(_sym(K_COMMA, 1), k) for k in key}
    g |= {(_sym(K_CLOSE, 1), _SEP0), (_sym(K_EMPTYSET, 0), _SEP0)}
    return g


def _dict_num_grammar() -> set[tuple[int, int]]:
    key = [_sym(K_STR, 1), _sym(K_TUP, 1), _sym(K_NUM, 1)]
    val = _sym(K_NUM, 1)
    g = {(-1, _sym(K_OPEN, 0)), (-1, _SEP0), (_SEP0, _sym(K_OPEN, 0)), (_SEP0, _SEP0)}
    g |= {(_sym(K_OPEN, 0), k) for k in key} | {(_sym(K_OPEN, 0), _sym(K_CLOSE, 1))}
    g |= {(k, _sym(K_COLON, 1)) for k in key}
    g |= {(_sym(K_COLON, 1), val)}
    g |= {(val, _sym(K_COMMA, 1)), (val, _sym(K_CLOSE, 1))}
    g |= {(_sym(K_COMMA, 1), k) for k in key}
    g |= {(_sym(K_CLOSE, 1), _SEP0)}
    return g


def _deps_grammar() -> set[tuple[int, int]]:
    key1 = [_sym(K_STR, 1), _sym(K_TUP, 1), _sym(K_NUM, 1)]
    key2 = [_sym(K_STR, 2), _sym(K_TUP, 2), _sym(K_NUM, 2)]
    g = {(-1, _sym(K_OPEN, 0)), (-1, _SEP0), (_SEP0, _sym(K_OPEN, 0)), (_SEP0, _SEP0)}
    g |= {(_sym(K_OPEN, 0), k) for k in key1} | {(_sym(K_OPEN, 0), _sym(K_CLOSE, 1))}
    g |= {(k, _sym(K_COLON, 1)) for k in key1}
    g |= {(_sym(K_COLON, 1), _sym(K_EMPTYSET, 1)), (_sym(K_COLON, 1), _sym(K_OPEN, 1))}
    g |= {(_sym(K_OPEN, 1), k) for k in key2}
    g |= {(k, _sym(K_COMMA, 2)) for k in key2} | {(k, _sym(K_CLOSE, 2)) for k in key2}
    g |= {(_sym(K_COMMA, 2), k) for k in key2}
    end_val = [_sym(K_EMPTYSET, 1), _sym(K_CLOSE, 2)]
    g |= {(v, _sym(K_COMMA, 1)) for v in end_val} | {(v, _sym(K_CLOSE, 1)) for v in end_val}
    g |= {(_sym(K_COMMA, 1), k) for k in key1}
    g |= {(_sym(K_CLOSE, 1), _SEP0)}
    return g


_GRAMMARS = {"set": _set_grammar(), "dict_int": _dict_num_grammar(), "deps": _deps_grammar()}


def _slow_cell(text: str, shape: str) -> tuple[list[str], list[object]]:
    """Parse one cell with ast.literal_eval (literals only, never code) and check its shape."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not a Python literal ({type(exc).__name__})") from None
    keys: list[str] = []
    vals: list[object] = []
    if shape == "set":
        if not isinstance(value, (set, frozenset, list, tuple)) or isinstance(value, str):
            raise ValueError(f"expected a set of keys, got {type(value).__name__}")
        for k in value:
            _check_key(k)
            keys.append(normalise_key(k))
            vals.append(None)
    elif shape == "dict_int":
        if not isinstance(value, dict):
            raise ValueError(f"expected a dict of key -> bytes, got {type(value).__name__}")
        for k, v in value.items():
            _check_key(k)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ValueError(f"expected a byte count for key {normalise_key(k)!r}")
            keys.append(normalise_key(k))
            vals.append(int(v))
    else:
        if not isinstance(value, dict):
            raise ValueError(f"expected a dict of key -> set of keys, got {type(value).__name__}")
        for k, deps in value.items():
            _check_key(k)
            if not isinstance(deps, (set, frozenset, list, tuple)):
                raise ValueError(f"expected a set of dependencies for key {normalise_key(k)!r}")
            if not deps:
                keys.append(normalise_key(k))
                vals.append(None)
            for d in deps:
                _check_key(d)
                keys.append(normalise_key(k))
                vals.append(normalise_key(d))
    return keys, vals


def _check_key(k: object) -> None:
    if isinstance(k, (str, int, float)) and not isinstance(k, bool):
        return
    if isinstance(k, tuple) and all(
        isinstance(x, (str, int, float, tuple)) and not isinstance(x, bool) for x in k
    ):
        return
    raise ValueError(f"not a Dask key: {k!r}"[:200])


def _regex_items(
    shape: str,
    toks: np.ndarray,
    kinds: np.ndarray,
    cell: np.ndarray,
    depth: np.ndarray,
    ok: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Items of the cells ``ok`` accepts: cell, key, value, section (see :func:`_parse_regex`)."""
    if shape == "deps":
        is_key = np.isin(kinds, (K_STR, K_TUP, K_NUM)) & (depth == 1)
        is_dep = np.isin(kinds, (K_STR, K_TUP, K_NUM)) & (depth == 2)
        keep = (is_key | is_dep) & ok[cell]
        idx = np.flatnonzero(keep)
        text = _key_text(toks[idx], kinds[idx], cell[idx])
        # forward-fill the owning key of each dependency
        owner_pos = np.where(is_key[idx], np.arange(len(idx)), -1)
        owner_pos = np.maximum.accumulate(owner_pos) if len(owner_pos) else owner_pos
        owner = text[owner_pos] if len(idx) else text
        keys_mask = is_key[idx]
        # keys with no dependency: a key token followed (at depth 1) by set()
        nxt = np.flatnonzero(keep)  # positions of items in token space
        has_dep = np.zeros(len(idx), dtype=bool)
        if len(idx):
            dep_owner = owner_pos[~keys_mask]
            has_dep[np.unique(dep_owner)] = True
        no_dep_keys = keys_mask & ~has_dep
        out_cell = np.concatenate([cell[nxt][~keys_mask], cell[nxt][no_dep_keys]])
        out_key = np.concatenate([owner[~keys_mask], text[no_dep_keys]])
        out_val = np.concatenate(
            [text[~keys_mask], np.full(int(no_dep_keys.sum()), None, dtype=object)]
        )
        section = np.r_[
            np.zeros(int((~keys_mask).sum()), np.int8), np.ones(int(no_dep_keys.sum()), np.int8)
        ]
    elif shape == "set":
        is_key = np.isin(kinds, (K_STR, K_TUP, K_NUM)) & (depth == 1)
        keep = is_key & ok[cell]
        idx = np.flatnonzero(keep)
        out_cell = cell[idx]
        out_key = _key_text(toks[idx], kinds[idx], cell[idx])
        out_val = np.full(len(idx), None, dtype=object)
        section = np.zeros(len(idx), np.int8)
    else:
        is_item = np.isin(kinds, (K_STR, K_TUP, K_NUM)) & (depth == 1)
        # within a valid dict_int cell, items alternate key, value
        prev_colon = np.zeros(len(kinds), dtype=bool)
        prev_colon[1:] = kinds[:-1] == K_COLON
        is_val = is_item & prev_colon
        is_key = is_item & ~prev_colon
        kidx = np.flatnonzero(is_key & ok[cell])
        vidx = np.flatnonzero(is_val & ok[cell])
        out_cell = cell[kidx]
        out_key = _key_text(toks[kidx], kinds[kidx], cell[kidx])
        vals = pd.to_numeric(pd.Series(toks[vidx], dtype=object), errors="coerce")
        out_val = vals.to_numpy(dtype="float64")
        section = np.zeros(len(kidx), np.int8)

    return out_cell, out_key, out_val, section


def _parse_regex(cells: pd.Series, shape: str) -> tuple[Parsed, np.ndarray, bool]:
    """Tiers 2 and 3 on a column of cells (positions 0..n-1).

    Returns:
        The rows, not yet in their final order; each row's section (0: a dependency edge or a
        plain item, 1: a key without dependencies, 2: read by :func:`ast.literal_eval`); and
        whether any cell was read by :func:`ast.literal_eval` (see :func:`_order`).
    """
    cells = cells.reset_index(drop=True)
    n = len(cells)
    toks, kinds, cell = _tokenise(cells)
    depth = _depth_before(kinds, cell)
    ok = _grammar_ok(kinds, cell, n, _GRAMMARS[shape], depth)
    if shape == "dict_int":
        ok &= _pairs_ok(kinds, depth, cell, n)
    empty_cell = cells.isna().to_numpy() | (cells.astype(str).str.strip() == "").to_numpy()
    ok |= empty_cell

    while True:
        try:
            out_cell, out_key, out_val, section = _regex_items(shape, toks, kinds, cell, depth, ok)
            break
        except _BadKey as exc:  # a key token no parser reads: the whole cell is malformed
            ok[exc.cells] = False

    bad = np.flatnonzero(~ok)
    extra_cells: list[np.ndarray] = []
    extra_keys: list[list[str]] = []
    extra_vals: list[list[object]] = []
    still_bad: list[int] = []
    details: list[str] = []
    for i in bad:  # fallback, cell by cell: rare in real data
        try:
            k, v = _slow_cell(str(cells.iloc[i]), shape)
        except ValueError as exc:
            still_bad.append(int(i))
            details.append(str(exc))
            continue
        extra_cells.append(np.full(len(k), i, dtype=np.int64))
        extra_keys.append(k)
        extra_vals.append(v)
    if extra_cells:
        out_cell = np.concatenate([out_cell, *extra_cells])
        out_key = np.concatenate([out_key, *[np.array(k, dtype=object) for k in extra_keys]])
        if shape == "dict_int":
            out_val = np.concatenate([out_val, *[np.array(v, dtype="float64") for v in extra_vals]])
        else:
            out_val = np.concatenate([out_val, *[np.array(v, dtype=object) for v in extra_vals]])
        section = np.concatenate([section, np.full(len(out_cell) - len(section), 2, np.int8)])
    parsed = Parsed(
        out_cell.astype(np.int64), out_key, out_val, np.array(still_bad, dtype=np.int64), details
    )
    return parsed, section, bool(extra_cells)


# ----------------------------------------------------------------------------- tier 1: byte scanner

# Byte classes outside string literals and tuples. Anything not listed (other punctuation, control
# bytes, tabs, non-ASCII) sends the cell to tier 2.
_B_SP, _B_WORD, _B_OPEN, _B_CLOSE, _B_LPAR, _B_RPAR, _B_COLON, _B_COMMA, _B_BAD = range(9)
_LUT = np.full(256, _B_BAD, dtype=np.uint8)
_LUT[ord(" ")] = _B_SP
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.+":
    _LUT[_c] = _B_WORD
for _c, _k in zip(
    b"{}():,", (_B_OPEN, _B_CLOSE, _B_LPAR, _B_RPAR, _B_COLON, _B_COMMA), strict=True
):
    _LUT[_c] = _k
# Token codes beyond the byte classes: a string literal, a tuple (from "(" to its ")"), a word
# read as "set" or as an integer, and "set()".
_T_STR, _T_TUP, _T_SET, _T_NUM, _T_EMPTYSET = 9, 10, 11, 12, 13
_TO_KIND = np.full(14, K_BAD, dtype=np.int8)
for _t, _k in (
    (_B_OPEN, K_OPEN),
    (_B_CLOSE, K_CLOSE),
    (_B_COLON, K_COLON),
    (_B_COMMA, K_COMMA),
    (_T_STR, K_STR),
    (_T_NUM, K_NUM),
    (_T_TUP, K_TUP),
    (_T_EMPTYSET, K_EMPTYSET),
):
    _TO_KIND[_t] = _k
# Bytes that make a cell tier 2's: '"' and '\\' break quote parity; tier 2 reads a newline as a space.
_REJECT = (ord('"'), ord("\\"), ord("\n"))
# Integers tier 2 would read with the same text and value (no "-0", no leading zeros, exact).
_INT = r"^(0|-?[1-9][0-9]{0,14})$"
_SLICE = 1 << 23  # bytes classified per step: bounds the scanner's temporary memory


@dataclass
class ParsedArrow:
    """Result of :func:`parse_column`: :class:`Parsed` with Arrow text columns.

    Attributes:
        cell: for each item, the position of its cell in the input column.
        key: normalised key text of each item (``large_string``).
        value: ``float64`` byte counts for ``dict_int``; the dependency key text for ``deps``
            (null for a key without dependencies); all null for ``set``.
        bad_cells: positions of cells that are not literals of the expected shape.
        bad_detail: a short reason per bad cell.
    """

    cell: np.ndarray
    key: pa.Array
    value: pa.Array
    bad_cells: np.ndarray
    bad_detail: list[str]


def _spans(
    data: pa.Buffer, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray | None = None
) -> pa.Array:
    """The byte ranges ``[starts, ends)`` of ``data`` (sorted, disjoint) as a string array.

    The ranges and the gaps between them tile the buffer, so one offsets array describes both
    without copying; taking every other element then copies only the ranges' bytes. ``valid``:
    null where False.
    """
    k = len(starts)
    if k == 0:
        return pa.array([], type=pa.large_string())
    offs = np.empty(2 * k, dtype=np.int64)
    offs[0::2] = starts
    offs[1::2] = ends
    tiled = pa.LargeStringArray.from_buffers(2 * k - 1, pa.py_buffer(offs), data)
    out = tiled.take(pa.array(np.arange(0, 2 * k, 2, dtype=np.int64)))
    if valid is None or valid.all():
        return out
    bits = pa.array(valid).buffers()[1]  # (a boolean array is a bitmap)
    return pa.LargeStringArray.from_buffers(k, out.buffers()[1], out.buffers()[2], bits)


def _paint(
    cls: np.ndarray, s: int, e: int, starts: np.ndarray, ends: np.ndarray, code: int
) -> None:
    """Blank the bytes of the ranges ``[starts, ends]`` within ``[s, e)`` and mark their starts."""
    o0, o1 = np.searchsorted(starts, [s, e])
    c0, c1 = np.searchsorted(ends, [s, e])
    inside = np.zeros(e - s + 1, dtype=np.int8)
    inside[0] = o0 - c0  # a range opened before s and not closed before s
    inside[starts[o0:o1] - s] += 1
    inside[ends[c0:c1] - s + 1] -= 1
    np.cumsum(inside, dtype=np.int8, out=inside)
    np.putmask(cls, inside[:-1].view(np.bool_), _B_SP)
    cls[starts[o0:o1] - s] = code


def _classify(
    b: np.ndarray,
    offs: np.ndarray,
    strings: tuple[np.ndarray, np.ndarray],
    tuples: tuple[np.ndarray, np.ndarray],
    itype: type,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token starts and codes, and the end of every word, computed slice by slice.

    A token starts at every byte that is not a space, except inside a string literal or a tuple
    (one token each, at its first byte) and inside a run of word bytes (a number or a name). Each
    slice also classifies one byte past its end, to tell whether a word goes on into the next one.
    """
    nb = len(b)
    starts_out: list[np.ndarray] = []
    codes_out: list[np.ndarray] = []
    wends_out: list[np.ndarray] = []
    cell_starts = offs[1:-1]
    prev_word = False
    for s in range(0, nb, _SLICE):
        e = min(nb, s + _SLICE)
        e2 = min(nb, e + 1)
        m = e - s
        cls = _LUT[b[s:e2]]
        _paint(cls, s, e2, *strings, _T_STR)
        _paint(cls, s, e2, *tuples, _T_TUP)  # after the strings: a tuple holds strings
        isw = cls == _B_WORD
        # cont[i]: byte i continues the word of byte i-1 (never across a cell boundary)
        cont = np.empty(e2 - s, dtype=np.bool_)
        cont[0] = prev_word and bool(isw[0])
        np.logical_and(isw[1:], isw[:-1], out=cont[1:])
        lo, hi = np.searchsorted(cell_starts, [s, e2])
        cont[cell_starts[lo:hi] - s] = False
        ends = isw[:m].copy()
        if e2 > e:
            ends &= ~cont[1 : m + 1]
        else:
            ends[:-1] &= ~cont[1:m]
        wends_out.append((np.flatnonzero(ends) + (s + 1)).astype(itype))
        tok = cls[:m] != _B_SP
        tok &= ~cont[:m]
        at = np.flatnonzero(tok)
        codes_out.append(cls[at])
        starts_out.append((at + s).astype(itype))
        prev_word = bool(isw[m - 1])
        del cls, isw, cont, ends, tok, at
    return np.concatenate(starts_out), np.concatenate(codes_out), np.concatenate(wends_out)


_DELIM = np.zeros(256, dtype=np.bool_)
_DELIM[[ord("'"), ord("("), ord(")"), *_REJECT]] = True


def _delimiters(b: np.ndarray, itype: type) -> np.ndarray:
    """Positions of quotes, parentheses and ``_REJECT`` bytes, slice by slice (one table lookup)."""
    out = [
        (np.flatnonzero(_DELIM[b[s : s + _SLICE]]) + s).astype(itype)
        for s in range(0, len(b), _SLICE)
    ]
    return np.concatenate(out) if out else np.zeros(0, dtype=itype)


def _pairs(
    pos: np.ndarray, is_open: np.ndarray | None, pcell: np.ndarray, elig: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Opening and closing delimiters (quotes or parentheses), paired within each cell.

    A cell whose delimiters do not alternate open, close, open, ... (``is_open``: which are
    openers; ``None``: the same character opens and closes) becomes ineligible and its delimiters
    are ignored, so that they never pair across cells.
    """
    n = len(elig)
    if len(pos) == 0:
        return pos, pos
    first = np.ones(len(pos), dtype=bool)
    first[1:] = pcell[1:] != pcell[:-1]
    if is_open is None:
        wrong = np.zeros(len(pos), dtype=bool)
    else:
        rank = np.arange(len(pos)) - np.flatnonzero(first)[np.cumsum(first) - 1]
        wrong = is_open != (rank % 2 == 0)
    odd = (np.bincount(pcell, minlength=n) & 1).astype(bool)
    elig[pcell[wrong]] = False
    elig[odd] = False
    bad_cell = odd.copy()
    bad_cell[pcell[wrong]] = True
    keep = ~bad_cell[pcell]
    pos = pos[keep]
    return pos[0::2], pos[1::2]


def _scan(
    arr: pa.LargeStringArray, shape: str
) -> tuple[np.ndarray, np.ndarray, pa.Array, pa.Array, np.ndarray]:
    """Tier 1 on a column without nulls.

    The steps work on the column's byte buffer at once; each marks in ``elig`` the cells it
    cannot take (they go to tier 2, :func:`_parse_regex`): the delimiters (quotes, flat
    parentheses), the tokens, the words (``set`` or an integer), ``set()``, the canonical
    tuples, the grammar of the shape, then the items of the cells left.

    Returns:
        ``accepted`` (per cell) and, for the accepted cells' items in token order: cell, key text,
        value (see :class:`ParsedArrow`) and section (as in :func:`_parse_regex`).
    """
    n = len(arr)
    buf = _Bytes.of(arr)
    if buf is None:  # every cell empty
        empty_val = pa.array([], type=pa.float64() if shape == "dict_int" else pa.large_string())
        nothing = (np.array([], np.int64), pa.array([], type=pa.large_string()), empty_val)
        return (np.ones(n, dtype=bool), *nothing, np.array([], np.int8))
    elig = np.ones(n, dtype=bool)
    strings, tuples = _delimited(buf, elig)
    tok = _tokens(buf, strings, tuples, elig)
    del strings, tuples
    _words(buf, tok, elig)
    drop = _empty_sets(tok, elig)
    _canonical_tuples(buf, tok, drop, elig)
    tok = tok.take(~drop & elig[tok.cell])
    del drop
    kinds, depth = _grammar(tok, shape, elig, n)
    cells, key, value, section = _items(buf, tok, kinds, depth, shape, elig)
    return elig, cells, key, value, section


@dataclass
class _Bytes:
    """The bytes of a string column (``b``, from ``lo`` to ``hi`` of ``data``) and its cell
    offsets relative to ``lo`` (``offs``, of the narrowest integer type that holds them)."""

    data: pa.Buffer
    b: np.ndarray
    lo: int
    hi: int
    offs: np.ndarray
    itype: type

    @classmethod
    def of(cls, arr: pa.LargeStringArray) -> _Bytes | None:
        n = len(arr)
        bufs = arr.buffers()
        offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
        lo, hi = int(offsets[0]), int(offsets[-1])
        if hi == lo:
            return None
        itype = np.int32 if hi - lo < 2**31 - 2 else np.int64
        b = np.frombuffer(bufs[2], dtype=np.uint8)[lo:hi]
        return cls(bufs[2], b, lo, hi, (offsets - lo).astype(itype), itype)

    def cell_of(self, pos: np.ndarray) -> np.ndarray:
        """The last cell starting at or before ``pos`` (empty cells share their start with the
        next)."""
        return (np.searchsorted(self.offs, pos, side="right") - 1).astype(self.itype)

    def spans(
        self, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray | None = None
    ) -> pa.Array:
        """The texts of the byte ranges ``[starts, ends)`` (relative to ``lo``)."""
        return _spans(
            self.data, starts.astype(np.int64) + self.lo, ends.astype(np.int64) + self.lo, valid
        )


Pairs = tuple[np.ndarray, np.ndarray]


def _delimited(buf: _Bytes, elig: np.ndarray) -> tuple[Pairs, Pairs]:
    """One pass over the bytes: the string literals (quote pairs) and the tuples (parenthesis
    pairs outside strings; each "(" must close before the next opens: flat tuples). A cell
    holding a byte tier 1 leaves to tier 2, or delimiters that do not pair, is not eligible."""
    found = _delimiters(buf.b, buf.itype)
    kind = buf.b[found]
    elig[buf.cell_of(found[(kind != ord("'")) & (kind != ord("(")) & (kind != ord(")"))])] = False
    q = found[kind == ord("'")]
    opens, closes = _pairs(q, None, buf.cell_of(q), elig)
    del q
    par = found[(kind == ord("(")) | (kind == ord(")"))]
    del found, kind
    outside = np.searchsorted(opens, par, side="right") == np.searchsorted(closes, par)
    par = par[outside]
    lpar, rpar = _pairs(par, buf.b[par] == ord("("), buf.cell_of(par), elig)
    return (opens, closes), (lpar, rpar)


@dataclass
class _Tokens:
    """Tokens in buffer order: start, end (exclusive), code (``_B_*`` / ``_T_*``), cell."""

    pos: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    cell: np.ndarray

    def take(self, keep: np.ndarray) -> _Tokens:
        return _Tokens(self.pos[keep], self.end[keep], self.kind[keep], self.cell[keep])


def _tokens(buf: _Bytes, strings: Pairs, tuples: Pairs, elig: np.ndarray) -> _Tokens:
    """Token starts and codes (:func:`_classify`) and their ends: after a string's closing
    quote, a tuple's ")", a word's last byte."""
    tpos, tk, wend = _classify(buf.b, buf.offs, strings, tuples, buf.itype)
    tcell = buf.cell_of(tpos)
    elig[tcell[tk == _B_BAD]] = False
    elig[tcell[(tk == _B_LPAR) | (tk == _B_RPAR)]] = False  # a paren of an ineligible cell
    tend = tpos + 1
    (opens, closes), (lpar, rpar) = strings, tuples
    i = np.flatnonzero(tk == _T_STR)
    tend[i] = closes[np.searchsorted(opens, tpos[i])] + 1
    i = np.flatnonzero(tk == _T_TUP)
    tend[i] = rpar[np.searchsorted(lpar, tpos[i])] + 1
    tend[np.flatnonzero(tk == _B_WORD)] = wend
    return _Tokens(tpos, tend, tk, tcell)


def _words(buf: _Bytes, tok: _Tokens, elig: np.ndarray) -> None:
    """Words: ``set`` (of ``set()``) or an integer; a cell with any other word is tier 2's."""
    iw = np.flatnonzero(tok.kind == _B_WORD)
    if not len(iw):
        return
    b = buf.b
    ws, we = tok.pos[iw], tok.end[iw]
    last = len(b) - 1
    is_set = (
        (we - ws == 3)
        & (b[ws] == ord("s"))
        & (b[np.minimum(ws + 1, last)] == ord("e"))
        & (b[np.minimum(ws + 2, last)] == ord("t"))
    )
    words = buf.spans(ws, we)
    is_int = pc.match_substring_regex(words, _INT).to_numpy(zero_copy_only=False)
    del words
    tok.kind[iw] = np.where(is_set, _T_SET, np.where(is_int, _T_NUM, _B_BAD))
    elig[tok.cell[iw][~(is_set | is_int)]] = False


def _empty_sets(tok: _Tokens, elig: np.ndarray) -> np.ndarray:
    """``set()``: the word ``set`` immediately followed by the empty tuple becomes one token;
    returns the tokens to drop (those empty tuples)."""
    tk, tpos, tend, tcell = tok.kind, tok.pos, tok.end, tok.cell
    iset = np.flatnonzero(tk == _T_SET)
    drop = np.zeros(len(tk), dtype=bool)
    if len(iset):
        nxt = np.minimum(iset + 1, len(tk) - 1)
        good = (
            (iset + 1 < len(tk))
            & (tk[nxt] == _T_TUP)
            & (tpos[nxt] == tend[iset])
            & (tend[nxt] == tpos[nxt] + 2)
            & (tcell[nxt] == tcell[iset])
        )
        elig[tcell[iset[~good]]] = False
        iset = iset[good]
        tk[iset] = _T_EMPTYSET
        tend[iset] = tend[iset + 1]
        drop[iset + 1] = True
    return drop


def _canonical_tuples(buf: _Bytes, tok: _Tokens, drop: np.ndarray, elig: np.ndarray) -> None:
    """Tuples only in the canonical repr form (then the text is already ``str(key)``)."""
    itup = np.flatnonzero((tok.kind == _T_TUP) & ~drop)
    if len(itup):
        tup = buf.spans(tok.pos[itup], tok.end[itup])
        canon = pc.match_substring_regex(tup, _CANON_TUPLE).to_numpy(zero_copy_only=False)
        del tup
        elig[tok.cell[itup[~canon]]] = False


def _grammar(tok: _Tokens, shape: str, elig: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The grammar of the shape, exactly as tier 2 checks it (a separator before and after each
    cell). Returns each token's kind (``K_*``) and nesting depth."""
    kinds = _TO_KIND[tok.kind]
    tcell = tok.cell
    elig[tcell[kinds == K_BAD]] = False
    step = (kinds == K_OPEN).astype(np.int32) - (kinds == K_CLOSE).astype(np.int32)
    before = np.cumsum(step, dtype=np.int64) - step
    nt = len(kinds)
    first = np.ones(nt, dtype=bool)
    first[1:] = tcell[1:] != tcell[:-1]
    last = np.ones(nt, dtype=bool)
    last[:-1] = first[1:]
    depth = before - before[first][np.cumsum(first) - 1] if nt else before
    del before, step
    sym = kinds.astype(np.int16) * 8 + np.clip(depth, 0, 7).astype(np.int16)
    prev = np.empty_like(sym)
    if nt:
        prev[1:] = sym[:-1]
    prev[first] = _SEP0
    table = _TABLES[shape]
    elig[tcell[~table[prev + 1, sym + 1]]] = False
    elig[tcell[last][~table[sym[last] + 1, _SEP0 + 1]]] = False
    del prev, sym, first, last
    if shape == "dict_int":
        elig &= _pairs_ok(kinds, depth, tcell, n)
    return kinds, depth


def _items(
    buf: _Bytes,
    tok: _Tokens,
    kinds: np.ndarray,
    depth: np.ndarray,
    shape: str,
    elig: np.ndarray,
) -> tuple[np.ndarray, pa.Array, pa.Array, np.ndarray]:
    """The items of the eligible cells, in token order: cell, key text, value, section."""
    tpos, tend, tcell = tok.pos, tok.end, tok.cell
    item = ((kinds == K_STR) | (kinds == K_TUP) | (kinds == K_NUM)) & elig[tcell]
    strk = (kinds == K_STR).astype(np.int64)

    def texts(sel: np.ndarray) -> pa.Array:  # without the quotes of a string
        return buf.spans(tpos[sel] + strk[sel], tend[sel] - strk[sel])

    if shape == "deps":
        sel = np.flatnonzero(item & ((depth == 1) | (depth == 2)))
        is_key = depth[sel] == 1
        # each dependency's owner: the last key before it, as a position among the keys
        kpos = np.cumsum(is_key) - 1
        dep = np.flatnonzero(~is_key)
        owner = kpos[dep]
        has_dep = np.zeros(int(is_key.sum()), dtype=bool)
        has_dep[owner] = True
        keys = texts(sel[is_key])  # every key once; the dependencies straight from the buffer
        lone = np.flatnonzero(~has_dep)
        cells = np.concatenate([tcell[sel[dep]], tcell[sel[is_key][lone]]])
        key = keys.take(pa.array(np.concatenate([owner, lone])))
        # values: the dependencies, then a null (an empty range at the end) per lone key
        d = sel[dep]
        end = buf.hi - buf.lo
        vs = np.concatenate([tpos[d] + strk[d], np.full(len(lone), end)])
        ve = np.concatenate([tend[d] - strk[d], np.full(len(lone), end)])
        value = buf.spans(vs, ve, np.r_[np.ones(len(d), bool), np.zeros(len(lone), bool)])
        section = np.r_[np.zeros(len(dep), np.int8), np.ones(len(lone), np.int8)]
    elif shape == "set":
        sel = np.flatnonzero(item & (depth == 1))
        cells = tcell[sel]
        key = texts(sel)
        value = pa.nulls(len(sel), type=pa.large_string())
        section = np.zeros(len(sel), np.int8)
    else:
        after_colon = np.zeros(len(kinds), dtype=bool)
        after_colon[1:] = kinds[:-1] == K_COLON
        ki = np.flatnonzero(item & (depth == 1) & ~after_colon)
        vi = np.flatnonzero(item & (depth == 1) & after_colon)
        cells = tcell[ki]
        key = texts(ki)
        value = pc.cast(texts(vi), pa.float64())
        section = np.zeros(len(ki), np.int8)
    return cells.astype(np.int64), key, value, section


def _grammar_table(allowed: set[tuple[int, int]]) -> np.ndarray:
    table = np.zeros((81, 81), dtype=bool)
    for a, b in allowed:
        table[a + 1, b + 1] = True
    return table


_TABLES = {k: _grammar_table(g) for k, g in _GRAMMARS.items()}


# ----------------------------------------------------------------------------- public


def _order(cell: np.ndarray, section: np.ndarray, by_cell: bool) -> np.ndarray:
    """The row order tier 2 alone would give the whole column.

    Without a cell read by literal_eval: dependency edges (or plain items) of all cells, then keys
    without dependencies; with one: everything by cell. Ties keep token order.
    """
    if by_cell:
        return np.lexsort((section, cell))
    return np.lexsort((cell, section))


def _as_large_string(cells: pa.Array | pa.ChunkedArray | pd.Series) -> pa.LargeStringArray:
    if isinstance(cells, pd.Series):
        cells = pa.array(cells.fillna("").astype(str).tolist(), type=pa.large_string())
    if pa.types.is_dictionary(cells.type):
        cells = cells.cast(pa.string())
    if not pa.types.is_large_string(cells.type):
        cells = cells.cast(pa.large_string())
    if isinstance(cells, pa.ChunkedArray):
        cells = cells.combine_chunks() if cells.num_chunks else pa.array([], type=pa.large_string())
    if cells.null_count:
        cells = pc.fill_null(cells, "")
    return cells


def parse_column(cells: pa.Array | pa.ChunkedArray | pd.Series, shape: str) -> ParsedArrow:
    """Parse a column of literal cells of one shape, keeping the texts in Arrow.

    Args:
        cells: the raw cell texts (null/empty cells parse as empty).
        shape: ``"set"`` (set of keys), ``"dict_int"`` (key -> byte count) or ``"deps"``
            (key -> set of keys).

    Returns:
        The flat items (in the order of :func:`parse_cells`) and the cells that could not be parsed.
    """
    if shape not in _GRAMMARS:
        raise ValueError(f"unknown literal shape {shape!r}")
    arr = _as_large_string(cells)
    n = len(arr)
    vtype = pa.float64() if shape == "dict_int" else pa.large_string()
    if n == 0:
        return ParsedArrow(
            np.array([], np.int64),
            pa.array([], type=pa.large_string()),
            pa.array([], type=vtype),
            np.array([], np.int64),
            [],
        )
    accepted, cell, key, value, section = _scan(arr, shape)
    rest = np.flatnonzero(~accepted)
    by_cell = False
    bad = np.array([], np.int64)
    detail: list[str] = []
    if len(rest):
        sub = arr.take(pa.array(rest)).to_pandas()
        p2, sec2, by_cell = _parse_regex(sub, shape)
        bad, detail = rest[p2.bad_cells], p2.bad_detail
        cell = np.concatenate([cell, rest[p2.cell]])
        key = pa.concat_arrays([key, pa.array(p2.key, type=pa.large_string())])
        if shape == "dict_int":
            v2 = pa.array(np.asarray(p2.value, dtype="float64"), type=pa.float64())
        else:
            v2 = pa.array(p2.value, type=pa.large_string())
        value = pa.concat_arrays([value, v2])
        section = np.concatenate([section, sec2])
        order = _order(cell, section, by_cell)
        cell = cell[order]
        idx = pa.array(order)
        key, value = key.take(idx), value.take(idx)
    # else: tier 1's rows are already in that order (token order is cell order)
    return ParsedArrow(cell, key, value, bad.astype(np.int64), detail)


def parse_cells(cells: pd.Series, shape: str) -> Parsed:
    """Parse a column of literal cells of one shape.

    Args:
        cells: the raw cell texts (NA/empty cells parse as empty).
        shape: ``"set"`` (set of keys), ``"dict_int"`` (key -> byte count) or ``"deps"``
            (key -> set of keys).

    Returns:
        The flat items and the cells that could not be parsed.
    """
    p = parse_column(cells, shape)
    key = np.asarray(p.key.to_numpy(zero_copy_only=False), dtype=object)
    if shape == "dict_int":
        value = p.value.to_numpy(zero_copy_only=False).astype("float64")
    else:
        value = np.asarray(p.value.to_numpy(zero_copy_only=False), dtype=object)
    return Parsed(p.cell, key, value, p.bad_cells, p.bad_detail)
