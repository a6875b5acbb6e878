"""Build the entities of a Provenance Run Crate: an ordered list of ``add_*`` steps per run.

Input: the runs (records mapped to a :class:`~metaprov.mapping.ProvGraph`, figures from
:mod:`metaprov.crate.figures`) and the crate being built (an ``rocrate.ROCrate``, written into a
staging directory). Output: the crate's entities, following the Provenance Run Crate 0.5 profile:

    add_profiles        root conformsTo: Process / Workflow / Provenance Run Crate 0.5, WRROC 1.0
    add_run             for each run, in order:
      _add_folder         runs/<name>_<id>/ (a Dataset)
      _add_workflow       the task graphs (task-graph.json) as the ComputationalWorkflow
      _add_agent          the user who ran it (a Person, shared between runs)
      _add_steps          per task prefix: the tool (SoftwareApplication) and its HowToStep
      _add_run_action     the run's CreateAction (start, end, agent, instrument, object, result)
      _add_prefix_actions per prefix: CreateAction (+ resourceUsage) and ControlAction
      _add_engine_run     the Dask scheduler's OrganizeAction
      _add_prov           the PROV exports (data entities with format, conformsTo, size, sha256)
      _add_records        the run's record files (copied, or listed with size and sha256)
      _add_workflow_io    the whole workflow's inputs (object: files, its configuration) and
                          results (result) on the run's action
      _add_report         the HTML report of the run, when metaprov.report is available
    finish              README.md, root mentions, preview

Identifiers are deterministic: the run and its task prefixes keep their PROV IRIs (so the crate
and the PROV files name the same things), everything else is derived from them or from the run
folder, and every run-owned entity is recognised by :func:`owned_by` when a run is replaced.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from metaprov.crate.exports import PROV_FILES, file_digest
from metaprov.errors import UsageError
from metaprov.records import csv_text
from metaprov.timeutil import NAT_US

if TYPE_CHECKING:
    from metaprov.crate.figures import RunFigures
    from metaprov.mapping import ProvGraph

log = logging.getLogger("metaprov")

README_DESCRIPTION = "What this crate holds, run by run (written by metaprov crate)."

PROFILE_BASE = "https://w3id.org/ro/wfrun"
PROFILE_VERSION = "0.5"
WROC_PROFILE = "https://w3id.org/workflowhub/workflow-ro-crate/1.0"
WFRUN_CONTEXT = "https://w3id.org/ro/terms/workflow-run/context"
PROV_O = "https://www.w3.org/TR/prov-o/"
PROV_N = "https://www.w3.org/TR/prov-n/"
DASK_GRAPH_SPEC = "https://docs.dask.org/en/stable/spec.html"
DISTRIBUTED_URL = "https://distributed.dask.org/"
PYTHON = "https://www.python.org/"
#: the profile a Workflow RO-Crate's main workflow conforms to (Bioschemas ComputationalWorkflow)
BIOSCHEMAS_WORKFLOW = "https://bioschemas.org/profiles/ComputationalWorkflow/1.0-RELEASE"
QUDT = "http://qudt.org/vocab/unit/"
#: actionStatus values as the profile's checks expect them (plain strings)
COMPLETED = "http://schema.org/CompletedActionStatus"
FAILED = "http://schema.org/FailedActionStatus"
COUNT, SECONDS, BYTES = QUDT + "NUM", QUDT + "SEC", QUDT + "BYTE"
#: how a crate names tasks that ran with no record of their execution (docs/records.md, "Counts")
UNRECORDED = "ran without a record of their execution"


def crate_time(us: int, *, up: bool = False) -> str | None:
    """A time for the crate's actions: ``YYYY-MM-DDTHH:MM:SS.mmm+00:00``.

    The Process Run Crate checks want milliseconds and a numeric offset; a start is rounded down
    and an end up, so the action's interval holds every event of the PROV files (which keep µs).
    """
    if us is None or us == NAT_US:
        return None
    ms = -((-us) // 1000) if up else us // 1000
    t = np.datetime64(int(ms), "ms")
    return str(np.datetime_as_string(t, unit="ms")) + "+00:00"


def folder_name(path: str, run_id: str) -> str:
    """``runs/<directory name>_<run id>/``: readable, unique, safe in a zip on any system."""
    import re

    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(path).name).strip("-.") or "run"
    return f"runs/{name}_{run_id}/"


def record_digests(run: str | Path, *, hash: bool = True) -> dict[str, tuple[int, str]]:
    """The run directory's files (relative path -> size and sha256), sorted by path."""
    src = Path(run)
    out: dict[str, tuple[int, str]] = {}
    for p in sorted(x for x in src.rglob("*") if x.is_file()):
        rel = p.relative_to(src).as_posix()
        try:
            out[rel] = file_digest(p) if hash else (p.stat().st_size, "")
        except OSError as exc:  # unreadable: listed with its size, without a sha256
            log.warning("%s: cannot read %s (%s): listed without a sha256", run, rel, exc.strerror)
            out[rel] = (p.stat().st_size, "")
    return out


def render_report(records: Any, path: str) -> str | None:
    """The HTML text of the report of ``records`` (read and linked), or None with a warning
    when Bokeh (the ``report`` extra) is missing or the page cannot be drawn. Only reads the
    records, so it may run in a thread while the PROV files are written."""
    from metaprov.errors import FormatError, MetaprovError
    from metaprov.report import render, require_bokeh

    try:
        require_bokeh()
    except FormatError as exc:
        log.warning("%s: no HTML report in the crate: %s (%s)", path, exc, exc.hint)
        return None
    from metaprov.analysis.summary import summarize
    from metaprov.report.views import run_view

    # the page names the run by its directory's name, not by where the builder read it from
    # (an absolute path of the builder's machine has no place in a published crate)
    records = dataclasses.replace(records, path=Path(str(records.path or path)).name)
    try:
        text, _facts = render([run_view(records, summarize(records))])
    except MetaprovError as exc:
        log.warning("%s: no HTML report in the crate: %s", path, exc)
        return None
    return text


