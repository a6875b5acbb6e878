"""metaprov report: exit codes, messages, the file re-read through the library."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("bokeh", reason="the report needs the 'report' extra (Bokeh)")

import metaprov  # noqa: E402
from metaprov.cli import cli  # noqa: E402
from metaprov.report import read_facts  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run"


def test_report_writes_one_file(tmp_path):
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", str(EXAMPLE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output
    facts = read_facts(out)
    records = metaprov.read_run(EXAMPLE)
    assert facts["runs"][0]["run_id"] == records.run_id
    assert facts["runs"][0]["tasks"]["total"] == len(records.tasks)
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left


def test_quiet_prints_nothing(tmp_path):
    result = CliRunner().invoke(cli, ["report", str(EXAMPLE), "-o", str(tmp_path / "r.html"), "-q"])
    assert result.exit_code == 0 and result.output == ""


def test_missing_run_is_an_error_and_writes_nothing(tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "nope"), "-o", str(out)])
    assert result.exit_code == 3
    assert "Error: " in result.output and "no such directory" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_output_directory_is_refused(tmp_path):
    result = CliRunner().invoke(cli, ["report", str(EXAMPLE), "-o", str(tmp_path)])
    assert result.exit_code != 0 and "Traceback" not in result.output


def test_help_shows_an_example():
    result = CliRunner().invoke(cli, ["report", "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output and "metaprov report" in result.output


def test_inspect_mentions_the_report():
    result = CliRunner().invoke(cli, ["inspect", str(EXAMPLE)])
    assert result.exit_code == 0
    assert "metaprov report" in result.output
