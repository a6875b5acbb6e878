"""Publish runs' provenance as a Provenance Run Crate (RO-Crate, Workflow Run Crate profiles 0.5).

Input: run directories (and, for ``add_to``, an existing crate). Output: a crate directory or
``.zip`` holding, per run, its W3C PROV files (Turtle, JSON-LD, PROV-N), the workflow as the task
graphs its clients submitted, a per-task-prefix account of what ran, and the run's record files
(listed, or copied); plus ``README.md`` and ``ro-crate-preview.html`` for people. The crate
states that it conforms to https://w3id.org/ro/wfrun/provenance/0.5 (see ``docs/crate.md``).

Stages per run: :func:`metaprov.read_run` -> :func:`metaprov.to_prov` -> the PROV files
(:mod:`metaprov.crate.exports`) -> the per-prefix figures (:mod:`metaprov.crate.figures`) -> the
crate's entities (:mod:`metaprov.crate.builder`). The crate is built in a staging directory
beside the output and moved into place at the end (:mod:`metaprov.crate.package`).

Needs the ``crate`` extra (``pip install 'metaprov[crate]'``: the ``rocrate`` library).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaprov.crate.exports import DEFAULT_FORMATS, PROV_FILES
from metaprov.errors import InputError, UsageError
from metaprov.mapping.terms import DEFAULT_BASE

log = logging.getLogger("metaprov")

__all__ = ["crate", "CrateResult", "DEFAULT_FORMATS", "PROV_FILES"]


@dataclass
class CrateResult:
    """What :func:`crate` wrote.

    Attributes:
        output: the crate directory or zip file.
        runs: per run: ``path``, ``run_id``, ``folder`` (in the crate), ``files`` (the PROV files
            with triples, size and sha256) and ``notes`` (formats not written and why).
        entities: entities in the crate's metadata.
        metadata_bytes: size of ``ro-crate-metadata.json``.
        warnings: what a repository will want and is missing (license, author, ...), and
            runs the profile cannot describe (none of whose tasks ran).
        seconds: wall time.
    """

    output: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    entities: int = 0
    metadata_bytes: int = 0
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        """One line per run for people."""
        lines = [
            f"{self.output}: {len(self.runs)} run(s), {self.entities} entities, "
            f"metadata {self.metadata_bytes:,} bytes, {self.seconds:.1f} s"
        ]
        for r in self.runs:
            files = ", ".join(f"{f['file']} ({f['size']:,} B)" for f in r["files"])
            lines.append(f"  {r['folder']}  {files}")
            lines += [f"    note: {n}" for n in r["notes"]]
        return "\n".join(lines)


def require_rocrate() -> None:
    """Raise MissingDependency (exit code 2) naming the ``crate`` extra when the rocrate
    library is missing."""
    from metaprov.errors import require

    require("rocrate.rocrate", extra="crate", feature="metaprov crate")


def crate(
    runs: str | Path | Sequence[str | Path],
    output: str | Path | None = None,
    *,
    add_to: str | Path | None = None,
    name: str | None = None,
    description: str | None = None,
    license: str | None = None,
    authors: Sequence[str] = (),
    date_published: str | None = None,
    include_inputs: bool = False,
    workflow: str | Path | None = None,
    report: bool = True,
    formats: Sequence[str] = DEFAULT_FORMATS,
    base: str = DEFAULT_BASE,
    darshan: bool = True,
    force: bool = False,
    progress: bool = False,
    data: Sequence[str | Path] = (),
    container_image: str | None = None,
) -> CrateResult:
    """Write a Provenance Run Crate of one or more runs (or add them to an existing crate).

    Args:
        runs: run directories (one crate, one CreateAction per run; agents and software shared).
        output: the crate: a directory (must be new or empty unless ``force``) or ``FILE.zip``
            (must not exist unless ``force``). Default with ``add_to``: that crate, updated.
        add_to: an existing crate (directory or zip) to add the runs to: its entities are kept;
            a run already in it is replaced, not duplicated.
        name, description: the dataset's name and description (defaults say what is inside).
        license: SPDX identifier (``CC-BY-4.0``) or URL of the dataset's license.
        authors: ``"Name <ORCID or IRI>"``, an ORCID iD, an IRI or a name, per author.
        date_published: ``YYYY-MM-DD``; default: the day the newest run ended (the same runs
            give the same crate) or, with ``add_to``, the crate's own date.
        include_inputs: copy the runs' record files into the crate (default: list them with
            path, size and sha256).
        workflow: the client script (Python) that submitted the runs' task graphs: the crate's
            workflow, shared by the runs (default: each run's task graphs, task-graph.json).
        report: put each run's HTML report (``report.html``) in its folder when
            ``metaprov.report`` is available.
        formats: PROV formats to include, among ``turtle``, ``json-ld``, ``provn``.
        base: base IRI of the PROV instances (as for ``metaprov export``).
        darshan: read the runs' Darshan logs (I/O and the files read and written).
        force: replace an existing output (directory or zip).
        progress: progress bars while reading.
        data: folders holding the workflow's input and result files as the run saw them (the
            paths Darshan recorded): the files under them are at hand, and the crate gives
            each its ``contentSize`` and ``sha256``. Nothing outside them is read (a run's
            Darshan logs may name any file of the machine).
        container_image: the image the run's processes ran in (``registry/name:tag``), for a
            run whose capture could not see it (inside Docker, the image is not visible).

    Returns:
        A :class:`CrateResult`.

    Raises:
        MissingDependency: the ``crate`` extra is not installed.
        UsageError: bad options, or an output that cannot be written.
        OutputError: the output is, holds or sits inside a run (``force`` or not), or exists
            (without ``force``).
        InputError: a run or the existing crate cannot be read, or is not a crate.

    Example:
        >>> crate(["examples/run"], "run-crate.zip", license="CC-BY-4.0")  # doctest: +SKIP
    """
    from metaprov.crate.metadata import Author, check_date, license_entity, parse_author
    from metaprov.crate.package import Staging, check_output

    start = time.perf_counter()
    require_rocrate()
    paths = [Path(runs)] if isinstance(runs, (str, Path)) else [Path(r) for r in runs]
    if not paths:
        raise UsageError("no run given", hint="give at least one run directory")
    bad = [f for f in formats if f not in PROV_FILES]
    if bad or not formats:
        raise UsageError(
            f"unknown PROV format(s) for a crate: {', '.join(bad) or '(none)'}",
            hint=f"use some of: {', '.join(PROV_FILES)}",
        )
    lic = license_entity(license) if license else None
    people: list[Author] = [parse_author(a) for a in authors]
    if date_published:
        check_date(date_published)
    script = Path(workflow) if workflow is not None else None
    if script is not None and not script.is_file():
        raise InputError("no such workflow script", path=script, hint="give the client script")
    for p in paths:
        if not p.is_dir():
            raise InputError(
                "no such run directory", path=p, hint="give a directory of run records"
            )
    data_dirs = [Path(d).resolve() for d in data]
    for d in data_dirs:
        if not d.is_dir():
            raise InputError("no such data folder", path=d, hint="give folders of the run's files")
    existing = Path(add_to) if add_to is not None else None
    if output is None:
        if existing is None:
            raise UsageError(
                "no output given", hint="give -o DIR or -o FILE.zip, or --add-to CRATE"
            )
        out = existing
    else:
        out = Path(output)
    in_place = existing is not None and out.absolute() == existing.absolute()
    inputs = [*paths, *([script] if script is not None else [])]
    if existing is not None and not in_place:
        inputs.append(existing)
    check_output(out, force=force, in_place=in_place, inputs=inputs)

    result = CrateResult(output=str(out))
    with Staging(out) as stage:
        rc = _open_crate(existing, stage.dir)
        builder, parts = _build(
            rc,
            stage.dir,
            paths,
            formats=tuple(formats),
            base=base,
            darshan=darshan,
            progress=progress,
            include_inputs=include_inputs,
            report=report,
            script=script,
            result=result,
            data=data_dirs,
            container_image=container_image,
        )
        _root_metadata(
            rc,
            parts,
            name=name,
            description=description,
            license=lic,
            authors=people,
            date_published=date_published,
            fresh=existing is None,
            result=result,
        )
        builder.finish(parts)
        _write_preview(rc, stage.dir)
        rc.write(stage.dir)
        md = stage.dir / "ro-crate-metadata.json"
        result.metadata_bytes = md.stat().st_size
        result.entities = len(list(rc.get_entities()))
        stage.commit()
    result.seconds = time.perf_counter() - start
    return result


def _open_crate(existing: Path | None, staging: Path) -> Any:
    from rocrate.rocrate import ROCrate

    from metaprov.crate.builder import WFRUN_CONTEXT
    from metaprov.crate.package import load_crate, unpack_existing

    if existing is None:
        rc = ROCrate(version="1.1")
    else:
        unpack_existing(existing, staging)
        rc = load_crate(staging, existing)
        if rc.version != "1.1":
            log.warning(
                "%s is an RO-Crate %s: its version is kept; the Provenance Run Crate 0.5 profile "
                "is defined over RO-Crate 1.1",
                existing,
                rc.version,
            )
    if WFRUN_CONTEXT not in rc.metadata.extra_contexts:
        rc.metadata.extra_contexts.append(WFRUN_CONTEXT)
    return rc


def _write_preview(rc: Any, staging: Path) -> None:
    """Replace the preview with metaprov's page (rendered from the finished metadata)."""
    from rocrate.model.preview import Preview

    from metaprov.crate.preview import render_preview

    if rc.preview is not None:
        rc.delete(rc.preview)
    # given as text: rocrate writes it (a source file in the staging directory would be truncated
    # by its own copy)
    rc.add(Preview(rc, source=io.StringIO(render_preview(rc))))


