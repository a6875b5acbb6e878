"""The three stages of link_io, each on its own: process (which log is which worker), thread
(task threads vs the process's own), task (the clocks), on arrays built in the test."""

from __future__ import annotations

import numpy as np
import pandas as pd

from metaprov.link.decisions import Decisions
from metaprov.link.processes import decide_other_logs, map_workers
from metaprov.link.tasks import LinkParams, link_task_segments, task_thread_segments
from metaprov.link.windows import Executions, Segments

T0 = pd.Timestamp("2026-01-01T00:00:00Z")
US0 = T0.value // 1000
A, B = "tcp://10.0.0.1:1", "tcp://10.0.0.2:2"


def _logs(*rows: tuple[str, str, float | None, bool]) -> pd.DataFrame:
    """(log, role, pid, in_run) per log."""
    return pd.DataFrame(
        {
            "log": [r[0] for r in rows],
            "role": [r[1] for r in rows],
            "pid": pd.array([r[2] for r in rows], dtype="Int64"),
            "in_run": [r[3] for r in rows],
            "hostname": ["h"] * len(rows),
        }
    )


def _segments(rows: list[tuple[str, int | None, int, int]], logs: pd.DataFrame) -> Segments:
    """(log, pthread, start µs, end µs) per segment, times relative to T0."""
    df = pd.DataFrame(
        {
            "log": [r[0] for r in rows],
            "pthread": pd.array([r[1] for r in rows], dtype="UInt64"),
            "start": [T0 + pd.Timedelta(microseconds=r[2]) for r in rows],
            "end": [T0 + pd.Timedelta(microseconds=r[3]) for r in rows],
        }
    )
    return Segments.of(df, logs)


def _executions(rows: list[tuple[str, str, int, int, int]]) -> Executions:
    """(key, worker, thread, start µs, end µs) per execution, worker-clock hook windows."""
    n = len(rows)
    worker = np.array([r[1] for r in rows], dtype=object).astype(str)
    return Executions(
        table=pd.DataFrame(
            {
                "key": [r[0] for r in rows],
                "attempt": np.zeros(n, np.int64),
                "start": [T0 + pd.Timedelta(microseconds=r[3]) for r in rows],
            }
        ),
        start=np.array([US0 + r[3] for r in rows], np.int64),
        end=np.array([US0 + r[4] for r in rows], np.int64),
        thread=np.array([r[2] for r in rows], np.uint64),
        worker=worker,
        sched=np.zeros(n, bool),
        exact=np.zeros(n, bool),
        sched_begins=np.full(n, np.iinfo(np.int64).min),
        sched_ends=np.full(n, np.iinfo(np.int64).min),
        epoch=np.full(n, -1, np.int64),
        epoch_lo=np.zeros(0, np.int64),
        epoch_hi=np.zeros(0, np.int64),
        n_ran=n,
        task_threads_known=n,
        by_worker=pd.Series(np.arange(n)).groupby(worker, sort=False).indices,
    )


def _labels(d: Decisions, idx: list[int]) -> list[tuple[str, str]]:
    st, ru = d.status.column(), d.rule.column()
    return [(st[i], ru[i]) for i in idx]


def test_stage_process_maps_each_worker_to_the_log_holding_its_threads() -> None:
    logs = _logs(("w1", "worker", 11, True), ("w2", "worker", 12, True), ("n", "nanny", 9, True))
    seg = _segments(
        [("w2", 7, 0, 1), ("w1", 5, 0, 1), ("w1", 6, 0, 1), ("w2", 8, 0, 1), ("n", None, 0, 1)],
        logs,
    )
    ex = _executions(
        [("a", A, 5, 0, 10), ("b", A, 6, 0, 10), ("c", B, 7, 0, 10), ("d", B, 8, 0, 10)]
    )
    got = map_workers(seg, logs, ex, pd.DataFrame({"address": [A, B]}))
    assert got.worker_of_log == {0: A, 1: B}
    assert got.votes_of_log == {0: 2, 1: 2}
    assert got.notes == []


def test_stage_process_a_tie_maps_nothing_and_says_so_then_a_pid_maps_it() -> None:
    logs = _logs(("w1", "worker", 11, True), ("w2", "worker", 12, True))
    # A's two threads appear once in each log: a tie
    seg = _segments([("w1", 5, 0, 1), ("w2", 6, 0, 1)], logs)
    ex = _executions([("a", A, 5, 0, 10), ("b", A, 6, 0, 10)])
    tie = map_workers(seg, logs, ex, pd.DataFrame({"address": [A]}))
    assert tie.worker_of_log == {}
    assert len(tie.notes) == 1 and "equally often in 2 logs" in tie.notes[0]
    by_pid = map_workers(
        seg, logs, ex, pd.DataFrame({"address": [A], "pid": pd.array([12], dtype="Int64")})
    )
    assert by_pid.worker_of_log == {1: A} and by_pid.votes_of_log == {1: 0}


