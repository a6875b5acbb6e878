"""worker_execution.csv (metaprov capture) gives every attempt its own thread."""

from __future__ import annotations

from runfiles import W1, W2, csv_row, tiny_files, write_run

import metaprov

HEADER = ",key,worker,thread,start,stop,outcome,run_id,time\n"


def _retried_run(tmp_path, execution_rows):
    files = tiny_files()
    files["worker_transition.csv"] += "".join(
        [
            f"11,err-1,ready,executing,{W1},1700000003.1\n",
            f"12,err-1,executing,error,{W1},1700000003.2\n",
            f"13,err-1,ready,executing,{W2},1700000003.5\n",
            f"14,err-1,executing,memory,{W2},1700000003.9\n",
        ]
    )
    files["scheduler_transition.csv"] += (
        f"6,err-1,77,{W2},err,err,processing,memory,task-finished-9,tcp://127.0.0.1:8786,1700000003.5,1700000003.9,0.4,8,1700000004.0\n"
    )
    files["worker_execution.csv"] = HEADER + "".join(csv_row(r) for r in execution_rows)
    return metaprov.read_run(write_run(tmp_path / "run", files))


def test_each_attempt_gets_its_own_thread(tmp_path):
    r = _retried_run(
        tmp_path,
        [
            [0, "err-1", W1, 55, 1700000003.1, 1700000003.2, "error", 0, 1700000003.3],
            [1, "err-1", W2, 77, 1700000003.5, 1700000003.9, "memory", 1, 1700000004.0],
        ],
    )
    ex = r.executions[r.executions["key"] == "err-1"].sort_values("attempt")
    assert ex["thread"].tolist() == [55, 77]  # without the file both would get the final 77
    assert r.tasks.set_index("key").loc["err-1", "thread"] == 77
    assert r.accounting.files["worker_execution.csv"].rows_used == 2


def test_unmatched_rows_are_accounted_not_attached(tmp_path):
    r = _retried_run(
        tmp_path,
        [
            [0, "err-1", W1, 55, 1700000003.1, 1700000003.2, "error", 0, 1700000003.3],
            [
                1,
                "err-1",
                W1,
                66,
                1700000009.0,
                1700000009.5,
                "memory",
                1,
                1700000010.0,
            ],  # no such attempt
        ],
    )
    acct = r.accounting.files["worker_execution.csv"]
    assert acct.rows_read == 2 and acct.rows_used == 1
    assert 66 not in r.executions["thread"].dropna().tolist()
