"""The I/O part of ``metaprov inspect``.

Input: :class:`~metaprov.records.RunRecords` with ``darshan`` set (linked by
:func:`metaprov.link.link_io` here if that has not run yet).
Output: a JSON-ready dict (:func:`summarize_io`) and its text lines (:func:`format_io`): Darshan
logs by role and status, I/O per task prefix, per process (with the estimated clock offset) and
the link accounting (linked / process / ambiguous / unlinked, by rule and reason).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from metaprov.records import RunRecords

__all__ = ["summarize_io", "format_io"]


def _io_totals(df: pd.DataFrame) -> dict[str, int]:
    rd = df["op"] == "read"
    length = df["length"].fillna(0).astype("int64")
    return {
        "segments": int(len(df)),
        "reads": int(rd.sum()),
        "writes": int((~rd).sum()),
        "bytes_read": int(length[rd].sum()),
        "bytes_written": int(length[~rd].sum()),
        # a path on two nodes' own file systems is two files (docs/model.md, decision 16)
        "files": int(df["file"].nunique() if "file" in df else df["path"].nunique()),
    }


def _opt_float(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else round(float(v), 6)


def summarize_io(
    records: RunRecords, *, max_problems: int = 20, max_links: int = 10_000, evidence: bool = True
) -> dict[str, Any]:
    """Darshan I/O of a run as plain JSON types (links the I/O first if needed).

    Returns:
        dict with ``logs`` (count, by role, by status, problems), ``totals``, ``link`` (the
        accounting of :func:`metaprov.link.link_io`), ``by_prefix``, ``by_process``,
        ``links`` (per execution, file, operation, rule and clock: the segments linked and the
        fitted offset of the deciding clock; the first ``max_links``) and ``ambiguous`` (each
        ambiguous segment with its reason and candidate tasks; the first ``max_links``).
        ``evidence=False`` leaves ``links`` and ``ambiguous`` out (the HTML report does not
        show them).
    """
    dr = records.darshan
    if dr is None:
        return {"logs": {"total": 0}, "note": "no Darshan logs read"}
    if records.io is None:
        from metaprov.link import link_io

        link_io(records)
    io = records.io
    logs = dr.logs
    seg = dr.segments
    if len(seg):
        from metaprov.mapping.fileio import file_labels

        seg = seg.assign(file=file_labels(dr.logs, seg["log"], seg["path"]).to_numpy())
    links = io.segments
    out: dict[str, Any] = {
        "logs": {
            "total": int(len(logs)),
            "by_role": {
                str(k): int(v) for k, v in logs["role"].value_counts().sort_index().items()
            },
            "by_status": {
                str(k): int(v) for k, v in logs["status"].value_counts().sort_index().items()
            },
            "layouts": sorted(int(x) for x in logs["layout"].dropna().unique()),
            "problems": [
                {"log": str(r.log), "problems": str(r.problems)}
                for r in logs[logs["problems"].fillna("") != ""].head(max_problems).itertuples()
            ],
        },
        "totals": _io_totals(seg) if len(seg) else _io_totals(seg.head(0)),
        "link": dict(io.accounting),
    }
    if len(seg):
        joined = seg[["op", "length", "path", "file"]].copy()
        joined["status"] = links["status"].to_numpy()
        joined["key"] = links["key"].to_numpy()
        prefix_of = (
            records.tasks.set_index("key")["prefix"]
            if len(records.tasks)
            else pd.Series(dtype=object)
        )
        prefix_of = prefix_of[~prefix_of.index.duplicated()]
        linked = joined[joined["status"] == "linked"]
        by_prefix = []
        if len(linked):
            pref = linked["key"].map(prefix_of).fillna("(unknown prefix)")
            for p, grp in linked.groupby(pref, sort=True):
                entry = {"prefix": str(p), "tasks": int(grp["key"].nunique())}
                entry.update(_io_totals(grp))
                by_prefix.append(entry)
        out["by_prefix"] = by_prefix
    else:
        out["by_prefix"] = []
    procs = io.processes
    by_process = []
    seg_log = seg["log"].astype(str) if len(seg) else pd.Series(dtype=str)
    for r in procs.itertuples():
        if not r.n_segments:
            continue
        sub = seg[seg_log == str(r.log)]
        t = _io_totals(sub)
        by_process.append(
            {
                "log": str(r.log),
                "role": str(r.role),
                "pid": None if pd.isna(r.pid) else int(r.pid),
                "worker": None if pd.isna(r.worker) else str(r.worker),
                "clock_offset_s": _opt_float(r.clock_offset),
                "offset_range_s": None
                if pd.isna(r.offset_low)
                else [_opt_float(r.offset_low), _opt_float(r.offset_high)],
                "segments": int(r.n_segments),
                "linked": int(r.n_linked),
                "process": int(r.n_process),
                "ambiguous": int(r.n_ambiguous),
                "unlinked": int(r.n_unlinked),
                "offset_note": str(r.offset_note) if pd.notna(r.offset_note) else "",
                "bytes_read": t["bytes_read"],
                "bytes_written": t["bytes_written"],
            }
        )
    # workers first, then by pid: the order a reader scans
    by_process.sort(key=lambda d: (d["worker"] is None, d["role"], d["pid"] or -1))
    out["by_process"] = by_process
    if evidence:
        out.update(_link_evidence(seg, links, max_links))
    return out


def _link_evidence(seg: pd.DataFrame, links: pd.DataFrame, max_rows: int) -> dict[str, Any]:
    """Per link, the rule and the evidence, so a surprising link can be audited."""
    st = links["status"].astype(str).to_numpy() if len(links) else np.zeros(0, str)
    linked = st == "linked"
    groups: list[dict[str, Any]] = []
    if linked.any():
        df = pd.DataFrame(
            {
                "key": links.loc[linked, "key"].astype(str).to_numpy(),
                "attempt": links.loc[linked, "attempt"].fillna(0).astype("int64").to_numpy(),
                "path": seg.loc[linked, "path"].astype(str).to_numpy(),
                "op": seg.loc[linked, "op"].astype(str).to_numpy(),
                "rule": links.loc[linked, "rule"].astype(str).to_numpy(),
                "clock": links.loc[linked, "clock"].astype(str).to_numpy(),
                "offset": links.loc[linked, "clock_offset"].to_numpy(dtype="float64"),
                "unc": links.loc[linked, "offset_uncertainty"].to_numpy(dtype="float64"),
                "first": links.loc[linked, "start"].to_numpy(),
            }
        )
        g = df.groupby(["key", "attempt", "path", "op", "rule", "clock"], sort=False).agg(
            segments=("first", "size"),
            first=("first", "min"),
            offset=("offset", "mean"),
            unc=("unc", "max"),
        )
        g = g.reset_index().sort_values(["first", "key", "path", "op", "rule"], kind="stable")
        for r in g.head(max_rows).itertuples(index=False):
            groups.append(
                {
                    "key": r.key,
                    "attempt": int(r.attempt),
                    "path": r.path,
                    "op": r.op,
                    "rule": r.rule,
                    "clock": r.clock,
                    "segments": int(r.segments),
                    "clock_offset_s": _opt_float(r.offset),
                    "offset_uncertainty_s": _opt_float(r.unc),
                }
            )
        n_groups = len(g)
    else:
        n_groups = 0
    amb_rows: list[dict[str, Any]] = []
    amb = np.flatnonzero(st == "ambiguous")
    for i in amb[:max_rows]:
        cands = links["candidates"].iloc[i]
        amb_rows.append(
            {
                "segment": int(i),
                "log": str(links["log"].iloc[i]),
                "pthread": None
                if pd.isna(links["pthread"].iloc[i])
                else int(links["pthread"].iloc[i]),
                "path": str(seg["path"].iloc[i]),
                "op": str(seg["op"].iloc[i]),
                "rule": str(links["rule"].iloc[i]),
                "reason": str(links["reason"].iloc[i]),
                "candidates": json.loads(cands) if isinstance(cands, str) and cands else [],
            }
        )
    out: dict[str, Any] = {"links": groups, "ambiguous": amb_rows}
    if n_groups > max_rows or len(amb) > max_rows:
        out["evidence_truncated"] = {
            "links": max(0, n_groups - max_rows),
            "ambiguous": max(0, len(amb) - max_rows),
        }
    return out


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} B"


def format_io(summary: dict[str, Any], *, max_rows: int = 12) -> list[str]:
    """Text lines for :func:`summarize_io`'s dict (appended to the ``inspect`` report)."""
    lg = summary.get("logs", {})
    if not lg.get("total"):
        return ["darshan    no logs"]
    roles = ", ".join(f"{k} {v}" for k, v in lg["by_role"].items())
    status = ", ".join(f"{k} {v}" for k, v in lg["by_status"].items())
    t = summary["totals"]
    lines = [
        f"darshan    {lg['total']} logs ({roles}); status {status}; "
        f"DXT layouts {', '.join(f'{x} B' for x in lg['layouts']) or '-'}",
        f"  I/O        {t['segments']:,} segments: {t['reads']:,} reads ({_mb(t['bytes_read'])}), "
        f"{t['writes']:,} writes ({_mb(t['bytes_written'])}), {t['files']:,} files",
    ]
    link = summary.get("link", {})
    bs = link.get("by_status", {})
    if bs:
        lines.append(
            f"  linked     {bs.get('linked', 0):,} to tasks, {bs.get('process', 0):,} to processes, "
            f"{bs.get('ambiguous', 0):,} ambiguous, {bs.get('unlinked', 0):,} unlinked "
            f"(task-thread segments {link.get('task_thread_segments', 0):,})"
        )
        rules = ", ".join(f"{k} {v:,}" for k, v in link.get("by_rule", {}).items())
        lines.append(f"  by rule    {rules}")
        clocks = ", ".join(f"{k} {v:,}" for k, v in link.get("by_clock", {}).items())
        if clocks:
            lines.append(f"  decided by {clocks}")
        for reason, count in list(link.get("by_reason", {}).items())[:max_rows]:
            lines.append(f"    not linked: {count:,} x {reason}")
    bp = summary.get("by_prefix", [])
    if bp:
        lines.append("  by task prefix (tasks, reads, writes, bytes read / written, files)")
        for e in bp[:max_rows]:
            lines.append(
                f"    {e['prefix'][:28]:28s} {e['tasks']:>6} {e['reads']:>8,} {e['writes']:>8,} "
                f"{_mb(e['bytes_read']):>11} / {_mb(e['bytes_written']):<11} {e['files']:>6,}"
            )
        if len(bp) > max_rows:
            lines.append(f"    ... ({len(bp) - max_rows} more prefixes)")
    procs = summary.get("by_process", [])
    if procs:
        lines.append(
            "  by process (role, pid, worker, clock offset, segments: linked/process/ambiguous/unlinked)"
        )
        for p in procs[:max_rows]:
            off = "-" if p["clock_offset_s"] is None else f"{p['clock_offset_s'] * 1e3:+.1f} ms"
            lines.append(
                f"    {p['role']:16s} {str(p['pid']):>8} {p['worker'] or '-':28s} {off:>10} "
                f"{p['segments']:>7,}: {p['linked']:,}/{p['process']:,}/{p['ambiguous']:,}/"
                f"{p['unlinked']:,}"
            )
        if len(procs) > max_rows:
            rest = procs[max_rows:]
            lines.append(
                f"    ... ({len(rest)} more processes, {sum(p['segments'] for p in rest):,} segments)"
            )
    for prob in lg.get("problems", [])[:max_rows]:
        lines.append(f"  warning: {prob['log']}: {prob['problems']}")
    return lines
