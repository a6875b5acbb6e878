"""The capture plugins' hooks, driven directly with stand-in scheduler and worker objects.

These check what a cluster run cannot force deterministically: the compute interval chosen over a
transfer entry, tuple keys, a transfer log overflowing its deque, executions cut by teardown.
"""

from __future__ import annotations

import ast
import asyncio
from collections import deque
from types import SimpleNamespace as NS

import pandas as pd
import pytest

pytest.importorskip("distributed")

from metaprov.capture import SchedulerCapture, WorkerCapture  # noqa: E402
from metaprov.capture._files import PARTS_DIR  # noqa: E402
from metaprov.errors import UsageError  # noqa: E402


def _read(path):
    return pd.read_csv(path, index_col=0, dtype=str, keep_default_na=False)


class _TS(NS):
    __hash__ = object.__hash__


def _fake_scheduler():
    def ts(key, prefix, deps=()):
        return _TS(key=key, prefix=NS(name=prefix), group=NS(name=prefix), dependencies=set(deps))

    a = ts("a-1", "a")
    b = ts(("b-2", 0), "b", [a])
    meta = {}
    return NS(
        address="tcp://10.0.0.1:8786",
        tasks={a.key: a, b.key: b},
        clients={"fire-and-forget": None, "Client-1": None},
        workers={},
        set_metadata=lambda keys, value: meta.__setitem__(tuple(keys), value),
        meta=meta,
    )


def _run_scheduler(tmp_path, drive):
    sched = _fake_scheduler()
    plugin = SchedulerCapture(tmp_path / "run", flush_interval=0)

    async def go():
        await plugin.start(sched)
        drive(plugin, sched)
        return await plugin.finalize()

    return sched, plugin, asyncio.run(go())


def test_scheduler_rows_carry_the_compute_interval_not_the_first_entry(tmp_path):
    startstops = [
        {"action": "transfer", "start": 10.0, "stop": 11.0, "source": "tcp://w2"},
        {"action": "compute", "start": 11.5, "stop": 12.25},
    ]

    def drive(p, s):
        p.transition("a-1", "released", "waiting", stimulus_id="update-graph-1")
        p.transition(
            ("b-2", 0),
            "processing",
            "memory",
            stimulus_id="task-finished-2",
            worker="tcp://w1",
            thread=0,
            nbytes=0,
            startstops=startstops,
        )
        p.update_graph(
            s, client="Client-1", keys={("b-2", 0)}, tasks=["a-1", ("b-2", 0)], priority={}
        )
        p.add_worker(s, "tcp://w1")
        p.remove_worker(s, "tcp://w1", stimulus_id="bye")
        p.add_client(s, "Client-2")
        p.remove_client(s, "Client-2")

    sched, plugin, summary = _run_scheduler(tmp_path, drive)
    run = tmp_path / "run"
    st = _read(run / "scheduler_transition.csv")
    assert st["key"].tolist() == ["a-1", "('b-2', 0)"]
    done = st.iloc[1]
    assert (done["begins"], done["ends"], done["duration"]) == ("11.5", "12.25", "0.75")
    # 0 is a real thread id / size: not dropped as Mofka's truthiness test did.
    assert (done["thread"], done["size"], done["worker"]) == ("0", "0", "tcp://w1")
    assert (done["prefix"], done["called_from"]) == ("b", "tcp://10.0.0.1:8786")
    assert st.iloc[0]["thread"] == "" and st.iloc[0]["begins"] == ""
    graph = _read(run / "graph.csv").iloc[0]
    assert ast.literal_eval(graph["keys"]) == {("b-2", 0)}
    assert ast.literal_eval(graph["dependencies"]) == {"a-1": set(), ("b-2", 0): {"a-1"}}
    assert _read(run / "worker.csv")[["action", "stimulus_id"]].values.tolist() == [
        ["add", ""],
        ["remove", "bye"],
    ]
    # The client connected before the capture started gets an "add" row; fire-and-forget does not.
    clients = _read(run / "client.csv")
    assert clients[["client", "action"]].values.tolist() == [
        ["Client-1", "add"],
        ["Client-2", "add"],
        ["Client-2", "remove"],
    ]
    assert sched.meta[("metaprov-capture",)]["directory"] == str(run)
    assert summary["status"] == "complete"
    assert summary["files"]["scheduler_transition.csv"] == 2
    assert (run / "dask-config.json").is_file()
    # Hooks after finalize are ignored (the files are closed and complete).
    plugin.transition("a-1", "waiting", "processing", stimulus_id="late")
    assert len(_read(run / "scheduler_transition.csv")) == 2


