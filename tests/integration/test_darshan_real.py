"""The Darshan reader and the I/O link on the real PMDA and ImageProcessing runs in ../shared."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import IMAGEPROC_RUNS, PMDA_RUNS

from metaprov.analysis.io_summary import format_io, summarize_io
from metaprov.ingest import read_run
from metaprov.ingest.darshan import read_darshan_logs
from metaprov.link import link_io

pytestmark = pytest.mark.realdata

# run -> (segments, reads, writes, file records, linked to tasks, attributed to processes)
PMDA_FIGURES = {
    "R1": (5199, 4925, 274, 692, 3125, 2074),
    "R2": (5202, 4925, 277, 692, 3125, 2077),
    "R3": (5212, 4930, 282, 692, 3126, 2086),
    "R4": (5212, 4932, 280, 692, 3126, 2086),
    "R5": (5210, 4930, 280, 692, 3126, 2084),
}


def _pmda(tag: str) -> Path:
    for p in PMDA_RUNS:
        if f"_{tag}_" in p.name:
            return p
    pytest.skip("real PMDA runs not found in ../shared/data")


@pytest.mark.parametrize("tag", sorted(PMDA_FIGURES))
def test_pmda_logs_parse_and_link(tag: str) -> None:
    run = _pmda(tag)
    nseg, nread, nwrite, nrec, nlinked, nproc = PMDA_FIGURES[tag]
    records = read_run(run)
    d = records.darshan
    assert len(d.logs) == 33
    assert (d.logs["status"] == "ok").all(), d.logs["problems"].tolist()
    assert d.logs["role"].value_counts().to_dict() == {
        "worker": 8,
        "nanny": 8,
        "resource_tracker": 8,
        "other": 8,
        "launcher": 1,
    }
    s = d.summary()
    assert (s["segments"], s["reads"], s["writes"], s["file_records"]) == (
        nseg,
        nread,
        nwrite,
        nrec,
    )
    assert set(d.logs["layout"].dropna()) == {96}
    link_io(records)
    acct = records.io.accounting
    assert acct["task_thread_segments"] == nlinked
    assert acct["by_status"] == {"linked": nlinked, "process": nproc, "ambiguous": 0, "unlinked": 0}
    # every linked segment's thread is the thread of the execution it is linked to
    links = records.io.segments
    linked = links[links["status"] == "linked"]
    ex = records.executions.set_index(["key", "attempt"])
    threads = ex.loc[list(zip(linked["key"], linked["attempt"], strict=True)), "thread"]
    assert (threads.to_numpy(dtype=np.uint64) == linked["pthread"].to_numpy(dtype=np.uint64)).all()
    # six worker processes ran the tasks; each is mapped to one distinct worker address
    procs = records.io.processes
    mapped = procs[procs["worker"].notna()]
    assert len(mapped) == mapped["worker"].nunique() == records.executions["worker"].nunique()
    assert (mapped["role"] == "worker").all()


def test_pmda_without_worker_transitions_links_by_scheduler_windows() -> None:
    records = read_run(_pmda("R1"))
    ex = records.executions.copy()
    t = records.tasks.set_index("key")
    ex["start"] = ex["key"].map(t["sched_begins"])
    ex["end"] = ex["key"].map(t["sched_ends"])
    ex["time_source"] = "scheduler"
    records.executions = ex
    link_io(records)
    acct = records.io.accounting
    # the scheduler windows alone place every call (offset fitted over +-2 s)
    assert acct["by_rule"]["scheduler-window"] == 3125
    assert acct["by_status"]["ambiguous"] == 0


def test_every_pmda_log_counters_match_pydarshan() -> None:
    darshan = pytest.importorskip("darshan")
    run = _pmda("R1")
    recs = read_darshan_logs(run)
    logs = sorted(run.glob("*python3.10*.darshan"))[::6]
    logging.getLogger("darshan").setLevel(logging.ERROR)
    for path in logs:
        rep = darshan.DarshanReport(str(path), read_all=False)
        rep.mod_read_all_records("POSIX", dtype="pandas")
        ref = rep.records["POSIX"][0]
        cnt = ref["counters"].set_index("id").drop(columns=["rank"])
        mine = recs.counters[
            (recs.counters["log"] == path.name) & (recs.counters["module"] == "POSIX")
        ]
        for rid, row in cnt.iterrows():
            got = mine[mine["record_id"] == np.uint64(rid)].set_index("counter")["value"]
            want = row[row != 0]
            assert got.reindex(want.index).to_numpy().tolist() == want.astype(float).tolist()
        hdr = rep.metadata["job"]
        row = recs.logs.set_index("log").loc[path.name]
        assert (
            row["start_sec"] == hdr["start_time_sec"]
            and row["start_nsec"] == hdr["start_time_nsec"]
        )
        assert row["cmdline"] == rep.metadata["exe"].strip()


def test_imageprocessing_partial_log_is_flagged_and_the_rest_read() -> None:
    if not IMAGEPROC_RUNS:
        pytest.skip("real ImageProcessing run not found in ../shared/data")
    recs = read_darshan_logs(IMAGEPROC_RUNS[0])
    assert len(recs.logs) == 34
    partial = recs.logs[recs.logs["partial"]]
    assert len(partial) == 1
    row = partial.iloc[0]
    assert row["log"].endswith(".darshan_partial")
    assert row["role"] == "launcher"  # job region recovered without the header
    assert "without header" in row["problems"]
    assert (recs.logs.loc[~recs.logs["partial"], "status"] == "ok").all()
    assert len(recs.segments) == 8265


def test_inspect_io_summary_on_pmda() -> None:
    records = read_run(_pmda("R1"))
    s = summarize_io(records)
    assert s["link"]["by_status"]["linked"] == 3125
    assert s["by_prefix"][0]["prefix"] == "dask_helper" and s["by_prefix"][0]["reads"] == 3125
    workers = [p for p in s["by_process"] if p["worker"]]
    assert len(workers) == 6 and all(p["clock_offset_s"] is not None for p in workers)
    text = "\n".join(format_io(s))
    assert "3,125 to tasks" in text and "0 ambiguous" in text
