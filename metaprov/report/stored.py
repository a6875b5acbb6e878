"""The comparison page of the runs a triple store holds (a campaign loaded with ``metaprov load``).

Input: an open :class:`~metaprov.store.Store` (the embedded store, a SPARQL endpoint, or an
in-memory store holding a campaign export's shards). Output: a :class:`StoreView` of the store's
answers to the packaged questions ``runs``, ``prefix-summary`` and ``prefix-across-runs``, which
:func:`add_store` draws: run spans and task counts side by side, the same prefix across runs, and
which run was slowest for each prefix. The page shows the store's answers as they are: nothing is
recomputed from records (a store holds no records), so the page and ``metaprov query`` agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from metaprov.errors import InputError, StoreError
from metaprov.queries import run_question
from metaprov.store import Store

#: Runs drawn in the figures at most (the tables list every run).
MAX_RUNS_DRAWN = 60


@dataclass
class StoreView:
    """What the comparison page of a store shows (see :func:`store_view`)."""

    location: str
    runs: pd.DataFrame  # the ``runs`` answer, plus ``label`` (number: name)
    prefixes: pd.DataFrame  # ``prefix-across-runs`` with ``total`` of ``prefix-summary``, ``label``
    slowest: pd.DataFrame  # per prefix: the run with the largest mean, its deviation
    notes: list[str] = field(default_factory=list)
    comparison: Any = None  # metaprov.compare.Comparison of the runs against the median run


def _label(i: int, name: Any, run_id: str) -> str:
    return f"{i + 1}: {name if isinstance(name, str) and name else run_id}"


def store_view(store: Store, run_ids: Sequence[str] | None = None) -> StoreView:
    """Ask ``store`` what the comparison page shows.

    Args:
        store: an open store holding one named graph per run.
        run_ids: only these runs (ids or run names); default every run in the store.

    Raises:
        StoreError: the store holds no run.
        InputError: a run of ``run_ids`` is not in the store.
    """
    runs = run_question(store, "runs")
    assert isinstance(runs, pd.DataFrame)
    if run_ids:
        wanted = set(run_ids)
        keep = runs["run_id"].isin(wanted) | runs["run_name"].isin(wanted)
        unknown = wanted - set(runs["run_id"]) - set(runs["run_name"].dropna())
        if unknown:
            raise InputError(
                f"the store {store.location} holds no run {', '.join(sorted(unknown))}",
                hint="see the runs it holds: metaprov query runs",
            )
        runs = runs[keep]
    if not len(runs):
        raise StoreError(
            f"the store {store.location} holds no run, so there is nothing to compare",
            hint=f"load runs into it first: metaprov load RUN --store {store.location}",
        )
    runs = runs.reset_index(drop=True)
    runs["label"] = [
        _label(i, n, r)
        for i, (n, r) in enumerate(zip(runs["run_name"], runs["run_id"], strict=True))
    ]
    across = run_question(store, "prefix-across-runs")
    summary = run_question(store, "prefix-summary")
    assert isinstance(across, pd.DataFrame) and isinstance(summary, pd.DataFrame)
    notes = list(across.attrs.get("notes", []))
    across = across[across["run_id"].isin(set(runs["run_id"]))]
    total = summary.set_index(["run_id", "prefix"])["total"]
    across = across.assign(
        total=total.reindex(pd.MultiIndex.from_frame(across[["run_id", "prefix"]])).to_numpy(),
        label=across["run_id"].map(runs.set_index("run_id")["label"]).to_numpy(),
    )
    across = across.sort_values(["prefix", "label"], kind="stable").reset_index(drop=True)
    # Which run was slowest for each prefix (largest mean), among prefixes run in >= 2 runs.
    several = across[across["runs"].fillna(0) >= 2].dropna(subset=["mean"])
    if len(several):
        slow = several.loc[several.groupby("prefix", sort=True)["mean"].idxmax()]
        slowest = slow[["prefix", "label", "mean", "campaign_mean", "deviation", "runs"]]
        slowest = slowest.sort_values(["deviation", "prefix"], ascending=[False, True])
    else:
        slowest = pd.DataFrame(
            columns=["prefix", "label", "mean", "campaign_mean", "deviation", "runs"]
        )
    comparison = None
    if len(runs) >= 2:
        from metaprov.compare import compare
        from metaprov.errors import MetaprovError

        try:
            ids = list(runs["run_id"].head(MAX_RUNS_DRAWN))
            comparison = compare(ids, baseline="median", store=store)
        except MetaprovError as exc:
            notes.append(f"the runs could not be compared: {exc}")
    return StoreView(
        location=str(store.location),
        runs=runs,
        prefixes=across,
        slowest=slowest.reset_index(drop=True),
        notes=notes,
        comparison=comparison,
    )


def _json(df: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    """Rows as JSON types: NA as None, times as UTC text with Z, numbers as int or float."""
    out = []
    for rec in df[columns].to_dict("records"):
        row: dict[str, Any] = {}
        for k, v in rec.items():
            if v is None or v is pd.NA or (isinstance(v, float) and not np.isfinite(v)):
                row[k] = None
            elif isinstance(v, pd.Timestamp):
                row[k] = v.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if not pd.isna(v) else None
            elif isinstance(v, (np.integer, int)) and not isinstance(v, bool):
                row[k] = int(v)
            elif isinstance(v, (np.floating, float)):
                row[k] = float(v)
            else:
                row[k] = None if pd.isna(v) else str(v)
        out.append(row)
    return out


RUN_COLUMNS = [
    "run_id",
    "run_name",
    "job_id",
    "start",
    "end",
    "seconds",
    "tasks",
    "executions",
    "workers",
    "transfers",
]
PREFIX_COLUMNS = [
    "prefix",
    "run_id",
    "executions",
    "total",
    "mean",
    "min",
    "max",
    "spread",
    "runs",
    "campaign_mean",
    "deviation",
]


def store_facts(view: StoreView) -> dict[str, Any]:
    """The figures shown on the page, as JSON types (the store's answers, row for row)."""
    why = None
    if view.comparison is not None:
        from metaprov.compare.render import records

        c = view.comparison
        why = {
            "baseline": c.baseline,
            "runs": records(
                c.runs[
                    [
                        "run",
                        "run_id",
                        "makespan_s",
                        "difference_s",
                        "top_cause",
                        "top_prefix",
                        "top_seconds",
                        "outlier",
                    ]
                ]
            ),
        }
    return {
        "why": why,
        "location": view.location,
        "runs": _json(view.runs, [*RUN_COLUMNS, "label"]),
        "prefixes": _json(view.prefixes, PREFIX_COLUMNS),
        "slowest": _json(view.slowest, ["prefix", "label", "mean", "deviation"]),
        "notes": list(view.notes),
    }


def _add_why(page: Any, view: StoreView) -> None:
    """Each run against the run of median makespan: its difference, top cause, outliers."""
    from metaprov.compare.render import explanation_lines
    from metaprov.report import figures
    from metaprov.report.page import campaign_table, esc

    c = view.comparison
    page.section("store-why", "Why runs differ")
    page.html(
        f'<p class="muted">each run against the run of median makespan ({esc(c.baseline)}), '
        "its difference cut into causes that add up to it (<code>metaprov compare --store ... "
        "--baseline median</code> gives the same numbers); outliers: more than 3.5 scaled "
        "median absolute deviations from the median makespan.</p>"
    )
    page.figure("store-why-runs", figures.campaign_runs(c))
    page.html(campaign_table(c, "store-why"))
    lines = [explanation_lines(e, top=2)[0] for e in c.explanations]
    page.html('<ul class="muted">' + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul>")


def add_store(page: Any, view: StoreView) -> dict[str, Any]:
    """The sections of a store's comparison page; returns its facts."""
    from metaprov.report import figures
    from metaprov.report.page import esc, table

    runs = view.runs
    page.section("store-runs", "Runs in the store")
    page.html(
        f'<p class="muted">{len(runs):,} run(s) in {esc(view.location)}, as answered by the '
        "packaged questions <code>runs</code>, <code>prefix-summary</code> and "
        "<code>prefix-across-runs</code> (<code>metaprov query NAME</code> gives the same rows).</p>"
    )
    for note in view.notes:
        page.html(f'<p class="note">{esc(note)}</p>')
    page.figure("store-spans", figures.store_runs(runs.head(MAX_RUNS_DRAWN)))
    if len(runs) > MAX_RUNS_DRAWN:
        page.html(f'<p class="muted">first {MAX_RUNS_DRAWN} of {len(runs):,} runs drawn</p>')
    page.html(
        table(
            runs,
            [
                ("label", "run", ""),
                ("run_id", "run id", ""),
                ("job_id", "job", ""),
                ("start", "start", "time"),
                ("end", "end", "time"),
                ("seconds", "span (s)", "s3"),
                ("tasks", "tasks", "int"),
                ("executions", "executions", "int"),
                ("workers", "workers", "int"),
                ("transfers", "transfers", "int"),
            ],
            name="store-runs",
        )
    )

    if view.comparison is not None:
        _add_why(page, view)

    page.section("store-prefixes", "The same prefix across runs")
    per = view.prefixes.rename(columns={"label": "run", "total": "compute_s"})
    labels = list(runs["label"].head(MAX_RUNS_DRAWN))
    page.figure(
        "store-compare-prefixes",
        figures.compare_prefixes(per[per["run"].isin(set(labels))], labels),
    )
    page.html("<h3>Slowest run per prefix (prefixes run in two runs or more)</h3>")
    sl = view.slowest.assign(pct=view.slowest["deviation"] * 100)
    page.html(
        table(
            sl,
            [
                ("prefix", "prefix", ""),
                ("label", "slowest run (largest mean)", ""),
                ("mean", "its mean (s)", "s"),
                ("campaign_mean", "mean over runs (s)", "s"),
                ("pct", "slower than usual by (%)", "s3"),
                ("runs", "runs", "int"),
            ],
            name="store-slowest",
        )
    )
    page.html("<h3>Every prefix in every run</h3>")
    page.html(
        table(
            per.assign(pct=per["deviation"] * 100),
            [
                ("prefix", "prefix", ""),
                ("run", "run", ""),
                ("executions", "executions", "int"),
                ("compute_s", "compute (s)", "s3"),
                ("mean", "mean (s)", "s"),
                ("min", "min (s)", "s"),
                ("max", "max (s)", "s"),
                ("spread", "max - min (s)", "s"),
                ("pct", "mean vs runs' mean (%)", "s3"),
            ],
            name="store-prefixes",
        )
    )
    return store_facts(view)
