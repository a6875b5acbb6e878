"""A :class:`~metaprov.compare.Comparison` as text (for people) and as JSON-ready data (scripts).

The JSON of two runs is one object: ``baseline``, ``other``, ``difference_s`` and ``causes`` (a
list ranked by ``seconds``, each ``{"cause", "seconds", "prefix"/"worker"/"file" where it
applies, "noise", "significant", "evidence"}``), then ``totals``, ``alignment``, ``tasks``,
``workers``, ``hosts``, ``files``, ``runs``, ``evidence`` and ``notes``. Of more runs:
``baseline``, ``runs`` (one row per run) and ``comparisons`` (one such object per other run).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from metaprov.analysis.compare import Explanation
    from metaprov.compare import Comparison


def _json_value(v: Any) -> Any:
    if v is None or v is pd.NA:
        return None
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (np.integer, int)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if not math.isfinite(f) else f
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return str(v)


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON types (NA as None)."""
    return [{str(k): _json_value(v) for k, v in r.items()} for r in df.to_dict("records")]


def explanation_dict(ex: Explanation) -> dict[str, Any]:
    causes = []
    for r in ex.causes.to_dict("records"):
        row: dict[str, Any] = {"cause": r["cause"], "seconds": float(r["seconds"])}
        for k in ("prefix", "worker", "file"):
            v = _json_value(r[k])
            if v is not None:
                row[k] = v
        row["noise"] = float(r["noise"])
        row["significant"] = bool(r["significant"])
        row["evidence"] = _json_value(r["evidence"])
        causes.append(row)
    al = ex.alignment
    return {
        "baseline": ex.baseline,
        "other": ex.other,
        "difference_s": ex.difference_s,
        "causes": causes,
        "totals": {k: float(v) for k, v in ex.totals.items()},
        "explanation": explanation_lines(ex),
        "alignment": {
            "matched": dict(al.counts),
            "same_graph": al.same_graph,
            "prefixes_added": list(al.added),
            "prefixes_removed": list(al.removed),
        },
        "tasks": records(ex.tasks),
        "workers": records(ex.workers),
        "hosts": records(ex.hosts),
        "files": records(ex.files.head(200)),
        "runs": records(ex.runs),
        "evidence": _json_value(ex.evidence),
        "notes": list(ex.notes),
    }


def comparison_dict(c: Comparison) -> dict[str, Any]:
    if len(c.explanations) == 1:
        return explanation_dict(c.explanations[0])
    return {
        "baseline": c.baseline,
        "runs": records(c.runs),
        "comparisons": [explanation_dict(e) for e in c.explanations],
    }


# -- text ---------------------------------------------------------------------------------------


