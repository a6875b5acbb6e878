"""Screenshots of the bundled example's report for docs/report.md (made with the project's tooling).

Builds the report of ``examples/run`` with :func:`metaprov.report.report`, opens it in headless
Chromium (offline) through :class:`metaprov.report.browser.Browser`, the same path the tests use,
and writes one PNG per section to ``docs/img/report/``. The example has no Darshan logs, so the I/O
section is also shot from a small synthetic run with I/O (``metaprov.synthetic``, 2,000 tasks),
and the comparison page of a store from two synthetic runs of one workflow loaded into an
embedded store (``metaprov.store.load``, then :func:`metaprov.report.write_store_report`).

Example::

    python docs/report_screenshots.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

from metaprov.report import write_report, write_store_report  # noqa: E402
from metaprov.report.browser import Browser  # noqa: E402
from metaprov.store import load  # noqa: E402
from metaprov.synthetic import generate_run  # noqa: E402


def _shrink(path: Path, max_height: int = 1400) -> None:
    """Keep the docs small: at most ``max_height`` pixels tall, 256 colours (Pillow, Bokeh's own)."""
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB")
        if im.height > max_height:
            im = im.crop((0, 0, im.width, max_height))
        im.quantize(colors=256).save(path, optimize=True)


def main() -> int:
    out = DOCS / "img" / "report"
    with tempfile.TemporaryDirectory() as tmp, Browser(width=1200) as browser:
        os.chdir(DOCS.parent)  # the page shows the run's path as given: examples/run
        res = write_report(["examples/run"], Path(tmp) / "report.html")
        browser.open(res.path)
        if browser.errors():
            print(f"console errors: {browser.errors()}", file=sys.stderr)
            return 1
        shots = browser.screenshot_sections(out)
        generate_run(Path(tmp) / "synthetic", 2000, seed=1, io_fraction=0.1, io_files=8)
        os.chdir(tmp)
        res = write_report(["synthetic"], Path(tmp) / "synthetic.html")
        os.chdir(DOCS.parent)
        browser.open(res.path)
        if browser.errors():
            print(f"console errors: {browser.errors()}", file=sys.stderr)
            return 1
        with tempfile.TemporaryDirectory() as more:
            for p in browser.screenshot_sections(more):
                if p.stem in ("io", "stream"):
                    shots.append(Path(shutil.move(p, out / f"{p.stem}-synthetic.png")))
        os.chdir(tmp)  # the page names the store as given: store
        runs = []
        for seed in (1, 2):
            runs.append(f"run-{seed}")
            generate_run(Path(tmp) / runs[-1], 300, seed=seed)
        load(runs, store="store")
        res = write_store_report(Path(tmp) / "store.html", store="store")
        os.chdir(DOCS.parent)
        browser.open(res.path)
        if browser.errors():
            print(f"console errors: {browser.errors()}", file=sys.stderr)
            return 1
        shots += browser.screenshot_sections(out)
        for p in shots:
            _shrink(p)
            print(f"{p.relative_to(DOCS.parent)}: {p.stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
