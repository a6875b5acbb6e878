"""Validate an export: SHACL shapes (``ontology/shapes.ttl``) plus PROV sanity checks.

Input: an export file in any supported format, a run directory, RunRecords or a ProvGraph.
Output: a :class:`ValidationReport` (conforms or not, every violation with its focus node and
message, readable text).

Three engines check the same constraints:

- ``shacl``: pyshacl with the shapes (no inference: the export states every class it uses), up to
  :data:`SHACL_LIMIT` triples (pyshacl holds everything in an rdflib graph: ~1 KB per triple and
  ~20-50 k triples/s);
- ``columnar``: every check below as joins over the export's triples read column-wise
  (:mod:`metaprov.validate.columnar`; no triple store), the default above the limit;
- ``sparql``: the constraints as SPARQL queries over an embedded Oxigraph store (the reference
  the columnar engine is tested against; ``engine="sparql"``).

The PROV sanity checks (no activity ends before it starts; whatever is used, generated or
associated is described) and the PROV-CONSTRAINTS rules run whatever the engine (as SPARQL with
``shacl``/``sparql``, as their columnar twins with ``columnar``). PROV-N/PROV-JSON/PROV-XML files
are checked by parsing them back through ``prov`` and the same sanity rules on the PROV-DM
document.
"""

from __future__ import annotations

import io
import logging
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metaprov.errors import FormatError, InputError, UsageError
from metaprov.validate import constraints
from metaprov.validate.checks import PROV_CHECKS, SPARQL_CHECKS, WARNING_CHECKS

if TYPE_CHECKING:
    from metaprov.mapping import ProvGraph
    from metaprov.records import RunRecords

log = logging.getLogger("metaprov")

#: Largest graph (triples) validated with pyshacl under ``engine="auto"``: none (0). Measured
#: (docs/benchmarks.md, "Validation engines by size"): pyshacl costs the most CPU at every size
#: (1.5x to 4.7x the columnar engine's from 4,254 to 39,747 triples, 14x at 238,553), and the
#: columnar engine is the cheapest or within 0.25 s of the cheapest at every size measured.
SHACL_LIMIT = 0
ENGINES = ("auto", "shacl", "sparql", "columnar")
_MAX_LISTED = 50

_PREFIXES = """
PREFIX mp: <https://w3id.org/metaprov/ns#>
PREFIX prov: <http://www.w3.org/ns/prov#>
PREFIX rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#>
PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>
"""


@dataclass
class Violation:
    """One failed constraint on one node."""

    shape: str
    focus: str
    message: str
    severity: str = "Violation"
    path: str | None = None


@dataclass
class ValidationReport:
    """The outcome of :func:`validate`."""

    source: str
    engine: str
    triples: int
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def conforms(self) -> bool:
        return not any(v.severity == "Violation" for v in self.violations)

    def text(self) -> str:
        """Readable report: verdict, counts per constraint, the first offending nodes."""
        n_bad = sum(v.severity == "Violation" for v in self.violations)
        n_warn = sum(v.severity == "Warning" for v in self.violations)
        verdict = ("conforms" if self.conforms else f"does NOT conform: {n_bad} violation(s)") + (
            f"; {n_warn} warning(s)" if n_warn else ""
        )
        lines = [
            f"Validation of {self.source}: {self.triples:,} "
            + ("PROV-DM records" if self.engine == "prov" else "triples")
            + f", engine {self.engine}",
            f"Result: {verdict}",
        ]
        lines += [f"note: {n}" for n in self.notes]
        by: dict[tuple[str, str], list[Violation]] = {}
        for v in self.violations:
            by.setdefault((v.shape, v.message), []).append(v)
        for (shape, message), vs in sorted(by.items()):
            warn = "warning: " if vs[0].severity == "Warning" else ""
            lines.append(f"- {warn}{shape}: {message} ({len(vs)} node(s))")
            for v in vs[:5]:
                lines.append(f"    {v.focus}" + (f"  [path {v.path}]" if v.path else ""))
            if len(vs) > 5:
                lines.append(f"    ... and {len(vs) - 5} more")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "engine": self.engine,
            "triples": self.triples,
            # PROV-N/JSON/XML hold PROV-DM records, not triples: say which was counted.
            "counted": "records" if self.engine == "prov" else "triples",
            "conforms": self.conforms,
            "violations": [v.__dict__ for v in self.violations],
            "notes": self.notes,
        }


