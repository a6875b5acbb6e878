"""Batch jobs from recorded Slurm answers (``batch-jobs.json``) and job variables: no Slurm needed.

The scontrol lines are what Slurm 22.05 printed for dask-jobqueue worker jobs (tests/slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from metaprov.ingest.batch import parse_sacct, parse_scontrol, read_batch_jobs
from metaprov.records import RunRecords, conform

LINE = (
    "JobId={id} JobName=mp-worker UserId=root(0) GroupId=root(0) Account=(null) QOS=(null) "
    "JobState={state} Reason=None ExitCode=0:15 RunTime=00:00:19 TimeLimit=00:05:00 "
    "SubmitTime=2026-11-28T18:21:08 EligibleTime=2026-11-28T18:21:08 "
    "StartTime={start} EndTime=2026-11-28T18:26:09 Partition=debug "
    "NodeList={nodes} BatchHost=localhost NumNodes=2 NumCPUs=4 TRES=cpu=1,node=1,billing=1 "
    "Command=/tmp/job script.sh WorkDir=/tmp/x"
)


def _records(jobs: dict[str, str]) -> RunRecords:
    """Records whose worker processes ran in ``jobs`` (worker address -> job id)."""
    rec = RunRecords(path="/runs/slurm")
    rec.environments = conform(
        "environments",
        pd.DataFrame(
            {
                "process": [f"worker-{i}-ab" for i in range(len(jobs))],
                "role": "worker",
                "address": list(jobs),
                "worker": list(jobs),
                "job": list(jobs.values()),
            }
        ),
    )
    return rec


def _write(run: Path, *queries: dict) -> None:
    run.mkdir(exist_ok=True)
    (run / "batch-jobs.json").write_text(
        json.dumps({"layout": "metaprov-batch/1", "queries": list(queries)})
    )


def _query(
    stdout: str,
    *,
    jobs: list[str],
    tz: str = "UTC",
    when: str = "2026-11-28T18:30:00+00:00",
    sacct: str = "",
) -> dict:
    return {
        "queried": when,
        "system": "slurm",
        "timezone": tz,
        "jobs": jobs,
        "commands": [
            {"argv": ["scontrol", "-o", "show", "job"], "returncode": 0, "stdout": stdout},
            {"argv": ["sacct", "-P"], "returncode": 0 if sacct else 1, "stdout": sacct},
        ],
        "scripts": {j: {"text": "#!/bin/sh\n#SBATCH -J mp-worker\n", "sha256": "ab"} for j in jobs},
    }


def test_scontrol_line_values_keep_spaces_and_equals() -> None:
    f = parse_scontrol(
        LINE.format(id=7, state="RUNNING", start="2026-11-28T18:21:09", nodes="n[01-02]")
    )
    assert f["Command"] == "/tmp/job script.sh"
    assert f["TRES"] == "cpu=1,node=1,billing=1"
    assert f["JobState"] == "RUNNING"


def test_jobs_from_scontrol_final_state_only_ends_times_in_utc(tmp_path: Path) -> None:
    rec = _records({"tcp://h:1": "7", "tcp://h:2": "8", "tcp://h:3": "9"})
    _write(
        tmp_path,
        _query(
            "\n".join(
                [
                    LINE.format(
                        id=7, state="CANCELLED", start="2026-11-28T18:21:09", nodes="n[01-02]"
                    ),
                    LINE.format(id=8, state="RUNNING", start="2026-11-28T18:21:10", nodes="n03"),
                    LINE.format(id=9, state="PENDING", start="2026-11-28T18:40:00", nodes="(null)"),
                ]
            ),
            jobs=["7", "8", "9"],
        ),
    )
    read_batch_jobs(tmp_path, rec, {})
    j = rec.jobs.set_index("job")
    assert list(j.index) == ["7", "8", "9"]
    assert j.loc["7", "state"] == "CANCELLED"
    assert j.loc["7", "ended"] == pd.Timestamp("2026-11-28T18:26:09Z")
    # a running job's EndTime is its time limit, a pending job's StartTime a forecast: not kept
    assert pd.isna(j.loc["8", "ended"]) and pd.isna(j.loc["9", "started"])
    assert j.loc["7", "started"] == pd.Timestamp("2026-11-28T18:21:09Z")
    assert j.loc["7", "nodes"] == "n01 n02" and j.loc["7", "node_count"] == 2
    assert j.loc["7", "time_limit_s"] == 300 and j.loc["7", "cpus"] == 4
    assert (j["processes"] == 1).all() and (j["source"] == "scontrol").all()


def test_a_later_query_wins_and_sacct_answers_for_a_purged_job(tmp_path: Path) -> None:
    rec = _records({"tcp://h:1": "7", "tcp://h:2": "8"})
    early = _query(
        LINE.format(id=7, state="RUNNING", start="2026-11-28T18:21:09", nodes="n01")
        + "\n"
        + LINE.format(id=8, state="RUNNING", start="2026-11-28T18:21:09", nodes="n01"),
        jobs=["7", "8"],
    )
    sacct = (
        "JobIDRaw|JobID|JobName|Partition|State|ExitCode|Submit|Eligible|Start|End|NodeList|"
        "NNodes|AllocCPUS|Timelimit|User|Account\n"
        "8|8|mp-worker|debug|CANCELLED by 0|0:0|2026-11-28T18:21:08|2026-11-28T18:21:08|"
        "2026-11-28T18:21:09|2026-11-28T18:22:00|n01|1|1|00:05:00|root|\n"
    )
    late = _query(
        LINE.format(id=7, state="TIMEOUT", start="2026-11-28T18:21:09", nodes="n01"),
        jobs=["7", "8"],
        when="2026-11-28T18:40:00+00:00",
        sacct=sacct,
    )
    _write(tmp_path, early, late)
    read_batch_jobs(tmp_path, rec, {})
    j = rec.jobs.set_index("job")
    assert j.loc["7", "state"] == "TIMEOUT" and j.loc["7", "source"] == "scontrol"
    assert j.loc["8", "state"] == "CANCELLED" and j.loc["8", "source"] == "sacct"
    assert j.loc["8", "ended"] == pd.Timestamp("2026-11-28T18:22:00Z")
    assert parse_sacct(sacct)[0]["State"] == "CANCELLED by 0"


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{not json", "not readable JSON"),
        (json.dumps({"queries": "x"}), "no 'queries' list"),
        (
            json.dumps({"queries": [{"system": "slurm", "timezone": "Europe/Paris"}]}),
            "not stated in UTC",
        ),
    ],
)
def test_unusable_answers_are_reported_and_jobs_come_from_the_variables(
    tmp_path: Path, content: str, reason: str
) -> None:
    rec = _records({"tcp://h:1": "7"})
    (tmp_path / "batch-jobs.json").write_text(content)
    read_batch_jobs(
        tmp_path, rec, {"7": {"system": "slurm", "id": "7", "queue": "debug", "hosts": ["n01"]}}
    )
    j = rec.jobs.set_index("job")
    assert j.loc["7", "source"] == "environment" and j.loc["7", "partition"] == "debug"
    assert j.loc["7", "system"] == "Slurm" and j.loc["7", "nodes"] == "n01"
    assert pd.isna(j.loc["7", "submitted"])  # no time invented
    issues = rec.accounting.issues
    assert (
        issues["detail"].astype(str).str.contains(reason).any()
        or issues["reason"].astype(str).str.contains(reason).any()
    )


def test_scripts_are_scrubbed_word_by_word() -> None:
    from metaprov.capture.batch import scrub_script

    text, n = scrub_script(
        "#!/bin/sh\nexport API_TOKEN=s3cr3t\npython -m distributed.cli.dask_worker tcp://h:1\n"
    )
    assert "s3cr3t" not in text and "API_TOKEN=***" in text and n == 1
    assert "distributed.cli.dask_worker tcp://h:1" in text


def test_workers_in_jobs_of_their_own_are_jobs_of_the_run_not_its_job(tmp_path: Path) -> None:
    """dask-jobqueue from a login node: the scheduler in no job, each worker in its own."""
    import io

    from runfiles import tiny_files, write_run

    import metaprov
    from metaprov.capture.environment import collect, write_record
    from metaprov.mapping import to_prov
    from metaprov.write import write

    run = write_run(tmp_path / "run", tiny_files())
    sched = collect("scheduler", root=tmp_path, environ={}, gpus=False)
    write_record(run, sched, "scheduler-1-00000000.json")
    workers = metaprov.read_run(run, darshan=False).workers["address"].tolist()[:2]
    for n, (address, jid) in enumerate(zip(workers, ["501", "502"], strict=True)):
        env = {"SLURM_JOB_ID": jid, "SLURM_JOB_PARTITION": "debug", "SLURM_JOB_NODELIST": f"n{n}"}
        rec = collect(
            "worker", root=tmp_path, environ=env, gpus=False, process={"address": address}
        )
        write_record(run, rec, f"worker-{10 + n}-0000000{n}.json")
    rec = metaprov.read_run(run, darshan=False)
    assert not rec.job.get("id")  # the run's own job is not a worker's
    assert rec.jobs["job"].tolist() == ["501", "502"]
    assert rec.jobs["nodes"].tolist() == ["n0", "n1"] and (rec.jobs["partition"] == "debug").all()
    assert (rec.jobs["source"] == "environment").all() and rec.jobs["submitted"].isna().all()
    buf = io.BytesIO()
    write(to_prov(rec), buf, "nt")
    text = buf.getvalue().decode()
    assert (
        text.count("<http://www.w3.org/ns/prov#hadActivity> <https://w3id.org/metaprov/id/job/501>")
        == 2
    )
    assert "<https://w3id.org/metaprov/ns#usedJob> <https://w3id.org/metaprov/id/job/502>" in text
