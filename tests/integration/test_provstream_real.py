"""The streaming PROV-N, PROV-JSON and PROV-XML files equal, read back by ``prov``, the in-memory
path's on the real runs in ../shared (issue 39). By default: one darshan-dask-runs run in all
three formats and the first PMDA run in PROV-JSON; ``METAPROV_FULL=1``: every run (the
ImageProcessing run's in-memory document takes minutes), all three formats."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import DARSHAN_DASK_RUNS, FULL, IMAGEPROC_RUNS, PMDA_RUNS, SKIP_REASON
from provdm_check import assert_same_document

from metaprov.ingest import read_run
from metaprov.mapping import to_prov
from metaprov.write import provdm, provstream

pytestmark = pytest.mark.realdata

ALL_RUNS = FULL
FORMATS = ("provn", "provjson", "provxml")


def _runs() -> list:
    dask_runs = sorted(p for p in DARSHAN_DASK_RUNS.glob("*-*") if p.is_dir())
    runs = [*dask_runs, *PMDA_RUNS, *IMAGEPROC_RUNS]
    if not runs:
        return [pytest.param(None, (), marks=pytest.mark.skip(reason=SKIP_REASON), id="none")]
    params = []
    for r in runs:
        if ALL_RUNS:
            fmts: tuple[str, ...] = FORMATS
        elif r.name == "mixed-metaprov":
            fmts = FORMATS
        elif PMDA_RUNS and r == PMDA_RUNS[0]:
            fmts = ("provjson",)
        else:
            continue
        params.append(pytest.param(r, fmts, id=f"{r.parent.name}-{r.name[-14:]}"))
    return params


@pytest.mark.parametrize(("run", "formats"), _runs())
def test_streamed_files_equal_the_in_memory_documents(run: Path, formats: tuple[str, ...]) -> None:
    graph = to_prov(read_run(run))
    for fmt in formats:
        old = getattr(provdm, f"write_{fmt}")
        new = getattr(provstream, f"write_{fmt}")
        a, b = io.BytesIO(), io.BytesIO()
        old(graph, a, force=True)
        new(graph, b)
        assert_same_document(a.getvalue(), b.getvalue(), fmt)
