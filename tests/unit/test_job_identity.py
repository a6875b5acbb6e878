"""A job is a batch job only when a job file or the batch system says so (issue 25, item 5).

Darshan names a log ``<user>_<exe>_id<jobid>-<pid>_...`` and writes the process id as the job id
when no batch variable is set: such a run has no global job IRI (its job is scoped to the run),
so unrelated runs in one store do not merge; a numeric user in the name is a uid, and the name
the run's own files give wins.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from runfiles import tiny_files, write_run

from metaprov.ingest import read_run
from metaprov.mapping import to_prov
from metaprov.write import write

MP = "https://w3id.org/metaprov/ns#"


def _nt(run: Path) -> str:
    out = io.BytesIO()
    write(to_prov(read_run(run)), out, "ntriples")
    return out.getvalue().decode()


def _darshan_run(tmp_path: Path, names: list[str]) -> Path:
    files: dict[str, str | bytes] = {**tiny_files()}
    for n in names:
        files[n] = b""  # unreadable logs: only their names are used here
    return write_run(tmp_path / "run", files)


def test_a_darshan_job_id_equal_to_the_pid_is_no_batch_job(tmp_path: Path) -> None:
    run = _darshan_run(
        tmp_path,
        [
            "alice_python_id4242-4242_1-1-1-1_1.darshan",
            "alice_python_id4250-4250_1-1-1-2_1.darshan",
        ],
    )
    rec = read_run(run)
    assert "id" not in rec.job and rec.job["user"] == "alice"
    nt = _nt(run)
    assert "/id/job/" not in nt and f"<{MP}jobId>" not in nt


def test_a_darshan_job_id_from_the_batch_system_is_the_job(tmp_path: Path) -> None:
    run = _darshan_run(
        tmp_path,
        ["alice_python_id777-4242_1-1-1-1_1.darshan", "alice_python_id777-4250_1-1-1-2_1.darshan"],
    )
    assert read_run(run).job["id"] == "777"
    assert "/id/job/777>" in _nt(run)


def test_a_numeric_user_is_a_uid(tmp_path: Path) -> None:
    run = _darshan_run(tmp_path, ["0_python_id4242-4242_1-1-1-1_1.darshan"])
    rec = read_run(run)
    assert "user" not in rec.job and rec.job["uid"] == "0"
    nt = _nt(run)
    assert f"<{MP}userName>" not in nt and '"uid=0"' in nt


@pytest.mark.realdata
def test_real_runs_without_batch_job_have_no_global_job(shared_data: Path) -> None:
    runs = shared_data / "darshan-dask-runs"
    jobs = set()
    for name in ("long-mofka", "long-metaprov"):
        nt = _nt(runs / name)
        assert "/id/job/" not in nt, name  # the Darshan job id there is a process id
        jobs |= {ln.split(" ")[0] for ln in nt.splitlines() if f"<{MP}Job>" in ln}
        assert f'<{MP}userName> "0"' not in nt
    assert len(jobs) == 2  # two runs, two jobs: nothing merges in a store
    # the capture's own file says root; Darshan's name said 0 (a uid)
    assert f'<{MP}userName> "root"' in _nt(runs / "long-metaprov")


@pytest.mark.realdata
def test_a_pbs_job_stays_global(pmda_r1: Path) -> None:
    nt = _nt(pmda_r1)
    assert "/id/job/1873179.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov>" in nt
    assert f'<{MP}userName> "agueroud"' in nt
