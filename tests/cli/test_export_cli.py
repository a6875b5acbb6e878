"""`metaprov export` and `metaprov validate`: exit codes, messages, then the output re-read."""

from __future__ import annotations

from pathlib import Path

import pyoxigraph as ox
import pytest
from click.testing import CliRunner
from conftest import PMDA_RUNS

from metaprov.cli import cli
from metaprov.validate import validate

pytestmark = pytest.mark.realdata


@pytest.fixture(scope="module")
def run_dir() -> Path:
    if not PMDA_RUNS:
        pytest.skip("real run data not found (../shared/data)")
    return PMDA_RUNS[0]


def invoke(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_export_turtle_then_reread(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r1.ttl"
    result = invoke("export", str(run_dir), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "triples (turtle)" in result.stderr
    triples = list(ox.parse(path=str(out), format=ox.RdfFormat.TURTLE))
    assert len(triples) > 100
    assert validate(out).conforms


def test_export_format_option_base_and_detail(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r1.data"
    result = invoke(
        "export",
        str(run_dir),
        "-o",
        str(out),
        "-f",
        "nq",
        "--base",
        "https://example.org/prov",
        "--detail",
        "transitions",
        "--no-darshan",
    )
    assert result.exit_code == 0, result.output
    quads = list(ox.parse(path=str(out), format=ox.RdfFormat.N_QUADS))
    assert all(q.graph_name.value.startswith("https://example.org/prov/run/") for q in quads)
    assert any(q.object.value.endswith("#Transition") for q in quads)


def test_export_quiet_prints_nothing(run_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--quiet", "export", str(run_dir), "-o", str(tmp_path / "r.nt")]
    )
    assert result.exit_code == 0
    assert result.stderr == ""


def test_unknown_format_lists_valid_names_before_reading(tmp_path: Path) -> None:
    # The run does not even exist: the format error comes first.
    result = CliRunner().invoke(
        cli, ["export", str(tmp_path / "no-run"), "-o", str(tmp_path / "x.ttl"), "-f", "turtel"]
    )
    assert result.exit_code == 4
    assert "Error: unknown format 'turtel'" in result.stderr
    for name in (
        "turtle",
        "ntriples",
        "nquads",
        "trig",
        "json-ld",
        "rdf-xml",
        "provn",
        "provjson",
        "provxml",
    ):
        assert name in result.stderr
    result = CliRunner().invoke(cli, ["export", str(tmp_path), "-o", str(tmp_path / "x.unknown")])
    assert result.exit_code == 4
    assert "-f/--format" in result.stderr


def test_missing_run_is_an_input_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["export", str(tmp_path / "nope"), "-o", str(tmp_path / "x.ttl")]
    )
    assert result.exit_code == 3
    assert result.stderr.startswith("Error: ")
    assert not (tmp_path / "x.ttl").exists()


def test_validate_ok_and_broken(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r1.nt"
    assert invoke("export", str(run_dir), "-o", str(out)).exit_code == 0
    ok = CliRunner().invoke(cli, ["validate", str(out)])
    assert ok.exit_code == 0
    assert "Result: conforms" in ok.stdout
    lines = out.read_text().splitlines(keepends=True)
    broken = tmp_path / "broken.nt"
    broken.write_text(
        "".join(
            ln for ln in lines if "/execution/0> <http://www.w3.org/ns/prov#endedAtTime>" not in ln
        )
    )
    bad = CliRunner().invoke(cli, ["validate", str(broken)])
    assert bad.exit_code == 5
    assert "does NOT conform" in bad.stdout
    assert "a task execution has a start and an end" in bad.stdout
    assert "Error: " in bad.stderr
    js = CliRunner().invoke(cli, ["validate", str(broken), "--json", "--engine", "sparql"])
    assert js.exit_code == 5
    assert '"conforms": false' in js.stdout


def test_validate_a_run_directory(run_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", str(run_dir)])
    assert result.exit_code == 0, result.output


def test_help_shows_examples() -> None:
    for cmd in ("export", "validate"):
        result = CliRunner().invoke(cli, [cmd, "--help"])
        assert result.exit_code == 0
        assert "Example:" in result.stdout
    text = CliRunner().invoke(cli, ["export", "--help"]).stdout
    assert "200,000" not in text  # no size limit since issue 39
    assert "run.trace.json" in text and "run.provn" in text


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run"


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_is_accepted_before_or_after_the_command(tmp_path: Path, where: str) -> None:
    """`metaprov -q export ...` and `metaprov export ... -q` both silence the summary line."""
    out = tmp_path / "r.ttl"
    args = ["export", str(EXAMPLE), "-o", str(out), "--no-darshan"]
    loud = CliRunner().invoke(cli, args)
    assert loud.exit_code == 0 and "triples" in loud.stderr + loud.stdout
    args.append("--force")  # the second export replaces the first
    quiet = ["-q", *args] if where == "before" else [*args, "--quiet"]
    result = CliRunner().invoke(cli, quiet)
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and result.stderr == ""
    assert out.stat().st_size > 0
    # load's report is its answer (stdout); --quiet after the command still hides the rest
    store = tmp_path / "store"
    loaded = CliRunner().invoke(cli, ["load", str(EXAMPLE), "--store", str(store), "-q"])
    assert loaded.exit_code == 0 and loaded.stderr == "", loaded.output
    assert loaded.stdout == ""  # -q: the per-run lines are informational
