"""A real Dask run captured end to end: what the files say equals what Dask itself reports.

A LocalCluster (2 worker processes x 2 threads, 127.0.0.1) runs a graph with dependencies,
transfers between the workers, a failing task, a task that succeeds on its retry and tasks doing
file I/O. Every task function also writes a ground-truth record (key, ``threading.get_ident()``,
pid) from inside the task. The capture is then checked against Dask's own reports (worker
execution events, scheduler task states, transfer logs, futures) and the ground truth, and read
back with :func:`metaprov.read_run`; when the PROV export and the store exist, it is exported,
loaded and queried with SPARQL, and the counts must match again.
"""

from __future__ import annotations

import ast
import json
import os
import threading
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")

from distributed import Client, LocalCluster, get_worker  # noqa: E402

from metaprov.capture import MOFKA_FILES, record  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


# -- task functions (run on the workers; they log what the task itself sees) -------------------


def _truth(truth_dir: str, **extra) -> None:
    key = get_worker().get_current_task()
    rec = {"key": str(key), "thread": threading.get_ident(), "pid": os.getpid(), **extra}
    Path(truth_dir, f"{uuid.uuid4().hex}.json").write_text(json.dumps(rec))


def load(i: int, workdir: str, truth: str) -> int:
    p = Path(workdir, f"in-{i}.bin")
    p.write_bytes(b"x" * (1000 * (i + 1)))
    n = len(p.read_bytes())
    time.sleep(0.02)  # lets both threads of a worker run at once
    _truth(truth)
    return n


def add(a: int, b: int, truth: str) -> int:
    _truth(truth)
    return a + b


def flaky(x: int, marker: str, truth: str) -> int:
    _truth(truth)
    if not os.path.exists(marker):
        Path(marker).write_text("failed once")
        raise RuntimeError("first attempt fails")
    return x


def broken(x: int, truth: str) -> int:
    _truth(truth)
    raise ValueError("always fails")


def io_task(i: int, workdir: str, truth: str) -> int:
    p = Path(workdir, f"io-{i}.txt")
    with open(p, "w") as fh:
        fh.write("x" * 4096)
    with open(p) as fh:
        n = len(fh.read())
    time.sleep(0.05)
    _truth(truth)
    return n


# -- Dask's own reports -------------------------------------------------------------------------


def _worker_events(dask_worker) -> list[tuple[str, str, str]]:
    from distributed.worker_state_machine import ExecuteFailureEvent, ExecuteSuccessEvent

    return [
        (str(ev.key), type(ev).__name__, dask_worker.address)
        for ev in dask_worker.state.stimulus_log
        if isinstance(ev, (ExecuteSuccessEvent, ExecuteFailureEvent))
    ]


def _worker_transfers(dask_worker) -> dict[str, int]:
    return {
        "incoming_transfer": len(dask_worker.transfer_incoming_log),
        "outgoing_transfer": len(dask_worker.transfer_outgoing_log),
        "to_client": sum(e["who"] is None for e in dask_worker.transfer_outgoing_log),
    }


def _scheduler_edges(dask_scheduler) -> list[tuple[str, str]]:
    return sorted(
        (str(ts.key), str(d.key)) for ts in dask_scheduler.tasks.values() for d in ts.dependencies
    )


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def _read_truth(truth: Path) -> pd.DataFrame:
    return pd.DataFrame([json.loads(p.read_text()) for p in sorted(truth.glob("*.json"))])


