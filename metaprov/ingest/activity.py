"""The capture's fine performance metrics and memory samples -> where the workers' time went.

Input: the extra files :mod:`metaprov.capture` writes (all optional; a run without them, e.g.
Mofka data or an older capture, keeps empty tables, which every surface reports as "not
recorded"):

- ``worker_metric.csv`` — Dask's fine performance metrics as each worker digested them: per
  execution (``key`` set) in the ``execute`` context, summed per flush interval (``key`` empty)
  in the others (``gather-dep``, ``get-data``, ``memory-monitor``, ...);
- ``span.csv`` — the spans (``dask.distributed.span``) the scheduler knew: id, name, parent;
- ``worker_memory.csv`` — each worker's memory and status as the scheduler saw it.

Output: the ``activity`` and ``memory`` tables of :class:`~metaprov.records.RunRecords`. Every
row is used or counted with its reason (no worker, no activity or unit, a value that is not a
finite number, a time that is not one, the same row again).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from metaprov.ingest.csvread import CsvTable, read_csv
from metaprov.records import Accounting, RunRecords, conform
from metaprov.timeutil import epoch_to_utc

METRICS = "worker_metric.csv"
SPANS = "span.csv"
MEMORY = "worker_memory.csv"
#: The files read here, in reading order.
FILES = (METRICS, SPANS, MEMORY)
#: Widest gap between an execution's compute window and the window Dask metered it in (Dask's
#: ledger opens when the worker decides to execute and closes after the result is stored).
_MATCH_TOLERANCE_US = 1_000_000


def read_activity(run: Path, records: RunRecords) -> None:
    """Fill ``records.activity`` and ``records.memory`` from whichever of :data:`FILES` exist."""
    spans = _span_names(run, records.accounting)
    _metrics(run, records, spans)
    _memory(run, records)


def _read(run: Path, name: str, required: list[str], extended: tuple[str, ...], acct: Accounting):
    path = run / name
    if not path.is_file():
        return None
    ct = read_csv(path, required=required, optional=[], extended=extended, acct=acct)
    return ct if ct is not None and len(ct) else None


def _text(ct: CsvTable, col: str) -> pd.Series:
    return ct.get(col).astype("str")


def _numbers(ct: CsvTable, col: str) -> np.ndarray:
    return pd.to_numeric(ct.get(col), errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def _span_names(run: Path, acct: Accounting) -> dict[str, str]:
    """Span id -> name (its tags joined by ``/``) from ``span.csv``."""
    ct = _read(run, SPANS, ["span", "name"], ("parent", "time"), acct)
    if ct is None:
        return {}
    ids = _text(ct, "span").to_numpy(dtype=object)
    raw = ct.get("name").astype(object).to_numpy()
    names: dict[str, str] = {}
    bad = []
    for i, (sid, text) in enumerate(zip(ids, raw, strict=True)):
        try:
            tags = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            tags = None
        if not isinstance(sid, str) or not (
            isinstance(tags, list) and tags and all(isinstance(t, str) for t in tags)
        ):
            bad.append(int(ct.lines[i]))
            continue
        names.setdefault(sid, "/".join(tags))
    if bad:
        acct.drop(SPANS, "no span id, or a name that is not a JSON list of tags", bad)
    return names


def _metrics(run: Path, records: RunRecords, spans: dict[str, str]) -> None:
    acct = records.accounting
    ct = _read(
        run,
        METRICS,
        ["worker", "context", "activity", "unit", "value"],
        ("key", "span", "prefix", "start", "stop", "time"),
        acct,
    )
    if ct is None:
        return
    value = _numbers(ct, "value")
    start = epoch_to_utc(_numbers(ct, "start"))
    end = epoch_to_utc(_numbers(ct, "stop"))
    df = pd.DataFrame(
        {
            "worker": _text(ct, "worker"),
            "key": _text(ct, "key"),
            "prefix": _text(ct, "prefix"),
            "span_id": _text(ct, "span"),
            "context": _text(ct, "context"),
            "activity": _text(ct, "activity"),
            "unit": _text(ct, "unit"),
            "start": start,
            "end": end,
            "value": value,
        }
    )
    df["span"] = df["span_id"].map(spans).astype("str")
    keep = np.ones(len(df), dtype=bool)
    for reason, bad in (
        ("no worker", df["worker"].isna().to_numpy()),
        ("no context, activity or unit", df[["context", "activity", "unit"]].isna().any(axis=1)),
        ("the value is not a finite number", ~np.isfinite(value)),
        ("no end time (stop is not a time)", end.isna().to_numpy()),
    ):
        bad = np.asarray(bad, dtype=bool) & keep
        if bad.any():
            acct.drop(METRICS, reason, ct.lines[bad])
            keep &= ~bad
    bad_start = start.isna().to_numpy() & ~_numbers_missing(ct, "start") & keep
    if bad_start.any():  # a start that is there but not a time: the cell is left out
        acct.drop(
            METRICS,
            "start is not a time (left out)",
            ct.lines[bad_start],
            column="start",
            counts_as_row=False,
        )
    df["line"] = ct.lines
    df = df[keep]
    dup = df.duplicated(
        ["worker", "key", "span_id", "context", "prefix", "activity", "unit", "start", "end"],
        keep="first",
    ).to_numpy()
    if dup.any():
        acct.drop(METRICS, "the same measurement again (first kept)", df["line"].to_numpy()[dup])
        df = df[~dup]
    df["attempt"] = _attempts(df, records)
    df = df.sort_values(["start", "worker", "line"], kind="stable", na_position="first")
    records.activity = conform("activity", df.drop(columns="line"))


def _numbers_missing(ct: CsvTable, col: str) -> np.ndarray:
    return ct.get(col).isna().to_numpy()


def _attempts(df: pd.DataFrame, records: RunRecords) -> pd.Series:
    """The execution attempt of each per-execution row: the last attempt of its key on its
    worker that started no later than the metered window's end (Dask meters an execution from
    the decision to run it to the storing of its result, around the compute window)."""
    out = pd.Series(pd.array([pd.NA] * len(df), dtype="Int64"), index=df.index)
    ex = records.executions
    per = df["key"].notna().to_numpy()
    if not per.any() or not len(ex):
        return out
    exr = pd.DataFrame(
        {
            "key": ex["key"].astype("str").to_numpy(),
            "worker": ex["worker"].astype("str").to_numpy(),
            "us": ex["start"].to_numpy(dtype="datetime64[us]").view("int64"),
            "attempt": ex["attempt"].astype("Int64").to_numpy(),
        }
    )
    exr = exr[ex["start"].notna().to_numpy()].sort_values("us", kind="stable")
    rows = pd.DataFrame(
        {
            "key": df["key"].to_numpy()[per].astype(object),
            "worker": df["worker"].to_numpy()[per].astype(object),
            "us": df["end"].to_numpy(dtype="datetime64[us]")[per].view("int64"),
            "i": np.flatnonzero(per),
        }
    ).sort_values("us", kind="stable")
    for frame in (exr, rows):
        frame["key"] = frame["key"].astype("str")
        frame["worker"] = frame["worker"].astype("str")
    m = pd.merge_asof(
        rows,
        exr,
        on="us",
        by=["key", "worker"],
        direction="backward",
        tolerance=None,
    )
    # A window's end far after its attempt's start is fine (long tasks); one before any start
    # of the key on the worker matches nothing (NA: kept, but not on an execution).
    values = out.to_numpy(dtype=object)
    values[m["i"].to_numpy()] = m["attempt"].to_numpy(dtype=object)
    return pd.Series(pd.array(values, dtype="Int64"), index=df.index)


def _memory(run: Path, records: RunRecords) -> None:
    acct = records.accounting
    ct = _read(
        run,
        MEMORY,
        ["worker", "process", "managed", "spilled", "time"],
        ("unmanaged", "unmanaged_old", "memory_limit", "status"),
        acct,
    )
    if ct is None:
        return
    time = epoch_to_utc(_numbers(ct, "time"))
    cols = ("process", "managed", "unmanaged", "unmanaged_old", "spilled", "memory_limit")
    ints = {c: pd.to_numeric(ct.get(c), errors="coerce").astype("Int64") for c in cols}
    df = pd.DataFrame({"worker": _text(ct, "worker"), "time": time, **ints})
    status = _text(ct, "status")
    df["status"] = status
    df["paused"] = pd.array(
        np.where(status.isna(), None, status.to_numpy(dtype=object) == "paused"), dtype="boolean"
    )
    keep = np.ones(len(df), dtype=bool)
    for reason, bad in (
        ("no worker", df["worker"].isna().to_numpy()),
        ("time is not a time", time.isna().to_numpy()),
        (
            "process, managed or spilled bytes are not whole numbers",
            df[["process", "managed", "spilled"]].isna().any(axis=1).to_numpy(),
        ),
    ):
        bad = np.asarray(bad, dtype=bool) & keep
        if bad.any():
            acct.drop(MEMORY, reason, ct.lines[bad])
            keep &= ~bad
    df = df[keep]
    lines = ct.lines[keep]
    dup = df.duplicated(["worker", "time"], keep="first").to_numpy()
    if dup.any():
        acct.drop(MEMORY, "the same worker and time again (first kept)", lines[dup])
        df = df[~dup]
    df = df.sort_values(["time", "worker"], kind="stable")
    records.memory = conform("memory", df)
