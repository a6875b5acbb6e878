"""Mofka-Dask CSV files (and the metaprov capture's output) -> RunRecords tables.

Input: the six CSV files of a run directory (any subset): ``scheduler_transition.csv``,
``worker_transition.csv``, ``worker_transfer.csv``, ``graph.csv``, ``worker.csv``, ``client.csv``.
Output: the ``tasks``, ``executions``, ``transitions``, ``transfers``, ``dependencies``,
``graphs``, ``workers``, ``clients`` and ``threads`` tables of :class:`RunRecords`.

All work is columnar: keys are factorised once and every per-task figure is a grouped reduction.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.api.types import union_categoricals

from metaprov.ingest.csvread import CsvTable, read_csv
from metaprov.ingest.literals import parse_cells
from metaprov.records import Accounting, RunRecords, conform
from metaprov.timeutil import epoch_to_utc

CSV_FILES = (
    "scheduler_transition.csv",
    "worker_transition.csv",
    "worker_transfer.csv",
    "graph.csv",
    "worker.csv",
    "client.csv",
)

# States an execution is "in" on a worker until it ends (secede, cancel and resume keep it running).
_RUNNING = ("executing", "long-running", "cancelled", "resumed")

SPECS: dict[str, dict] = {
    "scheduler_transition.csv": dict(
        required=["key", "start", "finish", "time"],
        optional=[
            "thread",
            "worker",
            "prefix",
            "group",
            "stimulus_id",
            "called_from",
            "begins",
            "ends",
            "duration",
            "size",
        ],
        dictionary=(
            "key",
            "worker",
            "prefix",
            "group",
            "start",
            "finish",
            "called_from",
            "stimulus_id",
        ),
    ),
    "worker_transition.csv": dict(
        required=["key", "start", "finish", "called_from", "time"],
        optional=[],
        extended=("stimulus_id", "thread"),
        dictionary=("key", "start", "finish", "called_from", "stimulus_id"),
    ),
    "worker_transfer.csv": dict(
        required=["keys", "who", "type", "called_from"],
        optional=[
            "start",
            "stop",
            "middle",
            "duration",
            "total",
            "bandwidth",
            "time",
            "compressed",
        ],
        dictionary=("who", "type", "called_from"),
    ),
    "graph.csv": dict(
        required=["client", "keys", "dependencies"], optional=["time"], dictionary=("client",)
    ),
    "worker.csv": dict(
        required=["worker", "action"],
        optional=["time"],
        extended=("stimulus_id",),
        dictionary=("worker", "action"),
    ),
    "client.csv": dict(
        required=["client", "action"], optional=["time"], dictionary=("client", "action")
    ),
}


def _cat(s: pd.Series) -> pd.Series:
    """Text column as Categorical (dictionary-encoded columns already are)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        return s
    return s.astype("category")


