"""link_io on small runs built in code: Darshan logs written by the project's writer, executions
built with the records schema. Each test knows the right answer for every segment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from metaprov.ingest.darshan import read_darshan_logs
from metaprov.link import STATUSES, estimate_offset, link_io
from metaprov.link.clocks import scheduler_epochs
from metaprov.records import RunRecords, conform
from metaprov.synthetic.darshan import log_file_name, write_darshan_log
from metaprov.timeutil import epoch_to_utc

T0 = 1_713_553_300.0  # job start of every synthetic process
WORKER_CMD = "python3 -c from multiprocessing.spawn import spawn_main --multiprocessing-fork"
NANNY_CMD = "python3 /x/bin/dask worker tcp://sched:8786"


def _tasks_on_thread(
    rng: np.random.Generator, first: int, n: int, t_start: float, dur_ms: tuple[float, float]
) -> pd.DataFrame:
    """``n`` back-to-back task windows on one thread (gaps of 0.1-0.5 ms, as a busy thread has)."""
    dur = rng.uniform(dur_ms[0], dur_ms[1], n) / 1e3
    gap = rng.uniform(0.1, 0.5, n) / 1e3
    start = t_start + np.concatenate([[0.0], np.cumsum(dur + gap)[:-1]])
    return pd.DataFrame(
        {"key": [f"task-{first + i}" for i in range(n)], "start": start, "end": start + dur}
    )


def _io_inside(rng: np.random.Generator, tasks: pd.DataFrame, per_task: int) -> pd.DataFrame:
    """``per_task`` I/O calls strictly inside each task's function (50 µs from the window edges)."""
    rows = []
    for k, s, e in zip(tasks["key"], tasks["start"], tasks["end"], strict=True):
        lo, hi = s + 50e-6, e - 100e-6
        t = np.sort(rng.uniform(lo, hi, per_task))
        for x in t:
            rows.append((k, x, min(x + rng.uniform(1e-6, 40e-6), e - 50e-6)))
    return pd.DataFrame(rows, columns=["key", "t0", "t1"])


def make_run(
    tmp: Path,
    *,
    offsets: dict[int, float],
    layout: int = 96,
    n_tasks: int = 60,
    dur_ms: tuple[float, float] = (1.0, 8.0),
    threads: int = 2,
    seed: int = 0,
    time_source: str = "worker",
) -> tuple[RunRecords, pd.DataFrame]:
    """One worker process per entry of ``offsets`` (pid -> Darshan lateness in seconds).

    Returns the records and the truth: for each written I/O call its file offset (unique id),
    the key that issued it (None: process-level I/O) and the pid.
    """
    rng = np.random.default_rng(seed)
    ex_rows = []
    truth = []
    uid = 0
    for wi, (pid, late) in enumerate(sorted(offsets.items())):
        worker = f"tcp://10.0.0.{wi + 1}:4000{wi}"
        tids = [np.uint64(0x7F00_0000_0000 + pid * 0x10000 + j * 0x100) for j in range(threads + 1)]
        calls = []
        for j in range(threads):
            tasks = _tasks_on_thread(rng, 10_000 * wi + 1000 * j, n_tasks, T0 + 1.0, dur_ms)
            for r in tasks.itertuples():
                ex_rows.append((r.key, 0, worker, int(tids[j + 1]), r.start, r.end, "memory"))
            io = _io_inside(rng, tasks, 2)
            io["pthread"] = tids[j + 1]
            calls.append(io)
        # process-level I/O on the main thread (imports, logging): no task ran there
        t = np.sort(rng.uniform(T0 + 0.01, T0 + 1.5, 15))
        calls.append(pd.DataFrame({"key": None, "t0": t, "t1": t + 5e-6, "pthread": tids[0]}))
        io = pd.concat(calls, ignore_index=True)
        io["offset"] = np.arange(len(io)) + uid
        uid += len(io)
        io["pid"] = pid
        truth.append(io)
        seg = pd.DataFrame(
            {
                "path": [f"/scratch/{k or 'proc'}.bin" for k in io["key"]],
                "op": np.where(np.arange(len(io)) % 3 == 0, "write", "read"),
                "offset": io["offset"],
                "length": 4096,
                # Darshan's times are late by `late` seconds against the process's clock
                "start_rel": io["t0"] - T0 + late,
                "end_rel": io["t1"] - T0 + late,
                "pthread": pd.array(io["pthread"].astype("uint64"), dtype="UInt64"),
            }
        )
        write_darshan_log(
            tmp / log_file_name("u", "python3", pid, pid, T0),
            seg,
            start=T0,
            cmdline=WORKER_CMD,
            layout=layout,
            jobid=pid,
        )
    # a nanny without thread ids (stock 32-byte layout): its I/O is the nanny's own
    nseg = pd.DataFrame(
        {
            "path": "/home/u/.config/dask/x.yaml",
            "op": "read",
            "offset": [10**12, 10**12 + 1],
            "start_rel": [0.1, 0.2],
            "end_rel": [0.1001, 0.2001],
        }
    )
    write_darshan_log(
        tmp / log_file_name("u", "python3", 9, 9, T0),
        nseg,
        start=T0,
        cmdline=NANNY_CMD,
        layout=32,
        jobid=9,
    )
    ex = pd.DataFrame(
        ex_rows, columns=["key", "attempt", "worker", "thread", "start", "end", "outcome"]
    )
    ex["start"] = epoch_to_utc(ex["start"])
    ex["end"] = epoch_to_utc(ex["end"])
    ex["time_source"] = time_source
    ex["thread"] = ex["thread"].astype("uint64")
    rec = RunRecords(path=str(tmp))
    rec.executions = conform("executions", ex)
    tasks = ex[["key"]].assign(prefix="task", worker=ex["worker"], thread=ex["thread"])
    rec.tasks = conform("tasks", tasks)
    rec.darshan = read_darshan_logs(tmp, rec.accounting)
    return rec, pd.concat(truth, ignore_index=True)


