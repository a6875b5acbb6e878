"""Safe, vectorised parsing of the Python-literal cells of the Mofka-Dask CSVs.

Input: a column of cells such as ``{'a': 50208}``, ``{('x', 1): 336, ('x', 2): 336}``,
``{'list-1'}`` or ``{'b': {'a', 'c'}, 'a': set()}``.
Output: flat, columnar tables (cell index, key, value / dependency).

Nothing here evaluates code. The fast path tokenises every cell of a column in one regular
expression pass over the joined text and checks the token sequence against the literal's grammar
with array operations, so a 100 MB dependency dict costs seconds, not the gigabytes an AST would.
Cells the fast path does not accept (escapes, nested tuples, odd spacing) fall back to
:func:`ast.literal_eval`, which only builds literals; a cell that is no literal of the expected shape
is reported as malformed with its row.

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
_TUPLE = rf"\(\s*(?:{_ATOM}\s*,\s*)*(?:{_ATOM}\s*)?\)"
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


def _key_text(tokens: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Normalise string / tuple literal tokens to ``str(key)``."""
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
    for i in slow:  # rare: escapes, double-quoted tuple members, floats, odd spacing
        out[i] = normalise_key(ast.literal_eval(tokens[i]))
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
    sym = kinds.astype(np.int16) * 8 + np.clip(depth, 0, 7)
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


def parse_cells(cells: pd.Series, shape: str) -> Parsed:
    """Parse a column of literal cells of one shape.

    Args:
        cells: the raw cell texts (NA/empty cells parse as empty).
        shape: ``"set"`` (set of keys), ``"dict_int"`` (key -> byte count) or ``"deps"``
            (key -> set of keys).

    Returns:
        The flat items and the cells that could not be parsed.
    """
    cells = cells.reset_index(drop=True)
    n = len(cells)
    if n == 0:
        e = np.array([], dtype=object)
        return Parsed(np.array([], dtype=np.int64), e, e, np.array([], dtype=np.int64), [])
    toks, kinds, cell = _tokenise(cells)
    depth = _depth_before(kinds, cell)
    ok = _grammar_ok(kinds, cell, n, _GRAMMARS[shape], depth)
    empty_cell = cells.isna().to_numpy() | (cells.astype(str).str.strip() == "").to_numpy()
    ok |= empty_cell

    if shape == "deps":
        is_key = np.isin(kinds, (K_STR, K_TUP, K_NUM)) & (depth == 1)
        is_dep = np.isin(kinds, (K_STR, K_TUP, K_NUM)) & (depth == 2)
        keep = (is_key | is_dep) & ok[cell]
        idx = np.flatnonzero(keep)
        text = _key_text(toks[idx], kinds[idx])
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
    elif shape == "set":
        is_key = np.isin(kinds, (K_STR, K_TUP, K_NUM)) & (depth == 1)
        keep = is_key & ok[cell]
        idx = np.flatnonzero(keep)
        out_cell = cell[idx]
        out_key = _key_text(toks[idx], kinds[idx])
        out_val = np.full(len(idx), None, dtype=object)
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
        out_key = _key_text(toks[kidx], kinds[kidx])
        vals = pd.to_numeric(pd.Series(toks[vidx], dtype=object), errors="coerce")
        out_val = vals.to_numpy(dtype="float64")

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
        order = np.argsort(out_cell, kind="stable")
        out_cell, out_key, out_val = out_cell[order], out_key[order], out_val[order]
    return Parsed(
        out_cell.astype(np.int64), out_key, out_val, np.array(still_bad, dtype=np.int64), details
    )
