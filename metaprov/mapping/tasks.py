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
  ``prov:atLocation`` the node of the worker holding it.

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

from metaprov.mapping.agents import worker_nodes
from metaprov.mapping.block import Block, lit_double, lit_int, lit_str, lit_time, lit_true
from metaprov.mapping.facts import add_fact_columns
from metaprov.mapping.tables import (
    LARGE,
    Edges,
    TaskIndex,
    agent_iris,
    csr_rows,
    dependency_edges,
    dict_map,
    execution_iris,
    executions_sorted,
    list_column,
    mapped_rows,
    positions,
    ragged_gather,
    row_chunks,
    take_rows,
    task_index,
    used_dependencies,
)
from metaprov.mapping.terms import MP, PROV, RDF, XSD, as_text_array, concat
from metaprov.mapping.transfers import input_transfers, replica_iris, used_replicas
from metaprov.mapping.versions import chunk_versions
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
    for rows in row_chunks(len(t), ctx.chunk_rows, mapped_rows(ctx, idx)):
        part = t.iloc[rows]
        blk = Block(take_rows(idx.task_iri, rows))
        blk.add(RDF.type, MP.Task)
        blk.add(MP.key, take_rows(idx.keys, rows), "str")
        blk.add(MP.taskGroup, dict_map(part["group"], iris.groups))
        blk.add(MP.inGraph, dict_map(part["graph"], iris.task_graphs))
        blk.add(MP.state, lit_str(part["state"]), "str")
        blk.add(MP.wanted, lit_true(part["wanted"]), "typed", XSD.boolean)
        blk.add(MP.erred, lit_true(part["erred"]), "typed", XSD.boolean)
        blk.add(MP.retried, lit_true(part["retried"]), "typed", XSD.boolean)
        blk.add(MP.neverRan, lit_true(part["never_ran"]), "typed", XSD.boolean)
        off, pos = csr_rows(edges.offsets, rows)
        if off[-1] > 0:
            vals = idx.task_iri.take(pa.array(edges.targets[pos]))
            blk.add(MP.dependsOn, list_column(off, vals))
        add_fact_columns(ctx, blk, "task", positions(rows))
        yield blk


def _execution_blocks(
    ctx: MapContext, idx: TaskIndex, edges: Edges, ex: pd.DataFrame
) -> Iterator[Block]:
    iris = ctx.iris
    n = len(ex)
    if not n:
        return
    used_offsets, used_targets = used_dependencies(idx, edges)
    # which version of each dependency's result the execution used (decision 21)
    prefix_of = dict_map(idx.tasks["prefix"], iris.prefixes)
    use = used_replicas(ctx, idx, edges, ex)
    waits = input_transfers(ctx, use)
    keys = mapped_rows(ctx, idx)
    mask = None if keys is None else keys[ex["row"].to_numpy(dtype=np.int64)]
    for sel in row_chunks(n, ctx.chunk_rows, mask):
        part = ex.iloc[sel]
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
        # the run it was part of, as a link (decision 27): one triple per execution
        blk.add(MP.partOfRun, iris.run)
        blk.add(MP.attempt, lit_int(part["attempt"]), "typed", XSD.integer)
        blk.add(PROV.startedAtTime, lit_time(part["start"]), "typed", XSD.dateTime)
        blk.add(PROV.endedAtTime, lit_time(part["end"]), "typed", XSD.dateTime)
        blk.add(MP.duration, lit_double(dur), "typed", XSD.double)
        blk.add(MP.incomplete, lit_true(~known), "typed", XSD.boolean)
        blk.add(MP.outcome, dict_map(part["outcome"], lit_str), "str")
        blk.add(MP.timeSource, dict_map(part["time_source"], lit_str), "str")
        blk.add(MP.recordLost, lit_true(part["record_lost"]), "typed", XSD.boolean)
        blk.add(PROV.wasAssociatedWith, agent)
        blk.add(PROV.qualifiedAssociation, iris.associations(e_iri))
        # the association's plan again, as a direct link: "executions of this prefix" is then
        # one index range instead of two lookups per execution (slowest-tasks with a prefix)
        plan = prefix_of.take(pa.array(rows))
        blk.add(MP.prefix, plan)
        off, used = _used_chunks(ctx, idx, ex, (used_offsets, used_targets), positions(sel))
        if used is not None:
            blk.add(PROV.used, list_column(off, used))
        off, pos = csr_rows(use.offsets, sel)
        if off[-1] > 0:
            reps = replica_iris(ctx, use.replicas[pos])
            blk.add(MP.usedReplica, list_column(off, reps))
            blk.add(MP.inputTransferCount, lit_int(waits.count.iloc[sel]), "typed", XSD.integer)
            blk.add(MP.inputTransferSeconds, lit_double(waits.seconds[sel]), "typed", XSD.double)
            blk.add(MP.inputTransferBytes, lit_int(waits.bytes.iloc[sel]), "typed", XSD.integer)
        add_fact_columns(ctx, blk, "execution", part)
        yield blk

        ab = Block(iris.associations(e_iri))
        ab.add(RDF.type, PROV.Association)
        ab.add(PROV.agent, agent)
        ab.add(PROV.hadPlan, plan)
        yield ab