def _s(x: float) -> str:
    return f"{abs(x):.3g} s" if abs(x) < 10 else f"{abs(x):.1f} s"


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def cause_phrase(row: Any) -> str:
    """One cause in plain words, e.g. "33.0 s more compute in `dask_helper`"."""
    s = float(row["seconds"])
    more = "more" if s >= 0 else "less"
    ev = row["evidence"] if isinstance(row["evidence"], dict) else {}
    p = row["prefix"] if isinstance(row["prefix"], str) else None
    c = row["cause"]
    if c == "compute":
        cb, co = ev.get("compute_s", [0, 0])
        extra = ""
        if ev.get("added"):
            extra = " (a prefix the baseline does not have)"
        elif ev.get("removed"):
            extra = " (a prefix only the baseline has)"
        else:
            extra = f" ({co:.3g} s of task time vs {cb:.3g} s)"
        return f"{_s(s)} {more} compute in `{p}`{extra}"
    if c == "worker":
        r = ev.get("ratio_to_median")
        times = f": its `{p}` tasks took {r:.2f}x the other workers' median" if r else ""
        return f"{_s(s)} {more} on worker {row['worker']}{times}"
    if c == "parallelism":
        sb, so = ev.get("slots", [0, 0])
        qb, qo = ev.get("concurrency", [0, 0])
        return (
            f"{_s(s)} from {'less' if s >= 0 else 'more'} parallelism ({so:.3g} thread slots vs "
            f"{sb:.3g}; {qo:.2f} tasks running at once on average vs {qb:.2f})"
        )
    if c == "waiting":
        return f"{_s(s)} {more} waiting by ready `{p}` tasks (scheduling, queueing)"
    if c == "transfers":
        bb, bo = ev.get("bytes_in", [0, 0])
        tb, to = ev.get("transfer_s", [0, 0])
        return (
            f"{_s(s)} {more} waiting for data moved to `{p}` tasks ({_bytes(bo)} vs "
            f"{_bytes(bb)} moved in, {to:.3g} s vs {tb:.3g} s of transfers)"
        )
    if c == "serialisation":
        sb, so = ev.get("serialisation_s", [0, 0])
        bb, bo = ev.get("bytes_moved", [0, 0])
        return (
            f"{_s(s)} {more} waiting for data to be serialised, compressed and read back "
            f"between workers ({so:.3g} s vs {sb:.3g} s spent (de)serialising; {_bytes(bo)} vs "
            f"{_bytes(bb)} moved)"
        )
    if c == "spill":
        db, do = ev.get("spill_disk_s", [0, 0])
        bb, bo = ev.get("spilled_bytes", [0, 0])
        pb, po = ev.get("spilled_bytes_peak", [0, 0])
        moved = (
            f"{_bytes(bo)} vs {_bytes(bb)} written"
            if bo or bb
            else (f"at most {_bytes(po)} vs {_bytes(pb)} spilled")
        )
        return (
            f"{_s(s)} {more} held up by workers spilling to disk ({do:.3g} s vs {db:.3g} s of "
            f"disk reads and writes, {moved})"
        )
    if c == "scheduler":
        db, do = ev.get("dispatch_s", [0, 0])
        rb, ro = ev.get("transitions_per_s", [0, 0])
        return (
            f"{_s(s)} {more} with ready tasks not yet handed to a worker while threads were "
            f"idle (the scheduler: {do:.3g} s vs {db:.3g} s; {ro:.0f} vs {rb:.0f} transitions/s)"
        )
    if c == "lost-workers":
        wb, wo = ev.get("workers_lost", [0, 0])
        tb, to = ev.get("tasks_lost", [0, 0])
        rb, ro = ev.get("redone_s", [0, 0])
        return (
            f"{_s(s)} {more} from workers lost mid-run ({wo} vs {wb} worker(s) lost, {to} vs "
            f"{tb} task(s) taken back, {ro:.3g} s vs {rb:.3g} s of work redone, "
            f"{ev.get('capacity_lost_s', 0.0):+.3g} s of capacity)"
        )
    if c == "io":
        db, do = ev.get("darshan_s", [0, 0])
        return f"{_s(s)} {more} file I/O in `{p}` (Darshan: {do:.3g} s vs {db:.3g} s)"
    if c == "retries":
        fb, fo = ev.get("failed_attempts", [0, 0])
        return f"{_s(s)} {more} in failed attempts and retries of `{p}` ({fo} failed vs {fb})"
    if c == "startup":
        qb, qo = ev.get("queue_wait_s") or [None, None]
        queue = ""
        if qb is not None or qo is not None:
            fmt = lambda w: "unknown" if w is None else f"{w:.3g} s"  # noqa: E731
            queue = f" (batch jobs waiting in the queue: {fmt(qo)} vs {fmt(qb)})"
        return f"{_s(s)} {more} before the first task started{queue}"
    if c == "tail":
        return f"{_s(s)} {more} after the last task ended"
    return f"{_s(s)} unexplained ({ev.get('why', '')})"


def explanation_lines(ex: Explanation, top: int = 4, *, table_shown: bool = True) -> list[str]:
    """The explanation in a few plain lines: the ``top`` causes above the noise (ranked in the
    direction of the difference), and any other cause above the noise that is larger than one
    of those (a large cause in the other direction is never left out)."""
    d = ex.difference_s
    word = "longer" if d >= 0 else "shorter"
    head = f"{ex.other} took {_s(d)} {word} than {ex.baseline}"
    sig = ex.causes[ex.causes["significant"]]
    if not len(sig):
        noise = float(ex.causes["noise"].min()) if len(ex.causes) else 0.0
        return [f"{head}: no cause is above the run-to-run noise (about {_s(noise)} or more)."]
    shown = sig.head(top)
    smallest = float(shown["seconds"].abs().min())
    larger = sig.iloc[top:][sig.iloc[top:]["seconds"].abs() > smallest]
    shown = pd.concat([shown, larger])
    phrases = [cause_phrase(r) for _, r in shown.iterrows()]
    lines = [f"{head}: {phrases[0]}" + (";" if len(phrases) > 1 else ".")]
    for i, p in enumerate(phrases[1:], start=1):
        lines.append(f"  {p}" + (";" if i < len(phrases) - 1 else "."))
    rest = len(sig) - len(shown)
    if rest > 0:
        where = (
            "see the causes table above"
            if table_shown
            else f"`metaprov compare {ex.baseline} {ex.other}` lists them"
        )
        lines.append(f"  ({rest} smaller cause(s) above the noise: {where})")
    for e in ex.evidence[:5]:
        lines.append(f"  evidence: {e.get('kind', '')}: {e.get('detail', '')}")
    if len(ex.evidence) > 5:
        lines.append(f"  ({len(ex.evidence) - 5} more evidence rows in --json)")
    return lines


