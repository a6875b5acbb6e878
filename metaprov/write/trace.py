"""A run as a Trace Event Format file: open it in ui.perfetto.dev, chrome://tracing or speedscope.

Input: a run's :class:`~metaprov.records.RunRecords` (the writer of the ``trace`` format takes
the records of the graph it is given; :func:`write_trace_runs` takes several runs, for
``metaprov compare -o X.trace.json``). Output: one JSON object (the Trace Event Format's "JSON
Object Format"), one event per line, in this order:

- ``otherData`` first: the run (its directory name and id), ``start_utc`` (the absolute UTC
  time every ``ts`` counts from) and what could not be drawn, with the reason;
- metadata events (``ph: "M"``): a process per worker (``process_name``: its address, and its
  host as ``process_labels``), a track per executing thread (``thread_name``: its thread id),
  a track each for the transfers a worker received and sent, and, for I/O not inside a task
  on its thread, a track next to that thread; a process per Darshan log of a process that is
  no worker (scheduler, nanny, ...);
- each execution attempt a complete slice (``ph: "X"``) on its thread, named by its key, with
  ``args``: prefix, worker, thread, attempt, status (the state it left executing into),
  time source; an attempt that did not give a result (error, cancelled, ...) is named
  ``key [status]``, has category ``execution,failed`` and colour ``terrible``; an attempt
  whose end is unknown (or before its start) is an instant (``ph: "i"``) at its start,
  category ``execution,incomplete``;
- each transfer row (one key moved) a slice on the sender's "transfers out" track and one on
  the receiver's "transfers in" track, joined by a flow (``ph: "s"`` at the sender, ``"f"``
  at the receiver, one ``id`` per row); a key sent to a client has no receiving track;
- each Darshan segment (a traced read or write, from :func:`metaprov.link_io`) a slice named
  ``read path`` / ``write path``: inside its task's slice on the thread that issued it when
  it is linked to an execution of that thread (cut to the execution's window, the traced
  times kept in ``args``), else on that thread's "I/O outside tasks" track;
- the run's phases as instants (``ph: "i"``): run start and end, each graph submitted, each
  client connected and gone (global), each worker added and removed (on its process).

Times: ``ts`` and ``dur`` are integer microseconds (the records' resolution) since the run's
first event (``otherData.start_utc``). Slices that would overlap on one track without nesting
(transfers in flight together, clock noise) go to extra "lane" tracks, so every viewer draws
them all. ``pid`` and ``tid`` are small numbers given in sorted order (workers by address,
threads by id), unique across the file: the same run gives the same bytes.

Written column-wise: every event kind is one pyarrow element-wise join over its table (see
:mod:`metaprov.write.rows`), no Python object per execution.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.terms import as_text_array
from metaprov.timeutil import NAT_US, format_utc, utc_to_us
from metaprov.write.rows import join_pieces, json_escape, write_text

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph
    from metaprov.records import RunRecords

LARGE = pa.large_string()
#: Colour (a name of the Chrome trace viewer's reserved palette) of a failed attempt.
FAILED_COLOUR = "terrible"
#: The process of executions (and segments) whose worker the records do not name.
UNKNOWN_WORKER = "worker unknown"
#: Separator written before every event but the first.
_SEP = ",\n"


def write_trace(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write the run of ``graph`` (its records) as a Trace Event Format file; returns the
    number of events written."""
    return write_trace_runs([("", graph.records)], out)


def write_trace_runs(runs: Sequence[tuple[str, RunRecords]], out: IO[bytes]) -> int:
    """Write one or more runs as one Trace Event Format file; returns the number of events.

    Args:
        runs: (label, records) pairs. With more than one run, every process name starts with
            the run's label (``R3: tcp://...``), and each run's times count from its own start:
            the runs are drawn on one time axis, aligned at their starts.
        out: a binary stream.
    """
    tracks = _Ids()
    parts: list[_RunTrace] = []
    for label, records in runs:
        parts.append(_run_trace(label if len(runs) > 1 else "", records, tracks))
    other: dict[str, Any] = {"generator": _generator(), "time_unit": "microseconds"}
    if len(parts) == 1:
        other.update(parts[0].info)
    else:
        other["runs"] = [p.info for p in parts]
    out.write(b'{"otherData": ' + _dumps(other).encode() + b',\n"displayTimeUnit": "ms",\n')
    out.write(b'"traceEvents": [\n')
    n = 0
    for part in parts:
        for rows in part.events:
            if len(rows) == 0:
                continue
            write_text(out, rows, skip=len(_SEP) if n == 0 else 0)
            n += len(rows)
    out.write(b"\n]}\n")
    return n


