"""Write stage: a :class:`~metaprov.mapping.ProvGraph` -> a file in an RDF or PROV format.

Input: the lazy graph from :func:`metaprov.to_prov`. Output: bytes in the chosen format, through
:func:`metaprov.write.output.open_output`: a file is written to a temporary file next to it and
renamed into place only when complete (a failed export never leaves a half-written file under
the final name); ``-`` is standard output; pipes and devices are written through; ``.gz`` is
compressed.

Formats are registered once (name, aliases, file suffixes) and their writer modules are imported
on first use. Line-based formats (N-Triples, N-Quads, Turtle, TriG, JSON-LD) stream column blocks
and scale to millions of tasks; RDF/XML streams through pyoxigraph; PROV-N, PROV-JSON and
PROV-XML are written from the blocks too, in two passes (:mod:`metaprov.write.provstream`; no
size limit). The ``trace`` format (Trace Event Format, for Perfetto, chrome://tracing and
speedscope) is written from the run's records (:mod:`metaprov.write.trace`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from metaprov.errors import FormatError
from metaprov.write.output import (  # noqa: F401 - re-exported (tests, benchmarks)
    ALIGNED_BUFFER_BYTES,
    _AlignedFile,
    _BackgroundWriter,
    open_output,
)

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph


@dataclass(frozen=True)
class Format:
    """A registered output format."""

    name: str
    aliases: tuple[str, ...]
    suffixes: tuple[str, ...]
    module: str
    func: str
    label: str
    streaming: bool = True
    limit: int | None = None
    #: what the writer's count counts (the RDF and PROV formats: triples of the graph)
    unit: str = "triples"


FORMATS: tuple[Format, ...] = (
    Format("turtle", ("ttl",), (".ttl",), "metaprov.write.turtle", "write_turtle", "Turtle"),
    Format(
        "ntriples",
        ("nt", "n-triples"),
        (".nt",),
        "metaprov.write.ntriples",
        "write_ntriples",
        "N-Triples",
    ),
    Format(
        "nquads",
        ("nq", "n-quads"),
        (".nq",),
        "metaprov.write.ntriples",
        "write_nquads",
        "N-Quads (one named graph per run)",
    ),
    Format(
        "trig",
        (),
        (".trig",),
        "metaprov.write.turtle",
        "write_trig",
        "TriG (one named graph per run)",
    ),
    Format(
        "json-ld",
        ("jsonld",),
        (".jsonld", ".json"),
        "metaprov.write.jsonld",
        "write_jsonld",
        "JSON-LD, compacted with ontology/context.jsonld",
    ),
    Format(
        "rdf-xml",
        ("rdfxml", "rdf"),
        (".rdf", ".rdf.xml", ".owl"),
        "metaprov.write.rdfxml",
        "write_rdfxml",
        "RDF/XML",
    ),
    Format(
        "provn",
        ("prov-n",),
        (".provn",),
        "metaprov.write.provstream",
        "write_provn",
        "PROV-N",
    ),
    Format(
        "provjson",
        ("prov-json",),
        (".provjson", ".prov.json"),
        "metaprov.write.provstream",
        "write_provjson",
        "PROV-JSON",
    ),
    Format(
        "provxml",
        ("prov-xml",),
        (".provx", ".provxml", ".prov.xml"),
        "metaprov.write.provstream",
        "write_provxml",
        "PROV-XML",
    ),
    Format(
        "trace",
        ("chrome-trace", "perfetto", "trace-event"),
        (".trace.json", ".trace"),
        "metaprov.write.trace",
        "write_trace",
        "Trace Event Format (Perfetto, chrome://tracing, speedscope): executions, transfers, I/O",
        unit="events",
    ),
)


def format_names() -> list[str]:
    """Canonical format names, in registry order."""
    return [f.name for f in FORMATS]


def _valid_list() -> str:
    return ", ".join(f"{f.name} ({', '.join((*f.aliases, *f.suffixes))})" for f in FORMATS)


def get_format(name: str) -> Format:
    """The format called ``name`` (a canonical name or an alias, case-insensitive).

    Raises:
        FormatError: unknown name; the message lists the valid ones.
    """
    key = name.strip().lower()
    for f in FORMATS:
        if key == f.name or key in f.aliases:
            return f
    raise FormatError(f"unknown format {name!r}", hint=f"valid formats: {_valid_list()}")


def format_for_path(path: str | Path) -> Format:
    """The format a file name implies by its suffix (longest match wins: ``.prov.json``).

    Raises:
        FormatError: no registered suffix matches; the message lists them.
    """
    lower = str(path).lower()
    if lower.endswith(".gz"):
        lower = lower[:-3]  # run.nt.gz: N-Triples, gzip-compressed
    best: tuple[int, Format] | None = None
    for f in FORMATS:
        for suffix in f.suffixes:
            if lower.endswith(suffix) and (best is None or len(suffix) > best[0]):
                best = (len(suffix), f)
    if best is None:
        raise FormatError(
            f"cannot tell the format of {Path(path).name!r} from its suffix",
            hint=f"give -f/--format (a name ending in .gz is compressed); valid formats: {_valid_list()}",
        )
    return best[1]


def resolve_format(path: str | Path | None, format: str | None) -> Format:
    """``format`` if given, else from ``path``'s suffix."""
    if format:
        return get_format(format)
    if path is None:
        raise FormatError(
            "no format given and no file name to guess it from",
            hint=f"valid formats: {_valid_list()}",
        )
    return format_for_path(path)


