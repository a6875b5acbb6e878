"""Tasks, their executions and their results: the hot path of the mapping.

Input: ``records.tasks``, ``records.executions``, ``records.dependencies`` (and the keys of
``records.transfers``). Output, in row chunks:

- mp:Task per key: key, group, first graph, last state, flags, ``mp:dependsOn`` (static edges);
- mp:TaskExecution per execution row: compute window (dateTimes, epochs, duration), attempt,
  outcome, ``prov:wasAssociatedWith`` its thread (its worker when the thread is unknown), a
  qualified ``prov:Association`` whose ``prov:hadPlan`` is the task prefix, ``prov:used`` of
  the data chunk of every dependency (dynamic edges), ``mp:prefix`` (the plan again, as a
  direct link), ``mp:usedReplica`` of the replica a transferred dependency was read from and
  the totals of the transfers behind those (see ``used_replicas`` in ``transfers.py``);
- mp:DataChunk per key with a result, ``prov:wasGeneratedBy`` its successful execution and
  ``prov:atLocation`` the worker holding it.

Everything is computed with pyarrow/numpy over whole columns; rows are sorted by key (then attempt)
so the output order never depends on the input order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.block import Block, lit_double, lit_int, lit_str, lit_time, lit_true
from metaprov.mapping.facts import add_fact_columns
from metaprov.mapping.tables import (
    LARGE,
    Edges,
    TaskIndex,
    agent_iris,
    dependency_edges,
    dict_map,
    execution_iris,
    executions_sorted,
    generating_execution,
    list_column,
    ragged_gather,
    task_index,
)
from metaprov.mapping.terms import MP, PROV, RDF, XSD, as_text_array, concat
from metaprov.mapping.transfers import input_transfers, replica_iris, used_replicas
from metaprov.timeutil import NAT_US as _NAT
from metaprov.timeutil import utc_to_us

if TYPE_CHECKING:
    from metaprov.mapping import MapContext


def add_tasks(ctx: MapContext) -> Iterator[Block]:
    """Tasks, executions (+ associations), data chunks."""
    idx = task_index(ctx)
    edges = dependency_edges(ctx, idx)
    yield from _task_blocks(ctx, idx, edges)
    ex = executions_sorted(ctx, idx)
    yield from _execution_blocks(ctx, idx, edges, ex)
    yield from _chunk_blocks(ctx, idx, ex)


def _task_blocks(ctx: MapContext, idx: TaskIndex, edges: Edges) -> Iterator[Block]:
    iris = ctx.iris
    t = idx.tasks
    n = len(t)
    step = ctx.chunk_rows
    for a in range(0, n, step):
        b = min(n, a + step)
        part = t.iloc[a:b]
        blk = Block(idx.task_iri.slice(a, b - a))
        blk.add(RDF.type, MP.Task)
        blk.add(MP.key, idx.keys.slice(a, b - a), "str")
        blk.add(MP.taskGroup, dict_map(part["group"], iris.groups))
        blk.add(MP.inGraph, dict_map(part["graph"], iris.task_graphs))
        blk.add(MP.state, lit_str(part["state"]), "str")
        blk.add(MP.wanted, lit_true(part["wanted"]), "typed", XSD.boolean)
        blk.add(MP.erred, lit_true(part["erred"]), "typed", XSD.boolean)
        blk.add(MP.retried, lit_true(part["retried"]), "typed", XSD.boolean)
        blk.add(MP.neverRan, lit_true(part["never_ran"]), "typed", XSD.boolean)
        o0, o1 = int(edges.offsets[a]), int(edges.offsets[b])
        if o1 > o0:
            vals = idx.task_iri.take(pa.array(edges.targets[o0:o1]))
            blk.add(MP.dependsOn, list_column(edges.offsets[a : b + 1] - o0, vals))
        add_fact_columns(ctx, blk, "task", np.arange(a, b))
        yield blk


def _execution_blocks(
    ctx: MapContext, idx: TaskIndex, edges: Edges, ex: pd.DataFrame
) -> Iterator[Block]:
    iris = ctx.iris
    n = len(ex)
    if not n:
        return
    # The chunk-holding dependencies of each task: the dynamic "used" edges.
    keep = idx.has_chunk[edges.targets] if len(edges.targets) else np.zeros(0, bool)
    kept_before = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))
    used_counts = kept_before[edges.offsets[1:]] - kept_before[edges.offsets[:-1]]
    used_offsets = np.zeros(len(idx.keys) + 1, np.int64)
    np.cumsum(used_counts, out=used_offsets[1:])
    used_targets = edges.targets[keep]
    prefix_of = dict_map(idx.tasks["prefix"], iris.prefixes)
    use = used_replicas(ctx, idx, edges, ex)
    waits = input_transfers(ctx, use)
    step = ctx.chunk_rows
    for a in range(0, n, step):
        b = min(n, a + step)
        part = ex.iloc[a:b]
        rows = part["row"].to_numpy()
        e_iri = execution_iris(iris, idx, part)
        _, agent = agent_iris(iris, part)
        start_us = utc_to_us(part["start"])
        end_us = utc_to_us(part["end"])
        known = (start_us != _NAT) & (end_us != _NAT)
        dur = np.where(known, (end_us - start_us) / 1e6, np.nan)
        blk = Block(e_iri)
        blk.add(RDF.type, MP.TaskExecution)
        blk.add(MP.task, idx.task_iri.take(pa.array(rows)))
        blk.add(MP.attempt, lit_int(part["attempt"]), "typed", XSD.integer)
        blk.add(PROV.startedAtTime, lit_time(part["start"]), "typed", XSD.dateTime)
        blk.add(PROV.endedAtTime, lit_time(part["end"]), "typed", XSD.dateTime)
        blk.add(MP.duration, lit_double(dur), "typed", XSD.double)
        blk.add(MP.incomplete, lit_true(~known), "typed", XSD.boolean)
        blk.add(MP.outcome, dict_map(part["outcome"], lit_str), "str")
        blk.add(MP.timeSource, dict_map(part["time_source"], lit_str), "str")
        blk.add(PROV.wasAssociatedWith, agent)
        blk.add(PROV.qualifiedAssociation, iris.associations(e_iri))
        # the association's plan again, as a direct link: "executions of this prefix" is then
        # one index range instead of two lookups per execution (slowest-tasks with a prefix)
        plan = prefix_of.take(pa.array(rows))
        blk.add(MP.prefix, plan)
        off, pos = ragged_gather(used_offsets, rows)
        if len(pos):
            blk.add(PROV.used, list_column(off, idx.chunk_iri(used_targets[pos])))
        r0, r1 = int(use.offsets[a]), int(use.offsets[b])
        if r1 > r0:
            reps = replica_iris(ctx, use.replicas[r0:r1])
            blk.add(MP.usedReplica, list_column(use.offsets[a : b + 1] - r0, reps))
            blk.add(MP.inputTransferCount, lit_int(waits.count.iloc[a:b]), "typed", XSD.integer)
            blk.add(MP.inputTransferSeconds, lit_double(waits.seconds[a:b]), "typed", XSD.double)
            blk.add(MP.inputTransferBytes, lit_int(waits.bytes.iloc[a:b]), "typed", XSD.integer)
        add_fact_columns(ctx, blk, "execution", part)
        yield blk

        ab = Block(iris.associations(e_iri))
        ab.add(RDF.type, PROV.Association)
        ab.add(PROV.agent, agent)
        ab.add(PROV.hadPlan, plan)
        yield ab


def _chunk_blocks(ctx: MapContext, idx: TaskIndex, ex: pd.DataFrame) -> Iterator[Block]:
    iris = ctx.iris
    rows_all = np.flatnonzero(idx.has_chunk)
    if not len(rows_all):
        return
    gen = (
        generating_execution(ex)
        if len(ex)
        else pd.DataFrame({"row": [], "attempt": [], "worker": []})
    )
    gen_pos = np.full(len(idx.keys), -1, np.int64)
    gen_pos[gen["row"].to_numpy(dtype=np.int64)] = np.arange(len(gen))
    gen_attempt = (
        pa.Array.from_pandas(gen["attempt"].astype("Int64"))
        if len(gen)
        else pa.array([], pa.int64())
    )
    gen_worker = as_text_array(gen["worker"]) if len(gen) else pa.array([], LARGE)
    task_worker = idx.tasks["worker"]
    step = ctx.chunk_rows
    for a in range(0, len(rows_all), step):
        rows = rows_all[a : a + step]
        t_iri = idx.task_iri.take(pa.array(rows))
        blk = Block(concat(t_iri, "/chunk"))
        blk.add(RDF.type, MP.DataChunk)
        blk.add(MP.task, t_iri)
        blk.add(MP.nbytes, lit_int(idx.tasks["nbytes"].iloc[rows]), "typed", XSD.integer)
        gp = gen_pos[rows]
        has_gen = gp >= 0
        safe = np.where(has_gen, gp, 0)
        if len(gen):
            att = pc.if_else(
                pa.array(has_gen),
                gen_attempt.take(pa.array(safe)),
                pa.scalar(None, gen_attempt.type),
            )
            blk.add(PROV.wasGeneratedBy, iris.executions(t_iri, att))
            gw = pc.if_else(
                pa.array(has_gen), gen_worker.take(pa.array(safe)), pa.scalar(None, gen_worker.type)
            )
        else:
            gw = pa.nulls(len(rows), LARGE)
        where = pc.coalesce(
            pc.cast(gw, LARGE),
            as_text_array(task_worker.iloc[rows]),
        )
        blk.add(PROV.atLocation, dict_map(where, iris.workers))
        add_fact_columns(ctx, blk, "chunk", rows)
        yield blk
