"""Issue 17: the rough edges a newcomer hit, and the commands users expect (records, serve, drop,
runs, --json). Exit codes and messages, outputs re-read through the library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from metaprov.cli import cli
from metaprov.ingest import read_run
from metaprov.synthetic import generate_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "run"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def threadless(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run without transition files: no thread ids, no compute windows, Darshan I/O."""
    base = tmp_path_factory.mktemp("threadless")
    return generate_run(
        base / "run",
        60,
        seed=3,
        with_worker_transitions=False,
        with_scheduler_transitions=False,
        io_fraction=0.5,
    )


@pytest.fixture(scope="module")
def example_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ex") / "store"
    res = invoke("load", str(EXAMPLE), "--store", str(path))
    assert res.exit_code == 0, res.output
    return path


# --- 2: capture ----------------------------------------------------------------------------
def test_capture_without_the_extra_names_it(tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "distributed"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named distributed')\n")
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    res = subprocess.run(
        [sys.executable, "-m", "metaprov", "capture", "-o", str(tmp_path / "out"), str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert "pip install 'metaprov[capture]'" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


# --- 3: runs without thread ids --------------------------------------------------------------
def test_inspect_says_once_what_is_unknown_and_why(threadless: Path) -> None:
    res = invoke("inspect", str(threadless))
    assert res.exit_code == 0, res.output
    unknown = [line for line in res.output.splitlines() if line.startswith("unknown")]
    assert len(unknown) == 2, res.output
    assert "thread ids" in unknown[0] and "scheduler_transition.csv" in unknown[0]
    assert "stays with the worker processes" in unknown[0]
    assert "compute time" in unknown[1] and "not 0" in unknown[1]
    assert "compute unknown" in res.output
    data = json.loads(invoke("inspect", str(threadless), "--json").output)
    assert data["tasks"]["compute_seconds"] is None
    assert [u["what"] for u in data["unknown"]] == ["thread ids", "compute time"]


def test_thread_and_io_questions_say_why_instead_of_answering_empty(
    threadless: Path, tmp_path: Path
) -> None:
    store = tmp_path / "s"
    assert invoke("load", str(threadless), "--store", str(store)).exit_code == 0
    for question in ("thread-utilisation", "file-access", "io-per-prefix"):
        res = invoke("query", question, "--store", str(store))
        assert res.exit_code == 0, res.output
        assert "(no results)" not in res.output
        assert "has no thread ids (scheduler_transition.csv and worker_transition.csv" in (
            res.output
        )
    res = invoke("query", "slowest-tasks", "--store", str(store), "-f", "json")
    assert json.loads(res.stdout) == []
    assert "has no compute windows" in res.stderr and "unknown, not 0" in res.stderr


def test_a_complete_run_gets_no_notes(example_store: Path) -> None:
    res = invoke("query", "thread-utilisation", "--store", str(example_store))
    assert res.exit_code == 0 and "note:" not in res.output


# --- 4: hints that point at something ---------------------------------------------------------
def test_drop_refusal_points_at_metaprov_drop(example_store: Path) -> None:
    res = invoke("query", "DROP GRAPH <http://x.org/g>", "--store", str(example_store))
    assert res.exit_code == 7
    assert "metaprov drop RUN_ID" in res.output


def test_load_of_an_unknown_suffix_leaves_no_store(tmp_path: Path) -> None:
    odd = tmp_path / "run.data"
    odd.write_text("<a:b> <a:c> <a:d> .\n")
    res = invoke("load", str(odd), "--store", str(tmp_path / "s"))
    assert res.exit_code == 3
    assert "give the format" not in res.output and "rename it" in res.output
    assert not (tmp_path / "s").exists()


def test_load_of_a_folder_of_runs_names_them_and_creates_nothing(tmp_path: Path) -> None:
    import shutil

    campaign = tmp_path / "campaign"
    for name in ("R1", "R2"):
        shutil.copytree(EXAMPLE, campaign / name)
    res = invoke("load", str(campaign), "--store", str(tmp_path / "s"))
    assert res.exit_code == 3
    assert "is a folder of 2 run directories" in res.output and "R1, R2" in res.output
    assert str(campaign / "*") in res.output
    assert not (tmp_path / "s").exists()
    (tmp_path / "empty").mkdir()
    res = invoke("query", "runs", "--store", str(tmp_path / "empty"))
    assert res.exit_code == 6 and "(no results)" not in res.output


# --- 5: inconsistencies -----------------------------------------------------------------------
def test_critical_path_takes_run_id_and_still_run(example_store: Path) -> None:
    a = invoke(
        "query",
        "critical-path",
        "--param",
        "run_id=3a11b3998b3a66d8",
        "--store",
        str(example_store),
        "-f",
        "csv",
    )
    b = invoke(
        "query",
        "critical-path",
        "--param",
        "run=3a11b3998b3a66d8",
        "--store",
        str(example_store),
        "-f",
        "csv",
    )
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert a.output == b.output and "('measure', 1)" in a.output


def test_provxml_suffix_and_export_json(tmp_path: Path) -> None:
    out = tmp_path / "run.provxml"
    res = invoke("export", str(EXAMPLE), "-o", str(out), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["format"] == "provxml" and data["triples"] > 1000
    assert out.read_bytes().startswith(b"<?xml")


def test_query_list_json(tmp_path: Path) -> None:
    res = invoke("query", "--list", "-f", "json")
    data = json.loads(res.output)
    by = {q["name"]: q for q in data}
    assert by["critical-path"]["params"][0]["name"] == "run_id"
    assert "threads" in by["thread-utilisation"]["needs"]


# --- 8: records -------------------------------------------------------------------------------
def test_records_parquet_equal_the_records(tmp_path: Path) -> None:
    from metaprov.export.records import record_tables

    out = tmp_path / "rec"
    res = invoke("records", str(EXAMPLE), "-o", str(out), "--json")
    assert res.exit_code == 0, res.output
    expected = record_tables(read_run(EXAMPLE))
    for name, df in expected.items():
        back = pd.read_parquet(out / f"{name}.parquet")
        pd.testing.assert_frame_equal(back, df, check_categorical=False)
    facts = json.loads((out / "run.json").read_text())
    assert facts["run_id"] == "3a11b3998b3a66d8"
    res = invoke("records", str(EXAMPLE), "-o", str(out))
    assert res.exit_code == 9 and "already exists and is not empty" in res.output
    assert "--force" in res.output
    before = (out / "run.json").stat().st_ino
    res = invoke("records", str(EXAMPLE), "-o", str(out), "--force", "-f", "csv")
    assert res.exit_code == 0, res.output
    assert (out / "tasks.csv").is_file() and not (out / "tasks.parquet").exists()
    assert (out / "run.json").stat().st_ino != before
    assert sorted(p.name for p in out.parent.iterdir()) == ["rec"]  # nothing left beside


def test_records_of_a_campaign_is_one_dataset_partitioned_by_run(tmp_path: Path) -> None:
    runs = [generate_run(tmp_path / "c" / f"r{i}", 40, seed=i) for i in range(2)]
    out = tmp_path / "rec"
    res = invoke("records", str(tmp_path / "c"), "-o", str(out), "-q")
    assert res.exit_code == 0, res.output
    tasks = pd.read_parquet(out / "tasks")
    ids = {read_run(r).run_id: len(read_run(r).tasks) for r in runs}
    assert tasks.groupby("run_id", observed=True).size().to_dict() == ids
    assert str(tasks["thread"].dtype) == "UInt64"
    csv = tmp_path / "csv"
    assert invoke("records", str(runs[0]), "-o", str(csv), "-f", "csv").exit_code == 0
    assert (csv / "tasks.csv").read_text().count("\n") == len(read_run(runs[0]).tasks) + 1


# --- 9: serve, drop, runs ---------------------------------------------------------------------
@pytest.mark.server
def test_serve_answers_sparql_over_http_on_localhost(example_store: Path) -> None:
    import requests

    from metaprov.store.serve import free_port

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "metaprov",
            "serve",
            "--store",
            str(example_store),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in first, first + proc.stderr.read()
        resp = requests.post(
            f"http://127.0.0.1:{port}/query",
            data={"query": "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"},
            headers={"Accept": "application/sparql-results+json"},
            timeout=30,
        )
        assert int(resp.json()["results"]["bindings"][0]["n"]["value"]) == 2526
        assert "Oxigraph" in requests.get(f"http://127.0.0.1:{port}/", timeout=30).text
        res = invoke("runs", "--endpoint", f"http://127.0.0.1:{port}/query", "-f", "json")
        assert json.loads(res.output)[0]["run_id"] == "3a11b3998b3a66d8"
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0


def test_serve_without_oxigraph_names_the_extra(
    example_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    res = invoke("serve", "--store", str(example_store))
    assert res.exit_code == 2 and "pip install 'metaprov[serve]'" in res.output


def test_drop_and_runs(tmp_path: Path) -> None:
    store = tmp_path / "s"
    run = generate_run(tmp_path / "r", 30, seed=1)
    assert invoke("load", str(EXAMPLE), str(run), "--store", str(store)).exit_code == 0
    listed = json.loads(invoke("runs", "--store", str(store), "-f", "json").output)
    assert len(listed) == 2
    res = invoke("drop", "nosuchrun", "--store", str(store))
    assert res.exit_code == 6 and "3a11b3998b3a66d8 (run)" in res.output
    res = invoke("drop", "3a11b3998b3a66d8", "--store", str(store), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)[0]["run_id"] == "3a11b3998b3a66d8"
    left = json.loads(invoke("runs", "--store", str(store), "-f", "json").output)
    assert [r["run_name"] for r in left] == ["r"]
    res = invoke("drop", "x", "--store", str(tmp_path / "none"))
    assert res.exit_code == 6 and not (tmp_path / "none").exists()


# --- 11: --json, completion ----------------------------------------------------------------------
def test_validate_and_load_json(tmp_path: Path) -> None:
    out = tmp_path / "run.provn"
    assert invoke("export", str(EXAMPLE), "-o", str(out), "-q").exit_code == 0
    res = invoke("validate", str(out), "--json")
    data = json.loads(res.output)
    assert data["counted"] == "records" and data["conforms"]
    assert "PROV-DM records" in invoke("validate", str(out)).output
    res = invoke("load", str(EXAMPLE), "--store", str(tmp_path / "s"), "--json", "-q")
    assert json.loads(res.output)[0]["triples"] == 2526


def test_shell_completion_offers_question_names() -> None:
    env = {
        **os.environ,
        "_METAPROV_COMPLETE": "bash_complete",
        "COMP_WORDS": "metaprov query thr",
        "COMP_CWORD": "2",
    }
    res = subprocess.run(
        [sys.executable, "-m", "metaprov"], env=env, capture_output=True, text=True, timeout=60
    )
    assert "plain,thread-utilisation" in res.stdout.splitlines()


@pytest.mark.realdata
def test_inspect_prints_the_partial_log_warning_once(shared_data: Path) -> None:
    run = shared_data / "darshan-dask-runs" / "mixed-metaprov"
    res = subprocess.run(
        [sys.executable, "-m", "metaprov", "inspect", str(run)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    both = res.stdout + res.stderr
    assert both.count("was not finalised by Darshan") == 1, both


@pytest.mark.realdata
def test_the_real_run_without_transitions_says_why(imageproc_r1: Path, tmp_path: Path) -> None:
    res = invoke("inspect", str(imageproc_r1), "--no-darshan")
    assert res.exit_code == 0, res.output
    assert "compute unknown" in res.output
    assert (
        "unknown    thread ids: scheduler_transition.csv and worker_transition.csv are missing"
        in (res.output)
    )
