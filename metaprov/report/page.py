"""The report's HTML page: sections of tables and Bokeh figures, every script and datum inline.

Input: :class:`~metaprov.report.views.RunView` objects. Output: the page's text. Bokeh's JavaScript
is inlined (``bokeh.resources.INLINE``): the page opens offline and fetches nothing. Bokeh's
element and document ids are numbered deterministically, so the same runs give the same bytes.
"""

from __future__ import annotations

import contextlib
import html
import itertools
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from metaprov._version import __version__
from metaprov.analysis.summary import format_losses
from metaprov.report import figures
from metaprov.report.views import RunView, facts

FACTS_ID = "metaprov-report-facts"

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #222; }
header { background: #1f3b57; color: white; padding: 10px 24px; }
header h1 { margin: 0; font-size: 20px; }
header p { margin: 4px 0 0 0; font-size: 13px; opacity: 0.85; }
nav { position: sticky; top: 0; background: #f4f6f8; border-bottom: 1px solid #ccd; padding: 6px 24px; z-index: 10; font-size: 14px; }
nav a { margin-right: 16px; color: #1f3b57; text-decoration: none; }
main { padding: 0 24px 40px 24px; }
section { margin-top: 24px; border-top: 2px solid #1f3b57; padding-top: 6px; }
section h2 { font-size: 18px; margin: 6px 0; }
section h3 { font-size: 15px; margin: 14px 0 4px 0; }
table.mp { border-collapse: collapse; font-size: 12px; margin: 4px 0 8px 0; }
table.mp th, table.mp td { border: 1px solid #ccd; padding: 2px 6px; text-align: left; vertical-align: top; }
table.mp td.n { text-align: right; font-variant-numeric: tabular-nums; }
table.mp th { background: #eef1f4; }
.note { background: #fff8e0; border-left: 4px solid #e0b000; padding: 4px 8px; font-size: 13px; margin: 6px 0; }
.legend span.sw { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 10px; vertical-align: middle; }
.legend { font-size: 12px; line-height: 20px; }
.grid2 { display: flex; flex-wrap: wrap; gap: 16px; }
.muted { color: #666; font-size: 12px; }
details summary { cursor: pointer; font-weight: 600; }
"""


@contextlib.contextmanager
def deterministic_ids() -> Iterator[None]:
    """Number Bokeh's model, element and document ids from 1 while the page is built.

    Wraps both the making of the figures and their embedding.

    Bokeh makes globally unique ids with ``uuid4`` and numbers models from a process-wide counter;
    both would make two builds of the same report differ.
    """
    from bokeh.embed import elements, util
    from bokeh.util import serialization

    counter = itertools.count(1)

    def unique() -> str:
        return f"00000000-0000-4000-8000-{next(counter):012d}"

    def css_safe() -> str:
        return f"mp{next(counter):08d}"

    saved = (
        util.make_globally_unique_id,
        util.make_globally_unique_css_safe_id,
        elements.make_globally_unique_css_safe_id,
        serialization._simple_id,
    )
    util.make_globally_unique_id = unique
    util.make_globally_unique_css_safe_id = css_safe
    elements.make_globally_unique_css_safe_id = css_safe
    serialization._simple_id = 1000
    try:
        yield
    finally:
        (
            util.make_globally_unique_id,
            util.make_globally_unique_css_safe_id,
            elements.make_globally_unique_css_safe_id,
            serialization._simple_id,
        ) = saved


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _fmt(v: Any, kind: str) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)) or v is pd.NA or v is pd.NaT:
        return ""
    try:
        if pd.isna(v):
            return ""
    except (TypeError, ValueError):
        pass
    if kind == "int":
        return f"{int(v):,}"
    if kind == "bytes":
        return f"{int(v):,}"
    if kind == "s":
        return f"{float(v):.6f}"
    if kind == "s3":
        return f"{float(v):.3f}"
    if kind == "time":
        return pd.Timestamp(v).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return str(v)


def table(
    df: pd.DataFrame, columns: list[tuple[str, str, str]], *, cls: str = "mp", name: str = ""
) -> str:
    """An HTML table of ``df``: columns as (field, heading, kind); numbers right-aligned."""
    head = "".join(f"<th>{esc(h)}</th>" for _, h, _ in columns)
    rows = []
    # a table the run has no data for may come without its columns (no readable Darshan log)
    for rec in df.reindex(columns=[c for c, _, _ in columns]).itertuples(index=False):
        cells = []
        for v, (_, _, kind) in zip(rec, columns, strict=True):
            num = kind in ("int", "bytes", "s", "s3")
            cells.append(f"<td{' class=n' if num else ''}>{esc(_fmt(v, kind))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    attr = f' data-table="{esc(name)}"' if name else ""
    return f'<table class="{cls}"{attr}><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def kv(pairs: list[tuple[str, Any]], name: str = "") -> str:
    attr = f' data-table="{esc(name)}"' if name else ""
    body = "".join(
        f'<tr><th>{esc(k)}</th><td data-field="{esc(k)}">{esc(v)}</td></tr>' for k, v in pairs
    )
    return f'<table class="mp"{attr}><tbody>{body}</tbody></table>'


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in d.items()) or "-"


def legend(view: RunView, colors: list[str], limit: int = 60) -> str:
    pr = view.prefixes.head(limit)
    items = "".join(
        f'<span class="sw" style="background:{colors[c]}"></span>{esc(p)}'
        for p, c in zip(pr["prefix"], pr["color"], strict=True)
    )
    more = f" ... ({len(view.prefixes) - limit} more)" if len(view.prefixes) > limit else ""
    extra = (
        f'<span class="sw" style="background:{figures.TRANSFER_COLOR}"></span>transfer'
        f'<span class="sw" style="background:{figures.IO_COLOR}"></span>I/O burst (Darshan)'
    )
    return f'<div class="legend">{items}{more}{extra}</div>'


def _lean(roots: list[Any]) -> None:
    """Let BokehJS derive the glyphs of unselected and muted renderers (fewer models to serialise).

    ``bokeh.plotting`` gives every renderer its own non-selection and muted glyph, two models
    each that Python then serialises; the page neither mutes renderers nor selects on them except
    in the task graph, where BokehJS's derived glyph ("auto") looks the same.
    """
    from bokeh.models import GlyphRenderer

    for root in roots:
        for r in root.select({"type": GlyphRenderer}):
            r.nonselection_glyph = "auto"
            r.muted_glyph = "auto"


class Page:
    """Collects sections (HTML with placeholders for Bokeh roots) and renders the document."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.parts: list[str] = []
        self.nav: list[tuple[str, str]] = []
        self.ids: list[str] = []
        self.models: dict[str, Any] = {}
        self.facts: dict[str, Any] = {}

    def section(self, sid: str, title: str, nav: bool = True) -> None:
        if self.parts:
            self.parts.append("</section>")
        if nav:
            self.nav.append((sid, title))
        self.ids.append(sid)
        self.parts.append(
            f'<section id="{esc(sid)}" data-section="{esc(sid)}"><h2>{esc(title)}</h2>'
        )

    def html(self, text: str) -> None:
        self.parts.append(text)

    def figure(self, name: str, model: Any) -> None:
        if model is None:
            self.parts.append('<p class="muted">nothing to draw</p>')
            return
        self.models[name] = model
        self.parts.append(f"\x00ROOT:{name}\x00")

    def render(self) -> str:
        from bokeh.embed import components
        from bokeh.embed.bundle import bundle_for_objs_and_resources
        from bokeh.resources import INLINE

        if self.parts:
            self.parts.append("</section>")
        _lean(list(self.models.values()))
        script, divs = components(self.models) if self.models else ("", {})
        bundle = bundle_for_objs_and_resources(list(self.models.values()), INLINE)
        resources = "".join(bundle)
        body = "".join(self.parts)
        for name, div in divs.items():
            body = body.replace(
                f"\x00ROOT:{name}\x00",
                f'<div class="mp-figure" data-figure="{esc(name)}">{div}</div>',
            )
        nav = "".join(f'<a href="#{esc(s)}">{esc(t)}</a>' for s, t in self.nav)
        # "<" as a JSON escape: no text in the data can close or open a tag inside the script
        data = json.dumps(self.facts, sort_keys=True, default=str).replace("<", "\\u003c")
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{esc(self.title)}</title>\n<style>{CSS}</style>\n{resources}\n</head>\n<body>\n"
            f"<header><h1>{esc(self.title)}</h1><p>made by metaprov {esc(__version__)} from the run's "
            "records; everything is in this file (it opens offline)</p></header>\n"
            f"<nav>{nav}</nav>\n<main>\n{body}\n</main>\n"
            f'<script type="application/json" id="{FACTS_ID}">{data}</script>\n'
            f"{script}\n</body>\n</html>\n"
        )


# ---------------------------------------------------------------------------------------------


def add_run(page: Page, view: RunView, suffix: str = "", nav: bool = True) -> dict[str, Any]:
    """Add the sections of one run to ``page``; returns its facts."""
    f = facts(view)
    colors = figures.palette(len(view.prefixes))
    _add_summary(page, view, suffix, nav)
    _add_stream(page, view, f, colors, suffix, nav)
    _add_durations(page, view, colors, suffix, nav)
    _add_transfers(page, view, suffix, nav)
    _add_io(page, view, suffix, nav)
    _add_graphs(page, view, colors, suffix, nav)
    return f


def _add_summary(page: Page, view: RunView, sx: str, nav: bool) -> None:
    """The summary section: the run's figures, its tasks per prefix, the rows not used, the notes."""
    s = view.summary
    run = s["run"]
    page.section(f"summary{sx}", "Summary" + (f": {run['path']}" if sx else ""), nav)
    if not nav:
        page.nav.append((f"summary{sx}", f"run {sx.lstrip('-')}"))
    page.html(kv(_summary_pairs(s), name=f"summary{sx}"))
    page.html("<h3>Tasks per prefix</h3>")
    if view.prefixes["compute_s"].isna().any():
        page.html(
            '<p class="muted">compute (s) is blank where no execution of the prefix has both '
            "a start and an end: unknown, not zero</p>"
        )
    page.html(
        table(
            view.prefixes.sort_values("prefix"),
            [
                ("prefix", "prefix", ""),
                ("tasks", "tasks", "int"),
                ("executed", "executed", "int"),
                ("erred", "erred", "int"),
                ("retried", "retried", "int"),
                ("executions", "executions", "int"),
                ("compute_s", "compute (s)", "s3"),
            ],
            name=f"prefixes{sx}",
        )
    )
    page.html("<h3>Rows read and not used</h3>")
    accdf = _accounting(s)
    page.html(
        table(
            accdf,
            [
                ("file", "file", ""),
                ("present", "present", ""),
                ("read", "rows read", "int"),
                ("used", "rows used", "int"),
                ("not used", "not used (reason: rows)", ""),
            ],
            name=f"accounting{sx}",
        )
    )
    for note in view.notes:
        page.html(f'<p class="note">{esc(note)}</p>')


def _batch_jobs_text(b: dict[str, Any]) -> str:
    """``3 (2 COMPLETED, 1 CANCELLED); up to 1.2 s waiting in the queue (part of the startup)``."""
    if not b.get("total"):
        return "-"
    states = ", ".join(f"{n} {k}" for k, n in (b.get("states") or {}).items())
    text = f"{b['total']:,}" + (f" ({states})" if states else "")
    wait = b.get("max_queue_wait_s")
    if wait is not None:
        text += f"; up to {wait:.3g} s waiting in the queue (part of the startup)"
    return text


def _summary_pairs(s: dict[str, Any]) -> list[tuple[str, Any]]:
    """The rows of the summary table, from the run's summary."""
    run, tasks, tr = s["run"], s["tasks"], s["transfers"]
    job = s.get("job") or {}
    tot = (s.get("io") or {}).get("totals") or {}
    live = bool(run.get("in_progress"))
    return [
        ("run", run["path"] + (" (in progress: as of its last event below)" if live else "")),
        ("run id", run["run_id"]),
        ("first event", run["first_event"]),
        ("last event", run["last_event"]),
        ("span (s)", run["duration_s"]),
        (
            "job",
            f"{job.get('id')} on {job.get('server', '?')}, user {job.get('user', '?')}"
            if job.get("id")
            else "-",
        ),
        ("batch jobs", _batch_jobs_text(s.get("batch_jobs") or {})),
        ("scheduler", (s.get("scheduler") or {}).get("address", "-")),
        ("tasks", f"{tasks['total']:,}"),
        ("executed", f"{tasks['executed']:,}"),
        ("ran without a record", f"{tasks.get('ran_unrecorded', 0):,}"),
        (
            "not run yet (waiting or running)" if live else "never ran",
            f"{tasks['never_ran']:,}",
        ),
        ("erred", f"{tasks['erred']:,}"),
        ("retried", f"{tasks['retried']:,}"),
        ("executions", f"{s['executions']:,}"),
        (
            "lost",
            "; ".join(t.split(None, 1)[1] for t in format_losses(s.get("losses") or {})) or "-",
        ),
        (
            "compute (s)",
            "unknown (no compute windows in this run)"
            if tasks["compute_seconds"] is None
            else f"{tasks['compute_seconds']:.3f}",
        ),
        ("tasks by state", _counts(tasks["by_state"])),
        ("workers", f"{s['workers']['total']:,}"),
        ("threads that ran tasks", f"{s['threads']:,}"),
        (
            "threads per worker",
            ", ".join(f"{k} ({v:,} workers)" for k, v in s["workers"]["threads_per_worker"].items())
            or "-",
        ),
        ("clients", f"{len(s['clients']):,}"),
        (
            "graphs",
            f"{s['graphs']['total']:,} ({s['graphs']['tasks']:,} tasks, {s['graphs']['edges']:,} edges)",
        ),
        (
            "transfers",
            f"{tr['distinct']:,} ({tr['keys_moved']:,} keys, {tr['bytes']:,} bytes, {tr['to_clients']:,} to clients)",
        ),
        (
            "I/O (Darshan)",
            f"{tot.get('segments', 0):,} segments: {tot.get('reads', 0):,} reads ({tot.get('bytes_read', 0):,} bytes), "
            f"{tot.get('writes', 0):,} writes ({tot.get('bytes_written', 0):,} bytes), {tot.get('files', 0):,} files"
            if tot
            else "no Darshan logs read",
        ),
        *_time_went_pairs(s),
        ("missing inputs", ", ".join(run["missing_inputs"]) or "-"),
    ]


def _time_went_pairs(s: dict[str, Any]) -> list[tuple[str, Any]]:
    """Where the workers' time went and their memory (Dask's fine performance metrics), or
    that the run did not record them."""
    from metaprov.analysis.summary import time_went_text

    if "time_went" not in s:
        return []
    time_text, memory_text = time_went_text(s["time_went"])
    return [("where the workers' time went", time_text), ("worker memory", memory_text)]


def _accounting(s: dict[str, Any]) -> pd.DataFrame:
    """One row per input file: present, rows read, rows used, and why the others were not."""
    acc = []
    for name, a in s["accounting"]["files"].items():
        acc.append(
            {
                "file": name,
                "present": "yes" if a["present"] else "missing",
                "read": a["rows_read"],
                "used": a["rows_used"],
                "not used": "; ".join(f"{k}: {v:,}" for k, v in a["not_used"].items()),
            }
        )
    return pd.DataFrame(acc, columns=["file", "present", "read", "used", "not used"])


def _add_stream(
    page: Page, view: RunView, f: dict[str, Any], colors: list[str], sx: str, nav: bool
) -> None:
    """The task stream: one lane per worker thread, plus transfer and I/O lanes."""
    run = view.summary["run"]
    page.section(f"stream{sx}", "Task stream", nav)
    page.html(
        f'<p class="muted">{f["lanes"]["threads"]} worker-thread lanes, {f["lanes"]["transfers"]} transfer lanes, '
        f"{f['lanes']['io']} I/O lanes; drag to pan, wheel to zoom the time axis, hover a bar for details. "
        f"Time 0 is {esc(run['first_event'])}.</p>"
    )
    page.html(legend(view, colors))
    if view.mode == "raster":
        page.html(
            f'<p class="note">{esc(next(n for n in view.notes if n.startswith("task stream")))}</p>'
        )
    if not len(view.executions):
        page.html(
            '<p class="note">no task execution has a start and an end time (the run lacks its transition files); only transfers and I/O are drawn</p>'
        )
    if len(view.lanes):
        page.figure(f"stream{sx}", figures.task_stream(view, colors))


def _add_durations(page: Page, view: RunView, colors: list[str], sx: str, nav: bool) -> None:
    """Durations per prefix, the slowest executions, the erred or retried tasks."""
    page.section(f"prefixes{sx}", "Durations per prefix", nav)
    page.figure(f"durations{sx}", figures.durations(view, colors))
    page.figure(f"histogram{sx}", figures.histogram(view, view.executions))
    page.html("<h3>Slowest executions</h3>")
    page.html(
        table(
            view.slowest,
            [
                ("key", "key", ""),
                ("prefix", "prefix", ""),
                ("worker", "worker", ""),
                ("thread", "thread", ""),
                ("attempt", "attempt", "int"),
                ("outcome", "outcome", ""),
                ("left", "start (s)", "s"),
                ("duration", "duration (s)", "s"),
            ],
            name=f"slowest{sx}",
        )
    )
    page.html(f"<h3>Erred or retried tasks ({view.n_problems:,})</h3>")
    if view.n_problems:
        page.html(
            table(
                view.problems,
                [
                    ("key", "key", ""),
                    ("prefix", "prefix", ""),
                    ("state", "state", ""),
                    ("erred", "erred", ""),
                    ("retried", "retried", ""),
                    ("n_executions", "executions", "int"),
                    ("worker", "last worker", ""),
                ],
                name=f"problems{sx}",
            )
        )
        if view.n_problems > len(view.problems):
            page.html(
                f'<p class="muted">first {len(view.problems)} of {view.n_problems:,} shown</p>'
            )


def _add_transfers(page: Page, view: RunView, sx: str, nav: bool) -> None:
    """Transfers between workers: the matrix and its table."""
    page.section(f"transfers{sx}", "Transfers between workers", nav)
    page.figure(f"matrix{sx}", figures.transfer_matrix(view))
    if len(view.matrix):
        page.html(
            table(
                view.matrix,
                [
                    ("source", "source", ""),
                    ("destination", "destination", ""),
                    ("transfers", "transfers", "int"),
                    ("bytes", "bytes", "bytes"),
                    ("seconds", "seconds", "s"),
                ],
                name=f"matrix{sx}",
            )
        )


def _add_io(page: Page, view: RunView, sx: str, nav: bool) -> None:
    """I/O (Darshan): per task prefix, how segments were linked, per file."""
    io = view.summary.get("io") or {}
    tot = io.get("totals") or {}
    page.section(f"io{sx}", "I/O (Darshan)", nav)
    if not tot:
        page.html('<p class="muted">no Darshan logs were read for this run</p>')
    else:
        bp = pd.DataFrame(
            io.get("by_prefix") or [],
            columns=[
                "prefix",
                "tasks",
                "segments",
                "reads",
                "writes",
                "bytes_read",
                "bytes_written",
                "files",
            ],
        )
        page.html("<h3>Per task prefix (I/O linked to tasks)</h3>")
        if not len(bp):
            by_rule = io.get("link", {}).get("by_rule", {})
            why = ", ".join(f"{k} {v:,}" for k, v in sorted(by_rule.items()) if v) or "none"
            page.html(
                '<p class="muted">empty: no Darshan segment is linked to a task execution '
                f"(segments by link rule: {esc(why)}; see the notes of the task stream and "
                "docs/darshan.md for what each rule means)</p>"
            )
        page.html(
            table(
                bp,
                [
                    ("prefix", "prefix", ""),
                    ("tasks", "tasks", "int"),
                    ("reads", "reads", "int"),
                    ("writes", "writes", "int"),
                    ("bytes_read", "bytes read", "bytes"),
                    ("bytes_written", "bytes written", "bytes"),
                    ("files", "files", "int"),
                ],
                name=f"io-prefix{sx}",
            )
        )
        link = io.get("link", {}).get("by_status", {})
        page.html(
            f'<p class="muted">segments linked to tasks {link.get("linked", 0):,}, to processes {link.get("process", 0):,}, ambiguous {link.get("ambiguous", 0):,}, unlinked {link.get("unlinked", 0):,}</p>'
        )
        page.figure(f"io-map{sx}", figures.io_prefix(view))
        n_files = len(view.io_files)
        page.html(
            f"<h3>Per file ({n_files:,} files{', the 50 most read shown' if n_files > 50 else ''})</h3>"
        )
        page.html(
            table(
                view.io_files.head(50),
                [
                    ("path", "file", ""),
                    ("reads", "reads", "int"),
                    ("writes", "writes", "int"),
                    ("bytes_read", "bytes read", "bytes"),
                    ("bytes_written", "bytes written", "bytes"),
                    ("tasks", "tasks", "int"),
                    ("prefixes", "task prefixes", ""),
                    ("examples", "example tasks", ""),
                ],
                name=f"io-files{sx}",
            )
        )


def _add_graphs(page: Page, view: RunView, colors: list[str], sx: str, nav: bool) -> None:
    """The task graphs, the critical path and its table."""
    page.section(f"graphs{sx}", "Task graphs and critical path", nav)
    page.html(
        table(
            view.records.graphs,
            [
                ("graph", "graph", "int"),
                ("client", "client", ""),
                ("time", "submitted", "time"),
                ("n_wanted", "keys wanted", "int"),
                ("n_tasks", "tasks", "int"),
                ("n_edges", "edges", "int"),
            ],
            name=f"graphs{sx}",
        )
    )
    cp = view.critical
    if cp.attrs.get("total_seconds", 0.0) > 0:
        page.html(
            f"<h3>Critical path: {len(cp):,} tasks, {cp.attrs['total_seconds']:.3f} s of compute</h3>"
        )
    else:
        page.html("<h3>Critical path: none (no task has a compute time)</h3>")
    if view.graph["level"] == "prefix":
        page.html(
            f'<p class="note">{esc(next(n for n in view.notes if n.startswith("task graph")))}</p>'
        )
    page.figure(f"graph{sx}", figures.task_graph(view, colors))
    page.html(
        table(
            cp.head(50) if cp.attrs.get("total_seconds", 0.0) > 0 else cp.head(0),
            [
                ("position", "#", "int"),
                ("key", "key", ""),
                ("prefix", "prefix", ""),
                ("worker", "worker", ""),
                ("duration", "duration (s)", "s"),
                ("cumulative", "cumulative (s)", "s"),
            ],
            name=f"critical{sx}",
        )
    )
    if len(cp) > 50:
        page.html(f'<p class="muted">first 50 of {len(cp):,} tasks shown</p>')


def add_comparison(page: Page, views: list[RunView]) -> dict[str, Any]:
    """The comparison section of several runs: spans, counts, the same prefix across runs."""
    page.section("compare", "Runs compared")
    names = [
        f"{i + 1}: {v.summary['run']['path'].rstrip('/').split('/')[-1]}"
        for i, v in enumerate(views)
    ]
    rows = []
    for name, v in zip(names, views, strict=True):
        s = v.summary
        rows.append(
            {
                "run": name,
                "run_id": s["run"]["run_id"],
                "first": s["run"]["first_event"],
                "span": s["run"]["duration_s"],
                "tasks": s["tasks"]["total"],
                "executed": s["tasks"]["executed"],
                "erred": s["tasks"]["erred"],
                "retried": s["tasks"]["retried"],
                "compute": s["tasks"]["compute_seconds"],
                "workers": s["workers"]["total"],
                "transfers": s["transfers"]["distinct"],
                "tbytes": s["transfers"]["bytes"],
                # unknown (blank), not 0, when the run has no compute windows
                "critical": None
                if s["tasks"]["compute_seconds"] is None
                else v.critical.attrs.get("total_seconds"),
            }
        )
    runs = pd.DataFrame(rows)
    if runs["compute"].isna().any():
        page.html(
            '<p class="muted">compute and critical path are blank for a run without compute '
            "windows (no execution has a start and an end): unknown, not zero</p>"
        )
    page.html(
        table(
            runs,
            [
                ("run", "run", ""),
                ("run_id", "run id", ""),
                ("first", "first event", ""),
                ("span", "span (s)", "s3"),
                ("tasks", "tasks", "int"),
                ("executed", "executed", "int"),
                ("erred", "erred", "int"),
                ("retried", "retried", "int"),
                ("compute", "compute (s)", "s3"),
                ("critical", "critical path (s)", "s3"),
                ("workers", "workers", "int"),
                ("transfers", "transfers", "int"),
                ("tbytes", "bytes moved", "bytes"),
            ],
            name="compare-runs",
        )
    )
    parts = []
    for name, v in zip(names, views, strict=True):
        p = v.prefixes[["prefix", "tasks", "executions", "compute_s", "median", "p95"]].copy()
        p["run"] = name
        parts.append(p)
    per = pd.concat(parts, ignore_index=True)
    # Where each prefix was slowest: the run with the largest median duration.
    med = per.dropna(subset=["median"])
    slow = (
        med.loc[med.groupby("prefix")["median"].idxmax()].set_index("prefix")["run"]
        if len(med)
        else pd.Series(dtype=str)
    )
    per["slowest_run"] = per["prefix"].map(slow).fillna("")
    per = per.sort_values(["prefix", "run"], kind="stable")
    page.html("<h3>The same prefix across runs</h3>")
    page.figure("compare-prefixes", figures.compare_prefixes(per, names))
    page.html(
        table(
            per,
            [
                ("prefix", "prefix", ""),
                ("run", "run", ""),
                ("tasks", "tasks", "int"),
                ("executions", "executions", "int"),
                ("compute_s", "compute (s)", "s3"),
                ("median", "median (s)", "s"),
                ("p95", "p95 (s)", "s"),
                ("slowest_run", "slowest median in", ""),
            ],
            name="compare-prefixes",
        )
    )
    return {"runs": names}


def campaign_table(c: Any, name: str) -> str:
    """The HTML table of a campaign comparison: one row per run against the baseline, its
    difference, top cause and whether it is an outlier (the compare page and the store page)."""
    return table(
        c.runs.assign(flag=np.where(c.runs["outlier"], "outlier", "")),
        [
            ("run", "run", ""),
            ("makespan_s", "makespan (s)", "s3"),
            ("difference_s", "difference (s)", "s3"),
            ("top_cause", "top cause", ""),
            ("top_prefix", "prefix", ""),
            ("top_seconds", "its seconds", "s3"),
            ("flag", "", ""),
        ],
        name=name,
    )
