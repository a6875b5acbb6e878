"""A worker SIGKILLed mid-run (a real LocalCluster, 2 worker processes): the executions the
scheduler saw it finish are kept (from the scheduler's transitions), and every surface says a
worker was lost: the capture's files, metaprov-run.json, inspect, the PROV and validate."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("distributed")

from click.testing import CliRunner  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import metaprov  # noqa: E402
from metaprov.analysis.summary import summarize  # noqa: E402
from metaprov.capture import record  # noqa: E402
from metaprov.cli import cli  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def nap(i: int) -> int:
    time.sleep(0.04)
    return i


def total(*xs: int) -> int:
    return sum(xs)


def _results_on(dask_scheduler, address: str) -> int:  # type: ignore[no-untyped-def]
    ws = dask_scheduler.workers.get(address)
    return 0 if ws is None else len(ws.has_what)


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A captured run of 80 tasks during which one of the two workers is SIGKILLed once it
    holds 8 results. Returns the run directory and the victim's address."""
    run = tmp_path_factory.mktemp("lost") / "run"
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        # rows are flushed at the end only: the victim's own records all die with it
        with record(client, run, flush_interval=600):
            victim = sorted(client.scheduler_info()["workers"])[0]
            pid = client.run(os.getpid, workers=[victim])[victim]
            futures = client.map(nap, range(80), pure=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if client.run_on_scheduler(_results_on, address=victim) >= 8:
                    break
                time.sleep(0.01)
            os.kill(pid, signal.SIGKILL)
            assert client.submit(total, *futures).result(timeout=60) == sum(range(80))
    return run, victim


@pytest.fixture(scope="module")
def records(killed):  # type: ignore[no-untyped-def]
    return metaprov.read_run(killed[0])


def test_the_lost_workers_executions_are_kept_from_the_scheduler(killed, records) -> None:  # type: ignore[no-untyped-def]
    run, victim = killed
    sched = pd.read_csv(run / "scheduler_transition.csv")
    seen = sched[
        (sched["start"] == "processing")
        & (sched["finish"] == "memory")
        & (sched["worker"] == victim)
    ]
    assert len(seen) >= 8  # the scheduler saw the victim finish tasks before it died
    ex = records.executions
    on_victim = ex[ex["worker"] == victim]
    assert len(on_victim) >= len(seen)
    assert set(seen["key"]) <= set(on_victim["key"])
    # marked by their evidence: the scheduler's, the worker's own record lost
    kept = on_victim[on_victim["record_lost"].fillna(False)]
    assert len(kept) == len(on_victim) >= len(seen)  # its own records died with it
    assert set(kept["time_source"]) <= {"scheduler"}
    # the PROV has them, on the victim, marked
    graph = metaprov.to_prov(records)
    out = run.parent / "run.nt"
    metaprov.write(graph, out)
    text = out.read_text(encoding="utf-8")
    assert text.count("<https://w3id.org/metaprov/ns#recordLost>") == len(kept)
    assert "<https://w3id.org/metaprov/ns#lostWorkerCount>" in text


def test_the_loss_is_recorded_with_its_reason_and_the_tasks_it_took(killed, records) -> None:  # type: ignore[no-untyped-def]
    run, victim = killed
    meta = json.loads((run / "metaprov-run.json").read_text(encoding="utf-8"))
    assert meta["status"] == "incomplete"
    assert [w["worker"] for w in meta["lost_workers"]] == [victim]
    loss = pd.read_csv(run / "worker_loss.csv")
    assert list(loss["worker"]) == [victim]
    assert loss["stimulus_id"].iloc[0].startswith("handle-worker-cleanup")
    ev = records.worker_events
    gone = ev[ev["event"] == "removed"]
    assert list(gone["worker"]) == [victim] and bool(gone["lost"].iloc[0])
    assert gone["reason"].iloc[0] == "connection closed"
    assert gone["source"].iloc[0] == "worker_loss.csv"
    lost = records.lost_tasks
    assert int(gone["n_results"].iloc[0]) == int((lost["kind"] == "result").sum()) >= 8
    assert lost["redone"].all()  # the run finished: every lost task was computed again
    w = records.workers.set_index("address")
    assert bool(w.loc[victim, "lost"]) and not w.drop(victim)["lost"].any()


def test_inspect_and_validate_say_a_worker_was_lost(killed, records) -> None:  # type: ignore[no-untyped-def]
    run, victim = killed
    runner = CliRunner()
    res = runner.invoke(cli, ["inspect", str(run)])
    assert res.exit_code == 0, res.output
    assert f"lost       worker {victim}" in res.output
    assert "known from the scheduler only" in res.output
    data = summarize(records)  # what inspect --json prints
    assert data["losses"]["workers_lost"] == 1
    assert data["losses"]["removals"][0]["worker"] == victim
    res = runner.invoke(cli, ["validate", str(run)])
    assert res.exit_code == 0, res.output  # conforms: a warning, not a violation
    assert "warning: LostWorkers" in res.output


def test_a_partitioned_export_keeps_the_same_losses(killed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The run in 3 partitions on a cluster: the same graph as the single export, losses too."""
    import pyoxigraph

    from metaprov.export import export
    from metaprov.export.campaign import export_campaign

    run, _ = killed

    def quads(f: Path) -> set[tuple[str, ...]]:
        with f.open("rb") as fh:
            return {
                (str(q.subject), str(q.predicate), str(q.object), str(q.graph_name))
                for q in pyoxigraph.parse(fh, format=pyoxigraph.RdfFormat.N_QUADS)
            }

    export(run, tmp_path / "single.nq")
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        result = export_campaign(
            [run], tmp_path / "out", scheduler=cluster.scheduler_address, partitions=3
        )
    (entry,) = result.manifest["runs"]
    single = quads(tmp_path / "single.nq")
    assert any("lostWorkerCount" in q[1] for q in single)
    assert quads(tmp_path / "out" / entry["shard"]) == single
