"""A self-contained HTML report of one run, or a comparison of several runs.

Input: run directories (read with :func:`metaprov.ingest.read_run`, Darshan I/O linked with
:func:`metaprov.link.link_io`). Output: one HTML file holding every script and datum (Bokeh's
JavaScript inline: it opens offline), with a summary, the task stream and worker occupancy,
durations per prefix, the transfer matrix, I/O per file and prefix, the submitted graphs and the
task graph with its critical path; for several runs, a comparison first. A store, a SPARQL
endpoint or a campaign export gives a comparison page of the runs it holds, made of the store's
answers to the packaged questions (:func:`write_store_report`, :mod:`metaprov.report.stored`).

Needs the ``report`` extra (Bokeh): ``pip install 'metaprov[report]'``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaprov.errors import InputError

__all__ = [
    "ReportResult",
    "is_campaign",
    "read_facts",
    "render",
    "render_store",
    "require_bokeh",
    "write_report",
    "write_store_report",
]


def require_bokeh() -> None:
    """Raise :class:`~metaprov.errors.MissingDependency` (exit code 2) naming the extra when
    Bokeh is missing."""
    from metaprov.errors import require

    require("bokeh", extra="report", feature="the HTML report (metaprov report)")


@dataclass
class ReportResult:
    """What :func:`write_report` wrote."""

    path: Path
    bytes: int
    runs: list[str]
    seconds: float
    facts: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        notes = [n for r in self.facts.get("runs", []) for n in r.get("notes", [])]
        notes += (self.facts.get("store") or {}).get("notes", [])
        text = (
            f"wrote {self.path}: {self.bytes / 1e6:.1f} MB, {len(self.runs)} run(s), "
            f"{self.seconds:.1f} s"
        )
        return "\n".join([text, *(f"  {n}" for n in notes)])


def _warm_up() -> threading.Thread:
    """Import Bokeh and read its JavaScript in a background thread, while the run is read.

    Reading a run spends most of its time in Arrow's CSV parser, which releases the GIL: the
    imports (~1 s) run in that time instead of after it. Nothing here makes a Bokeh model, so the
    page's ids and bytes do not depend on it.
    """

    def work() -> None:
        try:
            from bokeh.embed import components  # noqa: F401
            from bokeh.resources import INLINE

            import metaprov.report.page  # noqa: F401  (imports Bokeh's models and plotting)

            INLINE.js_raw  # noqa: B018  (reads Bokeh's JavaScript files: into the OS cache)
        except Exception:  # noqa: BLE001 - the main thread imports again and reports the error
            pass

    t = threading.Thread(target=work, name="metaprov-report-warm-up", daemon=True)
    t.start()
    return t


def _views(runs: Sequence[str | Path], darshan: bool, bar: Any) -> list[Any]:
    from metaprov.analysis.summary import summarize
    from metaprov.ingest import read_run
    from metaprov.link import link_io
    from metaprov.live.partial import readable
    from metaprov.report.views import run_view

    views = []
    for run in runs:
        bar.set_postfix_str(f"reading {Path(run).name}")
        # a run still being written: the whole rows written so far (and the workers' part
        # files), never a row being written
        with readable(run) as rd:
            records = read_run(rd.path, darshan=darshan, progress=not bar.disable)
            if rd.in_progress:
                records.path = str(run)
        live = rd.in_progress
        if records.darshan is not None and records.io is None:
            link_io(records)
        bar.update(1)
        bar.set_postfix_str(f"summarising {Path(run).name}")
        summary = summarize(records, io_evidence=False)
        summary["run"]["in_progress"] = live
        views.append(run_view(records, summary))
        bar.update(1)
    return views


def read_facts(path: str | Path) -> dict[str, Any]:
    """The machine-readable facts embedded in a report (what the page shows, as JSON).

    Raises:
        InputError: the file is not a metaprov report.
    """
    import json

    from metaprov.report.page import FACTS_ID

    text = Path(path).read_text(encoding="utf-8")
    start_tag = f'<script type="application/json" id="{FACTS_ID}">'
    i = text.find(start_tag)
    j = text.find("</script>", i)
    if i < 0 or j < 0:
        raise InputError("not a metaprov report (no embedded facts)", path=path)
    return json.loads(text[i + len(start_tag) : j])


def render(views: Sequence[Any], title: str | None = None) -> tuple[str, dict[str, Any]]:
    """The page's HTML text and its facts, for already computed run views."""
    require_bokeh()
    from metaprov.report.page import Page, add_comparison, add_run, deterministic_ids

    if not views:
        raise InputError("no run to report on", hint="give at least one run directory")
    if title is None:
        title = (
            f"metaprov report: {views[0].summary['run']['path']}"
            if len(views) == 1
            else f"metaprov report: {len(views)} runs compared"
        )
    page = Page(title)
    facts: dict[str, Any] = {"version": 1, "runs": []}
    with deterministic_ids():
        if len(views) == 1:
            facts["runs"].append(add_run(page, views[0]))
        else:
            facts["comparison"] = add_comparison(page, list(views))
            for i, v in enumerate(views):
                facts["runs"].append(add_run(page, v, suffix=f"-{i + 1}", nav=False))
        facts["sections"] = list(page.ids)
        page.facts = facts
        return page.render(), facts


