"""`metaprov export --io-detail`: a tiny run directory with Darshan logs, exported and re-read."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyoxigraph as ox
import pytest
from click.testing import CliRunner
from runfiles import T1, T2, tiny_files, write_run

from metaprov.cli import cli
from metaprov.synthetic.darshan import log_file_name, write_darshan_log

WORKER_CMD = "python3 -c from multiprocessing.spawn import spawn_main --multiprocessing-fork"
START = 1_700_000_000.0
MP = "https://w3id.org/metaprov/ns#"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 2-task run of runfiles.py, plus one Darshan log per worker process.

    Task A ran on thread T1 from 0.5 to 1.5 s, task B on T2 from 2.0 to 2.4 s (worker clocks).
    """
    run = write_run(tmp_path_factory.mktemp("io") / "run", tiny_files())
    for pid, thread, calls in (
        (11, T1, [("/data/in.h5", "read", 0, 100, 0.7), ("/data/in.h5", "read", 100, 28, 0.9)]),
        (12, T2, [("/data/out.h5", "write", 0, 32, 2.1)]),
    ):
        df = pd.DataFrame(calls, columns=["path", "op", "offset", "length", "start_rel"])
        df["end_rel"] = df["start_rel"] + 0.001
        df["pthread"] = pd.array([thread] * len(df), dtype="UInt64")
        write_darshan_log(
            run / log_file_name("u", "python3", pid, pid, START),
            df,
            start=START,
            cmdline=WORKER_CMD,
            jobid=pid,
        )
    return run


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def count(path: Path, where: str) -> int:
    store = ox.Store()
    store.bulk_load(path=str(path), format=ox.RdfFormat.N_TRIPLES)
    q = f"PREFIX mp: <{MP}> PREFIX prov: <http://www.w3.org/ns/prov#> SELECT (COUNT(*) AS ?n) WHERE {{ {where} }}"
    return int(next(iter(store.query(q)))["n"].value)


def test_export_io_aggregate_by_default(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.nt"
    result = invoke("export", str(run_dir), "-o", str(out))
    assert result.exit_code == 0, result.output
    # task A read 128 bytes of one file in 2 calls; task B wrote one version of another
    read = "?e mp:task/mp:key 'inc-1111' ; prov:qualifiedUsage ?u . ?u mp:bytesRead 128 ; mp:readCount 2"
    assert count(out, read) == 1
    assert count(out, "?v a mp:FileVersion ; prov:wasGeneratedBy ?e . ?e mp:task ?t") == 1
    assert count(out, "?s a mp:IOSegment") == 0


def test_export_io_segments(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.nt"
    result = invoke("export", str(run_dir), "-o", str(out), "--io-detail", "segments")
    assert result.exit_code == 0, result.output
    assert count(out, "?s a mp:IOSegment ; mp:aggregatedBy ?u . ?u a mp:IOUsage") == 2
    assert count(out, "?s a mp:IOSegment ; mp:aggregatedBy ?g . ?g a mp:IOGeneration") == 1


def test_export_without_darshan_has_no_io(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.nt"
    result = invoke("export", str(run_dir), "-o", str(out), "--no-darshan")
    assert result.exit_code == 0, result.output
    assert count(out, "?f a mp:File") == 0


def test_unknown_io_detail_is_refused(run_dir: Path, tmp_path: Path) -> None:
    result = invoke("export", str(run_dir), "-o", str(tmp_path / "x.nt"), "--io-detail", "calls")
    assert result.exit_code == 2
    assert "Invalid value for '--io-detail'" in result.stderr
    assert not (tmp_path / "x.nt").exists()
