"""RDF/XML writer: the N-Triples stream re-serialised by pyoxigraph, without an in-memory graph.

Input: a :class:`~metaprov.mapping.ProvGraph`. Output: RDF/XML with the vocabulary prefixes;
subjects stay grouped because the mapping emits each subject's statements together.

XML 1.0 cannot carry every character a Dask key (or a path) may hold: the C0 control characters
other than tab and newline, U+FFFE and U+FFFF are not allowed at all, and a carriage return is
read back as a newline by every conforming XML parser. A literal holding one of them is written
with ``\\uXXXX`` escapes (the escapes of N-Triples and SPARQL), its backslashes as ``\\u005C`` so
the encoding can be undone; a literal that merely looks escaped (``\\u`` or ``\\U`` followed by
hex digits) is encoded the same way. :func:`unescape_literal` undoes it, for every literal of an
RDF/XML export; metaprov's own loader does so. The export says how many literals it encoded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

import pyoxigraph as ox

from metaprov.mapping.terms import PREFIXES
from metaprov.write.ntriples import iter_lines

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph

log = logging.getLogger("metaprov")

#: Characters an XML 1.0 document cannot carry as they are (``\r`` is read back as ``\n``).
XML_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\r\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_LOOKS_ESCAPED = re.compile(r"\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}")
_TO_ESCAPE = re.compile("[\x00-\x08\x0b\x0c\r\x0e-\x1f\ufffe\uffff\ud800-\udfff\\\\]")
_ESCAPE = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")
# N-Triples chunks that may hold such a literal: an escape, or a raw unsafe character
_SUSPECT = re.compile(rb"\\[uU]|[\x00-\x08\x0b\x0c\r\x0e-\x1f]|\xef\xbf[\xbe\xbf]")


def needs_escape(text: str) -> bool:
    """Must ``text`` be escaped to go into an XML 1.0 document and come back unchanged?"""
    return bool(XML_UNSAFE.search(text) or _LOOKS_ESCAPED.search(text))


def escape_literal(text: str) -> str:
    """``text`` with the characters XML 1.0 cannot carry, and backslashes, as ``\\uXXXX``."""
    return _TO_ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04X}", text)


def unescape_literal(text: str) -> str:
    """Undo :func:`escape_literal` (identity on text that was not escaped)."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), text)


def write_rdfxml(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write RDF/XML; returns the number of triples."""
    count = 0
    escaped = 0

    def safe(t: ox.Triple) -> ox.Triple:
        nonlocal escaped
        o = t.object
        if isinstance(o, ox.Literal) and needs_escape(o.value):
            escaped += 1
            lit = (
                ox.Literal(escape_literal(o.value), language=o.language)
                if o.language
                else ox.Literal(escape_literal(o.value), datatype=o.datatype)
            )
            return ox.Triple(t.subject, t.predicate, lit)
        return t

    def triples() -> Iterator[ox.Triple]:
        nonlocal count
        for chunk in iter_lines(graph, None):
            parsed = ox.parse(chunk, format=ox.RdfFormat.N_TRIPLES)
            if _SUSPECT.search(chunk):
                parsed = (safe(t) for t in parsed)
            for triple in parsed:
                count += 1
                yield triple

    ox.serialize(triples(), out, format=ox.RdfFormat.RDF_XML, prefixes=PREFIXES)
    if escaped:
        log.warning(
            "%d literal(s) hold characters XML 1.0 cannot carry (control characters, a carriage "
            "return): written with \\uXXXX escapes; metaprov.write.rdfxml.unescape_literal (and "
            "metaprov load) undoes them, or export N-Triples/Turtle to keep them as they are",
            escaped,
        )
    return count


__all__ = ["write_rdfxml", "escape_literal", "unescape_literal", "needs_escape", "XML_UNSAFE"]
