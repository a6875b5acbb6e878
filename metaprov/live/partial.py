"""Read a run directory that may still be written: whole rows only, and say that it is.

Input: a run directory a user points ``inspect``, ``report`` or ``export`` at — a finished run,
or one being written right now (metaprov's capture mid-run, Mofka-Dask CSV writers appending).
Output: the directory to read (the run itself, or a whole-row snapshot of it:
:mod:`metaprov.live.snapshot`) and whether the run is in progress, with the reason.

A run is **in progress** when its ``metaprov-run.json`` says ``recording`` (the capture is
running), when the capture's workers' part files are there unmerged, or — for runs without that
file (Mofka-Dask writers) — when one of its CSV files ends in an incomplete row (a row being
written: every writer ends a row with a newline, and the real runs' files all end on one). A run
whose ``metaprov-run.json`` says ``complete`` is finished whatever its files hold: a cut row there
is damage, which the reader reports as a malformed row. A Mofka-Dask run between two whole rows
cannot be told from a finished one: it reads as finished (``metaprov follow`` waits for a quiet
period instead).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from metaprov.live.snapshot import FINISHED, PARTS_DIR, read_status, take_snapshot


@dataclass
class LiveRead:
    """What to read for a run directory, and whether it is in progress.

    Attributes:
        path: the directory to read (the run, or a whole-row snapshot of it).
        in_progress: the run is being written.
        why: why it is taken as in progress (empty when it is not).
        cut: bytes left out per file (a row being written), by file name.
    """

    path: Path
    in_progress: bool = False
    why: str = ""
    cut: dict[str, int] = field(default_factory=dict)

    def note(self) -> str:
        """One line for a user: the run is in progress, why, and what was left out."""
        if not self.in_progress:
            return ""
        text = f"in progress ({self.why}): read up to the last whole row of each file"
        if self.cut:
            total = sum(self.cut.values())
            names = ", ".join(sorted(self.cut)[:4]) + (" ..." if len(self.cut) > 4 else "")
            text += f"; {total:,} bytes of incomplete rows left out ({names})"
        return text


def _ends_mid_row(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            if fh.tell() == 0:
                return False
            fh.seek(-1, 2)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def live_state(run: str | Path) -> tuple[bool, str]:
    """(in progress, why) for a run directory (see the module's description)."""
    root = Path(run)
    status, _ = read_status(root)
    if status in FINISHED:
        return False, ""
    if status == "recording":
        return True, "metaprov-run.json says recording"
    if (root / PARTS_DIR).is_dir():
        return True, f"the capture's worker part files ({PARTS_DIR}/) are not merged yet"
    try:
        cut = sorted(p.name for p in root.glob("*.csv") if p.is_file() and _ends_mid_row(p))
    except OSError:
        return False, ""
    if cut:
        # a writer still appending, or one that stopped mid-row (a run that died): either way
        # the row is not whole, and the run is read as the partial run it is
        return (
            True,
            f"{cut[0]} ends in an incomplete row: being written, or cut when the run stopped",
        )
    return False, ""


@contextlib.contextmanager
def readable(run: str | Path) -> Iterator[LiveRead]:
    """The directory to read for ``run``: the run itself when finished, else a whole-row snapshot
    of it (in a temporary directory removed after the block). Nothing is written into ``run``.

    Example:
        >>> with readable("runs/now") as rd:  # doctest: +SKIP
        ...     records = read_run(rd.path); records.path = "runs/now"
    """
    root = Path(run)
    live, why = live_state(root) if root.is_dir() else (False, "")
    if not live:
        yield LiveRead(root)
        return
    work = Path(tempfile.mkdtemp(prefix="metaprov-live-read-"))
    try:
        snap = take_snapshot(root, work / (root.resolve().name or "run"))
        yield LiveRead(snap.path, True, why, dict(snap.cut_bytes))
    finally:
        shutil.rmtree(work, ignore_errors=True)


__all__ = ["LiveRead", "live_state", "readable"]
