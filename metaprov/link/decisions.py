"""What the link decides for each segment, kept as arrays, and the tables made from it.

:class:`Decisions` holds one row per Darshan segment (status, rule, reason, the execution it
belongs to, the clock that decided and its fitted offset, the candidates of an ambiguous one);
the stages of :func:`metaprov.link.link_io` fill it, each for the segments it decides.
:func:`links_table`, :func:`processes_table` and :func:`accounting` turn it into the
``darshan_links`` and ``darshan_processes`` tables and the counts.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from metaprov.records import STR, conform
from metaprov.timeutil import utc_to_us

STATUSES = ("linked", "process", "ambiguous", "unlinked")

#: microseconds per second: every time of the link is int64 µs
US = 1_000_000


def codes_to_str(codes: np.ndarray, texts: list[str | None]) -> pd.Series:
    """A string column from integer codes into ``texts`` (None: missing)."""
    dictionary = pa.array(texts, type=pa.string())
    arr = pa.DictionaryArray.from_arrays(pa.array(np.asarray(codes, dtype=np.int32)), dictionary)
    return pd.Series(pd.array(arr.dictionary_decode(), dtype=STR))


class Labels:
    """One text label per segment, kept as integer codes (a few distinct texts, 10^6 rows)."""

    def __init__(self, n: int, default: str | None = None) -> None:
        self.texts: list[str] = []
        self._code: dict[str, int] = {}
        self.codes = np.full(n, -1, np.int32)
        if default is not None:
            self.codes[:] = self.code(default)

    def code(self, text: str) -> int:
        if text not in self._code:
            self._code[text] = len(self.texts)
            self.texts.append(text)
        return self._code[text]

    def set(self, where: np.ndarray, text: str) -> None:
        if np.size(where):
            self.codes[where] = self.code(text)

    def set_each(self, where: np.ndarray, texts: np.ndarray) -> None:
        """One text per position (a few distinct ones)."""
        if np.size(where):
            uniq, inv = np.unique(np.asarray(texts, dtype=str), return_inverse=True)
            codes = np.array([self.code(str(u)) for u in uniq], dtype=np.int32)
            self.codes[where] = codes[inv]

    def column(self) -> pd.Series:
        return codes_to_str(np.where(self.codes < 0, 0, self.codes), self.texts or [""])


class Decisions:
    """The outcome of every segment (integer codes and numbers: fast at 10^6 rows).

    ``decide`` gives segments a status, rule and reason; ``link`` also the execution (an index
    into the usable executions), the clock that decided and its fitted offset (s) with its
    uncertainty; ``candidates`` records (segment, execution) pairs of ambiguous segments;
    ``shift`` is the Darshan clock offset (s) subtracted from each segment's times in the output.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.status = Labels(n)
        self.rule = Labels(n)
        self.reason = Labels(n, default="")
        self.clock = Labels(n, default="")
        self.execution = np.full(n, -1, np.int64)
        self.offset = np.full(n, np.nan)
        self.uncertainty = np.full(n, np.nan)
        self.shift = np.zeros(n, np.float64)
        self.cand_seg: list[np.ndarray] = []
        self.cand_ex: list[np.ndarray] = []

    def decide(self, idx: np.ndarray, status: str, rule: str, reason: str | None = None) -> None:
        self.status.set(idx, status)
        self.rule.set(idx, rule)
        if reason is not None:
            self.reason.set(idx, reason)

    def link(
        self,
        idx: np.ndarray,
        execution: np.ndarray,
        rule: str,
        clock: str | np.ndarray,
        offset: float | np.ndarray,
        uncertainty: float | np.ndarray,
        reason: str | None = None,
    ) -> None:
        self.execution[idx] = execution
        self.decide(idx, "linked", rule, reason)
        if isinstance(clock, str):
            self.clock.set(idx, clock)
        else:
            self.clock.set_each(idx, clock)
        self.offset[idx] = offset
        self.uncertainty[idx] = uncertainty

    def candidates(self, seg: np.ndarray, ex: np.ndarray) -> None:
        self.cand_seg.append(seg)
        self.cand_ex.append(ex)

    def undecided(self) -> np.ndarray:
        return self.status.codes < 0