def _ontology_text(name: str) -> str:
    return (
        resources.files("metaprov").joinpath("ontology").joinpath(name).read_text(encoding="utf-8")
    )


def validate(
    source: str | Path | RunRecords | ProvGraph,
    *,
    format: str | None = None,
    engine: str = "auto",
    progress: bool = False,
    twin: str | Path | None = None,
) -> ValidationReport:
    """Validate an export against the shipped shapes and the PROV sanity rules.

    Args:
        source: an export file, a run directory (exported in memory first), RunRecords or a
            ProvGraph.
        format: the file's format when its suffix does not tell (same names as ``export``).
        engine: ``auto`` (the columnar engine: cheapest by measured cost at every size;
            pyshacl up to :data:`SHACL_LIMIT` triples when that is raised above 0),
            ``shacl``, ``columnar`` or ``sparql``; the report's notes say which ran and why.
        progress: show a progress bar over the checks (stderr).
        twin: for a PROV-N/JSON/XML file, the RDF export (or run directory, exported with the
            default options) it must agree with, relation by relation. Without it, an RDF
            export beside the file with the same stem (``run.ttl`` for ``run.provn``) is used
            when there is one.

    Returns:
        The report; ``report.conforms`` is False when anything is violated.

    Raises:
        InputError: the file cannot be read or parsed.
        FormatError: unknown format.

    Example:
        >>> report = validate("run.ttl")  # doctest: +SKIP
        >>> print(report.text())  # doctest: +SKIP
    """
    if engine not in ENGINES:
        raise UsageError(
            f"unknown validation engine {engine!r}", hint=f"use one of: {', '.join(ENGINES)}"
        )
    label, nt, path, fmt = _as_ntriples(source, format)
    if path is not None and path.name.lower().endswith(".gz"):
        return _validate_gzip(path, fmt.name, engine, progress)
    if fmt is not None and fmt.name in ("provn", "provjson", "provxml"):
        assert path is not None
        return _validate_provdm(path, fmt.name, twin)
    if engine in ("auto", "columnar"):
        # read column-wise first: the size decides the engine without a store, and above the
        # pyshacl limit no store is built at all
        report = _try_columnar(label, nt, path, fmt, engine, progress)
        if report is not None:
            return report
    import pyoxigraph as ox

    with tempfile.TemporaryDirectory(prefix="metaprov-validate-") as tmp:
        store = ox.Store(tmp) if nt is None else ox.Store()
        try:
            if nt is not None:
                store.bulk_load(b"".join(nt()), format=ox.RdfFormat.N_TRIPLES)
            else:
                assert path is not None and fmt is not None
                from metaprov.store.files import check_nesting

                check_nesting(path, fmt.name)
                store.bulk_load(
                    path=str(path), format=_ox_format(fmt.name), to_graph=ox.DefaultGraph()
                )
        except (SyntaxError, ValueError, OSError) as exc:
            raise InputError(
                f"cannot parse as {fmt.name if fmt else 'N-Triples'}: {exc}", path=path
            ) from exc
        n = len(store)
        chosen = "shacl" if engine == "auto" else engine  # auto: within the limit (above)
        report = ValidationReport(label, chosen, n)
        report.notes.append(_why(engine, chosen, n))
        # the ontology's class and property hierarchy applied (RDFS subclass/subproperty
        # inference), so the shapes see a worker process as the mp:Process it is
        for update in constraints.inference_updates():
            store.update(update)
        report.notes.append(
            f"ontology included: {len(store) - n:,} triples inferred from its class and "
            "property hierarchy"
        )
        steps: list[tuple[str, Any]] = [("shapes", None)] if chosen == "shacl" else []
        if chosen == "sparql":
            steps += [(shape, (shape, q, m)) for shape, q, m in SPARQL_CHECKS]
        steps += [(rule, (rule, q, m)) for rule, q, m in PROV_CHECKS + constraints.checks()]
        bar = _progress(len(steps), progress)
        for name, check in steps:
            bar.set_postfix_str(name, refresh=False)
            if check is None:
                report.violations += _run_shacl(store)
            else:
                report.violations += _run_sparql(store, [check])
            bar.update()
        bar.close()
        for v in _run_sparql(store, WARNING_CHECKS):
            v.severity = "Warning"
            report.violations.append(v)
        del store
    return report