def test_stage_process_decides_every_segment_of_the_other_logs() -> None:
    logs = _logs(
        ("w1", "worker", 11, True),
        ("out", "worker", 30, False),
        ("n", "nanny", 9, True),
        ("w9", "worker", 19, True),
    )
    seg = _segments(
        [("w1", 5, 0, 1), ("out", 5, 0, 1), ("n", 3, 0, 1), ("w9", 4, 0, 1), ("w9", None, 0, 1)],
        logs,
    )
    d = Decisions(seg.n)
    decide_other_logs(seg, logs, {0: A}, _executions([("a", A, 5, 0, 10)]), d)
    assert _labels(d, [1, 2, 3, 4]) == [
        ("unlinked", "outside-run"),
        ("process", "process-role"),
        ("process", "unmapped-process"),
        ("unlinked", "no-thread-id"),
    ]
    assert d.status.codes[0] == -1  # the mapped worker's segment is left to stages 2 and 3


def test_stage_thread_keeps_the_task_threads_and_decides_the_rest() -> None:
    logs = _logs(("w1", "worker", 11, True))
    seg = _segments([("w1", 5, 0, 1), ("w1", 99, 0, 1), ("w1", None, 0, 1), ("w1", 6, 0, 1)], logs)
    d = Decisions(seg.n)
    kept = task_thread_segments(seg.of_log(0), seg, np.array([5, 6], np.uint64), d)
    assert sorted(kept.tolist()) == [0, 3]
    assert _labels(d, [1, 2]) == [("process", "thread-ran-no-task"), ("unlinked", "no-thread-id")]
    assert (d.status.codes[[0, 3]] == -1).all()


def test_stage_task_links_inside_near_and_outside_the_windows() -> None:
    logs = _logs(("w1", "worker", 11, True))
    # thread 5 runs a then b; thread 6 runs c. Darshan's clock here equals the worker's.
    ex = _executions([("a", A, 5, 0, 1_000), ("b", A, 5, 50_000, 51_000), ("c", A, 6, 0, 100_000)])
    seg = _segments(
        [
            ("w1", 5, 100, 200),  # inside a
            ("w1", 5, 50_100, 50_200),  # inside b
            ("w1", 5, 5_000, 5_100),  # 4 ms after a, far from b: the tolerance rule
            ("w1", 5, 30_000, 30_100),  # 29 ms from a, 20 ms from b: no window
            ("w1", 6, 70_000, 70_100),  # inside c
        ],
        logs,
    )
    d = Decisions(seg.n)
    params = LinkParams(estimate_offsets=False)
    sidx = np.arange(seg.n)
    off, note = link_task_segments(
        sidx, seg, ex, ex.of_worker(A), np.array([5, 6], np.uint64), params, d
    )
    assert off.mid_us == off.lo_us == off.hi_us == 0
    assert off.estimate["note"] == "offset estimation turned off" and note == ""
    assert _labels(d, list(range(5))) == [
        ("linked", "worker-window"),
        ("linked", "worker-window"),
        ("linked", "worker-window-tolerance"),
        ("unlinked", "no-window"),
        ("linked", "worker-window"),
    ]
    assert d.execution.tolist() == [0, 1, 0, -1, 2]
    assert d.clock.column()[0] == "worker-hook"


def test_stage_task_fits_a_late_darshan_clock_before_linking() -> None:
    logs = _logs(("w1", "worker", 11, True))
    late = 30_000  # Darshan 30 ms late: without the fit, every segment sits in the next window
    starts = np.arange(20) * 2_000
    ex = _executions([(f"t{i}", A, 5, int(s), int(s) + 1_500) for i, s in enumerate(starts)])
    seg = _segments([("w1", 5, int(s) + 500 + late, int(s) + 600 + late) for s in starts], logs)
    d = Decisions(seg.n)
    off, _ = link_task_segments(
        np.arange(seg.n), seg, ex, ex.of_worker(A), np.array([5], np.uint64), LinkParams(), d
    )
    assert off.lo_us <= late <= off.hi_us
    assert d.execution.tolist() == list(range(20))
    assert set(d.rule.column()) == {"worker-window"}
