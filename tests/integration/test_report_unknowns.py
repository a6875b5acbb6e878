"""The report shows what is unknown as unknown (issue 25, item 7): compute of a run without
compute windows is blank with its reason, not 0.000; I/O of worker processes that could not be
matched to a worker is said to be that, not "processes that are not workers"; an empty I/O
table says why; executions without thread ids never draw over each other on one lane."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from metaprov.analysis.summary import summarize
from metaprov.ingest import read_run
from metaprov.records import conform

pytestmark = pytest.mark.realdata
pytest.importorskip("bokeh", reason="the report extra (bokeh) is not installed")

from metaprov.report import render  # noqa: E402
from metaprov.report.views import run_view  # noqa: E402


def _view(rec):  # type: ignore[no-untyped-def]
    return run_view(rec, summarize(rec))


@pytest.fixture(scope="module")
def no_compute(imageproc_r1: Path):  # type: ignore[no-untyped-def]
    """The partial ImageProcessing run: no transition files, so no compute windows at all."""
    rec = read_run(imageproc_r1)
    assert rec.executions["start"].notna().sum() == 0
    return _view(rec)


@pytest.fixture(scope="module")
def no_threads(shared_data: Path):  # type: ignore[no-untyped-def]
    """A real run whose executions lost their thread ids (as Mofka data without them)."""
    rec = read_run(shared_data / "darshan-dask-runs" / "burst-mofka")
    ex = rec.executions.copy()
    ex["thread"] = pd.NA
    rec.executions = conform("executions", ex)
    from metaprov.link import link_io

    link_io(rec)
    return _view(rec)


def test_unknown_compute_is_blank_with_its_reason(no_compute, pmda_r1: Path) -> None:
    assert no_compute.prefixes["compute_s"].isna().all()
    html, facts = render([no_compute])
    assert "unknown, not zero" in html
    table = re.search(r'name="prefixes[^"]*".*?</table>', html, re.S) or re.search(
        r"Tasks per prefix.*?</table>", html, re.S
    )
    assert table and ">0.000<" not in table.group(0)
    assert all(p["compute_s"] is None for p in facts["runs"][0]["prefixes"].values())
    # the comparison page: compute and critical path blank for that run, not 0.000
    other = _view(read_run(pmda_r1))
    html, _ = render([no_compute, other])
    rows = re.findall(
        r"<tr>.*?</tr>", html.split("compare-runs", 1)[1].split("</table>", 1)[0], re.S
    )
    mine = [r for r in rows if "ImageProcessing" in r or "D2024-04-18" in r]
    assert mine and ">0.000<" not in mine[0]


def test_executions_without_thread_ids_never_overlap_on_a_lane(no_threads) -> None:
    bars = no_threads.bars
    assert any("packed" in n for n in no_threads.notes)
    for _, lane in bars.groupby("y"):
        lane = lane.sort_values("left")
        assert (lane["left"].to_numpy()[1:] >= lane["right"].to_numpy()[:-1]).all()
    labels = no_threads.lanes.table["label"].tolist()
    assert any("thread ? (packed 2)" in x for x in labels), labels


def test_unmatched_worker_io_is_not_called_non_worker_io(no_threads) -> None:
    notes = " ".join(no_threads.notes)
    assert "segments of worker processes are not drawn" in notes
    html, _ = render([no_threads])
    # the per-prefix I/O table is empty here, and says why
    assert "empty: no Darshan segment is linked to a task execution" in html
    assert np.isfinite(no_threads.bars["left"]).all()
