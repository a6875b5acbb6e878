"""The trace export on real runs in ../shared (issue 39): schema-valid, every Darshan segment
drawn (or counted as not drawn), a segment linked to an execution inside that execution's slice
on the thread that issued it, every execution and transfer drawn."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import DARSHAN_DASK_RUNS, PMDA_RUNS, SKIP_REASON
from trace_check import check_trace

from metaprov.ingest import read_run
from metaprov.link import link_io
from metaprov.write.trace import write_trace_runs

pytestmark = pytest.mark.realdata


def _runs() -> list:
    runs = [DARSHAN_DASK_RUNS / "mixed-metaprov", *PMDA_RUNS[:1]]
    runs = [r for r in runs if r.is_dir()]
    if not runs:
        return [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON), id="none")]
    return [pytest.param(r, id=r.name[-14:]) for r in runs]


@pytest.mark.parametrize("run", _runs())
def test_real_run_trace_draws_every_execution_transfer_and_segment(run: Path) -> None:
    rec = read_run(run)
    if rec.darshan is not None and rec.io is None:
        link_io(rec)
    buf = io.BytesIO()
    write_trace_runs([("", rec)], buf)
    doc = json.loads(buf.getvalue())
    check_trace(doc)
    ev = doc["traceEvents"]
    not_drawn = doc["otherData"].get("not_drawn", {})
    execs = [e for e in ev if e.get("cat", "").startswith("execution")]
    assert len(execs) == len(rec.executions) - not_drawn.get("executions without a start time", 0)
    sent = [e for e in ev if e.get("cat") == "transfer" and e["ph"] == "X"]
    missing = not_drawn.get("transfers without a sender or a start and stop time", 0)
    assert len(sent) == len(rec.transfers) - missing + rec.transfers["destination"].notna().sum()
    if rec.io is None:
        return
    segs = [e for e in ev if e.get("cat", "").startswith("io")]
    missing = not_drawn.get("Darshan segments without a start and end time", 0)
    assert len(segs) == len(rec.io.segments) - missing > 0
    # a segment inside its task: within an execution slice of the same key on its track
    slices: dict[tuple[int, int, str], list[tuple[int, int]]] = {}
    for e in execs:
        if e["ph"] == "X":
            key = (e["pid"], e["tid"], e["name"].split(" [")[0])
            slices.setdefault(key, []).append((e["ts"], e["ts"] + e["dur"]))
    inside = [e for e in segs if e["cat"] == "io"]
    assert inside
    for e in inside:
        spans = slices[(e["pid"], e["tid"], e["args"]["key"])]
        assert any(s <= e["ts"] and e["ts"] + e["dur"] <= t for s, t in spans), e
