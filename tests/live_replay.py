"""A test writer that replays a real run's CSV rows into a new directory, in time order.

It behaves as Mofka-Dask CSV writers do while a run goes: each file gets its header first,
then its rows are appended as their ``time`` comes, in batches, and a batch may end in the
middle of a row (the rest of that row comes with the next batch), so a reader sees files whose
last line is incomplete. Files that are not CSV (``config.txt``, Darshan logs, JSON) appear at
the end, as a job's closing files do; ``metaprov-run.json`` (a capture's completion signal) is
not replayed unless asked.
"""

from __future__ import annotations

import csv
import io
import shutil
import time
from pathlib import Path


def _rows(path: Path) -> tuple[bytes, list[tuple[float, int, bytes]]]:
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    header, body = lines[0], lines[1:]
    cols = next(csv.reader(io.StringIO(header.decode())))
    ti = cols.index("time") if "time" in cols else None
    out = []
    for i, line in enumerate(body):
        t = float("inf")
        if ti is not None:
            try:
                t = float(next(csv.reader(io.StringIO(line.decode())))[ti])
            except (ValueError, IndexError, StopIteration):
                pass
        out.append((t, i, line))
    return header, out


class Replay:
    """Replay ``source`` into ``dest`` in ``steps`` batches (call :meth:`step` until done)."""

    def __init__(
        self,
        source: Path,
        dest: Path,
        *,
        steps: int = 6,
        with_run_json: bool = False,
        whole: tuple[str, ...] = (),
    ):
        """``whole``: files whose last row is never cut (e.g. ``graph.csv``: a graph's one row
        would otherwise stay incomplete until the last batch)."""
        self.source, self.dest = Path(source), Path(dest)
        self.whole = set(whole)
        self.dest.mkdir(parents=True, exist_ok=True)
        self.with_run_json = with_run_json
        events: list[tuple[float, str, int, bytes]] = []
        self.handles = {}
        for p in sorted(self.source.glob("*.csv")):
            header, rows = _rows(p)
            fh = open(self.dest / p.name, "wb")  # noqa: SIM115 - closed in finish()
            fh.write(header)
            fh.flush()
            self.handles[p.name] = fh
            events.extend((t, p.name, i, line) for t, i, line in rows)
        events.sort(key=lambda e: (e[0], e[1], e[2]))
        n = len(events)
        self.batches = [events[k * n // steps : (k + 1) * n // steps] for k in range(steps)]
        self.pending: dict[str, bytes] = {}
        self.done = 0

    @property
    def finished(self) -> bool:
        return self.done >= len(self.batches)

    def step(self) -> int:
        """Append the next batch; the last row written to each file is cut in half (its rest
        comes first in the next batch). Returns the rows completed so far."""
        batch = self.batches[self.done]
        self.done += 1
        last = self.done == len(self.batches)
        per: dict[str, list[bytes]] = {}
        for _, name, _, line in batch:
            per.setdefault(name, []).append(line)
        for name, fh in self.handles.items():
            data = self.pending.pop(name, b"") + b"".join(per.get(name, []))
            if not last and data and len(data) > 4 and name not in self.whole:
                cut = len(data) - max(1, len(data.splitlines(keepends=True)[-1]) // 2)
                self.pending[name] = data[cut:]
                data = data[:cut]
            fh.write(data)
            fh.flush()
        if last:
            self.finish()
        return sum(len(b) for b in self.batches[: self.done])

    def finish(self) -> None:
        for name, fh in self.handles.items():
            fh.write(self.pending.pop(name, b""))
            fh.close()
        for p in sorted(self.source.iterdir()):
            if p.suffix == ".csv" or not p.is_file() or p.name == "truth.json":
                continue
            if p.name == "metaprov-run.json" and not self.with_run_json:
                continue
            shutil.copyfile(p, self.dest / p.name)

    def run(self, pause: float) -> None:
        while not self.finished:
            self.step()
            time.sleep(pause)
