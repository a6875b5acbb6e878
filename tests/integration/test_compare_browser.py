"""The comparison page (metaprov compare -o) in a real headless Chromium, offline.

Needs Chromium and chromedriver and Selenium (test extra); skipped with the reason when missing.
The page must draw every figure without a console error and carry the same answer as --json.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DARSHAN_DASK_RUNS, SKIP_REASON

pytest.importorskip("bokeh", reason="the page needs the 'report' extra (Bokeh)")

from metaprov.compare import compare  # noqa: E402
from metaprov.compare.page import write_page  # noqa: E402
from metaprov.report.browser import Browser, BrowserUnavailable  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.realdata]


@pytest.fixture(scope="module")
def browser():
    try:
        b = Browser()
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless browser: {exc}")
    yield b
    b.close()


def test_compare_page_in_chromium(browser, tmp_path: Path) -> None:
    if not DARSHAN_DASK_RUNS.is_dir():
        pytest.skip(SKIP_REASON)
    c = compare([DARSHAN_DASK_RUNS / "mixed-mofka", DARSHAN_DASK_RUNS / "mixed-metaprov"])
    html = write_page(c, tmp_path / "compare.html")
    browser.open(html)
    assert browser.errors() == []
    facts = browser.facts()
    assert facts["comparison"]["difference_s"] == pytest.approx(c.pair.difference_s)
    assert [r["cause"] for r in facts["comparison"]["causes"]] == list(c.pair.causes["cause"])
    figures = browser.js("return document.querySelectorAll('div.mp-figure').length")
    assert figures == 2 and browser.rendered_roots() == figures  # waterfall and task streams
    # the stream has the lanes of both runs: the baseline's threads, then the other's
    lanes = browser.js(
        "return Bokeh.documents[0].get_model_by_name('pair-1-streams') ? 0 : "
        "[...Bokeh.documents].map(d => d.get_model_by_name('compare-streams'))"
        ".filter(Boolean)[0].y_range.factors"
    )
    assert any(x.startswith("baseline mixed-mofka") for x in lanes)
    assert any(x.startswith("other mixed-metaprov") for x in lanes)
    text = browser.text("[data-field=explanation]")
    assert text.startswith("mixed-metaprov took 0.338 s longer than mixed-mofka")
    shots = browser.screenshot_sections(tmp_path / "shots")
    assert [p.stem for p in shots] == ["pair-1"] and shots[0].stat().st_size > 20_000
