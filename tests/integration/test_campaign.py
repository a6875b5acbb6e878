"""Campaigns and partitioned runs on real Dask clusters (issue 15).

One LocalCluster (2 workers) is shared by the module; one test starts a separate ``dask
scheduler`` and ``dask worker`` on 127.0.0.1. Outputs are re-read as sets of quads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DARSHAN_DASK_RUNS, FULL, REAL_RUNS, REPO, XPDAMODA

from metaprov.errors import CampaignError
from metaprov.export import export
from metaprov.export.campaign import export_campaign
from metaprov.synthetic import generate_run

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def quads(*files: Path) -> set[tuple[str, str, str, str]]:
    """Every quad of the N-Quads files, parsed (not compared as text)."""
    import pyoxigraph

    out: set[tuple[str, str, str, str]] = set()
    for f in files:
        with f.open("rb") as fh:
            for q in pyoxigraph.parse(fh, format=pyoxigraph.RdfFormat.N_QUADS):
                out.add((str(q.subject), str(q.predicate), str(q.object), str(q.graph_name)))
    return out


@pytest.fixture(scope="module")
def scheduler() -> str:
    """The address of a LocalCluster (2 single-thread worker processes) shared by the module."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two small synthetic runs and a corrupt one, in one campaign directory."""
    root = tmp_path_factory.mktemp("campaign")
    generate_run(root / "app" / "R1", 300, seed=1, erred_fraction=0.02)
    generate_run(root / "app" / "R2", 200, seed=2, retried_fraction=0.05)
    bad = root / "app" / "R3-corrupt"
    shutil.copytree(root / "app" / "R1", bad)
    (bad / "graph.csv").write_bytes(b"\xff\xfe not a csv header\n")
    return root


def entries(manifest: dict) -> dict[str, dict]:
    return {Path(e["run"]).name: e for e in manifest["runs"]}


@pytest.mark.realdata
def test_real_runs_in_parallel_equal_the_sequential_exports(tmp_path: Path, scheduler: str) -> None:
    if not REAL_RUNS:
        pytest.skip("real runs absent")
    # by default the first two PMDA runs (minutes less); METAPROV_FULL=1: the whole folder
    runs = REAL_RUNS if FULL else REAL_RUNS[:2]
    result = export_campaign([XPDAMODA] if FULL else runs, tmp_path / "out", scheduler=scheduler)
    got = entries(result.manifest)
    assert sorted(got) == sorted(r.name for r in runs)
    sequential = []
    for run in runs:
        single = tmp_path / f"{run.name}.nq"
        export(run, single)
        sequential.append(single)
        shard = tmp_path / "out" / got[run.name]["shard"]
        # the same bytes whichever backend converted the run
        assert shard.read_bytes() == single.read_bytes(), run
    shards = [tmp_path / "out" / e["shard"] for e in got.values()]
    assert quads(*shards) == quads(*sequential)
    assert all(e["status"] == "ok" and e["worker"].startswith("tcp://") for e in got.values())


def test_partitioned_run_equals_the_single_process_export(tmp_path: Path, scheduler: str) -> None:
    run = generate_run(
        tmp_path / "big",
        1500,
        seed=5,
        graphs=2,
        clients=2,
        erred_fraction=0.02,
        retried_fraction=0.03,
        fetch_transitions=True,
    )
    export(run, tmp_path / "single.nq", detail="transitions")
    result = export_campaign(
        [run], tmp_path / "out", scheduler=scheduler, partitions=3, detail="transitions"
    )
    (entry,) = result.manifest["runs"]
    assert entry["partitions"] == 3 and len(entry["parts"]) == 4
    assert sum(p["triples"] for p in entry["parts"]) == entry["triples"]
    single = quads(tmp_path / "single.nq")
    assert quads(tmp_path / "out" / entry["shard"]) == single
    assert entry["triples"] == len(single)  # no triple written by two partitions
    # the partitions' row accounts add up to the single-process one
    from metaprov.export.partition import accounting_of
    from metaprov.ingest import read_run

    assert entry["accounting"]["files"] == accounting_of(read_run(run))["files"]


