"""RDF export files as input to a store: which format, which named graphs, their triples.

Input: an export file in any RDF format pyoxigraph reads. Output: (graph IRI, N-Triples chunks)
pairs, read lazily.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metaprov.errors import InputError, UsageError

if TYPE_CHECKING:
    pass

log = logging.getLogger("metaprov")


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

_QUAD_FORMATS = ("N_QUADS", "TRIG")


def ox_format(name: str) -> Any | None:
    """pyoxigraph's ``RdfFormat`` for a metaprov format name (``metaprov.write.get_format``),
    or None for a syntax Oxigraph does not parse (PROV-N, PROV-JSON, PROV-XML)."""
    import pyoxigraph as ox

    return {
        "turtle": ox.RdfFormat.TURTLE,
        "ntriples": ox.RdfFormat.N_TRIPLES,
        "nquads": ox.RdfFormat.N_QUADS,
        "trig": ox.RdfFormat.TRIG,
        "json-ld": ox.RdfFormat.JSON_LD,
        "rdf-xml": ox.RdfFormat.RDF_XML,
    }.get(name)


#: What loads, and why PROV-N/JSON/XML do not (the message of every refusal).
LOADABLE = (
    "a store loads RDF: N-Quads (.nq), N-Triples (.nt), Turtle (.ttl), TriG (.trig), JSON-LD "
    "(.jsonld) or RDF/XML (.rdf), each also gzip-compressed (.gz)"
)
_NOT_RDF = (
    "cannot load {name} files into a store: {label} is a PROV-DM serialisation for PROV tools, "
    "not an RDF syntax, so a triple store cannot read it"
)


def _rdf_format(path: Path, format: str | None) -> Any:
    """pyoxigraph's format of an export file: ``format`` (a metaprov format name) or the
    file's suffix (``.gz`` removed first: ``run.nq.gz`` is gzip-compressed N-Quads).

    Raises:
        InputError: no such file, or a suffix that names no RDF format.
        UsageError: a PROV-N/PROV-JSON/PROV-XML file (not RDF: says what loads instead).
    """
    from metaprov.errors import FormatError
    from metaprov.write import format_for_path, get_format

    if not path.is_file():
        raise InputError(
            "no such file", path=path, hint="give a run directory or an RDF export file"
        )
    hint = f"{LOADABLE}; export the run again in one of them, or load the run directory"
    if format:
        f = get_format(format)
    else:
        try:
            f = format_for_path(path)
        except FormatError:
            raise InputError(
                f"cannot tell the RDF format of {path.name!r} from its suffix",
                path=path,
                hint=f"rename it with the suffix of its format: {LOADABLE} (in Python: "
                "Store.load_file(path, format=...))",
            ) from None
    fmt = ox_format(f.name)
    if fmt is None:
        raise UsageError(_NOT_RDF.format(name=f.name, label=f.label), hint=hint)
    return fmt


#: Deepest nesting accepted in a JSON-LD or RDF/XML input (metaprov writes at most ~10 levels;
#: deeper input makes Oxigraph's parsers recurse until the process dies, or slow to a halt).
MAX_NESTING = 256
_SCAN = 64 << 20


def check_nesting(path: Path, fmt_name: str, limit: int = MAX_NESTING) -> None:
    """Refuse, before any parser sees it, an RDF input that would crash or hang the parser:
    JSON-LD nested deeper than ``limit`` (arrays and objects, strings skipped), RDF/XML nested
    deeper than ``limit`` or declaring XML entities (``<!ENTITY``: "billion laughs" expansion).

    Raises:
        InputError: naming the file, the depth or the declaration, and the limit.
    """
    name = fmt_name.lower().replace("_", "-")
    if name in ("json-ld", "jsonld"):
        depth = _json_depth(path, limit)
    elif name in ("rdf-xml", "rdfxml", "xml"):
        depth = _xml_depth(path, limit)
    else:
        return
    if depth > limit:
        raise InputError(
            f"nested more than {limit} levels deep: refused before parsing (such nesting "
            "crashes or stalls RDF parsers; metaprov's exports nest about 10 levels)",
            path=path,
            hint="give an export written by metaprov, or flatten the document",
        )


def _open_plain(path: Path) -> Any:
    """The file's bytes as a parser reads them (a ``.gz`` name: decompressed)."""
    if path.name.lower().endswith(".gz"):
        import gzip

        return gzip.open(path, "rb")
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