def _used_chunks(
    ctx: MapContext,
    idx: TaskIndex,
    ex: pd.DataFrame,
    used: tuple[np.ndarray, np.ndarray],
    sel: np.ndarray,
) -> tuple[np.ndarray, pa.Array | None]:
    """CSR (offsets, chunk IRIs) of what the executions at positions ``sel`` of ``ex`` used: the
    chunk (version, decision 21) of each dependency with a result; None when there is none."""
    used_offsets, used_targets = used
    off, pos = ragged_gather(used_offsets, ex["row"].to_numpy(dtype=np.int64)[sel])
    if not len(pos):
        return off, None
    versions = chunk_versions(ctx, idx, ex)
    deps = used_targets[pos]
    per = np.diff(off)
    starts = np.repeat(utc_to_us(ex["start"].iloc[sel]), per)
    ends = np.repeat(utc_to_us(ex["end"].iloc[sel]), per)
    picks = versions.pick(deps, starts, ends, ex)
    return off, versions.chunk_iris(ctx, idx, ex, deps, picks)


def _chunk_blocks(ctx: MapContext, idx: TaskIndex, ex: pd.DataFrame) -> Iterator[Block]:
    """``<task>/chunk`` per key with a result; on keys with versions (decision 21) also one
    ``<task>/chunk/<attempt>`` per successful execution, specializing it."""
    iris = ctx.iris
    mapped = mapped_rows(ctx, idx)
    rows_all = np.flatnonzero(idx.has_chunk if mapped is None else idx.has_chunk & mapped)
    if not len(rows_all):
        return
    v = chunk_versions(ctx, idx, ex)
    attempts = pa.Array.from_pandas(ex["attempt"].astype("Int64")) if len(ex) else None
    workers = as_text_array(ex["worker"]) if len(ex) else None
    task_worker = idx.tasks["worker"]
    used = used_dependencies(idx, dependency_edges(ctx, idx))
    step = ctx.chunk_rows
    for a in range(0, len(rows_all), step):
        rows = rows_all[a : a + step]
        t_iri = idx.task_iri.take(pa.array(rows))
        blk = Block(concat(t_iri, "/chunk"))
        blk.add(RDF.type, MP.DataChunk)
        blk.add(MP.task, t_iri)
        blk.add(MP.nbytes, lit_int(idx.tasks["nbytes"].iloc[rows]), "typed", XSD.integer)
        # one version, not split: the chunk is that execution's result
        single = (v.n_gen(rows) == 1) & ~v.split[rows]
        where = as_text_array(task_worker.iloc[rows])
        if single.any() and attempts is not None and workers is not None:
            g = pa.array(v.gen[v.gen_off[rows[single]]])
            gen_iri = iris.executions(t_iri.filter(pa.array(single)), attempts.take(g))
            blk.add(PROV.wasGeneratedBy, _spread(single, gen_iri))
            where = pc.coalesce(_spread(single, workers.take(g)), where)
            # derived from what its execution used (decision 28)
            off, src = _used_chunks(ctx, idx, ex, used, v.gen[v.gen_off[rows[single]]])
            if src is not None:
                counts = np.zeros(len(rows), np.int64)
                counts[single] = np.diff(off)
                full = np.zeros(len(rows) + 1, np.int64)
                np.cumsum(counts, out=full[1:])
                blk.add(PROV.wasDerivedFrom, list_column(full, src))
        where = pc.if_else(pa.array(v.split[rows]), pa.scalar(None, LARGE), where)
        blk.add(PROV.atLocation, worker_nodes(ctx, where))
        add_fact_columns(ctx, blk, "chunk", rows)
        yield blk
    # versions of the split keys: one per successful execution
    split = v.split & (np.diff(v.gen_off) > 0)
    split_rows = np.flatnonzero(split if mapped is None else split & mapped)
    if not len(split_rows) or attempts is None or workers is None:
        return
    off, pos = ragged_gather(v.gen_off, split_rows)
    g_all = v.gen[pos]
    r_all = np.repeat(split_rows, np.diff(off))
    for a in range(0, len(g_all), step):
        g = pa.array(g_all[a : a + step])
        t_iri = idx.task_iri.take(pa.array(r_all[a : a + step]))
        att = attempts.take(g)
        blk = Block(concat(t_iri, "/chunk/", pc.cast(att, LARGE)))
        blk.add(RDF.type, MP.DataChunk)
        blk.add(MP.task, t_iri)
        blk.add(PROV.specializationOf, concat(t_iri, "/chunk"))
        blk.add(PROV.wasGeneratedBy, iris.executions(t_iri, att))
        blk.add(PROV.atLocation, worker_nodes(ctx, workers.take(g)))
        off, src = _used_chunks(ctx, idx, ex, used, g_all[a : a + step])
        if src is not None:
            blk.add(PROV.wasDerivedFrom, list_column(off, src))
        yield blk


def _spread(mask: np.ndarray, values: pa.Array) -> pa.Array:
    """``values`` (one per true of ``mask``) at the true positions of ``mask``, null elsewhere."""
    pos = np.cumsum(mask) - 1
    taken = values.take(pa.array(np.where(mask, pos, 0)))
    return pc.if_else(pa.array(mask), taken, pa.scalar(None, taken.type))
