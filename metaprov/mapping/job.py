"""Job level: the run, the batch job, the user, the nodes and the files of the run directory.

Input: ``records.job``, ``records.jobs``, ``records.scheduler``, ``records.software``,
``records.missing``, ``records.configs``, ``records.span`` and the hosts of the agents. Output:
blocks of mp:Run, mp:Job (the run's own and every other batch job a process ran in, with its
queue facts and script), mp:User, mp:Node and mp:RunFile (mp:Configuration subclasses,
mp:JobOutput, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePath
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from metaprov._version import __version__
from metaprov.mapping.block import Block, lit_double, lit_epoch, lit_int, lit_str, lit_time
from metaprov.mapping.environment import add_env_columns, env_hosts, run_used
from metaprov.mapping.tables import batch_job_iri, host_of, job_iri, user_iri, worker_losses
from metaprov.mapping.terms import FILE_KIND_CLASS, MP, PROV, RDF, XSD
from metaprov.records import TIME, RunRecords
from metaprov.timeutil import format_utc, utc_to_us

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

LARGE = pa.large_string()
_JOB_SKIP = {"id", "server", "user", "nodes", "name", "worker_log", "start", "end"}


def node_roles(ctx: MapContext) -> pd.DataFrame:
    """Every host (job role lists, worker and scheduler hosts) with its roles, sorted by host."""

    def make() -> pd.DataFrame:
        rec = ctx.records
        rows: list[tuple[str, str]] = []
        for role, hosts in sorted(((rec.job or {}).get("nodes") or {}).items()):
            for h in hosts or []:
                if h:
                    rows.append((str(h), str(role)))
        w = rec.workers
        if len(w):
            names = w["hostname"].where(w["hostname"].notna(), w["host"])
            rows.extend((str(h), "worker") for h in names.dropna().unique())
        sched = host_of(rec.scheduler.get("address")) if rec.scheduler else None
        if sched:
            rows.append((sched, "scheduler"))
        rows.extend(env_hosts(ctx))  # hosts of the processes' environment records
        for hosts in rec.jobs["nodes"].dropna():
            rows.extend((str(h), "job") for h in str(hosts).split())
        df = pd.DataFrame(rows, columns=["host", "role"]).drop_duplicates()
        return df.sort_values(["host", "role"], kind="stable").reset_index(drop=True)

    return ctx.cached("node_roles", make)


def add_job(ctx: MapContext) -> Iterator[Block]:
    """Run, job, user, nodes and run files."""
    rec = ctx.records
    iris = ctx.iris
    job = rec.job or {}
    j_iri = job_iri(ctx)
    u_iri = user_iri(ctx)

    # --- the run -----------------------------------------------------------------------------
    run = Block(pa.array([iris.run], LARGE))
    run.add(RDF.type, MP.Run)
    run.add(MP.runId, pa.array([ctx.iris.run_id], LARGE), "str")
    name = job.get("name") or PurePath(str(rec.path)).name
    run.add(MP.runName, pa.array([str(name)] if name else [None], LARGE), "str")
    first, last = rec.span
    run.add(PROV.startedAtTime, pa.array([format_utc(first)], LARGE), "typed", XSD.dateTime)
    run.add(PROV.endedAtTime, pa.array([format_utc(last)], LARGE), "typed", XSD.dateTime)
    if first is not None and last is not None:
        times = pd.Series([first, last]).astype(TIME)
        us = utc_to_us(times)
        run.add(MP.startEpoch, lit_epoch(times.iloc[:1]), "typed", XSD.double)
        run.add(MP.endEpoch, lit_epoch(times.iloc[1:]), "typed", XSD.double)
        run.add(MP.duration, lit_double([(us[1] - us[0]) / 1e6]), "typed", XSD.double)
    run.add(MP.partOfJob, pa.array([j_iri], LARGE))
    run.add(MP.usedJob, _one_list(used_jobs(ctx)))
    _add_run_losses(run, rec)
    from metaprov.mapping.agents import client_table

    agents = [iris.scheduler] + iris.clients(client_table(ctx)["client"]).to_pylist()
    run.add(PROV.wasAssociatedWith, _one_list(agents))
    # each submitted task graph is the plan the run followed for its client (decision 26)
    graphs = rec.graphs.dropna(subset=["graph", "client"]).drop_duplicates("graph")
    graphs = graphs.sort_values("graph", kind="stable")
    plans = iris.associations(iris.task_graphs(graphs["graph"])).to_pylist()
    run.add(PROV.qualifiedAssociation, _one_list(plans))
    configs = rec.configs.sort_values("name", kind="stable")
    classes = [FILE_KIND_CLASS.get(str(k), MP.RunFile) for k in configs["kind"].fillna("")]
    used = [
        iri
        for iri, cls in zip(iris.run_files(configs["name"]).to_pylist(), classes, strict=True)
        if _is_plan(cls)
    ]
    run.add(PROV.used, _one_list(used + run_used(ctx)))
    run.add(MP.missingInput, _one_list(sorted(str(m) for m in rec.missing)), "str")
    software = [f"{k} {v}" for k, v in sorted((rec.software or {}).items())]
    run.add(MP.software, _one_list(software), "str")
    run.add(MP.exporter, pa.array([f"metaprov {__version__}"], LARGE), "str")
    yield run

    # --- the job and the user ------------------------------------------------------------------
    jb = Block(pa.array([j_iri], LARGE))
    jb.add(RDF.type, MP.Job)
    jid = job.get("id")
    jb.add(
        MP.jobId,
        pa.array(
            [
                f"{jid}.{job['server']}"
                if jid and job.get("server")
                else (str(jid) if jid else None)
            ],
            LARGE,
        ),
        "str",
    )
    props = [
        f"{k}={v}"
        for k, v in sorted(job.items())
        if k not in _JOB_SKIP and isinstance(v, (str, int, float)) and v != ""
    ]
    if job.get("server"):
        props.append(f"server={job['server']}")
    jb.add(MP.jobProperty, _one_list(sorted(props)), "str")
    if u_iri:
        jb.add(PROV.wasAssociatedWith, pa.array([u_iri], LARGE))
    # the batch job's own times, only when a job file states them (decision 29): the run's span
    # is not the job's (the job began before the scheduler and ended after the last event)
    for pred, key in ((PROV.startedAtTime, "start"), (PROV.endedAtTime, "end")):
        when = _job_time(job.get(key))
        if when is not None:
            jb.add(pred, pa.array([format_utc(when)], LARGE), "typed", XSD.dateTime)
    roles = node_roles(ctx)
    job_hosts = sorted(
        {str(h) for hosts in (job.get("nodes") or {}).values() for h in hosts or [] if h}
    )
    jb.add(MP.node, _one_list(iris.nodes(job_hosts).to_pylist() if job_hosts else []))
    own_row = _own_job_row(ctx)
    if len(own_row):
        _queue_facts(ctx, jb, own_row)
    yield jb

    yield from _batch_jobs(ctx)

    if u_iri:
        ub = Block(pa.array([u_iri], LARGE))
        ub.add(RDF.type, MP.User)
        ub.add(MP.userName, pa.array([str(job["user"])], LARGE), "str")
        yield ub

    # --- nodes -----------------------------------------------------------------------------------
    if len(roles):
        hosts = roles.groupby("host", sort=True)["role"].agg(list)
        nb = Block(iris.nodes(list(hosts.index)))
        nb.add(RDF.type, MP.Node)
        nb.add(MP.hostname, lit_str(list(hosts.index)), "str")
        nb.add(MP.role, pa.array([sorted(r) for r in hosts], pa.large_list(LARGE)), "str")
        nb.add(MP.run, iris.run)
        add_env_columns(ctx, nb, "node")
        yield nb

    # --- files of the run directory ----------------------------------------------------------------
    if len(configs):
        for cls in sorted(set(classes)):
            mask = [c == cls for c in classes]
            part = configs[mask]
            fb = Block(iris.run_files(part["name"]))
            fb.add(RDF.type, cls)
            fb.add(MP.fileName, lit_str(part["name"]), "str")
            fb.add(MP.fileKind, lit_str(part["kind"]), "str")
            fb.add(MP.sha256, lit_str(part["sha256"]), "str")
            fb.add(MP.byteSize, lit_int(part["size"]), "typed", XSD.integer)
            fb.add(MP.content, lit_str(part["text"]), "str")
            if cls == MP.JobOutput:
                fb.add(PROV.wasGeneratedBy, j_iri)
            elif cls == MP.LogFile:
                fb.add(PROV.wasGeneratedBy, iris.run)
            fb.add(MP.run, iris.run)
            yield fb


def used_jobs(ctx: MapContext) -> list[str]:
    """IRIs of every batch job a process of the run ran in (the run's own one first when it is
    a batch job; then ``records.jobs`` in id order)."""
    own = (ctx.records.job or {}).get("id")
    out = [job_iri(ctx)] if own else []
    for jid in ctx.records.jobs["job"].dropna():
        iri = batch_job_iri(ctx, str(jid))
        if iri not in out:
            out.append(iri)
    return out


_JOB_FACTS = ("system", "user", "account", "reason", "exit_code", "time_limit_s", "cpus")
_JOB_FACTS += ("node_count", "source")


def _queue_facts(ctx: MapContext, block: Block, rows: pd.DataFrame) -> None:
    """Name, partition, state, submission, queue wait and script of each job row."""
    block.add(MP.jobName, lit_str(rows["name"]), "str")
    block.add(MP.partition, lit_str(rows["partition"]), "str")
    block.add(MP.jobState, lit_str(rows["state"]), "str")
    block.add(MP.submittedAt, lit_time(rows["submitted"]), "typed", XSD.dateTime)
    wait = (rows["started"] - rows["submitted"]).dt.total_seconds()
    block.add(MP.queueWait, lit_double(wait), "typed", XSD.double)
    block.add(MP.jobScript, _script_iris(ctx, rows))


def _script_iris(ctx: MapContext, rows: pd.DataFrame) -> pa.Array:
    """``<job>/script`` of each job row with a script (null without)."""
    return pa.array(
        [
            f"{batch_job_iri(ctx, str(j))}/script" if isinstance(t, str) else None
            for j, t in zip(rows["job"], rows["script"], strict=True)
        ],
        LARGE,
    )


def _own_job_row(ctx: MapContext) -> pd.DataFrame:
    """The row of ``records.jobs`` that is the run's own job (empty when none)."""
    jobs = ctx.records.jobs
    own = (ctx.records.job or {}).get("id")
    return jobs[jobs["job"].astype(str) == str(own)] if own else jobs.iloc[:0]


