"""metaprov compare on real runs: the causes add up on every pair of runs of one workflow, and a
store gives the same answer as the run directories.

PMDA: the five runs of ../shared/data/xpdamoda, pairwise (read without their Darshan logs: the
identity does not depend on them, and linking them would take most of the suite's budget here).
darshan-dask-runs: the two recordings (Mofka-like plugins, metaprov's capture) of each of the
three workloads (the `mixed` pair with its Darshan I/O linked).
"""

from __future__ import annotations

import copy
import itertools

import pytest
from conftest import DARSHAN_DASK_RUNS, PMDA_RUNS, SKIP_REASON

from metaprov.analysis.compare import explain
from metaprov.analysis.timeline import blame
from metaprov.compare import compare, read_timelines

pytestmark = pytest.mark.realdata

WORKLOADS = ("mixed", "burst", "long")


@pytest.fixture(scope="module")
def pmda():
    if len(PMDA_RUNS) < 2:
        pytest.skip(SKIP_REASON)
    return read_timelines(PMDA_RUNS, darshan=False)


@pytest.fixture(scope="module")
def dask_runs():
    if not DARSHAN_DASK_RUNS.is_dir():
        pytest.skip(SKIP_REASON)
    out = {}
    for w in WORKLOADS:  # Darshan I/O linked for `mixed` (its io cause and files are checked)
        paths = [DARSHAN_DASK_RUNS / f"{w}-{s}" for s in ("mofka", "metaprov")]
        timelines = read_timelines(paths, darshan=w == "mixed")
        out.update(zip([p.name for p in paths], timelines, strict=True))
    return out


def _check_identity(a, b) -> None:
    ba, bb = blame(copy.deepcopy(a)), blame(copy.deepcopy(b))
    for bl in (ba, bb):  # each run's makespan is shared out exactly
        assert abs(bl.parts_total - bl.makespan) < 1e-3
    ex = explain(ba, bb)
    assert abs(ex.causes["seconds"].sum() - ex.difference_s) < 1e-3
    assert abs(ex.difference_s - (b.end - b.start - (a.end - a.start)) / 1e6) < 1e-9
    assert ex.causes.loc[ex.causes["cause"] == "unexplained", "seconds"].abs().sum() < max(
        0.05 * abs(ex.difference_s), 0.2
    )


def test_pmda_pairwise_identity(pmda) -> None:
    for a, b in itertools.combinations(pmda, 2):
        _check_identity(a, b)


def test_pmda_r1_r5_explained(pmda) -> None:
    """R5 took 3.2 s longer than R1, nearly all of it before the first task (cluster start)."""
    c = compare([copy.deepcopy(pmda[0]), copy.deepcopy(pmda[4])])
    ex = c.pair
    assert ex.alignment.counts["prefix"] == 9 and not ex.alignment.same_graph  # uuid keys
    assert ex.top["cause"] == "startup"
    assert ex.top["seconds"] == pytest.approx(3.046, abs=0.01)
    assert "before the first task started" in c.text()


def test_darshan_dask_runs_identity(dask_runs) -> None:
    for w in WORKLOADS:
        a, b = dask_runs[f"{w}-mofka"], dask_runs[f"{w}-metaprov"]
        _check_identity(a, b)
        ex = explain(blame(copy.deepcopy(a)), blame(copy.deepcopy(b)))
        assert ex.alignment.same_graph  # the same workload: every key matched
        if w == "mixed":  # both have linked I/O: it is a cause of its own, per file
            assert len(ex.files) > 0 and "io" in set(ex.causes["cause"])


def _strip(d: dict) -> dict:
    """The answer without the run labels (a store names runs by their run name)."""
    return {k: v for k, v in d.items() if k not in ("baseline", "other", "explanation")}


def _close(x, y, path="") -> None:
    if isinstance(x, dict):
        assert set(x) == set(y), path
        for k in x:
            _close(x[k], y[k], f"{path}.{k}")
    elif isinstance(x, list):
        assert len(x) == len(y), path
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            _close(u, v, f"{path}[{i}]")
    elif isinstance(x, float) and isinstance(y, float):
        assert x == pytest.approx(y, abs=1e-9), path
    else:
        assert x == y, path


def test_store_answers_as_the_run_directories(dask_runs, pmda) -> None:
    from metaprov.store import EmbeddedStore, load

    st = EmbeddedStore(None)
    try:
        # with their transitions: when the scheduler handed each task out (the scheduler cause)
        load(
            [DARSHAN_DASK_RUNS / "mixed-mofka", DARSHAN_DASK_RUNS / "mixed-metaprov"],
            store=st,
            detail="transitions",
        )
        load(PMDA_RUNS[:2], store=st, darshan=False, detail="transitions")
        from_dirs = compare(
            [copy.deepcopy(dask_runs["mixed-mofka"]), copy.deepcopy(dask_runs["mixed-metaprov"])]
        ).to_dict()
        from_store = compare(["mixed-mofka", "mixed-metaprov"], store=st).to_dict()
        _close(_strip(from_dirs), _strip(from_store))
        assert from_store["causes"][0]["cause"] == from_dirs["causes"][0]["cause"]
        assert from_store["files"]  # linked Darshan I/O came out of the store too
        from_dirs = compare([copy.deepcopy(pmda[0]), copy.deepcopy(pmda[1])]).to_dict()
        from_store = compare([PMDA_RUNS[0].name, PMDA_RUNS[1].name], store=st).to_dict()
        _close(_strip(from_dirs), _strip(from_store))
    finally:
        st.close()


def test_a_run_without_timed_executions_is_refused(pmda, imageproc_r1) -> None:
    """The partial ImageProcessing run holds tasks but no execution times: refused, with why."""
    from metaprov.errors import InputError

    (ip,) = read_timelines([imageproc_r1], darshan=False)
    with pytest.raises(InputError, match="has no timed task execution"):
        compare([copy.deepcopy(pmda[0]), ip])
