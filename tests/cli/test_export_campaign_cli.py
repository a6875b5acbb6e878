"""`metaprov export DIR -o OUTDIR -f nq` (a campaign) and `metaprov load OUTDIR` (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from metaprov.cli import cli
from metaprov.store import open_store
from metaprov.synthetic import generate_run


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("campaign")
    generate_run(root / "R1", 120, seed=1)
    generate_run(root / "R2", 80, seed=2)
    return root


def test_campaign_export_then_load_and_campaign_questions(tmp_path: Path, campaign: Path) -> None:
    out = tmp_path / "out"
    res = invoke("export", str(campaign), "-o", str(out), "-f", "nq", "--backend", "in-process")
    assert res.exit_code == 0, res.output
    assert "backend: in-process" in res.stderr and "2 of 2 runs converted" in res.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["status"] for e in manifest["runs"]] == ["ok", "ok"]
    store = tmp_path / "store"
    res = invoke("load", str(out), "--store", str(store), "--json")
    assert res.exit_code == 0, res.output
    reports = json.loads(res.stdout)
    assert sorted(r["graph"] for r in reports) == sorted(e["graph_iri"] for e in manifest["runs"])
    with open_store(store, read_only=True) as st:
        assert st.count() == sum(e["triples"] for e in manifest["runs"])
    res = invoke("query", "runs", "--store", str(store), "-f", "json")
    assert res.exit_code == 0 and len(json.loads(res.stdout)) == 2
    res = invoke("query", "prefix-across-runs", "--store", str(store), "-f", "json")
    rows = json.loads(res.stdout)
    assert res.exit_code == 0 and {r["runs"] for r in rows} == {2}
    # loading the manifest file again replaces each run's graph (no duplicates)
    res = invoke("load", str(out / "manifest.json"), "--store", str(store))
    assert res.exit_code == 0, res.output
    with open_store(store, read_only=True) as st:
        assert st.count() == sum(e["triples"] for e in manifest["runs"])
    res = invoke(
        "export",
        str(campaign),
        "-o",
        str(out),
        "-f",
        "nq",
        "-q",
        "--backend",
        "in-process",
    )
    assert res.exit_code == 0 and res.stderr == ""
    assert all(e["reused"] for e in json.loads((out / "manifest.json").read_text())["runs"])


def test_campaign_errors_have_exit_codes(tmp_path: Path, campaign: Path) -> None:
    res = invoke("export", str(campaign), "-o", str(tmp_path / "o"), "-f", "ttl")
    assert res.exit_code == 2 and "N-Quads" in res.stderr
    bad = tmp_path / "camp"
    generate_run(bad / "ok", 50, seed=3)
    (bad / "broken").mkdir()
    (bad / "broken" / "graph.csv").write_bytes(b"\xff\xfe\n")
    res = invoke("export", str(bad), "-o", str(tmp_path / "o2"), "--backend", "in-process")
    assert res.exit_code == 10
    assert (
        res.stderr.startswith("backend: in-process") and "Error: 1 of 2 runs failed" in res.stderr
    )
    assert "broken" in res.stderr and (tmp_path / "o2" / "manifest.json").is_file()
    (tmp_path / "not-a-manifest.json").write_text("{}")
    res = invoke("load", str(tmp_path / "not-a-manifest.json"), "--store", str(tmp_path / "s"))
    assert res.exit_code == 3 and "not a metaprov campaign manifest" in res.stderr
