"""metaprov inspect: exit codes, the text report, the JSON, re-read through the library."""

from __future__ import annotations

import json

from click.testing import CliRunner
from runfiles import tiny_files, write_run

import metaprov
from metaprov.cli import cli


def test_inspect_text(tmp_path):
    run = write_run(tmp_path / "run", tiny_files())
    result = CliRunner().invoke(cli, ["inspect", str(run)])
    assert result.exit_code == 0, result.output
    assert "tasks      2 (2 executed" in result.output
    assert "transfers  1 distinct" in result.output
    assert "duplicate" in result.output  # the re-sent transfer row is accounted


def test_inspect_json_matches_library(tmp_path):
    run = write_run(tmp_path / "run", tiny_files())
    result = CliRunner().invoke(cli, ["--quiet", "inspect", "--json", str(run)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    records = metaprov.read_run(run)
    assert data["run"]["run_id"] == records.run_id
    assert data["tasks"]["total"] == len(records.tasks)
    assert data["graphs"]["edges"] == len(records.dependencies)
    assert data["accounting"]["files"]["worker_transfer.csv"]["rows_used"] == 2
    assert data["run"]["first_event"].endswith("Z")


def test_inspect_missing_dir_is_an_error_not_a_traceback(tmp_path):
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "nope")])
    assert result.exit_code == 3
    assert "Error: " in result.output and "no such directory" in result.output
    assert "Traceback" not in result.output


def test_help_shows_an_example():
    result = CliRunner().invoke(cli, ["inspect", "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output and "metaprov inspect" in result.output


def test_python_dash_m(tmp_path):
    import subprocess
    import sys

    run = write_run(tmp_path / "run", tiny_files())
    out = subprocess.run(
        [sys.executable, "-m", "metaprov", "inspect", "--json", str(run)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["tasks"]["total"] == 2
