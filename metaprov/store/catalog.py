"""What a store knows about the runs it holds: load fingerprints and facts derived at load time.

Input: a run directory (its files' names and contents) and the mapping options. Output: a
fingerprint, and the catalog file beside an embedded store's own files (per graph: triples,
source, fingerprint, critical path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from metaprov.errors import InputError

#: File in an embedded store's directory recording which input produced which graph.
CATALOG = "metaprov-catalog.json"


def fingerprint_files(root: Path) -> list[Path]:
    """The files of a run directory a fingerprint hashes (its regular files, by name)."""
    return [p for p in sorted(root.iterdir()) if p.is_file()]


def run_fingerprint(run: str | Path, *, base: str, detail: str, darshan: bool) -> str:
    """A hash of everything a run's graph is made from.

    The names and contents of the run directory's files, the mapping options and the metaprov
    version: the same fingerprint gives the same graph (the export is deterministic). A sparse
    file's bytes from its first hole on are never read (the readers stop there and count the
    rest by its size, which is hashed): a 3 GiB hole is not hashed as 3 GiB of zeros.
    """
    import hashlib

    from metaprov._version import __version__
    from metaprov.ingest.csvread import first_hole

    h = hashlib.blake2b(digest_size=20)
    h.update(f"metaprov {__version__}\nbase={base}\ndetail={detail}\ndarshan={darshan}\n".encode())
    root = Path(run)
    if not root.is_dir():
        raise InputError("no such run directory", path=root)
    for p in fingerprint_files(root):
        st = p.stat()
        h.update(f"{p.name}\0{st.st_size}\0".encode())
        try:
            data = first_hole(p, st.st_size)
            if data < st.st_size:
                h.update(f"\0data ends at {data}\0".encode())
            with open(p, "rb") as f:
                while data > 0 and (block := f.read(min(1 << 22, data))):
                    h.update(block)
                    data -= len(block)
        except OSError:
            # unreadable (the reader reports it): its size and time stand for its content, so
            # the fingerprint changes when it becomes readable or changes
            h.update(f"\0unreadable\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


#: Largest catalog read (about 1 KB per graph: a million graphs).
MAX_CATALOG_BYTES = 1 << 30


class Catalog:
    """Per named graph, what it was loaded from and the facts derived at load time.

    Kept as a JSON file beside an embedded store's own files (RocksDB ignores files it did not
    write), or in memory for an in-memory store. Whether an entry still describes what the store
    holds is for the store to check (it knows its graphs and counts).

    Args:
        directory: the store directory, or None to keep the catalog in memory.
    """

    def __init__(self, directory: Path | None) -> None:
        self.path = None if directory is None else directory / CATALOG
        self._memory: dict[str, Any] = {}

    def graphs(self) -> dict[str, Any]:
        """Every entry by graph IRI (an unreadable or foreign file reads as empty)."""
        if self.path is None:
            return self._memory
        from metaprov.store.owner import read_json

        # a regular file of bounded size and depth (a forged one reads as empty, never hangs)
        data = read_json(self.path, MAX_CATALOG_BYTES)
        graphs = data.get("graphs") if isinstance(data, dict) else None
        return graphs if isinstance(graphs, dict) else {}

    def save(self, graphs: dict[str, Any]) -> None:
        """Replace every entry (atomically: a reader sees the old file or the new one)."""
        if self.path is None:
            self._memory = graphs
            return
        tmp = self.path.with_name(CATALOG + ".part")
        tmp.write_text(json.dumps({"graphs": graphs}, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)

    def remember(self, graph: str, triples: int, source: str, **facts: Any) -> None:
        """Record a graph just loaded; facts of an earlier load of other content are dropped."""
        graphs = self.graphs()
        entry = graphs.get(graph)
        if not isinstance(entry, dict) or entry.get("triples") != triples:
            entry = {}
        entry.update({"triples": triples, "source": source}, **facts)
        graphs[graph] = entry
        self.save(graphs)

    def mark_partial(self, graph: str) -> None:
        """Mark a graph as not whole while it is written or removed in several steps (a
        process stopped meanwhile leaves the mark: readers are told, ``serve --follow`` hides
        the graph, the next follow finishes it); :meth:`forget` clears it."""
        graphs = self.graphs()
        graphs[graph] = {"loading": True, "triples": -1}
        self.save(graphs)

    def partial(self) -> list[str]:
        """The graphs marked by :meth:`mark_partial`, sorted."""
        return sorted(
            g for g, e in self.graphs().items() if isinstance(e, dict) and e.get("loading")
        )

    def forget(self, graph: str) -> None:
        """Drop the entry of a graph (dropped or about to be replaced)."""
        graphs = self.graphs()
        if graphs.pop(graph, None) is not None:
            self.save(graphs)
