"""Why was one run slower than another: ``metaprov compare`` as a library call.

Input: run directories, or run ids in a store (an embedded store directory or a SPARQL
endpoint). Output: a :class:`Comparison`: for each run against the baseline an
:class:`~metaprov.analysis.compare.Explanation` (the makespan difference cut into named causes
that add up to it, the tasks matched and changed most, workers, hosts and files), and for a
campaign one row per run with its distance from the baseline, its top cause and whether it is
an outlier. :mod:`metaprov.compare.render` writes it as text or JSON, :mod:`metaprov.compare.page`
as an offline HTML page. The method is in ``docs/compare.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from metaprov.analysis.compare import Explanation, explain
from metaprov.analysis.environment import software_evidence
from metaprov.analysis.timeline import Blame, Timeline, blame, timeline_from_records
from metaprov.errors import UsageError

#: A run is an outlier when its makespan is this many scaled MADs from the campaign's median.
OUTLIER_Z = 3.5


#: Hooks that add evidence rows to every explanation: ``hook(base_timeline, other_timeline)``
#: returns a list of ``{"kind": ..., "detail": ...}`` (e.g. a software environment difference).
EVIDENCE_HOOKS: list[Callable[[Timeline, Timeline], list[dict[str, Any]]]] = [software_evidence]


@dataclass
class Comparison:
    """The answer of :func:`compare`.

    Attributes:
        baseline: label of the baseline run.
        runs: per run: makespan and its parts, compute, concurrency (one row per run, inputs'
            order), with ``difference_s`` from the baseline, ``top_cause``, ``top_seconds``,
            ``top_prefix`` and ``outlier``.
        explanations: one per run other than the baseline, in the runs' order.
        blames: each run's makespan shared out (label -> :class:`Blame`).
        seconds: wall time of the comparison (reading included).
        read_seconds: of which reading the runs.
    """

    baseline: str
    runs: pd.DataFrame
    explanations: list[Explanation]
    blames: dict[str, Blame] = field(default_factory=dict)
    seconds: float = 0.0
    read_seconds: float = 0.0

    @property
    def pair(self) -> Explanation:
        """The only explanation (two runs compared)."""
        if len(self.explanations) != 1:
            raise UsageError(f"{len(self.explanations) + 1} runs compared, not two")
        return self.explanations[0]

    def to_dict(self) -> dict[str, Any]:
        from metaprov.compare.render import comparison_dict

        return comparison_dict(self)

    def text(self, **kw: Any) -> str:
        from metaprov.compare.render import comparison_text

        return comparison_text(self, **kw)


def _unique_labels(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        n = seen.get(lab, 0)
        seen[lab] = n + 1
        out.append(lab if n == 0 else f"{lab}#{n + 1}")
    return out


def read_timelines(
    runs: Sequence[str | Path],
    *,
    store: Any = None,
    endpoint: str | None = None,
    darshan: bool = True,
    progress: bool = False,
) -> list[Timeline]:
    """The timelines of ``runs``: run directories, or run ids (or names) in a store."""
    from tqdm import tqdm

    out: list[Timeline] = []
    if store is not None or endpoint is not None:
        from metaprov.queries.compare import timeline_from_store
        from metaprov.store import Store, open_store

        st = store if isinstance(store, Store) else open_store(store, endpoint, read_only=True)
        try:
            for run in tqdm(runs, desc="reading runs", unit="run", disable=not progress):
                out.append(timeline_from_store(st, str(run)))
        finally:
            if st is not store:
                st.close()
        return out
    from metaprov.ingest import read_run
    from metaprov.link import link_io

    for run in tqdm(runs, desc="reading runs", unit="run", disable=not progress):
        records = read_run(run, darshan=darshan)
        if records.darshan is not None and records.io is None:
            link_io(records)
        out.append(timeline_from_records(records, Path(run).name))
    return out


def write_trace(
    runs: Sequence[str | Path],
    output: str | Path,
    *,
    darshan: bool = True,
    progress: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write run directories on one time axis as a Trace Event Format file (Perfetto,
    chrome://tracing, speedscope): each run's processes named after the run (its directory
    name, made unique as in :func:`compare`), each run's times from its own start.

    Raises:
        UsageError: fewer than two runs.
        InputError: a run cannot be read.
        OutputError: the output cannot be written.

    Example:
        >>> write_trace(["runs/R3", "runs/R7"], "r3-r7.trace.json")  # doctest: +SKIP
    """
    from tqdm import tqdm

    from metaprov.export import input_files
    from metaprov.ingest import read_run
    from metaprov.link import link_io
    from metaprov.write.output import open_output
    from metaprov.write.trace import write_trace_runs

    if len(runs) < 2:
        raise UsageError("a comparison trace needs two runs or more")
    labels = _unique_labels([Path(r).name for r in runs])
    read = []
    for run in tqdm(runs, desc="reading runs", unit="run", disable=not progress):
        records = read_run(run, darshan=darshan)
        if records.darshan is not None and records.io is None:
            link_io(records)
        read.append(records)
    inputs = [*runs, *(f for records in read for f in input_files(records))]
    with open_output(output, inputs=inputs, overwrite=overwrite) as out:
        write_trace_runs(list(zip(labels, read, strict=True)), out)
    return Path(output)