def _joined(rec: RunRecords, truth: pd.DataFrame) -> pd.DataFrame:
    seg = rec.darshan.segments
    links = rec.io.segments
    df = pd.DataFrame(
        {
            "offset": seg["offset"].to_numpy(),
            "log": seg["log"].astype(str).to_numpy(),
            "status": links["status"].astype(str).to_numpy(),
            "rule": links["rule"].astype(str).to_numpy(),
            "key": links["key"].astype(object).to_numpy(),
        }
    )
    t = truth.rename(columns={"key": "true_key"})[["offset", "true_key", "pid"]]
    return df.merge(t, on="offset", how="left")


def test_every_segment_has_exactly_one_outcome(tmp_path: Path) -> None:
    rec, _ = make_run(tmp_path, offsets={101: 0.0})
    link_io(rec)
    acct = rec.io.accounting
    assert len(rec.io.segments) == len(rec.darshan.segments)
    assert sum(acct["by_status"].values()) == len(rec.darshan.segments)
    assert set(rec.io.segments["status"].unique()) <= set(STATUSES)
    assert (rec.io.segments["segment"].to_numpy() == np.arange(len(rec.darshan.segments))).all()


@pytest.mark.parametrize("layout", [96, 40])
def test_millisecond_tasks_with_late_darshan_clocks(tmp_path: Path, layout: int) -> None:
    offsets = {101: 0.012, 102: 0.035, 103: 0.058}
    rec, truth = make_run(tmp_path, offsets=offsets, layout=layout, dur_ms=(0.5, 6.0), n_tasks=150)
    link_io(rec)
    j = _joined(rec, truth)
    task_io = j[j["true_key"].notna()]
    right = (task_io["status"] == "linked") & (task_io["key"] == task_io["true_key"])
    wrong = (task_io["status"] == "linked") & (task_io["key"] != task_io["true_key"])
    assert wrong.sum() == 0, task_io[wrong].head()
    assert right.mean() >= 0.99
    assert task_io.loc[~right, "status"].isin(["ambiguous"]).all()
    # process-level I/O is the process's, never a task's
    proc = j[j["true_key"].isna() & j["pid"].notna()]
    assert (proc["status"] == "process").all()
    assert (proc["rule"] == "thread-ran-no-task").all()
    # the offset each process was given is found again (to within 0.3 ms)
    p = rec.io.processes.dropna(subset=["clock_offset"]).set_index("pid")
    for pid, late in offsets.items():
        assert abs(p.loc[pid, "clock_offset"] - late) < 3e-4, p.loc[pid, "offset_note"]
        assert p.loc[pid, "offset_low"] <= late <= p.loc[pid, "offset_high"]


