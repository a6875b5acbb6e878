"""Batch systems' compressed host lists (``nid[001-003],login1``) expanded into host names.

Shared by the capture (the job's variables) and ingest (the batch system's answers): rank 0,
imports nothing of the package."""

from __future__ import annotations

import re


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed node list (``nid[001-003,007],gpu01``) as host names (the capture's
    own copy lives in ``metaprov.capture.environment``: ingest imports nothing of the capture).

    Example:
        >>> expand_nodelist("nid[001-002],login1")
        ['nid001', 'nid002', 'login1']
    """
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,\[]*)", text or ""):
        head, ranges, tail = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            out.append(head + tail)
            continue
        for part in ranges.split(","):
            lo, sep, hi = part.partition("-")
            if sep and lo.isdigit() and hi.isdigit() and int(hi) - int(lo) < 100_000:
                out.extend(f"{head}{i:0{len(lo)}d}{tail}" for i in range(int(lo), int(hi) + 1))
            elif part:
                out.append(head + part + tail)
    return out


__all__ = ["expand_nodelist"]
