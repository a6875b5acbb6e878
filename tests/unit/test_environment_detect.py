"""Detection of environments, containers, batch jobs and hosts from what the runtimes provide.

Each case creates, in a temporary root and an environ dict, the variables and files the real
runtime sets (conda's conda-meta records, Podman's /run/.containerenv, Slurm's job variables, ...)
and runs the real detection code on them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from metaprov.capture.environment import (
    batch_job,
    collect,
    conda,
    container,
    expand_nodelist,
    git_state,
    host,
    looks_secret,
    scrub,
    virtualenv,
    write_record,
)


def _put(root: Path, path: str, text: str) -> Path:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


# -- conda and venv -------------------------------------------------------------------------------


def test_conda_environment_and_its_packages_from_conda_meta(tmp_path: Path) -> None:
    prefix = "/opt/conda/envs/analysis"
    for name, version, build in (
        ("numpy", "1.26.4", "py311h64a7726_0"),
        ("python", "3.11.8", "h1"),
    ):
        _put(
            tmp_path,
            f"{prefix}/conda-meta/{name}-{version}-{build}.json",
            json.dumps(
                {
                    "name": name,
                    "version": version,
                    "build": build,
                    "channel": "https://conda.anaconda.org/conda-forge/linux-64",
                }
            ),
        )
    _put(tmp_path, f"{prefix}/conda-meta/history", "not json")
    env = {"CONDA_PREFIX": prefix, "CONDA_DEFAULT_ENV": "analysis"}
    got = conda(env, "/usr", tmp_path)
    assert got is not None
    assert (got["name"], got["prefix"]) == ("analysis", prefix)
    assert [(p["name"], p["version"], p["build"]) for p in got["packages"]] == [
        ("numpy", "1.26.4", "py311h64a7726_0"),
        ("python", "3.11.8", "h1"),
    ]
    # the interpreter's own prefix is a conda environment too, without any variable
    got = conda({}, prefix, tmp_path)
    assert got is not None and got["name"] == "analysis"
    assert conda({}, "/usr", tmp_path) is None


def test_virtualenv_from_prefix_and_pyvenv_cfg(tmp_path: Path) -> None:
    _put(tmp_path, "/work/.venv/pyvenv.cfg", "home = /usr/bin\nversion = 3.11.7\n")
    got = virtualenv({}, "/work/.venv", "/usr", tmp_path)
    assert got == {"path": "/work/.venv", "active": True, "home": "/usr/bin", "version": "3.11.7"}
    assert virtualenv({}, "/usr", "/usr", tmp_path) is None
    assert virtualenv({"VIRTUAL_ENV": "/x"}, "/usr", "/usr", tmp_path)["active"] is False


# -- containers --------------------------------------------------------------------------------


def test_apptainer_and_singularity_from_their_variables(tmp_path: Path) -> None:
    env = {"APPTAINER_CONTAINER": "/scratch/img/pytorch.sif", "APPTAINER_NAME": "pytorch.sif"}
    got = container(env, tmp_path)
    assert got["runtime"] == "apptainer" and got["image"] == "/scratch/img/pytorch.sif"
    got = container({"SINGULARITY_CONTAINER": "/s/a.simg", "SINGULARITY_NAME": "a.simg"}, tmp_path)
    assert (got["runtime"], got["name"]) == ("singularity", "a.simg")


def test_a_docker_image_the_runtime_does_not_show_is_taken_from_the_user(tmp_path: Path) -> None:
    """Inside Docker the image is not visible: METAPROV_CONTAINER_IMAGE names it; an image the
    runtime shows is kept; a value that looks like a secret is not recorded."""
    _put(tmp_path, "/.dockerenv", "")
    assert container({}, tmp_path)["image"] is None
    named = {"METAPROV_CONTAINER_IMAGE": "ghcr.io/lab/sim:2.1"}
    got = container(named, tmp_path)
    assert (got["runtime"], got["image"]) == ("docker", "ghcr.io/lab/sim:2.1")
    apptainer = {"APPTAINER_CONTAINER": "/img/a.sif", **named}
    assert container(apptainer, tmp_path)["image"] == "/img/a.sif"
    bare = container(named, tmp_path / "nothing")
    assert (bare["runtime"], bare["image"]) == ("container", "ghcr.io/lab/sim:2.1")
    secret = {"METAPROV_CONTAINER_IMAGE": "ghp_" + "a1B2" * 9}
    assert container(secret, tmp_path)["image"] is None


def test_apptainer_from_its_directory_in_the_image(tmp_path: Path) -> None:
    _put(
        tmp_path,
        "/.singularity.d/labels.json",
        json.dumps({"org.label-schema.usage.singularity.deffile.from": "ubuntu:22.04"}),
    )
    got = container({}, tmp_path)
    assert got["runtime"] == "apptainer" and got["image"] == "ubuntu:22.04"


def test_podman_from_containerenv(tmp_path: Path) -> None:
    _put(
        tmp_path,
        "/run/.containerenv",
        'engine="podman-4.9.3"\nname="mp-run"\nid="' + "a" * 64 + '"\n'
        'image="docker.io/library/python:3.12"\nimageid="' + "b" * 64 + '"\nrootless=1\n',
    )
    got = container({"container": "podman"}, tmp_path)
    assert got["runtime"] == "podman"
    assert got["image"] == "docker.io/library/python:3.12" and got["name"] == "mp-run"
    assert got["id"] == "a" * 64


def test_docker_from_dockerenv_and_mountinfo(tmp_path: Path) -> None:
    cid = "0123456789abcdef" * 4
    _put(tmp_path, "/.dockerenv", "")
    _put(
        tmp_path,
        "/proc/self/mountinfo",
        f"612 590 0:52 /docker/containers/{cid}/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n",
    )
    got = container({}, tmp_path)
    assert got == {"runtime": "docker", "image": None, "name": None, "id": cid}


def test_shifter_and_charliecloud_from_their_variables(tmp_path: Path) -> None:
    got = container(
        {
            "SHIFTER_IMAGEREQUEST": "docker:nersc/pytorch:24.06",
            "SHIFTER_RUNTIME": "1",
            "SHIFTER_IMAGE": "c" * 64,
        },
        tmp_path,
    )
    assert (got["runtime"], got["image"], got["id"]) == (
        "shifter",
        "docker:nersc/pytorch:24.06",
        "c" * 64,
    )
    assert container({"CH_RUNNING": "Weird Al Yankovic"}, tmp_path)["runtime"] == "charliecloud"
    assert container({}, tmp_path) is None


# -- batch systems --------------------------------------------------------------------------------


def test_slurm_job_from_its_variables(tmp_path: Path) -> None:
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "dask-run",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_JOB_NODELIST": "nid[001-003],login7",
        "SLURM_JOB_NUM_NODES": "4",
        "SLURM_CPUS_ON_NODE": "64",
        "SLURM_MEM_PER_NODE": "2048",
        "SLURM_SUBMIT_DIR": "/home/u/p",
    }
    got = batch_job(env, tmp_path)
    assert got == {
        "system": "slurm",
        "id": "4242",
        "name": "dask-run",
        "queue": "gpu",
        "nodes": 4,
        "cores": 64,
        "submit_dir": "/home/u/p",
        "hosts": ["nid001", "nid002", "nid003", "login7"],
        "memory_bytes": 2048 * 2**20,
    }
    anon = batch_job(env, tmp_path, anonymous=True)
    assert "hosts" not in anon and "submit_dir" not in anon and anon["nodes"] == 4


def test_pbs_job_hosts_from_its_node_file(tmp_path: Path) -> None:
    _put(tmp_path, "/var/spool/pbs/aux/1873179.pbs01", "x3109c0s37b0n0\nx3109c0s37b0n0\nx3110c0\n")
    env = {
        "PBS_JOBID": "1873179.pbs01",
        "PBS_JOBNAME": "mofka",
        "PBS_QUEUE": "debug",
        "PBS_NODEFILE": "/var/spool/pbs/aux/1873179.pbs01",
        "NCPUS": "64",
        "PBS_O_WORKDIR": "/lus/u",
    }
    got = batch_job(env, tmp_path)
    assert got["system"] == "pbs" and got["id"] == "1873179.pbs01" and got["queue"] == "debug"
    assert got["hosts"] == ["x3109c0s37b0n0", "x3110c0"] and got["nodes"] == 2
    assert got["cores"] == 64


def test_lsf_and_flux_jobs_from_their_variables(tmp_path: Path) -> None:
    _put(tmp_path, "/tmp/lsf/hosts", "batch1\nh01\nh01\nh02\n")
    got = batch_job(
        {
            "LSB_JOBID": "77",
            "LSB_JOBNAME": "j",
            "LSB_QUEUE": "batch",
            "LSB_DJOB_HOSTFILE": "/tmp/lsf/hosts",
            "LS_SUBCWD": "/gpfs/p",
        },
        tmp_path,
    )
    assert (got["system"], got["id"], got["queue"]) == ("lsf", "77", "batch")
    assert got["hosts"] == ["batch1", "h01", "h02"]
    got = batch_job(
        {"FLUX_JOB_ID": "ƒ2Cb7MqHm", "FLUX_JOB_NNODES": "2", "FLUX_JOB_SIZE": "8"}, tmp_path
    )
    assert got == {"system": "flux", "id": "ƒ2Cb7MqHm", "nodes": 2, "tasks": 8}


def test_no_batch_job_without_its_variables(tmp_path: Path) -> None:
    assert batch_job({"HOME": "/root", "SLURM_CONF": "/etc/slurm.conf"}, tmp_path) is None


def test_expand_nodelist() -> None:
    assert expand_nodelist("a[08-10]b,c") == ["a08b", "a09b", "a10b", "c"]
    assert expand_nodelist("") == []


# -- host, git ------------------------------------------------------------------------------------


def test_host_facts_from_proc_and_os_release(tmp_path: Path) -> None:
    _put(
        tmp_path,
        "/etc/os-release",
        'PRETTY_NAME="SUSE Linux Enterprise Server 15 SP4"\nID="sles"\n',
    )
    _put(tmp_path, "/proc/sys/kernel/osrelease", "5.14.21-150400.24.81_12.0.87-cray_shasta_c\n")
    _put(
        tmp_path,
        "/proc/cpuinfo",
        "processor\t: 0\nmodel name\t: AMD EPYC 7543P 32-Core Processor\n",
    )
    _put(tmp_path, "/proc/meminfo", "MemTotal:       527951668 kB\nMemFree: 1 kB\n")
    got = host(tmp_path, gpus=False)
    assert got["os"] == "SUSE Linux Enterprise Server 15 SP4"
    assert got["kernel"].startswith("5.14.21") and got["cpu_model"].startswith("AMD EPYC 7543P")
    assert got["memory_bytes"] == 527951668 * 1024 and got["gpus"] == []
    assert host(tmp_path, anonymous=True, gpus=False)["hostname"] is None


def test_git_state_of_a_script(tmp_path: Path) -> None:
    import shutil
    import subprocess

    if not shutil.which("git"):
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    script = _put(repo, "pipeline.py", "print(1)\n")

    def run(*a: str) -> None:
        subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)

    run("init", "-q", "-b", "main")
    run("-c", "user.email=a@b", "-c", "user.name=a", "add", "pipeline.py")
    run("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x")
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    got = git_state(script)
    assert got == {"root": str(repo), "commit": head, "branch": "main", "dirty": False}
    script.write_text("print(2)\n")
    assert git_state(script)["dirty"] is True
    assert git_state(tmp_path / "elsewhere.py") is None


# -- privacy -----------------------------------------------------------------------------------

SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY42",
    "GITHUB_TOKEN": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "DB_PASSWORD": "hunter2-correct-horse",
    "MY_SERVICE_URL": "https://bob:s3cr3tpassw0rd@example.org/api",
}


def test_looks_secret() -> None:
    for name, value in SECRETS.items():
        assert looks_secret(value, name)
    assert looks_secret("https://bob:pw1234@host/x")
    assert looks_secret("ghp_16C7e42F292c6912E7710c838347Ae178B4a")
    assert not looks_secret("/opt/conda/envs/analysis")
    assert not looks_secret("0123456789abcdef" * 4)  # a container id / sha256 is kept
    assert not looks_secret("docker.io/library/python:3.12")


def test_a_darshan_command_line_passes_the_secret_filter() -> None:
    """A token given as an argument (after a secret-named option, as ``name=value``, or
    alone) is withheld from the command line a Darshan log records; the rest is kept, and the
    role is still told from it."""
    from metaprov.ingest.darshan import _fill_job
    from metaprov.redact import WITHHELD

    token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    job = {
        "start_sec": 1,
        "start_nsec": 0,
        "end_sec": 2,
        "end_nsec": 0,
        "uid": 1000,
        "jobid": 7,
        "nprocs": 1,
        "cmdline": f"/usr/bin/python3 -m distributed.cli.dask_worker tcp://10.0.0.1:8786 "
        f"--api-key s3cr3tvalue --x password=hunter2 {token}",
        "mounts": "",
        "metadata": "lib_ver=3.4.4",
    }
    row: dict = {}
    _fill_job(row, job)
    assert token not in row["cmdline"] and "s3cr3tvalue" not in row["cmdline"]
    assert "hunter2" not in row["cmdline"] and row["cmdline"].count(WITHHELD) == 3
    assert row["cmdline"].startswith("/usr/bin/python3 -m distributed.cli.dask_worker tcp://")
    assert row["exe"] == "/usr/bin/python3" and row["metadata"] == "lib_ver=3.4.4"
    assert row["role"] == _fill_role(job["cmdline"])


def _fill_role(cmdline: str) -> str:
    from metaprov.ingest.darshan import classify_role

    return classify_role(cmdline)


def test_package_store_folders_are_paths_not_keys() -> None:
    """A Spack or Nix build hash names a folder of a path; a key-like folder or last part, a
    token anywhere, are still withheld."""
    spack = "ycbghmgvq7z34ridg4nntzus2jsgkcos"
    kept = [
        f"/soft/._view/{spack}/bin/python3.10",
        f"/opt/spack/linux-x86_64/gcc-12/python-3.10.8-{spack}/bin/python3.10",
        "/nix/store/0c5jp9d9h9818arz8zr5fnh3hy9sqqzw-python3-3.11.6/bin/python3",
    ]
    withheld = [
        f"/data/{spack}",  # a last part named by a hash: anything
        "/x/3f9a0c2e8b7d41a6b5c9e0f1a2b3c4d5/y",  # hex: a key
        "/x/a8Xk29LmQp03ZzR7yT6uV5wW4sS3rR2q/y",  # mixed case: a key
        f"/soft/._view/{spack}/ghp_16C7e42F292c6912E7710c838347Ae178B4a/x",
    ]
    got, where = scrub({"paths": kept + withheld})
    assert got["paths"] == kept + [None] * len(withheld)
    assert where == [f"paths[{i}]" for i in range(len(kept), len(kept) + len(withheld))]


def test_collect_never_writes_planted_secrets(tmp_path: Path) -> None:
    env = {
        **SECRETS,
        "SLURM_JOB_ID": "99",
        "SLURM_JOB_NAME": "token=abcd1234efgh5678ijkl",  # a secret-looking value in a job field
        "APPTAINER_CONTAINER": "/img/x.sif",
        "HOME": "/home/alice",
        "USER": "alice",
    }
    rec = collect("client", root=tmp_path, environ=env, gpus=False, script=False)
    path = write_record(tmp_path / "run", rec)
    text = path.read_text(encoding="utf-8")
    for value in [*SECRETS.values(), "abcd1234efgh5678ijkl"]:
        assert value not in text
    assert rec["job"]["id"] == "99" and rec["job"].get("name") is None
    assert rec["container"]["image"] == "/img/x.sif"
    assert rec["packages"] and all(
        set(p) == {"name", "version", "location"} for p in rec["packages"]
    )


def test_anonymous_leaves_out_host_and_user_names(tmp_path: Path) -> None:
    env = {
        "HOME": "/home/alice",
        "USER": "alice",
        "VIRTUAL_ENV": "/home/alice/venvs/a",
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NODELIST": "nid001",
        "SLURM_SUBMIT_DIR": "/home/alice",
    }
    rec = collect(
        "worker",
        root=tmp_path,
        environ=env,
        anonymous=True,
        gpus=False,
        process={"address": "tcp://nid001.cluster:4000"},
    )
    text = json.dumps(rec)
    assert "alice" not in text and "nid001" not in text
    assert os.uname().nodename not in text or os.uname().nodename in ("", "localhost")
    assert rec["host"]["hostname"] is None and rec["anonymous"] is True


def _dist(root: Path, dirname: str, name: str, version: str, meta: str = "METADATA") -> None:
    d = root / dirname
    d.mkdir(parents=True)
    (d / meta).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_distributions_read_like_importlib_metadata(tmp_path: Path) -> None:
    from importlib import metadata

    from metaprov.capture.environment import distributions

    first, second = tmp_path / "overlay", tmp_path / "site"
    _dist(first, "Pkg_A-2.0.dist-info", "Pkg.A", "2.0")
    _dist(second, "pkg_a-1.0.dist-info", "pkg-a", "1.0")  # shadowed by the overlay
    _dist(second, "zzz-0.1.dist-info", "zzz", "0.1")
    _dist(second, "devpkg.egg-info", "devpkg", "0.3.dev1", meta="PKG-INFO")  # no version in name
    got = distributions([str(first), str(second)])
    assert [(d["name"], d["version"], Path(d["location"]).name) for d in got] == [
        ("devpkg", "0.3.dev1", "site"),
        ("Pkg_A", "2.0", "overlay"),
        ("zzz", "0.1", "site"),
    ]
    # on this interpreter's own sys.path: the same names and versions importlib.metadata finds
    ref: dict[str, str] = {}
    for d in metadata.distributions():
        ref.setdefault(d.metadata["Name"].lower().replace("_", "-").replace(".", "-"), d.version)
    mine = {
        d["name"].lower().replace("_", "-").replace(".", "-"): d["version"] for d in distributions()
    }
    assert mine == ref