def _table(df: pd.DataFrame, cols: list[tuple[str, str, str]], limit: int) -> list[str]:
    if not len(df):
        return ["  (none)"]
    cells = []
    for _, r in df.head(limit).iterrows():
        row = []
        for c, _, kind in cols:
            v = r[c]
            if v is None or (isinstance(v, float) and not math.isfinite(v)) or v is pd.NA:
                row.append("")
            elif kind == "s":
                row.append(f"{float(v):+.3f}")
            elif kind == "f":
                row.append(f"{float(v):.3f}")
            elif kind == "r":
                row.append(f"{float(v):.2f}x")
            else:
                row.append(str(v))
        cells.append(row)
    heads = [h for _, h, _ in cols]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(heads)]
    out = ["  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))]
    for r in cells:
        out.append("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    if len(df) > limit:
        out.append(f"  ... {len(df) - limit:,} more")
    return out


def explanation_text(ex: Explanation, *, limit: int = 12) -> str:
    al = ex.alignment
    rb, ro = ex.runs.iloc[0], ex.runs.iloc[1]
    lines = [
        f"baseline  {ex.baseline}: {rb['makespan_s']:.3f} s ({rb['tasks']:,} tasks)",
        f"other     {ex.other}: {ro['makespan_s']:.3f} s ({ro['tasks']:,} tasks)",
        f"difference {ex.difference_s:+.3f} s",
        "matched   "
        + ", ".join(
            f"{v:,} by {k}" for k, v in al.counts.items() if k in ("key", "index", "prefix")
        )
        + f"; {al.counts['baseline_only']:,} in the baseline only, "
        f"{al.counts['other_only']:,} in the other only"
        + ("" if al.same_graph else " (the graphs differ)"),
    ]
    if al.added:
        lines.append(f"prefixes added   {', '.join(al.added[:10])}")
    if al.removed:
        lines.append(f"prefixes removed {', '.join(al.removed[:10])}")
    lines.append("")
    lines.append("causes (seconds add up to the difference; * above the noise)")
    c = ex.causes.assign(
        mark=np.where(ex.causes["significant"], "*", ""),
        where=[
            str(p) if isinstance(p, str) else (str(w) if isinstance(w, str) else "")
            for p, w in zip(ex.causes["prefix"], ex.causes["worker"], strict=True)
        ],
    )
    lines += _table(
        c,
        [
            ("mark", "", ""),
            ("cause", "cause", ""),
            ("seconds", "seconds", "s"),
            ("noise", "noise", "f"),
            ("where", "prefix/worker", ""),
        ],
        limit,
    )
    lines.append(f"  sum {float(ex.causes['seconds'].sum()):+.6f} s")
    lines.append("")
    lines.append("tasks that changed most")
    lines += _table(
        ex.tasks,
        [
            ("key_o", "key", ""),
            ("prefix", "prefix", ""),
            ("duration_b", "before", "f"),
            ("duration_o", "after", "f"),
            ("delta_s", "delta", "s"),
            ("ratio", "ratio", "r"),
            ("worker_o", "worker", ""),
            ("thread_o", "thread", ""),
        ],
        8,
    )
    if len(ex.hosts):
        lines.append("")
        lines.append("hosts")
        lines += _table(
            ex.hosts,
            [
                ("host", "host", ""),
                ("tasks_b", "tasks before", ""),
                ("tasks_o", "after", ""),
                ("compute_b", "compute before", "f"),
                ("compute_o", "after", "f"),
                ("delta_s", "delta", "s"),
            ],
            8,
        )
    if len(ex.files):
        lines.append("")
        lines.append("files (Darshan I/O)")
        lines += _table(
            ex.files,
            [
                ("path", "path", ""),
                ("seconds_b", "seconds before", "f"),
                ("seconds_o", "after", "f"),
                ("delta_s", "delta", "s"),
            ],
            8,
        )
    for n in ex.notes:
        lines.append(f"note: {n}")
    lines.append("")
    lines += explanation_lines(ex)
    return "\n".join(lines)


def comparison_text(c: Comparison, *, limit: int = 12) -> str:
    if len(c.explanations) == 1:
        return explanation_text(c.explanations[0], limit=limit)
    t = c.runs.assign(
        mark=np.where(c.runs["outlier"], "OUTLIER", ""),
        top=[
            _top_text(tc, tp)
            for tc, tp in zip(c.runs["top_cause"], c.runs["top_prefix"], strict=True)
        ],
    )
    lines = [f"baseline {c.baseline}; {len(c.runs)} runs", ""]
    lines += _table(
        t,
        [
            ("run", "run", ""),
            ("makespan_s", "makespan", "f"),
            ("difference_s", "difference", "s"),
            ("top", "top cause", ""),
            ("top_seconds", "its seconds", "s"),
            ("mark", "", ""),
        ],
        max(limit, 200),
    )
    # the explanations of the outliers, or else of the runs farthest from the baseline
    flagged = set(c.runs.loc[c.runs["outlier"], "run"])
    shown = [e for e in c.explanations if e.other in flagged] or sorted(
        c.explanations, key=lambda e: -abs(e.difference_s)
    )[:5]
    lines.append("")
    lines.append("outliers:" if flagged else "the runs farthest from the baseline:")
    for e in shown:
        lines += explanation_lines(e, top=3, table_shown=False)
    return "\n".join(lines)


def _top_text(cause: Any, prefix: Any) -> str:
    """A campaign row's top cause: its name (and prefix), or what stands for none."""
    if not isinstance(cause, str):
        return "(none above the noise)"
    return f"{cause} {prefix}" if isinstance(prefix, str) else cause


__all__ = [
    "cause_phrase",
    "comparison_dict",
    "comparison_text",
    "explanation_dict",
    "explanation_lines",
    "explanation_text",
    "records",
]