# ---------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------


@dataclass
class _Ids:
    """Process and thread numbers, unique across the file (viewers key threads by tid)."""

    pid: int = 0
    tid: int = 0
    flow: int = 0

    def flows(self, n: int) -> np.ndarray:
        out = np.arange(self.flow + 1, self.flow + n + 1, dtype=np.int64)
        self.flow += n
        return out

    def pids(self, n: int) -> np.ndarray:
        out = np.arange(self.pid + 1, self.pid + n + 1, dtype=np.int64)
        self.pid += n
        return out

    def tids(self, n: int) -> np.ndarray:
        out = np.arange(self.tid + 1, self.tid + n + 1, dtype=np.int64)
        self.tid += n
        return out


@dataclass
class _RunTrace:
    info: dict[str, Any]
    events: list[pa.Array] = field(default_factory=list)


@dataclass
class _Tracks:
    """The tracks of one run: processes (one per worker, then one per other traced process)
    and their threads (tid per (process, name)), with the metadata events naming them."""

    ids: _Ids
    prefix: str
    proc: dict[str, int] = field(default_factory=dict)
    proc_rows: list[tuple[int, str, str]] = field(default_factory=list)
    thread: dict[tuple[int, str], int] = field(default_factory=dict)
    thread_rows: list[tuple[int, int, str]] = field(default_factory=list)

    def add_processes(self, names: list[str], labels: list[str]) -> None:
        pids = self.ids.pids(len(names))
        for pid, name, label in zip(pids.tolist(), names, labels, strict=True):
            self.proc[name] = pid
            self.proc_rows.append((pid, self.prefix + name, label))

    def tid_of(self, pids: np.ndarray, names: pa.Array) -> np.ndarray:
        """The tid of each (pid, track name); new tracks get the next numbers, in sorted order."""
        if len(pids) == 0:
            return np.zeros(0, np.int64)
        df = pd.DataFrame({"pid": pids, "name": names.to_pandas()})
        uniq = df.drop_duplicates().sort_values(["pid", "name"], kind="stable")
        new = [
            (p, n)
            for p, n in zip(uniq["pid"].tolist(), uniq["name"].tolist(), strict=True)
            if (p, n) not in self.thread
        ]
        for (p, n), t in zip(new, self.ids.tids(len(new)).tolist(), strict=True):
            self.thread[(p, n)] = t
            self.thread_rows.append((p, t, n))
        index = pd.MultiIndex.from_tuples(list(self.thread), names=["pid", "name"])
        pos = index.get_indexer(pd.MultiIndex.from_frame(df))
        return np.array(list(self.thread.values()), np.int64)[pos]

    def metadata(self) -> pa.Array:
        lines = []
        for pid, name, label in self.proc_rows:
            lines.append(_meta("process_name", pid, 0, {"name": name}))
            lines.append(_meta("process_sort_index", pid, 0, {"sort_index": pid}))
            if label:
                lines.append(_meta("process_labels", pid, 0, {"labels": label}))
        for pid, tid, name in sorted(self.thread_rows, key=lambda r: r[1]):
            lines.append(_meta("thread_name", pid, tid, {"name": name}))
            lines.append(_meta("thread_sort_index", pid, tid, {"sort_index": tid}))
        return pa.array([_SEP + line for line in lines], LARGE)


def _run_trace(label: str, records: RunRecords, ids: _Ids) -> _RunTrace:
    """Every event of one run, as blocks of JSON lines (metadata first)."""
    origin = _origin(records)
    tracks = _Tracks(ids, f"{label}: " if label else "")
    _processes(records, tracks)
    notes: dict[str, int] = {}
    body = [
        *_executions(records, tracks, origin, notes),
        *_transfers(records, tracks, origin, notes),
        *_io(records, tracks, origin, notes),
        _phases(records, tracks, origin),
    ]
    info: dict[str, Any] = {
        "run": label or _run_name(records),
        "run_id": records.run_id,
        "start_utc": None
        if origin is None
        else format_utc(pd.Timestamp(origin, unit="us", tz="UTC")),
    }
    if notes:
        info["not_drawn"] = notes
    return _RunTrace(info, [tracks.metadata(), *body])


