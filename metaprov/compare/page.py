"""The comparison as an offline HTML page in the report's style (``metaprov compare -o``).

Input: a :class:`~metaprov.compare.Comparison`. Output: one self-contained HTML file (Bokeh's
JavaScript inline, nothing fetched): the explanation in plain lines, the causes as a waterfall
from the baseline's makespan to the other run's, the task streams of both runs on one time axis
(seconds from each run's start), the causes, the tasks that changed most, hosts and files; for a
campaign, one row per run against the baseline with outliers flagged, then each run's causes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from metaprov.analysis.compare import Explanation
    from metaprov.analysis.timeline import Blame
    from metaprov.compare import Comparison

#: Executions drawn per run in a task stream (the longest first beyond it).
MAX_DRAWN = 20_000
#: Causes drawn as their own bar in the waterfall; the rest are one bar "other causes".
WATERFALL_BARS = 10

CAUSE_COLORS = {
    "compute": "#1f77b4",
    "parallelism": "#9467bd",
    "waiting": "#ff7f0e",
    "transfers": "#d62728",
    "serialisation": "#ff9896",
    "spill": "#17becf",
    "scheduler": "#98df8a",
    "lost-workers": "#393b79",
    "io": "#222222",
    "retries": "#e377c2",
    "worker": "#8c564b",
    "startup": "#7f7f7f",
    "tail": "#bcbd22",
    "unexplained": "#c7c7c7",
    "other": "#aec7e8",
}


def _label(r: Any) -> str:
    where = r["prefix"] if isinstance(r["prefix"], str) else ""
    if isinstance(r["worker"], str) and r["cause"] == "worker":
        where = f"{where} @ {r['worker'].split('://')[-1]}"
    return f"{r['cause']} {where}".strip()


def waterfall(ex: Explanation) -> Any:
    """Bars from the baseline's makespan, one per cause, to the other run's makespan."""
    from bokeh.models import ColumnDataSource, FactorRange
    from bokeh.plotting import figure

    base = float(ex.runs["makespan_s"].iloc[0])
    c = ex.causes
    shown = c.head(WATERFALL_BARS)
    rest = c.iloc[WATERFALL_BARS:]
    labels = [_label(r) for _, r in shown.iterrows()]
    values = shown["seconds"].astype(float).tolist()
    colors = [CAUSE_COLORS.get(k, "#999999") for k in shown["cause"]]
    if len(rest):
        labels.append(f"{len(rest)} other causes")
        values.append(float(rest["seconds"].sum()))
        colors.append(CAUSE_COLORS["other"])
    # labels must be unique factors
    seen: dict[str, int] = {}
    uniq = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        uniq.append(lab if seen[lab] == 1 else f"{lab} ({seen[lab]})")
    names = [f"baseline {ex.baseline}", *uniq, f"other {ex.other}"]
    starts = base + np.r_[0.0, np.cumsum(values)[:-1]] if values else np.zeros(0)
    tops = starts + np.asarray(values)
    # the axis starts near the smallest level reached, so that seconds of a long run show
    levels = np.r_[base, starts, tops, base + float(np.sum(values))]
    span = float(levels.max() - levels.min()) or max(base, 1e-3)
    bottom = max(0.0, float(levels.min()) - 0.6 * span)
    lo = [bottom, *np.minimum(starts, tops).tolist(), bottom]
    hi = [base, *np.maximum(starts, tops).tolist(), base + float(np.sum(values))]
    src = ColumnDataSource(
        {
            "name": names,
            "lo": lo,
            "hi": hi,
            "delta": [base, *values, base + float(np.sum(values))],
            "color": ["#1f3b57", *colors, "#1f3b57"],
        }
    )
    p = figure(
        x_range=FactorRange(*names),
        height=380,
        sizing_mode="stretch_width",
        tools="hover,save,reset",
        title="makespan: the baseline, each cause's seconds, the other run (causes add up "
        "exactly; the axis does not start at 0)",
        name="compare-waterfall",
    )
    p.vbar(x="name", bottom="lo", top="hi", width=0.8, color="color", source=src)
    p.xaxis.major_label_orientation = 0.9
    p.yaxis.axis_label = "seconds"
    p.hover.tooltips = [("", "@name"), ("seconds", "@delta{+0.000}")]
    p.y_range.start = bottom
    return p


def _stream_rows(bl: Blame, run: str) -> pd.DataFrame:
    ex = bl.executions
    if len(ex) > MAX_DRAWN:
        ex = ex.iloc[np.argsort(-ex["duration"].to_numpy(), kind="stable")[:MAX_DRAWN]]
    t0 = bl.timeline.start
    lane = ex["worker"].astype(str) + " / " + ex["thread"].astype(str)
    return pd.DataFrame(
        {
            "run": run,
            "lane": (run + " | " + lane.str.replace(r"^[a-z]+://", "", regex=True)).to_numpy(),
            "left": (ex["start"].to_numpy() - t0) / 1e6,
            "right": (ex["end"].to_numpy() - t0) / 1e6,
            "key": ex["key"].astype(str).to_numpy(),
            "prefix": ex["prefix"].astype(str).to_numpy(),
            "ok": np.where(ex["ok"].to_numpy(), "result", "failed"),
        }
    )


def task_streams(base: Blame, other: Blame, ex: Explanation) -> Any:
    """Both runs' executions on one time axis (seconds from each run's start), lane per thread."""
    from bokeh.models import ColumnDataSource, FactorRange
    from bokeh.plotting import figure

    from metaprov.report.figures import palette

    rows = pd.concat(
        [_stream_rows(base, f"baseline {ex.baseline}"), _stream_rows(other, f"other {ex.other}")],
        ignore_index=True,
    )
    if not len(rows):
        return None
    prefixes = sorted(set(rows["prefix"]))
    pal = palette(len(prefixes))
    color = dict(zip(prefixes, pal * (len(prefixes) // len(pal) + 1), strict=False))
    rows["color"] = rows["prefix"].map(color)
    lanes = list(dict.fromkeys(rows.sort_values(["run", "lane"], kind="stable")["lane"]))
    src = ColumnDataSource({c: rows[c].tolist() for c in rows.columns})
    p = figure(
        y_range=FactorRange(*lanes[::-1]),
        height=min(900, 120 + 14 * len(lanes)),
        sizing_mode="stretch_width",
        tools="hover,xpan,xwheel_zoom,box_zoom,reset,save",
        title="task streams: the baseline's lanes above, the other run's below "
        "(seconds since each run's start; colour: prefix)",
        name="compare-streams",
    )
    p.hbar(y="lane", left="left", right="right", height=0.8, color="color", source=src)
    p.xaxis.axis_label = "seconds since the run's start"
    p.yaxis.major_label_text_font_size = "7pt"
    p.hover.tooltips = [
        ("key", "@key"),
        ("prefix", "@prefix"),
        ("", "@left{0.000} - @right{0.000} s"),
        ("", "@ok"),
    ]
    return p


def _explanation_sections(page: Any, c: Comparison, ex: Explanation, sid: str, nav: bool) -> None:
    from metaprov.compare.render import cause_phrase, explanation_lines
    from metaprov.report.page import esc, table

    page.section(sid, f"{ex.other} against {ex.baseline}", nav=nav)
    page.html(
        '<p class="note" data-field="explanation">'
        + "<br>".join(esc(line) for line in explanation_lines(ex))
        + "</p>"
    )
    al = ex.alignment
    counts = ", ".join(
        f"{v:,} by {k}" for k, v in al.counts.items() if k in ("key", "index", "prefix")
    )
    page.html(
        f'<p class="muted">tasks matched: {esc(counts)}; {al.counts["baseline_only"]:,} in the '
        f"baseline only, {al.counts['other_only']:,} in the other only"
        + (f"; prefixes added: {esc(', '.join(al.added))}" if al.added else "")
        + (f"; removed: {esc(', '.join(al.removed))}" if al.removed else "")
        + "</p>"
    )
    for n in ex.notes:
        page.html(f'<p class="note">{esc(n)}</p>')
    page.figure(f"{sid}-waterfall", waterfall(ex))
    page.html("<h3>Causes (seconds add up to the difference)</h3>")
    cz = ex.causes.assign(
        where=[
            _label(r).split(" ", 1)[1] if " " in _label(r) else "" for _, r in ex.causes.iterrows()
        ],
        sig=np.where(ex.causes["significant"], "above noise", ""),
        said=[cause_phrase(r) for _, r in ex.causes.iterrows()],
    )
    page.html(
        table(
            cz,
            [
                ("cause", "cause", ""),
                ("where", "prefix / worker", ""),
                ("seconds", "seconds", "s"),
                ("noise", "noise (s)", "s"),
                ("sig", "", ""),
                ("said", "what and evidence", ""),
            ],
            name=f"{sid}-causes",
        )
    )
    bl = c.blames
    if ex.baseline in bl and ex.other in bl:
        page.html("<h3>Task streams</h3>")
        page.figure(f"{sid}-streams", task_streams(bl[ex.baseline], bl[ex.other], ex))
    page.html("<h3>Tasks that changed most</h3>")
    page.html(
        table(
            ex.tasks,
            [
                ("key_o", "key", ""),
                ("prefix", "prefix", ""),
                ("rule", "matched by", ""),
                ("duration_b", "before (s)", "s"),
                ("duration_o", "after (s)", "s"),
                ("delta_s", "change (s)", "s"),
                ("ratio", "ratio", "s3"),
                ("worker_b", "worker before", ""),
                ("thread_b", "thread", ""),
                ("worker_o", "worker after", ""),
                ("thread_o", "thread", ""),
            ],
            name=f"{sid}-tasks",
        )
    )
    if len(ex.hosts):
        page.html("<h3>Hosts</h3>")
        page.html(
            table(
                ex.hosts,
                [
                    ("host", "host", ""),
                    ("tasks_b", "tasks before", "int"),
                    ("tasks_o", "after", "int"),
                    ("compute_b", "compute before (s)", "s3"),
                    ("compute_o", "after (s)", "s3"),
                    ("delta_s", "change (s)", "s3"),
                ],
                name=f"{sid}-hosts",
            )
        )
    if len(ex.workers):
        page.html("<h3>Workers</h3>")
        page.html(
            table(
                ex.workers,
                [
                    ("run", "run", ""),
                    ("worker", "worker", ""),
                    ("tasks", "tasks", "int"),
                    ("compute_s", "compute (s)", "s3"),
                    ("share_s", "share of makespan (s)", "s3"),
                    ("slowness", "duration / prefix median", "s3"),
                ],
                name=f"{sid}-workers",
            )
        )
    if len(ex.files):
        page.html("<h3>Files (Darshan I/O)</h3>")
        page.html(
            table(
                ex.files.head(50),
                [
                    ("path", "path", ""),
                    ("bytes_b", "bytes before", "bytes"),
                    ("bytes_o", "after", "bytes"),
                    ("seconds_b", "seconds before", "s"),
                    ("seconds_o", "after", "s"),
                    ("delta_s", "change (s)", "s"),
                ],
                name=f"{sid}-files",
            )
        )


def render(c: Comparison, title: str | None = None) -> str:
    """The page's HTML text."""
    from metaprov.report import figures, require_bokeh
    from metaprov.report.page import Page, campaign_table, deterministic_ids

    require_bokeh()
    exs = c.explanations
    if title is None:
        title = (
            f"metaprov compare: {exs[0].other} against {exs[0].baseline}"
            if len(exs) == 1
            else f"metaprov compare: {len(c.runs)} runs against {c.baseline}"
        )
    page = Page(title)
    with deterministic_ids():
        if len(exs) > 1:
            page.section("campaign", "Runs against the baseline")
            page.figure("compare-campaign", figures.campaign_runs(c))
            page.html(campaign_table(c, "compare-runs"))
        for i, ex in enumerate(exs):
            _explanation_sections(page, c, ex, f"pair-{i + 1}", nav=len(exs) <= 12)
        page.facts = {"version": 1, "comparison": c.to_dict(), "sections": list(page.ids)}
        return page.render()


def write_page(
    c: Comparison,
    output: str | Path,
    title: str | None = None,
    *,
    inputs: Sequence[str | Path] = (),
    stores: Sequence[str | Path] = (),
    overwrite: bool = False,
) -> Path:
    """Write the page to ``output`` atomically; returns its path.

    ``inputs`` (the compared run directories) and ``stores`` are never written over or into;
    an existing ``output`` is refused unless ``overwrite`` (the CLI's ``--force``)."""
    from metaprov.report import _output, _write_atomic

    out = _output(output, inputs, stores, overwrite=overwrite)
    _write_atomic(out, render(c, title), inputs, stores, overwrite=overwrite)
    return out


__all__ = ["render", "write_page"]
