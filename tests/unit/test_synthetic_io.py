"""metaprov.synthetic with io_fraction > 0: real Darshan DXT logs, one per worker process, whose
every task segment metaprov links to the task the generator meant, with truth.json to match."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import metaprov
from metaprov.errors import UsageError
from metaprov.ingest.darshan import read_darshan_logs
from metaprov.synthetic import expected_io, generate_run, load_truth

KW = dict(seed=7, graphs=2, erred_fraction=0.02, retried_fraction=0.03, io_fraction=0.2)
N = 2500


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_run(tmp_path_factory.mktemp("synio") / "run", N, io_files=40, **KW)


@pytest.fixture(scope="module")
def linked(run: Path) -> metaprov.RunRecords:
    return metaprov.link_io(metaprov.read_run(run))


def test_one_log_per_worker_process(run: Path, linked: metaprov.RunRecords) -> None:
    io = load_truth(run)["io"]
    logs = sorted(p.name for p in run.glob("*.darshan"))
    assert logs == sorted(entry["log"] for entry in io["logs"])
    assert len(logs) == 8
    assert linked.darshan is not None
    lg = linked.darshan.logs
    assert set(lg["role"]) == {"worker"} and set(lg["status"]) == {"ok"}
    assert set(lg["layout"].astype(int)) == {96}
    # each log is mapped to the worker the generator wrote it for
    pr = linked.io.processes.set_index("log")
    for entry in io["logs"]:
        assert pr.loc[entry["log"], "worker"] == entry["worker"]
        assert int(pr.loc[entry["log"], "pid"]) == entry["pid"]
        # the estimated clock offset brackets Darshan's true lateness
        lo, hi = pr.loc[entry["log"], "offset_low"], pr.loc[entry["log"], "offset_high"]
        assert lo - 2e-6 <= entry["clock_late_s"] <= hi + 2e-6


def test_every_task_segment_links_to_its_task(run: Path, linked: metaprov.RunRecords) -> None:
    io = load_truth(run)["io"]
    acct = linked.io.accounting
    assert acct["by_status"] == io["link"]
    assert acct["by_status"]["ambiguous"] == 0 and acct["by_status"]["unlinked"] == 0
    assert acct["task_thread_segments"] == io["task"]["segments"]
    assert acct["by_rule"] == {
        "worker-window": io["task"]["segments"],
        "thread-ran-no-task": io["process"]["segments"],
    }
    # segment by segment: (log, path, op, offset) names a segment on both sides
    exp = expected_io(run)
    ident = ["log", "path", "op", "offset"]
    assert not exp.duplicated(ident).any()
    seg = linked.darshan.segments.reset_index(drop=True)
    got = pd.concat(
        [seg[ident + ["length", "pthread"]], linked.io.segments[["status", "key", "attempt"]]],
        axis=1,
    )
    for c in ("log", "path", "op"):
        got[c] = got[c].astype(str)
        exp[c] = exp[c].astype(str)
    m = exp.merge(got, on=ident, how="outer", suffixes=("", "_got"), indicator=True)
    assert (m["_merge"] == "both").all() and len(m) == io["segments"]
    assert (m["length"] == m["length_got"]).all()
    assert (m["pthread"] == m["pthread_got"]).all()
    task = m["level"] == "task"
    assert (m.loc[task, "status"] == "linked").all()
    assert (m.loc[task, "key"] == m.loc[task, "key_got"]).all()
    assert (m.loc[task, "attempt"] == m.loc[task, "attempt_got"]).all()
    assert (m.loc[~task, "status"] == "process").all()
    assert m.loc[~task, "key_got"].isna().all()
    # final attempts of retried tasks are among the I/O tasks, and link to attempt 1
    assert (m.loc[task, "attempt"] == 1).any()


def test_truth_counts(run: Path, linked: metaprov.RunRecords) -> None:
    io = load_truth(run)["io"]
    seg = linked.darshan.segments
    links = linked.io.segments
    assert len(seg) == io["segments"]
    on_task = (links["status"] == "linked").to_numpy()
    for level, mask in (("task", on_task), ("process", ~on_task)):
        s = seg[mask]
        w = (s["op"] == "write").to_numpy()
        t = io[level]
        assert (int((~w).sum()), int(w.sum())) == (t["reads"], t["writes"])
        assert int(s["length"][~w].sum()) == t["bytes_read"]
        assert int(s["length"][w].sum()) == t["bytes_written"]
        assert s["path"].nunique() == t["files"]
    lk = links[on_task].assign(
        op=seg["op"][on_task].to_numpy(), length=seg["length"][on_task].to_numpy()
    )
    assert lk["key"].nunique() == io["task"]["tasks"] == round(0.2 * N)
    # per prefix, with the prefixes the reader derived from the keys
    tasks = linked.tasks.drop_duplicates("key").set_index("key")["prefix"]
    lk["prefix"] = tasks.reindex(lk["key"].to_numpy()).to_numpy()
    for prefix, t in io["by_prefix"].items():
        g = lk[lk["prefix"] == prefix]
        assert g["key"].nunique() == t["tasks"], prefix
        assert int(g["length"][g["op"] == "read"].sum()) == t["bytes_read"], prefix
        assert int(g["length"][g["op"] == "write"].sum()) == t["bytes_written"], prefix
    assert sum(t["tasks"] for t in io["by_prefix"].values()) == io["task"]["tasks"]
    # loaders and array chunks only read
    assert io["by_prefix"]["load"]["reads"] > 0
    assert all(io["by_prefix"].get(p, {}).get("writes", 0) == 0 for p in ("load", "array"))
    lk["path"] = seg["path"][on_task].to_numpy()
    for path, t in io["by_file"].items():
        g = lk[lk["path"] == path]
        assert int((g["op"] == "read").sum()) == t["reads"]
        assert g.loc[g["op"] == "write", "key"].nunique() == t["tasks_written"]
    assert all(p.startswith("/lus/grand/projects/") for p in io["by_file"])


def test_segments_strictly_inside_their_windows(run: Path, linked: metaprov.RunRecords) -> None:
    """On the worker's clock, with a margin: no estimate-dependent luck in the link."""
    exp = expected_io(run)
    ex = linked.executions
    us = ex["start"].to_numpy(dtype="datetime64[us]").view("int64") / 1e6
    ue = ex["end"].to_numpy(dtype="datetime64[us]").view("int64") / 1e6
    win = pd.DataFrame({"key": ex["key"], "attempt": ex["attempt"], "ws": us, "we": ue})
    t = exp[exp["level"] == "task"].merge(win, on=["key", "attempt"], how="left")
    assert t["ws"].notna().all()
    assert (t["start"] - t["ws"] >= 45e-6).all() and (t["we"] - t["end"] >= 45e-6).all()
    # process-level I/O never falls on a thread that ran a task
    task_threads = set(ex["thread"].dropna().astype("uint64").tolist())
    proc = exp[exp["level"] == "process"]
    assert not set(proc["pthread"].astype("uint64").tolist()) & task_threads


