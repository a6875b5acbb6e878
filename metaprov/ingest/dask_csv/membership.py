"""``worker.csv`` and ``client.csv`` -> when each worker or client joined and left."""

from __future__ import annotations

import pandas as pd

from metaprov.ingest.csvread import CsvTable
from metaprov.ingest.dask_csv.columns import _Clock, _drop_null_keys, _text, _time
from metaprov.records import Accounting, conform


def read_membership(
    ct: CsvTable, col: str, acct: Accounting, clock: _Clock | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """worker.csv / client.csv -> one row per id with first add and last remove time, and the
    events themselves (``id``, ``action``, ``time``, ``stimulus_id``) in file order."""
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
        {
            "id": _text(ct.get(col)),
            "action": action,
            "time": _time(ct, "time", acct, clock),
            "stimulus_id": _text(ct.get("stimulus_id")),
        }
    )[known]
    added = df[df["action"] == "add"].groupby("id")["time"].min()
    removed = df[df["action"] == "remove"].groupby("id")["time"].max()
    ids = pd.Index(sorted(set(df["id"])))
    table = pd.DataFrame(
        {"id": ids, "added": added.reindex(ids).array, "removed": removed.reindex(ids).array}
    )
    return table, df.reset_index(drop=True)


def membership_events(events: pd.DataFrame | None) -> pd.DataFrame:
    """worker.csv's rows as the ``worker_events`` table (arrivals and removals, in file order);
    :func:`metaprov.ingest.losses.read_worker_losses` adds why and what each removal took."""
    if events is None or not len(events):
        return conform("worker_events", pd.DataFrame())
    return conform(
        "worker_events",
        pd.DataFrame(
            {
                "worker": events["id"],
                "event": events["action"].map({"add": "added", "remove": "removed"}),
                "time": events["time"],
                "stimulus_id": events["stimulus_id"],
            }
        ),
    )
