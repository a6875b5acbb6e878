"""Mofka-Dask CSV files (and the metaprov capture's output) -> RunRecords tables.

Input: the six CSV files of a run directory (any subset): ``scheduler_transition.csv``,
``worker_transition.csv``, ``worker_transfer.csv``, ``graph.csv``, ``worker.csv``, ``client.csv``.
Output: the ``tasks``, ``executions``, ``transitions``, ``transfers``, ``dependencies``,
``graphs``, ``workers``, ``clients`` and ``threads`` tables of :class:`RunRecords`.

All work is columnar and keyed by integers: every text column is dictionary-encoded once (Arrow),
keys get one sorted index for the whole run, and every join, sort, de-duplication and per-task
figure works on those integer codes. Text columns of the output tables are cut from the
dictionaries at the end. Each file is turned into codes right after it is read, and its Arrow
table is freed then, so memory holds one raw file at a time.

The modules, in the order :func:`read_dask_csvs` uses them: :mod:`.columns` (reading a file,
typed columns), :mod:`.order` (sorting and grouping over codes), one reader per file
(:mod:`.transitions`, :mod:`.transfers`, :mod:`.graphs`, :mod:`.membership`), then
:mod:`.consolidate` (the run's tables) and :mod:`.keys` (partitions, the run id).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from metaprov.ingest.csvread import RowSelection
from metaprov.ingest.dask_csv.columns import (
    PLAUSIBLE_SPAN_US,
    SPECS,
    _Clock,
    _Deferred,
    _index_str,
    _read,
    _release_memory,
    _str,
)
from metaprov.ingest.dask_csv.consolidate import consolidate, key_split
from metaprov.ingest.dask_csv.graphs import read_graphs
from metaprov.ingest.dask_csv.keys import KeySelection, fnv64, run_id, run_id_of_facts
from metaprov.ingest.dask_csv.membership import membership_events, read_membership
from metaprov.ingest.dask_csv.transfers import read_transfers
from metaprov.ingest.dask_csv.transitions import _Trans, read_transitions
from metaprov.records import RunRecords, conform

__all__ = [
    "CSV_FILES",
    "PLAUSIBLE_SPAN_US",
    "SPECS",
    "KeySelection",
    "consolidate",
    "fnv64",
    "key_split",
    "read_dask_csvs",
    "read_graphs",
    "read_membership",
    "read_transfers",
    "read_transitions",
    "run_id",
    "run_id_of_facts",
]

CSV_FILES = (
    "scheduler_transition.csv",
    "worker_transition.csv",
    "worker_transfer.csv",
    "graph.csv",
    "worker.csv",
    "client.csv",
)


def read_dask_csvs(
    run: Path, records: RunRecords, progress: Any = None, keys: KeySelection | None = None
) -> None:
    """Read the six CSV files of ``run`` into ``records`` (missing files are recorded).

    ``keys``: read one partition of the run's keys only (see :class:`KeySelection`).
    """
    acct = records.accounting
    later: list[_Deferred] = []  # findings about the files' content, reported after the reads

    def step(name: str, fn: Any, select: RowSelection | None = None) -> Any:
        # read one file and turn it into codes at once: its table is freed before the next read
        ct = _read(run, name, acct, select)
        if progress is not None:
            progress.update(1)
        later.append(_Deferred())
        out = fn(ct, later[-1]) if ct is not None else None
        del ct
        _release_memory()
        return out

    clock = _Clock()  # every time is checked against the first file's (see _Clock)
    transfer_keys = graphs = None
    if keys is not None:
        # a partition learns its tasks' dependencies from the graph before reading transitions
        out = step("graph.csv", lambda ct, d: read_graphs(ct, d, clock))
        if out is not None:
            records.graphs, graphs = out
            keys.learn(graphs)

    def transitions(name: str, observer: str) -> _Trans | None:
        if keys is None:
            return step(name, lambda ct, d: read_transitions(ct, observer, d, clock))
        if not keys.transitions:
            return None
        return step(
            name,
            lambda ct, d: read_transitions(keys.reencode(ct), observer, d, clock),
            keys.selection(),
        )

    sched = transitions("scheduler_transition.csv", "scheduler")
    work = transitions("worker_transition.csv", "worker")
    out = step("worker_transfer.csv", lambda ct, d: read_transfers(ct, d, clock))
    if out is not None:
        records.transfers, transfer_keys = out
    if keys is None:
        out = step("graph.csv", lambda ct, d: read_graphs(ct, d, clock))
        if out is not None:
            records.graphs, graphs = out
    workers = step("worker.csv", lambda ct, d: read_membership(ct, "worker", d, clock))
    workers, worker_events = workers if workers is not None else (None, None)
    clients = step("client.csv", lambda ct, d: read_membership(ct, "client", d, clock))
    clients = clients[0] if clients is not None else None
    for d in later:
        d.replay(acct)
    records.missing = [n for n in CSV_FILES if not (run / n).exists()]

    if sched is not None and len(sched):
        address = _scheduler_address(sched)
        if address is not None:
            records.scheduler["address"] = address
    records.workers = _workers_table(records, workers, sched, work)
    records.clients = _clients_table(records, clients)
    consolidate(records, sched, work, graphs, transfer_keys)
    records.worker_events = membership_events(worker_events)


def _scheduler_address(sched: _Trans) -> str | None:
    """The address the scheduler's rows name most often."""
    counts = pd.Series(
        pd.Categorical.from_codes(
            sched.address.codes,
            dtype=pd.CategoricalDtype(_index_str(sched.address.cats)),
            validate=False,
        )
    ).value_counts()
    if len(counts) and counts.iloc[0] > 0:
        return str(counts.index[0])
    return None


def _workers_table(
    records: RunRecords,
    workers: pd.DataFrame | None,
    sched: _Trans | None,
    work: _Trans | None,
) -> pd.DataFrame:
    """Workers: from worker.csv, plus every address that logged or ran something."""
    seen = [
        workers["id"] if workers is not None else None,
        _str(work.address.cats) if work is not None and len(work) else None,
        _str(sched.worker.cats) if sched is not None and len(sched) else None,
        records.transfers["source"],
        records.transfers["destination"],
    ]
    addrs = (
        sorted(
            set(
                pd.concat([s for s in seen if s is not None and len(s)], ignore_index=True)
                .dropna()
                .astype(str)
                .unique()
            )
        )
        if any(s is not None and len(s) for s in seen)
        else []
    )
    wdf = pd.DataFrame({"address": pd.Series(addrs, dtype=object)})
    if workers is not None:
        right = workers.rename(columns={"id": "address"})
        right["address"] = right["address"].astype(object)
        wdf = wdf.merge(right, on="address", how="left")
    wdf["host"] = wdf["address"].str.extract(r"^[a-z]+://\[?([^\]/]+?)\]?:\d+$", expand=False)
    return conform("workers", wdf)


def _clients_table(records: RunRecords, clients: pd.DataFrame | None) -> pd.DataFrame:
    """Clients: from client.csv, plus every client that submitted a graph."""
    cl = sorted(
        set(clients["id"])
        if clients is not None
        else set() | set(records.graphs["client"].dropna().astype(str))
    )
    cl = sorted(set(cl) | set(records.graphs["client"].dropna().astype(str)))
    # object columns on both sides, also when a file holds its header only (a run in progress)
    cdf = pd.DataFrame({"client": pd.Series(cl, dtype=object)})
    if clients is not None:
        right = clients.rename(columns={"id": "client"})
        right["client"] = right["client"].astype(object)
        cdf = cdf.merge(right, on="client", how="left")
    return conform("clients", cdf)