def _text(s: pd.Series) -> pd.Series:
    """Any text-like column -> pandas ``str``."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype(object)
    return s.astype("str")


def _float(ct: CsvTable, col: str, acct: Accounting) -> np.ndarray:
    """Parse a numeric column; unparseable cells become NaN and are reported (the row is kept)."""
    raw = ct.arrow(col)
    if pa.types.is_dictionary(raw.type):
        raw = raw.cast(pa.string())
    try:
        val = pc.cast(raw, pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        val = pd.to_numeric(ct.get(col).astype(object), errors="coerce").to_numpy(
            dtype="float64", na_value=np.nan
        )
    present = raw.is_valid().to_numpy()
    bad = present & ~np.isfinite(val)
    if bad.any():
        idx = np.flatnonzero(bad)
        acct.warn(
            ct.name,
            f"unparseable number in column {col!r} (value treated as absent) x{len(idx)}",
            line=int(ct.lines[idx[0]]),
            column=col,
            detail=str(raw[int(idx[0])].as_py())[:80],
        )
        val = val.copy()
        val[bad] = np.nan
    return val


def _time(ct: CsvTable, col: str, acct: Accounting) -> pd.Series:
    return epoch_to_utc(_float(ct, col, acct))


def _uint64(ct: CsvTable, col: str, acct: Accounting) -> pd.Series:
    """Exact 64-bit thread ids: text -> uint64 without passing through float."""
    arr = ct.arrow(col)
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string())
    # "123.0" appears when a writer let pandas turn the column into float: accept the exact form.
    arr = pc.replace_substring_regex(arr, r"\.0$", "")
    ok = pc.fill_null(pc.match_substring_regex(arr, r"^\d{1,20}$"), False)
    good = pc.if_else(ok, arr, pa.scalar(None, pa.string()))
    try:
        out = pc.cast(good, pa.uint64())
    except pa.ArrowInvalid:  # a 20-digit value above 2**64 - 1
        ints = [None if x is None or int(x) >= 2**64 else int(x) for x in good.to_pylist()]
        out = pa.chunked_array([pa.array(ints, type=pa.uint64())])
        ok = pc.and_(ok, out.is_valid())
    badmask = pc.and_(pc.invert(ok), arr.is_valid()).to_numpy()
    if badmask.any():
        idx = np.flatnonzero(badmask)
        acct.warn(
            ct.name,
            f"not a thread id in column {col!r} (treated as absent) x{len(idx)}",
            line=int(ct.lines[idx[0]]),
            column=col,
            detail=str(ct.arrow(col)[int(idx[0])].as_py())[:80],
        )
    values = pc.fill_null(out, 0).to_numpy().astype(np.uint64)
    mask = out.is_null().to_numpy()
    return pd.Series(pd.arrays.IntegerArray(values, mask))


def _read(run: Path, name: str, acct: Accounting) -> CsvTable | None:
    path = run / name
    if not path.exists():
        acct.missing(name)
        return None
    if not path.is_file():
        acct.missing(name)
        acct.warn(name, "not a regular file")
        return None
    return read_csv(path, acct=acct, **SPECS[name])


def _drop_null_keys(ct: CsvTable, col: str, acct: Accounting) -> CsvTable:
    null = ct.arrow(col).is_null().to_numpy()
    if null.any():
        acct.drop(ct.name, f"empty {col!r} cell", ct.lines[null], column=col)
        ct = ct.take(~null)
    return ct


# ----------------------------------------------------------------------------- per file


def read_transitions(ct: CsvTable, observer: str, acct: Accounting) -> pd.DataFrame:
    """scheduler_transition.csv / worker_transition.csv -> one frame (text as Categorical)."""
    ct = _drop_null_keys(ct, "key", acct)
    df = pd.DataFrame(
        {
            "key": _cat(ct.get("key")),
            "observer": pd.Categorical([observer] * len(ct)) if len(ct) else pd.Categorical([]),
            "address": _cat(ct.get("called_from")),
            "from_state": _cat(ct.get("start")),
            "to_state": _cat(ct.get("finish")),
            "time": _time(ct, "time", acct),
            "stimulus_id": _cat(ct.get("stimulus_id")),
            "line": ct.lines,
            "thread": _uint64(ct, "thread", acct),
        }
    )
    if observer == "scheduler":
        df["worker"] = _cat(ct.get("worker"))
        df["prefix"] = _cat(ct.get("prefix"))
        df["group"] = _cat(ct.get("group"))
        df["begins"] = _time(ct, "begins", acct)
        df["ends"] = _time(ct, "ends", acct)
        df["size"] = _float(ct, "size", acct)
    return df


def _hash_keys(keys: np.ndarray) -> np.ndarray:
    return pd.util.hash_array(np.asarray(keys, dtype=object), categorize=False)


def read_transfers(ct: CsvTable, acct: Accounting) -> pd.DataFrame:
    """De-duplicate re-sent rows, match the two sides of each transfer, one row per key moved."""
    name = ct.name
    content = [
        c
        for c in (
            "start",
            "stop",
            "middle",
            "duration",
            "keys",
            "total",
            "bandwidth",
            "who",
            "type",
            "called_from",
            "compressed",
        )
        if c in ct.columns
    ]
    frame = pd.DataFrame({c: ct.get(c) for c in content})
    dup = frame.duplicated(keep="first").to_numpy()
    if dup.any():
        acct.drop(name, "duplicate (re-sent log entry; identical but for 'time')", ct.lines[dup])
        ct = ct.take(~dup)
    typ = _text(ct.get("type"))
    known_type = typ.isin(["incoming_transfer", "outgoing_transfer"]).to_numpy()
    if (~known_type).any():
        acct.drop(
            name,
            "unknown transfer type",
            ct.lines[~known_type],
            column="type",
            detail=typ[~known_type].astype(str).tolist(),
        )
        ct = ct.take(known_type)
        typ = typ[known_type].reset_index(drop=True)
    parsed = parse_cells(ct.get("keys"), "dict_int")
    if len(parsed.bad_cells):
        acct.drop(
            name,
            "malformed 'keys' literal",
            ct.lines[parsed.bad_cells],
            column="keys",
            detail=parsed.bad_detail,
        )
    n = len(ct)
    good = np.ones(n, dtype=bool)
    good[parsed.bad_cells] = False
    incoming = (typ == "incoming_transfer").to_numpy()
    logger = _text(ct.get("called_from")).fillna("").to_numpy(dtype=object)
    peer = _text(ct.get("who")).fillna("").to_numpy(dtype=object)
    # The key set of a row, order-independent, to pair an incoming side with its outgoing side:
    # a sum of 64-bit key hashes and the key count (collisions are negligible at 2**-64).
    items = pd.DataFrame({"cell": parsed.cell, "key": parsed.key, "nbytes": parsed.value})
    sig = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.add.at(sig, parsed.cell, _hash_keys(parsed.key))
    nkeys = np.bincount(parsed.cell, minlength=n)
    rows = pd.DataFrame(
        {
            "row": np.arange(n),
            "incoming": incoming,
            "source": np.where(incoming, peer, logger),
            "destination": np.where(incoming, logger, peer),
            "sig": sig,
            "n_keys": nkeys,
            "start": _time(ct, "start", acct),
            "stop": _time(ct, "stop", acct),
            "duration": _float(ct, "duration", acct),
            "total": _float(ct, "total", acct),
            "bandwidth": _float(ct, "bandwidth", acct),
            "compressed": _float(ct, "compressed", acct),
        }
    )[good]
    match = ["source", "destination", "sig", "n_keys"]
    rows = rows.sort_values([*match, "start", "row"], kind="stable")
    rows["rank"] = rows.groupby(["incoming", *match], sort=False).cumcount()
    m = rows[rows["incoming"]].merge(
        rows[~rows["incoming"]], on=[*match, "rank"], how="outer", suffixes=("_in", "_out")
    )
    has_in = m["row_in"].notna()
    has_out = m["row_out"].notna()

    def pick(col: str) -> pd.Series:
        return m[f"{col}_in"].where(has_in, m[f"{col}_out"])

    tr = pd.DataFrame(
        {
            "row": pick("row").astype("int64"),
            "source": m["source"].replace("", np.nan),
            "destination": m["destination"].replace("", np.nan),
            "start": pick("start"),
            "stop": pick("stop"),
            "duration": pick("duration"),
            "total": pick("total"),
            "bandwidth": pick("bandwidth"),
            "compressed": m["compressed_out"].where(has_out, m["compressed_in"]),
            "n_keys": m["n_keys"],
            "logged_by": np.where(
                has_in & has_out, "both", np.where(has_in, "incoming", "outgoing")
            ),
        }
    )
    tr = tr.sort_values(
        ["start", "source", "destination", "row"], kind="stable", na_position="last"
    ).reset_index(drop=True)
    tr["transfer"] = np.arange(len(tr), dtype=np.int64)
    pos = np.full(n, -1, dtype=np.int64)
    pos[tr["row"].to_numpy()] = np.arange(len(tr))
    it = pos[items["cell"].to_numpy()]
    keep = it >= 0
    out = tr.drop(columns=["row"]).iloc[it[keep]].reset_index(drop=True)
    out["key"] = items["key"].to_numpy()[keep]
    out["nbytes"] = np.rint(items["nbytes"].to_numpy()[keep])
    out = out.sort_values(["transfer", "key"], kind="stable")
    for col in ("nbytes", "total", "compressed"):
        out[col] = out[col].round().astype("Int64")
    return conform("transfers", out)


def read_graphs(ct: CsvTable, acct: Accounting) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """graph.csv -> (graphs, dependencies, keys per graph with a 'wanted' flag)."""
    name = ct.name
    deps = parse_cells(ct.get("dependencies"), "deps")
    wanted = parse_cells(ct.get("keys"), "set")
    if len(deps.bad_cells):
        acct.drop(
            name,
            "malformed 'dependencies' literal",
            ct.lines[deps.bad_cells],
            column="dependencies",
            detail=deps.bad_detail,
        )
    only_keys_bad = np.setdiff1d(wanted.bad_cells, deps.bad_cells)
    if len(only_keys_bad):
        pos = np.searchsorted(wanted.bad_cells, only_keys_bad)
        acct.drop(
            name,
            "malformed 'keys' literal",
            ct.lines[only_keys_bad],
            column="keys",
            detail=[wanted.bad_detail[i] for i in pos],
        )
    n = len(ct)
    good = np.ones(n, dtype=bool)
    good[np.union1d(deps.bad_cells, wanted.bad_cells)] = False
    dep_ok = good[deps.cell]
    want_ok = good[wanted.cell]
    dkey, dval, dcell = deps.key[dep_ok], deps.value[dep_ok], deps.cell[dep_ok]
    has = pd.notna(dval)
    edges = pd.DataFrame({"graph": dcell[has], "key": dkey[has], "dependency": dval[has]})
    edges = edges.drop_duplicates().sort_values(["graph", "key", "dependency"], kind="stable")
    graph_keys = pd.concat(
        [
            pd.DataFrame({"graph": dcell, "key": dkey, "wanted": False}),
            pd.DataFrame(
                {"graph": wanted.cell[want_ok], "key": wanted.key[want_ok], "wanted": True}
            ),
        ],
        ignore_index=True,
    )
    per_graph = graph_keys.drop_duplicates(["graph", "key"])
    graphs = pd.DataFrame(
        {
            "graph": np.arange(n),
            "client": _text(ct.get("client")),
            "time": _time(ct, "time", acct),
            "n_wanted": np.bincount(wanted.cell[want_ok], minlength=n),
            "n_tasks": np.bincount(per_graph["graph"].to_numpy(dtype=np.int64), minlength=n),
            "n_edges": np.bincount(edges["graph"].to_numpy(dtype=np.int64), minlength=n),
        }
    )[good]
    return conform("graphs", graphs), conform("dependencies", edges), graph_keys


def read_membership(ct: CsvTable, col: str, acct: Accounting) -> pd.DataFrame:
    """worker.csv / client.csv -> one row per id with first add and last remove time."""
    ct = _drop_null_keys(ct, col, acct)
    action = _text(ct.get("action"))
    known = action.isin(["add", "remove"]).to_numpy()
    if (~known).any():
        acct.drop(
            ct.name,
            "unknown action",
            ct.lines[~known],
            column="action",
            detail=action[~known].astype(str).tolist(),
        )
    df = pd.DataFrame(
        {"id": _text(ct.get(col)), "action": action, "time": _time(ct, "time", acct)}
    )[known]
    added = df[df["action"] == "add"].groupby("id")["time"].min()
    removed = df[df["action"] == "remove"].groupby("id")["time"].max()
    ids = pd.Index(sorted(set(df["id"])))
    return pd.DataFrame(
        {"id": ids, "added": added.reindex(ids).array, "removed": removed.reindex(ids).array}
    )


# ----------------------------------------------------------------------------- consolidation


def _key_index(*sources: object) -> pd.Index:
    """Sorted union of every key text (Categorical categories or arrays of str)."""
    parts = []
    for src in sources:
        if src is None:
            continue
        if isinstance(src, pd.Series) and isinstance(src.dtype, pd.CategoricalDtype):
            src = src.cat.categories.to_numpy(dtype=object)
        arr = np.asarray(src, dtype=object)
        if len(arr):
            parts.append(pa.array(arr, type=pa.string(), from_pandas=True))
    if not parts:
        return pd.Index([], dtype="str")
    uniq = pc.unique(pa.chunked_array(parts).combine_chunks().drop_null())
    uniq = uniq.take(pc.sort_indices(uniq))
    return pd.Index(uniq.to_numpy(zero_copy_only=False), dtype="str")


def _codes(values: object, index: pd.Index) -> np.ndarray:
    """Positions of ``values`` in ``index`` (-1 for NA)."""
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        cat = values.cat
        mapping = index.get_indexer(cat.categories)
        c = cat.codes.to_numpy()
        return np.where(c >= 0, mapping[c], -1)
    return index.get_indexer(pd.Index(np.asarray(values, dtype=object)))


def _us(t: pd.Series) -> np.ndarray:
    """UTC times as int64 µs with NaT sorting last."""
    v = t.to_numpy(dtype="datetime64[us]").view("int64").copy()
    v[v == np.iinfo(np.int64).min] = np.iinfo(np.int64).max
    return v


def _last_per_key(codes: np.ndarray, n: int, *order: np.ndarray) -> np.ndarray:
    """Row index of the last row of each key when rows are ordered by ``order`` (-1: none)."""
    out = np.full(n, -1, dtype=np.int64)
    ok = codes >= 0
    if not ok.any():
        return out
    rows = np.flatnonzero(ok)
    srt = (
        rows[np.lexsort(tuple(o[rows] for o in reversed(order)) + (codes[rows],))]
        if order
        else rows[np.argsort(codes[rows], kind="stable")]
    )
    sc = codes[srt]
    ends = np.r_[sc[1:] != sc[:-1], True]
    out[sc[ends]] = srt[ends]
    return out


def _take(s: pd.Series, idx: np.ndarray) -> pd.Series:
    """``s`` at positions ``idx``; -1 gives NA. Keeps extension dtypes (UInt64, UTC times)."""
    if len(s) == 0:
        dtype = "str" if isinstance(s.dtype, pd.CategoricalDtype) else s.dtype
        return pd.Series(pd.array([None] * len(idx), dtype=dtype))
    res = s.take(np.where(idx >= 0, idx, 0)).reset_index(drop=True)
    if isinstance(res.dtype, pd.CategoricalDtype):
        res = _text(res)
    return res.where(pd.Series(idx >= 0))


def _executions(sched: pd.DataFrame, work: pd.DataFrame) -> pd.DataFrame:
    """One row per execution attempt: worker-side windows, else the scheduler's startstops."""
    frames = []
    ran_on_workers = np.array([], dtype=object)
    if len(work):
        is_start = (work["to_state"] == "executing").to_numpy() & ~work["from_state"].isin(
            _RUNNING
        ).to_numpy()
        is_end = (
            work["from_state"].isin(_RUNNING).to_numpy()
            & ~work["to_state"].isin(_RUNNING).to_numpy()
        )
        ev = np.flatnonzero(is_start | is_end)
        kc = work["key"].cat.codes.to_numpy()[ev]
        ac = work["address"].cat.codes.to_numpy()[ev]
        tm = _us(work["time"])[ev]
        ln = work["line"].to_numpy()[ev]
        order = np.lexsort((ln, tm, ac, kc))
        ev, kc, ac = ev[order], kc[order], ac[order]
        st = is_start[ev]
        nxt_ok = np.r_[(~st[1:]) & (kc[1:] == kc[:-1]) & (ac[1:] == ac[:-1]), False]
        starts = ev[st]
        ends = np.where(nxt_ok[st], np.r_[ev[1:], -1][st], -1)
        frames.append(
            pd.DataFrame(
                {
                    "key": _text(work["key"].take(starts)).to_numpy(),
                    "worker": _text(work["address"].take(starts)).to_numpy(),
                    "start": work["time"].take(starts).array,
                    "end": _take(work["time"], ends).array,
                    "outcome": _take(work["to_state"], ends).to_numpy(),
                    "thread": work["thread"].take(starts).array,
                    "time_source": "worker",
                }
            )
        )
        ran_on_workers = frames[0]["key"].unique()
    if len(sched):
        rows = (sched["from_state"] == "processing").to_numpy() & (
            sched["thread"].notna().to_numpy() | sched["begins"].notna().to_numpy()
        )
        rows &= ~sched["key"].isin(ran_on_workers).to_numpy()
        idx = np.flatnonzero(rows)
        if len(idx):
            frames.append(
                pd.DataFrame(
                    {
                        "key": _text(sched["key"].take(idx)).to_numpy(),
                        "worker": _text(sched["worker"].take(idx)).to_numpy(),
                        "start": sched["begins"].take(idx).array,
                        "end": sched["ends"].take(idx).array,
                        "outcome": _text(sched["to_state"].take(idx)).to_numpy(),
                        "thread": sched["thread"].take(idx).array,
                        "time_source": "scheduler",
                    }
                )
            )
    if not frames:
        return conform("executions", pd.DataFrame())
    ex = pd.concat(frames, ignore_index=True)
    # The thread of a worker-side execution comes from the scheduler's row for the same key+worker.
    if len(sched) and ex["thread"].isna().any():
        thr = sched.loc[sched["thread"].notna(), ["key", "worker", "thread", "time"]]
        thr = thr.assign(key=_text(thr["key"]), worker=_text(thr["worker"]))
        thr = thr.sort_values("time", kind="stable").drop_duplicates(["key", "worker"], keep="last")
        ex = ex.merge(
            thr[["key", "worker", "thread"]].rename(columns={"thread": "sthread"}),
            on=["key", "worker"],
            how="left",
        )
        ex["thread"] = ex["thread"].fillna(ex["sthread"])
        ex = ex.drop(columns=["sthread"])
    ex = ex.sort_values(["key", "start", "worker"], kind="stable", na_position="last").reset_index(
        drop=True
    )
    ex["attempt"] = ex.groupby("key", sort=False).cumcount()
    return conform("executions", ex)