def _build(
    rc: Any,
    staging: Path,
    paths: list[Path],
    *,
    formats: tuple[str, ...],
    base: str,
    darshan: bool,
    progress: bool,
    include_inputs: bool,
    report: bool,
    script: Path | None,
    result: CrateResult,
    data: list[Path],
    container_image: str | None,
) -> tuple[Any, list[Any]]:
    from metaprov.crate.builder import (
        CrateBuilder,
        RunPart,
        folder_name,
        ran,
        record_digests,
        render_report,
    )
    from metaprov.crate.exports import write_exports
    from metaprov.crate.figures import run_figures
    from metaprov.crate.package import owned_ids, remove_entities
    from metaprov.ingest import read_run
    from metaprov.mapping import to_prov

    builder = CrateBuilder(
        rc,
        staging,
        include_inputs=include_inputs,
        report=report,
        script=script,
        data=data,
        container_image=container_image,
    )
    builder.add_profiles()
    parts = []
    seen: set[str] = set()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metaprov-crate-sha256")
    drawing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metaprov-crate-report")
    for path in paths:
        # the record files are hashed in the background (hashlib releases the GIL) while the
        # run is read, mapped and written
        digests = None if include_inputs else pool.submit(record_digests, path)
        records = read_run(path, darshan=darshan, progress=progress)
        graph = to_prov(records, base=base)
        if graph.run_id in seen:
            log.warning("%s: run %s given twice; added once", path, graph.run_id)
            continue
        seen.add(graph.run_id)
        remove_entities(rc, owned_ids(rc, graph.run_id, graph.run_iri), staging)
        part = RunPart(str(path), graph, run_figures(graph), digests=digests)
        part.folder = folder_name(str(path), graph.run_id)
        (staging / part.folder).mkdir(parents=True, exist_ok=True)
        if report:  # drawn from the records while the PROV files are written
            part.report = drawing.submit(render_report, graph.records, str(path))
        part.prov, part.notes = write_exports(graph, staging / part.folder, formats)
        graph.release_context()
        builder.add_run(part)
        if not any(ran(r) for r in part.figures.prefixes.itertuples()):
            result.warnings.append(
                f"{path}: no task of the run ran by its records, so it has no step actions: its "
                "part of the crate does not meet the Provenance Run Crate profile (a workflow's "
                "tools and the engine's ControlActions are required)"
            )
        parts.append(part)
        result.runs.append(
            {
                "path": str(path),
                "run_id": graph.run_id,
                "folder": part.folder,
                "files": part.prov,
                "notes": part.notes,
            }
        )
    pool.shutdown()
    drawing.shutdown()
    return builder, parts


