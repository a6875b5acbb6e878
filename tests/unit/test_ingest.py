"""read_run on tiny runs written by the test: consolidation rules, exact thread ids, UTC times."""

from __future__ import annotations

import pandas as pd
import pytest
from runfiles import T1, T2, W1, W2, A, B, tiny_files, write_run

import metaprov
from metaprov.ingest.dask_csv import key_split


def ts(epoch: float) -> pd.Timestamp:
    return pd.Timestamp(round(epoch * 1e6), unit="us", tz="UTC")


@pytest.fixture
def tiny(tmp_path):
    return metaprov.read_run(write_run(tmp_path / "run", tiny_files()))


def test_tasks_one_row_per_key(tiny):
    assert sorted(tiny.tasks["key"]) == sorted([A, B])
    assert tiny.tasks["key"].is_unique


def test_thread_ids_are_exact_64_bit(tiny):
    t = tiny.tasks.set_index("key")
    assert t.loc[A, "thread"] == T1
    assert int(t.loc[B, "thread"]) == T2 == 2**64 - 1
    assert str(tiny.tasks["thread"].dtype) == "UInt64"


def test_compute_window_comes_from_worker_transitions(tiny):
    t = tiny.tasks.set_index("key")
    assert t.loc[B, "time_source"] == "worker"
    assert t.loc[B, "start"] == ts(1700000002.0)
    assert t.loc[B, "end"] == ts(1700000002.4)
    # the scheduler's startstops entry is kept separately
    assert t.loc[B, "sched_begins"] == ts(1700000001.8)
    assert t.loc[B, "duration"] == pytest.approx(0.4)


def test_times_are_utc(tiny):
    for col in ("start", "end", "sched_begins"):
        assert str(tiny.tasks[col].dtype) == "datetime64[us, UTC]"
    assert str(tiny.transitions["time"].dtype) == "datetime64[us, UTC]"


def test_scheduler_fallback_without_worker_transitions(tmp_path):
    files = tiny_files()
    del files["worker_transition.csv"]
    r = metaprov.read_run(write_run(tmp_path / "run", files))
    t = r.tasks.set_index("key")
    assert t.loc[B, "time_source"] == "scheduler"
    assert t.loc[B, "start"] == ts(1700000001.8)
    assert "worker_transition.csv" in r.missing


def test_transfer_deduplicated_and_sides_matched(tiny):
    tr = tiny.transfers
    assert len(tr) == 1
    row = tr.iloc[0]
    assert (row["key"], row["source"], row["destination"], row["logged_by"]) == (A, W1, W2, "both")
    assert row["compressed"] == 40  # only the outgoing side logs it
    acct = tiny.accounting.files["worker_transfer.csv"]
    assert acct.rows_read == 3 and acct.rows_used == 2
    assert list(acct.not_used.values()) == [1]


def test_graph_dependencies_and_wanted(tiny):
    d = tiny.dependencies
    assert d[["key", "dependency"]].values.tolist() == [[B, A]]
    t = tiny.tasks.set_index("key")
    assert bool(t.loc[B, "wanted"]) and not bool(t.loc[A, "wanted"])
    assert t.loc[A, "client"] == "Client-aaaa"


def test_workers_and_clients(tiny):
    assert tiny.workers["address"].tolist() == [W1, W2]
    assert tiny.workers["host"].tolist() == ["127.0.0.1", "127.0.0.1"]
    c = tiny.clients.iloc[0]
    assert c["removed"] > c["added"]


def test_run_id_is_content_derived(tmp_path):
    a = metaprov.read_run(write_run(tmp_path / "a", tiny_files()))
    b = metaprov.read_run(write_run(tmp_path / "b", tiny_files()))
    assert a.run_id == b.run_id and len(a.run_id) == 16
    files = tiny_files()
    files["client.csv"] = files["client.csv"].replace("Client-aaaa", "Client-bbbb")
    c = metaprov.read_run(write_run(tmp_path / "c", files))
    assert c.run_id != a.run_id


def test_erred_and_retried_task(tmp_path):
    files = tiny_files()
    files["worker_transition.csv"] += "".join(
        [
            f"11,err-1,waiting,ready,{W1},1700000003.0\n",
            f"12,err-1,ready,executing,{W1},1700000003.1\n",
            f"13,err-1,executing,error,{W1},1700000003.2\n",
            f"14,err-1,error,released,{W1},1700000003.3\n",
            f"15,err-1,waiting,ready,{W2},1700000003.4\n",
            f"16,err-1,ready,executing,{W2},1700000003.5\n",
            f"17,err-1,executing,memory,{W2},1700000003.9\n",
        ]
    )
    r = metaprov.read_run(write_run(tmp_path / "run", files))
    t = r.tasks.set_index("key")
    assert bool(t.loc["err-1", "erred"]) and bool(t.loc["err-1", "retried"])
    assert t.loc["err-1", "n_executions"] == 2
    assert t.loc["err-1", "worker"] == W2  # the final attempt
    ex = r.executions[r.executions["key"] == "err-1"]
    assert ex["outcome"].tolist() == ["error", "memory"]
    assert ex["attempt"].tolist() == [0, 1]


def test_never_ran_task_from_graph_only(tmp_path):
    files = tiny_files()
    files["graph.csv"] = files["graph.csv"].replace(
        "'inc-1111': set()", "'inc-1111': set(), 'lonely-1': set()"
    )
    r = metaprov.read_run(write_run(tmp_path / "run", files))
    t = r.tasks.set_index("key")
    assert bool(t.loc["lonely-1", "never_ran"])
    assert t.loc["lonely-1", "prefix"] == "lonely"


def test_key_split_matches_dask():
    dask_utils = pytest.importorskip("dask.utils")
    keys = [
        "block-info-save_file-331f10de8fa1ebe88ba72697a5c718c8",
        "('block-info-save_file-331f10de8fa1ebe88ba72697a5c718c8', 78, 0, 0, 0)",
        "_dask_helper-9cc0ab9e-75fd-40da-90f8-92706d6e0a9f",
        "('_map_read_frame-c50155175b03e4c1ec9664317841e345', 1)",
        "x",
        "f-12345678",
        "a" * 32,
        "inc-deadbeef-1",
    ]
    _, prefix = key_split(pd.Series(keys))
    assert prefix.tolist() == [dask_utils.key_split(k) for k in keys]
