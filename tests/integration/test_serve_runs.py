"""``metaprov serve RUN_DIR...`` (issue 38 item 4): packaged questions answered at once from the
run directories, ad-hoc SPARQL once the store has loaded in the background.

A real server on a free port of 127.0.0.1, started and stopped by each test. The load is held
back by the library's ``gate`` until the test lets it go, so "before the load finished" never
depends on timing. Byte equality: each packaged question answered from the runs against the
same question answered by the server's store once loaded (and against ``query_runs``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from conftest import REPO

from metaprov.cli import cli
from metaprov.live.runserve import RETRY_AFTER, RunsServer, serve_runs
from metaprov.queries import format_result
from metaprov.queries.fromruns import query_runs

EXAMPLE = REPO / "examples" / "run"
COUNT = "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"
pytestmark = pytest.mark.server
#: Asked before the load, then of the store once loaded (the four direct forms and two more).
ASKED = [
    ("critical-path", "csv"),
    ("failures", "csv"),
    ("failures", "json"),
    ("thread-utilisation", "csv"),
    ("worker-utilisation", "json"),
    ("runs", "csv"),
    ("prefix-summary", "json"),
]


@contextmanager
def _serving(runs: list[Path], **kw: Any) -> Iterator[tuple[RunsServer, threading.Event]]:
    """A running server over ``runs`` whose load waits for the yielded gate."""
    stop, gate, box = threading.Event(), threading.Event(), {}
    done: dict[str, Any] = {}

    def target() -> None:
        try:
            done["status"] = serve_runs(
                runs, port=0, stop=stop, gate=gate, on_listen=lambda s: box.update(s=s), **kw
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            done["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while "s" not in box and "error" not in done and time.monotonic() < deadline:
        time.sleep(0.02)
    if "error" in done:
        raise done["error"]
    try:
        yield box["s"], gate
    finally:
        gate.set()
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    assert "error" not in done, done.get("error")


def _get(server: RunsServer, path: str, **params: str) -> requests.Response:
    return requests.get(server.url + path, params=params, timeout=120)


def _loaded(server: RunsServer) -> dict[str, Any]:
    assert server.loaded.wait(120), "the load did not end"
    return _get(server, "/status").json()


def test_example_run_questions_now_sparql_once_loaded_same_bytes_as_the_store(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    with _serving([EXAMPLE], cache=cache) as (server, gate):
        # before the load: the packaged questions answer, from the run directory
        status = _get(server, "/status").json()
        assert status["store"]["state"] == "loading"
        assert status["store"]["runs_loaded"] == 0 and status["store"]["runs"] == 1
        early = {}
        for name, fmt in ASKED:
            r = _get(server, f"/questions/{name}", format=fmt)
            assert r.status_code == 200, r.text
            assert r.headers["Content-Type"].startswith("text/csv" if fmt == "csv" else "applic")
            early[name, fmt] = r
        want = format_result(query_runs("failures", [EXAMPLE], cache=cache), "csv")
        assert early["failures", "csv"].text == want  # as metaprov query failures RUN_DIR
        assert "RuntimeError" in want  # the example's one failure
        # ... and ad-hoc SPARQL says it is still loading, with its progress
        r = requests.post(server.query_url, data={"query": COUNT}, timeout=30)
        assert r.status_code == 503
        assert r.headers["Retry-After"] == str(RETRY_AFTER)
        assert "still loading" in r.text and "0 of 1 runs" in r.text
        assert _get(server, "/questions/failures", **{"from": "store"}).status_code == 503
        # the SPARQL guard still applies while loading (a refusal is not a "wait")
        service = "SELECT * WHERE { SERVICE <http://example.org/sparql> { ?s ?p ?o } }"
        assert (
            requests.post(server.query_url, data={"query": service}, timeout=30).status_code == 403
        )
        page = _get(server, "/")
        assert page.status_code == 200 and "critical-path" in page.text
        assert server.status.state == "loading"  # nothing above let the load start

        gate.set()
        status = _loaded(server)
        assert status["store"] == {**status["store"], "state": "loaded", "runs_loaded": 1}
        assert status["store"]["triples"] > 2000
        r = requests.post(
            server.query_url,
            data={"query": COUNT},
            headers={"Accept": "application/sparql-results+json"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert int(r.json()["results"]["bindings"][0]["n"]["value"]) == status["store"]["triples"]
        # the answers given before the load, byte for byte, are the store's (and stay the same)
        for (name, fmt), before in early.items():
            store = _get(server, f"/questions/{name}", format=fmt, **{"from": "store"})
            assert store.status_code == 200, (name, store.text)
            assert store.content == before.content, (name, fmt)
            assert store.headers.get("X-Metaprov-Notes") == before.headers.get("X-Metaprov-Notes")
        assert (
            _get(server, "/questions/failures", format="csv").content
            == early[("failures", "csv")].content
        )


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic run with errors, retries and Darshan I/O."""
    from metaprov.synthetic import generate_run

    return generate_run(
        tmp_path_factory.mktemp("serve") / "faulty",
        300,
        seed=7,
        erred_fraction=0.03,
        retried_fraction=0.05,
        io_fraction=0.2,
        workers=2,
        threads=2,
    )