def test_scheduler_refuses_a_directory_holding_a_capture(tmp_path):
    _run_scheduler(tmp_path, lambda p, s: None)
    again = SchedulerCapture(tmp_path / "run", flush_interval=0)
    with pytest.raises(UsageError, match="already holds a capture"):
        asyncio.run(again.start(_fake_scheduler()))
    ok = SchedulerCapture(tmp_path / "run", flush_interval=0, overwrite=True)
    asyncio.run(ok.start(_fake_scheduler()))
    assert (tmp_path / "run" / "scheduler_transition.csv").read_text().count("\n") == 1


class _FakeWorker:
    def __init__(self, maxlen=3):
        self.address = "tcp://10.0.0.2:4000"
        self.name = 0
        self.nanny = "tcp://10.0.0.2:4001"
        self.local_directory = "/tmp/w"
        self.memory_manager = NS(memory_limit=1000)
        self.scheduler_delay = 0.5
        self.state = NS(tasks={}, threads={}, nthreads=2)
        self.transfer_incoming_log = deque(maxlen=maxlen)
        self.transfer_outgoing_log = deque(maxlen=maxlen)


def _setup_worker(tmp_path, worker):
    plugin = WorkerCapture(tmp_path, flush_interval=0, flush_rows=2)
    asyncio.run(plugin.setup(worker))
    return plugin


def _parts(tmp_path, table):
    from metaprov.capture._files import WORKER_TABLES
    from metaprov.ingest.parts import part_files, read_part

    files = part_files(tmp_path / PARTS_DIR, table)
    assert len(files) == 1 and files[0].suffix == ".arrows"
    got = read_part(files[0], WORKER_TABLES[table])
    assert got.cut_bytes == 0 and not got.notes
    return got.frame


def test_worker_rows_give_the_true_compute_window_and_thread(tmp_path):
    w = _FakeWorker()
    p = _setup_worker(tmp_path, w)
    key = ("x-1", 3)
    ts = NS(startstops=[], run_id=7)
    w.state.tasks[key] = ts
    p.transition(key, "released", "waiting")
    p.transition(key, "waiting", "ready")
    p.transition(key, "ready", "executing")
    # Dask appends the compute entry (scheduler clock = worker clock + delay) before the hook.
    now = __import__("time").time()
    ts.startstops.append(
        {"action": "compute", "start": now + 0.5 + 0.001, "stop": now + 0.5 + 0.002}
    )
    w.state.threads[key] = 140000000000001
    p.transition(key, "executing", "memory")
    p.teardown(w)
    tr = _parts(tmp_path, "worker_transition")
    assert tr["key"].tolist() == ["('x-1', 3)"] * 4
    assert list(zip(tr["start"], tr["finish"], strict=True)) == [
        ("released", "waiting"),
        ("waiting", "ready"),
        ("ready", "executing"),
        ("executing", "memory"),
    ]
    t = tr["time"].astype(float)
    assert t.iloc[2] == pytest.approx(now + 0.001, abs=1e-6)
    assert t.iloc[3] == pytest.approx(now + 0.002, abs=1e-6)
    ex = _parts(tmp_path, "worker_execution").iloc[0]
    assert ex["thread"] == "140000000000001" and ex["outcome"] == "memory" and ex["run_id"] == "7"
    assert float(ex["start"]) == t.iloc[2] and float(ex["stop"]) == t.iloc[3]
    assert ex["worker"] == "tcp://10.0.0.2:4000"


def test_a_heartbeat_between_start_and_end_does_not_shift_the_window(tmp_path):
    # Dask shifts compute times by the scheduler_delay seen when the task *started*; a heartbeat
    # can change that estimate by tens of ms before the task ends. Undoing the shift with the
    # new value would make consecutive tasks on one thread overlap.
    import time

    w = _FakeWorker()
    w.scheduler_delay = 0.020
    p = _setup_worker(tmp_path, w)
    ts = NS(startstops=[], run_id=1)
    w.state.tasks["k"] = ts
    p.transition("k", "ready", "executing")
    t_start = time.time()
    ts.startstops.append({"action": "compute", "start": t_start + 0.020, "stop": t_start + 0.0205})
    w.scheduler_delay = -0.015  # heartbeat while the task ran
    time.sleep(0.002)
    p.transition("k", "executing", "memory")
    p.teardown(w)
    ex = _parts(tmp_path, "worker_execution").iloc[0]
    assert float(ex["start"]) == pytest.approx(t_start, abs=1e-6)
    assert float(ex["stop"]) == pytest.approx(t_start + 0.0005, abs=1e-6)


