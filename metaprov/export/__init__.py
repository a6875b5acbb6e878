"""The whole export pipeline in one call: run directory -> PROV file.

Input: a run directory (or RunRecords already read). Output: the file, written atomically in the
chosen format, and an :class:`ExportResult` saying what was written.

Stages: :func:`metaprov.read_run` -> :func:`metaprov.link_io` (when Darshan logs were read) ->
:func:`metaprov.to_prov` -> :func:`metaprov.write`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from metaprov.mapping.terms import DEFAULT_BASE

if TYPE_CHECKING:
    from metaprov.records import RunRecords

log = logging.getLogger("metaprov")


@dataclass
class ExportResult:
    """What :func:`export` wrote."""

    output: str
    format: str
    triples: int
    run_id: str
    run_iri: str
    graph_iri: str
    missing: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: The run was being written: what was exported, and why it is taken as in progress.
    in_progress: str = ""
    #: what ``triples`` counts: triples (RDF and PROV formats) or events (``trace``)
    unit: str = "triples"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``metaprov export --json``)."""
        out: dict[str, Any] = {
            "output": self.output,
            "format": self.format,
            "triples": self.triples,
            **({self.unit: self.triples} if self.unit != "triples" else {}),
            "run_id": self.run_id,
            "run": self.run_iri,
            "graph": self.graph_iri,
            "missing_inputs": list(self.missing),
            "seconds": round(self.seconds, 3),
        }
        if self.in_progress:
            out["in_progress"] = self.in_progress
        return out

    def summary(self) -> str:
        """One line for humans."""
        text = f"{self.output}: {self.triples:,} {self.unit} ({self.format}), run <{self.run_iri}>, {self.seconds:.1f} s"
        if self.missing:
            text += f"; inputs missing: {', '.join(self.missing)}"
        if self.in_progress:
            text += (
                f"\nthe run is {self.in_progress}; tasks without an execution yet carry no "
                "mp:neverRan claim, and the run's id will change as it grows: export it again "
                "when it is complete (or keep a store current with metaprov follow)"
            )
        return text


def export(
    run: str | Path | RunRecords,
    output: str | Path | IO[bytes],
    *,
    format: str | None = None,
    base: str = DEFAULT_BASE,
    detail: str = "tasks",
    io_detail: str = "aggregate",
    darshan: bool = True,
    force: bool = False,
    progress: bool = False,
    overwrite: bool = False,
) -> ExportResult:
    """Export a run as W3C PROV.

    Args:
        run: a run directory, or records from :func:`metaprov.read_run`.
        output: the file to write (``-``: standard output; ``.gz``: compressed), or a binary
            stream; for ``-`` and streams ``format`` is required. An output that is, holds or
            sits inside the run directory (or one of its files) is refused.
        format: format name or alias; default from the file suffix.
        base: base IRI for the run's instances.
        detail: ``tasks`` or ``transitions`` (every state transition as an mp:Transition).
        io_detail: Darshan I/O as ``aggregate`` (per activity, file and operation) or
            ``segments`` (also every traced call as an mp:IOSegment).
        darshan: read the run's Darshan logs (and link their I/O to tasks) when there are any.
        force: let the ``prov``-package formats run above their size limit.
        progress: progress bar while reading.
        overwrite: replace an existing output file (the CLI's ``--force``); else it is refused.

    Returns:
        An :class:`ExportResult`.

    Raises:
        FormatError: unknown format (checked before reading anything).
        InputError: the run cannot be read.
        LimitError: PROV-N/JSON/XML above the limit without ``force``.
        OutputError: the output cannot be written (or is one of the run's files).

    Example:
        >>> export("runs/D2024-04-19_19:01:00_R1_W8", "r1.ttl").triples  # doctest: +SKIP
    """
    from metaprov.mapping import to_prov
    from metaprov.records import RunRecords
    from metaprov.write import resolve_format, write
    from metaprov.write.output import check_output

    start = time.perf_counter()
    to_file = isinstance(output, (str, Path))
    fmt = resolve_format(output if to_file else None, format)
    if to_file:
        # a directory, a parent that is a file, the run itself, an existing file: before reading
        check_output(output, inputs=_run_paths(run), overwrite=overwrite)
    note = ""
    if isinstance(run, RunRecords):
        records = run
    else:
        from metaprov.ingest import read_run
        from metaprov.live.partial import readable

        # a run being written: its whole rows only (never a row being written)
        with readable(run) as rd:
            records = read_run(rd.path, darshan=darshan, progress=progress)
            if rd.in_progress:
                records.path = str(run)
                note = rd.note()
                # "never ran" is a fact of a finished run: a task without an execution yet is
                # waiting or running (its mp:state says which), as in metaprov follow's graph
                records.tasks["never_ran"] = False
    if records.darshan is not None and records.io is None:
        from metaprov.link import link_io

        link_io(records)
    graph = to_prov(records, base=base, detail=detail, io_detail=io_detail)
    inputs = [*_run_paths(records), *input_files(records)]
    n = write(graph, output, fmt.name, force=force, inputs=inputs, overwrite=overwrite)
    return ExportResult(
        output=("<stdout>" if str(output) == "-" else str(output)) if to_file else "<stream>",
        format=fmt.name,
        triples=n,
        run_id=graph.run_id,
        run_iri=graph.run_iri,
        graph_iri=graph.graph_iri,
        missing=sorted(str(m) for m in records.missing),
        seconds=time.perf_counter() - start,
        in_progress=note,
        unit=fmt.unit,
    )


def _run_paths(run: str | Path | RunRecords) -> list[Path]:
    """The run directory an export reads (none for records without a path)."""
    from metaprov.records import RunRecords

    if isinstance(run, RunRecords):
        return [Path(run.path)] if run.path else []
    return [Path(run)]


def input_files(records: RunRecords) -> list[Path]:
    """The files a run's records were read from (what an export must never replace)."""
    if not records.path:
        return []
    run = Path(records.path)
    files = [run / name for name, acct in records.accounting.files.items() if acct.present]
    if records.darshan is not None and len(records.darshan.logs):
        files.extend(Path(p) for p in records.darshan.logs["path"].dropna().astype(str))
    return files