@pytest.mark.realdata
def test_partitioned_darshan_runs_equal_their_unpartitioned_exports(
    tmp_path: Path, scheduler: str
) -> None:
    """Real LocalCluster runs under Darshan, each in 3 partitions on the cluster: the I/O
    linked against every partition's windows gives exactly the unpartitioned shards."""
    if not DARSHAN_DASK_RUNS.is_dir():
        pytest.skip(f"{DARSHAN_DASK_RUNS} absent")
    # by default one run of each capture schema; METAPROV_FULL=1: all six
    roots = (
        [DARSHAN_DASK_RUNS]
        if FULL
        else [DARSHAN_DASK_RUNS / "mixed-metaprov", DARSHAN_DASK_RUNS / "mixed-mofka"]
    )
    whole = export_campaign(roots, tmp_path / "whole", backend="in-process")
    parted = export_campaign(roots, tmp_path / "parted", scheduler=scheduler, partitions=3)
    want, got = entries(whole.manifest), entries(parted.manifest)
    assert sorted(got) == sorted(want) and len(got) == (6 if FULL else 2)
    for name, e in got.items():
        w = want[name]
        assert e["status"] == "ok" and e["partitions"] == 3, e.get("error")
        single = quads(tmp_path / "whole" / w["shard"])
        assert quads(tmp_path / "parted" / e["shard"]) == single, name
        assert e["triples"] == w["triples"] == len(single)  # each I/O triple written once
        assert e["accounting"] == w["accounting"], name  # logs, segments and link notes
        assert any("Darshan link:" in n for n in e["accounting"]["notes"])


def test_a_corrupt_run_fails_alone_and_a_rerun_skips_finished_shards(
    tmp_path: Path, scheduler: str, campaign: Path
) -> None:
    out = tmp_path / "out"
    with pytest.raises(CampaignError) as info:
        export_campaign([campaign], out, scheduler=scheduler)
    assert info.value.exit_code == 10 and "R3-corrupt" in str(info.value)
    first = entries(json.loads((out / "manifest.json").read_text()))
    assert first["R3-corrupt"]["status"] == "failed"
    assert "graph.csv" in first["R3-corrupt"]["error"]
    assert not (out / first["R3-corrupt"]["shard"]).exists()
    for name in ("R1", "R2"):
        assert first[name]["status"] == "ok" and (out / first[name]["shard"]).stat().st_size > 0
    mtimes = {n: (out / first[n]["shard"]).stat().st_mtime_ns for n in ("R1", "R2")}
    # R2 changes: only R2 (and the still corrupt R3) are converted again
    (campaign / "app" / "R2" / "notes.txt").write_text("changed input\n")
    with pytest.raises(CampaignError):
        export_campaign([campaign], out, scheduler=scheduler)
    second = entries(json.loads((out / "manifest.json").read_text()))
    assert second["R1"]["reused"] and not second["R2"]["reused"]
    assert (out / second["R1"]["shard"]).stat().st_mtime_ns == mtimes["R1"]
    assert second["R2"]["fingerprint"] != first["R2"]["fingerprint"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_campaign_on_a_separately_started_scheduler_and_worker(
    tmp_path: Path, campaign: Path
) -> None:
    bindir = Path(sys.executable).parent
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    # the worker imports this checkout of metaprov, as the test does
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    procs = [
        subprocess.Popen(
            [
                str(bindir / "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--dashboard-address",
                ":0",
                "--no-show",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    ]
    try:
        procs.append(
            subprocess.Popen(
                [
                    str(bindir / "dask"),
                    "worker",
                    address,
                    "--nthreads",
                    "1",
                    "--host",
                    "127.0.0.1",
                    "--dashboard-address",
                    ":0",
                    "--no-nanny",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        )
        from distributed import Client

        with Client(address, timeout="30s") as c:
            c.wait_for_workers(1, timeout=60)
        with pytest.raises(CampaignError) as info:
            export_campaign(
                [campaign / "app" / "R1", campaign / "app" / "R3-corrupt"],
                tmp_path / "out",
                scheduler=address,
            )
        got = entries(info.value.manifest)
        assert got["R1"]["status"] == "ok" and got["R3-corrupt"]["status"] == "failed"
        assert info.value.manifest["backend"]["name"] == "scheduler"
        reference = tmp_path / "r1.nq"
        export(campaign / "app" / "R1", reference)
        assert (tmp_path / "out" / got["R1"]["shard"]).read_bytes() == reference.read_bytes()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
