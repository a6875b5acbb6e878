"""metaprov: turn the records of a Dask distributed run into a W3C PROV provenance graph.

Public API (each a stage of the pipeline)::

    records = metaprov.read_run("runs/D2024-04-19_R1")   # files -> RunRecords
    metaprov.link_io(records)                            # Darshan I/O -> task executions
    graph = metaprov.to_prov(records, base="https://example.org/prov")
    metaprov.write(graph, "run.ttl")                     # any RDF / PROV format
    metaprov.write_report(["runs/R1"], "r1.html")        # a self-contained HTML report
    metaprov.crate(["runs/R1"], "r1-crate.zip")           # runs + PROV -> RO-Crate (extra: crate)
    metaprov.compare(["runs/R3", "runs/R7"]).pair.causes  # why was R7 slower than R3?
"""

from __future__ import annotations

from typing import Any

from metaprov._version import __version__

#: Public name -> the module that defines it (imported on first use).
_API = {
    "read_run": "metaprov.ingest",
    "RunRecords": "metaprov.records",
    "MetaprovError": "metaprov.errors",
    "link_io": "metaprov.link",
    "to_prov": "metaprov.mapping",
    "write": "metaprov.write",
    "load": "metaprov.store",
    "query": "metaprov.queries",
    "query_runs": "metaprov.queries.fromruns",
    "write_report": "metaprov.report",
    "crate": "metaprov.crate",
    "to_rdflib": "metaprov.write",
    "to_store": "metaprov.store",
    "to_oxigraph": "metaprov.store",
    "drop": "metaprov.store",
    "write_records": "metaprov.export.records",
    "export_campaign": "metaprov.export.campaign",
    "compare": "metaprov.compare",
    "follow": "metaprov.live",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    # Lazy: `import metaprov` stays fast and does not pull rdflib/pyoxigraph until needed.
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'metaprov' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