def test_a_fixed_tolerance_alone_would_link_wrongly(tmp_path: Path) -> None:
    """Without offset estimation a 35 ms late clock puts ms-task I/O in the wrong windows; the
    tolerance rule then reports it ambiguous instead of guessing."""
    rec, truth = make_run(tmp_path, offsets={102: 0.035}, dur_ms=(0.5, 3.0), n_tasks=100)
    link_io(rec, estimate_offsets=False)
    j = _joined(rec, truth)
    task_io = j[j["true_key"].notna()]
    linked_right = (task_io["status"] == "linked") & (task_io["key"] == task_io["true_key"])
    assert linked_right.mean() < 0.5


def test_worker_address_mapped_by_thread_membership(tmp_path: Path) -> None:
    rec, _ = make_run(tmp_path, offsets={101: 0.0, 102: 0.0})
    link_io(rec)
    p = rec.io.processes.set_index("pid")
    assert p.loc[101, "worker"] == "tcp://10.0.0.1:40000"
    assert p.loc[102, "worker"] == "tcp://10.0.0.2:40001"
    assert pd.isna(p.loc[9, "worker"])
    assert p.loc[9, "role"] == "nanny" and p.loc[9, "n_process"] == 2


def test_nanny_io_without_thread_ids_belongs_to_the_nanny(tmp_path: Path) -> None:
    rec, _ = make_run(tmp_path, offsets={101: 0.0})
    link_io(rec)
    links = rec.io.segments
    nanny = links[links["pid"] == 9]
    assert (nanny["status"] == "process").all() and (nanny["rule"] == "process-role").all()


def test_worker_log_without_thread_ids_is_unlinked_not_guessed(tmp_path: Path) -> None:
    rec, _ = make_run(tmp_path, offsets={101: 0.0}, layout=32)
    link_io(rec)
    links = rec.io.segments
    w = links[links["pid"] == 101]
    assert (w["status"] == "unlinked").all()
    assert (w["rule"] == "no-thread-id").all()
    assert rec.io.accounting["by_status"]["linked"] == 0
    # said once, for the run, with the layout that lost the thread ids
    notes = [t for t in rec.io.accounting["notes"] if "carry no thread id" in t]
    assert len(notes) == 1 and "layout 32" in notes[0] and str(len(w)) in notes[0]


def test_segment_between_two_close_windows_is_ambiguous(tmp_path: Path) -> None:
    rec, truth = make_run(tmp_path, offsets={101: 0.0}, n_tasks=20, threads=1)
    ex = rec.executions
    # move one task's I/O into the 0.1-0.5 ms gap after it: within 10 ms of both neighbours
    seg = rec.darshan.segments
    first_key = "task-0"
    w = ex[ex["key"] == first_key].iloc[0]
    gap_t = w["end"] + pd.Timedelta(microseconds=20)
    idx = truth.index[truth["key"] == first_key][0]
    row = seg.index[seg["offset"] == truth.loc[idx, "offset"]][0]
    seg.loc[row, "start"] = gap_t
    seg.loc[row, "end"] = gap_t + pd.Timedelta(microseconds=5)
    link_io(rec, estimate_offsets=False)
    got = rec.io.segments.loc[row]
    assert got["status"] == "ambiguous" and got["rule"] == "several-windows"
    assert pd.isna(got["key"])