@dataclass
class RunPart:
    """One run going into the crate."""

    path: str
    graph: ProvGraph
    figures: RunFigures
    folder: str = ""
    prov: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: a future of :func:`record_digests` (None: hash while copying, with include_inputs)
    digests: Any = None
    #: a future of :func:`render_report` (None: drawn when the run is added)
    report: Any = None


class CrateBuilder:
    """Adds runs to an ``rocrate.ROCrate`` built in ``staging`` (see the module docstring)."""

    def __init__(
        self,
        crate: Any,
        staging: Path,
        *,
        include_inputs: bool = False,
        report: bool = True,
        script: Path | None = None,
        data: list[Path] | None = None,
        container_image: str | None = None,
    ) -> None:
        self.crate = crate
        self.script = script
        self.data = list(data or [])
        self.container_image = container_image
        self.staging = staging
        self.include_inputs = include_inputs
        self.with_report = report
        self.actions: list[Any] = []

    # --- helpers ---------------------------------------------------------------------------
    def _ctx(self, id_: str, props: dict[str, Any]) -> Any:
        from rocrate.model.contextentity import ContextEntity

        existing = self.crate.get(id_)
        if existing is not None:
            return existing  # shared between runs (a person, the engine, a language)
        return self.crate.add(ContextEntity(self.crate, id_, properties=props))

    def _file(self, rel: str, props: dict[str, Any]) -> Any:
        from rocrate.model.file import File

        return self.crate.add(File(self.crate, self.staging / rel, rel, properties=props))

    @staticmethod
    def _when_who(props: dict[str, Any], first_us: Any, last_us: Any, agent: Any | None) -> None:
        """startTime / endTime (when known) and the agent (when known) of an action."""
        start, end = crate_time(first_us), crate_time(last_us, up=True)
        if start:
            props["startTime"] = start
        if end:
            props["endTime"] = end
        if agent is not None:
            props["agent"] = agent

    @staticmethod
    def _set(entity: Any, prop: str, values: list[Any]) -> None:
        """A property with one value is written as that value, with several as a list."""
        if not values:
            return
        entity[prop] = values[0] if len(values) == 1 else values

    def _pv(self, id_: str, name: str, prop: str, value: Any, unit: str) -> Any:
        return self._ctx(
            id_,
            {
                "@type": "PropertyValue",
                "name": name,
                "propertyID": prop,
                "value": value,
                "unitCode": unit,
            },
        )

    # --- crate-wide steps ------------------------------------------------------------------
    def add_profiles(self) -> None:
        """Root conformsTo: the three Workflow Run Crate profiles and Workflow RO-Crate."""
        root = self.crate.root_dataset
        have = ids_of(root.get("conformsTo"))
        for kind, label in (
            ("process", "Process"),
            ("workflow", "Workflow"),
            ("provenance", "Provenance"),
        ):
            pid = f"{PROFILE_BASE}/{kind}/{PROFILE_VERSION}"
            ent = self._ctx(
                pid,
                {"@type": "CreativeWork", "name": f"{label} Run Crate", "version": PROFILE_VERSION},
            )
            if pid not in have:
                root.append_to("conformsTo", ent, compact=True)
        ent = self._ctx(
            WROC_PROFILE, {"@type": "CreativeWork", "name": "Workflow RO-Crate", "version": "1.0"}
        )
        if WROC_PROFILE not in have:
            root.append_to("conformsTo", ent, compact=True)
        for spec, name in (
            (PROV_O, "PROV-O: The PROV Ontology"),
            (PROV_N, "PROV-N: The Provenance Notation"),
        ):
            self._ctx(spec, {"@type": "CreativeWork", "name": name})
        from metaprov.mapping.terms import ONTOLOGY_VERSION, ONTOLOGY_VERSION_IRI

        self._ctx(
            ONTOLOGY_VERSION_IRI,
            {"@type": "CreativeWork", "name": "metaprov ontology", "version": ONTOLOGY_VERSION},
        )

    # --- per run ---------------------------------------------------------------------------
    def add_run(self, run: RunPart) -> None:
        """All entities of one run, in order."""
        run.folder = folder_name(run.path, run.graph.run_id)
        self._add_folder(run)
        wf = self._add_workflow(run)
        agent = self._add_agent(run)
        steps = self._add_steps(run, wf)
        action = self._add_run_action(run, wf, agent)
        controls = self._add_prefix_actions(run, steps, agent)
        self._add_environment(run, action, steps)
        self._add_jobs(run, action)
        self._add_engine_run(run, action, controls, agent)
        self._add_prov(run, action)
        self._add_records(run, action)
        self._add_workflow_io(run, action)
        self._add_report(run, action)

    def _add_folder(self, run: RunPart) -> None:
        from rocrate.model.dataset import Dataset

        (self.staging / run.folder).mkdir(parents=True, exist_ok=True)
        ds = self.crate.add(
            Dataset(
                self.crate,
                self.staging / run.folder,
                run.folder,
                properties={
                    "name": f"Dask run {Path(run.path).name}",
                    "description": (
                        f"Provenance of the Dask run recorded in {Path(run.path).name} "
                        f"(metaprov run id {run.graph.run_id})."
                    )
                    + "".join(f" {n}" for n in run.notes),
                },
            )
        )
        run.dataset = ds  # type: ignore[attr-defined]

    def _add_workflow(self, run: RunPart) -> Any:
        """The workflow of a Dask run is the task graphs its clients submitted: written as a
        per-prefix summary (prefixes, their dependencies, the graphs) in task-graph.json."""
        figs = run.figures
        rec = run.graph.records
        p = figs.prefixes
        doc = {
            "format": "metaprov task-graph summary 1",
            "run_id": run.graph.run_id,
            "run": run.graph.run_iri,
            "graphs": [
                {
                    "index": int(g.graph),
                    "client": None if pd.isna(g.client) else str(g.client),
                    "received": crate_time(int(g.time.value // 1000))
                    if not pd.isna(g.time)
                    else None,
                    "tasks": None if pd.isna(g.n_tasks) else int(g.n_tasks),
                    "wanted": None if pd.isna(g.n_wanted) else int(g.n_wanted),
                    "edges": None if pd.isna(g.n_edges) else int(g.n_edges),
                }
                for g in rec.graphs.sort_values("graph").itertuples()
            ],
            "prefixes": [
                {
                    "name": str(r.prefix),
                    "position": None if pd.isna(r.position) else int(r.position),
                    "tasks": int(r.tasks),
                    "depends_on": {
                        str(e.depends_on): int(e.edges)
                        for e in figs.edges[figs.edges["prefix"] == r.prefix].itertuples()
                    },
                }
                for r in p.itertuples()
            ],
        }
        rel = run.folder + "task-graph.json"
        (self.staging / rel).write_text(
            json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8"
        )
        size, digest = file_digest(self.staging / rel)
        graphs = self._file(
            rel,
            {
                "@type": ["File", "SoftwareSourceCode", "ComputationalWorkflow", "HowTo"]
                if self.script is None
                else "File",
                "name": f"Task graphs of Dask run {Path(run.path).name}",
                "description": (
                    f"The {len(rec.graphs)} task graph(s) the client(s) submitted, summarised per "
                    f"task prefix ({len(p)} prefixes, {int(p['tasks'].sum()) if len(p) else 0} tasks); "
                    "every task and dependency is in the PROV files."
                ),
                "encodingFormat": "application/json",
                "contentSize": str(size),
                "sha256": digest,
            },
        )
        run.dataset.append_to("hasPart", graphs, compact=True)
        if self.script is None:
            graphs["programmingLanguage"] = self._ctx(
                DASK_GRAPH_SPEC,
                {
                    "@type": "ComputerLanguage",
                    "name": "Dask task graph",
                    "url": {"@id": DASK_GRAPH_SPEC},
                },
            )
            wf = graphs
        else:
            graphs["about"] = {"@id": run.graph.run_iri}
            wf = self._add_script()
        wf["conformsTo"] = self._ctx(
            BIOSCHEMAS_WORKFLOW,
            {"@type": "CreativeWork", "name": "Bioschemas ComputationalWorkflow profile 1.0"},
        )
        main = self.crate.mainEntity
        if main is None:
            self.crate.mainEntity = wf
        elif "ComputationalWorkflow" not in types_of(main):
            log.warning(
                "the crate's mainEntity %s is not a workflow: kept; the Workflow Run Crate "
                "profiles want the workflow (%s) there",
                main.id,
                wf.id,
            )
        return wf

    def _add_script(self) -> Any:
        """The client script given with ``workflow=`` as the workflow of every run added with it
        (one entity, shared; steps and tools of each run attach to it)."""
        assert self.script is not None
        rel = f"workflow/{quote(self.script.name)}"
        size, digest = file_digest(self.script)
        existing = self.crate.get(rel)
        if existing is not None:
            if existing.get("sha256") != digest:
                raise UsageError(
                    f"the crate already holds a different {rel}",
                    hint="rename the script, or add the runs to another crate",
                )
            return existing
        dest = self.staging / "workflow" / self.script.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.script, dest)
        python = self._ctx(
            PYTHON,
            {"@type": "ComputerLanguage", "name": "Python", "url": {"@id": PYTHON}},
        )
        return self._file(
            rel,
            {
                "@type": ["File", "SoftwareSourceCode", "ComputationalWorkflow", "HowTo"],
                "name": self.script.name,
                "description": "The client script that submitted the runs' task graphs.",
                "programmingLanguage": python,
                "encodingFormat": "text/x-python",
                "contentSize": str(size),
                "sha256": digest,
            },
        )

    def _add_agent(self, run: RunPart) -> Any | None:
        rec = run.graph.records
        user = rec.job.get("user")
        if not user:
            return None
        where = rec.job.get("server") or rec.scheduler.get("hostname") or ""
        pid = f"#person-{quote(str(user), safe='')}" + (
            f"@{quote(str(where), safe='')}" if where else ""
        )
        return self._ctx(
            pid,
            {
                "@type": "Person",
                "name": str(user),
                "description": f"The account {user}"
                + (f" on {where}" if where else "")
                + " that ran the workflow (from the run's job records).",
            },
        )

    def _add_steps(self, run: RunPart, wf: Any) -> dict[str, tuple[Any, Any]]:
        """Per task prefix: the tool (the function behind the prefix) and its HowToStep."""
        out = {}
        for r in run.figures.prefixes.itertuples():
            tool = self._ctx(
                r.iri,
                {
                    "@type": "SoftwareApplication",
                    "name": str(r.prefix),
                    "description": f"The function behind the Dask task prefix {r.prefix!r} ({r.tasks} tasks).",
                },
            )
            props = {"@type": "HowToStep", "name": str(r.prefix), "workExample": tool}
            if not pd.isna(r.position):
                props["position"] = str(int(r.position))
            step = self._ctx(f"{r.iri}#step", props)
            wf.append_to("step", step, compact=True)
            if ran(r):  # a tool in hasPart must be the instrument of an action (profile)
                wf.append_to("hasPart", tool, compact=True)
            out[str(r.prefix)] = (tool, step)
        return out

    def _usage(self, base: str, fig: dict[str, Any]) -> list[Any]:
        from metaprov.mapping.terms import VOCAB

        rows = [
            ("taskCount", "tasks", fig.get("tasks"), COUNT),
            ("executionCount", "executions with a known duration", fig.get("executions"), COUNT),
            ("erred", "tasks that erred at least once", fig.get("erred"), COUNT),
            ("retried", "tasks retried", fig.get("retried"), COUNT),
            ("totalDuration", "compute time, summed", _sec(fig.get("total")), SECONDS),
            ("meanDuration", "mean compute time", _sec(fig.get("mean")), SECONDS),
            ("minDuration", "shortest compute time", _sec(fig.get("min")), SECONDS),
            ("maxDuration", "longest compute time", _sec(fig.get("max")), SECONDS),
            (
                "nbytes",
                "result bytes (as reported by the scheduler)",
                fig.get("result_bytes"),
                BYTES,
            ),
            ("Worker", "workers", fig.get("workers"), COUNT),
            ("Thread", "threads", fig.get("threads"), COUNT),
            ("Node", "nodes", fig.get("nodes"), COUNT),
            ("Transfer", "transfers between workers", fig.get("transfers"), COUNT),
            ("totalBytes", "bytes transferred", fig.get("transfer_bytes"), BYTES),
            ("fileReadCount", "(execution, file) pairs read", fig.get("file_reads"), COUNT),
            ("bytesRead", "bytes read", fig.get("bytes_read"), BYTES),
            ("readCount", "read operations", fig.get("reads"), COUNT),
            ("fileWriteCount", "(execution, file) pairs written", fig.get("file_writes"), COUNT),
            ("bytesWritten", "bytes written", fig.get("bytes_written"), BYTES),
            ("writeCount", "write operations", fig.get("writes"), COUNT),
        ]
        out = []
        for term, name, value, unit in rows:
            if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
                continue
            out.append(self._pv(f"{base}#{term}", name, VOCAB + term, _plain(value), unit))
        return out

    def _add_run_action(self, run: RunPart, wf: Any, agent: Any | None) -> Any:
        g = run.graph
        rec = g.records
        fr = run.figures.run
        name = Path(run.path).name
        results = self._ctx(
            f"{g.run_iri}#results",
            {
                "@type": "CreativeWork",
                "name": f"Results of Dask run {name}",
                "description": (
                    f"The results of the {fr['wanted']} task(s) the client(s) asked for, held in "
                    "Dask worker memory (each a data chunk in the PROV files)."
                ),
            },
        )
        props: dict[str, Any] = {
            "@type": "CreateAction",
            "name": f"Dask run {name}",
            "identifier": g.run_id,
            "description": (
                f"Dask run {name}: scheduler {rec.scheduler.get('address', 'unknown')}, "
                f"{fr['graphs']} task graph(s), {fr['tasks']} tasks ({fr['executed']} executed, "
                + (f"{fr['unrecorded']} {UNRECORDED}, " if fr["unrecorded"] else "")
                + f"{fr['failed']} ended in error) on {fr['workers']} worker(s)"
                + (f"; missing inputs: {', '.join(rec.missing)}" if rec.missing else "")
                + "."
            ),
            "instrument": wf,
            "result": results,
            "actionStatus": FAILED if fr["failed"] else COMPLETED,
        }
        if fr["failed"]:
            props["error"] = f"{fr['failed']} of {fr['tasks']} tasks ended in error"
        self._when_who(props, fr["first_us"], fr["last_us"], agent)
        action = self._ctx(g.run_iri, props)
        self._set(action, "resourceUsage", self._usage(g.run_iri, fr))
        self.actions.append(action)
        run.dataset["about"] = action
        return action

    def _add_prefix_actions(
        self, run: RunPart, steps: dict[str, tuple[Any, Any]], agent: Any | None
    ) -> list[Any]:
        figs = run.figures
        name = Path(run.path).name
        controls = []
        for r in figs.prefixes.itertuples():
            if not ran(r):
                continue  # a step that never ran has no action (profile: skipped steps)
            tool, step = steps[str(r.prefix)]
            fig = r._asdict()
            objs = self._files(run, figs.files_read.get(str(r.prefix), []), "read")
            res = self._files(run, figs.files_written.get(str(r.prefix), []), "written")
            if r.results:
                res.append(
                    self._ctx(
                        f"{r.iri}#results",
                        {
                            "@type": "CreativeWork",
                            "name": f"Results of the {r.prefix!r} tasks",
                            "description": (
                                f"{r.results} task result(s), {r.result_bytes} bytes as reported by "
                                "the scheduler, held in Dask worker memory (data chunks in the PROV files)."
                            ),
                        },
                    )
                )
            desc = (
                f"The {r.executed} executed task(s) of prefix {r.prefix!r} in Dask run {name}"
                + (
                    f"; {r.unrecorded} {UNRECORDED} (a result size or a transfer shows it; "
                    "their times are unknown)"
                    if r.unrecorded
                    else ""
                )
                + (f"; {r.failed} ended in error" if r.failed else "")
                + (f"; {r.never_ran} never ran" if r.never_ran else "")
            )
            nr, nw = (
                figs.n_files_read.get(str(r.prefix), 0),
                figs.n_files_written.get(str(r.prefix), 0),
            )
            if nr > len(objs) or nw > len(res) - (1 if r.results else 0):
                desc += f"; files: {nr} read, {nw} written (the first {len(objs)} / up to 50 named here, all in the PROV files)"
            props: dict[str, Any] = {
                "@type": "CreateAction",
                "name": f"{r.prefix} tasks of Dask run {name}",
                "description": desc + ".",
                "instrument": tool,
                "actionStatus": FAILED if r.failed else COMPLETED,
            }
            if r.failed:
                props["error"] = f"{r.failed} of {r.tasks} task(s) ended in error"
            self._when_who(props, int(r.first_start_us), int(r.last_end_us), agent)
            act = self._ctx(f"{r.iri}#execution", props)
            self._set(act, "object", objs)
            self._set(act, "result", res)
            self._set(act, "resourceUsage", self._usage(r.iri, fig))
            self.actions.append(act)
            ctl = self._ctx(
                f"{r.iri}#control",
                {
                    "@type": "ControlAction",
                    "name": f"orchestrate {r.prefix}",
                    "instrument": step,
                    "object": act,
                    "actionStatus": props["actionStatus"],
                    **({"error": props["error"]} if r.failed else {}),
                },
            )
            controls.append(ctl)
        return controls

    def _files(self, run: RunPart, files: list[tuple[str, str]], how: str) -> list[Any]:
        # (path, the PROV file's IRI relative to the run's): a path on two nodes' own file
        # systems is two files (docs/model.md, decision 16)
        out = []
        for p, rel in files:
            out.append(
                self._ctx(
                    f"#{run.graph.run_id}/{rel}",
                    {
                        "@type": "File",
                        "name": Path(p).name or p,
                        "encodingFormat": _media_type(p),
                        "alternateName": p,
                        "description": f"A file the run's tasks {how} (traced by Darshan; not in this crate).",
                    },
                )
            )
        return out

    def _add_environment(
        self, run: RunPart, action: Any, steps: dict[str, tuple[Any, Any]]
    ) -> None:
        """The software that ran the run (Workflow Run Crate: ``softwareRequirements`` of each
        tool, ``containerImage`` of the run's action) and the package list of every process
        as a file of the crate (``packages.csv``)."""
        rec = run.graph.records
        env, pk = rec.environments, rec.packages
        if not len(env):
            if self.container_image:
                given = pd.DataFrame(
                    {"container_runtime": ["docker"], "container_image": [self.container_image]}
                )
                self._add_images(run, action, given)
            return
        name = Path(run.path).name
        role = dict(
            zip(env["process"].astype(str), env["role"].fillna("").astype(str), strict=True)
        )
        table = pd.DataFrame(
            {
                "process": pk["process"].astype(str),
                "role": pk["process"].astype(str).map(role),
                "manager": pk["manager"],
                "name": pk["name"],
                "version": pk["version"],
            }
        ).sort_values(["process", "manager", "name", "version"], kind="stable")
        rel = run.folder + "packages.csv"
        csv_text(table, self.staging / rel)
        size, digest = file_digest(self.staging / rel)
        f = self._file(
            rel,
            {
                "name": f"Software packages of Dask run {name}",
                "description": (
                    f"Every installed package and version of each of the run's {len(env)} recorded "
                    "process(es) (client, scheduler, workers; a Mofka job's Spack environment): "
                    "one row per process and package."
                ),
                "encodingFormat": "text/csv",
                "contentSize": str(size),
                "sha256": digest,
                "about": action,
            },
        )
        run.dataset.append_to("hasPart", f, compact=True)
        # the tasks ran on the workers: their packages are what each tool required
        workers = set(env.loc[env["role"].isin(["worker"]), "process"].astype(str))
        used = pk[pk["process"].astype(str).isin(workers)] if workers else pk
        used = used.drop_duplicates(["manager", "name", "version"]).sort_values(
            ["manager", "name", "version"], kind="stable"
        )
        reqs = []
        for r in used.itertuples(index=False):
            pid = (
                f"https://pypi.org/project/{quote(str(r.name))}/{quote(str(r.version))}/"
                if r.manager == "pip"
                else f"#package/{quote(str(r.manager))}/{quote(str(r.name))}/{quote(str(r.version))}"
            )
            reqs.append(
                self._ctx(
                    pid,
                    {
                        "@type": "SoftwareApplication",
                        "name": str(r.name),
                        # `version`, what the Workflow Run Crate's competency question 10 asks
                        # (Process Run Crate 6.0: not both it and softwareVersion)
                        "version": str(r.version),
                    },
                )
            )
        if reqs:
            for tool, _step in steps.values():
                self._set(tool, "softwareRequirements", reqs)
        self._add_tool_code(run, steps, reqs)
        images = env.dropna(subset=["container_image"]).drop_duplicates(
            ["container_runtime", "container_image"]
        )
        if not len(images) and self.container_image:
            # the capture saw a container but not its image (Docker does not show it inside),
            # or no container: the image the user names
            runtimes = env["container_runtime"].dropna().astype(str)
            images = pd.DataFrame(
                {
                    "container_runtime": [runtimes.iloc[0] if len(runtimes) else "docker"],
                    "container_image": [self.container_image],
                }
            )
        self._add_images(run, action, images)

    def _add_tool_code(
        self, run: RunPart, steps: dict[str, tuple[Any, Any]], reqs: list[Any]
    ) -> None:
        """Each tool's ``mainEntity``: the code its function comes from. A function of the
        client script (module ``__main__``) comes from the script the run recorded (or the one
        given with ``workflow``); a library's function from that library among the
        requirements (``numpy.sum`` -> numpy). Functions of unknown origin have none."""
        rec = run.graph.records
        fn = rec.functions.dropna(subset=["prefix", "module"])
        if not len(fn):
            return
        by_name = {_dist_name(str(r.get("name"))): r for r in reqs}
        script = self._client_script(run)
        for row in fn.drop_duplicates("prefix").itertuples(index=False):
            tool = steps.get(str(row.prefix), (None, None))[0]
            if tool is None:
                continue
            module = str(row.module)
            code = script if module == "__main__" else by_name.get(_dist_name(module.split(".")[0]))
            if code is not None:
                tool["mainEntity"] = code

    def _client_script(self, run: RunPart) -> Any | None:
        """The client script as an entity: the ``workflow`` script when given, else the one
        the run's environment records name (path and sha256; not in the crate)."""
        if self.script is not None:
            return self.crate.get(f"workflow/{quote(self.script.name)}")
        env = run.graph.records.environments
        if "script" not in env:
            return None
        known = env[env["script"].notna() & env["role"].isin(["client"])]
        if not len(known):
            return None
        row = known.iloc[0]
        path = str(row["script"])
        props: dict[str, Any] = {
            "@type": ["File", "SoftwareSourceCode"],
            "name": Path(path).name or path,
            "alternateName": path,
            "encodingFormat": "text/x-python",
            "description": "The client script that defined the run's task functions (not included).",
        }
        digest = row.get("script_sha256")
        if isinstance(digest, str) and digest:
            props["sha256"] = digest
        return self._ctx(f"#{run.graph.run_id}/script/{quote(props['name'], safe='')}", props)

    def _add_images(self, run: RunPart, action: Any, images: pd.DataFrame) -> None:
        """``containerImage`` of the run's action and of each step's action (every task of the
        run ran in the run's containers): one ``ContainerImage`` per (runtime, image)."""
        conts = []
        for i, c in enumerate(images.itertuples(index=False)):
            conts.append(self._ctx(f"{run.graph.run_iri}#container-{i}", _container_props(c)))
        for act in [action, *self._step_actions(run)]:
            self._set(act, "containerImage", conts)

    def _step_actions(self, run: RunPart) -> list[Any]:
        """The CreateActions of the run's steps (the prefixes that ran)."""
        found = (self.crate.get(f"{r.iri}#execution") for r in run.figures.prefixes.itertuples())
        return [a for a in found if a is not None]

    def _add_jobs(self, run: RunPart, action: Any) -> None:
        """The batch jobs the run's processes ran in (dask-jobqueue: one per worker) as a file
        of the crate (``jobs.csv``: id, name, partition, state, times, queue wait, nodes,
        processes), named in the run action's description."""
        jobs = run.graph.records.jobs
        if not len(jobs):
            return
        wait = (jobs["started"] - jobs["submitted"]).dt.total_seconds()
        table = pd.DataFrame(
            {
                "job": jobs["job"],
                "system": jobs["system"],
                "name": jobs["name"],
                "partition": jobs["partition"],
                "state": jobs["state"],
                "submitted": jobs["submitted"],
                "started": jobs["started"],
                "ended": jobs["ended"],
                "queue_wait_s": wait,
                "nodes": jobs["nodes"],
                "processes": jobs["processes"],
            }
        )
        rel = run.folder + "jobs.csv"
        csv_text(table, self.staging / rel, date_format="%Y-%m-%dT%H:%M:%SZ")
        size, digest = file_digest(self.staging / rel)
        ids = ", ".join(str(j) for j in jobs["job"])
        f = self._file(
            rel,
            {
                "name": f"Batch jobs of Dask run {Path(run.path).name}",
                "description": (
                    f"The {len(jobs)} batch job(s) the run's processes ran in ({ids}): id, name, "
                    "partition, last state, submission, start, end, queue wait, nodes."
                ),
                "encodingFormat": "text/csv",
                "contentSize": str(size),
                "sha256": digest,
                "about": action,
            },
        )
        run.dataset.append_to("hasPart", f, compact=True)
        action["description"] = f"{action['description']} Batch jobs: {ids}."

    def _add_engine_run(
        self, run: RunPart, action: Any, controls: list[Any], agent: Any | None
    ) -> Any:
        rec = run.graph.records
        version = rec.software.get("distributed") or rec.scheduler.get("distributed")
        eid = f"https://pypi.org/project/distributed/{version}/" if version else DISTRIBUTED_URL
        props = {
            "@type": "SoftwareApplication",
            "name": "Dask distributed",
            "url": {"@id": DISTRIBUTED_URL},
        }
        if version:
            props["softwareVersion"] = str(version)
        engine = self._ctx(eid, props)
        fr = run.figures.run
        oprops: dict[str, Any] = {
            "@type": "OrganizeAction",
            "name": f"Dask scheduler of run {Path(run.path).name}",
            "description": f"The Dask scheduler at {rec.scheduler.get('address', 'an unknown address')} "
            f"scheduling the run's tasks on {fr['workers']} worker(s), {fr['threads']} thread(s), "
            f"{fr['nodes']} node(s).",
            "instrument": engine,
            "result": action,
        }
        self._when_who(oprops, fr["first_us"], fr["last_us"], agent)
        org = self._ctx(f"{run.graph.run_iri}#scheduler", oprops)
        self._set(org, "object", controls)
        return org

    def _add_prov(self, run: RunPart, action: Any) -> None:
        from metaprov.mapping.terms import ONTOLOGY_VERSION_IRI

        for entry in run.prov:
            fmt = entry["format"]
            fname, media, label = PROV_FILES[fmt]
            conforms = [{"@id": PROV_O}, {"@id": ONTOLOGY_VERSION_IRI}]
            if fmt == "provn":
                conforms.insert(1, {"@id": PROV_N})
            f = self._file(
                run.folder + fname,
                {
                    "name": f"PROV {label} of Dask run {Path(run.path).name}",
                    "description": f"W3C PROV of the run, {entry['triples']:,} triples, written by metaprov.",
                    "encodingFormat": media,
                    "conformsTo": conforms,
                    "contentSize": str(entry["size"]),
                    "sha256": entry["sha256"],
                    "about": action,
                },
            )
            run.dataset.append_to("hasPart", f, compact=True)

    def _add_records(self, run: RunPart, action: Any) -> None:
        """The run's own files: copied with include_inputs, else listed (path, size, sha256)."""
        src = Path(run.path)
        known = run.digests.result() if run.digests is not None else record_digests(src, hash=False)
        for rel, (size, digest) in known.items():
            p = src / rel
            props = {
                "name": rel,
                "encodingFormat": _media_type(rel, p),
                "about": action,
            }
            sparse = self.include_inputs and _sparse(p)
            if self.include_inputs and not sparse:
                dest = self.staging / run.folder / "records" / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, dest)
                size, digest = file_digest(dest)
                props.update(
                    {
                        "contentSize": str(size),
                        "sha256": digest,
                        "description": "A record file of the run.",
                    }
                )
                f = self._file(run.folder + "records/" + quote(rel), props)
                run.dataset.append_to("hasPart", f, compact=True)
            else:
                props.update(
                    {
                        "@type": "File",
                        "contentSize": str(size),
                        "sha256": digest,
                        "description": "A record file of the run, not included (metaprov crate --include-inputs copies it).",
                    }
                )
                if not digest:
                    del props["sha256"]
                if sparse:
                    # a hole (truncate -s 3T): copying it would write its zeros out in full
                    props["description"] = (
                        f"A record file of the run, not included: a sparse file, only its first "
                        f"{sparse - 1:,} of {size:,} bytes were ever written."
                    )
                    log.warning("%s: a sparse file; not copied into the crate", p)
                f = self._ctx(f"#{run.graph.run_id}/record/{quote(rel, safe='')}", props)
                run.dataset.append_to("mentions", f, compact=True)

    def _add_workflow_io(self, run: RunPart, action: Any) -> None:
        """The whole workflow's inputs and results on the run's action (Workflow Run Crate CQ8:
        ``object`` / ``result`` of the workflow's CreateAction); its configuration is an input.
        (CQ3 reads a configuration file as an ``object`` of the engine's OrganizeAction, but
        the Provenance Run Crate profile's own check, roc-validator 0.13.0's 8.3, wants every
        ``object`` of it to be a ControlAction: the profile's check wins, docs/crate.md.)

        Inputs are the files the run's tasks read that no task of the run wrote (Darshan I/O
        linked to task executions: what a process read outside its tasks, at start-up, is not
        theirs), less software: Python modules and libraries, files of the run's interpreters,
        venvs and conda prefixes (a module imported on first use is read by a task). The
        configuration is the Dask configuration the run recorded (``dask-config.json``).
        """
        figs = run.figures
        configs = self._config_files(run)
        inputs = self._files(run, figs.inputs, "read") + configs
        outputs = self._files(run, figs.outputs, "written")
        self._at_hand(run, figs.inputs + figs.outputs)
        self._set(action, "object", inputs)
        if outputs:
            self._set(action, "result", _as_list(action.get("result")) + outputs)
        if figs.n_inputs > len(figs.inputs) or figs.n_outputs > len(figs.outputs):
            action["description"] = (
                str(action.get("description", "")).rstrip(".")
                + f"; the workflow read {figs.n_inputs} input file(s) and wrote "
                f"{figs.n_outputs} (the first {len(figs.inputs)} / {len(figs.outputs)} named "
                "here, all in the PROV files)."
            )

    def _config_files(self, run: RunPart) -> list[Any]:
        """The run's configuration files (its recorded Dask configuration): the record file's
        entity when the run's files list it, else one of their own (name, size, sha256)."""
        out = []
        rec = run.graph.records
        for c in rec.configs.itertuples(index=False):
            name = str(c.name)
            rid = (
                run.folder + "records/" + quote(name)
                if self.include_inputs
                else f"#{run.graph.run_id}/record/{quote(name, safe='')}"
            )
            ent = self.crate.get(rid)
            if ent is None:
                props: dict[str, Any] = {
                    "@type": "File",
                    "name": name,
                    "encodingFormat": _media_type(name),
                    "description": "A configuration file of the run (not included).",
                }
                if not pd.isna(c.size):
                    props["contentSize"] = str(int(c.size))
                if isinstance(c.sha256, str) and c.sha256:
                    props["sha256"] = c.sha256
                ent = self._ctx(f"#{run.graph.run_id}/config/{quote(name, safe='')}", props)
            kind = "" if pd.isna(c.kind) else f"{c.kind} "
            ent["description"] = (
                f"The {kind}configuration the run's processes ran with: a configuration file of "
                "the workflow and of each of its steps."
            )
            out.append(ent)
        return out

    def _at_hand(self, run: RunPart, files: list[tuple[str, str]]) -> None:
        """Size and sha256 of the workflow's files that are at hand: regular files under one
        of the ``data`` folders (symbolic links resolved first, so none leads out of them)."""
        if not self.data:
            return
        for p, rel in files:
            ent = self.crate.get(f"#{run.graph.run_id}/{rel}")
            real = _inside(Path(p), self.data)
            if ent is None or real is None:
                continue
            try:
                size, digest = file_digest(real)
            except OSError as exc:
                log.warning("cannot read %s for its checksum: %s", real, exc.strerror)
                continue
            ent["contentSize"] = str(size)
            ent["sha256"] = digest
            ent["description"] = str(ent.get("description", "")).replace(
                "not in this crate)", "not in this crate; size and checksum of the copy at hand)"
            )

    def _add_report(self, run: RunPart, action: Any) -> None:
        """The run's HTML report as its human-readable view: ``report.html`` in the run's
        folder, drawn by :mod:`metaprov.report` from the records the crate has already read
        and linked (the run is not read a second time; see :func:`render_report`).
        """
        if not self.with_report:
            return
        text = (
            run.report.result()
            if run.report is not None
            else render_report(run.graph.records, run.path)
        )
        if text is None:
            return
        rel = run.folder + "report.html"
        (self.staging / rel).write_bytes(text.encode("utf-8"))
        size, digest = file_digest(self.staging / rel)
        f = self._file(
            rel,
            {
                "name": f"HTML report of Dask run {Path(run.path).name}",
                "description": "The run's task stream, prefixes, transfers and I/O (metaprov report).",
                "encodingFormat": "text/html",
                "contentSize": str(size),
                "sha256": digest,
                "about": action,
            },
        )
        run.dataset.append_to("hasPart", f, compact=True)

    def finish(self, runs: list[RunPart]) -> None:
        """Root mentions (every CreateAction), the descriptor's conformsTo, README.md."""
        md = self.crate.metadata
        have = ids_of(md.get("conformsTo"))
        if self.crate.version == "1.1" and WROC_PROFILE not in have:
            md.append_to("conformsTo", {"@id": WROC_PROFILE})
        self._add_readme(runs)
        root = self.crate.root_dataset
        have = ids_of(root.get("mentions"))
        for a in self.actions:
            if a.id not in have:
                root.append_to("mentions", a, compact=True)

    def _add_readme(self, runs: list[RunPart]) -> None:
        lines = [f"# {self.crate.root_dataset.get('name') or 'Provenance of Dask runs'}", ""]
        lines += [
            "A Provenance Run Crate (https://w3id.org/ro/wfrun/provenance/0.5) written by metaprov:",
            "the W3C PROV of each Dask run below, with a per-task-prefix summary of what ran.",
            "`ro-crate-metadata.json` describes everything; `ro-crate-preview.html` shows it.",
            "",
        ]
        for run in runs:
            fr = run.figures.run
            lines += [
                f"## Run {Path(run.path).name} (`{run.folder}`)",
                "",
                f"- run id `{run.graph.run_id}`, PROV IRI <{run.graph.run_iri}>",
                f"- from {crate_time(fr['first_us'])} to {crate_time(fr['last_us'], up=True)}",
                f"- {fr['tasks']} tasks in {len(run.figures.prefixes)} task prefixes, "
                f"{fr['executed']} executed, "
                + (f"{fr['unrecorded']} {UNRECORDED}, " if fr["unrecorded"] else "")
                + f"{fr['failed']} ended in error, {fr['retried']} retried",
                f"- {fr['workers']} workers, {fr['threads']} threads, {fr['nodes']} nodes",
            ]
            for e in run.prov:
                lines.append(
                    f"- `{PROV_FILES[e['format']][0]}`: {e['triples']:,} triples, {e['size']:,} bytes, sha256 `{e['sha256']}`"
                )
            lines += [f"- note: {n}" for n in run.notes]
            lines.append("")
        rel = "README.md"
        old = self.crate.get(rel)
        if old is not None and old.get("description") != README_DESCRIPTION:
            log.warning(
                "the crate has its own README.md: kept (metaprov's summary is in the metadata)"
            )
            return
        (self.staging / rel).write_text("\n".join(lines), encoding="utf-8")
        if old is not None:
            return
        f = self._file(
            rel,
            {
                "name": "README",
                "description": README_DESCRIPTION,
                "encodingFormat": "text/markdown",
                "about": {"@id": "./"},
            },
        )
        self.crate.root_dataset.append_to("hasPart", f, compact=True) if rel not in ids_of(
            self.crate.root_dataset.get("hasPart")
        ) else None