def candidates_column(d: Decisions, ex: pd.DataFrame) -> pd.Series:
    """For each ambiguous segment, its candidate task executions as a JSON list of keys (with
    ``#attempt`` when the key ran more than once), in the order they ran."""
    n = d.n
    out = pd.Series(pd.array([None] * n, dtype=STR))
    if not d.cand_seg or not n:
        return out
    sg = np.concatenate(d.cand_seg)
    ce = np.concatenate(d.cand_ex)
    amb = d.status.codes[sg] == d.status.code("ambiguous")
    sg, ce = sg[amb], ce[amb]
    if not len(sg):
        return out
    pairs = pd.DataFrame({"seg": sg, "ex": ce}).drop_duplicates()
    start = ex["start"].to_numpy()[pairs["ex"].to_numpy()]
    pairs = pairs.assign(start=start).sort_values(["seg", "start", "ex"], kind="stable")
    keys = ex["key"].astype(str).to_numpy()[pairs["ex"].to_numpy()]
    att = ex["attempt"].fillna(0).astype("int64").to_numpy()[pairs["ex"].to_numpy()]
    label = np.where(
        att > 0, np.char.add(np.char.add(keys.astype(str), "#"), att.astype(str)), keys
    )
    texts = (
        pd.Series(label, index=pairs["seg"].to_numpy())
        .groupby(level=0, sort=True)
        .agg(lambda v: json.dumps(list(v), ensure_ascii=False))
    )
    out.iloc[texts.index.to_numpy()] = texts.to_numpy()
    return out


def links_table(
    segments: pd.DataFrame,
    seg_log: np.ndarray,
    seg_start: np.ndarray,
    seg_end: np.ndarray,
    logs: pd.DataFrame,
    worker_col: np.ndarray,
    ex: pd.DataFrame,
    d: Decisions,
    *,
    notes: list[str] | None = None,
) -> pd.DataFrame:
    """The ``darshan_links`` table: one row per segment, times on the run's clock.

    A segment linked to an execution happened during it; its corrected times can still lie a
    little outside the window (the tolerance rule accepts up to the tolerance, and the offset is
    one estimate within its uncertainty): they are clipped into the window, so an I/O usage
    never ends after its execution, and ``notes`` gets how many and by how much (issue 25).
    """
    n = d.n
    link_ex = d.execution
    has_link = link_ex >= 0
    key_arr = pa.array(ex["key"].astype(STR).array)  # Arrow-backed: no Python strings
    if isinstance(key_arr, pa.ChunkedArray):
        key_arr = key_arr.combine_chunks()
    take = pa.array(np.where(has_link, link_ex, 0), mask=~has_link)
    attempts = ex["attempt"].to_numpy(dtype="float64", na_value=np.nan)
    att = np.full(n, np.nan)
    att[has_link] = attempts[link_ex[has_link]]
    pid_arr = logs["pid"].to_numpy(dtype="float64", na_value=np.nan)
    host_list = [None if pd.isna(h) else str(h) for h in logs["hostname"].tolist()]
    corr = np.rint(d.shift * US).astype(np.int64)
    start_c = seg_start - corr
    end_c = seg_end - corr
    if has_link.any() and len(ex):
        li = link_ex[has_link]
        lo = utc_to_us(ex["start"])[li]
        ends = ex["end"]
        hi = np.where(
            ends.isna().to_numpy()[li],
            np.iinfo(np.int64).max,
            utc_to_us(ends.fillna(ex["start"]))[li],
        )
        s0, e0 = start_c[has_link], end_c[has_link]
        s1, e1 = np.clip(s0, lo, hi), np.clip(e0, lo, hi)
        moved = np.maximum(np.abs(s1 - s0), np.abs(e1 - e0))
        if (moved > 0).any() and notes is not None:
            notes.append(
                f"{int((moved > 0).sum())} linked segment(s) lay partly outside their "
                f"execution's window after the clock correction (by at most "
                f"{int(moved.max())} µs, within the linking tolerance or the offset's "
                "uncertainty): their times are clipped into the window"
            )
        start_c[has_link], end_c[has_link] = s1, e1
    pid_seg = pid_arr[seg_log] if n else np.zeros(0)
    links = pd.DataFrame(
        {
            "segment": np.arange(n, dtype=np.int64),
            "log": segments["log"].reset_index(drop=True),
            "pthread": segments["pthread"].reset_index(drop=True),
            "status": d.status.column(),
            "rule": d.rule.column(),
            "reason": d.reason.column(),
            "key": pd.Series(pd.array(key_arr.take(take), dtype=STR)),
            "attempt": pd.array(att, dtype="Float64").astype("Int64"),
            "worker": codes_to_str(seg_log, list(worker_col)),
            "pid": pd.array(pid_seg, dtype="Float64").astype("Int64"),
            "host": codes_to_str(seg_log, host_list),
            "start": pd.Series(start_c.view("datetime64[us]")).dt.tz_localize("UTC"),
            "end": pd.Series(end_c.view("datetime64[us]")).dt.tz_localize("UTC"),
            "clock": d.clock.column(),
            "clock_offset": d.offset,
            "offset_uncertainty": d.uncertainty,
            "candidates": candidates_column(d, ex),
        }
    )
    return conform("darshan_links", links)