def _origin(records: RunRecords) -> int | None:
    """The run's first event (int µs since the epoch): the zero of every ``ts``."""
    cols = [records.executions["start"], records.transfers["start"]]
    first, _ = records.span
    if records.io is not None and len(records.io.segments):
        cols.append(records.io.segments["start"])
    values = [utc_to_us(c) for c in cols if len(c)]
    if first is not None:
        values.append(utc_to_us(pd.Series([first])))
    allv = np.concatenate(values) if values else np.zeros(0, np.int64)
    allv = allv[allv != NAT_US]
    return int(allv.min()) if len(allv) else None


def _processes(records: RunRecords, tracks: _Tracks) -> None:
    """One process per worker seen anywhere in the run (sorted by address), then one per
    Darshan log of a process that is no worker (sorted by log name)."""
    w = records.workers
    seen = [
        w["address"],
        records.executions["worker"],
        records.transfers["source"],
        records.transfers["destination"],
        records.threads["worker"],
    ]
    if records.io is not None:
        seen.append(records.io.segments["worker"])
    addresses = sorted(set(pd.concat([s.dropna().astype(str) for s in seen]).unique()))
    if records.executions["worker"].isna().any():
        addresses.append(UNKNOWN_WORKER)  # executions whose worker the records do not say
    host = dict(zip(w["address"].astype(str), w["hostname"].fillna(w["host"]), strict=False))
    tracks.add_processes(
        addresses, [f"host {host[a]}" if pd.notna(host.get(a)) else "" for a in addresses]
    )
    if records.io is not None and len(records.io.segments):
        seg = records.io.segments
        other = seg[seg["worker"].isna()]
        logs = sorted(other["log"].dropna().astype(str).unique())
        procs = records.io.processes.set_index("log") if len(records.io.processes) else None
        names, labels = [], []
        for log in logs:
            role = pid = host_ = None
            if procs is not None and log in procs.index:
                row = procs.loc[log]
                role, pid, host_ = row.get("role"), row.get("pid"), row.get("host")
            text = f"darshan: {role or 'process'}" + (f" pid {pid}" if pd.notna(pid) else "")
            names.append(f"{text} ({log})")
            labels.append(f"host {host_}" if host_ is not None and pd.notna(host_) else "")
        tracks.add_processes(names, labels)


def _executions(
    records: RunRecords, tracks: _Tracks, origin: int | None, notes: dict[str, int]
) -> list[pa.Array]:
    ex = records.executions
    if not len(ex) or origin is None:
        return []
    start = utc_to_us(ex["start"])
    end = utc_to_us(ex["end"])
    has_start = start != NAT_US
    if (~has_start).any():
        notes["executions without a start time"] = int((~has_start).sum())
    ex = ex[has_start]
    start, end = start[has_start], end[has_start]
    whole = (end != NAT_US) & (end >= start)
    prefix = ex[["key"]].merge(
        records.tasks[["key", "prefix"]].drop_duplicates("key"), on="key", how="left"
    )["prefix"]
    worker = as_text_array(ex["worker"].astype("string").fillna(UNKNOWN_WORKER))
    thread = ex["thread"].astype("string")
    pids = _pid_of(tracks, worker)
    names = as_text_array(("thread " + thread).fillna("thread unknown"))
    tids = tracks.tid_of(pids, names)
    outcome = ex["outcome"].astype("string").fillna("unknown")
    failed = (outcome != "memory").to_numpy(dtype=bool)
    key = json_escape(as_text_array(ex["key"].astype("string")))
    status = json_escape(as_text_array(outcome))
    name = pc.if_else(pa.array(failed), join_pieces([key, " [", status, "]"]), key)
    lanes = _lanes(tids[whole], start[whole], end[whole])
    tids = tids.copy()
    tids[whole] = tracks_lanes(
        tracks, pids[whole], names.filter(pa.array(whole)), lanes, tids[whole]
    )
    args = join_pieces(
        [
            '{"prefix": ',
            _json_str(as_text_array(prefix.astype("string"))),
            ', "worker": ',
            _json_str(worker),
            ', "thread": ',
            _json_str(as_text_array(thread)),
            ', "attempt": ',
            _num(ex["attempt"]),
            ', "status": "',
            status,
            '", "time_source": ',
            _json_str(as_text_array(ex["time_source"].astype("string"))),
            "}",
        ]
    )
    cat = pc.if_else(pa.array(failed), "execution,failed", "execution")
    colour = pc.if_else(
        pa.array(failed), pa.scalar(f', "cname": "{FAILED_COLOUR}"', LARGE), pa.scalar("", LARGE)
    )
    common = [
        '{"name": "',
        name,
        '", "cat": "',
        cat,
        '", "pid": ',
        _ints(pids),
        ', "tid": ',
        _ints(tids),
    ]
    ts = _ints(start - origin)
    x = join_pieces(
        [
            _SEP,
            *common,
            ', "ph": "X", "ts": ',
            ts,
            ', "dur": ',
            _ints(np.where(whole, end - start, 0)),
            colour,
            ', "args": ',
            args,
            "}",
        ]
    )
    inst = join_pieces(
        [
            _SEP,
            '{"name": "',
            name,
            '", "cat": "execution,incomplete", "pid": ',
            _ints(pids),
            ', "tid": ',
            _ints(tids),
            ', "ph": "i", "s": "t", "ts": ',
            ts,
            ', "args": ',
            args,
            "}",
        ]
    )
    if (~whole).any():
        notes["executions drawn as an instant (end unknown or before start)"] = int((~whole).sum())
    out = pc.if_else(pa.array(whole), x, inst)
    order = np.lexsort((start, tids))
    return [out.take(pa.array(order))]


