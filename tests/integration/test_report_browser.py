"""The report in a real headless Chromium, offline: no console errors, sections, lanes, figures.

Needs Chromium and chromedriver (Debian: apt-get install chromium chromium-driver) and Selenium
(test extra); skipped with the reason when either is missing. One browser serves every test.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("bokeh", reason="the report needs the 'report' extra (Bokeh)")

from metaprov.ingest import read_run  # noqa: E402
from metaprov.report import write_report  # noqa: E402
from metaprov.report.browser import Browser, BrowserUnavailable  # noqa: E402

pytestmark = pytest.mark.browser

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run"
SECTIONS = ["summary", "stream", "prefixes", "transfers", "io", "graphs"]


@pytest.fixture(scope="module")
def browser():
    try:
        b = Browser()
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless browser: {exc}")
    yield b
    b.close()


def _look(browser: Browser, html: Path, shots: Path) -> dict:
    """Open the page; check what every report must show; screenshot each section."""
    browser.open(html)
    assert browser.errors() == []
    facts = browser.facts()
    assert browser.sections() == facts["sections"]
    figures = browser.js("return document.querySelectorAll('div.mp-figure').length")
    assert browser.rendered_roots() == figures > 0
    paths = browser.screenshot_sections(shots)
    assert [p.stem for p in paths] == facts["sections"]
    assert all(p.stat().st_size > 2000 for p in paths)  # drawn, not blank
    return facts


def _stream_lanes(browser: Browser, name: str = "task-stream") -> int:
    return browser.js(
        "const f = Bokeh.documents[0].get_model_by_name(arguments[0]);"
        "return f.left[0].ticker.ticks.length",
        name,
    )


def test_example_report_in_chromium(browser, tmp_path):
    res = write_report([EXAMPLE], tmp_path / "example.html")
    facts = _look(browser, res.path, tmp_path / "shots")
    assert facts["sections"] == SECTIONS
    run = facts["runs"][0]
    records = read_run(EXAMPLE)
    # lanes on the page: one per worker thread that ran a task, one per receiving worker
    assert _stream_lanes(browser) == run["lanes"]["total"] == 4 + 2
    assert browser.text('td[data-field="tasks"]') == f"{len(records.tasks):,}"
    assert browser.text('td[data-field="executions"]') == f"{len(records.executions):,}"
    assert "4 worker-thread lanes, 2 transfer lanes" in browser.text("#stream")
    # the per-prefix table shows the records' counts
    rows = browser.js(
        "return [...document.querySelectorAll('table[data-table=prefixes] tbody tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )
    counts = records.tasks["prefix"].value_counts()
    assert {r[0]: int(r[1]) for r in rows} == {k: int(v) for k, v in counts.items()}
    assert "Critical path: 4 tasks" in browser.text("#graphs")


@pytest.mark.realdata
def test_real_run_with_darshan_in_chromium(browser, tmp_path, pmda_r1):
    res = write_report([pmda_r1], tmp_path / "pmda.html")
    facts = _look(browser, res.path, tmp_path / "shots")
    run = facts["runs"][0]
    records = read_run(pmda_r1)
    assert run["lanes"]["io"] > 0 and run["task_stream"]["io_bars"] > 0
    assert _stream_lanes(browser) == run["lanes"]["total"]
    seg = records.darshan.segments
    assert run["io"]["segments"] == len(seg)
    assert run["io"]["bytes_read"] == int(seg.loc[seg["op"] == "read", "length"].sum())
    text = browser.text("#summary")
    assert f"{len(seg):,} segments" in text
    assert f"{run['io']['bytes_read']:,} bytes" in text


@pytest.mark.realdata
def test_comparison_page_in_chromium(browser, tmp_path, pmda_r1, imageproc_r1):
    res = write_report([pmda_r1, imageproc_r1], tmp_path / "compare.html")
    facts = _look(browser, res.path, tmp_path / "shots")
    assert facts["sections"][0] == "compare"
    rows = browser.js(
        "return [...document.querySelectorAll('table[data-table=compare-runs] tbody tr')]"
        ".map(r => r.cells[4].textContent)"
    )
    assert rows == [f"{r['tasks']['total']:,}" for r in facts["runs"]]


def test_the_browser_leaves_nothing_in_the_temporary_directory(tmp_path, monkeypatch, request):
    # Chromium writes its singleton socket into $TMPDIR on every start and leaves it there;
    # Browser gives it a directory of its own and removes it on close.
    # a short path of its own (Chromium's socket path must stay under ~100 characters)
    tmp = Path(tempfile.mkdtemp(prefix="mp-"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", None)
    page = tmp_path / "page.html"
    page.write_text("<html><body><p>hello</p></body></html>", encoding="utf-8")
    try:
        b = Browser()
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless browser: {exc}")
    with b:
        b.open(page)
        assert b.text("p") == "hello"
    assert list(tmp.iterdir()) == []