def _union_cat(frames: list[pd.DataFrame], cols: list[str]) -> pd.DataFrame:
    """Concatenate frames whose Categorical columns have different categories, staying Categorical."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=cols)
    if len(frames) == 1:
        return frames[0][cols].reset_index(drop=True)
    out = {}
    for c in cols:
        parts = [f[c] for f in frames]
        if isinstance(parts[0].dtype, pd.CategoricalDtype):
            out[c] = pd.Series(union_categoricals([pd.Categorical(p) for p in parts]))
        else:
            out[c] = pd.concat(parts, ignore_index=True)
    return pd.DataFrame(out)


def consolidate(
    records: RunRecords, sched: pd.DataFrame, work: pd.DataFrame, graph_keys: pd.DataFrame
) -> None:
    """Fill ``records.tasks``, ``executions``, ``transitions`` and ``threads`` (per-key reductions)."""
    tcols = ["key", "observer", "address", "from_state", "to_state", "time", "stimulus_id", "line"]
    trans = _union_cat([sched, work], tcols)
    if len(trans):
        order = np.lexsort(
            (
                trans["line"].to_numpy(),
                trans["observer"].astype(str).to_numpy()
                if len(trans) < 0
                else trans["observer"].cat.codes.to_numpy(),
                _us(trans["time"]),
            )
        )
        trans = trans.take(order).reset_index(drop=True)
    records.transitions = conform("transitions", trans)
    ex = _executions(sched, work)
    records.executions = ex

    keys = _key_index(
        sched["key"] if len(sched) else None,
        work["key"] if len(work) else None,
        graph_keys["key"].to_numpy() if len(graph_keys) else None,
        records.transfers["key"].to_numpy(),
        records.dependencies["dependency"].to_numpy(),
    )
    n = len(keys)
    tasks = pd.DataFrame({"key": keys})
    n_proc = np.zeros(n, dtype=np.int64)
    erred = np.zeros(n, dtype=bool)
    n_tr = np.zeros(n, dtype=np.int64)
    if len(sched):
        kc = _codes(sched["key"], keys)
        t_us, ln = _us(sched["time"]), sched["line"].to_numpy()
        has_prefix = sched["prefix"].notna().to_numpy()
        first_pg = _last_per_key(np.where(has_prefix, kc, -1), n, -t_us, -ln)
        last = _last_per_key(kc, n, t_us, ln)
        carries = (
            sched["thread"].notna().to_numpy()
            | sched["begins"].notna().to_numpy()
            | ~np.isnan(sched["size"].to_numpy())
        )
        fin = _last_per_key(np.where(carries, kc, -1), n, t_us, ln)
        tasks["prefix"] = _take(sched["prefix"], first_pg).array
        tasks["group"] = _take(sched["group"], first_pg).array
        tasks["state"] = _take(sched["to_state"], last).array
        tasks["sched_begins"] = _take(sched["begins"], fin).array
        tasks["sched_ends"] = _take(sched["ends"], fin).array
        tasks["nbytes"] = (
            pd.array(np.where(fin >= 0, sched["size"].to_numpy()[np.maximum(fin, 0)], np.nan))
            .round()
            .astype("Int64")
        )
        to = sched["to_state"].to_numpy()
        n_proc = np.bincount(kc[(to == "processing") & (kc >= 0)], minlength=n)
        erred |= np.bincount(kc[(to == "erred") & (kc >= 0)], minlength=n) > 0
        n_tr += np.bincount(kc[kc >= 0], minlength=n)
    if len(work):
        kc = _codes(work["key"], keys)
        last = _last_per_key(kc, n, _us(work["time"]), work["line"].to_numpy())
        wstate = _take(work["to_state"], last)
        tasks["state"] = tasks["state"].fillna(wstate) if "state" in tasks else wstate.array
        erred |= (
            np.bincount(kc[(work["to_state"].to_numpy() == "error") & (kc >= 0)], minlength=n) > 0
        )
        n_tr += np.bincount(kc[kc >= 0], minlength=n)
    if "prefix" not in tasks or tasks["prefix"].isna().any():
        group, prefix = key_split(pd.Series(keys))
        if "prefix" not in tasks:
            tasks["prefix"], tasks["group"] = prefix.array, group.array
        else:
            tasks["prefix"] = tasks["prefix"].fillna(prefix)
            tasks["group"] = tasks["group"].fillna(group)

    exc = _codes(ex["key"].to_numpy(), keys)
    n_exec = np.bincount(exc[exc >= 0], minlength=n)
    final = _last_per_key(exc, n, ex["attempt"].to_numpy())
    for col in ("worker", "thread", "start", "end", "time_source"):
        tasks[col] = _take(ex[col], final).array
    tasks["duration"] = (tasks["end"] - tasks["start"]).dt.total_seconds()
    tasks["n_transitions"] = n_tr
    tasks["n_executions"] = n_exec
    err_ex = ex["outcome"].isin(["error", "erred"]).to_numpy() & (exc >= 0)
    erred |= np.bincount(exc[err_ex], minlength=n) > 0
    tasks["erred"] = erred
    tasks["retried"] = (n_exec > 1) | (n_proc > 1)
    # A key moved between workers, or with a result size, existed in memory: it ran somewhere.
    moved = np.zeros(n, dtype=bool)
    if len(records.transfers):
        tc = _codes(records.transfers["key"].to_numpy(), keys)
        moved[tc[tc >= 0]] = True
    has_size = tasks["nbytes"].notna().to_numpy() if "nbytes" in tasks else np.zeros(n, dtype=bool)
    tasks["never_ran"] = (n_exec == 0) & ~moved & ~has_size
    if len(graph_keys):
        gc = _codes(graph_keys["key"].to_numpy(), keys)
        g = graph_keys["graph"].to_numpy(dtype=np.int64)
        first_graph = _last_per_key(gc, n, -g)
        tasks["graph"] = pd.array(
            np.where(first_graph >= 0, g[np.maximum(first_graph, 0)], 0), dtype="Int64"
        )
        tasks.loc[first_graph < 0, "graph"] = pd.NA
        wanted = np.zeros(n, dtype=bool)
        wc = gc[graph_keys["wanted"].to_numpy(dtype=bool)]
        wanted[wc[wc >= 0]] = True
        tasks["wanted"] = wanted
        client_of = records.graphs.set_index("graph")["client"]
        tasks["client"] = client_of.reindex(tasks["graph"].astype("float64")).array
    else:
        tasks["wanted"] = False
    records.tasks = conform("tasks", tasks)

    th = (
        ex[ex["thread"].notna()]
        .groupby(["worker", "thread"])
        .size()
        .rename("n_tasks")
        .reset_index()
    )
    records.threads = conform("threads", th.sort_values(["worker", "thread"]))


_KEY_SPLIT = r"^(?P<head>[^-]*)(?P<rest>(?:-(?![0-9a-f]{8}(?:-|$))[A-Za-z]+(?=-|$))*)"


def key_split(keys: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(group, prefix) of Dask keys, vectorised, as ``dask.utils.key_split_group`` / ``key_split``.

    The scheduler names these itself; this is only used for keys it never reported (tasks seen only
    in a submitted graph or a transfer).
    """
    s = keys.astype("str")
    is_tuple = s.str.startswith("(")
    first = s.where(~is_tuple, s.str.split(",", n=1).str[0].str.strip("()\"'"))
    parts = first.str.extract(_KEY_SPLIT)
    head = parts["head"].fillna("")
    alpha = head.str.match(r"^[A-Za-z]")
    head = head.where(alpha, head.str.split(",").str[0].str.strip("_'()\""))
    prefix = head + parts["rest"].fillna("")
    prefix = prefix.where(~prefix.str.fullmatch(r"[a-f0-9]{32}"), "data")
    group = first.where(is_tuple, prefix)
    return group, prefix