def test_synthetic_run_parameters_errors_and_the_given_store_kept(
    faulty_run: Path, tmp_path: Path
) -> None:
    store_dir = tmp_path / "store"
    with _serving([faulty_run], store=store_dir, cache=tmp_path / "cache") as (server, gate):
        run_id = str(query_runs("runs", [faulty_run], cache=tmp_path / "cache")["run_id"][0])
        asked = [
            ("problem-tasks", {"limit": "2", "run_id": run_id, "problem": "erred"}),
            ("slowest-tasks", {"limit": "3"}),
            ("thread-utilisation", {}),
            ("critical-path", {}),
        ]
        early = [_get(server, f"/questions/{n}", format="json", **p) for n, p in asked]
        assert all(r.status_code == 200 for r in early), [r.text for r in early]
        assert [row["problem"] for row in early[0].json()] == ["erred", "erred"]
        assert len(early[2].json()) == 4  # 2 workers x 2 threads
        # what a user gets wrong: a clear status and message, never a traceback
        r = _get(server, "/questions/failurse")
        assert r.status_code == 404 and "did you mean failures" in r.text
        assert _get(server, "/questions/failures", limit="many").status_code == 400
        assert "has no parameter 'nope'" in _get(server, "/questions/failures", nope="1").text
        assert _get(server, "/questions/failures", format="xml").status_code == 400
        twice = requests.get(server.url + "/questions/failures?limit=1&limit=2", timeout=30)
        assert twice.status_code == 400 and "more than once" in twice.text
        r = _get(server, "/questions/..%2F..%2Fetc%2Fpasswd")
        assert r.status_code == 404
        r = requests.get(server.url + "/status", headers={"Host": "evil.example:80"}, timeout=30)
        assert r.status_code == 403
        assert requests.post(server.url + "/questions/failures", timeout=30).status_code == 405
        gate.set()
        assert _loaded(server)["store"]["state"] == "loaded"
        for (name, params), before in zip(asked, early, strict=True):
            store = _get(server, f"/questions/{name}", format="json", **params, **{"from": "store"})
            assert store.content == before.content, name
    # the given store is kept, holding the run: metaprov query answers from it
    result = CliRunner().invoke(
        cli, ["query", "thread-utilisation", "--store", str(store_dir), "-f", "json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == early[2].json()


def test_cli_serve_runs_prints_where_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        # --timeout: the SPARQL of the runs' store has the same time limit as any served store
        [sys.executable, "-m", "metaprov", "serve", str(EXAMPLE), "--port", "0", "--timeout", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "METAPROV_CACHE": str(tmp_path / "cache")},  # not the user's cache
    )
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        assert first.startswith("Serving 1 run(s) at http://127.0.0.1:"), first
        url = first.split(" at ")[1].split("/ ")[0]
        r = requests.get(url + "/questions/runs?format=csv", timeout=120)
        assert r.status_code == 200 and r.text.startswith("run_id,")
        deadline = time.monotonic() + 120
        while requests.get(url + "/status", timeout=30).json()["store"]["state"] == "loading":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        r = requests.post(url + "/query", data={"query": COUNT}, timeout=30)
        assert r.status_code == 200
        status = requests.get(url + "/status", timeout=30).json()
        assert status["store"]["state"] == "loaded"
        temporary = Path(status["location"])
        assert temporary.is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopped" in err and "loaded " in err
    assert not temporary.exists()  # the temporary store is removed on exit


def test_cli_serve_runs_refuses_follow_and_non_runs(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["serve", str(EXAMPLE), "--follow", str(EXAMPLE)])
    assert r.exit_code == 2 and "not for RUNS" in r.output
    r = CliRunner().invoke(cli, ["serve", str(EXAMPLE), "--cors"])
    assert r.exit_code == 2 and "not for RUNS" in r.output
    r = CliRunner().invoke(cli, ["serve", str(tmp_path), "--port", "0"])
    assert r.exit_code != 0 and "Traceback" not in r.output
    help_text = CliRunner().invoke(cli, ["serve", "--help"]).output
    assert "metaprov serve examples/run --port 0" in help_text


def _cell(drawn: str, value: Any) -> str:
    """``drawn`` if it shows ``value`` (numbers compared as numbers), else what it should show."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return drawn if float(drawn) == value else str(value)
    return str(value)


def _wait_js(browser: Any, script: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := browser.js(script)):
        assert time.monotonic() < deadline, f"the page never satisfied: {script}"
        time.sleep(0.05)
    return value


@pytest.mark.browser
def test_the_page_asks_questions_now_and_sparql_once_loaded_in_chromium(tmp_path: Path) -> None:
    """The served page in a real headless Chromium: a packaged question drawn from the run while
    the store loads (the SPARQL button disabled), then the SPARQL form once it has loaded; the
    tables show the server's own answers cell for cell; no console error."""
    from metaprov.report.browser import Browser, BrowserUnavailable

    try:
        browser = Browser(loopback=True)
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless browser: {exc}")
    cells = (
        "return [...document.querySelectorAll(arguments[0] + ' table tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )
    try:
        with _serving([EXAMPLE], cache=tmp_path / "cache") as (server, gate):
            browser.driver.get(server.url + "/")
            _wait_js(
                browser, "return document.getElementById('load').textContent.includes('loading')"
            )
            assert browser.js("return document.getElementById('run').disabled") is True
            browser.js("document.getElementById('name').value = 'prefix-summary'")
            browser.js("document.getElementById('ask').click()")
            _wait_js(browser, "return / rows/.test(document.getElementById('qstatus').textContent)")
            want = _get(server, "/questions/prefix-summary", format="json").json()
            got = browser.js(cells, "#qout")
            assert got[0] == list(want[0])
            # a number as JavaScript prints it (0.000042, not Python's 4.2e-05): compared as a number
            assert len(got) == len(want) + 1 > 2
            for drawn, row in zip(got[1:], want, strict=True):
                assert [_cell(c, v) for c, v in zip(drawn, row.values(), strict=True)] == drawn

            gate.set()
            _wait_js(browser, "return !document.getElementById('run').disabled")
            assert "store loaded: 1 of 1 runs" in browser.text("#load")
            browser.js("document.getElementById('run').click()")
            _wait_js(browser, "return / rows$/.test(document.getElementById('status').textContent)")
            answer = requests.post(
                server.query_url,
                data={"query": browser.js("return document.getElementById('q').value")},
                headers={"Accept": "application/sparql-results+json"},
                timeout=30,
            ).json()
            got = browser.js(cells, "#out")
            assert got[0] == answer["head"]["vars"] == ["run_id", "tasks"]
            assert got[1:] == [
                [b[v]["value"] for v in answer["head"]["vars"]]
                for b in answer["results"]["bindings"]
            ]
            assert browser.errors() == []
    finally:
        browser.close()
