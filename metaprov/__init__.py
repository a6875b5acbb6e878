"""metaprov: turn the records of a Dask distributed run into a W3C PROV provenance graph.

Public API (each a stage of the pipeline)::

    records = metaprov.read_run("runs/D2024-04-19_R1")   # files -> RunRecords
    metaprov.link_io(records)                            # Darshan I/O -> task executions
    graph = metaprov.to_prov(records, base="https://example.org/prov")
    metaprov.write(graph, "run.ttl")                     # any RDF / PROV format
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "read_run",
    "link_io",
    "to_prov",
    "write",
    "load",
    "query",
    "RunRecords",
    "MetaprovError",
]


def __getattr__(name: str) -> Any:
    # Lazy: `import metaprov` stays fast and does not pull rdflib/pyoxigraph until needed.
    if name == "read_run":
        from metaprov.ingest import read_run

        return read_run
    if name == "RunRecords":
        from metaprov.records import RunRecords

        return RunRecords
    if name == "MetaprovError":
        from metaprov.errors import MetaprovError

        return MetaprovError
    if name == "link_io":
        from metaprov.link import link_io

        return link_io
    if name == "to_prov":
        from metaprov.mapping import to_prov

        return to_prov
    if name == "write":
        from metaprov.write import write

        return write
    if name == "load":
        from metaprov.store import load

        return load
    if name == "query":
        from metaprov.store import query

        return query
    raise AttributeError(f"module 'metaprov' has no attribute {name!r}")
