"""Turtle and TriG writers (streaming).

Input: a :class:`~metaprov.mapping.ProvGraph`. Output: Turtle with ``@prefix`` lines for the
vocabularies (mp, prov, rdf, rdfs, xsd), one statement block per subject, instances as full
``<IRIs>`` (a prefixed name cannot hold every percent-encoded key); TriG wraps the same blocks in
the run's named graph.
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING

from metaprov.mapping.terms import PREFIXES
from metaprov.write.ntriples import block_triples
from metaprov.write.rows import BLOCKS_AHEAD, turtle_prefix_header, write_turtle_rows

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph


def _write(graph: ProvGraph, out: IO[bytes], named: bool) -> int:
    out.write(turtle_prefix_header(PREFIXES).encode("utf-8"))
    indent = ""
    if named:
        out.write(f"<{graph.graph_iri}> {{\n\n".encode())
        indent = "    "
    n = 0
    for block in graph.blocks(ahead=BLOCKS_AHEAD):
        write_turtle_rows(block, out, PREFIXES, indent)
        n += block_triples(block)
    if named:
        out.write(b"}\n")
    return n


def write_turtle(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write Turtle; returns the number of triples."""
    return _write(graph, out, named=False)


def write_trig(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write TriG (one named graph for the run); returns the number of triples."""
    return _write(graph, out, named=True)
