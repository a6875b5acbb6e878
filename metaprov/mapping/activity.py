"""Where the workers' time went, and their memory, as PROV.

Input: ``records.activity`` (Dask's fine performance metrics) and ``records.memory`` (each
worker's memory as the scheduler saw it); see :mod:`metaprov.ingest.activity`. Both are empty
for runs that did not record them (Mofka runs, older captures), which then map exactly as before.

Output (docs/model.md, decision 33):

- mp:ActivityShare per (worker, context, task prefix, span, activity, unit), IRI
  ``<worker>/activity/<context>/<prefix>/<span id>/<activity>/<unit>`` (an empty segment where
  the row has none): the sum of what that worker measured over the run (``mp:metricValue`` in
  ``mp:metricUnit``: seconds, bytes or a count), ``mp:measurementCount`` measurements summed
  (executions, for the ``execute`` context), first and last time, ``prov:wasAttributedTo`` the
  worker (``mp:measuredOn``), ``mp:sharePrefix`` the task prefix where the graph has it;
- mp:MemorySample per worker and time, IRI ``<worker>/memory/<n>`` (n: the sample's rank in
  the worker's samples, by time): process, managed, unmanaged and spilled bytes, status and
  whether the worker was paused, ``prov:generatedAtTime``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.mapping.block import Block, lit_double, lit_int, lit_str, lit_time
from metaprov.mapping.tables import dict_map
from metaprov.mapping.terms import MP, PROV, RDF, XSD, concat, quote_array

if TYPE_CHECKING:
    from metaprov.mapping import MapContext

LARGE = pa.large_string()
#: The columns one activity share sums over (the table's rows without key and time).
SHARE_BY = ["worker", "context", "prefix", "span_id", "span", "activity", "unit"]


def add_activity(ctx: MapContext) -> Iterator[Block]:
    """The activity shares and memory samples of the run (nothing when none was recorded)."""
    yield from _shares(ctx)
    yield from _memory(ctx)


def activity_shares(activity: pd.DataFrame) -> pd.DataFrame:
    """The activity table summed per (worker, context, prefix, span, activity, unit): ``value``,
    ``count`` (measurements), ``first`` start and ``last`` end; sorted by those columns."""
    if not len(activity):
        return pd.DataFrame(columns=[*SHARE_BY, "value", "count", "first", "last"])
    df = activity[[*SHARE_BY, "value", "start", "end"]].copy()
    for c in SHARE_BY:
        df[c] = df[c].astype(object).where(df[c].notna(), "")
    out = (
        df.groupby(SHARE_BY, sort=True)
        .agg(
            value=("value", "sum"),
            count=("value", "size"),
            first=("start", "min"),
            last=("end", "max"),
        )
        .reset_index()
    )
    for c in SHARE_BY:
        out[c] = out[c].where(out[c] != "", None)
    return out


def _segment(values: pd.Series) -> pa.Array:
    """IRI segments (percent-encoded); an absent value is the empty segment."""
    return quote_array(values.fillna("").astype(str))


def _shares(ctx: MapContext) -> Iterator[Block]:
    shares = activity_shares(ctx.records.activity)
    if not len(shares):
        return
    iris = ctx.iris
    worker = dict_map(shares["worker"].astype(str), iris.workers)
    subjects = concat(
        worker,
        "/activity/",
        _segment(shares["context"]),
        "/",
        _segment(shares["prefix"]),
        "/",
        _segment(shares["span_id"]),
        "/",
        _segment(shares["activity"]),
        "/",
        _segment(shares["unit"]),
    )
    known = set(ctx.records.tasks["prefix"].dropna().astype(str))
    prefix = shares["prefix"]
    linked = prefix.where(prefix.isin(known), None)
    prefix_iri = dict_map(pd.Series(linked, dtype=object), iris.prefixes)
    step = ctx.chunk_rows
    for a in range(0, len(shares), step):
        s = slice(a, min(len(shares), a + step))
        part = shares.iloc[s]
        blk = Block(subjects[s])
        blk.add(RDF.type, MP.ActivityShare)
        blk.add(MP.measuredOn, worker[s])
        blk.add(PROV.wasAttributedTo, worker[s])
        blk.add(MP.metricContext, lit_str(part["context"]), "str")
        blk.add(MP.activityName, lit_str(part["activity"]), "str")
        blk.add(MP.metricUnit, lit_str(part["unit"]), "str")
        blk.add(MP.metricValue, lit_double(part["value"]), "typed", XSD.double)
        blk.add(MP.measurementCount, lit_int(part["count"].astype("Int64")), "typed", XSD.integer)
        blk.add(MP.prefixName, lit_str(part["prefix"]), "str")
        blk.add(MP.sharePrefix, prefix_iri[s])
        blk.add(MP.spanName, lit_str(part["span"]), "str")
        blk.add(MP.spanId, lit_str(part["span_id"]), "str")
        blk.add(MP.firstTime, lit_time(part["first"]), "typed", XSD.dateTime)
        blk.add(MP.lastTime, lit_time(part["last"]), "typed", XSD.dateTime)
        blk.add(MP.run, iris.run)
        yield blk


def _memory(ctx: MapContext) -> Iterator[Block]:
    mem = ctx.records.memory
    if not len(mem):
        return
    mem = mem.sort_values(["worker", "time"], kind="stable").reset_index(drop=True)
    iris = ctx.iris
    worker = dict_map(mem["worker"].astype(str), iris.workers)
    rank = mem.groupby("worker", sort=False).cumcount().to_numpy(dtype=np.int64)
    subjects = concat(worker, "/memory/", pa.array(rank.astype(str), LARGE))
    paused = pc.cast(pa.Array.from_pandas(mem["paused"].astype("boolean")), pa.bool_())
    paused = pc.if_else(paused, pa.scalar("true", LARGE), pa.scalar("false", LARGE))
    step = ctx.chunk_rows
    for a in range(0, len(mem), step):
        s = slice(a, min(len(mem), a + step))
        part = mem.iloc[s]
        blk = Block(subjects[s])
        blk.add(RDF.type, MP.MemorySample)
        blk.add(MP.measuredOn, worker[s])
        blk.add(PROV.wasAttributedTo, worker[s])
        blk.add(PROV.generatedAtTime, lit_time(part["time"]), "typed", XSD.dateTime)
        blk.add(MP.processBytes, lit_int(part["process"]), "typed", XSD.integer)
        blk.add(MP.managedBytes, lit_int(part["managed"]), "typed", XSD.integer)
        blk.add(MP.unmanagedBytes, lit_int(part["unmanaged"]), "typed", XSD.integer)
        blk.add(MP.unmanagedOldBytes, lit_int(part["unmanaged_old"]), "typed", XSD.integer)
        blk.add(MP.spilledBytes, lit_int(part["spilled"]), "typed", XSD.integer)
        blk.add(MP.workerStatus, lit_str(part["status"]), "str")
        blk.add(MP.paused, paused[s], "typed", XSD.boolean)
        yield blk
