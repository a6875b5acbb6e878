"""A run's trace opened in a real viewer, offline: speedscope (npm registry) in headless Chromium
imports it as a Trace Event Format profile, one profile per track with slices, and lists every
execution of a thread by its key. Skipped, with the reason, without Chromium or npm (the package
is installed once into a cache directory: see tests/speedscope.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from speedscope import Unavailable, Viewer, install

from metaprov.ingest import read_run
from metaprov.mapping import to_prov
from metaprov.report.browser import Browser, BrowserUnavailable
from metaprov.write import write

pytestmark = pytest.mark.browser

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run"


@pytest.fixture(scope="module")
def viewer():
    try:
        app = install()
    except Unavailable as exc:
        pytest.skip(f"no speedscope: {exc}")
    try:
        browser = Browser(loopback=True)
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless browser: {exc}")
    v = Viewer(app, browser)
    yield v
    v.close()
    browser.close()


def test_speedscope_imports_the_example_trace(viewer: Viewer, tmp_path: Path) -> None:
    trace = tmp_path / "run.trace.json"
    write(to_prov(read_run(EXAMPLE)), trace)
    shown = viewer.open(trace)
    assert shown["errors"] == [], shown["errors"]
    assert "wrong" not in shown["body"]
    assert any("Trace Event Format" in e["message"] for e in shown["log"]), shown["log"]
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"}
    m = re.search(r"metaprov \(1/(\d+)\)", shown["body"])
    assert m and int(m.group(1)) == len(tracks), shown["body"][:300]
    # the first profile is the first thread of the first worker: all its executions by key
    first = min(tracks)
    keys = {e["name"] for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == first}
    text = viewer.sandwich()
    assert keys and all(k in text for k in keys), (sorted(keys)[:3], text[:500])
