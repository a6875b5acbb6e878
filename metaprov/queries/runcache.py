"""What was read of a run directory, kept for the next question on the same run.

Input: a run directory. Output: its :class:`~metaprov.records.RunRecords`, read and linked as
``metaprov load`` reads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from metaprov.records import RunRecords


def cached_records(
    run: Path, *, darshan: bool = True, cache: bool | str | Path = True
) -> RunRecords:
    """The run's records with Darshan I/O linked (read again when the cache is off or stale)."""
    from metaprov.ingest import read_run
    from metaprov.store.base import _maybe_link

    records = read_run(run, darshan=darshan)
    _maybe_link(records)
    return records


__all__ = ["cached_records"]
