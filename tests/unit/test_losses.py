"""Lost workers and lost records from the files alone (no cluster): a Mofka-style run (no
worker_loss.csv) whose worker.csv says a worker was removed and whose scheduler transitions say
what it took; executions the scheduler saw on a worker with no records; workers that sent data
no record explains; the counts' definitions."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from tinyrun import W1, W2, tiny_records

import metaprov
from metaprov.analysis.summary import counts, format_summary, silent_senders, summarize
from metaprov.synthetic import generate_run
from metaprov.validate import validate


def _drop_worker_rows(run: Path, worker: str) -> int:
    """Remove every worker-side transition row of ``worker``; returns how many."""
    path = run / "worker_transition.csv"
    wt = pd.read_csv(path, dtype=str, keep_default_na=False)
    keep = wt["called_from"] != worker
    wt[keep].to_csv(path, index=False)
    return int((~keep).sum())


def _lose(run: Path, worker: str) -> None:
    """Make ``worker`` a worker the scheduler removed mid-run: a worker.csv row, and the
    scheduler transitions Dask writes with the removal's stimulus (one result lost)."""
    st = pd.read_csv(run / "scheduler_transition.csv", dtype=str, keep_default_na=False)
    done = st[(st["start"] == "processing") & (st["finish"] == "memory") & (st["worker"] == worker)]
    first = done.iloc[0]
    t = float(first["time"]) + 1e-3
    stim = f"handle-worker-cleanup-{t}"
    row = {c: "" for c in st.columns}
    row.update(
        key=first["key"],
        prefix=first["prefix"],
        group=first["group"],
        start="memory",
        finish="released",
        stimulus_id=stim,
        called_from=first["called_from"],
        time=repr(t),
    )
    st = pd.concat([st, pd.DataFrame([row])], ignore_index=True)
    st.to_csv(run / "scheduler_transition.csv", index=False)
    wk = pd.read_csv(run / "worker.csv", dtype=str, keep_default_na=False)
    wk = pd.concat(
        [
            wk,
            pd.DataFrame(
                [{"worker": worker, "action": "remove", "stimulus_id": stim, "time": repr(t)}]
            ),
        ],
        ignore_index=True,
    )
    wk.to_csv(run / "worker.csv", index=False)


def test_a_workers_lost_records_are_replaced_by_what_the_scheduler_saw(tmp_path: Path) -> None:
    run = generate_run(tmp_path / "run", 200, seed=2, workers=3, threads=2)
    whole = metaprov.read_run(run)
    victim = str(whole.executions["worker"].value_counts().index[0])
    n_victim = int((whole.executions["worker"] == victim).sum())
    assert _drop_worker_rows(run, victim) > 0
    rec = metaprov.read_run(run)
    ex = rec.executions
    on = ex[ex["worker"] == victim]
    assert len(on) == n_victim and on["record_lost"].all()
    assert set(on["time_source"]) == {"scheduler"}
    assert len(ex) == len(whole.executions)  # nothing lost, nothing doubled
    assert not ex[ex["worker"] != victim]["record_lost"].any()
    w = rec.workers.set_index("address")
    assert int(w.loc[victim, "unrecorded"]) == n_victim
    c = counts(rec)
    assert c["executions_unrecorded"] == n_victim and c["executed"] == c["tasks"]
    text = format_summary(summarize(rec))
    assert f"lost       records of {n_victim} executions" in text


def test_a_mofka_run_says_which_worker_was_lost_from_its_transitions(tmp_path: Path) -> None:
    run = generate_run(tmp_path / "run", 200, seed=4, workers=3, threads=2)
    victim = str(metaprov.read_run(run).executions["worker"].iloc[0])
    _lose(run, victim)
    rec = metaprov.read_run(run)
    ev = rec.worker_events
    gone = ev[ev["event"].eq("removed") & ev["lost"]]  # (the run's own end closes them all)
    assert list(gone["worker"]) == [victim]
    r = gone.iloc[0]
    assert bool(r["lost"]) and r["reason"] == "connection closed"
    assert (int(r["n_results"]), int(r["n_processing"]), int(r["n_data"])) == (1, 0, 0)
    assert r["source"] == "scheduler_transition.csv" and pd.isna(r["expected"])
    assert list(rec.lost_tasks["kind"]) == ["result"]
    assert bool(rec.workers.set_index("address").loc[victim, "lost"])
    s = summarize(rec)
    assert s["losses"]["workers_lost"] == 1
    assert f"lost       worker {victim}" in format_summary(s)
    text = metaprov.to_prov(rec)
    out = tmp_path / "run.nt"
    metaprov.write(text, out)
    nt = out.read_text(encoding="utf-8")
    assert '<https://w3id.org/metaprov/ns#lostWorkerCount> "1"' in nt
    assert '<https://w3id.org/metaprov/ns#lossReason> "connection closed"' in nt
    report = validate(out)
    assert report.conforms
    assert {v.shape for v in report.violations if v.severity == "Warning"} == {"LostWorkers"}


def test_a_run_without_losses_says_nothing_of_them(tmp_path: Path) -> None:
    rec = metaprov.read_run(generate_run(tmp_path / "run", 100, seed=1))
    s = summarize(rec)
    assert s["losses"]["workers_lost"] == 0 and s["losses"]["removals"] == []
    assert "lost " not in format_summary(s)
    assert not rec.executions["record_lost"].any()


def test_a_worker_that_ran_nothing_yet_sent_data_is_named() -> None:
    rec = tiny_records()
    assert silent_senders(rec) == []
    # W1's executions are gone: it sent a and b, which it never received
    rec.executions = rec.executions[rec.executions["worker"] != W1].reset_index(drop=True)
    got = silent_senders(rec)
    assert got == [{"worker": W1, "transfers": 1, "keys": 2, "bytes": 300}]
    assert W2 not in {g["worker"] for g in got}


def test_retried_means_more_than_one_execution() -> None:
    rec = tiny_records()
    c = counts(rec)
    n_exec = rec.executions.groupby("key").size()
    assert c["executions"] == len(rec.executions)
    assert c["executed"] == int((n_exec > 0).sum())
    assert c["executed"] + c["ran_unrecorded"] + c["never_ran"] == c["tasks"]
