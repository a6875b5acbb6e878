"""The PROV files of a crate: a run's graph written in each requested format, with size and sha256.

Input: a :class:`~metaprov.mapping.ProvGraph` and the run's folder in the staging directory.
Output: one entry per file written (format, triples, size, sha256), and notes (none since
PROV-N streams at any size; kept for the crate's README and metadata).

The streaming formats (Turtle, JSON-LD) are written together from **one** mapping pass: a
producer maps the graph's blocks once and hands each block to one writer thread per format
(the formatting releases the GIL), and each file's sha256 is computed by its writer thread as
the bytes go out, so a checksum costs no second read. At 10^6 tasks this keeps the two files
within a few seconds of the Turtle file alone (docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph

log = logging.getLogger("metaprov")

#: Format name -> (file name, media type, label), in the order they are written.
PROV_FILES: dict[str, tuple[str, str, str]] = {
    "turtle": ("prov.ttl", "text/turtle", "Turtle"),
    "json-ld": ("prov.jsonld", "application/ld+json", "JSON-LD"),
    "provn": ("prov.provn", "text/provenance-notation", "PROV-N"),
}
DEFAULT_FORMATS = tuple(PROV_FILES)
#: Formats written by the one-pass block writers (the others build a whole document).
STREAMING = ("turtle", "json-ld")
#: Blocks a writer may lag behind the producer (each holds one block: bounded memory).
_DEPTH = 2
_DONE = object()


def file_digest(path: Path) -> tuple[int, str]:
    """Size in bytes and sha256 hex digest of a file (read in 8 MiB blocks)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def write_exports(
    graph: ProvGraph, folder: Path, formats: tuple[str, ...]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Write the run's PROV files into ``folder``.

    Returns:
        (entries, notes): an entry per file (``format``, ``file``, ``triples``, ``size``,
        ``sha256``), in the order of :data:`PROV_FILES`, and a note per format not written.
    """
    from metaprov.write import write

    order = [f for f in PROV_FILES if f in formats]
    entries: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    streaming = [f for f in order if f in STREAMING]
    if streaming:
        digests = {f: hashlib.sha256() for f in streaming}
        counts = write_together(
            graph,
            [(folder / PROV_FILES[f][0], f) for f in streaming],
            digests=[digests[f] for f in streaming],
        )
        for f, n in zip(streaming, counts, strict=False):
            path = folder / PROV_FILES[f][0]
            entries[f] = _entry(f, n, path.stat().st_size, digests[f].hexdigest())
    for f in order:
        if f in STREAMING:
            continue
        path = folder / PROV_FILES[f][0]
        digest = hashlib.sha256()
        n = write(graph, path, f, digest=digest, overwrite=True)
        entries[f] = _entry(f, n, path.stat().st_size, digest.hexdigest())
    return [entries[f] for f in order if f in entries], notes


def _entry(fmt: str, triples: int, size: int, sha256: str) -> dict[str, Any]:
    return {
        "format": fmt,
        "file": PROV_FILES[fmt][0],
        "triples": triples,
        "size": size,
        "sha256": sha256,
    }


class _Feed:
    """The graph as one writer sees it: its blocks are the ones the shared producer hands over."""

    def __init__(self, graph: ProvGraph, feed: queue.Queue[Any]) -> None:
        self._graph = graph
        self._feed = feed
        self.ended = False  # the end marker was taken (a failure after it must not wait for one)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)

    def blocks(self, ahead: int = 0) -> Iterator[Any]:
        while True:
            item = self._feed.get()
            if item is _DONE:
                self.ended = True
                return
            if isinstance(item, BaseException):
                raise item
            yield item


def write_together(
    graph: ProvGraph, targets: list[tuple[Path, str]], *, digests: list[Any] | None = None
) -> list[int]:
    """Write ``graph`` to several files (streaming formats) from one pass over its blocks.

    Same bytes as writing each file alone with :func:`metaprov.write.write` (each file is still
    written atomically); returns the triples written per target.
    """
    from metaprov.write import write

    feeds: list[queue.Queue[Any]] = [queue.Queue(maxsize=_DEPTH) for _ in targets]
    counts: list[int] = [0] * len(targets)
    errors: list[BaseException | None] = [None] * len(targets)
    dig = digests or [None] * len(targets)

    def run(i: int) -> None:
        path, fmt = targets[i]
        feed = _Feed(graph, feeds[i])
        try:
            counts[i] = write(feed, path, fmt, digest=dig[i], overwrite=True)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - re-raised by the producer
            errors[i] = exc
            # keep draining, so the producer never blocks, unless the end was already seen (a
            # failure when the file is completed: a full disk at the last write)
            while not feed.ended and feeds[i].get() is not _DONE:
                pass

    threads = [
        threading.Thread(target=run, args=(i,), name=f"metaprov-crate-{t[1]}", daemon=True)
        for i, t in enumerate(targets)
    ]
    for t in threads:
        t.start()
    try:
        for block in graph.blocks(ahead=2):
            for feed in feeds:
                feed.put(block)
    except BaseException as exc:
        for feed in feeds:
            feed.put(exc)
            feed.put(_DONE)
        for t in threads:
            t.join()
        raise
    for feed in feeds:
        feed.put(_DONE)
    for t in threads:
        t.join()
    for err in errors:
        if err is not None:
            raise err
    return counts