def write_report(
    runs: Sequence[str | Path],
    output: str | Path,
    *,
    darshan: bool = True,
    progress: bool = False,
    title: str | None = None,
    overwrite: bool = False,
) -> ReportResult:
    """Write the HTML report of ``runs`` (one run: its report; several: a comparison) to ``output``.

    Args:
        runs: run directories; or campaign exports (``metaprov export`` output directories or
            their ``manifest.json``), which give the comparison page of
            :func:`write_store_report`.
        output: the HTML file to write (atomically: a temporary file renamed at the end).
        darshan: read and link the runs' Darshan logs.
        progress: show progress bars while reading.
        title: page title (default: the run's path, or the number of runs).
        overwrite: replace an existing ``output`` (the CLI's ``--force``); else it is refused.

    Returns:
        A :class:`ReportResult` (path, size, seconds, the facts embedded in the page).

    Raises:
        MissingDependency: Bokeh (the ``report`` extra) is not installed.
        InputError: a run cannot be read, or no run was given.

    Example:
        >>> write_report(["examples/run"], "report.html")  # doctest: +SKIP
    """
    require_bokeh()
    t = time.perf_counter()
    if not runs:
        raise InputError("no run to report on", hint="give at least one run directory")
    out = _output(output, runs, overwrite=overwrite)
    if any(is_campaign(r) for r in runs):
        if not all(is_campaign(r) for r in runs):
            raise InputError(
                "give either run directories or campaign exports, not both",
                hint="a campaign export (metaprov export ... -o OUTDIR) gives its own comparison page",
            )
        return write_store_report(
            out, campaigns=runs, title=title, progress=progress, overwrite=overwrite
        )
    from tqdm.auto import tqdm

    warm = _warm_up()
    with tqdm(
        total=2 * len(runs) + 1, desc="report", unit="step", disable=not progress, leave=False
    ) as bar:
        views = _views(runs, darshan, bar)
        warm.join()
        bar.set_postfix_str("drawing")
        text, facts = render(views, title)
        bar.update(1)
    return ReportResult(
        path=out,
        bytes=_write_atomic(out, text, runs, overwrite=overwrite),
        runs=[str(r) for r in runs],
        seconds=time.perf_counter() - t,
        facts=facts,
    )


def _output(
    output: str | Path,
    inputs: Sequence[str | Path] = (),
    stores: Sequence[Any] = (),
    *,
    overwrite: bool = False,
) -> Path:
    """Check the output before reading anything, as every command that writes does
    (:func:`metaprov.write.output.check_output`): not a directory, not (inside) one of the
    ``inputs`` or ``stores``, not an existing file unless ``overwrite``, its folder exists and
    is not a store."""
    from metaprov.write.output import check_output

    out = Path(output)
    check_output(out, inputs=inputs, stores=_store_paths(stores), overwrite=overwrite)
    return out


def _store_paths(stores: Sequence[Any]) -> list[Path]:
    """The directories of embedded stores (an open store, an endpoint: none)."""
    return [Path(s) for s in stores if isinstance(s, (str, Path))]


