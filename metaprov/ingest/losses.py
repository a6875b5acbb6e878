"""Workers the scheduler lost, and what they took along -> ``worker_events``, ``lost_tasks``.

Input: ``records.worker_events`` (worker.csv's arrivals and removals), the scheduler's
transitions, the executions, and the capture's ``worker_loss.csv`` when there is one (Dask's own
``remove-worker`` event: whether Dask expected the removal, the keys it took along).
Output: each removal's reason, counts and ``lost`` flag in ``worker_events``; one row per task
a removal took along in ``lost_tasks``; ``workers.lost`` and ``workers.unrecorded``.

Without ``worker_loss.csv`` (Mofka runs), the tasks a removal took along are the scheduler's
transitions carrying the removal's stimulus id: ``processing -> released/erred`` (it was
running them), ``memory -> released`` (results held only there, computed again),
``memory -> forgotten/erred`` (data that cannot be computed again). A removal is a loss when it
took any of them, or when Dask did not expect it and the scheduler sent a task to processing
afterwards (the run went on without the worker).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from metaprov.ingest.csvread import read_csv
from metaprov.records import RunRecords, conform
from metaprov.timeutil import epoch_to_utc

NAME = "worker_loss.csv"

#: Stimulus names (the stimulus id without its time) -> the reason shown.
REASONS = {
    "handle-worker-cleanup": "connection closed",
    "check-worker-ttl": "heartbeat missed",
    "worker-send-comm-fail": "communication failed",
    "send-all-comm-fail": "communication failed",
    "retire-workers": "retired",
    "worker-close-gracefully": "retired",
    "worker-close": "closed",
    "close-worker": "closed",
    "scheduler-close": "scheduler closed",
}
_KINDS = (("processing", "processing"), ("recomputed", "result"), ("lost_data", "data"))


def read_worker_losses(run: Path, records: RunRecords) -> None:
    """Fill in why each worker left and what it took along (see the module's description)."""
    ev = records.worker_events
    captured = _read_loss_file(run, records)
    ev = _with_captured_removals(ev, captured)
    removed = ev["event"].eq("removed").fillna(False).to_numpy(dtype=bool)
    stim = ev["stimulus_id"].astype(object)
    lost_tasks = _lost_tasks(records, ev[removed], captured)
    counts = (
        lost_tasks.groupby(["worker", "time", "kind"]).size().unstack(fill_value=0)
        if len(lost_tasks)
        else pd.DataFrame()
    )
    n = {k: np.zeros(len(ev), dtype=np.int64) for _, k in _KINDS}
    for i in np.flatnonzero(removed):
        at = (ev["worker"].iat[i], ev["time"].iat[i])
        if at in counts.index:
            for _, k in _KINDS:
                n[k][i] = int(counts.loc[at].get(k, 0))
    known = removed & _counts_known(ev, records, captured)
    expected = _expected(ev, captured)
    went_on = _run_went_on(records, ev)
    took = (n["processing"] + n["result"] + n["data"]) > 0
    lost = removed & (took | (~expected.fillna(False).to_numpy(dtype=bool) & went_on))
    out = ev.assign(
        reason=[_reason(s) if r else None for s, r in zip(stim, removed, strict=True)],
        expected=expected,
        lost=pd.array(np.where(removed, lost, False), dtype="boolean"),
        n_processing=_where(known, n["processing"]),
        n_results=_where(known, n["result"]),
        n_data=_where(known, n["data"]),
        source=np.where(
            known,
            np.where(_captured_mask(ev, captured), NAME, "scheduler_transition.csv"),
            None,
        ),
    )
    records.worker_events = conform("worker_events", out)
    records.lost_tasks = conform("lost_tasks", lost_tasks)
    _mark_workers(records)


def _read_loss_file(run: Path, records: RunRecords) -> pd.DataFrame | None:
    """The capture's ``worker_loss.csv`` (None without one); rows whose key lists are not JSON
    lists of text are kept without their keys and counted."""
    path = run / NAME
    if not path.is_file():
        return None
    acct = records.accounting
    ct = read_csv(
        path,
        required=["worker", "time"],
        optional=["stimulus_id", "expected", "processing", "recomputed", "lost_data"],
        acct=acct,
    )
    if ct is None or not len(ct):
        return None
    time = epoch_to_utc(pd.to_numeric(ct.get("time"), errors="coerce"))
    bad_time = time.isna().to_numpy()
    if bad_time.any():
        acct.drop(NAME, "no time", ct.lines[bad_time], column="time")
    df = pd.DataFrame(
        {
            "worker": ct.get("worker").astype(object),
            "stimulus_id": ct.get("stimulus_id").astype(object),
            "expected": ct.get("expected").astype(object).map({"True": True, "False": False}),
            "time": time,
            "line": ct.lines,
        }
    )
    for col, _ in _KINDS:
        df[col] = [
            _keys(v, NAME, line, col, records)
            for v, line in zip(ct.get(col), ct.lines, strict=True)
        ]
    return df[~bad_time].reset_index(drop=True)


def _keys(value: object, name: str, line: int, col: str, records: RunRecords) -> list[str] | None:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value == "":
        return None
    try:
        keys = json.loads(str(value))
    except (ValueError, RecursionError):
        keys = None
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        records.accounting.warn(
            name, "not a JSON list of keys (kept without them)", line=line, column=col
        )
        return None
    return keys


def _with_captured_removals(ev: pd.DataFrame, captured: pd.DataFrame | None) -> pd.DataFrame:
    """Removals in worker_loss.csv that worker.csv lacks (its rows lost) are added."""
    if captured is None:
        return ev
    have = set(zip(ev["worker"].astype(object), ev["stimulus_id"].astype(object), strict=True))
    extra = captured[
        [
            (w, s) not in have
            for w, s in zip(captured["worker"], captured["stimulus_id"], strict=True)
        ]
    ]
    if not len(extra):
        return ev
    add = conform(
        "worker_events",
        pd.DataFrame(
            {
                "worker": extra["worker"],
                "event": "removed",
                "time": extra["time"],
                "stimulus_id": extra["stimulus_id"],
            }
        ),
    )
    return pd.concat([ev, add], ignore_index=True)


def _captured_mask(ev: pd.DataFrame, captured: pd.DataFrame | None) -> np.ndarray:
    if captured is None:
        return np.zeros(len(ev), dtype=bool)
    have = set(zip(captured["worker"], captured["stimulus_id"], strict=True))
    return np.array(
        [
            (w, s) in have
            for w, s in zip(
                ev["worker"].astype(object), ev["stimulus_id"].astype(object), strict=True
            )
        ],
        dtype=bool,
    )


def _lost_tasks(
    records: RunRecords, removals: pd.DataFrame, captured: pd.DataFrame | None
) -> pd.DataFrame:
    """One row per (removal, key taken along): from worker_loss.csv's key lists when it has
    them, else from the scheduler's transitions carrying the removal's stimulus id."""
    parts: list[pd.DataFrame] = []
    done: set[tuple[object, object]] = set()
    if captured is not None:
        for row in captured.itertuples(index=False):  # one row per removal: a handful
            lists = [getattr(row, col) for col, _ in _KINDS]
            if all(v is None for v in lists):
                continue
            done.add((row.worker, row.stimulus_id))
            for (_, kind), keys in zip(_KINDS, lists, strict=True):
                if keys:
                    parts.append(
                        pd.DataFrame(
                            {"worker": row.worker, "time": row.time, "key": keys, "kind": kind}
                        )
                    )
    tr = records.transitions
    todo = removals[
        [
            (w, s) not in done and isinstance(s, str) and s not in ("", "nan")
            for w, s in zip(
                removals["worker"].astype(object),
                removals["stimulus_id"].astype(object),
                strict=True,
            )
        ]
    ]
    if len(todo) and len(tr):
        sched = tr["observer"].eq("scheduler").fillna(False).to_numpy(dtype=bool)
        hit = sched & tr["stimulus_id"].isin(set(todo["stimulus_id"].astype(object))).to_numpy(
            dtype=bool
        )
        rows = tr[hit]
        frm = rows["from_state"].astype(object)
        to = rows["to_state"].astype(object)
        kind = np.select(
            [
                (frm == "processing") & to.isin(["released", "erred", "no-worker"]),
                (frm == "memory") & (to == "released"),
                (frm == "memory") & to.isin(["forgotten", "erred"]),
            ],
            ["processing", "result", "data"],
            default="",
        )
        keep = kind != ""
        by_stim = todo.drop_duplicates("stimulus_id").set_index("stimulus_id")
        stim = rows["stimulus_id"].astype(object)[keep]
        parts.append(
            pd.DataFrame(
                {
                    "worker": by_stim["worker"].reindex(stim).to_numpy(),
                    "time": by_stim["time"].reindex(stim).to_numpy(),
                    "key": rows["key"].astype(object)[keep].to_numpy(),
                    "kind": kind[keep],
                }
            )
        )
    if not parts:
        return conform("lost_tasks", pd.DataFrame())
    out = pd.concat(parts, ignore_index=True).drop_duplicates(["worker", "time", "key", "kind"])
    out = conform("lost_tasks", out)
    return out.assign(redone=_redone(records, out)).sort_values(
        ["time", "worker", "kind", "key"], kind="stable", ignore_index=True
    )


def _redone(records: RunRecords, lost: pd.DataFrame) -> pd.array:
    """Whether an execution of the key ended (else started) after the removal."""
    ex = records.executions
    if not len(ex) or not len(lost):
        return pd.array(np.zeros(len(lost), dtype=bool), dtype="boolean")
    when = ex["end"].fillna(ex["start"])
    last = when.groupby(ex["key"].astype(object)).max()
    after = last.reindex(lost["key"].astype(object)).to_numpy()
    t = lost["time"].to_numpy()
    ok = ~pd.isna(after)
    out = np.zeros(len(lost), dtype=bool)
    out[ok] = pd.to_datetime(after[ok], utc=True) > pd.to_datetime(t[ok], utc=True)
    return pd.array(out, dtype="boolean")


def _counts_known(
    ev: pd.DataFrame, records: RunRecords, captured: pd.DataFrame | None
) -> np.ndarray:
    """Counts are known from worker_loss.csv, or from the scheduler's transitions when the
    removal has a stimulus id and the transitions are there."""
    has_stim = np.array(
        [isinstance(s, str) and s not in ("", "nan") for s in ev["stimulus_id"].astype(object)],
        dtype=bool,
    )
    from_tr = has_stim & bool(len(records.transitions))
    return _captured_mask(ev, captured) | from_tr


def _expected(ev: pd.DataFrame, captured: pd.DataFrame | None) -> pd.array:
    out = pd.array([None] * len(ev), dtype="boolean")
    if captured is None or not len(ev):
        return out
    exp = {
        (w, s): e
        for w, s, e in zip(
            captured["worker"], captured["stimulus_id"], captured["expected"], strict=True
        )
        if isinstance(e, bool)
    }
    for i, (w, s) in enumerate(
        zip(ev["worker"].astype(object), ev["stimulus_id"].astype(object), strict=True)
    ):
        if (w, s) in exp:
            out[i] = exp[(w, s)]
    return out


def _run_went_on(records: RunRecords, ev: pd.DataFrame) -> np.ndarray:
    """Per event: the scheduler sent a task to processing after it."""
    tr = records.transitions
    if not len(tr) or not len(ev):
        return np.zeros(len(ev), dtype=bool)
    sent = tr["to_state"].eq("processing").fillna(False).to_numpy(dtype=bool) & tr["observer"].eq(
        "scheduler"
    ).fillna(False).to_numpy(dtype=bool)
    if not sent.any():
        return np.zeros(len(ev), dtype=bool)
    last = tr["time"][sent].max()
    return (ev["time"] < last).fillna(False).to_numpy(dtype=bool)


def _mark_workers(records: RunRecords) -> None:
    """``workers.lost`` and ``workers.unrecorded`` (executions seen by the scheduler only)."""
    w = records.workers
    ev = records.worker_events
    lost_at = set(ev.loc[ev["lost"].fillna(False).to_numpy(dtype=bool), "worker"].astype(object))
    ex = records.executions
    unrec = (
        ex.loc[ex["record_lost"].fillna(False).to_numpy(dtype=bool), "worker"]
        .astype(object)
        .value_counts()
    )
    extra = sorted((lost_at | set(unrec.index)) - set(w["address"].astype(object)))
    if extra:
        w = pd.concat([w, conform("workers", pd.DataFrame({"address": extra}))], ignore_index=True)
        w = w.sort_values("address", kind="stable", ignore_index=True)
    addr = w["address"].astype(object)
    records.workers = conform(
        "workers",
        w.assign(
            lost=pd.array(addr.isin(lost_at).to_numpy(), dtype="boolean"),
            unrecorded=pd.array(
                unrec.reindex(addr).fillna(0).to_numpy(dtype=np.int64), dtype="Int64"
            ),
        ),
    )


def _reason(stimulus: object) -> str | None:
    if not isinstance(stimulus, str) or stimulus in ("", "nan"):
        return None
    name = stimulus
    head, _, tail = stimulus.rpartition("-")
    if head and tail.replace(".", "", 1).isdigit():
        name = head
    return REASONS.get(name, name)


def _where(mask: np.ndarray, values: np.ndarray) -> pd.array:
    out = pd.array(values, dtype="Int64")
    out[~mask] = pd.NA
    return out