def _csv(run: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(run / name, index_col=0, dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def captured(client, tmp_path_factory):
    """Run the workload under capture; return the run dir, Dask's reports and the ground truth."""
    base = tmp_path_factory.mktemp("capture")
    run, workdir, truth = base / "run", base / "work", base / "truth"
    workdir.mkdir()
    truth.mkdir()
    w0, w1 = sorted(client.scheduler_info()["workers"])
    reports: dict = {}
    with record(client, run) as cap:
        loads = [
            client.submit(
                load, i, str(workdir), str(truth), key=("load", i), workers=[(w0, w1)[i % 2]]
            )
            for i in range(6)
        ]
        sums = [
            client.submit(
                add, loads[i], loads[i + 1], str(truth), key=("add", i // 2), workers=[w0]
            )
            for i in range(0, 6, 2)
        ]
        total = client.submit(add, sums[0], sums[1], str(truth), key="total", workers=[w1])
        retried = client.submit(
            flaky, total, str(workdir / "marker"), str(truth), key="flaky", retries=1
        )
        failing = client.submit(broken, sums[2], str(truth), key="broken")
        assert retried.result() == 1000 * (1 + 2 + 3 + 4)
        with pytest.raises(ValueError, match="always fails"):
            failing.result()
        futures = [*loads, *sums, total, retried, failing]
        # What Dask itself reports, taken while the futures still hold every task.
        reports["events"] = [e for evs in client.run(_worker_events).values() for e in evs]
        reports["transfers"] = client.run(_worker_transfers)
        reports["edges"] = client.run_on_scheduler(_scheduler_edges)
        reports["status"] = {str(f.key): f.status for f in futures}
        reports["workers"] = client.run(
            lambda dask_worker: (os.getpid(), dask_worker.state.nthreads)
        )
    client.cancel(futures)
    return {
        "run": run,
        "cap": cap,
        "truth": _read_truth(truth),
        "reports": reports,
        "keys": set(reports["status"]),
    }


# -- the capture's files against Dask's reports -------------------------------------------------


def test_files_have_exactly_the_mofka_columns_and_are_complete(captured):
    run = captured["run"]
    for name, columns in MOFKA_FILES.items():
        header = (run / name).read_text().splitlines()[0]
        assert header == "," + ",".join(columns), name
        df = _csv(run, name)
        assert df.index.tolist() == [str(i) for i in range(len(df))], name
        # record() returned only once every row was on disk.
        assert captured["cap"].files[name] == len(df), name
    assert not (run / "metaprov-parts").exists()
    meta = json.loads((run / "metaprov-run.json").read_text())
    assert meta["status"] == "complete" and meta["incomplete_workers"] == []
    assert meta["versions"]["distributed"] == distributed.__version__
    config = json.loads((run / "dask-config.json").read_text())
    assert "distributed" in config


def test_executions_equal_dask_worker_events_and_ground_truth(captured):
    run, truth = captured["run"], captured["truth"]
    events = pd.DataFrame(captured["reports"]["events"], columns=["key", "event", "worker"])
    events = events[events["key"].isin(captured["keys"])]
    ex = _csv(run, "worker_execution.csv")
    ex = ex[ex["key"].isin(captured["keys"])]
    # 6 loads + 3 adds + total + flaky twice + broken = 13 executions.
    assert len(truth) == len(events) == len(ex) == 13
    assert ex.groupby("key").size().to_dict() == events.groupby("key").size().to_dict()
    assert ex.groupby("key").size()["flaky"] == 2
    outcome = {"ExecuteSuccessEvent": "memory", "ExecuteFailureEvent": "error"}
    assert sorted(zip(ex["key"], ex["outcome"], strict=True)) == sorted(
        zip(events["key"], events["event"].map(outcome), strict=True)
    )
    # The worker transitions carry the same executions, with the true compute window.
    wt = _csv(run, "worker_transition.csv")
    starts = wt[(wt["finish"] == "executing") & wt["key"].isin(captured["keys"])]
    assert len(starts) == 13
    # erred tasks: what the futures say
    st = _csv(run, "scheduler_transition.csv")
    erred = set(st.loc[st["finish"] == "erred", "key"])
    assert (
        erred == {k for k, s in captured["reports"]["status"].items() if s == "error"} == {"broken"}
    )


def test_thread_ids_equal_what_the_tasks_saw(captured):
    run, truth = captured["run"], captured["truth"]
    ex = _csv(run, "worker_execution.csv")
    ex = ex[ex["key"].isin(captured["keys"])]
    # Every execution (also the failed first attempt of 'flaky') ran on the thread recorded.
    seen = sorted(zip(truth["key"], truth["thread"].astype(str), strict=True))
    assert sorted(zip(ex["key"], ex["thread"], strict=True)) == seen
    # The scheduler rows of finished/erred tasks carry the thread of the final attempt.
    st = _csv(run, "scheduler_transition.csv")
    done = st[
        (st["start"] == "processing")
        & st["finish"].isin(["memory", "erred"])
        & st["key"].isin(captured["keys"])
    ]
    assert set(zip(done["key"], done["thread"], strict=True)) <= set(seen)
    # Each worker process maps to its pid; both threads of each worker ran tasks.
    info = _csv(run, "workers_info.csv")
    pids = {str(p) for p, _ in captured["reports"]["workers"].values()}
    assert set(info["pid"]) == pids and set(info["nthreads"]) == {"2"}
    assert set(truth["pid"].astype(str)) <= pids


def test_dependencies_equal_the_scheduler_task_graph(captured):
    run = captured["run"]
    g = _csv(run, "graph.csv")
    edges = set()
    for cell in g["dependencies"]:
        for k, deps in ast.literal_eval(cell).items():
            edges |= {(str(k), str(d)) for d in deps}
    dask_edges = {e for e in map(tuple, captured["reports"]["edges"]) if e[0] in captured["keys"]}
    mine = {e for e in edges if e[0] in captured["keys"]}
    assert mine == dask_edges
    assert len(mine) == 6 + 2 + 1 + 1  # adds, total, flaky, broken


def test_transfers_equal_the_worker_logs_without_duplicates(captured):
    run = captured["run"]
    tr = _csv(run, "worker_transfer.csv")
    logged = captured["reports"]["transfers"]
    for kind in ("incoming_transfer", "outgoing_transfer"):
        assert (tr["type"] == kind).sum() == sum(v[kind] for v in logged.values()), kind
    # The adds pinned to w0 fetched the odd loads from w1 (possibly several keys per transfer).
    incoming = {
        str(k)
        for cell in tr.loc[tr["type"] == "incoming_transfer", "keys"]
        for k in ast.literal_eval(cell)
    }
    assert {"('load', 1)", "('load', 3)", "('load', 5)"} <= incoming
    assert not tr.drop(columns="time").duplicated().any()
    # Transfer keys use the same string form as the transition files.
    keys = {str(k) for cell in tr["keys"] for k in ast.literal_eval(cell)}
    assert "('load', 1)" in keys


def test_read_run_gives_the_same_counts(captured):
    metaprov = pytest.importorskip("metaprov")
    records = metaprov.read_run(captured["run"], darshan=False)
    ex = records.executions[records.executions["key"].isin(captured["keys"])]
    assert len(ex) == len(captured["truth"]) == 13
    tasks = records.tasks.set_index("key")
    assert tasks.loc["flaky", "n_executions"] == 2 and bool(tasks.loc["flaky", "retried"])
    assert bool(tasks.loc["broken", "erred"]) and not bool(tasks.loc["total", "erred"])
    dep = records.dependencies.drop_duplicates(["key", "dependency"])
    assert len(dep[dep["key"].isin(captured["keys"])]) == 10
    w = records.workers.set_index("address")
    assert w["pid"].notna().all() and (w["threads"] == 2).all()
    # Final executions carry the thread the task saw.
    truth = captured["truth"]
    final = ex.sort_values("attempt").groupby("key").tail(1)
    seen = set(zip(truth["key"], truth["thread"].astype("uint64"), strict=True))
    assert set(zip(final["key"], final["thread"].astype("uint64"), strict=True)) <= seen


_PREFIXES = """PREFIX mp: <https://w3id.org/metaprov/ns#>
PREFIX prov: <http://www.w3.org/ns/prov#>
"""


def test_export_load_query_counts_equal_what_dask_reported(captured, tmp_path):
    """capture -> export (N-Triples) -> load into the embedded store -> SPARQL counts."""
    pytest.importorskip("metaprov.export", reason="needs metaprov.to_prov / export")
    pytest.importorskip("metaprov.store", reason="needs metaprov.load / query")
    import metaprov
    from metaprov.export import export

    result = export(captured["run"], tmp_path / "run.nt", darshan=False)
    assert result.triples > 0
    store = tmp_path / "store"
    metaprov.load(tmp_path / "run.nt", store=store)

    def select(where: str, var: str) -> list[str]:
        df = metaprov.query(f"{_PREFIXES}SELECT ?{var} WHERE {{ {where} }}", store=store)
        return [str(v) for v in df[var]]

    keys = captured["keys"]
    reports = captured["reports"]
    events = [e for e in reports["events"] if e[0] in keys]
    # Task executions (every attempt) = Dask's ExecuteSuccess/ExecuteFailure events.
    ex_keys = select("?e a mp:TaskExecution ; mp:task/mp:key ?k", "k")
    assert sorted(k for k in ex_keys if k in keys) == sorted(e[0] for e in events)
    failed = select(
        "?e a mp:TaskExecution ; mp:outcome ?o ; mp:task/mp:key ?k FILTER(?o = 'error')", "k"
    )
    assert sorted(k for k in failed if k in keys) == sorted(
        e[0] for e in events if e[1] == "ExecuteFailureEvent"
    )
    # Erred tasks = futures in error.
    erred = select("?t a mp:Task ; mp:state 'erred' ; mp:key ?k", "k")
    assert set(erred) & keys == {k for k, st in reports["status"].items() if st == "error"}
    # Dependency edges = the scheduler's task graph.
    deps = metaprov.query(
        f"{_PREFIXES}SELECT ?k ?d WHERE {{ ?t mp:dependsOn ?u . ?t mp:key ?k . ?u mp:key ?d }}",
        store=store,
    )
    got = {(str(k), str(d)) for k, d in zip(deps["k"], deps["d"], strict=True) if str(k) in keys}
    assert got == {tuple(e) for e in reports["edges"] if e[0] in keys}
    # Transfers = the workers' own logs: each worker-to-worker transfer (logged on both sides)
    # once, plus the results sent to the client.
    logged = reports["transfers"].values()
    expected = sum(v["incoming_transfer"] + v["to_client"] for v in logged)
    assert len(select("?x a mp:Transfer", "x")) == expected
    # Threads: the ids the tasks saw, so Darshan records of such a run link to them.
    threads = select("?th a mp:Thread ; mp:threadId ?id", "id")
    assert {int(t) for t in threads} == set(captured["truth"]["thread"].astype("uint64"))


def test_concurrent_file_io_threads_are_recorded_exactly(client, tmp_path):
    """Many I/O tasks at once: both threads of both workers run tasks, and each is recorded."""
    workdir, truth = tmp_path / "work", tmp_path / "truth"
    workdir.mkdir()
    truth.mkdir()
    with record(client, tmp_path / "run"):
        futures = client.map(
            io_task,
            range(16),
            workdir=str(workdir),
            truth=str(truth),
            key=[("io", i) for i in range(16)],
        )
        assert sum(client.gather(futures)) == 16 * 4096
    ex = _csv(tmp_path / "run", "worker_execution.csv")
    seen = _read_truth(truth)
    assert len(ex) == len(seen) == 16
    assert sorted(zip(ex["key"], ex["thread"], strict=True)) == sorted(
        zip(seen["key"], seen["thread"].astype(str), strict=True)
    )
    # 2 workers x 2 threads: four distinct thread ids, each mapped to its own worker process.
    assert ex.groupby("worker")["thread"].nunique().to_dict() == dict.fromkeys(set(ex["worker"]), 2)
    assert len(set(ex["worker"])) == 2
    # The compute window recorded encloses nothing else on that thread: windows never overlap.
    ex = ex.assign(start=ex["start"].astype(float), stop=ex["stop"].astype(float))
    for _, grp in ex.sort_values("start").groupby(["worker", "thread"]):
        assert (grp["start"].iloc[1:].to_numpy() >= grp["stop"].iloc[:-1].to_numpy()).all()


def test_preload_on_dask_scheduler_and_dask_worker(tmp_path):
    """``dask scheduler --preload metaprov.capture`` / ``dask worker --preload ...``: files complete
    after the scheduler shuts down, the workers having used the scheduler's directory."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
    }
    run, sched_file = tmp_path / "run", tmp_path / "sched.json"
    common = ["--preload", "metaprov.capture"]
    procs = []
    try:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0"]
                + ["--no-dashboard", "--scheduler-file", str(sched_file), *common],
                env={**env, "METAPROV_CAPTURE_DIR": str(run)},
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        # The workers get no directory: they ask the scheduler for it.
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "dask", "worker", "--scheduler-file", str(sched_file)]
                + [
                    "--nworkers",
                    "2",
                    "--nthreads",
                    "2",
                    "--host",
                    "127.0.0.1",
                    "--no-dashboard",
                    *common,
                ],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        deadline = time.time() + 30
        while not sched_file.exists() and time.time() < deadline:
            time.sleep(0.2)
        with Client(scheduler_file=str(sched_file), timeout=30) as c:
            c.wait_for_workers(2, timeout=30)
            futures = c.map(
                lambda i: (i, threading.get_ident()), range(20), key=[f"job-{i}" for i in range(20)]
            )
            threads = {str(i): t for i, t in c.gather(futures)}
            c.shutdown()
        for p in procs:
            p.wait(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    meta = json.loads((run / "metaprov-run.json").read_text())
    assert meta["status"] == "complete" and meta["incomplete_workers"] == []
    assert len(_csv(run, "workers_info.csv")) == 2
    ex = _csv(run, "worker_execution.csv")
    assert sorted(ex["key"]) == sorted(f"job-{i}" for i in range(20))
    assert {k: int(t) for k, t in zip(ex["key"], ex["thread"], strict=True)} == {
        f"job-{i}": t for i, t in threads.items()
    }
    st = _csv(run, "scheduler_transition.csv")
    assert set(st.loc[st["finish"] == "memory", "key"]) == {f"job-{i}" for i in range(20)}


def test_record_refuses_to_mix_two_runs_in_one_directory(client, tmp_path):
    from metaprov.errors import MetaprovError

    with record(client, tmp_path / "run"):
        client.submit(sum, [1, 2], key="first").result()
    before = (tmp_path / "run" / "scheduler_transition.csv").read_text()
    with (
        pytest.raises(MetaprovError, match="already holds a capture"),
        record(client, tmp_path / "run"),
    ):
        pass
    assert (tmp_path / "run" / "scheduler_transition.csv").read_text() == before
    # The failed attempt left no plugin behind: a new capture elsewhere works.
    with record(client, tmp_path / "other") as cap:
        client.submit(sum, [3, 4], key="second").result()
    assert cap.files["worker_execution.csv"] == 1


def _inc(x: int) -> int:
    return x + 1


def test_a_key_with_a_carriage_return_keeps_every_row(client, tmp_path):
    """A task keyed with a carriage return (a key is any text the user gives) is written quoted
    in every file the capture writes, the scheduler's and the merged workers': every row reads
    back, the key exact. (Unquoted, every CSV reader ended the row there: 12 of 15 scheduler rows
    were unreadable.)"""
    import metaprov

    with record(client, tmp_path / "run"):
        a = client.submit(_inc, 1, key="odd\rkey")
        assert client.submit(_inc, a, key="after-odd").result() == 3
    records = metaprov.read_run(tmp_path / "run")
    assert sorted(records.tasks["key"]) == ["after-odd", "odd\rkey"]
    assert len(records.executions) == 2
    unused = {
        name: f.not_used
        for name, f in records.accounting.files.items()
        if name.endswith(".csv") and f.not_used
    }
    assert unused == {}
    import csv

    with (tmp_path / "run" / "scheduler_transition.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))[1:]
    assert len(rows) >= 6  # both tasks: waiting, processing, memory
    assert records.accounting.files["scheduler_transition.csv"].rows_read == len(rows)
    for name in ("scheduler_transition.csv", "worker_transition.csv", "worker_execution.csv"):
        assert b'"odd\rkey"' in (tmp_path / "run" / name).read_bytes(), name


def test_the_run_starts_once_every_plugin_of_the_capture_is_in_place(client, tmp_path, monkeypatch):
    """The capture's own set-up (the workers' plugin registered: a round trip to every worker)
    is not the run's: the workers and the client present before ``record`` get their ``add``
    rows, and ``metaprov-run.json`` its ``started``, when the set-up is over. A scheduler plugin
    registered on its own (as a preloaded one) starts when it starts."""
    from metaprov.capture import (
        PLUGIN_NAME,
        SchedulerCapture,
        _finalize_on_scheduler,
        _ready_on_scheduler,
    )

    def adds(run: Path) -> list[float]:
        workers = _csv(run, "worker.csv")
        clients = _csv(run, "client.csv")
        rows = [*workers[workers["action"] == "add"]["time"], *clients["time"]]
        return [float(t) for t in rows]

    registered: dict[str, float] = {}
    register = client.register_plugin

    def timed(plugin, *args, **kwargs):
        out = register(plugin, *args, **kwargs)
        registered[type(plugin).__name__] = time.time()
        return out

    monkeypatch.setattr(client, "register_plugin", timed)
    with record(client, tmp_path / "run") as cap:
        after_setup = time.time()
        client.submit(sum, [1, 2], key="first").result()
    monkeypatch.undo()
    started = json.loads((tmp_path / "run" / "metaprov-run.json").read_text())["started_epoch"]
    assert cap.files["worker_execution.csv"] == 1
    t = adds(tmp_path / "run")
    assert len(t) >= 3 and len(set(t)) == 1  # two workers and this client, all at the start
    assert registered["WorkerCapture"] <= t[0] == started <= after_setup

    # awaiting ``ready``: a periodic flush does not write the rows before it; ``ready`` does
    plugin = SchedulerCapture(tmp_path / "late", await_ready=True, flush_interval=0.05)
    client.register_plugin(plugin, name=PLUGIN_NAME)
    before_ready = time.time()
    time.sleep(0.3)  # flushes happen meanwhile
    assert "add" not in (tmp_path / "late" / "worker.csv").read_text()
    client.run_on_scheduler(_ready_on_scheduler, name=PLUGIN_NAME)
    client.run_on_scheduler(_finalize_on_scheduler, name=PLUGIN_NAME)
    late = adds(tmp_path / "late")
    assert len(late) >= 3 and min(late) >= before_ready + 0.3

    # on its own (no ``ready``): the rows carry the time the plugin started, written at the
    # first flush
    plugin = SchedulerCapture(tmp_path / "alone", flush_interval=0.05)
    before = time.time()
    client.register_plugin(plugin, name=PLUGIN_NAME)
    time.sleep(0.3)
    alone = adds(tmp_path / "alone")  # already on disk
    client.run_on_scheduler(_finalize_on_scheduler, name=PLUGIN_NAME)
    assert len(alone) >= 3 and max(alone) < before + 0.3