def test_execution_cut_by_teardown_keeps_its_observed_row(tmp_path):
    w = _FakeWorker()
    p = _setup_worker(tmp_path, w)
    w.state.tasks["slow"] = NS(startstops=[], run_id=1)
    p.transition("slow", "ready", "executing")
    p.transition("slow", "executing", "long-running")  # seceded: still running
    p.teardown(w)
    tr = _parts(tmp_path, "worker_transition")
    assert sorted(zip(tr["start"], tr["finish"], strict=True)) == [
        ("executing", "long-running"),
        ("ready", "executing"),
    ]
    assert len(_parts(tmp_path, "worker_execution")) == 0
    p.transition("slow", "long-running", "memory")  # after teardown: ignored, no crash


def test_each_transfer_is_logged_once_even_past_the_deque_length(tmp_path):
    w = _FakeWorker(maxlen=3)
    w.transfer_incoming_log.append({"start": 0.0, "keys": {"old": 1}})  # before the capture
    p = _setup_worker(tmp_path, w)
    for i in range(10):
        w.transfer_incoming_log.append(
            {
                "start": float(i),
                "stop": i + 0.5,
                "middle": i + 0.25,
                "duration": 0.5,
                "keys": {("k", i): 8},
                "total": 8,
                "bandwidth": 16.0,
                "who": "tcp://peer:1",
            }
        )
    w.transfer_outgoing_log.append(
        {
            "start": 1.0,
            "stop": 2.0,
            "middle": 1.5,
            "duration": 1.0,
            "who": None,
            "keys": {"r": 4},
            "total": 4,
            "compressed": 3,
            "bandwidth": 4.0,
        }
    )
    assert len(w.transfer_incoming_log) == 3  # Dask's own log forgot 7 of them
    p.teardown(w)
    assert type(w.transfer_incoming_log) is deque  # restored
    df = _parts(tmp_path, "worker_transfer")
    inc = df[df["type"] == "incoming_transfer"]
    assert len(inc) == 10 and not df.drop(columns="time").duplicated().any()
    assert inc["keys"].iloc[4] == "{('k', 4): 8}"
    out = df[df["type"] == "outgoing_transfer"].iloc[0]
    assert (out["who"], out["compressed"], out["called_from"]) == ("", "3", w.address)
    assert inc["compressed"].eq("").all()


def test_worker_info_names_the_process(tmp_path):
    import json
    import os

    w = _FakeWorker()
    p = _setup_worker(tmp_path, w)
    info_file = next((tmp_path / PARTS_DIR).glob("worker_info.*.json"))
    info = json.loads(info_file.read_text())
    assert info["pid"] == os.getpid() and info["nthreads"] == 2 and info["closed_time"] is None
    assert info["worker"] == w.address and info["memory_limit"] == 1000 and info["name"] == "0"
    p.teardown(w)
    assert json.loads(info_file.read_text())["closed_time"] is not None


def test_preloaded_scheduler_never_reuses_a_captured_directory(tmp_path):
    from metaprov.capture import _free_directory

    run = tmp_path / "run"
    assert _free_directory(run) == run
    for d in (run, tmp_path / "run-2"):
        d.mkdir()
        (d / "scheduler_transition.csv").write_text(",key\n")
    assert _free_directory(run) == tmp_path / "run-3"


def test_script_environment_adds_the_preload_without_dropping_the_users(tmp_path):
    import ast

    import dask

    from metaprov.capture.script import capture_env

    with dask.config.set({"distributed.worker.preload": ["my.own.preload"]}):
        env = capture_env(tmp_path / "run", base={"PYTHONPATH": "/elsewhere"})
    assert ast.literal_eval(env["DASK_DISTRIBUTED__WORKER__PRELOAD"]) == [
        "my.own.preload",
        "metaprov.capture",
    ]
    assert ast.literal_eval(env["DASK_DISTRIBUTED__SCHEDULER__PRELOAD"])[-1] == "metaprov.capture"
    assert env["METAPROV_CAPTURE_DIR"] == str(tmp_path / "run")
    assert env["PYTHONPATH"].endswith("/elsewhere")
