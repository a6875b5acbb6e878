"""RDF/XML writer: the N-Triples stream re-serialised by pyoxigraph, without an in-memory graph.

Input: a :class:`~metaprov.mapping.ProvGraph`. Output: RDF/XML with the vocabulary prefixes;
subjects stay grouped because the mapping emits each subject's statements together.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

import pyoxigraph as ox

from metaprov.mapping.terms import PREFIXES
from metaprov.write.ntriples import iter_lines

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph


def write_rdfxml(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write RDF/XML; returns the number of triples."""
    count = 0

    def triples() -> Iterator[ox.Triple]:
        nonlocal count
        for chunk in iter_lines(graph, None):
            for triple in ox.parse(chunk, format=ox.RdfFormat.N_TRIPLES):
                count += 1
                yield triple

    ox.serialize(triples(), out, format=ox.RdfFormat.RDF_XML, prefixes=PREFIXES)
    return count
