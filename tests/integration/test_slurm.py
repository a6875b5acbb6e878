"""Dask on a real single-node Slurm (dask-jobqueue ``SLURMCluster``), captured with its jobs.

``tests/slurm/start.sh`` starts slurmctld + slurmd + munged on 127.0.0.1 (as root, the Debian
``slurm-wlm`` and ``munge`` packages; skipped with the reason where it cannot start). One
captured run, shared by the tests: two worker jobs, a workload, one worker job cancelled
(``scancel``) in the middle, a second workload on the job left; the batch system asked again
once the cluster closed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster]

HERE = Path(__file__).resolve().parents[1] / "slurm"
METAPROV = [sys.executable, "-m", "metaprov"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A running single-node Slurm; ``SLURM_CONF`` set for this process and its children."""
    missing = [c for c in ("slurmctld", "slurmd", "munged", "sbatch") if not shutil.which(c)]
    if missing:
        pytest.skip(
            f"Slurm not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
        )
    if os.geteuid() != 0:
        pytest.skip("the test Slurm runs its daemons as root")
    pytest.importorskip("dask_jobqueue")
    d = tmp_path_factory.mktemp("slurm")
    res = subprocess.run(
        ["bash", str(HERE / "start.sh"), str(d)], capture_output=True, text=True, timeout=120
    )
    if res.returncode != 0:
        subprocess.run(["bash", str(HERE / "stop.sh"), str(d)], check=False)
        pytest.skip(f"Slurm did not start here: {res.stderr.strip()[-500:]}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(d / "slurm.conf")
    try:
        yield d
    finally:
        subprocess.run(["scancel", "--user=root"], check=False, capture_output=True)
        subprocess.run(["bash", str(HERE / "stop.sh"), str(d)], check=False, timeout=60)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def _workload(client, n: int):  # type: ignore[no-untyped-def]
    import dask.array as da

    x = da.ones((200, 200), chunks=(50, 50))
    return float(((x + n) @ x.T).sum().compute())


@pytest.fixture(scope="module")
def slurm_run(slurm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The captured run: its directory, the worker job ids squeue listed, the cancelled one."""
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    import metaprov.capture

    base = tmp_path_factory.mktemp("slurm-run")
    run = base / "run"
    with (
        SLURMCluster(
            cores=1,
            processes=1,
            memory="512MB",
            walltime="00:05:00",
            queue="debug",
            job_name="mp-worker",
            scheduler_options={"host": "127.0.0.1", "dashboard_address": ":0"},
            log_directory=str(base / "logs"),
            local_directory=str(base / "work"),
            worker_extra_args=["--host", "127.0.0.1"],
        ) as cluster,
        Client(cluster) as client,
    ):
        cluster.scale(jobs=2)
        client.wait_for_workers(2, timeout=120)
        squeue = subprocess.run(
            ["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, check=True
        ).stdout.split("\n")
        listed = {line.split()[0] for line in squeue if line.strip()}
        with metaprov.capture.record(client, run) as cap:
            first = _workload(client, 1)
            jobs = sorted((w.job_id for w in cluster.workers.values()), key=int)
            cancelled = jobs[-1]
            subprocess.run(["scancel", cancelled], check=True)
            deadline = time.monotonic() + 60
            while len(client.scheduler_info()["workers"]) > 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            second = _workload(client, 2)
        # a campaign conversion on the cluster the user already has: the SLURMCluster's
        # scheduler, its task run in the worker job left
        campaign = base / "campaign"
        export = subprocess.run(
            [
                *METAPROV,
                "export",
                str(run),
                "-o",
                str(campaign),
                "-f",
                "nq",
                "--backend",
                "scheduler",
                "--scheduler",
                cluster.scheduler_address,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        from metaprov.export import export as export_one

        export_one(run, base / "single.nq")  # the same run directory, in this process
    metaprov.capture.record_jobs(run, settle=20)
    return {
        "run": run,
        "jobs": jobs,
        "listed": listed,
        "cancelled": cancelled,
        "results": (first, second),
        "summary": cap.summary,
        "export": export,
        "campaign": campaign,
        "single": base / "single.nq",
    }


def test_every_worker_job_is_recorded_with_slurm_s_facts(slurm_run: dict) -> None:
    import pandas as pd

    import metaprov

    rec = metaprov.read_run(slurm_run["run"])
    jobs = rec.jobs.set_index("job")
    # one job per Slurm job that ran a worker, ids equal to squeue's
    assert sorted(jobs.index, key=int) == slurm_run["jobs"]
    assert set(slurm_run["jobs"]) <= slurm_run["listed"]
    assert (jobs["source"] == "scontrol").all()
    assert (jobs["partition"] == "debug").all() and (jobs["name"] == "mp-worker").all()
    assert (jobs["nodes"] == "localhost").all()
    assert (jobs["submitted"] <= jobs["started"]).all() and jobs["started"].notna().all()
    assert (jobs["ended"] >= jobs["started"]).all()
    assert (jobs["time_limit_s"] == 300).all()
    # the script dask-jobqueue wrote, as Slurm returned it
    assert jobs["script"].str.contains("#SBATCH -J mp-worker").all()
    assert jobs["script"].str.contains("distributed.cli.dask_worker").all()
    # the cancelled worker job is marked, and its worker left the cluster
    assert jobs.loc[slurm_run["cancelled"], "state"] == "CANCELLED"
    assert jobs.loc[slurm_run["cancelled"], "ended"] == jobs["ended"].min()  # mid-run
    env = rec.environments[rec.environments["role"] == "worker"]
    gone = env.loc[env["job"] == slurm_run["cancelled"], "worker"].iloc[0]
    w = rec.workers.set_index("address")
    assert pd.notna(w.loc[gone, "removed"])
    # its lost work as for any lost worker: the worker is lost, its executions the
    # scheduler saw are kept (its own records died with it)
    assert bool(w.loc[gone, "lost"]) and not w.drop(index=gone)["lost"].fillna(False).any()
    ex = rec.executions
    assert (ex["worker"] == gone).any()
    # inspect/report and compare: the jobs, and their queue wait as part of the startup
    from metaprov.analysis.summary import batch_jobs
    from metaprov.analysis.timeline import timeline_from_records
    from metaprov.report.page import _batch_jobs_text

    b = batch_jobs(rec)
    # (dask-jobqueue scancels its remaining jobs when the cluster closes: CANCELLED or COMPLETED)
    assert b["total"] == 2 and b["states"].get("CANCELLED", 0) >= 1
    assert sum(b["states"].values()) == 2
    assert b["max_queue_wait_s"] is not None and b["max_queue_wait_s"] >= 0
    assert timeline_from_records(rec).queue_wait == b["max_queue_wait_s"]
    assert "waiting in the queue (part of the startup)" in _batch_jobs_text(b)
    # the client and scheduler ran outside Slurm (the "login node"): no run job is invented
    assert not rec.job.get("id")


def test_export_every_execution_acts_for_a_job_and_validates(
    slurm_run: dict, tmp_path: Path
) -> None:
    import rdflib

    import metaprov
    from metaprov.validate import validate

    out = tmp_path / "run.nt"
    metaprov.write(metaprov.to_prov(metaprov.read_run(slurm_run["run"])), out, "nt")
    g = rdflib.Graph().parse(out, format="nt")
    mp = "https://w3id.org/metaprov/ns#"
    rows = g.query(
        f"""PREFIX mp: <{mp}> PREFIX prov: <http://www.w3.org/ns/prov#>
        SELECT ?e ?id WHERE {{
          ?e a mp:TaskExecution ; prov:wasAssociatedWith ?t .
          ?t a mp:Thread ; prov:actedOnBehalfOf ?p .
          ?p prov:actedOnBehalfOf ?w ; prov:qualifiedDelegation ?pd .
          ?pd prov:agent ?w ; prov:hadActivity ?job .
          ?w prov:qualifiedDelegation ?wd . ?wd prov:hadActivity ?job .
          ?job a mp:Job ; mp:jobId ?id .
          ?run mp:usedJob ?job .
        }}"""
    )
    per_exec = {str(e): str(i) for e, i in rows}
    executions = set(g.subjects(rdflib.RDF.type, rdflib.URIRef(mp + "TaskExecution")))
    with_thread = {
        e
        for e in executions
        if any(
            (a, rdflib.RDF.type, rdflib.URIRef(mp + "Thread")) in g
            for a in g.objects(e, rdflib.URIRef("http://www.w3.org/ns/prov#wasAssociatedWith"))
        )
    }
    assert with_thread and {str(e) for e in with_thread} <= set(per_exec)
    assert set(per_exec.values()) <= set(slurm_run["jobs"])
    states = {
        str(i): str(s)
        for i, s in g.query(
            f"PREFIX mp: <{mp}> SELECT ?i ?s WHERE {{ ?j mp:jobId ?i ; mp:jobState ?s }}"
        )
    }
    assert states[slurm_run["cancelled"]] == "CANCELLED"
    lost = {
        str(i)
        for (i,) in g.query(
            f"""PREFIX mp: <{mp}> PREFIX prov: <http://www.w3.org/ns/prov#>
            SELECT ?i WHERE {{ ?w a mp:Worker ; mp:lost true ;
              prov:qualifiedDelegation/prov:hadActivity/mp:jobId ?i }}"""
        )
    }
    assert lost == {slurm_run["cancelled"]}  # the worker of the cancelled job, lost
    for engine in ("columnar", "sparql", "shacl"):
        report = validate(out, engine=engine)
        assert report.conforms, (engine, report)


def test_jobs_question_and_crate_state_the_jobs(slurm_run: dict, tmp_path: Path) -> None:
    import metaprov

    store = tmp_path / "store"
    metaprov.load(slurm_run["run"], store=store)
    df = metaprov.query("jobs", store=store)
    assert sorted(df["job_id"], key=int) == slurm_run["jobs"]
    by = df.set_index("job_id")
    assert (by["workers"].astype(int) == 1).all()
    assert by["tasks"].astype(int).sum() > 0
    assert (by["queue_wait"].astype(float) >= 0).all()
    assert by.loc[slurm_run["cancelled"], "state"] == "CANCELLED"
    # the crate states the jobs: a jobs.csv beside the run, named by the run's action
    import csv
    import json

    out = tmp_path / "crate"
    metaprov.crate([slurm_run["run"]], out, formats=("turtle",), report=False)
    (jobs_csv,) = out.rglob("jobs.csv")
    rows = list(csv.DictReader(jobs_csv.open()))
    assert sorted((r["job"] for r in rows), key=int) == slurm_run["jobs"]
    assert {r["job"]: r["state"] for r in rows}[slurm_run["cancelled"]] == "CANCELLED"
    meta = json.loads((out / "ro-crate-metadata.json").read_text())
    assert any("Batch jobs: " in str(e.get("description", "")) for e in meta["@graph"])


def test_export_backend_on_the_slurm_cluster_equals_the_single_process_export(
    slurm_run: dict, tmp_path: Path
) -> None:
    import json

    import rdflib

    res = slurm_run["export"]
    assert res.returncode == 0, res.stderr[-2000:]
    assert "scheduler" in res.stdout + res.stderr  # the backend chosen is printed
    manifest = json.loads((slurm_run["campaign"] / "manifest.json").read_text())
    (entry,) = manifest["runs"]
    assert entry["status"] == "ok"
    single = slurm_run["single"]
    got = rdflib.Dataset()
    for shard in sorted(slurm_run["campaign"].rglob("*.nq")):
        got.parse(shard, format="nquads")
    want = rdflib.Dataset().parse(single, format="nquads")
    assert set(got.quads()) == set(want.quads())