def _write_atomic(
    out: Path,
    text: str,
    inputs: Sequence[str | Path] = (),
    stores: Sequence[Any] = (),
    *,
    overwrite: bool = False,
) -> int:
    """Write ``text`` to ``out`` through :func:`metaprov.write.output.open_output` (atomic for
    a file, written through for a pipe or device); returns bytes."""
    from metaprov.write.output import open_output

    data = text.encode("utf-8")
    stores = _store_paths(stores)
    with open_output(
        out, inputs=inputs, stores=stores, overwrite=overwrite, background=False
    ) as fh:
        fh.write(data)
    return len(data)


def is_campaign(path: str | Path) -> bool:
    """Whether ``path`` is a campaign export (``metaprov export`` output directory or manifest)."""
    from metaprov.store import campaign_shards

    p = Path(path)
    return (p.is_dir() and (p / "manifest.json").is_file()) or (
        p.is_file() and p.suffix.lower() == ".json" and campaign_shards(p) is not None
    )


def render_store(view: Any, title: str | None = None) -> tuple[str, dict[str, Any]]:
    """The page's HTML text and its facts, for a :class:`~metaprov.report.stored.StoreView`."""
    require_bokeh()
    from metaprov.report.page import Page, deterministic_ids
    from metaprov.report.stored import add_store

    page = Page(title or f"metaprov report: {len(view.runs)} runs in {view.location}")
    facts: dict[str, Any] = {"version": 1, "runs": []}
    with deterministic_ids():
        facts["store"] = add_store(page, view)
        facts["sections"] = list(page.ids)
        page.facts = facts
        return page.render(), facts


def write_store_report(
    output: str | Path,
    *,
    store: str | Path | Any = None,
    endpoint: str | None = None,
    campaigns: Sequence[str | Path] = (),
    runs: Sequence[str] | None = None,
    title: str | None = None,
    progress: bool = False,
    overwrite: bool = False,
) -> ReportResult:
    """Write the comparison page of the runs a store holds, or of campaign exports.

    The page shows the store's answers to the packaged questions ``runs``, ``prefix-summary``
    and ``prefix-across-runs``: run spans and task counts side by side, the same prefix across
    runs, and which run was slowest for each prefix.

    Args:
        output: the HTML file to write (atomically).
        store: an embedded store directory, or an open :class:`~metaprov.store.Store`.
        endpoint: a SPARQL query endpoint instead of ``store``.
        campaigns: campaign exports (``metaprov export`` output directories or their
            ``manifest.json``), loaded into a store in memory instead of ``store``.
        runs: only these runs (ids or run names).
        title: page title (default: the number of runs and the store).
        progress: show a progress bar.
        overwrite: replace an existing ``output`` (the CLI's ``--force``); else it is refused.

    Raises:
        MissingDependency: Bokeh (the ``report`` extra) is not installed.
        StoreError: the store cannot be opened, or holds no run.
        InputError: a run of ``runs`` is not in the store; a campaign cannot be read.

    Example:
        >>> write_store_report("campaign.html", store="prov-store")  # doctest: +SKIP
    """
    require_bokeh()
    from metaprov.report.stored import store_view
    from metaprov.store import EmbeddedStore, Store, load, open_store

    t = time.perf_counter()
    out = _output(output, campaigns, [store], overwrite=overwrite)
    warm = _warm_up()
    if campaigns:
        st: Any = EmbeddedStore(None)
        load(list(campaigns), store=st, progress=progress or None)
        where = ", ".join(str(c) for c in campaigns)
    elif isinstance(store, Store):
        st, where = store, None
    else:
        st = open_store(store, endpoint, read_only=True)
        where = None
    try:
        view = store_view(st, runs)
    finally:
        if st is not store:
            st.close()
    if where is not None:
        view.location = where
    warm.join()
    text, facts = render_store(view, title)
    return ReportResult(
        path=out,
        bytes=_write_atomic(out, text, campaigns, [store], overwrite=overwrite),
        runs=list(view.runs["run_id"]),
        seconds=time.perf_counter() - t,
        facts=facts,
    )