def processes_table(
    logs: pd.DataFrame,
    seg_log: np.ndarray,
    status: Labels,
    proc_rows: dict[int, dict[str, Any]],
    worker_col: np.ndarray,
) -> pd.DataFrame:
    """The ``darshan_processes`` table: one row per log, its worker, offsets and counts."""
    nlog = len(logs)
    counts = {}
    for s in STATUSES:
        mask = status.codes == status.code(s)
        counts[s] = np.bincount(seg_log[mask], minlength=nlog) if len(seg_log) else np.zeros(nlog)
    total = np.bincount(seg_log, minlength=nlog) if len(seg_log) else np.zeros(nlog, int)
    df = pd.DataFrame(
        {
            "log": logs["log"],
            "role": logs["role"],
            "pid": logs["pid"],
            "host": logs["hostname"],
            "worker": pd.array(worker_col, dtype=STR),
            "votes": [proc_rows.get(i, {}).get("votes") for i in range(nlog)],
            "clock_offset": [proc_rows.get(i, {}).get("clock_offset") for i in range(nlog)],
            "offset_low": [proc_rows.get(i, {}).get("offset_low") for i in range(nlog)],
            "offset_high": [proc_rows.get(i, {}).get("offset_high") for i in range(nlog)],
            "offset_note": [proc_rows.get(i, {}).get("offset_note", "") for i in range(nlog)],
            "n_segments": total,
            "n_linked": counts["linked"],
            "n_process": counts["process"],
            "n_ambiguous": counts["ambiguous"],
            "n_unlinked": counts["unlinked"],
        }
    )
    for c in ("votes",):
        df[c] = pd.array(df[c].tolist(), dtype="Int64")
    for c in ("clock_offset", "offset_low", "offset_high"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return conform("darshan_processes", df)


def accounting(links: pd.DataFrame, n_logs: int) -> dict[str, Any]:
    """Counts of the links: by status, rule, reason and deciding clock."""
    st = links["status"].astype(str)
    by_status = {s: int((st == s).sum()) for s in STATUSES}
    by_rule = {
        str(k): int(v) for k, v in links["rule"].astype(str).value_counts().sort_index().items()
    }
    rs = links.loc[st.isin(["ambiguous", "unlinked"]), "reason"].astype(str)
    by_reason = {str(k): int(v) for k, v in rs.value_counts().sort_index().items()}
    task_thread = int(
        links["rule"]
        .astype(str)
        .isin(
            [
                "worker-window",
                "scheduler-window",
                "thread-order",
                "worker-window-tolerance",
                "scheduler-nearest",
                "no-window",
                "several-windows",
                "clocks-disagree",
            ]
        )
        .sum()
    )
    linked = st == "linked"
    by_clock = {
        str(k): int(v)
        for k, v in links.loc[linked, "clock"].astype(str).value_counts().sort_index().items()
    }
    return {
        "logs": n_logs,
        "segments": int(len(links)),
        "by_clock": by_clock,
        "by_status": by_status,
        "by_rule": by_rule,
        "by_reason": by_reason,
        "task_thread_segments": task_thread,
    }
