"""The comparison page of a store or a campaign export: its figures are the store's answers.

Two small synthetic runs of the same workflow are loaded into an embedded store (and exported as
a campaign, in-process); the page must show what ``metaprov query`` answers, row for row, open in
a real headless Chromium without console errors, and refuse bad input with the documented codes.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

pytest.importorskip("bokeh", reason="the report needs the 'report' extra (Bokeh)")

from metaprov.cli import cli  # noqa: E402
from metaprov.errors import InputError  # noqa: E402
from metaprov.queries import query  # noqa: E402
from metaprov.report import read_facts, write_report, write_store_report  # noqa: E402
from metaprov.store import load  # noqa: E402


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> dict[str, Path]:
    """Two runs (same workflow, different seeds), their store, their campaign export."""
    from metaprov.export.campaign import export_campaign
    from metaprov.synthetic import generate_run

    root = tmp_path_factory.mktemp("campaign")
    runs = []
    for seed in (1, 2):
        runs.append(root / "runs" / f"run-{seed}")
        generate_run(runs[-1], 150, seed=seed)
    load(runs, store=root / "store")
    export_campaign(runs, root / "export", backend="in-process")
    return {"runs": root / "runs", "store": root / "store", "export": root / "export"}


def _rows(df: pd.DataFrame, columns: list[str]) -> list[tuple]:
    out = []
    for rec in df[columns].itertuples(index=False):
        out.append(tuple(None if pd.isna(v) else v for v in rec))
    return out


def test_page_shows_the_stores_answers(campaign, tmp_path):
    res = write_store_report(tmp_path / "store.html", store=campaign["store"])
    facts = read_facts(res.path)
    assert facts == res.facts
    assert facts["sections"] == ["store-runs", "store-why", "store-prefixes"]
    page = facts["store"]
    runs = query("runs", store=campaign["store"])
    assert [r["run_id"] for r in page["runs"]] == list(runs["run_id"])
    for col in ("tasks", "executions", "workers", "transfers"):
        assert [r[col] for r in page["runs"]] == [int(x) for x in runs[col]], col
    assert [r["seconds"] for r in page["runs"]] == pytest.approx(list(runs["seconds"]))
    assert [r["start"] for r in page["runs"]] == [
        t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for t in runs["start"]
    ]
    assert [r["tasks"] for r in page["runs"]] == [150, 150]
    # the same prefix across runs: the question's rows, with prefix-summary's totals
    across = query("prefix-across-runs", store=campaign["store"])
    cols = ["prefix", "run_id", "executions", "mean", "min", "max", "deviation"]
    got = [tuple(r[c] for c in cols) for r in page["prefixes"]]
    assert sorted(got) == sorted(_rows(across, cols))
    totals = query("prefix-summary", store=campaign["store"]).set_index(["run_id", "prefix"])
    for r in page["prefixes"]:
        assert r["total"] == pytest.approx(totals.loc[(r["run_id"], r["prefix"]), "total"])
    # which run was slowest for each prefix run in both: the largest mean, counted here
    both = across[across.groupby("prefix")["run_id"].transform("size") == 2]
    assert 0 < both["prefix"].nunique() < across["prefix"].nunique()
    means = both.groupby("prefix")["mean"].idxmax()
    label = {r["run_id"]: r["label"] for r in page["runs"]}
    want = {p: label[across.loc[i, "run_id"]] for p, i in means.items()}
    assert {s["prefix"]: s["label"] for s in page["slowest"]} == want
    # the page says it in its tables
    html = res.path.read_text(encoding="utf-8")
    assert 'data-table="store-runs"' in html and 'data-table="store-slowest"' in html


def test_campaign_export_gives_the_same_page_as_its_store(campaign, tmp_path):
    res = write_report([campaign["export"] / "manifest.json"], tmp_path / "c.html")
    want = write_store_report(tmp_path / "s.html", store=campaign["store"]).facts["store"]
    got = res.facts["store"]
    assert got["location"] == str(campaign["export"] / "manifest.json")
    for part in ("runs", "prefixes", "slowest"):
        assert got[part] == want[part], part


def test_one_run_of_the_store_and_an_unknown_one(campaign, tmp_path):
    res = write_store_report(tmp_path / "one.html", store=campaign["store"], runs=["run-2"])
    assert [r["run_name"] for r in res.facts["store"]["runs"]] == ["run-2"]
    with pytest.raises(InputError, match="holds no run nope"):
        write_store_report(tmp_path / "x.html", store=campaign["store"], runs=["nope"])
    assert not (tmp_path / "x.html").exists()


def test_cli_store_page_and_errors(campaign, tmp_path):
    out = tmp_path / "cli.html"
    r = CliRunner().invoke(cli, ["report", "--store", str(campaign["store"]), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "2 run(s)" in r.output
    assert sorted(x["run_name"] for x in read_facts(out)["store"]["runs"]) == ["run-1", "run-2"]
    r = CliRunner().invoke(
        cli, ["report", str(campaign["export"]), "--run", "run-1", "-o", str(out), "--force"]
    )
    assert r.exit_code == 0, r.output
    assert [x["run_name"] for x in read_facts(out)["store"]["runs"]] == ["run-1"]
    # runs and a store together; nothing at all; a store that is not there; runs and a campaign
    bad = [
        (["report", str(campaign["runs"] / "run-1"), "--store", str(campaign["store"])], 2),
        (["report"], 2),
        (["report", "--store", str(tmp_path / "none")], 6),
        (["report", str(campaign["runs"] / "run-1"), str(campaign["export"])], 3),
    ]
    for args, code in bad:
        res = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "bad.html")])
        assert res.exit_code == code, (args, res.output)
        assert res.output.startswith("Error: ") and "Traceback" not in res.output
    assert not (tmp_path / "bad.html").exists()


@pytest.mark.browser
def test_store_page_in_chromium(campaign, tmp_path):
    from metaprov.report.browser import Browser, BrowserUnavailable

    res = write_store_report(tmp_path / "store.html", store=campaign["store"])
    try:
        browser = Browser()
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless browser: {exc}")
    with browser:
        browser.open(res.path)
        assert browser.errors() == []
        assert browser.sections() == res.facts["sections"]
        figures = browser.js("return document.querySelectorAll('div.mp-figure').length")
        assert browser.rendered_roots() == figures == 3  # spans, why runs differ, prefixes
        cells = browser.js(
            "return [...document.querySelectorAll('table[data-table=store-runs] tbody tr')]"
            ".map(r => r.cells[6].textContent)"
        )
        assert cells == [f"{r['tasks']:,}" for r in res.facts["store"]["runs"]]
        shots = browser.screenshot_sections(tmp_path / "shots")
        assert [p.stem for p in shots] == res.facts["sections"]


def test_why_runs_differ_as_compare_on_the_run_directories(campaign, tmp_path):
    """The page's 'Why runs differ' (from the store) equals metaprov compare on the run dirs."""
    from metaprov.compare import compare

    res = write_store_report(tmp_path / "why.html", store=campaign["store"])
    why = res.facts["store"]["why"]
    c = compare(sorted(campaign["runs"].iterdir()), baseline="median")
    assert why["baseline"] == c.baseline
    got = {r["run"]: (r["difference_s"], r["top_cause"]) for r in why["runs"]}
    want = dict(
        zip(
            c.runs["run"],
            zip(c.runs["difference_s"], c.runs["top_cause"], strict=True),
            strict=True,
        )
    )
    assert got.keys() == want.keys() == {"run-1", "run-2"}
    for run, (d, top) in want.items():
        assert got[run][0] == pytest.approx(d, abs=1e-9) and got[run][1] == top
    assert 'data-table="store-why"' in res.path.read_text()
