"""Naive baselines, measured beside metaprov in the same benchmark run.

Input: a run directory (read baseline) or an N-Triples file (export baseline).
Output: per-task dicts (read) or a serialised rdflib graph (export), plus counts.

These reproduce how earlier tools did the work, so that a speed-up is measured on this machine,
under the same load, rather than quoted:

* :func:`consolidate` reads the Mofka-Dask CSVs with pandas, then walks every row with
  ``df.iloc[i]``, builds one Python dict per event and a dict per task, parses the key/dependency
  literals cell by cell and de-duplicates re-sent transfer rows with a set of tuples. (Earlier tools
  called ``eval`` on those cells; this baseline uses ``ast.literal_eval``, which is slower, never
  faster, so the comparison does not flatter metaprov.)
* :func:`rdflib_export` builds an in-memory rdflib ``Graph`` of the same triples (``Graph.parse``
  adds them one by one) and serialises it.

Never use this module for real work: it is deliberately the slow path.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pandas as pd


def _key(value: Any) -> str:
    return str(value)


def consolidate(run: str | Path) -> dict[str, Any]:
    """Per-row consolidation of a run directory, the way earlier tools did it.

    Args:
        run: the run directory.

    Returns:
        ``{"tasks": {key: dict}, "transfers": [dict], "workers": {...}, "clients": {...},
        "rows": int}``; ``rows`` counts the CSV rows visited.
    """
    run = Path(run)
    tasks: dict[str, dict[str, Any]] = {}
    rows = 0

    def task(key: str) -> dict[str, Any]:
        t = tasks.get(key)
        if t is None:
            t = {"key": key, "transitions": [], "executions": [], "dependencies": [], "graph": None}
            tasks[key] = t
        return t

    path = run / "scheduler_transition.csv"
    if path.exists():
        df = pd.read_csv(path, index_col=0)
        for i in range(len(df)):
            row = df.iloc[i]
            event = {
                "observer": "scheduler",
                "key": row["key"],
                "from": row["start"],
                "to": row["finish"],
                "time": float(row["time"]),
                "stimulus": row["stimulus_id"],
                "address": row["called_from"],
            }
            t = task(event["key"])
            t["transitions"].append(event)
            t["prefix"] = row["prefix"]
            t["group"] = row["group"]
            if event["to"] in ("memory", "erred") and not pd.isna(row["thread"]):
                t["worker"] = row["worker"]
                t["thread"] = int(row["thread"])
                t["begins"] = float(row["begins"])
                t["ends"] = float(row["ends"])
                t["nbytes"] = None if pd.isna(row["size"]) else int(row["size"])
            t["state"] = event["to"]
            rows += 1

    path = run / "worker_transition.csv"
    if path.exists():
        df = pd.read_csv(path, index_col=0)
        for i in range(len(df)):
            row = df.iloc[i]
            event = {
                "observer": "worker",
                "key": row["key"],
                "from": row["start"],
                "to": row["finish"],
                "time": float(row["time"]),
                "address": row["called_from"],
            }
            t = task(event["key"])
            t["transitions"].append(event)
            if event["from"] == "ready" and event["to"] == "executing":
                t["executions"].append(
                    {"worker": event["address"], "start": event["time"], "end": None}
                )
            elif event["from"] == "executing" and t["executions"]:
                t["executions"][-1]["end"] = event["time"]
                t["executions"][-1]["outcome"] = event["to"]
            rows += 1

    transfers: list[dict[str, Any]] = []
    path = run / "worker_transfer.csv"
    if path.exists():
        df = pd.read_csv(path, index_col=0)
        seen: set[tuple[Any, ...]] = set()
        for _, row in df.iterrows():
            rows += 1
            ident = tuple(row.drop(labels=["time"]).astype(str))
            if ident in seen:
                continue
            seen.add(ident)
            keys = ast.literal_eval(row["keys"])
            for k, nbytes in keys.items():
                transfers.append(
                    {
                        "key": _key(k),
                        "nbytes": int(nbytes),
                        "type": row["type"],
                        "who": row["who"],
                        "by": row["called_from"],
                        "start": float(row["start"]),
                        "stop": float(row["stop"]),
                    }
                )
                task(_key(k)).setdefault("transfers", []).append(transfers[-1])

    path = run / "graph.csv"
    if path.exists():
        df = pd.read_csv(path, index_col=0)
        for g in range(len(df)):
            row = df.iloc[g]
            rows += 1
            deps = ast.literal_eval(row["dependencies"])
            for k, ds in deps.items():
                t = task(_key(k))
                if t["graph"] is None:
                    t["graph"] = g
                    t["client"] = row["client"]
                t["dependencies"].extend(_key(d) for d in ds)
            for k in ast.literal_eval(row["keys"]):
                task(_key(k))["wanted"] = True

    workers: dict[str, dict[str, Any]] = {}
    clients: dict[str, dict[str, Any]] = {}
    for name, table, col in (("worker.csv", workers, "worker"), ("client.csv", clients, "client")):
        path = run / name
        if path.exists():
            for _, row in pd.read_csv(path, index_col=0).iterrows():
                rows += 1
                table.setdefault(row[col], {})[str(row["action"])] = float(row["time"])

    return {
        "tasks": tasks,
        "transfers": transfers,
        "workers": workers,
        "clients": clients,
        "rows": rows,
    }


def rdflib_export(ntriples: str | Path, out: str | Path, format: str = "nt") -> int:
    """Build an in-memory rdflib graph from an N-Triples file, then serialise it.

    Args:
        ntriples: input N-Triples file (e.g. metaprov's own export of the same run).
        out: output file.
        format: rdflib serialiser name (``nt``, ``turtle``, ``json-ld``, ``nquads``...).

    Returns:
        The number of triples in the graph.
    """
    from rdflib import Graph

    g = Graph()
    g.parse(str(ntriples), format="nt")
    g.serialize(destination=str(out), format=format, encoding="utf-8")
    return len(g)
