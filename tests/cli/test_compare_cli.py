"""metaprov compare: exit codes, messages, --json, -o, --baseline, a store, runs without transitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from metaprov.analysis.compare import CAUSES
from metaprov.cli import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Synthetic runs of one workflow (seeds 1-3), one without worker transitions or threads."""
    from metaprov.synthetic import generate_run

    root = tmp_path_factory.mktemp("compare")
    out = {}
    for seed in (1, 2, 3):
        out[f"s{seed}"] = generate_run(root / f"s{seed}", 100, seed=seed, workers=2, threads=2)
    out["bare"] = generate_run(
        root / "bare", 100, seed=1, workers=2, threads=2, with_worker_transitions=False
    )
    return out


def _run(*args: str):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


def test_text_answer_ends_with_the_explanation(runs) -> None:
    r = _run(runs["s1"], runs["s2"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].startswith("baseline  s1: ")
    assert "causes (seconds add up to the difference" in r.output
    last = [x for x in r.output.splitlines() if x.startswith("s2 took ")]
    assert last, r.output


def test_json(runs) -> None:
    r = _run(runs["s1"], runs["s2"], "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["baseline"] == "s1" and d["other"] == "s2"
    assert sum(c["seconds"] for c in d["causes"]) == pytest.approx(d["difference_s"], abs=1e-6)
    assert all(c["cause"] in CAUSES for c in d["causes"])
    m = d["alignment"]["matched"]
    matched = m["key"] + m["index"] + m["prefix"]
    assert matched > 0 and matched + m["baseline_only"] == d["runs"][0]["tasks"]


def test_campaign_against_the_median(runs, tmp_path) -> None:
    out = tmp_path / "c.html"
    r = _run(runs["s1"], runs["s2"], runs["s3"], "--baseline", "median", "--json", "-o", out)
    assert r.exit_code == 0, r.output
    d = json.loads(r.output[r.output.index("{") :])
    assert len(d["runs"]) == 3 and len(d["comparisons"]) == 2
    assert {x["run"] for x in d["runs"]} == {"s1", "s2", "s3"}
    assert out.is_file() and "compare-campaign" in out.read_text()


def test_runs_without_transitions_say_what_was_not_attributed(runs) -> None:
    r = _run(runs["s1"], runs["bare"], "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert sum(c["seconds"] for c in d["causes"]) == pytest.approx(d["difference_s"], abs=1e-6)
    assert any("waiting and transfers are not attributed" in n for n in d["notes"])


def test_errors(runs, tmp_path) -> None:
    r = _run(runs["s1"])
    assert r.exit_code == 2 and "two runs or more" in r.output
    r = _run(runs["s1"], runs["s2"], "--baseline", "nope")
    assert r.exit_code == 2 and "no run 'nope'" in r.output
    r = _run(runs["s1"], tmp_path / "missing")
    assert r.exit_code == 3 and "Error: " in r.output
    r = _run(runs["s1"], EXAMPLE)  # another workflow: nothing in common
    assert r.exit_code == 3 and "no task prefix in common" in r.output
    assert "Traceback" not in r.output


def test_from_a_store(runs, tmp_path) -> None:
    from metaprov.store import load

    # with the transitions, the store knows when the scheduler handed each task out (the
    # scheduler cause), as the run directories do
    load([runs["s1"], runs["s2"]], store=tmp_path / "store", detail="transitions")
    a = json.loads(_run(runs["s1"], runs["s2"], "--json").output)
    b = _run("--store", tmp_path / "store", "s1", "s2", "--json")
    assert b.exit_code == 0, b.output
    b = json.loads(b.output)
    assert b["difference_s"] == pytest.approx(a["difference_s"], abs=1e-9)
    assert [c["cause"] for c in b["causes"]] == [c["cause"] for c in a["causes"]]
    assert [c["seconds"] for c in b["causes"]] == pytest.approx(
        [c["seconds"] for c in a["causes"]], abs=1e-9
    )
    r = _run("--store", tmp_path / "store", "s1", "nope")
    assert r.exit_code == 7 and "no run 'nope'" in r.output


def test_help_has_an_example() -> None:
    r = CliRunner().invoke(cli, ["compare", "--help"])
    assert r.exit_code == 0 and "Example:" in r.output and "--baseline" in r.output
