"""A tiny run built in code for the mapping/writer/validator tests (no files involved).

Keys cover the IRI traps: a tuple key, '/', quotes, backslash, spaces and non-ASCII text. There is
a retried task (an erred attempt, then a successful one), a task that never ran, an execution whose
end was never seen, a two-key transfer between workers and a gather by the client (no destination).
"""

from __future__ import annotations

import pandas as pd

from metaprov.records import RunRecords, conform

T0 = 1_713_553_300.0

KEY_A = "a"
KEY_B = "('b-1f', 0)"
KEY_SLASH = "x/y z"
KEY_UNI = "ünï 'q' \"dq\" back\\slash 日本"
KEY_NEVER = "never"
KEY_ERR = "err"
KEY_CUT = "cut"
W1 = "tcp://10.0.0.1:4001"
W2 = "tcp://10.0.0.2:4002"
CLIENT = "Client-0001"
TH1 = 140_000_000_000_001
TH2 = 18_446_744_073_709_551_000  # near 2**64: must stay exact


def utc(seconds: list[float | None]) -> pd.Series:
    return pd.to_datetime(pd.Series(seconds, dtype="float64"), unit="s", utc=True).astype(
        "datetime64[us, UTC]"
    )


def tiny_records(path: str = "/runs/tiny") -> RunRecords:
    """The tiny run (fresh objects on every call)."""
    rec = RunRecords(path=path)
    keys = [KEY_A, KEY_B, KEY_SLASH, KEY_UNI, KEY_NEVER, KEY_ERR, KEY_CUT]
    rec.tasks = conform(
        "tasks",
        pd.DataFrame(
            {
                "key": keys,
                "prefix": ["a", "b", "x", "uni", "never", "err", "cut"],
                "group": ["a", "b-1f", "x/y z", "uni", "never", "err", "cut"],
                "graph": pd.array([0] * 7, dtype="Int64"),
                "client": [CLIENT] * 7,
                "state": [
                    "memory",
                    "memory",
                    "memory",
                    "memory",
                    "released",
                    "memory",
                    "processing",
                ],
                "worker": [W1, W1, W2, W2, None, W1, W2],
                "nbytes": pd.array([100, 200, 300, 400, None, 50, None], dtype="Int64"),
                "erred": [False, False, False, False, False, True, False],
                "retried": [False, False, False, False, False, True, False],
                "never_ran": [False, False, False, False, True, False, False],
                "wanted": [False, False, True, True, False, False, False],
            }
        ),
    )
    rec.executions = conform(
        "executions",
        pd.DataFrame(
            {
                "key": [KEY_A, KEY_B, KEY_SLASH, KEY_UNI, KEY_ERR, KEY_ERR, KEY_CUT],
                "attempt": pd.array([0, 0, 0, 0, 0, 1, 0], dtype="Int64"),
                "worker": [W1, W1, W2, W2, W1, W1, W2],
                "thread": pd.array([TH1, TH1, TH2, TH2, TH1, TH1, None], dtype="UInt64"),
                "start": utc([T0 + 1, T0 + 2, T0 + 4, T0 + 5, T0 + 1, T0 + 3, T0 + 6]),
                "end": utc([T0 + 1.5, T0 + 2.5, T0 + 4.25, T0 + 5.125, T0 + 1.2, T0 + 3.5, None]),
                "outcome": ["memory", "memory", "memory", "memory", "error", "memory", None],
                "time_source": ["worker"] * 7,
            }
        ),
    )
    rec.dependencies = conform(
        "dependencies",
        pd.DataFrame(
            {
                "graph": pd.array([0, 0, 0, 0, 0], dtype="Int64"),
                "key": [KEY_B, KEY_SLASH, KEY_SLASH, KEY_NEVER, KEY_SLASH],
                "dependency": [KEY_A, KEY_A, KEY_B, KEY_SLASH, KEY_A],  # last row: duplicate edge
            }
        ),
    )
    rec.transfers = conform(
        "transfers",
        pd.DataFrame(
            {
                "transfer": pd.array([0, 0, 1], dtype="Int64"),
                "key": [KEY_A, KEY_B, KEY_SLASH],
                "nbytes": pd.array([100, 200, 300], dtype="Int64"),
                "source": [W1, W1, W2],
                "destination": [W2, W2, None],
                "start": utc([T0 + 3, T0 + 3, T0 + 6]),
                "stop": utc([T0 + 3.25, T0 + 3.25, T0 + 6.5]),
                "duration": [0.25, 0.25, 0.5],
                "total": pd.array([300, 300, 300], dtype="Int64"),
                "bandwidth": [1200.0, 1200.0, 600.0],
                "n_keys": pd.array([2, 2, 1], dtype="Int64"),
                "logged_by": ["both", "both", "outgoing"],
            }
        ),
    )
    rec.transitions = conform(
        "transitions",
        pd.DataFrame(
            {
                "key": [KEY_A, KEY_A, KEY_A, KEY_ERR],
                "observer": ["scheduler", "worker", "worker", "worker"],
                "address": ["tcp://10.0.0.9:8786", W1, W1, W1],
                "from_state": ["released", "ready", "executing", "executing"],
                "to_state": ["waiting", "executing", "memory", "error"],
                "time": utc([T0 + 0.5, T0 + 1, T0 + 1.5, T0 + 1.2]),
                "stimulus_id": ["update-graph-1", None, None, None],
                "line": pd.array([2, 2, 3, 4], dtype="Int64"),
            }
        ),
    )
    rec.graphs = conform(
        "graphs",
        pd.DataFrame(
            {
                "graph": pd.array([0], dtype="Int64"),
                "client": [CLIENT],
                "time": utc([T0]),
                "n_wanted": pd.array([2], dtype="Int64"),
                "n_tasks": pd.array([7], dtype="Int64"),
                "n_edges": pd.array([4], dtype="Int64"),
            }
        ),
    )
    rec.workers = conform(
        "workers",
        pd.DataFrame(
            {
                "address": [W1, W2],
                "host": ["10.0.0.1", "10.0.0.2"],
                "added": utc([T0 - 1, T0 - 1]),
                "threads": pd.array([2, 2], dtype="Int64"),
                "memory_limit": pd.array([2**33, 2**33], dtype="Int64"),
            }
        ),
    )
    rec.clients = conform("clients", pd.DataFrame({"client": [CLIENT], "added": utc([T0 - 2])}))
    rec.threads = conform(
        "threads",
        pd.DataFrame(
            {
                "worker": [W1, W2],
                "thread": pd.array([TH1, TH2], dtype="UInt64"),
                "n_tasks": pd.array([4, 2], dtype="Int64"),
            }
        ),
    )
    rec.configs = conform(
        "configs",
        pd.DataFrame(
            {
                "name": ["config.txt", "123.pbs.OU"],
                "kind": ["darshan", "job-output"],
                "sha256": ["ab" * 32, "cd" * 32],
                "size": pd.array([12, 34], dtype="Int64"),
                "text": ['MODMEM 4\n"quoted"\\', ""],
            }
        ),
    )
    rec.job = {
        "id": "123",
        "server": "pbs01",
        "user": "alice",
        "nodes": {"worker": ["node-a"], "scheduler": ["node-s"]},
    }
    rec.scheduler = {"address": "tcp://10.0.0.9:8786"}
    rec.software = {"python": "3.11", "dask": "2024.4.1"}
    rec.run_id = "tiny0001"
    return rec


