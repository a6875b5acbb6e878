"""metaprov capture: a user script recorded unchanged; exit codes; the result re-read by read_run."""

from __future__ import annotations

import hashlib
import json
import socket
import textwrap

import pandas as pd
import pytest
from click.testing import CliRunner

pytest.importorskip("distributed")

import metaprov  # noqa: E402
from metaprov.cli import cli  # noqa: E402

SCRIPT = textwrap.dedent(
    """
    import sys, threading
    from distributed import Client, LocalCluster

    if __name__ == "__main__":
        n = int(sys.argv[1])
        with LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                          host="127.0.0.1", dashboard_address=None) as cluster, Client(cluster) as c:
            futures = c.map(lambda i: threading.get_ident(), range(n), key=[f"job-{i}" for i in range(n)])
            with open(sys.argv[2], "w") as fh:
                fh.write(" ".join(map(str, c.gather(futures))))
    """
)


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_capture_records_an_unchanged_script(tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(SCRIPT)
    out, seen = tmp_path / "run", tmp_path / "threads.txt"
    # Everything after the script goes to the script, even options metaprov also has.
    result = CliRunner().invoke(
        cli, ["capture", "--anonymous", "-o", str(out), str(script), "12", str(seen)]
    )
    assert result.exit_code == 0, result.output
    # every file the capture writes (the Mofka-Dask six, its own extras: losses, fine metrics,
    # memory, spans, ...), each counted in the summary
    written = len(list(out.glob("*.csv")))
    assert written >= 15 and f"{out}:" in result.output
    assert f"rows in {written} files" in result.output
    records = metaprov.read_run(out, darshan=False)
    ex = records.executions[records.executions["key"].str.startswith("job-")]
    assert len(ex) == 12
    assert set(ex["thread"].astype("uint64")) == {int(t) for t in seen.read_text().split()}
    assert (records.workers["pid"].notna()).all() and len(records.workers) == 2
    meta = json.loads((out / "metaprov-run.json").read_text())
    assert meta["status"] == "complete"
    # what each process ran in: the scheduler (inside the script) records the script itself
    envs = {
        p.name.split("-")[0]: json.loads(p.read_text()) for p in (out / "environment").iterdir()
    }
    assert sorted(p.name.split("-")[0] for p in (out / "environment").iterdir()) == [
        "scheduler",
        "worker",
        "worker",
    ]
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    assert envs["scheduler"]["script"]["sha256"] == digest
    assert all(e["anonymous"] and e["host"]["hostname"] is None for e in envs.values())
    # nor in the run's own files: no user or scheduler host in metaprov-run.json, no worker host
    # in workers_info.csv (the workers' nodes are then named by their address)
    assert meta["user"] is None and meta["scheduler"]["hostname"] is None
    assert records.workers["hostname"].isna().all()
    info = pd.read_csv(out / "workers_info.csv", dtype=str, keep_default_na=False)
    assert list(info["hostname"]) == ["", ""] and socket.gethostname() not in set(info.stack())
    assert set(records.environments["role"]) == {"scheduler", "worker"}

    again = CliRunner().invoke(cli, ["capture", "-o", str(out), str(script), "1", str(seen)])
    assert again.exit_code == 2
    assert "Error: " in again.output and "already holds a capture" in again.output
    assert "--overwrite" in again.output


def test_a_failing_script_is_an_error_with_its_exit_code(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nsys.exit(3)\n")
    result = CliRunner().invoke(cli, ["capture", "-o", str(tmp_path / "run"), str(script)])
    assert result.exit_code == 3  # the script's own code, so a pipeline sees it
    assert "Error: " in result.output and "exited with code 3" in result.output
    assert "Traceback" not in result.output


def test_a_script_without_a_cluster_records_nothing_and_says_so(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("print('no dask here')\n")
    result = CliRunner().invoke(cli, ["capture", "-o", str(tmp_path / "run"), str(script)])
    assert result.exit_code == 1
    assert "started no Dask scheduler" in result.output


def test_a_missing_script_is_an_input_error(tmp_path):
    result = CliRunner().invoke(
        cli, ["capture", "-o", str(tmp_path / "run"), str(tmp_path / "nope.py")]
    )
    assert result.exit_code == 3
    assert "no such script" in result.output
