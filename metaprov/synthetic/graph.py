"""The task graph: Dask keys (uuid-style strings and array-style tuples) and up to two
dependencies per task among the tasks that finished before it got ready.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.synthetic.csvtext import _fmt_ints, _take, _unique_hex
from metaprov.synthetic.schedule import _Schedule

# Dependencies end at least this long before the dependent becomes ready. It leaves room for the
# longest synthetic transfer (40 ms) and the message latencies, so every causal order holds.
_DEP_MARGIN = 0.06


# Rank windows among the finished candidates: the first dependency is one of the 16 most recently
# finished tasks, the second one of the 240 before them, so the two are always distinct.
_WIN1, _WIN2 = 16, 240


# (key stem, prefix as Dask's key_split reports it) for plain string keys (delayed-style, uuid).
_STRING_STEMS = (
    ("inc", "inc"),
    ("load", "load"),
    ("transform", "transform"),
    ("_dask_helper", "dask_helper"),
)
# Prefixes of tuple-key groups (array-style: ('<prefix>-<md5>', i)).
_TUPLE_PREFIXES = ("array", "getitem", "mul", "block-info")
_TUPLE_GROUP_SIZE = 1000


def _finished_before(
    by_group: np.ndarray, bounds: np.ndarray, end: np.ndarray, target: np.ndarray, limit: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Tasks of a query's target group that ended before its limit.

    ``by_group`` lists task ids sorted by (group, end); group ``g`` spans
    ``by_group[bounds[g]:bounds[g + 1]]``. Returns, per query, the offset of its group in
    ``by_group`` and how many of the group's tasks ended before ``limit`` (the candidates are the
    first that many, most recent last).
    """
    count = np.zeros(len(target), dtype=np.int64)
    order = np.argsort(target, kind="stable")
    qb = np.searchsorted(target[order], np.arange(len(bounds)))
    for grp in range(len(bounds) - 1):
        q = order[qb[grp] : qb[grp + 1]]
        if len(q):
            count[q] = np.searchsorted(
                end[by_group[bounds[grp] : bounds[grp + 1]]], limit[q], side="left"
            )
    return bounds[target], count


