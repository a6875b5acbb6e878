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
        dictionary=("worker", "prefix", "group", "start", "finish", "called_from"),
    ),
    "worker_transition.csv": dict(
        required=["key", "start", "finish", "called_from", "time"],
        optional=[],
        extended=("stimulus_id", "thread"),
        dictionary=("start", "finish", "called_from"),
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


def _text(s: pd.Series) -> pd.Series:
    """Categorical or string column -> plain pandas string column."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype(object)
    return s.astype("str")


def _float(ct: CsvTable, col: str, acct: Accounting) -> pd.Series:
    """Parse a numeric column; unparseable cells become NA and are reported (the row is kept)."""
    raw = ct.get(col)
    val = pd.to_numeric(raw, errors="coerce").astype("float64")
    bad = (val.isna() | ~np.isfinite(val.fillna(0))) & raw.notna()
    if bad.any():
        idx = np.flatnonzero(bad.to_numpy())
        acct.warn(
            ct.name,
            f"unparseable number in column {col!r} (value treated as absent) x{len(idx)}",
            line=int(ct.lines[idx[0]]),
            column=col,
            detail=str(raw.iloc[idx[0]])[:80],
        )
        val[bad] = np.nan
    return val


def _time(ct: CsvTable, col: str, acct: Accounting) -> pd.Series:
    return epoch_to_utc(_float(ct, col, acct))


def _uint64(ct: CsvTable, col: str, acct: Accounting) -> pd.Series:
    """Exact 64-bit thread ids: text -> uint64 without passing through float."""
    raw = ct.get(col)
    arr = pa.array(raw.to_numpy(dtype=object, na_value=None), type=pa.string())
    # "123.0" appears when a writer let pandas turn the column into float: accept the exact form.
    arr = pc.replace_substring_regex(arr, r"\.0$", "")
    ok = pc.match_substring_regex(arr, r"^\d{1,20}$")
    ok = pc.fill_null(ok, False)
    good = pc.if_else(ok, arr, pa.scalar(None, pa.string()))
    try:
        out = pc.cast(good, pa.uint64())
    except pa.ArrowInvalid:  # > 2**64 - 1
        ints = [int(x) if x is not None and int(x) < 2**64 else None for x in good.to_pylist()]
        out = pa.array(ints, type=pa.uint64())
        ok = pc.and_(ok, pc.is_valid(out))
    badmask = pc.and_(pc.invert(ok), pc.is_valid(arr)).to_numpy(zero_copy_only=False)
    if badmask.any():
        idx = np.flatnonzero(badmask)
        acct.warn(
            ct.name,
            f"not a thread id in column {col!r} (treated as absent) x{len(idx)}",
            line=int(ct.lines[idx[0]]),
            column=col,
            detail=str(raw.iloc[idx[0]])[:80],
        )
    values = pc.fill_null(out, 0).to_numpy(zero_copy_only=False).astype(np.uint64)
    mask = pc.is_null(out).to_numpy(zero_copy_only=False)
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
    null = ct.get(col).isna().to_numpy()
    if null.any():
        acct.drop(ct.name, f"empty {col!r} cell", ct.lines[null], column=col)
        ct = ct.take(~null)
    return ct


# ----------------------------------------------------------------------------- per file


def read_scheduler_transitions(ct: CsvTable, acct: Accounting) -> pd.DataFrame:
    ct = _drop_null_keys(ct, "key", acct)
    return pd.DataFrame(
        {
            "key": _text(ct.get("key")),
            "observer": "scheduler",
            "address": _text(ct.get("called_from")),
            "from_state": _text(ct.get("start")),
            "to_state": _text(ct.get("finish")),
            "time": _time(ct, "time", acct),
            "stimulus_id": _text(ct.get("stimulus_id")),
            "line": pd.array(ct.lines, dtype="Int64"),
            "thread": _uint64(ct, "thread", acct),
            "worker": _text(ct.get("worker")),
            "prefix": _text(ct.get("prefix")),
            "group": _text(ct.get("group")),
            "begins": _time(ct, "begins", acct),
            "ends": _time(ct, "ends", acct),
            "size": _float(ct, "size", acct),
        }
    )


def read_worker_transitions(ct: CsvTable, acct: Accounting) -> pd.DataFrame:
    ct = _drop_null_keys(ct, "key", acct)
    return pd.DataFrame(
        {
            "key": _text(ct.get("key")),
            "observer": "worker",
            "address": _text(ct.get("called_from")),
            "from_state": _text(ct.get("start")),
            "to_state": _text(ct.get("finish")),
            "time": _time(ct, "time", acct),
            "stimulus_id": _text(ct.get("stimulus_id")),
            "line": pd.array(ct.lines, dtype="Int64"),
            "thread": _uint64(ct, "thread", acct),
        }
    )


def read_transfers(ct: CsvTable, acct: Accounting) -> pd.DataFrame:
    """De-duplicate re-sent rows, match the two sides of each transfer, one row per key moved."""
    name = ct.name
    content_cols = [
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
    frame = pd.DataFrame({c: ct.get(c).astype(object) for c in content_cols})
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
    logger = _text(ct.get("called_from"))
    peer = _text(ct.get("who"))
    src = np.where(
        incoming,
        peer.to_numpy(dtype=object, na_value=None),
        logger.to_numpy(dtype=object, na_value=None),
    )
    dst = np.where(
        incoming,
        logger.to_numpy(dtype=object, na_value=None),
        peer.to_numpy(dtype=object, na_value=None),
    )
    # The key set of each row, order-independent, to match incoming with outgoing sides.
    items = pd.DataFrame({"cell": parsed.cell, "key": parsed.key, "nbytes": parsed.value})
    keyset = items.sort_values(["cell", "key"]).groupby("cell", sort=True)["key"].agg("\x1f".join)
    nkeys = items.groupby("cell", sort=True).size()
    rows = pd.DataFrame(
        {
            "row": np.arange(n),
            "incoming": incoming,
            "source": pd.Series(src, dtype="str"),
            "destination": pd.Series(dst, dtype="str"),
            "keyset": keyset.reindex(np.arange(n)).to_numpy(dtype=object),
            "n_keys": nkeys.reindex(np.arange(n)).to_numpy(),
            "start": _time(ct, "start", acct),
            "stop": _time(ct, "stop", acct),
            "duration": _float(ct, "duration", acct),
            "total": _float(ct, "total", acct),
            "bandwidth": _float(ct, "bandwidth", acct),
            "compressed": _float(ct, "compressed", acct),
        }
    )[good]
    rows["source"] = rows["source"].fillna("")
    rows["destination"] = rows["destination"].fillna("")
    rows = rows.sort_values(["source", "destination", "keyset", "start", "row"], kind="stable")
    rows["rank"] = rows.groupby(
        ["incoming", "source", "destination", "keyset"], sort=False
    ).cumcount()
    inc = rows[rows["incoming"]]
    out = rows[~rows["incoming"]]
    m = inc.merge(
        out, on=["source", "destination", "keyset", "rank"], how="outer", suffixes=("_in", "_out")
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
            "keyset": m["keyset"],
            "start": pick("start"),
            "stop": pick("stop"),
            "duration": pick("duration"),
            "total": pick("total"),
            "bandwidth": pick("bandwidth"),
            "compressed": m["compressed_out"].where(has_out, m["compressed_in"]),
            "n_keys": pick("n_keys"),
            "logged_by": np.where(
                has_in & has_out, "both", np.where(has_in, "incoming", "outgoing")
            ),
        }
    )
    tr = tr.sort_values(
        ["start", "source", "destination", "keyset", "row"], kind="stable", na_position="last"
    ).reset_index(drop=True)
    tr["transfer"] = np.arange(len(tr), dtype=np.int64)
    exploded = items.merge(tr[["row", "transfer"]], left_on="cell", right_on="row", how="inner")
    out_df = exploded.drop(columns=["row"]).merge(
        tr.drop(columns=["row", "keyset"]), on="transfer", how="left"
    )
    out_df = out_df.sort_values(["transfer", "key"], kind="stable")
    out_df["nbytes"] = out_df["nbytes"].round().astype("Int64")
    out_df["total"] = out_df["total"].round().astype("Int64")
    out_df["compressed"] = out_df["compressed"].round().astype("Int64")
    out_df["n_keys"] = out_df["n_keys"].astype("Int64")
    return conform("transfers", out_df)


def read_graphs(ct: CsvTable, acct: Accounting) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """graph.csv -> (graphs, dependencies, wanted keys)."""
    name = ct.name
    deps = parse_cells(ct.get("dependencies"), "deps")
    wanted = parse_cells(ct.get("keys"), "set")
    bad = np.union1d(deps.bad_cells, wanted.bad_cells)
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
    good[bad] = False
    dep_items = pd.DataFrame({"graph": deps.cell, "key": deps.key, "dependency": deps.value})
    dep_items = dep_items[good[dep_items["graph"].to_numpy()]] if len(dep_items) else dep_items
    want = pd.DataFrame({"graph": wanted.cell, "key": wanted.key})
    want = want[good[want["graph"].to_numpy()]] if len(want) else want
    edges = dep_items[dep_items["dependency"].notna()]
    edges = edges.drop_duplicates().sort_values(["graph", "key", "dependency"], kind="stable")
    n_tasks = (
        pd.concat([dep_items[["graph", "key"]], want]).drop_duplicates().groupby("graph").size()
    )
    graphs = pd.DataFrame(
        {
            "graph": np.arange(n),
            "client": _text(ct.get("client")),
            "time": _time(ct, "time", acct),
            "n_wanted": want.groupby("graph").size().reindex(np.arange(n), fill_value=0).to_numpy(),
            "n_tasks": n_tasks.reindex(np.arange(n), fill_value=0).to_numpy(),
            "n_edges": edges.groupby("graph").size().reindex(np.arange(n), fill_value=0).to_numpy(),
        }
    )[good]
    graph_keys = pd.concat(
        [dep_items[["graph", "key"]].assign(wanted=False), want.assign(wanted=True)],
        ignore_index=True,
    )
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
    ids = sorted(set(df["id"]))
    return pd.DataFrame(
        {
            "id": ids,
            "added": added.reindex(ids).to_numpy(),
            "removed": removed.reindex(ids).to_numpy(),
        }
    )


# ----------------------------------------------------------------------------- consolidation


def _executions(sched: pd.DataFrame, work: pd.DataFrame) -> pd.DataFrame:
    """One row per execution attempt: worker-side windows, else the scheduler's startstops."""
    frames = []
    if len(work):
        w = work[["key", "address", "from_state", "to_state", "time", "line", "thread"]]
        is_start = (w["to_state"] == "executing") & ~w["from_state"].isin(_RUNNING)
        is_end = w["from_state"].isin(_RUNNING) & ~w["to_state"].isin(_RUNNING)
        ev = pd.concat(
            [w[is_start].assign(kind=0), w[is_end].assign(kind=1)], ignore_index=True
        ).sort_values(["key", "address", "time", "line"], kind="stable", na_position="last")
        ev = ev.reset_index(drop=True)
        nxt = ev.shift(-1)
        starts = ev["kind"] == 0
        paired = (
            starts
            & (nxt["kind"] == 1)
            & (nxt["key"] == ev["key"])
            & (nxt["address"] == ev["address"])
        )
        paired = paired.fillna(False).astype(bool)
        ex = pd.DataFrame(
            {
                "key": ev["key"][starts],
                "worker": ev["address"][starts],
                "start": ev["time"][starts],
                "end": nxt["time"].where(paired)[starts],
                "outcome": nxt["to_state"].where(paired)[starts],
                "thread": ev["thread"][starts],
                "time_source": "worker",
            }
        )
        frames.append(ex)
    have_worker_exec = set(frames[0]["key"]) if frames else set()
    if len(sched):
        s = sched[sched["thread"].notna() | sched["begins"].notna()]
        s = s[s["from_state"] == "processing"]
        s = s[~s["key"].isin(have_worker_exec)]
        if len(s):
            frames.append(
                pd.DataFrame(
                    {
                        "key": s["key"],
                        "worker": s["worker"],
                        "start": s["begins"],
                        "end": s["ends"],
                        "outcome": s["to_state"],
                        "thread": s["thread"],
                        "time_source": "scheduler",
                    }
                )
            )
    if not frames:
        return conform("executions", pd.DataFrame())
    ex = pd.concat(frames, ignore_index=True)
    # Thread of a worker-side execution: from the scheduler row for the same key and worker.
    if len(sched):
        thr = sched[sched["thread"].notna()][["key", "worker", "thread", "time"]]
        thr = thr.sort_values("time", kind="stable").drop_duplicates(["key", "worker"], keep="last")
        ex = ex.merge(
            thr[["key", "worker", "thread"]].rename(columns={"thread": "sthread"}),
            on=["key", "worker"],
            how="left",
        )
        ex["thread"] = ex["thread"].fillna(ex["sthread"]) if "sthread" in ex else ex["thread"]
        ex = ex.drop(columns=["sthread"])
    ex = ex.sort_values(["key", "start", "worker"], kind="stable", na_position="last").reset_index(
        drop=True
    )
    ex["attempt"] = ex.groupby("key", sort=False).cumcount()
    return conform("executions", ex)


def consolidate(
    records: RunRecords,
    sched: pd.DataFrame,
    work: pd.DataFrame,
    graph_keys: pd.DataFrame,
) -> None:
    """Fill ``records.tasks``, ``executions``, ``transitions``, ``threads`` and worker/client tables."""
    tcols = ["key", "observer", "address", "from_state", "to_state", "time", "stimulus_id", "line"]
    trans = (
        pd.concat(
            [sched[tcols] if len(sched) else None, work[tcols] if len(work) else None],
            ignore_index=True,
        )
        if (len(sched) or len(work))
        else pd.DataFrame(columns=tcols)
    )
    trans = trans.sort_values(["time", "observer", "line"], kind="stable", na_position="last")
    records.transitions = conform("transitions", trans)

    ex = _executions(sched, work)
    records.executions = ex

    # every key seen anywhere
    key_sources = [
        records.transitions["key"],
        graph_keys["key"] if len(graph_keys) else None,
        records.transfers["key"],
        records.dependencies["dependency"],
    ]
    all_keys = (
        pd.Index(
            pd.concat([k for k in key_sources if k is not None and len(k)], ignore_index=True)
            .astype("str")
            .unique()
        ).sort_values()
        if any(k is not None and len(k) for k in key_sources)
        else pd.Index([], dtype="str")
    )
    tasks = pd.DataFrame({"key": all_keys})

    if len(sched):
        s = sched
        first = s.drop_duplicates("key", keep="first").set_index("key")
        pg = s[s["prefix"].notna()].drop_duplicates("key", keep="first").set_index("key")
        last = (
            s.sort_values(["time", "line"], kind="stable", na_position="first")
            .drop_duplicates("key", keep="last")
            .set_index("key")
        )
        fin = s[s["thread"].notna() | s["begins"].notna() | s["size"].notna()]
        fin = fin.drop_duplicates("key", keep="last").set_index("key")
        tasks["prefix"] = pg["prefix"].reindex(all_keys).to_numpy()
        tasks["group"] = pg["group"].reindex(all_keys).to_numpy()
        tasks["state"] = last["to_state"].reindex(all_keys).to_numpy()
        tasks["sched_begins"] = fin["begins"].reindex(all_keys).to_numpy()
        tasks["sched_ends"] = fin["ends"].reindex(all_keys).to_numpy()
        tasks["nbytes"] = fin["size"].reindex(all_keys).round().astype("Int64").to_numpy()
        n_proc = (
            s[s["to_state"] == "processing"]
            .groupby("key")
            .size()
            .reindex(all_keys, fill_value=0)
            .to_numpy()
        )
        s_erred = (
            s[s["to_state"] == "erred"]
            .groupby("key")
            .size()
            .reindex(all_keys, fill_value=0)
            .to_numpy()
        )
        del first
    else:
        n_proc = np.zeros(len(all_keys), dtype=np.int64)
        s_erred = n_proc
    if len(work):
        wlast = (
            work.sort_values(["time", "line"], kind="stable", na_position="first")
            .drop_duplicates("key", keep="last")
            .set_index("key")
        )
        wstate = wlast["to_state"].reindex(all_keys)
        if "state" in tasks:
            tasks["state"] = tasks["state"].fillna(pd.Series(wstate.to_numpy(), index=tasks.index))
        else:
            tasks["state"] = wstate.to_numpy()
        w_err = (
            work[work["to_state"] == "error"]
            .groupby("key")
            .size()
            .reindex(all_keys, fill_value=0)
            .to_numpy()
        )
    else:
        w_err = np.zeros(len(all_keys), dtype=np.int64)

    # prefix/group for keys never seen by the scheduler: derived from the key as Dask does
    if "prefix" not in tasks or tasks["prefix"].isna().any():
        derived_group, derived_prefix = key_split(all_keys.to_series(index=None))
        if "prefix" not in tasks:
            tasks["prefix"] = derived_prefix.to_numpy()
            tasks["group"] = derived_group.to_numpy()
        else:
            tasks["prefix"] = tasks["prefix"].fillna(
                pd.Series(derived_prefix.to_numpy(), index=tasks.index)
            )
            tasks["group"] = tasks["group"].fillna(
                pd.Series(derived_group.to_numpy(), index=tasks.index)
            )

    n_exec = ex.groupby("key").size().reindex(all_keys, fill_value=0).to_numpy()
    final = ex.sort_values(["key", "attempt"]).drop_duplicates("key", keep="last").set_index("key")
    for col in ("worker", "thread", "start", "end", "time_source"):
        tasks[col] = final[col].reindex(all_keys).array
    tasks["duration"] = (tasks["end"] - tasks["start"]).dt.total_seconds() if len(tasks) else []
    n_tr = records.transitions.groupby("key").size().reindex(all_keys, fill_value=0).to_numpy()
    tasks["n_transitions"] = n_tr
    tasks["n_executions"] = n_exec
    erred_exec = (
        ex[ex["outcome"].isin(["error", "erred"])]
        .groupby("key")
        .size()
        .reindex(all_keys, fill_value=0)
        .to_numpy()
    )
    tasks["erred"] = (s_erred + w_err + erred_exec) > 0
    tasks["retried"] = (n_exec > 1) | (n_proc > 1)
    # A key moved between workers, or with a result size, existed in memory: it ran somewhere.
    moved = (
        all_keys.isin(records.transfers["key"].dropna().unique())
        if len(records.transfers)
        else False
    )
    has_size = tasks["nbytes"].notna().to_numpy() if "nbytes" in tasks else False
    tasks["never_ran"] = (n_exec == 0) & ~moved & ~has_size
    if len(graph_keys):
        gk = graph_keys.sort_values(["graph"], kind="stable")
        firstg = gk.drop_duplicates("key", keep="first").set_index("key")["graph"]
        tasks["graph"] = firstg.reindex(all_keys).astype("Int64").to_numpy()
        wanted = set(gk.loc[gk["wanted"], "key"])
        tasks["wanted"] = all_keys.isin(list(wanted))
        client_of = records.graphs.set_index("graph")["client"]
        tasks["client"] = client_of.reindex(tasks["graph"].astype("float64")).to_numpy()
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

    sched = (
        read_scheduler_transitions(tables["scheduler_transition.csv"], acct)
        if tables["scheduler_transition.csv"] is not None
        else pd.DataFrame()
    )
    work = (
        read_worker_transitions(tables["worker_transition.csv"], acct)
        if tables["worker_transition.csv"] is not None
        else pd.DataFrame()
    )
    if tables["worker_transfer.csv"] is not None:
        records.transfers = read_transfers(tables["worker_transfer.csv"], acct)
    graph_keys = pd.DataFrame(columns=["graph", "key", "wanted"])
    if tables["graph.csv"] is not None:
        records.graphs, records.dependencies, graph_keys = read_graphs(tables["graph.csv"], acct)

    if len(sched):
        addr = sched["address"].dropna()
        if len(addr):
            records.scheduler["address"] = str(addr.mode().iloc[0])

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
        work["address"] if len(work) else None,
        sched["worker"] if len(sched) else None,
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