def run_id(records: RunRecords) -> str:
    """Content-derived run id: scheduler address, first event time, clients and key count."""
    first, _ = records.span
    parts = [
        str(records.scheduler.get("address") or ""),
        "" if first is None else str(first.value if hasattr(first, "value") else first),
        ",".join(sorted(set(records.clients["client"].dropna().astype(str)))),
        str(len(records.tasks)),
        ",".join(sorted(set(records.workers["address"].dropna().astype(str)))),
    ]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def read_dask_csvs(run: Path, records: RunRecords, progress=None) -> None:
    """Read the six CSV files of ``run`` into ``records`` (missing files are recorded)."""
    acct = records.accounting
    tables: dict[str, CsvTable | None] = {}
    for name in CSV_FILES:
        tables[name] = _read(run, name, acct)
        if progress is not None:
            progress.update(1)
    records.missing = [n for n in CSV_FILES if not (run / n).exists()]

    st, wt = tables["scheduler_transition.csv"], tables["worker_transition.csv"]
    sched = read_transitions(st, "scheduler", acct) if st is not None else pd.DataFrame()
    work = read_transitions(wt, "worker", acct) if wt is not None else pd.DataFrame()
    if tables["worker_transfer.csv"] is not None:
        records.transfers = read_transfers(tables["worker_transfer.csv"], acct)
    graph_keys = pd.DataFrame(columns=["graph", "key", "wanted"])
    if tables["graph.csv"] is not None:
        records.graphs, records.dependencies, graph_keys = read_graphs(tables["graph.csv"], acct)

    if len(sched):
        counts = sched["address"].value_counts()
        if len(counts) and counts.iloc[0] > 0:
            records.scheduler["address"] = str(counts.index[0])

    workers = (
        read_membership(tables["worker.csv"], "worker", acct)
        if tables["worker.csv"] is not None
        else None
    )
    clients = (
        read_membership(tables["client.csv"], "client", acct)
        if tables["client.csv"] is not None
        else None
    )

    # Workers: from worker.csv, plus every address that logged or ran something.
    seen = [
        workers["id"] if workers is not None else None,
        pd.Series(work["address"].cat.categories) if len(work) else None,
        pd.Series(sched["worker"].cat.categories) if len(sched) else None,
        records.transfers["source"],
        records.transfers["destination"],
    ]
    addrs = (
        sorted(
            set(
                pd.concat([s for s in seen if s is not None and len(s)], ignore_index=True)
                .dropna()
                .astype(str)
            )
        )
        if any(s is not None and len(s) for s in seen)
        else []
    )
    wdf = pd.DataFrame({"address": addrs})
    if workers is not None:
        wdf = wdf.merge(workers.rename(columns={"id": "address"}), on="address", how="left")
    wdf["host"] = wdf["address"].str.extract(r"^[a-z]+://\[?([^\]/]+?)\]?:\d+$", expand=False)
    records.workers = conform("workers", wdf)

    cl = sorted(
        set(clients["id"])
        if clients is not None
        else set() | set(records.graphs["client"].dropna().astype(str))
    )
    cl = sorted(set(cl) | set(records.graphs["client"].dropna().astype(str)))
    cdf = pd.DataFrame({"client": cl})
    if clients is not None:
        cdf = cdf.merge(clients.rename(columns={"id": "client"}), on="client", how="left")
    records.clients = conform("clients", cdf)

    # rows used: per file, rows not dropped above
    consolidate(records, sched, work, graph_keys)