def test_scheduler_windows_alone_link_without_guessing(tmp_path: Path) -> None:
    rec, truth = make_run(
        tmp_path, offsets={101: 0.0}, dur_ms=(300.0, 900.0), n_tasks=8, time_source="scheduler"
    )
    # scheduler clocks are off by up to seconds: shift every window by 40 ms
    rec.executions["start"] = rec.executions["start"] + pd.Timedelta(milliseconds=40)
    rec.executions["end"] = rec.executions["end"] + pd.Timedelta(milliseconds=40)
    link_io(rec)
    j = _joined(rec, truth)
    task_io = j[j["true_key"].notna()]
    assert (task_io["rule"] == "scheduler-window").mean() > 0.5
    wrong = (task_io["status"] == "linked") & (task_io["key"] != task_io["true_key"])
    assert wrong.sum() == 0
    # 2 calls per task fit the 8 windows at 7 separate offsets (-93 .. +65 ms): a call near a
    # window edge fits two tasks, so it is reported with both, not guessed
    amb = task_io[task_io["status"] != "linked"]
    assert len(amb) and amb["status"].eq("ambiguous").all()
    links = rec.io.segments.set_index("segment")
    seg_row = rec.darshan.segments.reset_index().set_index("offset")["index"]
    for off, key in zip(amb["offset"], amb["true_key"], strict=True):
        cands = json.loads(links.loc[seg_row[off], "candidates"])
        assert key in cands and len(cands) == 2
    p = rec.io.processes.set_index("pid")
    assert p.loc[101, "offset_low"] <= -0.040 <= p.loc[101, "offset_high"]


def test_log_of_an_unrelated_program_is_not_linked(tmp_path: Path) -> None:
    rec, _ = make_run(tmp_path, offsets={101: 0.0})
    other = pd.DataFrame({"path": "/tmp/x", "op": "write", "start_rel": [0.5], "end_rel": [0.6]})
    p = tmp_path / log_file_name("bob", "rsync", 5, 5, T0 - 86400)
    write_darshan_log(p, other, start=T0 - 86400, cmdline="rsync -a a b", uid=4321, jobid=5)
    rec.darshan = read_darshan_logs(tmp_path, rec.accounting)
    link_io(rec)
    links = rec.io.segments
    row = links[links["pid"] == 5]
    assert row["status"].tolist() == ["unlinked"] and row["rule"].tolist() == ["outside-run"]
    issues = rec.accounting.issues
    assert (issues["reason"] == "log from an unrelated program").any()


def test_estimate_offset_finds_a_shift_exactly() -> None:
    ws = np.array([0, 10_000, 20_000, 35_000], dtype=np.int64)
    we = ws + np.array([9_000, 9_500, 14_000, 3_000])
    g = np.zeros(4, np.int64)
    # segments at known places inside windows, all shifted late by 2.5 ms
    s = np.array([1_000, 12_000, 30_000, 36_000]) + 2_500
    e = s + 100
    est = estimate_offset(s, e, np.zeros(4, np.int64), ws, we, g, low=-0.01, high=0.02)
    assert est["fit"] == 4
    assert est["low"] <= 0.0025 <= est["high"]


def test_no_darshan_gives_empty_io() -> None:
    rec = RunRecords(path="x")
    link_io(rec)
    assert rec.io.accounting["segments"] == 0


def test_scheduler_epochs_split_at_a_delay_jump_and_skip_transfers() -> None:
    # feasible delays (µs) per execution of one worker, in time order: 5 around 40 ms, a
    # transfer entry (far off), 4 more around 40 ms, then the delay jumps to 55 ms for 3
    lo = np.array(
        [
            39_000,
            39_500,
            39_800,
            39_600,
            39_700,
            10_000,
            39_900,
            39_700,
            39_500,
            39_800,
            54_800,
            54_900,
            54_700,
            9,
            70_000,
        ]
    )
    hi = np.array(
        [
            41_000,
            40_500,
            40_800,
            40_600,
            40_900,
            11_000,
            40_100,
            40_300,
            40_500,
            40_200,
            55_200,
            55_100,
            55_300,
            0,
            70_100,
        ]
    )
    group = np.zeros(len(lo), np.int64)
    ep, e_lo, e_hi = scheduler_epochs(lo, hi, group)
    assert ep.tolist() == [0] * 5 + [-1] + [0] * 4 + [1] * 3 + [-1, -1]
    assert (e_lo.tolist(), e_hi.tolist()) == ([39_900, 54_900], [40_100, 55_100])
    # a new worker starts a new epoch (two executions confirm it when min_size is 2)
    ep2, _, _ = scheduler_epochs(lo[:6], hi[:6], np.array([0, 0, 0, 1, 1, 1]), min_size=2)
    assert ep2.tolist() == [0, 0, 0, 1, 1, -1]


