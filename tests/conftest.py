"""Shared fixtures: paths to the real data in ../shared (skipped when absent), tiny runs built in code."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("METAPROV_SHARED", REPO.parent / "shared")).resolve()
XPDAMODA = SHARED / "data" / "xpdamoda"
DARSHAN_FORMATS = SHARED / "data" / "darshan-formats"
DARSHAN_DASK_RUNS = SHARED / "data" / "darshan-dask-runs"

PMDA_RUNS = (
    sorted(p for p in (XPDAMODA / "PMDA").glob("D*") if p.is_dir()) if XPDAMODA.exists() else []
)
IMAGEPROC_RUNS = (
    sorted(p for p in (XPDAMODA / "ImageProcessing").glob("D*") if p.is_dir())
    if XPDAMODA.exists()
    else []
)
REAL_RUNS = PMDA_RUNS + IMAGEPROC_RUNS

#: ``METAPROV_FULL=1``: the tests that can ask every real run do (minutes each); by default they
#: ask a few runs that between them hold every kind of data (SAMPLE_RUNS), which keeps the suite
#: within its time on 2 cores.
FULL = any(
    os.environ.get(name, "") not in ("", "0")
    for name in ("METAPROV_FULL", "METAPROV_ALL_RUNS")  # the second: its name until session 10
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (a second real run of a kind already covered, a whole matrix, a
    second recording on a cluster) are skipped, saying so, unless METAPROV_FULL=1: they keep the
    default suite within its 10 minutes on 2 cores, and the full one runs them."""
    if FULL:
        return
    skip = pytest.mark.skip(reason="slow; covered by a faster case by default: METAPROV_FULL=1")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _metaprov_log_level():  # type: ignore[no-untyped-def]
    """Each test starts with the ``metaprov`` logger passing warnings, as a program that
    configured no logging sees it: a CLI run in this process (CliRunner, also from a module
    fixture) sets its level, and the root logger's when it has no handler yet, for the process,
    as the program does (``-q``: errors only), and a test that checked a warning after one on
    the same xdist worker saw nothing."""
    logger = logging.getLogger("metaprov")
    level = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(level)


def sample_runs(runs: list[Path], keep: int = 2) -> list[Path]:
    """``runs`` whole with METAPROV_FULL=1, else the first ``keep`` of them and the last one (the
    partial ImageProcessing run closes REAL_RUNS: a run without transition files)."""
    if FULL or len(runs) <= keep + 1:
        return list(runs)
    return [*runs[:keep], runs[-1]]


SKIP_REASON = _SKIP_REASON = (
    f"real run data not found at {SHARED}/data (set METAPROV_SHARED to the shared/ folder)"
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The ../shared/data folder; skips the test when it is absent."""
    if not (SHARED / "data").is_dir():
        pytest.skip(_SKIP_REASON)
    return SHARED / "data"


@pytest.fixture(scope="session")
def pmda_r1() -> Path:
    """PMDA run R1 (complete run with transitions and Darshan logs)."""
    if not PMDA_RUNS:
        pytest.skip(_SKIP_REASON)
    return PMDA_RUNS[0]


@pytest.fixture(scope="session")
def imageproc_r1() -> Path:
    """The partial ImageProcessing run (no transition files)."""
    if not IMAGEPROC_RUNS:
        pytest.skip(_SKIP_REASON)
    return IMAGEPROC_RUNS[0]


def real_run_params(sample: bool = False) -> list:
    """pytest params over every real run (one skipped param when the data is absent);
    ``sample``: the runs of :func:`sample_runs` (every run with METAPROV_FULL=1)."""
    if not REAL_RUNS:
        return [pytest.param(None, marks=pytest.mark.skip(reason=_SKIP_REASON), id="no-real-data")]
    runs = sample_runs(list(REAL_RUNS), keep=1) if sample else REAL_RUNS
    return [pytest.param(p, id=f"{p.parent.name}-{p.name.split('_')[-2]}") for p in runs]


@pytest.fixture(scope="session")
def shared_client():  # type: ignore[no-untyped-def]
    """One small real Dask LocalCluster (2 worker processes x 2 threads, 127.0.0.1) for the
    whole session: tests that only need *a* cluster share it instead of starting their own."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client