_SIF = (".sif", ".simg", ".img")


def _container_props(c: Any) -> dict[str, Any]:
    """A Workflow Run Crate ``ContainerImage`` from a recorded runtime and image."""
    runtime, image = str(c.container_runtime), str(c.container_image)
    ref = image
    for scheme in ("docker://", "docker:", "oras://", "library://"):
        if ref.startswith(scheme):
            ref = ref[len(scheme) :]
    sif = runtime in ("apptainer", "singularity") and (
        image.endswith(_SIF) or image.startswith(("/", "library://", "oras://"))
    )
    props: dict[str, Any] = {
        "@type": "ContainerImage",
        "additionalType": {
            "@id": "https://w3id.org/ro/terms/workflow-run#"
            + ("SIFImage" if sif else "DockerImage")
        },
        "description": f"The {runtime} container the run's processes ran in.",
    }
    if sif and image.startswith("/"):
        props["name"] = image
        return props
    registry = "docker.io"
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, ref = first, rest
    name, _, tag = (
        ref.partition("@")[0].rpartition(":")
        if ":" in ref.rsplit("/", 1)[-1]
        else (ref.partition("@")[0], "", "")
    )
    props.update({"registry": registry, "name": name or ref})
    if tag:
        props["tag"] = tag
    if "@sha256:" in ref:
        props["sha256"] = ref.split("@sha256:", 1)[1]
    return props