def recomputed_records() -> RunRecords:
    """The tiny run (run id ``tiny0002``) where ``a`` was computed again (a worker lost it:
    attempt 1, 7 s .. 12 s, longer than the first) and ``x/y z`` then ran again from it (attempt 1
    at 13 s); ``b`` kept the result of the first ``a``; ``never`` depends on ``x/y z``."""
    rec = tiny_records("/runs/tiny-recomputed")
    again = pd.DataFrame(
        {
            "key": [KEY_A, KEY_SLASH],
            "attempt": pd.array([1, 1], dtype="Int64"),
            "worker": [W2, W1],
            "start": utc([T0 + 7, T0 + 13]),
            "end": utc([T0 + 12, T0 + 13.5]),
            "outcome": ["memory", "memory"],
            "time_source": ["worker", "worker"],
        }
    )
    rec.executions = conform("executions", pd.concat([rec.executions, again], ignore_index=True))
    rec.run_id = "tiny0002"
    return rec


def partial_records() -> RunRecords:
    """Only graph.csv + worker_transfer.csv content, as in most ImageProcessing runs."""
    full = tiny_records("/runs/partial")
    rec = RunRecords(path="/runs/partial")
    rec.graphs = full.graphs
    rec.dependencies = full.dependencies
    rec.transfers = full.transfers
    rec.tasks = conform("tasks", full.tasks[["key", "prefix", "group", "graph", "client"]])
    rec.missing = ["scheduler_transition.csv", "worker_transition.csv", "worker.csv", "client.csv"]
    return rec
