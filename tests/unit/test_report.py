"""metaprov.report: the figures on the page equal the records; limits; determinism; offline page."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("bokeh", reason="the report needs the 'report' extra (Bokeh)")

from conftest import DARSHAN_DASK_RUNS  # noqa: E402

from metaprov.analysis.critical_path import critical_path  # noqa: E402
from metaprov.analysis.summary import summarize  # noqa: E402
from metaprov.errors import MissingDependency  # noqa: E402
from metaprov.ingest import read_run  # noqa: E402
from metaprov.link import link_io  # noqa: E402
from metaprov.report import read_facts, render, write_report  # noqa: E402
from metaprov.report.views import facts, run_view  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "run"


@pytest.fixture(scope="module")
def example():
    records = read_run(EXAMPLE)
    return records, run_view(records, summarize(records))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from metaprov.synthetic import generate_run, load_truth

    path = tmp_path_factory.mktemp("syn") / "run"
    generate_run(path, 1200, seed=3, io_fraction=0.1, erred_fraction=0.01, retried_fraction=0.01)
    records = read_run(path)
    link_io(records)
    return path, records, load_truth(path)


def _expected_prefixes(records) -> pd.DataFrame:
    """Per prefix, counted independently of the report: tasks, executions, compute seconds."""
    t = records.tasks
    ex = records.executions.dropna(subset=["start", "end"])
    pref = ex["key"].map(t.set_index("key")["prefix"])
    secs = (ex["end"] - ex["start"]).dt.total_seconds()
    out = pd.DataFrame({"tasks": t["prefix"].value_counts()})
    out["executions"] = pref.value_counts()
    out["compute_s"] = secs.groupby(pref).sum()
    return out.fillna(0)


def _check_against_records(f: dict, records) -> None:
    t = records.tasks
    assert f["tasks"]["total"] == len(t)
    assert f["tasks"]["erred"] == int(t["erred"].sum())
    assert f["executions"] == len(records.executions)
    exp = _expected_prefixes(records)
    assert set(f["prefixes"]) == set(exp.index)
    for p, row in exp.iterrows():
        got = f["prefixes"][p]
        assert got["tasks"] == row["tasks"], p
        assert got["executions"] == row["executions"], p
        assert got["compute_s"] == pytest.approx(row["compute_s"], abs=1e-5), p
    timed = records.executions.dropna(subset=["start", "end"])
    assert f["lanes"]["threads"] == len(timed[["worker", "thread"]].drop_duplicates())
    per = records.transfers.drop_duplicates("transfer")
    assert f["transfers"]["distinct"] == len(per)
    assert f["transfers"]["bytes"] == int(records.transfers["nbytes"].sum())
    cp = critical_path(records)
    assert f["critical_path"]["tasks"] == len(cp)
    assert f["critical_path"]["seconds"] == pytest.approx(cp.attrs["total_seconds"], abs=1e-6)


def test_example_facts_equal_the_records(example):
    records, view = example
    f = facts(view)
    _check_against_records(f, records)
    assert f["lanes"]["transfers"] == 2  # both workers received data
    assert f["task_stream"] == {"mode": "bars", "bars": 26, "transfer_bars": 5, "io_bars": 0}
    assert view.critical["key"].tolist() == critical_path(records)["key"].tolist()


def test_synthetic_io_facts_equal_the_truth(synthetic):
    _, records, truth = synthetic
    view = run_view(records, summarize(records))
    f = facts(view)
    _check_against_records(f, records)
    assert f["tasks"]["total"] == truth["tasks"]
    assert f["executions"] == truth["executions"]
    io = truth["io"]
    seg = records.darshan.segments
    assert f["io"]["segments"] == len(seg) == sum(log["segments"] for log in io["logs"])
    # files: every data file of the truth, with its reads and bytes
    files = view.io_files.set_index("path")
    for path, want in io["by_file"].items():
        assert files.loc[path, "reads"] == want["reads"], path
        assert files.loc[path, "bytes_read"] == want["bytes_read"], path
    # I/O bursts cover every segment of a worker process
    assert view.io_bars["n"].sum() == int(records.io.segments["worker"].notna().sum())
    # failed first attempts carry no thread id: one "thread ?" lane per worker holds them
    assert f["lanes"]["threads"] - f["lanes"]["threads_unknown"] == truth["threads"]


def test_limits_rasterise_and_aggregate(synthetic):
    _, records, _ = synthetic
    view = run_view(
        records, summarize(records), bar_limit=500, longest_bars=100, graph_task_limit=50
    )
    f = facts(view)
    assert f["task_stream"]["mode"] == "raster" and f["task_stream"]["bars"] == 100
    assert view.raster.shape[0] == len(view.lanes)
    # the longest executions are the ones kept as bars
    assert view.bars["duration"].min() >= np.sort(view.executions["duration"].to_numpy())[-100]
    # every bin a thread was busy in is coloured
    assert (view.raster >= 0).sum() > 0 and ((view.raster >= 0) == (view.raster_busy > 0)).all()
    assert f["graph"]["drawn"] == "prefix"
    nodes = view.graph["nodes"]
    assert nodes["tasks"].sum() == len(records.tasks)
    assert any("rasterised" in n or "time bins" in n for n in f["notes"])
    assert any("one node per prefix" in n for n in f["notes"])


def test_same_runs_same_bytes(example):
    records, view = example
    a, _ = render([view])
    b, _ = render([run_view(records, summarize(records))])
    assert a == b


def test_page_is_self_contained(example, tmp_path):
    _, view = example
    text, f = render([view])
    assert "<script src=" not in text and "<link " not in text
    assert "cdn.bokeh.org" not in text
    assert "Bokeh" in text  # the library itself is inline
    out = tmp_path / "r.html"
    out.write_text(text, encoding="utf-8")
    assert read_facts(out) == f


def test_comparison_of_two_runs(tmp_path, synthetic):
    path, records, _ = synthetic
    res = write_report([EXAMPLE, path], tmp_path / "c.html")
    f = res.facts
    assert len(f["runs"]) == 2 and f["sections"][0] == "compare"
    assert f["runs"][1]["tasks"]["total"] == len(records.tasks)
    assert read_facts(res.path) == f


def test_missing_bokeh_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "bokeh", None)
    with pytest.raises(MissingDependency, match=r"metaprov\[report\]"):
        write_report([EXAMPLE], tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()


def test_largest_is_the_stable_sort_without_sorting_everything():
    from metaprov.report.views import _largest

    rng = np.random.default_rng(1)
    for v in (rng.integers(0, 50, 5000).astype(float), rng.random(5000)):  # ties, no ties
        for k in (0, 1, 50, 4999, 5000, 6000):
            assert list(_largest(v, k)) == list(np.argsort(-v, kind="stable")[:k]), k


def test_lane_of_a_kind_no_lane_has_is_none():
    # A run whose Darshan I/O is all on task threads has no "I/O, other threads" lane; asking
    # for it gave an IndexError (metaprov report crashed on the real *-mofka runs).
    from metaprov.report.views import Lanes, _lane_of

    lanes = Lanes(
        pd.DataFrame(
            {
                "y": [0, 1],
                "worker": [0, 0],
                "thread": np.array([7, 0], np.uint64),
                "kind": ["thread", "transfers"],
            }
        )
    )
    worker, thread = np.array([0, 0]), np.array([7, 8], np.uint64)
    assert _lane_of(lanes, worker, thread, "io").tolist() == [-1, -1]
    assert _lane_of(lanes, worker, thread, "thread").tolist() == [0, -1]


@pytest.mark.realdata
def test_report_of_a_real_run_with_io_on_task_threads_only(tmp_path):
    run = DARSHAN_DASK_RUNS / "burst-mofka"
    if not run.is_dir():
        pytest.skip(f"real run not found: {run}")
    result = write_report([run], tmp_path / "r.html")
    assert (tmp_path / "r.html").stat().st_size > 0
    assert read_facts(tmp_path / "r.html")["runs"][0]["io"]["segments"] > 0, result
