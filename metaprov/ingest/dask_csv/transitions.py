"""``scheduler_transition.csv`` and ``worker_transition.csv`` -> :class:`_Trans` (codes and times).

Exact duplicate rows (a plugin that logged a transition twice) are dropped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from metaprov.ingest.csvread import CsvTable
from metaprov.ingest.dask_csv.columns import (
    _Clock,
    _Col,
    _drop_null_keys,
    _enc,
    _float,
    _Threads,
    _uint64,
    _us,
)
from metaprov.ingest.dask_csv.order import _first_of_group, _in_time_order, _row_groups
from metaprov.records import Accounting
from metaprov.timeutil import NAT_US as _NAT


@dataclass
class _Trans:
    """One transition file as codes and numbers (times in int64 microseconds)."""

    observer: str
    key: _Col
    address: _Col
    from_state: _Col
    to_state: _Col
    stimulus_id: _Col
    time: np.ndarray
    line: np.ndarray
    thread: _Threads
    # scheduler only
    worker: _Col | None = None
    prefix: _Col | None = None
    group: _Col | None = None
    begins: np.ndarray | None = None
    ends: np.ndarray | None = None
    size: np.ndarray | None = None
    n: int = 0
    gkey: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # run-wide key codes
    tkey: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # transitions' codes

    def __len__(self) -> int:
        return self.n

    def release(self) -> None:
        """Drop every column (the row count stays)."""
        for name in self.__dataclass_fields__:
            if name not in ("observer", "n"):
                setattr(self, name, None)


def read_transitions(
    ct: CsvTable, observer: str, acct: Accounting, clock: _Clock | None = None
) -> _Trans:
    """scheduler_transition.csv / worker_transition.csv -> codes and numbers."""
    ct = _drop_null_keys(ct, "key", acct)
    # (the order of the calls is the order of the findings they may report)
    tr = _Trans(
        observer=observer,
        key=_enc(ct, "key"),
        address=_enc(ct, "called_from"),
        from_state=_enc(ct, "start"),
        to_state=_enc(ct, "finish"),
        time=_us(ct, "time", acct, clock),
        stimulus_id=_enc(ct, "stimulus_id"),
        line=ct.lines.astype(np.int64),
        thread=_uint64(ct, "thread", acct),
        n=len(ct),
    )
    if observer == "scheduler":
        tr.worker = _enc(ct, "worker")
        tr.prefix = _enc(ct, "prefix")
        tr.group = _enc(ct, "group")
        tr.begins = _us(ct, "begins", acct, clock)
        tr.ends = _us(ct, "ends", acct, clock)
        tr.size = _float(ct, "size", acct)
    dup = _exact_duplicates(tr)
    if dup.any():
        acct.drop(
            ct.name,
            "duplicate row (identical to an earlier row in every column read, time included; "
            "a log entry written twice)",
            tr.line[dup],
        )
        tr = _take_rows(tr, np.flatnonzero(~dup))
    return tr


def _exact_duplicates(tr: _Trans) -> np.ndarray:
    """Per row: is it a copy of an earlier row (same key, states, stimulus, address, thread,
    time to the microsecond and, for the scheduler, worker, prefix, group, begins, ends, size)?

    A task cannot make the same transition twice at the same microsecond, so such a row is the
    same log entry written twice; counted as a retry, it would invent an execution. Only rows
    whose time equals another row's are compared in full (one pass when the file is in time
    order, as logs are).
    """
    t = tr.time
    n = len(t)
    dup = np.zeros(n, dtype=bool)
    if n < 2:
        return dup
    order = None if _in_time_order(t) else np.argsort(t, kind="stable")
    ts = t if order is None else t[order]
    same = (ts[1:] == ts[:-1]) & (ts[1:] != _NAT)
    if not same.any():
        return dup
    cand_sorted = np.r_[same, False] | np.r_[False, same]
    cand = np.flatnonzero(cand_sorted) if order is None else np.sort(order[cand_sorted])
    cols = [
        t[cand],
        tr.key.codes[cand],
        tr.address.codes[cand],
        tr.from_state.codes[cand],
        tr.to_state.codes[cand],
        tr.stimulus_id.codes[cand] if len(tr.stimulus_id.codes) else np.zeros(len(cand), int),
        tr.thread.values[cand].view(np.int64),
        tr.thread.na[cand].astype(np.int64),
    ]
    if tr.worker is not None:
        cols += [tr.worker.codes[cand], tr.prefix.codes[cand], tr.group.codes[cand]]
        cols += [tr.begins[cand], tr.ends[cand], tr.size[cand].view(np.int64)]
    # group ids of the candidates: rows equal in every column share one
    gid = _row_groups([np.unique(c, return_inverse=True)[1].reshape(-1) for c in cols])
    dup[cand[~_first_of_group(gid)]] = True
    return dup


def _take_rows(tr: _Trans, idx: np.ndarray) -> _Trans:
    """The rows ``idx`` of a transition file (every column)."""
    out = _Trans(
        observer=tr.observer,
        key=tr.key.take(idx),
        address=tr.address.take(idx),
        from_state=tr.from_state.take(idx),
        to_state=tr.to_state.take(idx),
        stimulus_id=tr.stimulus_id.take(idx),
        time=tr.time[idx],
        line=tr.line[idx],
        thread=tr.thread.take(idx),
        n=len(idx),
    )
    if tr.worker is not None:
        assert tr.prefix is not None and tr.group is not None
        out.worker, out.prefix, out.group = (
            tr.worker.take(idx),
            tr.prefix.take(idx),
            tr.group.take(idx),
        )
        out.begins, out.ends, out.size = tr.begins[idx], tr.ends[idx], tr.size[idx]
    return out
