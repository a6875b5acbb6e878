"""Live provenance: query a run while it is still running.

Input: a run directory being written (by :mod:`metaprov.capture`, or by Mofka-Dask CSV writers).
Output: the run's graph in a store, kept current at every interval (``metaprov follow``), and
optionally served over HTTP from the same process while it is updated (``metaprov serve
--follow``). See ``docs/live.md``.

- :mod:`metaprov.live.snapshot`: a whole-row copy of a directory being written;
- :mod:`metaprov.live.follow`: the refresh loop (convert, diff, one transaction per refresh);
- :mod:`metaprov.live.server`: the SPARQL endpoint and query page of ``serve --follow``.
"""

from __future__ import annotations

from metaprov.live.follow import (
    DEFAULT_INTERVAL,
    DEFAULT_QUIET,
    FollowResult,
    Refresh,
    follow,
    provisional_id,
)
from metaprov.live.snapshot import Snapshot, take_snapshot

__all__ = [
    "DEFAULT_INTERVAL",
    "DEFAULT_QUIET",
    "FollowResult",
    "Refresh",
    "Snapshot",
    "follow",
    "provisional_id",
    "take_snapshot",
]
