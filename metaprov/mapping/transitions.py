"""State transitions ("the story of a task"), exported only with ``detail="transitions"``.

Input: ``records.transitions`` (scheduler and worker observations). Output: an mp:Transition per
row: task, from/to state, time (dateTime and epoch), stimulus, observer kind and agent
(``mp:observedBy`` the scheduler or the worker), source line; a worker's transition is linked
(``mp:execution``) to the execution of that key on that worker that had started last (the first
one for transitions before any start).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.block import Block, lit_epoch, lit_int, lit_str, lit_time
from metaprov.mapping.tables import dict_map, executions_sorted, task_index
from metaprov.mapping.terms import MP, PROV, RDF, XSD

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

LARGE = pa.large_string()


def add_transitions(ctx: MapContext) -> Iterator[Block]:
    """Transitions (only when ``ctx.detail == "transitions"``)."""
    if ctx.detail != "transitions":
        return
    tr = ctx.records.transitions.dropna(subset=["key"])
    if not len(tr):
        return
    iris = ctx.iris
    idx = task_index(ctx)
    # Stable order and ids: by observer kind, then file line (row position when no line).
    line = (
        tr["line"]
        .astype("Int64")
        .fillna(pd.Series(np.arange(len(tr)), index=tr.index, dtype="Int64"))
    )
    tr = (
        tr.assign(line=line).sort_values(["observer", "line"], kind="stable").reset_index(drop=True)
    )
    tr = _link_executions(ctx, tr)
    step = ctx.chunk_rows
    for a in range(0, len(tr), step):
        part = tr.iloc[a : a + step]
        rows = idx.rows(part["key"])
        blk = Block(iris.transitions(part["observer"].fillna("unknown"), part["line"]))
        blk.add(RDF.type, MP.Transition)
        blk.add(MP.task, idx.task_iri.take(pa.array(rows)))
        blk.add(MP.fromState, dict_map(part["from_state"], lit_str), "str")
        blk.add(MP.toState, dict_map(part["to_state"], lit_str), "str")
        blk.add(MP.epoch, lit_epoch(part["time"]), "typed", XSD.double)
        blk.add(PROV.atTime, lit_time(part["time"]), "typed", XSD.dateTime)
        blk.add(MP.stimulusId, lit_str(part["stimulus_id"]), "str")
        blk.add(MP.observer, dict_map(part["observer"], lit_str), "str")
        is_sched = part["observer"].eq("scheduler").fillna(False).to_numpy(dtype=bool)
        observed = dict_map(part["address"], iris.workers)
        observed = pc.if_else(pa.array(is_sched), pa.scalar(iris.scheduler, LARGE), observed)
        blk.add(MP.observedBy, observed)
        blk.add(MP.sourceLine, lit_int(part["line"]), "typed", XSD.integer)
        if "attempt" in part:
            t_iri = idx.task_iri.take(pa.array(rows))
            blk.add(MP.execution, iris.executions(t_iri, pa.Array.from_pandas(part["attempt"])))
        yield blk


def _link_executions(ctx: MapContext, tr: pd.DataFrame) -> pd.DataFrame:
    """Add ``attempt``: the execution of the same key on the observing worker that had started last."""
    idx = task_index(ctx)
    ex = executions_sorted(ctx, idx)
    if not len(ex):
        return tr
    w = tr[tr["observer"].eq("worker").fillna(False) & tr["time"].notna()]
    e = ex.dropna(subset=["start"])[["key", "worker", "start", "attempt"]]
    if not len(w) or not len(e):
        return tr
    left = w[["key", "address", "time"]].rename(columns={"address": "worker"}).reset_index()
    left["key"] = left["key"].astype(object)
    left["worker"] = left["worker"].astype(object)
    e = e.assign(key=e["key"].astype(object), worker=e["worker"].astype(object))
    lsorted = left.sort_values("time", kind="stable")
    esorted = e.sort_values("start", kind="stable")
    # The execution that had started last on that worker when the transition happened; the
    # transitions before its first start (released -> waiting -> ready) go to the first one.
    merged = {
        d: pd.merge_asof(
            lsorted, esorted, left_on="time", right_on="start", by=["key", "worker"], direction=d
        )
        for d in ("backward", "forward")
    }
    back = merged["backward"].set_index("index")["attempt"].astype("Int64")
    fwd = merged["forward"].set_index("index")["attempt"].astype("Int64")
    chosen = back.fillna(fwd)
    attempt = pd.Series(pd.array([pd.NA] * len(tr), dtype="Int64"))
    attempt.iloc[chosen.index.to_numpy()] = chosen.to_numpy()
    return tr.assign(attempt=attempt)
