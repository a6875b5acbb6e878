"""The metaprov capture's ``worker_execution.csv`` -> exact thread of every execution attempt.

Input: ``worker_execution.csv`` (one row per attempt: key, worker, thread, start, stop, outcome),
written by :mod:`metaprov.capture` beside the Mofka-schema files.
Output: ``records.executions["thread"]`` set per attempt (the scheduler only reports the thread
of a task's final attempt), and ``records.tasks["thread"]`` / ``records.threads`` refreshed.

An attempt is matched on key, worker and start time (1 ms tolerance: both come from the same
worker clock). Rows that match no attempt are counted in the accounting, never attached by guess.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.ingest.csvread import RowSelection, read_csv
from metaprov.records import RunRecords, conform
from metaprov.timeutil import epoch_to_utc

NAME = "worker_execution.csv"
_TOLERANCE_US = 1000


def _uint64(arr: pa.ChunkedArray) -> pd.Series:
    ok = pc.fill_null(pc.match_substring_regex(arr, r"^\d{1,20}$"), False)
    good = pc.if_else(ok, arr, pa.scalar(None, pa.string()))
    try:
        out = pc.cast(good, pa.uint64())
    except pa.ArrowInvalid:
        out = pa.chunked_array([pa.array([None] * len(good), type=pa.uint64())])
    values = pc.fill_null(out, 0).to_numpy().astype(np.uint64)
    return pd.Series(pd.arrays.IntegerArray(values, out.is_null().to_numpy()))


def match_attempts(name: str, rows: pd.DataFrame, records: RunRecords) -> pd.DataFrame | None:
    """Match rows of a worker file (``key``, ``worker``, ``us`` start, ``line``; optional
    ``counted``: whether this reader accounts for the row) to execution attempts; unmatched rows
    are counted in the accounting of ``name``.

    Returns:
        ``rows`` sorted by start with ``pos``: the row of ``records.executions`` (NaN: none),
        or None when there are no worker-side executions (every row counted as not used).
    """
    acct = records.accounting
    ex = records.executions
    counted = (
        rows["counted"].to_numpy(dtype=bool)
        if "counted" in rows
        else np.ones(len(rows), dtype=bool)
    )
    if not len(ex):
        acct.drop(
            name,
            "no worker-side execution to attach to (worker_transition.csv missing)",
            rows["line"].to_numpy()[counted],
        )
        return None
    exr = pd.DataFrame(
        {
            "key": ex["key"].astype("str"),
            "worker": ex["worker"].astype("str"),
            "us": ex["start"].to_numpy(dtype="datetime64[us]").view("int64"),
            "pos": np.arange(len(ex)),
        }
    )
    exr = exr[ex["time_source"].to_numpy() == "worker"].sort_values("us", kind="stable")
    rows = rows.sort_values("us", kind="stable")
    m = pd.merge_asof(
        rows, exr, on="us", by=["key", "worker"], direction="nearest", tolerance=_TOLERANCE_US
    )
    hit = m["pos"].notna().to_numpy()
    miss = ~hit & (m["counted"].to_numpy(dtype=bool) if "counted" in m else True)
    if miss.any():
        acct.drop(
            name,
            "matches no worker-side execution (key, worker, start within 1 ms)",
            m.loc[miss, "line"].to_numpy(),
        )
    return m


def apply_worker_executions(
    run: Path, records: RunRecords, select: RowSelection | None = None
) -> None:
    """Set each execution attempt's thread from ``worker_execution.csv`` when the file exists.

    ``select``: a partition's rows only (its keys and its dependencies'), each row accounted
    by the partition owning its key (see :class:`metaprov.ingest.csvread.RowSelection`)."""
    path = run / NAME
    if not path.is_file():
        return
    acct = records.accounting
    ct = read_csv(
        path,
        required=["key", "worker", "thread", "start"],
        optional=[],
        extended=("stop", "outcome", "run_id", "time"),
        acct=acct,
        select=select,
    )
    if ct is None or not len(ct):
        return
    counted = (
        np.asarray(select.masks(ct.table)[1], dtype=bool)
        if select is not None
        else np.ones(len(ct), dtype=bool)
    )
    start = epoch_to_utc(pd.to_numeric(ct.get("start"), errors="coerce"))
    rows = pd.DataFrame(
        {
            "key": ct.get("key").astype("str"),
            "worker": ct.get("worker").astype("str"),
            "thread": _uint64(ct.arrow("thread")),
            "us": start.to_numpy(dtype="datetime64[us]").view("int64"),
            "line": ct.lines,
            "counted": counted,
        }
    )
    bad = rows["thread"].isna().to_numpy() | start.isna().to_numpy()
    if bad.any():
        acct.drop(NAME, "no thread id or start time", ct.lines[bad & counted])
        rows = rows[~bad]
    m = match_attempts(NAME, rows, records)
    if m is None:
        return
    ex = records.executions
    hit = m["pos"].notna().to_numpy()
    pos = m.loc[hit, "pos"].to_numpy(dtype=np.int64)
    thread = ex["thread"].copy()
    thread.iloc[pos] = m.loc[hit, "thread"].to_numpy()
    # the capture's start/stop are the exact compute interval on the worker's clock
    window = ex["window"].astype(object).to_numpy(copy=True)
    window[pos] = "exact"
    ex = ex.assign(thread=thread, window=pd.array(window, dtype=ex["window"].dtype))
    records.executions = conform("executions", ex)
    # the final attempt's thread on the task, and the thread table
    final = (
        ex.sort_values(["key", "attempt"], kind="stable")
        .drop_duplicates("key", keep="last")
        .set_index("key")["thread"]
    )
    tasks = records.tasks
    newt = final.reindex(tasks["key"]).array
    tasks = tasks.assign(
        thread=pd.Series(newt)
        .where(pd.Series(newt).notna(), tasks["thread"].reset_index(drop=True))
        .array
    )
    records.tasks = conform("tasks", tasks)
    th = (
        ex[ex["thread"].notna()]
        .groupby(["worker", "thread"])
        .size()
        .rename("n_tasks")
        .reset_index()
    )
    records.threads = conform("threads", th.sort_values(["worker", "thread"]))
