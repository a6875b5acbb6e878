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
