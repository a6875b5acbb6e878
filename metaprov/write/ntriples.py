"""N-Triples and N-Quads writers (streaming, line-based).

Input: a :class:`~metaprov.mapping.ProvGraph`. Output: UTF-8 N-Triples, or N-Quads with every
statement in the run's named graph (``<base>/run/<run-id>/graph``), subjects grouped, in the
mapping's deterministic order. Memory is bounded by one block, not by the run.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from metaprov.mapping.block import Block
from metaprov.write.rows import BLOCKS_AHEAD, write_nt

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph


def iter_lines(graph: ProvGraph, graph_iri: str | None) -> Iterator[bytes]:
    """N-Triples (``graph_iri`` None) or N-Quads lines of the graph, one byte chunk per block."""
    for block in graph.blocks():
        buf = io.BytesIO()
        write_nt(block, buf, graph_iri)
        yield buf.getvalue()


def _write(graph: ProvGraph, out: IO[bytes], graph_iri: str | None) -> int:
    n = 0
    for block in graph.blocks(ahead=BLOCKS_AHEAD):
        write_nt(block, out, graph_iri)
        n += block_triples(block)
    return n


def block_triples(block: Block) -> int:
    """Number of triples in a block (non-null values, list elements counted)."""
    return block.n_triples()


def write_ntriples(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write N-Triples; returns the number of triples."""
    return _write(graph, out, None)


def write_nquads(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write N-Quads in the run's named graph; returns the number of quads."""
    return _write(graph, out, graph.graph_iri)
