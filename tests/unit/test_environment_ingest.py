"""Environment records -> tables -> PROV; bad records reported by file, never a traceback; a real
Mofka run's software and job read from its own files (PBS output, Darshan headers)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import PMDA_RUNS
from runfiles import tiny_files, write_run

import metaprov
from metaprov.capture.environment import collect, write_record
from metaprov.ingest.environment import spack_packages
from metaprov.mapping import to_prov
from metaprov.write import write


def _run_with_records(tmp_path: Path, environ: dict[str, str]) -> Path:
    run = write_run(tmp_path / "run", tiny_files())
    for role, extra in (("scheduler", {}), ("worker", {"address": "tcp://10.0.0.5:4000"})):
        rec = collect(role, root=tmp_path, environ=environ, gpus=False, process=extra)
        write_record(run, rec, f"{role}-{rec['process']['pid']}-0000000{len(extra)}.json")
    return run


def test_records_become_tables_and_job_facts(tmp_path: Path) -> None:
    (tmp_path / "opt/conda/envs/x/conda-meta").mkdir(parents=True)
    (tmp_path / "opt/conda/envs/x/conda-meta/numpy-2.1.0-0.json").write_text(
        json.dumps({"name": "numpy", "version": "2.1.0", "build": "0", "channel": "conda-forge"})
    )
    env = {
        "CONDA_PREFIX": "/opt/conda/envs/x",
        "CONDA_DEFAULT_ENV": "x",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_JOB_NODELIST": "n[1-2]",
    }
    run = _run_with_records(tmp_path, env)
    rec = metaprov.read_run(run, darshan=False)
    e = rec.environments
    assert sorted(e["role"]) == ["scheduler", "worker"]
    assert set(e["conda_name"]) == {"x"}
    assert e.loc[e["role"] == "worker", "worker"].tolist() == ["tcp://10.0.0.5:4000"]
    conda = rec.packages[rec.packages["manager"] == "conda"]
    assert conda[["name", "version", "detail"]].drop_duplicates().values.tolist() == [
        ["numpy", "2.1.0", "0 conda-forge"]
    ]
    assert rec.job["id"] == "4242" and rec.job["scheduler_system"] == "Slurm"
    assert rec.job["queue"] == "gpu" and rec.job["nodes"]["job"] == ["n1", "n2"]
    buf = io.BytesIO()
    write(to_prov(rec), buf, "nt")
    text = buf.getvalue().decode()
    assert '<https://w3id.org/metaprov/ns#condaEnvironment> "x"' in text
    assert "/package/conda/numpy/2.1.0>" in text
    assert "queue=gpu" in text


def test_a_job_file_wins_over_job_variables(tmp_path: Path) -> None:
    run = _run_with_records(tmp_path, {"PBS_JOBID": "99.other"})
    (run / "1873179.polaris-pbs-01.OU").write_text("hello\n")
    rec = metaprov.read_run(run, darshan=False)
    assert rec.job["id"] == "1873179"
    issues = rec.accounting.issues
    assert issues["reason"].str.contains("job variables name job 99.other").any()


def test_bad_records_are_reported_by_file(tmp_path: Path) -> None:
    run = _run_with_records(tmp_path, {})
    d = run / "environment"
    (d / "worker-1-deadbeef.json").write_text("{not json")
    (d / "worker-2-deadbeef.json").write_text(json.dumps({"role": "admin"}))
    (d / "worker-3-deadbeef.json").write_text(json.dumps({"role": "worker", "packages": 5}))
    (d / "notes.txt").write_text("x")
    (d / "worker-4-deadbeef.json.tmp").write_text("{}")
    rec = metaprov.read_run(run, darshan=False)
    assert len(rec.environments) == 2
    issues = rec.accounting.issues
    text = " | ".join(f"{f}: {r}" for f, r in zip(issues["file"], issues["reason"], strict=True))
    assert "environment/worker-1-deadbeef.json: not readable JSON" in text
    assert "environment/worker-2-deadbeef.json: no 'role'" in text
    assert "environment/worker-3-deadbeef.json: unexpected field types" in text
    assert "environment/notes.txt: not an environment record" in text
    assert "never finished writing" in text


def test_spack_list_of_a_job_output() -> None:
    text = (
        "==> In environment mofkadask\n==> Root specs\ncmake\n\n==> Installed packages\n"
        "-- linux-sles15-zen3 / gcc@11.2.0 ---\nmochi.argobots@1.2%gcc\n"
        "builtin.py-numpy@1.26.4%gcc\nbuiltin.python@3.10.10%gcc\n"
        "Creating Mofka Server\n..launching Scheduler\n"
    )
    assert spack_packages(text) == (
        "mofkadask",
        [
            ("argobots", "1.2", "mochi"),
            ("py-numpy", "1.26.4", "builtin"),
            ("python", "3.10.10", "builtin"),
        ],
    )


@pytest.mark.realdata
def test_a_real_mofka_run_gets_its_software_from_its_own_files() -> None:
    if not PMDA_RUNS:
        pytest.skip("real run data not found under ../shared/data")
    rec = metaprov.read_run(PMDA_RUNS[0])
    e = rec.environments
    spack = e[e["role"] == "job"]
    assert spack["spack_environment"].tolist() == ["mofkadask"]
    assert spack["python_version"].tolist() == ["3.10.10"]
    pk = rec.packages
    assert set(pk["manager"]) == {"spack"} and len(pk) > 100
    assert pk.loc[pk["name"] == "py-numpy", "version"].tolist() == ["1.26.4"]
    workers = e[e["role"] == "worker"]
    assert len(workers) == 8 and workers["python_version"].eq("3.10").all()
    assert (workers["environment"] == spack["environment"].iloc[0]).all()
    assert workers["mounts"].gt(0).all()
    assert e.loc[e["python_executable"] == "uname", "environment"].isna().all()
    assert rec.job["id"] == "1873179"
    buf = io.BytesIO()
    write(to_prov(rec), buf, "nt")
    text = buf.getvalue().decode()
    assert '<https://w3id.org/metaprov/ns#spackEnvironment> "mofkadask"' in text
    assert "/package/spack/py-numpy/1.26.4>" in text
    # each traced process keeps its key (``darshan:<log>``: a Darshan log's name looks like a
    # key to the secret filter) and so its link to the environment: the 24 Python processes
    assert workers["process"].str.startswith("darshan:").all() and e["source"].notna().all()
    linked = [ln for ln in text.splitlines() if "<https://w3id.org/metaprov/ns#environment> " in ln]
    assert len(linked) == 24 == int(e["environment"].notna().sum()) - 1


def test_crate_names_the_container_image_and_the_packages(tmp_path: Path) -> None:
    pytest.importorskip("rocrate")
    from metaprov.crate import crate

    env = {"APPTAINER_CONTAINER": "/scratch/images/analysis.sif", "APPTAINER_NAME": "analysis.sif"}
    run = _run_with_records(tmp_path, env)
    out = tmp_path / "crate"
    crate([run], out, formats=("turtle",), report=False, license="CC-BY-4.0")
    graph = {
        e["@id"]: e for e in json.loads((out / "ro-crate-metadata.json").read_text())["@graph"]
    }
    # the run's action and each step's (every task ran in the container), one image
    actions = [e for e in graph.values() if e.get("containerImage")]
    assert all(a["@type"] == "CreateAction" for a in actions)
    assert sum(1 for a in actions if a.get("identifier")) == 1 and len(actions) > 1
    assert len({a["containerImage"]["@id"] for a in actions}) == 1
    image = graph[actions[0]["containerImage"]["@id"]]
    assert image["@type"] == "ContainerImage"
    assert image["additionalType"] == {"@id": "https://w3id.org/ro/terms/workflow-run#SIFImage"}
    assert image["name"] == "/scratch/images/analysis.sif"
    tools = [e for e in graph.values() if e.get("softwareRequirements")]
    assert tools and all(e["@type"] == "SoftwareApplication" for e in tools)
    req = graph[tools[0]["softwareRequirements"][0]["@id"]]
    assert req["@type"] == "SoftwareApplication" and req["version"]
    assert any(i.endswith("packages.csv") for i in graph)
    # CQ1 of the Workflow Run Crate: what container images were used by the run?
    from crategraph import PREFIXES, crate_graph

    cq1 = crate_graph(out).query(
        PREFIXES + "SELECT ?execution ?type ?name WHERE { ?execution a s:CreateAction ; "
        "wfrun:containerImage ?c . ?c a wfrun:ContainerImage ; s:additionalType ?type ; "
        "s:name ?name }"
    )
    assert {(str(r[1]).rsplit("#", 1)[-1], str(r[2])) for r in cq1} == {
        ("SIFImage", "/scratch/images/analysis.sif")
    }


def test_container_image_of_a_registry_reference() -> None:
    from types import SimpleNamespace

    from metaprov.crate.builder import _container_props

    got = _container_props(
        SimpleNamespace(
            container_runtime="podman", container_image="quay.io/biocontainers/samtools:1.9"
        )
    )
    assert (got["registry"], got["name"], got["tag"]) == (
        "quay.io",
        "biocontainers/samtools",
        "1.9",
    )
    assert got["additionalType"]["@id"].endswith("#DockerImage")
    got = _container_props(
        SimpleNamespace(container_runtime="shifter", container_image="docker:nersc/pytorch:24.06")
    )
    assert (got["registry"], got["name"], got["tag"]) == ("docker.io", "nersc/pytorch", "24.06")


def test_every_engine_checks_the_environment_shapes(tmp_path: Path) -> None:
    from metaprov.validate import validate

    rec = metaprov.read_run(_run_with_records(tmp_path, {}), darshan=False)
    buf = io.BytesIO()
    write(to_prov(rec), buf, "nt")
    lines = buf.getvalue().decode().splitlines(keepends=True)
    good, bad = tmp_path / "good.nt", tmp_path / "bad.nt"
    good.write_text("".join(lines))
    bad.write_text(
        "".join(ln for ln in lines if "#packageVersion>" not in ln and "#environmentId>" not in ln)
    )
    for engine in ("shacl", "columnar", "sparql"):
        assert validate(good, engine=engine).conforms, engine
        shapes = {v.shape for v in validate(bad, engine=engine).violations}
        assert {"SoftwarePackageShape", "SoftwareEnvironmentShape"} <= shapes, (engine, shapes)


def _run_with_numpy(tmp_path: Path, name: str, version: str) -> Path:
    # another client id: another run id
    files = {k: v.replace("Client-aaaa", f"Client-{name}") for k, v in tiny_files().items()}
    run = write_run(tmp_path / name, files)
    rec = collect("worker", root=tmp_path, environ={}, gpus=False)
    rec["packages"] = [p for p in rec["packages"] if p["name"].lower() != "numpy"]
    rec["packages"].append({"name": "numpy", "version": version, "location": "/site"})
    write_record(run, rec, f"worker-{rec['process']['pid']}-0000000a.json")
    return run


def test_compare_gives_the_software_change_as_evidence(tmp_path: Path) -> None:
    from metaprov.compare import compare

    a = _run_with_numpy(tmp_path, "R3", "1.26.4")
    b = _run_with_numpy(tmp_path, "R7", "2.1.0")
    ev = compare([a, b], darshan=False).pair.evidence
    software = [e for e in ev if e["kind"] == "software"]
    assert [e["detail"] for e in software] == ["numpy 1.26.4 -> 2.1.0 between run R3 and run R7"]
    # the same from a store holding the two runs' PROV
    store = tmp_path / "store"
    metaprov.load([a, b], store)
    ids = [metaprov.read_run(r, darshan=False).run_id for r in (a, b)]
    ev = compare(ids, store=store).pair.evidence
    details = [e["detail"] for e in ev if e["kind"] == "software"]
    assert len(details) == 1 and details[0].startswith("numpy 1.26.4 -> 2.1.0 between run ")
    # nothing when the software is the same
    same = _run_with_numpy(tmp_path, "R8", "2.1.0")
    assert not [
        e for e in compare([b, same], darshan=False).pair.evidence if e["kind"] == "software"
    ]
