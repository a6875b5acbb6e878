"""The capture's task facts -> what each task was: function, arguments, result, exception, call site.

Input: the extra files :mod:`metaprov.capture` writes beside the Mofka-schema files (all optional;
a run without them reads as before):

- ``worker_result.csv`` — per execution attempt: result type and size, or exception type and
  message (and traceback when recorded), matched to the attempt like ``worker_execution.csv``;
- ``task_function.csv`` — per task group (per key where a group mixes functions): the callable;
- ``graph_submission.csv`` — per submitted graph: file, line (and notebook cell) of the call;
- ``task_argument.csv`` — literal arguments (opt-in); ``task_fused_op.csv`` — inner operations
  of fused tasks per group (opt-in).

Output: the ``results``, ``functions``, ``submissions``, ``arguments`` and ``fused_ops`` tables
of :class:`~metaprov.records.RunRecords`. Text cells that may hold newlines (messages,
tracebacks, cell sources, argument values) are JSON string literals in the files; a cell that is
not one is kept out and reported with its line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from metaprov.ingest.csvread import CsvTable, read_csv
from metaprov.ingest.executions import match_attempts
from metaprov.records import Accounting, RunRecords, conform
from metaprov.timeutil import epoch_to_utc

RESULTS = "worker_result.csv"
FUNCTIONS = "task_function.csv"
SUBMISSIONS = "graph_submission.csv"
ARGUMENTS = "task_argument.csv"
FUSED_OPS = "task_fused_op.csv"
#: The extra files read here, in reading order.
FILES = (RESULTS, FUNCTIONS, SUBMISSIONS, ARGUMENTS, FUSED_OPS)


def read_task_facts(run: Path, records: RunRecords) -> None:
    """Fill the task-fact tables from whichever of :data:`FILES` the run directory holds."""
    _results(run, records)
    _functions(run, records)
    _submissions(run, records)
    _arguments(run, records)
    _fused_ops(run, records)


def _read(run: Path, name: str, required: list[str], extended: tuple[str, ...], acct: Accounting):
    path = run / name
    if not path.is_file():
        return None
    ct = read_csv(path, required=required, optional=[], extended=extended, acct=acct)
    return ct if ct is not None and len(ct) else None


def _text(ct: CsvTable, col: str) -> pd.Series:
    return ct.get(col).astype("str")


def _ints(ct: CsvTable, col: str) -> pd.Series:
    return pd.to_numeric(ct.get(col), errors="coerce").astype("Int64")


def _frame(ct: CsvTable, acct: Accounting, columns: dict[str, str]) -> pd.DataFrame:
    """Columns of ``ct`` by kind: ``text``, ``int`` or ``json`` (JSON string literals)."""
    read = {"text": _text, "int": _ints, "json": lambda c, n: _json_cells(c, n, acct)}
    return pd.DataFrame({name: read[kind](ct, name) for name, kind in columns.items()})


def _json_cells(ct: CsvTable, col: str, acct: Accounting) -> pd.Series:
    """Decode a column of JSON string literals; a cell that is not one becomes NA (reported)."""
    raw = ct.get(col).astype(object)
    out = pd.Series([pd.NA] * len(raw), dtype=object)
    bad = []
    for i in np.flatnonzero(raw.notna().to_numpy()):
        try:
            value = json.loads(raw.iloc[i])
        except ValueError:
            value = None
        if isinstance(value, str):
            out.iloc[i] = value
        else:
            bad.append(int(ct.lines[i]))
    if bad:
        acct.drop(
            ct.name,
            "not a JSON string literal (cell left out)",
            bad,
            column=col,
            counts_as_row=False,
        )
    return out.astype("str")


def _results(run: Path, records: RunRecords) -> None:
    acct = records.accounting
    ct = _read(
        run,
        RESULTS,
        ["key", "worker", "start", "outcome"],
        ("type", "nbytes", "exception_type", "exception_message", "traceback", "time"),
        acct,
    )
    if ct is None:
        return
    start = epoch_to_utc(pd.to_numeric(ct.get("start"), errors="coerce"))
    rows = pd.DataFrame(
        {
            "key": _text(ct, "key"),
            "worker": _text(ct, "worker"),
            "us": start.to_numpy(dtype="datetime64[us]").view("int64"),
            "line": ct.lines,
            "i": np.arange(len(ct)),
        }
    )
    bad = start.isna().to_numpy()
    if bad.any():
        acct.drop(RESULTS, "no start time", ct.lines[bad])
        rows = rows[~bad]
    m = match_attempts(RESULTS, rows, records)
    if m is None:
        return
    m = m[m["pos"].notna()]
    i = m["i"].to_numpy(dtype=np.int64)
    ex = records.executions.iloc[m["pos"].to_numpy(dtype=np.int64)]
    out = pd.DataFrame(
        {
            "key": ex["key"].to_numpy(),
            "attempt": ex["attempt"].to_numpy(),
            "outcome": _text(ct, "outcome").iloc[i].to_numpy(),
            "type": _text(ct, "type").iloc[i].to_numpy(),
            "nbytes": _ints(ct, "nbytes").iloc[i].to_numpy(),
            "exception_type": _text(ct, "exception_type").iloc[i].to_numpy(),
            "exception_message": _json_cells(ct, "exception_message", acct).iloc[i].to_numpy(),
            "traceback": _json_cells(ct, "traceback", acct).iloc[i].to_numpy(),
        }
    )
    out = out.sort_values(["key", "attempt"], kind="stable")
    records.results = conform("results", out.drop_duplicates(["key", "attempt"], keep="last"))


def _functions(run: Path, records: RunRecords) -> None:
    ct = _read(
        run,
        FUNCTIONS,
        ["group", "module", "qualname", "kind"],
        ("graph", "client", "prefix", "key", "n_ops", "n_tasks", "time"),
        records.accounting,
    )
    if ct is None:
        return
    text = ("group", "prefix", "key", "module", "qualname", "kind")
    df = _frame(
        ct, records.accounting, {**dict.fromkeys(text, "text"), "n_ops": "int", "n_tasks": "int"}
    )
    by = ["group", "prefix", "key", "module", "qualname", "kind", "n_ops"]
    # one row per (group or key, function), whatever the number of graphs that submitted it
    df = df.groupby(by, dropna=False, sort=True)["n_tasks"].sum(min_count=1).reset_index()
    records.functions = conform("functions", df)


def _submissions(run: Path, records: RunRecords) -> None:
    acct = records.accounting
    ct = _read(
        run,
        SUBMISSIONS,
        ["client", "file", "line", "time"],
        ("graph", "cell", "sha256", "cell_source", "frames"),
        acct,
    )
    if ct is None:
        return
    t = epoch_to_utc(pd.to_numeric(ct.get("time"), errors="coerce"))
    g = records.graphs
    # The graph.csv row written with the same client and time (the scheduler writes both at once).
    graphs = pd.DataFrame(
        {
            "client": g["client"].astype("str").to_numpy(),
            "us": g["time"].to_numpy(dtype="datetime64[us]").view("int64"),
            "graph": g["graph"].to_numpy(),
        }
    ).drop_duplicates(["client", "us"], keep="first")
    rows = pd.DataFrame(
        {
            "client": _text(ct, "client").to_numpy(),
            "us": t.to_numpy(dtype="datetime64[us]").view("int64"),
        }
    )
    m = rows.merge(graphs, on=["client", "us"], how="left")
    hit = m["graph"].notna().to_numpy() & t.notna().to_numpy()
    if (~hit).any():
        acct.drop(SUBMISSIONS, "matches no graph.csv row (client, time)", ct.lines[~hit])
    df = pd.DataFrame(
        {
            "graph": m["graph"].to_numpy(),
            "client": rows["client"],
            "file": _text(ct, "file"),
            "line": _ints(ct, "line"),
            "cell": _ints(ct, "cell"),
            "sha256": _text(ct, "sha256"),
            "cell_source": _json_cells(ct, "cell_source", acct),
            "frames": _ints(ct, "frames"),
        }
    )[hit]
    records.submissions = conform("submissions", df.sort_values("graph", kind="stable"))


def _arguments(run: Path, records: RunRecords) -> None:
    acct = records.accounting
    ct = _read(
        run, ARGUMENTS, ["key", "position", "type", "status"], ("size", "value", "time"), acct
    )
    if ct is None:
        return
    df = _frame(
        ct,
        acct,
        {
            "key": "text",
            "position": "text",
            "type": "text",
            "size": "int",
            "value": "json",
            "status": "text",
        },
    )
    dup = df.duplicated(["key", "position"], keep="first").to_numpy()
    if dup.any():
        acct.drop(ARGUMENTS, "the same key and position again (first kept)", ct.lines[dup])
        df = df[~dup]
    records.arguments = conform("arguments", df.sort_values(["key", "position"], kind="stable"))


def _fused_ops(run: Path, records: RunRecords) -> None:
    acct = records.accounting
    ct = _read(
        run,
        FUSED_OPS,
        ["group", "position", "name"],
        ("module", "qualname", "kind", "inputs", "time"),
        acct,
    )
    if ct is None:
        return
    text = ("name", "module", "qualname", "kind", "inputs")
    df = _frame(ct, acct, {"group": "text", "position": "int", **dict.fromkeys(text, "text")})
    bad = df["position"].isna().to_numpy()
    if bad.any():
        acct.drop(FUSED_OPS, "no operation position", ct.lines[bad])
        df = df[~bad]
    df = df.drop_duplicates(["group", "position"], keep="first")
    records.fused_ops = conform("fused_ops", df.sort_values(["group", "position"], kind="stable"))