def _json_depth(path: Path, limit: int, piece_size: int = _SCAN) -> int:
    """Deepest nesting of arrays and objects (outside strings), read in pieces, column-wise;
    stops as soon as it passes ``limit``."""
    import numpy as np

    depth = 0
    deepest = 0
    in_string = 0  # parity: inside a string
    run = 0  # backslashes at the end of the previous piece
    try:
        fh = _open_plain(path)
    except OSError as exc:
        raise InputError(f"cannot read the file: {exc.strerror}", path=path) from exc
    with fh:
        while piece := fh.read(piece_size):
            b = np.frombuffer(piece, dtype=np.uint8)
            bs = b == 92
            c = np.cumsum(bs, dtype=np.int64) + run
            # backslashes in the run ending at each byte
            r = c - np.maximum.accumulate(np.where(bs, 0, c))
            before = np.concatenate(([run], r[:-1]))
            quote = (b == 34) & (before % 2 == 0)
            inside = (np.cumsum(quote, dtype=np.int64) + in_string) % 2
            # a quote's own position counts as outside when it opens, inside when it closes:
            # brackets are never quotes, so the parity at a bracket is the right one
            step = np.zeros(len(b), dtype=np.int64)
            outside = inside == 0
            step[outside & ((b == 91) | (b == 123))] = 1
            step[outside & ((b == 93) | (b == 125))] = -1
            levels = np.cumsum(step) + depth
            if len(levels):
                deepest = max(deepest, int(levels.max()))
                depth = int(levels[-1])
            in_string = int(inside[-1]) if len(inside) else in_string
            run = int(r[-1]) if len(r) else run
            if deepest > limit:
                break
    return deepest


def _xml_depth(path: Path, limit: int) -> int:
    """Deepest element nesting of an XML file (expat, streamed); refuses entity declarations."""
    from xml.parsers import expat

    class _Stop(Exception):
        pass

    state = {"depth": 0, "deepest": 0}
    parser = expat.ParserCreate()

    def start(_name: str, _attrs: Any) -> None:
        state["depth"] += 1
        if state["depth"] > state["deepest"]:
            state["deepest"] = state["depth"]
            if state["deepest"] > limit:
                raise _Stop

    def end(_name: str) -> None:
        state["depth"] -= 1

    def entity(name: str, *_: Any) -> None:
        raise InputError(
            f"declares the XML entity {name!r}: refused (entity expansion can make a few "
            "hundred bytes expand to gigabytes; RDF/XML needs no entities)",
            path=path,
            hint="give an RDF/XML export written by metaprov, or expand the entities first",
        )

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.EntityDeclHandler = entity
    parser.buffer_text = True
    try:
        with _open_plain(path) as fh:
            while piece := fh.read(8 << 20):
                parser.Parse(piece, False)
            parser.Parse(b"", True)
    except _Stop:
        pass
    except expat.ExpatError as exc:
        raise InputError(f"not well-formed XML: {exc}", path=path) from exc
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read the file: {exc}", path=path) from exc
    return state["deepest"]


def is_gzip(path: Path) -> bool:
    """Whether ``path`` is read through gzip (its name ends in ``.gz``)."""
    return path.name.lower().endswith(".gz")


def parse_file(path: Path, fmt: Any) -> Iterator[Any]:
    """Oxigraph's parser over an RDF file, through gzip for a ``.gz`` name (streamed).

    Raises:
        InputError: not valid RDF, not gzip data, or a truncated gzip file.
    """
    import gzip
    import zlib

    import pyoxigraph as ox

    try:
        if not is_gzip(path):
            yield from ox.parse(path=str(path), format=fmt)
            return
        with gzip.open(path, "rb") as fh:
            yield from ox.parse(input=fh, format=fmt)
    except (SyntaxError, ValueError) as exc:
        raise InputError(f"not valid RDF: {exc}", path=path) from exc
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(
            f"cannot decompress: {exc}",
            path=path,
            hint="a name ending in .gz is read as gzip data: is it complete and compressed?",
        ) from exc


