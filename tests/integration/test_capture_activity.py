"""Where the workers' time went, recorded on a real LocalCluster and read back.

Two worker processes (1 thread each, 127.0.0.1) with a small memory limit and a low spill
threshold run CPU-bound tasks whose results (4 MB each) are combined across the workers, so
that the run computes, moves data between the workers and spills to disk. The capture's
``worker_metric.csv`` / ``worker_memory.csv`` are checked against what Dask itself totals
(``Worker.digests_total``), read back into the ``activity`` and ``memory`` tables, exported,
validated, loaded and asked the packaged question.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")

import dask  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

from metaprov.capture import record  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

N = 6  # CPU-bound tasks per worker


def spin(i: int) -> np.ndarray:
    """CPU-bound for ~20 ms, then a 4 MB result."""
    s = 0
    for j in range(200_000):
        s += j
    return np.full(500_000, float(i + s % 2))


def pair(a: np.ndarray, b: np.ndarray) -> float:
    return float((a + b).sum())


def _digests(dask_worker) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The worker's own totals of the execute context per (prefix, activity, unit)."""
    out: dict[str, float] = {}
    for name, value in dask_worker.digests_total.items():
        if isinstance(name, tuple) and name[0] == "execute":
            _, _span, prefix, activity, unit = name
            k = f"{prefix}|{activity}|{unit}"
            out[k] = out.get(k, 0) + value
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("activity") / "run"
    # spill from 8 MB of managed memory on (two results); never pause or kill in this test
    config = {
        "distributed.worker.memory.target": 0.04,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.terminate": False,
    }
    with (
        dask.config.set(config),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit="200MB",
        ) as cluster,
        Client(cluster) as client,
    ):
        workers = sorted(client.scheduler_info()["workers"])
        with record(client, out, memory_interval=0.2):
            xs = [client.submit(spin, i, workers=[workers[i % 2]]) for i in range(2 * N)]
            ys = [
                client.submit(pair, xs[i], xs[i + 1], workers=[workers[i % 2]])
                for i in range(0, 2 * N, 2)
            ]
            client.gather(ys)
            time.sleep(1.5)  # a heartbeat or two reports the spilled bytes
            digests = client.run(_digests)
            del xs, ys
    from metaprov import read_run

    return {"dir": out, "workers": workers, "digests": digests, "records": read_run(out)}


def test_executions_carry_their_activity_per_attempt(run: dict) -> None:
    rec = run["records"]
    act = rec.activity
    assert len(act), "no activity rows"
    per = act[act["key"].notna()]
    # every execute row is an execution's, matched to its attempt
    assert (per["context"] == "execute").all()
    assert per["attempt"].notna().all()
    ran = rec.executions[rec.executions["outcome"] == "memory"]
    cpu = per[(per["activity"] == "thread-cpu") & (per["unit"] == "seconds")]
    assert set(cpu["key"]) == set(ran["key"].astype(str))
    assert set(cpu["prefix"]) == {"spin", "pair"}
    spin_cpu = cpu.loc[cpu["prefix"] == "spin", "value"]
    assert len(spin_cpu) == 2 * N and (spin_cpu > 0.005).all(), spin_cpu.tolist()
    assert (per["span"] == "default").all()
    assert (per["end"] >= per["start"]).all()
    assert rec.accounting.files["worker_metric.csv"].not_used == {}


def test_recorded_totals_equal_what_dask_itself_totals(run: dict) -> None:
    act = run["records"].activity
    ex = act[act["context"] == "execute"].copy()
    ex["k"] = ex["prefix"] + "|" + ex["activity"] + "|" + ex["unit"]
    ours = ex.groupby(["worker", "k"])["value"].sum()
    for worker, totals in run["digests"].items():
        for k, value in totals.items():
            assert ours.loc[(worker, k)] == pytest.approx(value, rel=1e-9, abs=1e-12), (worker, k)


def test_transfers_and_spilling_are_measured(run: dict) -> None:
    act = run["records"].activity
    by = act.groupby(["context", "activity", "unit"])["value"].sum()
    # the pairs fetched an input from the other worker: network time on both sides, bytes sent
    assert by.loc[("gather-dep", "network", "seconds")] > 0
    assert by.loc[("get-data", "network", "seconds")] > 0
    sent = act[(act["context"] == "get-data") & (act["unit"] == "bytes")]["value"].sum()
    assert sent >= 4_000_000 * N
    # results were spilled: bytes written to disk
    spilled = act[(act["activity"] == "disk-write") & (act["unit"] == "bytes")]["value"].sum()
    assert spilled >= 4_000_000


def test_memory_samples_per_worker(run: dict) -> None:
    mem = run["records"].memory
    assert set(mem["worker"]) == set(run["workers"])
    assert (mem.groupby("worker").size() >= 2).all()
    assert (mem["memory_limit"] == 200_000_000).all()
    assert (mem["process"] > 0).all()
    assert (mem["managed"] + mem["unmanaged"] == mem["process"]).all()
    assert mem["spilled"].max() > 0
    assert not mem["paused"].any()
    assert mem["time"].is_monotonic_increasing


def test_export_validates_and_answers_where_the_time_went(run: dict, tmp_path: Path) -> None:
    pytest.importorskip("pyoxigraph")
    from metaprov.mapping import to_prov
    from metaprov.queries import run_question
    from metaprov.store import load, open_store
    from metaprov.validate import validate
    from metaprov.write import write

    rec = run["records"]
    out = tmp_path / "run.nt"
    write(to_prov(rec), out)
    report = validate(out, engine="columnar")
    assert report.conforms, report.text()
    text = out.read_text(encoding="utf-8")
    assert text.count("#ActivityShare>") == len(
        rec.activity.groupby(
            ["worker", "context", "prefix", "span_id", "activity", "unit"], dropna=False
        )
    )
    assert text.count("#MemorySample>") == len(rec.memory)
    with open_store(tmp_path / "store") as store:
        load([out], store)
        answer = run_question(store, "worker-time")
    assert isinstance(answer, pd.DataFrame)
    assert not answer.attrs.get("notes")
    cpu = answer[(answer["context"] == "execute") & (answer["activity"] == "thread-cpu")]
    assert set(cpu["prefix"]) == {"spin", "pair"}
    ours = rec.activity
    want = ours[
        (ours["prefix"] == "spin")
        & (ours["activity"] == "thread-cpu")
        & (ours["unit"] == "seconds")
    ]["value"].sum()
    got = float(cpu.loc[cpu["prefix"] == "spin", "seconds"].iloc[0])
    assert got == pytest.approx(want, rel=1e-9)
    assert answer["share"].astype(float).sum() == pytest.approx(1.0, rel=1e-6)