def _validate_gzip(path: Path, fmt: str, engine: str, progress: bool) -> ValidationReport:
    """Validate a gzip-compressed export (``run.nt.gz``): decompressed, streamed, into a
    temporary file beside nothing of the user's, then validated as that format."""
    import gzip
    import shutil
    import zlib

    with tempfile.TemporaryDirectory(prefix="metaprov-validate-") as tmp:
        plain = Path(tmp) / (path.name[:-3] or "export")
        try:
            with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise InputError(
                f"cannot decompress: {exc}",
                path=path,
                hint="a name ending in .gz is read as gzip data: is it complete and compressed?",
            ) from exc
        try:
            report = validate(plain, format=fmt, engine=engine, progress=progress)
        except InputError as exc:  # name the user's file, not the temporary one
            raise InputError(
                exc.message.replace(str(plain), f"{path} (decompressed)"), hint=exc.hint
            ) from exc
    report.source = str(path)
    report.notes.append("gzip-compressed: decompressed to a temporary file first")
    for v in report.violations:
        if v.path == str(plain):
            v.path = str(path)
    return report


def _try_columnar(
    label: str,
    nt: Callable[[], Iterator[bytes]] | None,
    path: Path | None,
    fmt: Any,
    engine: str,
    progress: bool,
) -> ValidationReport | None:
    """The columnar engine's report, or None when ``auto`` finds the export within pyshacl's
    limit. N-Triples/N-Quads are read directly; other RDF syntaxes are first streamed through
    Oxigraph's parser into N-Quads in a temporary file (no store: ~7 s per 3.5 M triples)."""
    from metaprov.validate import columnar

    with tempfile.TemporaryDirectory(prefix="metaprov-validate-") as tmp:
        note = None
        if nt is not None:
            # the graph's N-Triples as they are written, never held whole (a 10^6-task run
            # writes ~8 GB of them); a graph within pyshacl's limit is written again for it
            source: Path | Iterable[bytes] = nt()
            quads = False
        elif fmt.name in ("ntriples", "nquads"):
            assert path is not None
            source, quads = path, fmt.name == "nquads"
        else:
            import pyoxigraph as ox

            from metaprov.store.files import check_nesting

            assert path is not None
            check_nesting(path, fmt.name)  # before the parser: deep nesting, XML entities
            source, quads = Path(tmp) / "converted.nq", True
            try:
                ox.serialize(
                    ox.parse(path=str(path), format=_ox_format(fmt.name)),
                    output=str(source),
                    format=ox.RdfFormat.N_QUADS,
                )
            except (SyntaxError, ValueError, OSError) as exc:
                raise InputError(f"cannot parse as {fmt.name}: {exc}", path=path) from exc
            note = f"{fmt.label} converted to N-Quads by Oxigraph's parser first (streamed)"
        graph = columnar.read(source, quads=quads, label=label)
        if engine == "auto" and graph.statements <= SHACL_LIMIT:
            return None
        report = _validate_columnar(graph, label, engine, progress)
        if note:
            report.notes.append(note)
        return report


def _validate_columnar(graph: Any, label: str, engine: str, progress: bool) -> ValidationReport:
    """Every check (shapes, PROV sanity, PROV-CONSTRAINTS) on the columnar graph."""
    from metaprov.validate import columnar

    report = ValidationReport(label, "columnar", graph.statements)
    report.notes.append(_why(engine, "columnar", graph.statements))
    report.notes.append(
        "ontology included: its class hierarchy applied to every class a check names, "
        f"{graph.inferred:,} triples of sub-properties counted as their super-properties"
    )
    checks = SPARQL_CHECKS + PROV_CHECKS + constraints.checks()
    bar = _progress(len(checks), progress)
    for name, query, message in checks:
        bar.set_postfix_str(name, refresh=False)
        report.violations += [
            Violation(name, focus, message) for focus in columnar.run_check(graph, query)
        ]
        bar.update()
    bar.close()
    for name, query, message in WARNING_CHECKS:
        report.violations += [
            Violation(name, focus, message, severity="Warning")
            for focus in columnar.run_check(graph, query)
        ]
    return report


def _why(engine: str, chosen: str, n: int) -> str:
    """Which engine checks the shapes, and why."""
    if engine != "auto":
        return f"engine {chosen}: asked for (--engine {engine})"
    if chosen == "shacl":
        return (
            f"engine shacl (pyshacl): {n:,} triples, within its limit of {SHACL_LIMIT:,} "
            "(give --engine columnar or --engine sparql for the same checks at any size)"
        )
    if SHACL_LIMIT > 0:
        return (
            f"engine columnar: {n:,} triples, more than pyshacl's limit of {SHACL_LIMIT:,} "
            "(pyshacl holds everything in memory at ~1 KB per triple); the same constraints "
            "run as joins over the export's triples read column-wise (no triple store; "
            "--engine sparql runs them as SPARQL queries in Oxigraph)"
        )
    return (
        f"engine columnar: {n:,} triples; the cheapest engine by measured cost at every size "
        "(pyshacl takes 1.5x to 14x its CPU time): the shapes and constraints run as joins "
        "over the export's triples read column-wise (--engine shacl runs pyshacl, --engine "
        "sparql the same checks as SPARQL queries in Oxigraph)"
    )


def _progress(total: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="validate", unit="check", disable=not enabled, leave=False)


def _ox_format(name: str) -> Any:
    from metaprov.store.files import ox_format

    fmt = ox_format(name)
    if fmt is None:
        raise KeyError(name)
    return fmt


def _as_ntriples(
    source: Any, format: str | None
) -> tuple[str, Callable[[], Iterator[bytes]] | None, Path | None, Any]:
    """(label, a function writing the in-memory graph's N-Triples in pieces or None, file path
    or None, file format or None)."""
    from metaprov.mapping import ProvGraph
    from metaprov.records import RunRecords
    from metaprov.write import iter_ntriples, resolve_format

    if isinstance(source, (str, Path)) and Path(source).is_dir():
        from metaprov.ingest import read_run
        from metaprov.mapping import to_prov

        source = to_prov(read_run(source))
    if isinstance(source, RunRecords):
        from metaprov.mapping import to_prov

        source = to_prov(source)
    if isinstance(source, ProvGraph):
        graph = source
        return f"run {graph.run_id}", lambda: iter_ntriples(graph), None, None
    path = Path(source)
    if not path.exists():
        raise InputError(
            "no such file or run directory",
            path=path,
            hint="give an export file (e.g. run.ttl) or a run directory",
        )
    fmt = resolve_format(path, format)
    return str(path), None, path, fmt


def _run_sparql(store: Any, checks: list[tuple[str, str, str]]) -> list[Violation]:
    out: list[Violation] = []
    for shape, query, message in checks:
        for row in store.query(_PREFIXES + query, use_default_graph_as_union=True):
            out.append(Violation(shape, _term(row["f"]), message))
    return out


def _term(t: Any) -> str:
    return t.value if hasattr(t, "value") else str(t)


def _run_shacl(store: Any) -> list[Violation]:
    import pyoxigraph as ox
    import pyshacl
    import rdflib

    data = rdflib.Graph()
    buf = io.BytesIO()
    ox.serialize(
        (ox.Triple(q.subject, q.predicate, q.object) for q in store),
        buf,
        format=ox.RdfFormat.N_TRIPLES,
    )
    data.parse(data=buf.getvalue(), format="nt")
    shapes = rdflib.Graph().parse(data=_ontology_text("shapes.ttl"), format="turtle")
    # No inference: the shapes name the classes metaprov writes explicitly, and an RDFS/OWL-RL
    # closure (owlrl) would multiply pyshacl's time for nothing.
    _conforms, results, _text = pyshacl.validate(
        data, shacl_graph=shapes, inference="none", allow_warnings=True
    )
    sh = rdflib.Namespace("http://www.w3.org/ns/shacl#")
    out: list[Violation] = []
    for r in results.subjects(rdflib.RDF.type, sh.ValidationResult):
        shape = results.value(r, sh.sourceShape)
        # Property shapes are blank nodes: name them by their node shape.
        name = _shape_name(shapes, shape)
        path = results.value(r, sh.resultPath)
        severity = str(results.value(r, sh.resultSeverity)).rsplit("#", 1)[-1]
        msg = results.value(r, sh.resultMessage)
        out.append(
            Violation(
                name,
                str(results.value(r, sh.focusNode)),
                str(msg) if msg is not None else "constraint violated",
                severity,
                None if path is None or isinstance(path, rdflib.BNode) else str(path),
            )
        )
    out.sort(key=lambda v: (v.shape, v.message, v.focus))
    return out


def _shape_name(shapes: Any, shape: Any) -> str:
    import rdflib

    sh = rdflib.Namespace("http://www.w3.org/ns/shacl#")
    node = shape
    if isinstance(node, rdflib.BNode):
        parent = shapes.value(predicate=sh.property, object=node)
        if parent is not None:
            node = parent
    text = str(node)
    return text.rsplit("#", 1)[-1] if "#" in text else text


#: Suffixes of an RDF twin looked for beside a PROV-DM file, in this order.
_TWIN_SUFFIXES = (".nt", ".ttl", ".nq", ".trig", ".jsonld", ".rdf")


def _find_twin(path: Path) -> Path | None:
    for suffix in _TWIN_SUFFIXES:
        cand = path.with_suffix(suffix)
        if cand.is_file():
            return cand
    return None


def _twin_document(twin: Path) -> Any:
    """The PROV-DM document metaprov writes for an RDF export file or a run directory."""
    from metaprov.write.provdm import document_from_rdf, namespaces, rdf_graph

    if twin.is_dir():
        from metaprov.ingest import read_run
        from metaprov.mapping import to_prov

        graph = to_prov(read_run(twin))
        return document_from_rdf(rdf_graph(graph, list(graph.blocks())), namespaces(graph))
    import pyoxigraph as ox
    import rdflib

    from metaprov.write import resolve_format

    fmt = resolve_format(twin, None)
    try:
        oxfmt = _ox_format(fmt.name)
    except KeyError:
        raise InputError(
            f"the twin of a PROV-DM file must be an RDF export, not {fmt.label}", path=twin
        ) from None
    g = rdflib.Graph(bind_namespaces="none")

    def term(t: Any) -> Any:
        if isinstance(t, ox.NamedNode):
            return rdflib.URIRef(t.value)
        if isinstance(t, ox.BlankNode):
            return rdflib.BNode(t.value)
        dt = t.datatype.value if t.datatype is not None else None
        if dt == "http://www.w3.org/2001/XMLSchema#string":
            dt = None
        return rdflib.Literal(t.value, datatype=None if dt is None else rdflib.URIRef(dt))

    try:
        for q in ox.parse(path=str(twin), format=oxfmt):
            g.add((term(q.subject), term(q.predicate), term(q.object)))
    except (SyntaxError, ValueError, OSError) as exc:
        raise InputError(f"cannot parse the twin as {fmt.name}: {exc}", path=twin) from exc
    return document_from_rdf(g, {})


