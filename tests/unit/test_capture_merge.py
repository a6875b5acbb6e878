"""Merging the workers' part files into the single Mofka-schema files."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytest.importorskip("distributed")

from metaprov.capture._files import PARTS_DIR, WORKER_TRANSITION  # noqa: E402
from metaprov.capture.merge import merge_parts, merge_run  # noqa: E402
from metaprov.errors import InputError  # noqa: E402


def _part(run, table, part, header, rows):
    parts = run / PARTS_DIR
    parts.mkdir(parents=True, exist_ok=True)
    lines = [",".join(header)] + [",".join(map(str, r)) for r in rows]
    (parts / f"{table}.{part}.csv").write_text("\n".join(lines) + "\n")


def _info(run, part, worker, *, closed=True, pid=11):
    info = {
        "worker": worker,
        "pid": pid,
        "nthreads": 2,
        "setup_time": 1.0,
        "closed_time": 9.0 if closed else None,
    }
    (run / PARTS_DIR / f"worker_info.{part}.json").write_text(json.dumps(info))


@pytest.fixture
def run(tmp_path):
    _part(
        tmp_path,
        "worker_transition",
        "1-a",
        WORKER_TRANSITION,
        [
            ("k1", "ready", "executing", "tcp://w1", 3.0),
            ("k1", "executing", "memory", "tcp://w1", 5.0),
        ],
    )
    _part(
        tmp_path,
        "worker_transition",
        "2-b",
        WORKER_TRANSITION,
        [
            ("k2", "ready", "executing", "tcp://w2", 4.0),
            ("k3", "waiting", "ready", "tcp://w2", 1.0),
        ],
    )
    _info(tmp_path, "1-a", "tcp://w1", pid=11)
    _info(tmp_path, "2-b", "tcp://w2", pid=22)
    return tmp_path


def test_parts_merge_sorted_by_time_with_the_pandas_index(run):
    summary = merge_parts(run)
    text = (run / "worker_transition.csv").read_text().splitlines()
    assert text[0] == ",key,start,finish,called_from,time"
    df = pd.read_csv(run / "worker_transition.csv", index_col=0)
    assert df.index.tolist() == [0, 1, 2, 3]
    assert df["time"].tolist() == [1.0, 3.0, 4.0, 5.0]
    assert df["key"].tolist() == ["k3", "k1", "k2", "k1"]
    assert summary["files"]["worker_transition.csv"] == 4
    # Every part closed: the parts directory is gone.
    assert not (run / PARTS_DIR).exists()
    info = pd.read_csv(run / "workers_info.csv", index_col=0)
    assert info["address"].tolist() == ["tcp://w1", "tcp://w2"] and info["pid"].tolist() == [11, 22]
    # Tables no worker wrote are reported, not invented.
    assert any("worker_transfer.csv not written" in n for n in summary["notes"])
    assert not (run / "worker_transfer.csv").exists()


def test_open_parts_are_kept_and_the_merge_can_be_repeated(run):
    _info(run, "2-b", "tcp://w2", closed=False)
    first = merge_parts(run)
    assert first["incomplete_workers"] == ["tcp://w2"]
    assert (run / PARTS_DIR).is_dir()
    before = (run / "worker_transition.csv").read_text()
    # The worker writes more, then closes; merging again rebuilds from all parts.
    with open(run / PARTS_DIR / "worker_transition.2-b.csv", "a") as fh:
        fh.write("k2,executing,memory,tcp://w2,6.0\n")
    _info(run, "2-b", "tcp://w2", closed=True)
    second = merge_parts(run)
    assert second["incomplete_workers"] == []
    after = pd.read_csv(run / "worker_transition.csv", index_col=0)
    assert len(after) == 5 and after["time"].iloc[-1] == 6.0
    assert before != (run / "worker_transition.csv").read_text()
    assert not (run / PARTS_DIR).exists()
    # Once the parts are gone, a further merge keeps the merged file.
    merge_parts(run)
    assert len(pd.read_csv(run / "worker_transition.csv")) == 5


def test_scheduler_knowledge_fills_workers_without_parts(run):
    summary = merge_parts(
        run, scheduler_workers={"tcp://w3": {"address": "tcp://w3", "pid": 33, "added": 2.0}}
    )
    info = pd.read_csv(run / "workers_info.csv", index_col=0)
    assert info["address"].tolist() == ["tcp://w1", "tcp://w2", "tcp://w3"]
    assert info.set_index("address").loc["tcp://w3", "pid"] == 33
    assert any("tcp://w3" in n for n in summary["notes"])


def test_a_part_without_header_is_reported(run):
    (run / PARTS_DIR / "worker_transition.3-c.csv").write_text("")
    summary = merge_parts(run)
    assert any("3-c" in n and "empty" in n for n in summary["notes"])
    assert summary["files"]["worker_transition.csv"] == 4


def test_merge_run_updates_the_run_json(run):
    (run / "metaprov-run.json").write_text(
        json.dumps({"status": "complete", "files": {"graph.csv": 1}})
    )
    _info(run, "2-b", "tcp://w2", closed=False)
    merge_run(run, keep_parts=True)
    meta = json.loads((run / "metaprov-run.json").read_text())
    assert meta["files"] == {"graph.csv": 1, "worker_transition.csv": 4, "workers_info.csv": 2}
    assert meta["incomplete_workers"] == ["tcp://w2"]


def test_merge_of_a_missing_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not a directory"):
        merge_parts(tmp_path / "nope")


def test_a_killed_workers_arrow_part_gives_its_whole_chunks_and_says_what_was_cut(run):
    """Parts of today's workers (Arrow chunks) merge with the CSV parts of older captures, by
    time; a part whose last chunk was cut mid-write (its worker killed) gives its whole chunks,
    and the merge says how many bytes it left out, naming the file."""
    from metaprov.capture._files import PartSink

    path = run / PARTS_DIR / "worker_transition.3-c.arrows"
    sink = PartSink(path, WORKER_TRANSITION, key=0, finish=2)
    sink.append((("k4", 0), "waiting", "ready", "tcp://w3", 2.0))
    sink.flush()
    whole = path.stat().st_size
    sink.append((("k4", 0), "ready", "executing", "tcp://w3", 2.5))
    sink.close()
    with open(path, "r+b") as fh:  # the last chunk cut, as by a SIGKILL mid-write
        fh.truncate(path.stat().st_size - 9)
    cut = path.stat().st_size - whole
    _info(run, "3-c", "tcp://w3", closed=False)
    summary = merge_parts(run)
    df = pd.read_csv(run / "worker_transition.csv", index_col=0, dtype=str)
    assert df["key"].tolist() == ["k3", "('k4', 0)", "k1", "k2", "k1"]
    assert df["time"].tolist() == ["1.0", "2.0", "3.0", "4.0", "5.0"]
    assert any(
        n.startswith(f"worker_transition.3-c.arrows: {cut} bytes after its last whole chunk")
        for n in summary["notes"]
    ), summary["notes"]
    assert summary["incomplete_workers"] == ["tcp://w3"]