def _root_metadata(
    rc: Any,
    parts: list[Any],
    *,
    name: str | None,
    description: str | None,
    license: dict[str, Any] | None,
    authors: list[Any],
    date_published: str | None,
    fresh: bool,
    result: CrateResult,
) -> None:
    from rocrate.model.contextentity import ContextEntity

    from metaprov.crate.builder import ids_of
    from metaprov.crate.metadata import NO_LICENSE

    root = rc.root_dataset
    n = len(parts)
    if name or fresh or not root.get("name"):
        root["name"] = name or (
            f"Provenance of Dask run {Path(parts[0].path).name}"
            if n == 1
            else f"Provenance of {n} Dask runs"
        )
    if description or fresh or not root.get("description"):
        root["description"] = description or (
            f"W3C PROV of {n} Dask run(s), recorded with metaprov: per task prefix, what ran, "
            "when, on which workers and with which files, in this metadata; every task, "
            "execution, transfer and file access in each run's PROV files."
        )
    if license is not None:
        ent = rc.get(license["@id"]) or rc.add(
            ContextEntity(
                rc, license["@id"], properties={k: v for k, v in license.items() if k != "@id"}
            )
        )
        root["license"] = ent
    elif not root.get("license"):
        root["license"] = NO_LICENSE
        result.warnings.append(
            "no license: repositories (Zenodo, WorkflowHub) require one; pass --license"
        )
    for a in authors:
        props = {"@type": "Person"}
        if a.name:
            props["name"] = a.name
        ent = rc.get(a.id) or rc.add(ContextEntity(rc, a.id, properties=props))
        if a.id not in ids_of(root.get("author")):
            root.append_to("author", ent, compact=True)
    if not root.get("author"):
        result.warnings.append(
            'no author: repositories want the dataset\'s authors; pass --author "Name <ORCID>"'
        )
    if date_published:
        root["datePublished"] = date_published
    elif fresh or not root.get("datePublished"):
        ends = [p.figures.run.get("last_us") for p in parts if p.figures.run.get("last_us")]
        if ends:
            import numpy as np

            root["datePublished"] = str(np.datetime64(max(ends), "us").astype("datetime64[D]"))
    for w in result.warnings:
        log.info("%s", w)  # the CLI prints result.warnings; a library caller reads them


from metaprov._callable import make_callable  # noqa: E402 - after crate() is defined

make_callable(__name__)  # metaprov.crate(...) also once this package has been imported