def test_deterministic_and_default_unchanged(run: Path, tmp_path: Path) -> None:
    again = generate_run(tmp_path / "again", N, io_files=40, **KW)
    names = sorted(p.name for p in run.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    for name in names:
        assert (run / name).read_bytes() == (again / name).read_bytes(), name
    # the CSV files do not depend on the I/O options; without I/O, no logs and no "io" truth
    plain = generate_run(tmp_path / "plain", N, **{**KW, "io_fraction": 0.0})
    for name in (p.name for p in plain.iterdir() if p.suffix == ".csv"):
        assert (run / name).read_bytes() == (plain / name).read_bytes(), name
    assert not list(plain.glob("*.darshan"))
    truth = load_truth(plain)
    assert "io" not in truth and "io_fraction" not in truth["params"]
    with pytest.raises(UsageError):
        expected_io(plain)


def test_regenerating_replaces_old_logs(tmp_path: Path) -> None:
    a = generate_run(tmp_path / "r", 600, seed=1, io_fraction=0.5)
    first = {p.name for p in a.glob("*.darshan")}
    generate_run(tmp_path / "r", 600, seed=2, io_fraction=0.5)
    second = {p.name for p in a.glob("*.darshan")}
    assert len(second) == 8 and not first & second
    generate_run(tmp_path / "r", 600, seed=2)
    assert not list(a.glob("*.darshan"))


def test_logs_readable_alone(run: Path) -> None:
    dr = read_darshan_logs(run)
    io = load_truth(run)["io"]
    assert dr.summary()["segments"] == io["segments"]
    assert dr.summary()["reads"] == io["task"]["reads"] + io["process"]["reads"]
    # POSIX counters agree with the trace
    c = dr.counters
    assert c.loc[c["counter"] == "POSIX_BYTES_WRITTEN", "value"].sum() == (
        io["task"]["bytes_written"] + io["process"]["bytes_written"]
    )
    assert np.isin(dr.segments["hostname"].unique(), [e["hostname"] for e in io["logs"]]).all()


@pytest.mark.parametrize("bad", [dict(io_fraction=-0.1), dict(io_fraction=1.5), dict(io_files=0)])
def test_bad_io_options(tmp_path: Path, bad: dict) -> None:
    with pytest.raises(UsageError):
        generate_run(tmp_path / "x", 100, **{"io_fraction": 0.1, **bad})


def test_export_validates(run: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from metaprov.cli import cli

    out = tmp_path / "run.nt"
    res = CliRunner().invoke(cli, ["export", str(run), "-o", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["validate", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
