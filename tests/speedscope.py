"""speedscope (https://www.speedscope.app, from the npm registry) in a real headless Chromium:
the viewer the trace tests open metaprov's Trace Event Format files in, offline.

``install()`` runs ``npm install speedscope@VERSION`` once into a cache directory
(``$METAPROV_SPEEDSCOPE_DIR``, else ``~/.cache/metaprov/speedscope-VERSION``) and returns its
built static app; ``Viewer`` serves that app and one trace from 127.0.0.1 (a free port) and opens
``index.html#profileURL=/<trace>`` in :class:`metaprov.report.browser.Browser`.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

VERSION = "1.25.0"


class Unavailable(Exception):
    """No npm, or the package could not be installed (offline): the reason, for a skip."""


def install() -> Path:
    """The directory of speedscope's built app (``index.html``), installed on first use."""
    root = Path(
        os.environ.get("METAPROV_SPEEDSCOPE_DIR")
        or Path.home() / ".cache" / "metaprov" / f"speedscope-{VERSION}"
    )
    app = root / "node_modules" / "speedscope" / "dist" / "release"
    if (app / "index.html").is_file():
        return app
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed (Debian: apt-get install npm)")
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(root), f"speedscope@{VERSION}"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 or not (app / "index.html").is_file():
        raise Unavailable(f"npm install speedscope@{VERSION} failed: {proc.stderr.strip()[-300:]}")
    return app


class Viewer:
    """speedscope and one trace served from 127.0.0.1, opened in a headless Chromium."""

    def __init__(self, app: Path, browser: Any) -> None:
        self.site = Path(tempfile.mkdtemp(prefix="metaprov-speedscope-"))
        shutil.copytree(app, self.site, dirs_exist_ok=True)
        handler = functools.partial(_Quiet, directory=str(self.site))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.browser = browser

    def open(self, trace: Path, timeout: float = 120.0) -> dict[str, Any]:
        """Load ``trace`` in speedscope; returns what it shows once imported: the page title,
        the profile selector (``name (1/N)``), the body text, the console's errors and the
        seconds it took."""
        shutil.copy(trace, self.site / "trace.json")
        port = self.server.server_address[1]
        driver = self.browser.driver
        t = time.perf_counter()
        driver.get(f"http://127.0.0.1:{port}/index.html#profileURL=/trace.json&title=metaprov")
        body = ""
        while time.perf_counter() - t < timeout:
            body = driver.execute_script("return document.body.innerText") or ""
            if "metaprov (" in body or "wrong" in body or "rror" in body:
                break
            time.sleep(0.2)
        seconds = time.perf_counter() - t
        logs = driver.get_log("browser")
        return {
            "title": driver.title,
            "body": body,
            "seconds": seconds,
            "errors": [e for e in logs if e.get("level") == "SEVERE"],
            "log": logs,
        }

    def sandwich(self) -> str:
        """The text of the Sandwich view (a table of every frame of the profile shown)."""
        from selenium.webdriver.common.by import By

        driver = self.browser.driver
        driver.find_elements(By.XPATH, "//*[contains(text(),'Sandwich')]")[-1].click()
        t = time.perf_counter()
        text = ""
        while time.perf_counter() - t < 30:
            text = driver.execute_script("return document.body.innerText") or ""
            if "Symbol Name" in text:
                break
            time.sleep(0.2)
        return text

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.site, ignore_errors=True)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass
