"""PROV-N, PROV-JSON and PROV-XML writers through the ``prov`` package (small runs only).

Input: a :class:`~metaprov.mapping.ProvGraph`. Output: the same provenance as a PROV-DM document:
activities (run, job, task executions, transfers), agents (user, client, scheduler, workers,
worker processes, threads), entities (everything else; plans carry ``prov:type prov:Plan``) and
the PROV relations (used, wasGeneratedBy, wasAssociatedWith with its plan, actedOnBehalfOf,
wasAttributedTo, specializationOf). metaprov properties become attributes, except
``mp:usedReplica`` (a sub-property of ``prov:used``): a ``used`` relation of the execution and
the replica, typed ``prov:type mp:usedReplica`` so it stays apart from the use of the chunk.

The ``prov`` package holds the whole document in memory and writes at 10-200 k records/s, so
these formats refuse graphs above ``PROV_LIMIT`` triples (see :mod:`metaprov.write`) unless
``force`` is given.
"""

from __future__ import annotations

import datetime as dt
from typing import IO, TYPE_CHECKING, Any

from metaprov.errors import LimitError
from metaprov.mapping.block import Block
from metaprov.mapping.terms import MP, PROV, RDF, VOCAB, XSD
from metaprov.write.ntriples import block_triples

if TYPE_CHECKING:
    from prov.model import ProvDocument

    from metaprov.mapping import ProvGraph

_ACTIVITIES = {
    MP.Run,
    MP.Job,
    MP.TaskExecution,
    MP.Transfer,
    # Darshan I/O (mapping/fileio.py): mp:IOActivity re-describes a task execution
    MP.IOActivity,
    MP.ProcessActivity,
    MP.IOSegment,
}
_AGENTS = {MP.User, MP.Client, MP.Scheduler, MP.Worker, MP.WorkerProcess, MP.Thread, MP.Process}
_PLANS = {
    MP.TaskGraph,
    MP.TaskPrefix,
    MP.TaskGroup,
    MP.Configuration,
    MP.DaskConfiguration,
    MP.DarshanConfiguration,
    MP.ServiceConfiguration,
    MP.JobScript,
    MP.NodeList,
}


def _refuse(fmt: str, limit: int, what: str) -> LimitError:
    return LimitError(
        f"{fmt} goes through the prov package's in-memory document and is limited to "
        f"{limit:,} triples; this run has {what}",
        hint="use a streaming format (turtle, ntriples, nquads, trig, json-ld), "
        "or pass --force to wait (and use the memory)",
    )


def _limit(graph: ProvGraph, force: bool, fmt: str) -> list[Block]:
    """The graph's blocks, refusing (before any heavy work when possible) above the limit."""
    from metaprov.write import PROV_LIMIT

    rec = graph.records
    # A task has at least 5 triples and an execution at least 9: refuse big runs up front.
    at_least = 5 * len(rec.tasks) + 9 * len(rec.executions)
    if at_least > PROV_LIMIT and not force:
        raise _refuse(fmt, PROV_LIMIT, f"at least {at_least:,}")
    blocks: list[Block] = []
    n = 0
    for block in graph.blocks():
        n += block_triples(block)
        if n > PROV_LIMIT and not force:
            raise _refuse(fmt, PROV_LIMIT, "more")
        blocks.append(block)
    return blocks


class _Names:
    """IRI -> prov QualifiedName, with short prefixes for the run, the base and the vocabularies."""

    def __init__(self, doc: ProvDocument, graph: ProvGraph) -> None:
        self.doc = doc
        self.ns = [
            doc.add_namespace("run", graph.run_iri + "/"),
            doc.add_namespace("id", graph.base + "/"),
            doc.add_namespace("mp", VOCAB),
            doc.add_namespace("xsd", XSD.string[: -len("string")]),
        ]
        self.extra = 0

    def __call__(self, iri: str) -> Any:
        for ns in self.ns:
            if iri.startswith(ns.uri):
                return ns[iri[len(ns.uri) :]]
        if iri.startswith(PROV.used[: -len("used")]):
            from prov.model import PROV as PROV_NS

            return PROV_NS[iri.rsplit("#", 1)[1]]
        # Any other IRI: a namespace for everything up to its last '/' or '#'.
        cut = max(iri.rfind("/"), iri.rfind("#")) + 1
        self.extra += 1
        ns = self.doc.add_namespace(f"ns{self.extra}", iri[:cut])
        self.ns.append(ns)
        return ns[iri[cut:]]


def _literal(value: str, kind: str, datatype: str | None, names: _Names) -> Any:
    from prov.model import Literal

    if kind == "iri":
        return names(value)
    if kind == "str" or datatype in (None, XSD.string):
        return value
    if datatype == XSD.dateTime:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return Literal(value, names(str(datatype)))


