"""Agents: clients, the scheduler, workers, worker processes and threads.

Input: ``records.clients``, ``records.scheduler``, ``records.workers``, ``records.threads`` and
the worker/thread columns of executions and transfers (agents seen only there are still agents).
Output: blocks of mp:Client, mp:Scheduler, mp:Worker, mp:WorkerProcess and mp:Thread, chained by
``prov:actedOnBehalfOf``: thread -> worker process -> worker -> scheduler -> client -> user.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.block import (
    Block,
    lit_double,
    lit_int,
    lit_str,
    lit_time,
    lit_true,
    null_where,
)
from metaprov.mapping.environment import add_env_columns
from metaprov.mapping.tables import host_of, user_iri, worker_job_iris, worker_losses
from metaprov.mapping.terms import MP, PROV, RDF, XSD, concat

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

LARGE = pa.large_string()


def worker_table(ctx: MapContext) -> pd.DataFrame:
    """Every worker address (workers table plus any address seen elsewhere), sorted by address."""

    def make() -> pd.DataFrame:
        rec = ctx.records
        seen = [
            rec.workers["address"],
            rec.executions["worker"],
            rec.tasks["worker"],
            rec.threads["worker"],
            rec.transfers["source"],
            rec.transfers["destination"],
        ]
        addrs = pd.unique(pd.concat([s.dropna().astype(str) for s in seen], ignore_index=True))
        extra = sorted(set(addrs) - set(rec.workers["address"].dropna().astype(str)))
        w = rec.workers.dropna(subset=["address"]).drop_duplicates("address")
        if extra:
            from metaprov.records import conform

            w = pd.concat(
                [w, conform("workers", pd.DataFrame({"address": extra}))], ignore_index=True
            )
        return w.sort_values("address", kind="stable").reset_index(drop=True)

    return ctx.cached("workers", make)


def worker_hosts(ctx: MapContext) -> pd.Series:
    """The host of each worker of :func:`worker_table` (host name, else address host)."""
    workers = worker_table(ctx)
    hosts = workers["hostname"].where(workers["hostname"].notna(), workers["host"])
    return hosts.where(hosts.notna(), workers["address"].map(host_of))


def worker_nodes(ctx: MapContext, addresses: pa.Array) -> pa.Array:
    """The mp:Node IRI of the host of each worker address (null when the address is unknown):
    where a chunk or replica held by that worker is (``prov:atLocation``, decision 25)."""
    from metaprov.mapping.tables import dict_map

    def make() -> dict[str, str]:
        w = worker_table(ctx)
        hosts = worker_hosts(ctx)
        iris = ctx.iris.nodes(hosts).to_pylist()
        return {a: i for a, i in zip(w["address"].astype(str), iris, strict=True) if i}

    table = ctx.cached("worker_nodes", make)
    return dict_map(
        addresses, lambda d: pa.array([table.get(a) for a in d.to_pylist()], pa.large_string())
    )


def client_table(ctx: MapContext) -> pd.DataFrame:
    """Every client (clients table plus ids seen only in graphs or tasks), sorted by id."""

    def make() -> pd.DataFrame:
        rec = ctx.records
        c = rec.clients.dropna(subset=["client"]).drop_duplicates("client")
        seen = (
            pd.concat([rec.graphs["client"], rec.tasks["client"]], ignore_index=True)
            .dropna()
            .astype(str)
        )
        extra = sorted(set(seen.unique()) - set(c["client"].astype(str)))
        if extra:
            from metaprov.records import conform

            c = pd.concat(
                [c, conform("clients", pd.DataFrame({"client": extra}))], ignore_index=True
            )
        return c.sort_values("client", kind="stable").reset_index(drop=True)

    return ctx.cached("clients", make)


def thread_table(ctx: MapContext) -> pd.DataFrame:
    """Every (worker, thread) pair with its task count, sorted."""

    def make() -> pd.DataFrame:
        rec = ctx.records
        ex = rec.executions.dropna(subset=["worker", "thread"])[["worker", "thread"]]
        t = rec.threads.dropna(subset=["worker", "thread"])[["worker", "thread", "n_tasks"]]
        both = pd.concat(
            [t, ex.assign(n_tasks=pd.array([pd.NA] * len(ex), dtype="Int64"))], ignore_index=True
        )
        both = both.drop_duplicates(["worker", "thread"], keep="first")
        return both.sort_values(["worker", "thread"], kind="stable").reset_index(drop=True)

    return ctx.cached("threads", make)


def busy_partials(ex: pd.DataFrame) -> pd.DataFrame:
    """Per (worker, thread) of the executions ``ex`` whose start and end were observed (those
    with an mp:duration): ``n`` executions and ``us``, their durations summed in integer
    microseconds (exact, whatever the order); ``thread`` (the records' dtype, UInt64) is null for
    executions whose thread is unknown. Sorted by worker and thread."""
    import numpy as np

    from metaprov.timeutil import NAT_US, utc_to_us

    cols = ["worker", "thread", "n", "us"]
    if not len(ex):
        return pd.DataFrame(
            {
                "worker": pd.Series([], dtype=object),
                "thread": pd.array([], dtype="UInt64"),
                "n": pd.Series([], dtype="int64"),
                "us": pd.Series([], dtype="int64"),
            }
        )[cols]
    start, end = utc_to_us(ex["start"]), utc_to_us(ex["end"])
    keep = (start != NAT_US) & (end != NAT_US) & ex["worker"].notna().to_numpy(dtype=bool)
    d = pd.DataFrame(
        {
            "worker": ex["worker"].astype(object).to_numpy()[keep],
            # the ids as they are (UInt64): through a float, an id past 2^53 (a thread id near
            # 2^64) is another number and its thread would lose its busy time
            "thread": ex["thread"].array[keep],
            "us": (end - start)[keep].astype(np.int64),
        }
    )
    g = d.groupby(["worker", "thread"], sort=True, dropna=False)["us"]
    return pd.DataFrame({"n": g.size(), "us": g.sum()}).reset_index()[cols]


def busy_table(ctx: MapContext) -> pd.DataFrame:
    """:func:`busy_partials` of the executions this mapping writes (a partitioned export's
    run-level part is handed the sum of its partitions' partials instead)."""

    def make() -> pd.DataFrame:
        from metaprov.mapping.tables import (
            executions_sorted,
            mapped_rows,
            maps_every_key,
            task_index,
        )

        if maps_every_key(ctx) and "task_index" not in ctx.cache:
            # every key is mapped, and the sums are exact whatever the order: the executions
            # with a key, without building the task index to sort them (seconds at 10^6)
            return busy_partials(ctx.records.executions.dropna(subset=["key"]))
        idx = task_index(ctx)
        ex = executions_sorted(ctx, idx)
        keys = mapped_rows(ctx, idx)
        if keys is not None and len(ex):
            ex = ex[keys[ex["row"].to_numpy()]]
        return busy_partials(ex)

    return ctx.cached("busy", make)


def _busy_columns(block: Block, busy: pd.DataFrame) -> None:
    """mp:busyExecutionCount and mp:busySeconds of the block's agents, given their ``n`` and
    ``us`` in the block's order (none where nothing timed ran: the questions show 0 then)."""
    import numpy as np

    n = pd.to_numeric(busy["n"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    us = pd.to_numeric(busy["us"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    ran = n > 0
    block.add(
        MP.busyExecutionCount,
        lit_int(pd.Series(n, dtype="Int64").where(ran, pd.NA)),
        "typed",
        XSD.integer,
    )
    block.add(MP.busySeconds, lit_double(np.where(ran, us / 1e6, np.nan)), "typed", XSD.double)


def add_agents(ctx: MapContext) -> Iterator[Block]:
    """Clients, scheduler, workers, worker processes, threads."""
    rec = ctx.records
    iris = ctx.iris
    u_iri = user_iri(ctx)

    clients = client_table(ctx)
    client_iris = iris.clients(clients["client"])
    if len(clients):
        cb = Block(client_iris)
        cb.add(RDF.type, MP.Client)
        cb.add(MP.clientId, lit_str(clients["client"]), "str")
        cb.add(MP.addedAt, lit_time(clients["added"]), "typed", XSD.dateTime)
        cb.add(MP.removedAt, lit_time(clients["removed"]), "typed", XSD.dateTime)
        if u_iri:
            cb.add(PROV.actedOnBehalfOf, u_iri)
        cb.add(MP.run, iris.run)
        add_env_columns(ctx, cb, "agent")
        yield cb

    sb = Block(pa.array([iris.scheduler], LARGE))
    sb.add(RDF.type, MP.Scheduler)
    address = (rec.scheduler or {}).get("address")
    sb.add(MP.address, pa.array([str(address) if address else None], LARGE), "str")
    if len(clients):
        sb.add(PROV.actedOnBehalfOf, pa.array([client_iris.to_pylist()], pa.large_list(LARGE)))
    host = host_of(address)
    if host:
        sb.add(MP.node, iris.nodes([host]))
    sb.add(MP.run, iris.run)
    add_env_columns(ctx, sb, "agent")
    yield sb

    workers = worker_table(ctx)
    if len(workers):
        w_iris = iris.workers(workers["address"])
        wb = Block(w_iris)
        wb.add(RDF.type, MP.Worker)
        wb.add(MP.address, lit_str(workers["address"]), "str")
        wb.add(MP.workerName, lit_str(workers["name"]), "str")
        wb.add(MP.nannyAddress, lit_str(workers["nanny"]), "str")
        wb.add(MP.nthreads, lit_int(workers["threads"]), "typed", XSD.integer)
        per_worker = busy_table(ctx).groupby("worker", sort=False)[["n", "us"]].sum()
        _busy_columns(wb, per_worker.reindex(workers["address"].astype(object)))
        wb.add(MP.memoryLimit, lit_int(workers["memory_limit"]), "typed", XSD.integer)
        wb.add(MP.localDirectory, lit_str(workers["local_directory"]), "str")
        wb.add(MP.addedAt, lit_time(workers["added"]), "typed", XSD.dateTime)
        wb.add(MP.removedAt, lit_time(workers["removed"]), "typed", XSD.dateTime)
        _add_losses(wb, workers, worker_losses(rec))
        wb.add(PROV.actedOnBehalfOf, iris.scheduler)
        jobs = worker_job_iris(ctx, workers["address"])
        has_job = pc.is_valid(jobs)
        mask = has_job.to_numpy(zero_copy_only=False)
        wb.add(PROV.qualifiedDelegation, null_where(concat(w_iris, "/delegation"), ~mask))
        hosts = worker_hosts(ctx)
        wb.add(MP.node, iris.nodes(hosts))
        wb.add(MP.run, iris.run)
        yield wb

        p_iris = iris.processes(w_iris)
        pb = Block(p_iris)
        pb.add(RDF.type, MP.WorkerProcess)
        pb.add(MP.pid, lit_int(workers["pid"]), "typed", XSD.integer)
        pb.add(PROV.actedOnBehalfOf, w_iris)
        pb.add(PROV.qualifiedDelegation, null_where(concat(p_iris, "/delegation"), ~mask))
        pb.add(MP.node, iris.nodes(hosts))
        add_env_columns(ctx, pb, "agent")
        yield pb

        # each worker and its process act for the batch job they ran in (dask-jobqueue: a job
        # per worker): the delegation to the scheduler, resp. the worker, in that job
        if mask.any():
            for delegate, responsible in ((w_iris, None), (p_iris, w_iris)):
                db = Block(pc.filter(concat(delegate, "/delegation"), has_job))
                db.add(RDF.type, PROV.Delegation)
                agent = (
                    pa.array([iris.scheduler] * int(mask.sum()), LARGE)
                    if responsible is None
                    else pc.filter(responsible, has_job)
                )
                db.add(PROV.agent, agent)
                db.add(PROV.hadActivity, pc.filter(jobs, has_job))
                yield db

    threads = thread_table(ctx)
    if len(threads):
        w_of = iris.workers(threads["worker"])
        tb = Block(iris.threads(w_of, threads["thread"]))
        tb.add(RDF.type, MP.Thread)
        tb.add(MP.threadId, lit_int(threads["thread"]), "typed", XSD.integer)
        tb.add(MP.taskCount, lit_int(threads["n_tasks"]), "typed", XSD.integer)
        per_thread = busy_table(ctx).dropna(subset=["thread"]).set_index(["worker", "thread"])
        pairs = pd.MultiIndex.from_arrays(
            [threads["worker"].astype(object), threads["thread"].astype(object)]
        )
        _busy_columns(tb, per_thread.reindex(pairs))
        tb.add(PROV.actedOnBehalfOf, iris.processes(w_of))
        yield tb


def _add_losses(wb: Block, workers: pd.DataFrame, losses: pd.DataFrame) -> None:
    """mp:lost, mp:lossReason, mp:lostTaskCount, mp:unrecordedExecutionCount of each worker
    (written only for a lost worker, or one with executions known from the scheduler only)."""
    if not len(losses):
        return
    at = losses.set_index(losses["address"].astype(object))
    addr = workers["address"].astype(object)
    wb.add(MP.lost, lit_true(at["lost"].reindex(addr).array), "typed", XSD.boolean)
    wb.add(MP.lossReason, lit_str(at["reason"].reindex(addr).array), "str")
    wb.add(MP.lostTaskCount, lit_int(at["lost_tasks"].reindex(addr).array), "typed", XSD.integer)
    unrec = at["unrecorded"].reindex(addr)
    unrec = unrec.where(unrec.fillna(0) > 0).astype("Int64")
    wb.add(MP.unrecordedExecutionCount, lit_int(unrec.array), "typed", XSD.integer)