def _batch_jobs(ctx: MapContext) -> Iterator[Block]:
    """The batch jobs of ``records.jobs`` other than the run's own (dask-jobqueue's worker
    jobs): id, properties, times, nodes and queue facts; then every job's script."""
    jobs = ctx.records.jobs
    if not len(jobs):
        return
    own = (ctx.records.job or {}).get("id")
    rest = jobs[jobs["job"].astype(str) != str(own)] if own else jobs
    if len(rest):
        rb = Block(pa.array([ctx.iris.job(str(j)) for j in rest["job"]], LARGE))
        rb.add(RDF.type, MP.Job)
        rb.add(MP.jobId, lit_str(rest["job"]), "str")
        props = [
            sorted(f"{k}={v}" for k, v in row.items() if v is not None and not pd.isna(v)) or None
            for row in rest[list(_JOB_FACTS)].astype(object).to_dict("records")
        ]
        rb.add(MP.jobProperty, pa.array(props, pa.large_list(LARGE)), "str")
        rb.add(PROV.startedAtTime, lit_time(rest["started"]), "typed", XSD.dateTime)
        rb.add(PROV.endedAtTime, lit_time(rest["ended"]), "typed", XSD.dateTime)
        nodes = [
            ctx.iris.nodes(str(h).split()).to_pylist() if isinstance(h, str) else None
            for h in rest["nodes"]
        ]
        rb.add(MP.node, pa.array(nodes, pa.large_list(LARGE)))
        _queue_facts(ctx, rb, rest)
        yield rb

    part = jobs[jobs["script"].notna()]
    if len(part):
        sb = Block(_script_iris(ctx, part))
        sb.add(RDF.type, MP.JobScript)
        kinds = [f"{str(s).lower()}-batch-script" for s in part["system"].fillna("batch")]
        sb.add(MP.fileKind, pa.array(kinds, LARGE), "str")
        sb.add(MP.content, lit_str(part["script"]), "str")
        sb.add(MP.sha256, lit_str(part["script_sha256"]), "str")
        sb.add(MP.run, ctx.iris.run)
        yield sb