def _read_provdm(path: Path, fmt: str) -> Any:
    from prov.model import ProvDocument

    from metaprov.write.provdm import unescape_provxml

    pformat = {"provn": "provn", "provjson": "json", "provxml": "xml"}[fmt]
    try:
        if fmt == "provxml":
            # identifiers escaped into XML QNames (docs/formats.md) turned back first
            content: Any = unescape_provxml(path.read_bytes())
            return ProvDocument.deserialize(content=content, format=pformat)
        return ProvDocument.deserialize(source=str(path), format=pformat)
    except Exception as exc:  # noqa: BLE001 - prov raises many types; report them uniformly
        raise InputError(f"cannot parse as {fmt}: {exc}", path=path) from exc


def _compare_twin(report: ValidationReport, doc: Any, twin: Path) -> None:
    """Violations for each relation the file and its RDF twin do not share."""
    from metaprov.write.provdm import relations

    mine, theirs = relations(doc), relations(_twin_document(twin))
    report.notes.append(
        f"relations compared with the RDF twin {twin}: {len(theirs):,} in the twin, "
        f"{len(mine):,} in the file"
    )

    def focus(rel: tuple[str, str, tuple[tuple[str, str], ...]]) -> str:
        kind, ident, terms = rel
        inner = ", ".join(v for _, v in terms)
        return f"{kind}({ident + '; ' if ident else ''}{inner})"

    for rel in sorted(theirs - mine):
        report.violations.append(
            Violation(
                "provdm:sameRelationsAsRdf",
                focus(rel),
                "stated by the RDF twin, missing from the file",
            )
        )
    for rel in sorted(mine - theirs):
        report.violations.append(
            Violation(
                "provdm:sameRelationsAsRdf", focus(rel), "stated by the file, not by the RDF twin"
            )
        )


def _validate_provdm(path: Path, fmt: str, twin: str | Path | None = None) -> ValidationReport:
    """Parse a PROV-N/JSON/XML file through ``prov``, apply the PROV sanity rules and compare
    its relations with its RDF twin (given, or found beside it)."""
    from prov.model import ProvActivity, ProvRelation

    doc = _read_provdm(path, fmt)
    records = list(doc.get_records())
    report = ValidationReport(str(path), "prov", len(records))
    report.notes.append(
        "PROV-DM document: parsed through prov, PROV sanity rules checked (SHACL shapes apply to RDF formats)"
    )
    twin_path = Path(twin) if twin is not None else _find_twin(path)
    if twin_path is None:
        report.notes.append(
            "no RDF twin given or found beside the file: relations not compared with the RDF "
            "(give --twin RUN.ttl)"
        )
    elif not twin_path.exists():
        raise InputError("no such twin file or run directory", path=twin_path)
    else:
        _compare_twin(report, doc, twin_path)
    declared = {
        r.identifier
        for r in records
        if r.identifier is not None and not isinstance(r, ProvRelation)
    }
    for r in records:
        if isinstance(r, ProvActivity):
            start, end = r.get_startTime(), r.get_endTime()
            if start is not None and end is not None and start > end:
                report.violations.append(
                    Violation(
                        "prov:start-precedes-end",
                        str(r.identifier),
                        "the activity ends before it starts",
                    )
                )
        elif isinstance(r, ProvRelation):
            for _attr, value in r.formal_attributes[:2]:
                if value is not None and value not in declared:
                    report.violations.append(
                        Violation(
                            "prov:referencesExist",
                            str(value),
                            f"{r.get_type()} refers to an undeclared element",
                        )
                    )
    return report


def check_format(name: str | None) -> None:
    """Raise FormatError early for an unknown ``--format`` (before reading anything)."""
    if name:
        from metaprov.write import get_format

        get_format(name)


__all__ = [
    "validate",
    "ValidationReport",
    "Violation",
    "SHACL_LIMIT",
    "SPARQL_CHECKS",
    "PROV_CHECKS",
    "FormatError",
]
