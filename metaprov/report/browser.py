"""Open a report in a real headless Chromium, offline, and look at it (tests and docs screenshots).

Input: a report's HTML file. Output: what the browser saw: console messages, the facts embedded in
the page, rendered Bokeh roots, section screenshots (PNG).

Uses the system's Chromium and its driver (Debian: ``apt-get install chromium chromium-driver``)
through Selenium (``pip install selenium``; in the ``test`` extra). The browser is told to stay
offline (no network at all, and a proxy that goes nowhere), so a report that tried to fetch
anything would fail to draw.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from metaprov.errors import MetaprovError

__all__ = ["Browser", "BrowserUnavailable", "find_chromium"]

_BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_DRIVERS = ("chromedriver",)


class BrowserUnavailable(MetaprovError):
    """No Chromium, no chromedriver or no Selenium here (the message says which)."""


def find_chromium() -> tuple[str, str]:
    """Paths of a Chromium binary and its chromedriver ($CHROMIUM / $CHROMEDRIVER first).

    Raises:
        BrowserUnavailable: either is missing, or Selenium is not installed.
    """
    try:
        import selenium  # noqa: F401
    except ImportError as exc:
        raise BrowserUnavailable(
            "Selenium is not installed", hint="pip install 'metaprov[test]' (or selenium)"
        ) from exc
    binary = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, _BINARIES)), None)
    driver = os.environ.get("CHROMEDRIVER") or next(filter(None, map(shutil.which, _DRIVERS)), None)
    if not binary or not driver:
        missing = " and ".join(
            n for n, p in (("chromium", binary), ("chromedriver", driver)) if not p
        )
        raise BrowserUnavailable(
            f"no {missing} found on PATH",
            hint="Debian/Ubuntu: apt-get install -y chromium chromium-driver",
        )
    return binary, driver


class Browser:
    """A headless, offline Chromium (a context manager: it is stopped on exit).

    Example:
        >>> with Browser() as b:  # doctest: +SKIP
        ...     b.open("report.html")
        ...     b.screenshot_sections("shots/")
    """

    def __init__(self, width: int = 1400, height: int = 1000, *, loopback: bool = False) -> None:
        """Start the browser.

        Args:
            loopback: let pages load from 127.0.0.1 (a test's own HTTP server); every other
                host stays unreachable either way.
        """
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service

        binary, driver = find_chromium()
        # Chromium leaves a directory in the temporary directory per start (its singleton
        # socket): give it a directory of its own, removed on close, profile included.
        self._tmp = tempfile.mkdtemp(prefix="metaprov-chromium-")
        opts = Options()
        opts.binary_location = binary
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            # offline: no proxy that answers, no name that resolves
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=127.0.0.1" if loopback else "--proxy-bypass-list=<-loopback>",
            "--host-resolver-rules=MAP * ~NOTFOUND" + (", EXCLUDE 127.0.0.1" if loopback else ""),
            f"--user-data-dir={os.path.join(self._tmp, 'profile')}",
        ):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.width = width
        env = {**os.environ, "TMPDIR": self._tmp, "TMP": self._tmp, "TEMP": self._tmp}
        try:
            self.driver = webdriver.Chrome(service=Service(driver, env=env), options=opts)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        if not loopback:
            self.driver.set_network_conditions(
                offline=True, latency=0, download_throughput=0, upload_throughput=0
            )
        self.log: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def open(self, path: str | Path, timeout: float = 60.0) -> float:
        """Load the report and wait until Bokeh has drawn it; returns the seconds it took."""
        t = time.perf_counter()
        self.driver.get(Path(path).resolve().as_uri())
        script = (
            "return !!(window.Bokeh && Bokeh.documents.length && "
            "Bokeh.documents.every(d => d.is_idle)) || "
            "(!document.querySelector('.mp-figure') && document.readyState === 'complete')"
        )
        while not self.driver.execute_script(script):
            if time.perf_counter() - t > timeout:
                raise TimeoutError(f"{path}: Bokeh did not finish drawing within {timeout} s")
            time.sleep(0.05)
        seconds = time.perf_counter() - t
        self.log.extend(self.driver.get_log("browser"))
        return seconds

    def errors(self) -> list[dict[str, Any]]:
        """Console messages of level SEVERE (JavaScript errors, failed loads) so far."""
        self.log.extend(self.driver.get_log("browser"))
        return [e for e in self.log if e.get("level") == "SEVERE"]

    def facts(self, element_id: str = "metaprov-report-facts") -> dict[str, Any]:
        text = self.driver.execute_script(
            "return document.getElementById(arguments[0]).textContent", element_id
        )
        return json.loads(text)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def text(self, css: str) -> str:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css).text

    def sections(self) -> list[str]:
        return self.js(
            "return [...document.querySelectorAll('section[data-section]')].map(s => s.id)"
        )

    def rendered_roots(self) -> int:
        """The report's figures that Bokeh has drawn (a view exists for their root)."""
        return int(
            self.js(
                "if (!window.Bokeh) return 0;"
                "return [...document.querySelectorAll('div.mp-figure > div[data-root-id]')]"
                ".filter(d => d.dataset.rootId in Bokeh.index).length"
            )
        )

    def screenshot_sections(self, directory: str | Path) -> list[Path]:
        """One PNG per section (the window is made as tall as the page first)."""
        from selenium.webdriver.common.by import By

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        height = int(self.js("return document.documentElement.scrollHeight"))
        self.driver.set_window_size(self.width, min(height + 200, 30_000))
        time.sleep(0.3)  # let Bokeh re-lay out the stretched figures
        paths = []
        for el in self.driver.find_elements(By.CSS_SELECTOR, "section[data-section]"):
            p = out / f"{el.get_attribute('id')}.png"
            el.screenshot(str(p))
            paths.append(p)
        return paths