def compare(
    runs: Sequence[str | Path | Timeline],
    *,
    baseline: str | int | None = None,
    store: Any = None,
    endpoint: str | None = None,
    darshan: bool = True,
    progress: bool = False,
) -> Comparison:
    """Compare runs of one workflow and explain their differences in makespan.

    Args:
        runs: run directories (or run ids / names with ``store`` or ``endpoint``, or
            :class:`~metaprov.analysis.timeline.Timeline` objects); at least two.
        baseline: the run the others are compared with: ``None`` (the first run),
            ``"median"`` (the run whose makespan is the median: the lower of the middle two
            for an even number), or a run's label (directory name, run id or name) or index.
        store: an embedded store directory or an open store holding the runs.
        endpoint: a SPARQL query endpoint holding the runs.
        darshan: read and link Darshan logs when present (run directories only).
        progress: show a progress bar.

    Returns:
        A :class:`Comparison`.

    Raises:
        UsageError: fewer than two runs, or an unknown baseline.
        InputError: a run cannot be read, or two runs have nothing in common.

    Example:
        >>> c = compare(["runs/R3", "runs/R7"])  # doctest: +SKIP
        >>> c.pair.difference_s, c.pair.causes.head()  # doctest: +SKIP
    """
    t0 = time.perf_counter()
    if len(runs) < 2:
        raise UsageError(
            "compare needs two runs or more", hint="metaprov compare BASELINE OTHER [OTHER...]"
        )
    given = [r for r in runs if isinstance(r, Timeline)]
    if given and len(given) != len(runs):
        raise UsageError("give either timelines or run paths/ids, not both")
    timelines = (
        list(given)
        if given
        else read_timelines(
            [str(r) for r in runs],
            store=store,
            endpoint=endpoint,
            darshan=darshan,
            progress=progress,
        )
    )
    labels = _unique_labels([t.label for t in timelines])
    for t, lab in zip(timelines, labels, strict=True):
        t.label = lab
    t_read = time.perf_counter() - t0
    blames = [blame(t) for t in timelines]
    ib = _baseline_index(timelines, blames, baseline)
    base = blames[ib]
    from tqdm import tqdm

    explanations = []
    for i, bl in enumerate(tqdm(blames, desc="comparing", unit="run", disable=not progress)):
        if i == ib:
            continue
        ex = explain(base, bl)
        for hook in EVIDENCE_HOOKS:
            ex.evidence.extend(hook(base.timeline, bl.timeline))
        explanations.append(ex)
    table = _campaign_table(blames, ib, explanations)
    return Comparison(
        baseline=labels[ib],
        runs=table,
        explanations=explanations,
        blames={lab: bl for lab, bl in zip(labels, blames, strict=True)},
        seconds=time.perf_counter() - t0,
        read_seconds=t_read,
    )


def _baseline_index(timelines: list[Timeline], blames: list[Blame], baseline: Any) -> int:
    if baseline is None:
        return 0
    if isinstance(baseline, int) or (isinstance(baseline, str) and baseline.isdigit()):
        i = int(baseline)
        if not 0 <= i < len(timelines):
            raise UsageError(f"no run number {i}: {len(timelines)} runs are compared (0-based)")
        return i
    if baseline == "median":
        spans = np.array([b.makespan for b in blames])
        order = np.argsort(spans, kind="stable")
        return int(order[(len(order) - 1) // 2])
    for i, t in enumerate(timelines):
        if baseline in (t.label, t.run_id, Path(t.label).name):
            return i
    raise UsageError(
        f"no run {baseline!r} among the runs compared",
        hint="give 'median', a run's directory name or id, or its 0-based number: "
        + ", ".join(t.label for t in timelines),
    )


def _campaign_table(blames: list[Blame], ib: int, explanations: list[Explanation]) -> pd.DataFrame:
    from metaprov.analysis.compare import run_table

    table = run_table(*blames)
    spans = table["makespan_s"].to_numpy(dtype="float64")
    table["difference_s"] = spans - spans[ib]
    tops: list[tuple[Any, Any, Any]] = []
    it = iter(explanations)
    for i in range(len(blames)):
        if i == ib:
            tops.append(("baseline", None, None))
            continue
        top = next(it).top
        tops.append(
            (None, None, None)
            if top is None
            else (top["cause"], float(top["seconds"]), top["prefix"])
        )
    # object columns holding None (not NaN) where a run names no cause above the noise
    table["top_cause"] = pd.Series([t[0] for t in tops], dtype=object, index=table.index)
    table["top_seconds"] = pd.Series(
        [np.nan if t[1] is None else t[1] for t in tops], dtype="float64", index=table.index
    )
    table["top_prefix"] = pd.Series(
        [t[2] if isinstance(t[2], str) else None for t in tops], dtype=object, index=table.index
    )
    med = float(np.median(spans))
    mad = float(np.median(np.abs(spans - med))) * 1.4826
    if len(spans) >= 3 and mad > 0:
        table["z"] = (spans - med) / mad
        table["outlier"] = np.abs(table["z"]) > OUTLIER_Z
    else:
        table["z"] = np.nan
        table["outlier"] = False
    return table


__all__ = [
    "EVIDENCE_HOOKS",
    "OUTLIER_Z",
    "Comparison",
    "compare",
    "read_timelines",
]

from metaprov._callable import make_callable  # noqa: E402 - after compare() is defined

make_callable(__name__)  # metaprov.compare(...) also once this package has been imported