def tracks_lanes(
    tracks: _Tracks, pids: np.ndarray, names: pa.Array, lanes: np.ndarray, tids: np.ndarray
) -> np.ndarray:
    """The tids of slices moved to lane ``k`` > 0: the track ``name (lane k)``."""
    moved = lanes > 0
    if not moved.any():
        return tids
    out = tids.copy()
    sub = pc.binary_join_element_wise(
        names.filter(pa.array(moved)),
        pa.array([f" (lane {k})" for k in lanes[moved].tolist()], LARGE),
        pa.scalar("", LARGE),
    )
    out[moved] = tracks.tid_of(pids[moved], sub)
    return out


def _lanes(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane of each slice within its group (track): 0 unless it overlaps a slice of its lane
    without nesting in it; then the first lane where it fits (greedy, in start order, longest
    first).

    Vectorised for the common cases (a thread's tasks follow one another; the keys of one
    transfer share its interval); only groups where a slice starts inside an earlier one
    without lying inside the one just before it are placed one slice at a time.
    """
    n = len(group)
    lanes = np.zeros(n, np.int64)
    if n < 2:
        return lanes
    order = np.lexsort((-(end - start), start, group))
    g, s, e = group[order], start[order], end[order]
    reach = pd.Series(e).groupby(g).cummax().to_numpy()  # latest end so far in the group
    same = g[1:] == g[:-1]
    inside_prev = (s[1:] >= s[:-1]) & (e[1:] <= e[:-1])
    suspect = same & (s[1:] < reach[:-1]) & ~inside_prev
    if not suspect.any():
        return lanes
    idx = np.flatnonzero(np.isin(g, np.unique(g[1:][suspect])))
    placed = np.zeros(len(idx), np.int64)
    current: Any = None
    stacks: list[list[int]] = []
    for j, i in enumerate(idx.tolist()):
        if g[i] != current:
            current, stacks = g[i], []
        si, ei = int(s[i]), int(e[i])
        for k, stack in enumerate(stacks):
            while stack and stack[-1] <= si:
                stack.pop()
            if not stack or ei <= stack[-1]:
                stack.append(ei)
                placed[j] = k
                break
        else:
            stacks.append([ei])
            placed[j] = len(stacks) - 1
    in_order = np.zeros(n, np.int64)
    in_order[idx] = placed
    lanes[order] = in_order
    return lanes


def _transfers(
    records: RunRecords, tracks: _Tracks, origin: int | None, notes: dict[str, int]
) -> list[pa.Array]:
    """Each transfer row: a slice on the sender's "transfers out" track, one on the receiver's
    "transfers in" track, and a flow from the first to the second."""
    tr = records.transfers
    if not len(tr) or origin is None:
        return []
    start, stop = utc_to_us(tr["start"]), utc_to_us(tr["stop"])
    ok = (start != NAT_US) & (stop != NAT_US) & (stop >= start) & tr["source"].notna().to_numpy()
    if (~ok).any():
        notes["transfers without a sender or a start and stop time"] = int((~ok).sum())
    tr, start, stop = tr[ok], start[ok], stop[ok]
    if not len(tr):
        return []
    source = as_text_array(tr["source"].astype("string"))
    dest = as_text_array(tr["destination"].astype("string"))
    has_dest = pc.is_valid(dest).to_numpy(zero_copy_only=False)
    flow = tracks.ids.flows(len(tr))
    args = join_pieces(
        [
            '{"key": ',
            _json_str(as_text_array(tr["key"].astype("string"))),
            ', "source": ',
            _json_str(source),
            ', "destination": ',
            pc.fill_null(_json_str(dest), '"client"'),
            ', "nbytes": ',
            _num(tr["nbytes"]),
            ', "transfer": ',
            _num(tr["transfer"]),
            ', "keys_in_transfer": ',
            _num(tr["n_keys"]),
            "}",
        ]
    )
    name = json_escape(as_text_array(tr["key"].astype("string")))
    ts, dur, ids = _ints(start - origin), _ints(stop - start), _ints(flow)
    out: list[pa.Array] = []
    for side, who, keep in (
        ("transfers out", source, np.ones(len(tr), bool)),
        ("transfers in", dest, has_dest),
    ):
        sel = pa.array(keep)
        pids = _pid_of(tracks, who.filter(sel))
        names = pa.array([side] * int(keep.sum()), LARGE)
        tids = tracks.tid_of(pids, names)
        lanes = _lanes(tids, start[keep], stop[keep])
        tids = tracks_lanes(tracks, pids, names, lanes, tids)
        where = ['"pid": ', _ints(pids), ', "tid": ', _ints(tids)]
        slices = join_pieces(
            [
                _SEP,
                '{"name": "',
                name.filter(sel),
                '", "cat": "transfer", "ph": "X", ',
                *where,
                ', "ts": ',
                ts.filter(sel),
                ', "dur": ',
                dur.filter(sel),
                ', "args": ',
                args.filter(sel),
                "}",
            ]
        )
        ph = '"s"' if side == "transfers out" else '"f", "bp": "e"'
        flows = join_pieces(
            [
                _SEP,
                '{"name": "transfer", "cat": "transfer", "ph": ',
                ph,
                ', "id": ',
                ids.filter(sel),
                ", ",
                *where,
                ', "ts": ',
                ts.filter(sel),
                "}",
            ]
        )
        if side == "transfers out":
            flows = flows.filter(pa.array(has_dest))  # a key sent to a client: no flow
            order = np.lexsort((start, tids))
            out += [slices.take(pa.array(order))]
            out_flows = flows
        else:
            out += [slices.take(pa.array(np.lexsort((start[keep], tids)))), out_flows, flows]
    return out


def _io(
    records: RunRecords, tracks: _Tracks, origin: int | None, notes: dict[str, int]
) -> list[pa.Array]:
    """Each Darshan segment a slice on the thread that issued it: inside its task's slice
    when linked to an execution of that thread, else on the thread's "I/O outside tasks"
    track."""
    if records.io is None or records.darshan is None or origin is None:
        return []
    links = records.io.segments
    if not len(links):
        return []
    raw = records.darshan.segments
    seg = links.reset_index(drop=True)
    rows = seg["segment"].to_numpy(dtype=np.int64)
    start, end = utc_to_us(seg["start"]), utc_to_us(seg["end"])
    traced_s = utc_to_us(raw["start"]).take(rows)
    traced_e = utc_to_us(raw["end"]).take(rows)
    # corrected times where the process's clock offset is known, else the traced ones
    start = np.where(start == NAT_US, traced_s, start)
    end = np.where(end == NAT_US, traced_e, end)
    ok = (start != NAT_US) & (end != NAT_US) & (end >= start)
    if (~ok).any():
        notes["Darshan segments without a start and end time"] = int((~ok).sum())
    seg, rows, start, end = seg[ok].reset_index(drop=True), rows[ok], start[ok], end[ok]
    if not len(seg):
        return []
    path = raw["path"].to_numpy(dtype=object)[rows]
    op = raw["op"].to_numpy(dtype=object)[rows]
    offset, length = raw["offset"].iloc[rows], raw["length"].iloc[rows]
    # the execution each linked segment belongs to, when it ran on the same thread
    ex = records.executions
    exk = pd.DataFrame(
        {
            "key": ex["key"].astype("string"),
            "attempt": ex["attempt"],
            "x_worker": ex["worker"].astype("string"),
            "x_thread": ex["thread"],
            "x_start": utc_to_us(ex["start"]),
            "x_end": utc_to_us(ex["end"]),
        }
    ).drop_duplicates(["key", "attempt"])
    joined = (
        seg[["key", "attempt"]]
        .astype({"key": "string"})
        .merge(exk, on=["key", "attempt"], how="left")
    )
    x_s = joined["x_start"].fillna(NAT_US).to_numpy(dtype=np.int64)
    x_e = joined["x_end"].fillna(NAT_US).to_numpy(dtype=np.int64)
    same_thread = (
        (seg["status"] == "linked").to_numpy(dtype=bool)
        & (joined["x_worker"] == seg["worker"].astype("string")).fillna(False).to_numpy(dtype=bool)
        & (joined["x_thread"] == seg["pthread"]).fillna(False).to_numpy(dtype=bool)
        & (x_s != NAT_US)
        & (x_e != NAT_US)
        & (x_e >= x_s)
    )
    cs, ce = np.maximum(start, x_s), np.minimum(end, x_e)
    inside = same_thread & (cs <= ce)
    s = np.where(inside, cs, start)
    e = np.where(inside, ce, end)
    if (inside & ((cs != start) | (ce != end))).any():
        notes["Darshan segments cut to their task's window"] = int(
            (inside & ((cs != start) | (ce != end))).sum()
        )
    # process: the worker's, else the Darshan log's own
    worker = seg["worker"].astype("string")
    proc_name = worker.copy()
    no_worker = worker.isna().to_numpy()
    if no_worker.any():
        by_log = {
            name.rsplit("(", 1)[1][:-1]: name
            for name in tracks.proc
            if name.startswith("darshan: ") and name.endswith(")")
        }
        proc_name[no_worker] = seg["log"][no_worker].astype(str).map(by_log).fillna(UNKNOWN_WORKER)
        if proc_name.eq(UNKNOWN_WORKER).any() and UNKNOWN_WORKER not in tracks.proc:
            tracks.add_processes([UNKNOWN_WORKER], [""])
    pids = _pid_of(tracks, as_text_array(proc_name))
    thread = ("thread " + seg["pthread"].astype("string")).fillna("thread unknown")
    track = thread.where(inside, thread + ": I/O outside tasks")
    names = as_text_array(track)
    tids = tracks.tid_of(pids, names)
    lanes = _lanes(tids, s, e)
    lane_names = as_text_array(thread.where(inside, thread + ": I/O outside tasks") + ": I/O")
    tids = tracks_lanes(tracks, pids, lane_names, lanes, tids)
    status = as_text_array(seg["status"].astype("string"))
    cat = pc.if_else(
        pa.array(inside), pa.scalar("io", LARGE), join_pieces(["io,", pc.fill_null(status, "?")])
    )
    opt = as_text_array(pd.Series(op, dtype="string"))
    args = join_pieces(
        [
            '{"path": ',
            _json_str(as_text_array(pd.Series(path, dtype="string"))),
            ', "op": ',
            _json_str(opt),
            ', "offset": ',
            _num(offset),
            ', "length": ',
            _num(length),
            ', "status": ',
            _json_str(status),
            ', "rule": ',
            _json_str(as_text_array(seg["rule"].astype("string"))),
            ', "key": ',
            _json_str(as_text_array(seg["key"].astype("string"))),
            ', "attempt": ',
            _num(seg["attempt"]),
            ', "traced_ts": ',
            _ints(start - origin),
            ', "traced_dur": ',
            _ints(end - start),
            ', "log": ',
            _json_str(as_text_array(seg["log"].astype("string"))),
            "}",
        ]
    )
    name = join_pieces(
        [
            json_escape(pc.fill_null(opt, "io")),
            " ",
            json_escape(pc.fill_null(as_text_array(pd.Series(path, dtype="string")), "?")),
        ]
    )
    rows_text = join_pieces(
        [
            _SEP,
            '{"name": "',
            name,
            '", "cat": "',
            cat,
            '", "ph": "X", "pid": ',
            _ints(pids),
            ', "tid": ',
            _ints(tids),
            ', "ts": ',
            _ints(s - origin),
            ', "dur": ',
            _ints(e - s),
            ', "args": ',
            args,
            "}",
        ]
    )
    return [rows_text.take(pa.array(np.lexsort((s, tids))))]


def _phases(records: RunRecords, tracks: _Tracks, origin: int | None) -> pa.Array:
    """The run's phases as instants: on a "run" process (run start and end, graphs submitted,
    clients connected and gone) and on each worker's process (added, removed)."""
    if origin is None:
        return pa.array([], LARGE)
    pid = int(tracks.ids.pids(1)[0])
    tracks.proc_rows.append((pid, tracks.prefix + "run", ""))
    tid = int(tracks.tid_of(np.array([pid]), pa.array(["phases"], LARGE))[0])
    events: list[tuple[int, str, dict[str, Any], int, str]] = []  # (ts, name, args, pid, scope)
    first, last = records.span
    if first is not None:
        events.append((_us(first), "run start", {}, pid, "t"))
    if last is not None:
        events.append((_us(last), "run end", {}, pid, "t"))
    for g in records.graphs.itertuples(index=False):
        if pd.notna(g.time):
            args = {"graph": _py(g.graph), "client": _py(g.client), "tasks": _py(g.n_tasks)}
            events.append((_us(g.time), f"graph {_py(g.graph)} submitted", args, pid, "t"))
    for c in records.clients.itertuples(index=False):
        for when, what in ((c.added, "connected"), (c.removed, "gone")):
            if pd.notna(when):
                events.append((_us(when), f"client {what}", {"client": _py(c.client)}, pid, "t"))
    for w in records.workers.itertuples(index=False):
        wpid = tracks.proc.get(str(w.address))
        for when, what in ((w.added, "added"), (w.removed, "removed")):
            if pd.notna(when) and wpid is not None:
                args = {"worker": str(w.address)}
                events.append((_us(when), f"worker {what}", args, wpid, "p"))
    events.sort(key=lambda ev: (ev[0], ev[3], ev[1]))
    lines = []
    for ts, name, args, p, scope in events:
        where = f'"pid": {p}, "tid": {tid}' if scope == "t" else f'"pid": {p}, "tid": 0'
        lines.append(
            f'{_SEP}{{"name": {_dumps(name)}, "cat": "phase", "ph": "i", "s": "{scope}", '
            f'{where}, "ts": {ts - origin}, "args": {_dumps(args)}}}'
        )
    return pa.array(lines, LARGE)


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def _pid_of(tracks: _Tracks, names: pa.Array) -> np.ndarray:
    """The pid of each process name (every name was added by :func:`_processes`)."""
    index = pd.Index(list(tracks.proc))
    pos = index.get_indexer(names.to_pandas())
    if (pos < 0).any():  # pragma: no cover - _processes adds every name the tables hold
        raise ValueError("a process of the trace has no track")
    return np.array(list(tracks.proc.values()), np.int64)[pos]


def _ints(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(np.asarray(values, dtype=np.int64)), LARGE)


def _num(values: pd.Series) -> pa.Array:
    """Integers as JSON numbers (NA: ``null``)."""
    arr = pa.array(values.astype("Int64"), pa.int64(), from_pandas=True)
    return pc.fill_null(pc.cast(arr, LARGE), "null")


def _json_str(values: pa.Array) -> pa.Array:
    """Texts as JSON strings (null: ``null``)."""
    return pc.fill_null(join_pieces(['"', json_escape(values), '"']), "null")


def _meta(kind: str, pid: int, tid: int, args: dict[str, Any]) -> str:
    return f'{{"name": "{kind}", "ph": "M", "pid": {pid}, "tid": {tid}, "args": {_dumps(args)}}}'


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def _us(value: Any) -> int:
    return int(utc_to_us(pd.Series([value]).astype("datetime64[us, UTC]"))[0])


def _py(value: Any) -> Any:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _run_name(records: RunRecords) -> str:
    from pathlib import Path

    return Path(records.path).name if records.path else records.run_id


def _generator() -> str:
    from metaprov._version import __version__

    return f"metaprov {__version__}"