def _file_graphs(path: Path, fmt: Any) -> list[tuple[str, Iterator[bytes]]]:
    """(graph IRI, N-Triples chunks) for each graph of an RDF file, read lazily."""
    import pyoxigraph as ox

    from metaprov.mapping.terms import MP, RDF

    if fmt in (ox.RdfFormat.JSON_LD, ox.RdfFormat.RDF_XML):
        check_nesting(path, "json-ld" if fmt == ox.RdfFormat.JSON_LD else "rdf-xml")

    is_quads = fmt in (ox.RdfFormat.N_QUADS, ox.RdfFormat.TRIG)
    names: list[str] = []
    run_iri = None
    # Pass 1: which graphs (quad formats), or which run (triple formats) the file holds.
    for q in parse_file(path, fmt):
        if is_quads:
            g = q.graph_name
            if (
                isinstance(g, ox.NamedNode)
                and (not names or names[-1] != g.value)
                and g.value not in names
            ):
                names.append(g.value)
        elif (
            run_iri is None
            and isinstance(q.subject, ox.NamedNode)
            and q.predicate.value == RDF.type
            and isinstance(q.object, ox.NamedNode)
            and q.object.value == MP.Run
        ):
            run_iri = q.subject.value
            break
    if not is_quads:
        graph = f"{run_iri}/graph" if run_iri else path.resolve().as_uri()
        return [(graph, _triples_of(path, fmt, None))]
    return [(g, _triples_of(path, fmt, g)) for g in names]


def _unescaped(t: Any) -> Any:
    """A triple of an RDF/XML export with its literal's ``\\uXXXX`` escapes undone (characters
    XML 1.0 cannot carry, see :mod:`metaprov.write.rdfxml`)."""
    import pyoxigraph as ox

    o = t.object
    if not isinstance(o, ox.Literal) or "\\" not in o.value:
        return t
    from metaprov.write.rdfxml import unescape_literal

    value = unescape_literal(o.value)
    if value == o.value:
        return t
    lit = (
        ox.Literal(value, language=o.language)
        if o.language
        else ox.Literal(value, datatype=o.datatype)
    )
    return ox.Triple(t.subject, t.predicate, lit)


def _triples_of(path: Path, fmt: Any, graph: str | None, batch: int = 200_000) -> Iterator[bytes]:
    """N-Triples chunks of the triples of ``graph`` (None: all) in an RDF file (RDF/XML: with the
    export's literal escapes undone)."""
    import pyoxigraph as ox

    out: list[Any] = []
    xml = fmt == ox.RdfFormat.RDF_XML
    for q in parse_file(path, fmt):
        if graph is not None and not (
            isinstance(q.graph_name, ox.NamedNode) and q.graph_name.value == graph
        ):
            continue
        out.append(_unescaped(q.triple) if xml else q.triple)
        if len(out) >= batch:
            yield ox.serialize(out, format=ox.RdfFormat.N_TRIPLES)
            out = []
    if out:
        yield ox.serialize(out, format=ox.RdfFormat.N_TRIPLES)


# ---------------------------------------------------------------------------------------------
# Campaigns
# ---------------------------------------------------------------------------------------------

#: A campaign's manifest (written by :func:`metaprov.export.campaign.export_campaign`).
MANIFEST = "manifest.json"
MANIFEST_KIND = "metaprov-campaign"


def campaign_shards(path: str | Path) -> list[Path] | None:
    """The shard files of a campaign: its output directory or its ``manifest.json``.

    None when ``path`` is not a campaign (a run directory, an export file). Shards of runs that
    failed are left out (with a warning); a listed shard that is missing, or that lies outside
    the manifest's directory, is an error.

    Raises:
        InputError: the manifest cannot be read, or names a shard that cannot be loaded.
    """
    import json

    p = Path(path)
    manifest = p / MANIFEST if p.is_dir() else p
    if p.is_dir() and not manifest.is_file():
        return None
    if not p.is_dir() and p.suffix.lower() != ".json":
        return None
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"cannot read the campaign manifest: {exc}", path=manifest) from exc
    if not isinstance(data, dict) or data.get("kind") != MANIFEST_KIND:
        if p.is_dir():
            return None
        raise InputError(
            "is not a metaprov campaign manifest",
            path=manifest,
            hint="give the manifest.json written by 'metaprov export ... -o OUTDIR'",
        )
    root = manifest.parent.resolve()
    shards = []
    for i, entry in enumerate(data.get("runs") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("shard"), str):
            raise InputError(f"run entry {i} has no shard", path=manifest)
        if entry.get("status") != "ok":
            log.warning(
                "%s: %s failed when exported, not loaded: %s",
                manifest,
                entry.get("run"),
                entry.get("error"),
            )
            continue
        shard = (root / entry["shard"]).resolve()
        if root not in shard.parents:
            raise InputError(f"shard {entry['shard']!r} lies outside the campaign", path=manifest)
        if not shard.is_file():
            raise InputError(
                f"shard {entry['shard']!r} is missing",
                path=manifest,
                hint="export the campaign again (finished shards are skipped)",
            )
        shards.append(shard)
    return shards