def _writer(fmt: Format) -> Any:
    try:
        module = importlib.import_module(fmt.module)
    except ImportError as exc:  # pragma: no cover - a missing optional dependency
        raise FormatError(
            f"format {fmt.name!r} is not available: {exc}",
            hint="pip install 'metaprov' with its dependencies",
        ) from exc
    return getattr(module, fmt.func)


def write(
    graph: ProvGraph,
    destination: str | Path | IO[bytes],
    format: str | None = None,
    *,
    force: bool = False,
    inputs: Iterable[str | os.PathLike[str]] = (),
    digest: Any = None,
    overwrite: bool = False,
) -> int:
    """Write a PROV graph to a file or binary stream.

    Args:
        graph: from :func:`metaprov.to_prov`.
        destination: a file path, ``-`` for standard output, or a binary stream. A file is
            written atomically (temporary file + rename); a pipe or device is written through;
            a name ending in ``.gz`` is gzip-compressed (see :func:`metaprov.write.output.open_output`).
        format: a format name or alias (see :data:`FORMATS`); default: from the file suffix.
        force: accepted for scripts written when PROV-N/JSON/XML had a size limit (they have
            none now); no effect.
        inputs: files or run directories the output must not be, hold or sit inside.
        digest: a ``hashlib`` object updated with every byte written to a file destination
            (in the writer thread, so a checksum costs no second read of the file; the bytes
            before compression for a ``.gz`` name).
        overwrite: replace an existing file (else it is refused: the CLI's ``--force``).

    Returns:
        The number of triples written (``trace``: of events).

    Raises:
        FormatError: unknown format.
        OutputError: the destination cannot be written (see :mod:`metaprov.write.output`).

    Example:
        >>> write(to_prov(records), "run.ttl")  # doctest: +SKIP
    """
    if not isinstance(destination, (str, os.PathLike)):
        return int(_writer(resolve_format(None, format))(graph, destination, force=force))
    fmt = resolve_format(destination, format)
    func = _writer(fmt)
    with open_output(destination, inputs=inputs, digest=digest, overwrite=overwrite) as out:
        return int(func(graph, out, force=force))


def iter_ntriples(graph: ProvGraph) -> Iterator[bytes]:
    """The graph as N-Triples, in byte chunks (one per column block), for a store loader."""
    from metaprov.write.ntriples import iter_lines

    yield from iter_lines(graph, None)


def iter_nquads(graph: ProvGraph) -> Iterator[bytes]:
    """The graph as N-Quads in its run's named graph, in byte chunks."""
    from metaprov.write.ntriples import iter_lines

    yield from iter_lines(graph, graph.graph_iri)


def to_rdflib(graph: ProvGraph) -> Any:
    """The PROV graph as an :class:`rdflib.Graph` (identifier: the run's named graph IRI, with
    the ``mp``, ``prov``, ``xsd`` prefixes bound), for users who continue in rdflib.

    Holds everything in memory (about 1 KB per triple): fine up to a few million triples; for
    more, load into a store (:func:`metaprov.to_store`).

    Example:
        >>> g = metaprov.to_rdflib(metaprov.to_prov(metaprov.read_run("examples/run")))  # doctest: +SKIP
        >>> len(g)  # doctest: +SKIP
    """
    import rdflib

    out = rdflib.Graph(identifier=rdflib.URIRef(graph.graph_iri))
    out.bind("mp", "https://w3id.org/metaprov/ns#")
    out.bind("prov", "http://www.w3.org/ns/prov#")
    out.bind("xsd", "http://www.w3.org/2001/XMLSchema#")
    for chunk in iter_ntriples(graph):
        out.parse(data=chunk, format="nt")
    return out


__all__ = [
    "to_rdflib",
    "FORMATS",
    "Format",
    "format_names",
    "get_format",
    "format_for_path",
    "resolve_format",
    "write",
    "iter_ntriples",
    "iter_nquads",
]

from metaprov._callable import make_callable  # noqa: E402 - after write() is defined

make_callable(__name__)  # metaprov.write(...) also once this package has been imported