def test_a_segment_in_overlapping_windows_counts_once_in_the_offset_fit() -> None:
    # two overlapping (hook-like) windows and a third apart; three segments, late by 3 ms.
    # Counting (segment, window) pairs would favour offsets that put the first segment in the
    # overlap; counting segments finds the true range.
    ws = np.array([0, 400, 5_000], np.int64)
    we = np.array([1_000, 1_400, 6_000], np.int64)
    s = np.array([200, 5_100, 5_900], np.int64) + 3_000
    est = estimate_offset(s, s + 10, np.zeros(3, np.int64), ws, we, np.zeros(3, np.int64))
    assert est["fit"] == 3
    assert est["low"] <= 0.003 <= est["high"]
    assert est["high"] - est["low"] < 0.001


def test_offset_sweep_by_events_equals_the_grid_sweep() -> None:
    """Many wide blocks with few intervals are swept by sorting, not on a grid: same answer."""
    from metaprov.link.clocks import _sweep_events, sweep_blocks

    rng = np.random.default_rng(0)
    for _ in range(200):
        nb, n = int(rng.integers(1, 5)), int(rng.integers(1, 30))
        blo = rng.integers(-50, 0, nb)
        bhi = blo + rng.integers(0, 100, nb)
        blk = rng.integers(0, nb, n)
        a, b = rng.integers(0, 100, n), rng.integers(0, 100, n)
        dl = np.minimum(blo[blk] + np.minimum(a, b), bhi[blk])
        dh = np.minimum(blo[blk] + np.maximum(a, b), bhi[blk])
        grid = sweep_blocks(dl, dh, blk, blo, bhi)
        events = _sweep_events(dl, dh, blk, nb)
        fitted = grid[0] > 0
        for x, y in zip(grid, events, strict=True):
            assert (x[fitted] == y[fitted]).all()


def test_a_linked_segment_never_lies_outside_its_execution(tmp_path: Path) -> None:
    """Issue 25: an I/O usage ended 27 µs after its execution (short tasks): the segment was
    linked within the tolerance but kept its corrected time. Its times are clipped into the
    window, and the accounting says so. (On a real run the process's one offset estimate is
    the middle of its feasible range, which a segment's own feasible offsets can exclude.)"""
    rec, truth = make_run(tmp_path, offsets={101: 0.0}, n_tasks=1, threads=1)
    ex = rec.executions
    last = ex.sort_values("end").iloc[-1]
    row = ex.index[ex["key"] == last["key"]][0]
    seg = rec.darshan.segments
    mine = seg.index[seg["offset"].isin(truth.loc[truth["key"] == last["key"], "offset"])]
    # its last I/O call starts 1 µs before the window ends and ends 27 µs after it (no window
    # after it on the thread)
    tail = seg.loc[mine, "start"].idxmax()
    seg.loc[tail, "end"] = seg.loc[tail, "start"] + pd.Timedelta(microseconds=28)
    ex.loc[row, "end"] = seg.loc[tail, "start"] + pd.Timedelta(microseconds=1)
    link_io(rec, estimate_offsets=False)
    links = rec.io.segments.loc[mine]
    assert (links["status"] == "linked").all() and (links["key"] == last["key"]).all()
    assert (links["end"] <= ex.loc[row, "end"]).all() and (links["start"] >= last["start"]).all()
    notes = [t for t in rec.io.accounting["notes"] if "clipped into the window" in t]
    assert len(notes) == 1 and "27 µs" in notes[0]