def _keys(
    rng: np.random.Generator, n: int, tuple_key_fraction: float
) -> tuple[pa.Array, np.ndarray, np.ndarray, pa.Array, pa.Array, int]:
    """Dask keys: uuid-style strings ``'<stem>-<uuid4>'`` and array-style tuples
    ``('<prefix>-<md5>', i)`` in groups of up to 1000 chunks, mixed at random."""
    is_tuple = rng.random(n) < tuple_key_fraction
    n_tuple = int(is_tuple.sum())
    n_str = n - n_tuple
    stem_code = rng.integers(0, len(_STRING_STEMS), n_str)
    n_groups = -(-n_tuple // _TUPLE_GROUP_SIZE)
    grp_prefix = rng.integers(0, len(_TUPLE_PREFIXES), n_groups)
    group_hex = _unique_hex(rng, n_groups, uuid=False)
    stems = pa.array([s for s, _ in _STRING_STEMS], pa.string())
    str_keys = pc.binary_join_element_wise(
        _take(stems, stem_code), _unique_hex(rng, n_str, uuid=True), "-"
    )
    tprefixes = pa.array(list(_TUPLE_PREFIXES), pa.string())
    group_names_t = pc.binary_join_element_wise(_take(tprefixes, grp_prefix), group_hex, "-")
    tk_idx = np.arange(n_tuple)
    tgroup = tk_idx // _TUPLE_GROUP_SIZE
    tuple_csv = pc.binary_join_element_wise(
        "\"('", _take(group_names_t, tgroup), "', ", _fmt_ints(tk_idx % _TUPLE_GROUP_SIZE), ')"', ""
    )
    pos = np.empty(n, dtype=np.int64)
    pos[~is_tuple] = np.arange(n_str)
    pos[is_tuple] = n_str + tk_idx
    key_csv = pa.concat_arrays([str_keys, tuple_csv]).take(pa.array(pos))
    del str_keys, tuple_csv, pos
    prefix_names = pa.array([p for _, p in _STRING_STEMS] + list(_TUPLE_PREFIXES), pa.string())
    prefix_code = np.empty(n, dtype=np.int8)
    prefix_code[~is_tuple] = stem_code
    prefix_code[is_tuple] = len(_STRING_STEMS) + grp_prefix[tgroup]
    # Group of a string key is its prefix (key_split_group); of a tuple key, its first element.
    group_names = pa.concat_arrays(
        [pa.array([p for _, p in _STRING_STEMS], pa.string()), group_names_t]
    )
    group_code = np.empty(n, dtype=np.int32)
    group_code[~is_tuple] = stem_code
    group_code[is_tuple] = len(_STRING_STEMS) + tgroup
    return key_csv, prefix_code, group_code, prefix_names, group_names, n_tuple


def _dependencies(
    rng: np.random.Generator,
    sch: _Schedule,
    workers: int,
    threads: int,
    graphs: int,
    transfer_fraction: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Up to two dependencies per task (mean 1.3 edges), among the tasks of the same graph that
    finished before it got ready: on its own worker, except for the tasks chosen to fetch one
    dependency from another worker (a transfer)."""
    n = len(sch.start)
    first_start = sch.start.copy()
    first_start[sch.retry_task] = sch.retry_start
    ready_limit = first_start - 3e-4 - _DEP_MARGIN
    del first_start
    worker_of = sch.thread // threads
    gw = sch.graph_of.astype(np.int64) * workers + worker_of
    by_gw = np.lexsort((sch.end, gw))
    bounds = np.searchsorted(gw[by_gw], np.arange(graphs * workers + 1))
    n_deps = rng.choice(3, size=n, p=[0.2, 0.3, 0.5]).astype(np.int8)
    base, c = _finished_before(by_gw, bounds, sch.end, gw, ready_limit)
    dep1 = np.full(n, -1, dtype=np.int64)
    dep2 = np.full(n, -1, dtype=np.int64)
    ok = (n_deps >= 1) & (c >= 1)
    r = c - 1 - np.floor(rng.random(n) * np.minimum(c, _WIN1)).astype(np.int64)
    dep1[ok] = by_gw[(base + r)[ok]]
    ok = (n_deps >= 2) & (c > _WIN1)
    r = c - 1 - _WIN1 - np.floor(rng.random(n) * np.clip(c - _WIN1, 1, _WIN2)).astype(np.int64)
    dep2[ok] = by_gw[(base + r)[ok]]
    del gw, base, c, r, ok, n_deps
    transfer = np.zeros(n, dtype=bool)
    remote_w = (worker_of + 1 + rng.integers(0, max(workers - 1, 1), n)) % workers
    remote_u = rng.random(n)
    if workers > 1 and transfer_fraction > 0:
        target = sch.graph_of.astype(np.int64) * workers + remote_w
        rbase, rc = _finished_before(by_gw, bounds, sch.end, target, ready_limit)
        is_retried = np.zeros(n, dtype=bool)
        is_retried[sch.retry_task] = True
        eligible = np.flatnonzero((dep1 >= 0) & (rc >= 1) & ~is_retried)
        k = min(int(round(transfer_fraction * n)), len(eligible))
        chosen = np.sort(rng.choice(eligible, size=k, replace=False)) if k else eligible[:0]
        rr = rc[chosen] - 1 - np.floor(remote_u[chosen] * np.minimum(rc[chosen], _WIN1))
        transfer[chosen] = True
        dep1[chosen] = by_gw[rbase[chosen] + rr.astype(np.int64)]
    return dep1, dep2, transfer


def _n_dependents(dep1: np.ndarray, dep2: np.ndarray) -> np.ndarray:
    n = len(dep1)
    return np.bincount(dep1[dep1 >= 0], minlength=n) + np.bincount(dep2[dep2 >= 0], minlength=n)