_PLAN_CLASSES = {
    MP.Configuration,
    MP.DaskConfiguration,
    MP.DarshanConfiguration,
    MP.ServiceConfiguration,
    MP.JobScript,
    MP.NodeList,
}


def _is_plan(cls: str) -> bool:
    return cls in _PLAN_CLASSES


def _job_time(value: object) -> pd.Timestamp | None:
    """A job time from ``records.job`` (a UTC timestamp, ISO text with an offset, or epoch
    seconds), None when absent or unreadable."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, (int, float)):
            t = pd.Timestamp(float(value), unit="s", tz="UTC")
        else:
            t = pd.Timestamp(value)
            if t.tzinfo is None:
                return None  # a time without an offset is not a UTC instant: not guessed
            t = t.tz_convert("UTC")
    except (ValueError, TypeError, OverflowError):
        return None
    return None if pd.isna(t) else t


def _one_list(values: list[str]) -> pa.Array:
    """A one-row list column (null when empty)."""
    return pa.array([values if values else None], pa.large_list(LARGE))


def _add_run_losses(run: Block, rec: RunRecords) -> None:
    """A run that lost workers or records says so: mp:lostWorkerCount, mp:lostTaskCount,
    mp:unrecordedExecutionCount (each written only when above 0)."""
    losses = worker_losses(rec)
    n_lost = int(losses["lost"].fillna(False).sum())
    took = losses.loc[losses["lost"].fillna(False).to_numpy(dtype=bool), "lost_tasks"]
    unrec = int(losses["unrecorded"].fillna(0).sum())

    def one(v: int | None) -> pa.Array:
        return pa.array([str(v) if v else None], LARGE)

    run.add(MP.lostWorkerCount, one(n_lost), "typed", XSD.integer)
    run.add(
        MP.lostTaskCount, one(int(took.sum()) if took.notna().any() else None), "typed", XSD.integer
    )
    run.add(MP.unrecordedExecutionCount, one(unrec), "typed", XSD.integer)
