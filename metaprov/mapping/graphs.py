"""Plans at client and scheduler level: submitted task graphs, task prefixes and task groups.

Input: ``records.graphs`` and the prefix/group columns of ``records.tasks``. Output: blocks of
mp:TaskGraph (attributed to its client), mp:TaskPrefix and mp:TaskGroup (with its prefix).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pandas as pd

from metaprov.mapping.block import Block, lit_int, lit_str, lit_time
from metaprov.mapping.terms import MP, PROV, RDF, XSD

if TYPE_CHECKING:
    from metaprov.mapping import MapContext


def group_table(ctx: MapContext) -> pd.DataFrame:
    """Distinct (group, prefix) pairs of the tasks, one row per group, sorted by group."""

    def make() -> pd.DataFrame:
        t = ctx.records.tasks[["group", "prefix"]].dropna(subset=["group"])
        t = t.drop_duplicates().sort_values(["group", "prefix"], kind="stable", na_position="last")
        return t.drop_duplicates("group").reset_index(drop=True)

    return ctx.cached("groups", make)


def add_graphs(ctx: MapContext) -> Iterator[Block]:
    """Task graphs, prefixes, groups."""
    rec = ctx.records
    iris = ctx.iris

    g = (
        rec.graphs.dropna(subset=["graph"])
        .drop_duplicates("graph")
        .sort_values("graph", kind="stable")
    )
    if len(g):
        gb = Block(iris.task_graphs(g["graph"]))
        gb.add(RDF.type, MP.TaskGraph)
        gb.add(MP.graphIndex, lit_int(g["graph"]), "typed", XSD.integer)
        gb.add(PROV.wasAttributedTo, iris.clients(g["client"]))
        gb.add(PROV.generatedAtTime, lit_time(g["time"]), "typed", XSD.dateTime)
        gb.add(MP.wantedCount, lit_int(g["n_wanted"]), "typed", XSD.integer)
        gb.add(MP.taskCount, lit_int(g["n_tasks"]), "typed", XSD.integer)
        gb.add(MP.edgeCount, lit_int(g["n_edges"]), "typed", XSD.integer)
        gb.add(MP.run, iris.run)
        yield gb

    prefixes = pd.Series(sorted(rec.tasks["prefix"].dropna().astype(str).unique()), dtype=object)
    if len(prefixes):
        pb = Block(iris.prefixes(prefixes))
        pb.add(RDF.type, MP.TaskPrefix)
        pb.add(MP.name, lit_str(prefixes), "str")
        pb.add(MP.run, iris.run)
        yield pb

    groups = group_table(ctx)
    if len(groups):
        grb = Block(iris.groups(groups["group"]))
        grb.add(RDF.type, MP.TaskGroup)
        grb.add(MP.name, lit_str(groups["group"]), "str")
        grb.add(MP.taskPrefix, iris.prefixes(groups["prefix"]))
        grb.add(MP.run, iris.run)
        yield grb
