"""Darshan I/O linked to tasks on six real short-task runs, scored against their ground truth.

Each run in ``../shared/data/darshan-dask-runs`` is a real Dask ``LocalCluster`` run recorded
under real upstream Darshan (40-byte DXT segments with pthread ids), three in the Mofka-Dask CSV
schema (transition-hook times and the scheduler's begins/ends) and three captured by
``metaprov.capture`` (exact compute windows). ``truth.json`` names, per data file, the task that
issued its calls (and, in ``mixed-*``, the merge task that read an output file last).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import DARSHAN_DASK_RUNS, SKIP_REASON

from metaprov.ingest import read_run
from metaprov.link import link_io

pytestmark = pytest.mark.realdata

RUNS = [
    "mixed-mofka",
    "burst-mofka",
    "long-mofka",
    "mixed-metaprov",
    "burst-metaprov",
    "long-metaprov",
]


def _run(name: str) -> Path:
    path = DARSHAN_DASK_RUNS / name
    if not (path / "truth.json").is_file():
        pytest.skip(SKIP_REASON)
    return path


def true_keys(run: Path, seg: pd.DataFrame) -> np.ndarray:
    """The key that issued each segment (None: not a task's file), from ``truth.json``.

    A file listed with two keys (``out/res-NNN.bin`` in ``mixed-*``) was written and read back
    by the first and read once more by the second. A read *session* starts at offset 0 and
    continues at the next offsets (one Python read may be several calls). The second key's
    session is the one on another thread than the writes, or the later one on the writes'
    thread.
    """
    files = json.loads((run / "truth.json").read_text())["files"]
    path = seg["path"].astype(str)
    true = np.array([files[p][0] if p in files else None for p in path], dtype=object)
    for p, keys in files.items():
        if len(keys) < 2:
            continue
        s = seg[path == p]
        writers = set(
            zip(s.loc[s["op"] == "write", "log"], s.loc[s["op"] == "write", "pthread"], strict=True)
        )
        r = s[s["op"] == "read"].sort_values(["log", "pthread", "start_rel"])
        session = np.cumsum(r["offset"].to_numpy() == 0)
        heads = r[r["offset"] == 0]
        assert len(heads) == 2, p
        on_writer = [
            (lg, t) in writers for lg, t in zip(heads["log"], heads["pthread"], strict=True)
        ]
        second = 2 if all(on_writer) else on_writer.index(False) + 1
        true[r.index[session == second].to_numpy()] = keys[1]
    return true


@pytest.mark.parametrize("name", RUNS)
def test_every_task_segment_on_the_right_task_none_wrong(name: str) -> None:
    run = _run(name)
    records = read_run(run)
    link_io(records)
    links = records.io.segments
    truth = true_keys(run, records.darshan.segments)
    task = pd.notna(truth)
    status = links["status"].astype(str).to_numpy()
    key = links["key"].astype(object).to_numpy()
    linked = status == "linked"
    right = task & linked & (key == truth)
    wrong = linked & (~task | (key != truth))
    assert wrong.sum() == 0, links[wrong].head()
    assert right.sum() >= 0.99 * task.sum(), pd.Series(status[task]).value_counts()
    # what is not decided is reported as ambiguous, and the true task is among its candidates
    rest = task & ~right
    assert (status[rest] == "ambiguous").all()
    for cand, t in zip(links["candidates"].to_numpy()[rest], truth[rest], strict=True):
        assert t in json.loads(cand)
    # every link says which clock decided it and the offset fitted for that clock
    ev = links[linked]
    assert ev["clock"].isin(["worker-hook", "worker-exact", "scheduler", "thread-order"]).all()
    assert ev["clock_offset"].notna().all() and (ev["offset_uncertainty"] >= 0).all()
    clocks = set(ev["clock"])
    if name.endswith("-mofka"):
        # hook windows of ms tasks overlap on a thread: the scheduler's clock decides many
        assert "worker-hook" in clocks and ("scheduler" in clocks or name.startswith("long"))
    else:
        assert clocks <= {"worker-exact", "scheduler", "thread-order"}
    # each worker process's Darshan clock is late by tens of ms, and the fit says by how much
    procs = records.io.processes
    mapped = procs[procs["worker"].notna()]
    assert len(mapped) == 3
    assert (mapped["offset_low"] <= mapped["clock_offset"]).all()
    assert (mapped["clock_offset"] <= mapped["offset_high"]).all()
    assert (mapped["offset_high"] - mapped["offset_low"] < 0.010).all()


def test_without_scheduler_windows_hook_windows_alone_link_nothing_wrongly() -> None:
    """Mofka-style hook windows of consecutive ms tasks overlap: alone they cannot place every
    call, and what they cannot place is ambiguous, never guessed."""
    run = _run("burst-mofka")
    records = read_run(run)
    records.tasks = records.tasks.assign(sched_begins=pd.NaT, sched_ends=pd.NaT)
    link_io(records)
    links = records.io.segments
    truth = true_keys(run, records.darshan.segments)
    task = pd.notna(truth)
    status = links["status"].astype(str).to_numpy()
    linked = status == "linked"
    assert (linked & (links["key"].astype(object).to_numpy() != truth)).sum() == 0
    assert 0 < (linked & task).sum() < 0.9 * task.sum()
    assert (status[task & ~linked] == "ambiguous").all()
    assert set(links.loc[linked, "clock"]) <= {"worker-hook", "thread-order"}


def test_inspect_json_and_export_carry_each_links_evidence(tmp_path: Path) -> None:
    """A user auditing a link finds its rule, deciding clock and fitted offset in
    ``inspect --json`` and on each ``mp:IOSegment`` of the export."""
    import pyoxigraph as ox
    from click.testing import CliRunner

    from metaprov.cli import cli

    run = _run("mixed-mofka")
    records = read_run(run)
    link_io(records)
    links = records.io.segments
    linked = links[links["status"] == "linked"]
    result = CliRunner().invoke(cli, ["inspect", str(run), "--json", "-q"])
    assert result.exit_code == 0, result.output
    io = json.loads(result.output)["io"]
    assert io["link"]["by_clock"] == linked["clock"].value_counts().sort_index().to_dict()
    assert sum(g["segments"] for g in io["links"]) == len(linked)
    g = next(g for g in io["links"] if g["clock"] == "scheduler")
    assert g["rule"] == "scheduler-window" and g["clock_offset_s"] is not None
    assert len(io["ambiguous"]) == int((links["status"] == "ambiguous").sum())

    out = tmp_path / "run.nt"
    result = CliRunner().invoke(
        cli, ["export", str(run), "-o", str(out), "--io-detail", "segments", "-q"]
    )
    assert result.exit_code == 0, result.output
    store = ox.Store()
    store.bulk_load(path=str(out), format=ox.RdfFormat.N_TRIPLES)
    q = (
        "PREFIX mp: <https://w3id.org/metaprov/ns#> SELECT ?c (COUNT(*) AS ?n) WHERE "
        "{ ?s a mp:IOSegment ; mp:linkClock ?c ; mp:linkOffset ?o ; "
        "mp:linkOffsetUncertainty ?u } GROUP BY ?c"
    )
    got = {s["c"].value: int(s["n"].value) for s in store.query(q)}
    assert got == io["link"]["by_clock"]