def build_document(
    graph: ProvGraph, force: bool = False, fmt: str = "PROV", *, blocks: list[Block] | None = None
) -> ProvDocument:
    """The graph as a ``prov`` ProvDocument (raises LimitError above the limit).

    Args:
        graph: the mapped run.
        force: build it even above the limit.
        fmt: format name for the error message.
        blocks: the graph's blocks when the caller already has them.
    """
    from prov.model import PROV_TYPE, ProvDocument

    if blocks is None:
        blocks = _limit(graph, force, fmt)
    doc = ProvDocument()
    names = _Names(doc, graph)
    # Qualified associations first: (activity, agent) pairs they cover are not repeated.
    assoc: dict[str, tuple[str | None, str | None]] = {}
    for block in blocks:
        if block.rdf_type == PROV.Association:
            by_pred = {c.predicate: _values(c, len(block)) for c in block.columns[1:]}
            for i, s in enumerate(block.subjects.to_pylist()):
                assoc[s] = (
                    _first(by_pred.get(PROV.agent), i),
                    _first(by_pred.get(PROV.hadPlan), i),
                )

    relations: list[tuple[str, str, str, str | None]] = []
    for block in blocks:
        cls = block.rdf_type
        if cls == PROV.Association:
            continue
        subjects = block.subjects.to_pylist()
        cols = [(c, _values(c, len(block))) for c in block.columns[1:]]
        for i, s in enumerate(subjects):
            attrs: list[tuple[Any, Any]] = [(PROV_TYPE, names(cls))]
            if cls in _PLANS:
                attrs.append((PROV_TYPE, names(PROV.Plan)))
            start = end = None
            qualified: list[str] = []
            for col, vals in cols:
                if col.predicate == RDF.type:
                    continue  # the PROV base types: the record kind says it
                for v in _all(vals, i):
                    p = col.predicate
                    if p == PROV.startedAtTime and cls in _ACTIVITIES:
                        start = _literal(v, col.kind, col.datatype, names)
                    elif p == PROV.endedAtTime and cls in _ACTIVITIES:
                        end = _literal(v, col.kind, col.datatype, names)
                    elif p == PROV.qualifiedAssociation:
                        qualified.append(v)
                    elif p in _RELATIONS:
                        relations.append((p, s, v, None))
                    elif p == PROV.atLocation:
                        attrs.append(
                            (names(PROV.atLocation.replace("atLocation", "location")), names(v))
                        )
                    else:
                        attrs.append((names(p), _literal(v, col.kind, col.datatype, names)))
            qn = names(s)
            if cls in _ACTIVITIES:
                doc.activity(qn, start, end, attrs)
            elif cls in _AGENTS:
                doc.agent(qn, attrs)
            else:
                doc.entity(qn, attrs)
            for a in qualified:
                agent, plan = assoc.get(a, (None, None))
                relations.append((PROV.qualifiedAssociation, s, agent or "", plan))
                relations.append(("assoc-id", a, "", None))

    covered = {(s, v) for p, s, v, _ in relations if p == PROV.qualifiedAssociation}
    assoc_ids = iter([s for p, s, _, _ in relations if p == "assoc-id"])
    for p, s, v, plan in relations:
        if p == PROV.used:
            doc.used(names(s), names(v))
        elif p == MP.usedReplica:
            doc.used(names(s), names(v), other_attributes=[(PROV_TYPE, names(MP.usedReplica))])
        elif p == PROV.wasGeneratedBy:
            doc.wasGeneratedBy(names(s), names(v))
        elif p == PROV.wasAssociatedWith:
            if (s, v) not in covered:
                doc.wasAssociatedWith(names(s), names(v))
        elif p == PROV.qualifiedAssociation:
            doc.wasAssociatedWith(
                names(s),
                names(v) if v else None,
                names(plan) if plan else None,
                identifier=names(next(assoc_ids)),
            )
        elif p == PROV.actedOnBehalfOf:
            doc.actedOnBehalfOf(names(s), names(v))
        elif p == PROV.wasAttributedTo:
            doc.wasAttributedTo(names(s), names(v))
        elif p == PROV.specializationOf:
            doc.specializationOf(names(s), names(v))
    return doc


_RELATIONS = {
    PROV.used,
    MP.usedReplica,
    PROV.wasGeneratedBy,
    PROV.wasAssociatedWith,
    PROV.actedOnBehalfOf,
    PROV.wasAttributedTo,
    PROV.specializationOf,
}


def _values(col: Any, n: int) -> list[Any]:
    if isinstance(col.values, str):
        return [col.values] * n
    return col.values.to_pylist()


def _first(vals: list[Any] | None, i: int) -> Any:
    return None if vals is None else vals[i]


def _all(vals: list[Any], i: int) -> list[Any]:
    v = vals[i]
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _serialize(graph: ProvGraph, out: IO[bytes], fmt: str, label: str, force: bool) -> int:
    blocks = _limit(graph, force, label)
    doc = build_document(graph, force, label, blocks=blocks)
    text = (
        doc.serialize(None, format=fmt, indent=2)
        if fmt == "json"
        else doc.serialize(None, format=fmt)
    )
    if text is None:  # pragma: no cover - prov returns the text when no destination is given
        raise RuntimeError("prov returned no text")
    out.write(text.encode("utf-8") if isinstance(text, str) else text)
    return sum(block_triples(b) for b in blocks)


def write_provn(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write PROV-N; returns the number of triples of the source graph."""
    return _serialize(graph, out, "provn", "PROV-N", force)


def write_provjson(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write PROV-JSON; returns the number of triples of the source graph."""
    return _serialize(graph, out, "json", "PROV-JSON", force)


def write_provxml(graph: ProvGraph, out: IO[bytes], *, force: bool = False) -> int:
    """Write PROV-XML; returns the number of triples of the source graph."""
    return _serialize(graph, out, "xml", "PROV-XML", force)