def _dist_name(name: str) -> str:
    """A distribution or module name compared as PyPA normalises names (PEP 503)."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _inside(path: Path, folders: list[Path]) -> Path | None:
    """``path`` resolved, when it is a regular file inside one of ``folders`` (resolved)."""
    import stat

    if not path.is_absolute():
        return None
    try:
        real = path.resolve(strict=True)
        if not stat.S_ISREG(real.stat().st_mode):
            return None
    except (OSError, RuntimeError):
        return None
    return real if any(real.is_relative_to(f) for f in folders) else None


def ids_of(v: Any) -> list[str]:
    """The @ids of a property value (entities, {"@id": ...} references or plain strings)."""
    out = []
    for e in _as_list(v):
        if isinstance(e, dict):
            out.append(str(e.get("@id")))
        elif hasattr(e, "id"):
            out.append(str(e.id))
        else:
            out.append(str(e))
    return out


def types_of(e: Any) -> list[str]:
    """The @type of an entity (or of its JSON-LD dict) as a list."""
    t = e.get("@type") if isinstance(e, dict) else e.type
    return t if isinstance(t, list) else [t]


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _sec(v: Any) -> Any:
    if v is None or pd.isna(v):
        return None
    return round(float(v), 6)


def _plain(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


_MEDIA = {
    ".csv": "text/csv",
    ".json": "application/json",
    ".txt": "text/plain",
    ".log": "text/plain",
    ".darshan": "application/octet-stream",
    ".darshan_partial": "application/octet-stream",
    ".yaml": "application/yaml",
    ".html": "text/html",
}


def _media_type(name: str, path: Path | None = None) -> str:
    """Media type from the file name; a record file without a known suffix is ``text/plain``
    when its first 64 KiB decode as UTF-8, else ``application/octet-stream``."""
    import mimetypes

    suffix = Path(name).suffix.lower()
    if suffix in _MEDIA:
        return _MEDIA[suffix]
    guess = mimetypes.guess_type(name, strict=False)[0]
    if guess:
        return guess
    if path is not None:
        try:
            with open(path, "rb") as f:
                head = f.read(1 << 16)
            head.decode("utf-8")
            return "text/plain"
        except (OSError, UnicodeDecodeError):
            pass
    return "application/octet-stream"


def ran(prefix: Any) -> bool:
    """Whether any task of a prefix row (:class:`~metaprov.crate.figures.RunFigures`) ran: with
    an execution on record, or without one (a result size or a transfer shows it). Such a step
    has its actions; a step none of whose tasks ran has none (the profile: skipped steps)."""
    return bool(prefix.executed or prefix.unrecorded)


def _sparse(path: Path) -> int:
    """1 + the offset of the first hole of ``path`` when it has one (a sparse file), else 0."""
    from metaprov.ingest.csvread import first_hole

    try:
        size = path.stat().st_size
    except OSError:
        return 0
    hole = first_hole(path, size)
    return hole + 1 if hole < size else 0
