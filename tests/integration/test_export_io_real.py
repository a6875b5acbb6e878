"""Darshan I/O in the PROV export of the real runs: SPARQL over the export against ``records.io``.

PMDA R1 (33 logs, 5,199 traced calls): every task-thread call (3,125) is in a task's usage or
generation, every process-level call (2,074) in a process activity's; files read per task with
their bytes equal the records'. In every real run every traced call is counted in the export.
(That every real run, I/O included, exports in every format, parses back and validates is
``test_export_real.py``'s.)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyoxigraph as ox
import pytest
from conftest import real_run_params

from metaprov.ingest import read_run
from metaprov.link import link_io
from metaprov.mapping import ProvGraph, to_prov
from metaprov.mapping.fileio import file_labels
from metaprov.records import RunRecords
from metaprov.validate import validate
from metaprov.write import iter_nquads

pytestmark = pytest.mark.realdata

OX = {
    "turtle": ox.RdfFormat.TURTLE,
    "ntriples": ox.RdfFormat.N_TRIPLES,
    "nquads": ox.RdfFormat.N_QUADS,
    "trig": ox.RdfFormat.TRIG,
    "json-ld": ox.RdfFormat.JSON_LD,
    "rdf-xml": ox.RdfFormat.RDF_XML,
}
PREFIXES = "PREFIX mp: <https://w3id.org/metaprov/ns#> PREFIX prov: <http://www.w3.org/ns/prov#>\n"


@pytest.fixture(scope="module")
def r1(pmda_r1: Path) -> RunRecords:
    return link_io(read_run(pmda_r1))


def _store(graph: ProvGraph) -> ox.Store:
    store = ox.Store()
    store.bulk_load(b"".join(iter_nquads(graph)), format=ox.RdfFormat.N_QUADS)
    return store


@pytest.fixture(scope="module")
def r1_store(r1: RunRecords) -> tuple[ox.Store, str]:
    graph = to_prov(r1)
    return _store(graph), graph.graph_iri


def rows(store: ox.Store, graph: str, select: str, where: str) -> list[dict]:
    q = f"{PREFIXES}SELECT {select} WHERE {{ GRAPH <{graph}> {{ {where} }} }}"
    res = store.query(q)
    names = [v.value for v in res.variables]
    return [{n: None if sol[n] is None else sol[n].value for n in names} for sol in res]


def total(store: ox.Store, graph: str, where: str, expr: str) -> int:
    q = f"{PREFIXES}SELECT (SUM({expr}) AS ?n) WHERE {{ GRAPH <{graph}> {{ {where} }} }}"
    value = next(iter(store.query(q)))["n"]
    return int(value.value) if value is not None else 0


def _joined(r1: RunRecords) -> pd.DataFrame:
    seg = r1.darshan.segments
    links = r1.io.segments
    roles = dict(zip(r1.io.processes["log"], r1.io.processes["role"], strict=True))
    return seg[["path", "op", "length"]].assign(
        status=links["status"].astype(str).to_numpy(),
        key=links["key"].to_numpy(),
        role=links["log"].map(roles).astype(str).to_numpy(),
    )


def test_r1_files_read_by_each_task_with_bytes(r1: RunRecords, r1_store: tuple) -> None:
    store, g = r1_store
    got = rows(
        store,
        g,
        "?key ?path ?bytes ?n",
        "?e a mp:TaskExecution ; mp:task/mp:key ?key ; prov:qualifiedUsage ?u ; prov:used ?f . "
        "?u prov:entity ?f ; mp:bytesRead ?bytes ; mp:readCount ?n ; mp:linkStatus 'linked' . "
        "?f mp:path ?path",
    )
    got_df = pd.DataFrame(got).astype({"bytes": int, "n": int}).set_index(["key", "path"])
    j = _joined(r1)
    reads = j[(j["status"] == "linked") & (j["op"] == "read")]
    want = reads.groupby(["key", "path"])["length"].agg(["sum", "size"])
    assert len(want) == 12 and want.index.get_level_values("key").nunique() == 6
    assert got_df.sort_index()["bytes"].to_dict() == want["sum"].astype(int).to_dict()
    assert got_df.sort_index()["n"].to_dict() == want["size"].astype(int).to_dict()
    # the tasks wrote nothing in R1
    assert (
        total(store, g, "?v a mp:FileVersion ; prov:wasGeneratedBy ?e . ?e a mp:TaskExecution", "1")
        == 0
    )


def test_r1_every_task_thread_segment_is_in_a_task_aggregate(
    r1: RunRecords, r1_store: tuple
) -> None:
    store, g = r1_store
    acct = r1.io.accounting
    assert acct["task_thread_segments"] == acct["by_status"]["linked"] == 3125
    reads = total(
        store, g, "?e a mp:TaskExecution ; prov:qualifiedUsage ?u . ?u mp:readCount ?c", "?c"
    )
    writes = total(
        store,
        g,
        "?v prov:qualifiedGeneration ?x . ?x prov:activity ?e ; mp:writeCount ?c . "
        "?e a mp:TaskExecution",
        "?c",
    )
    assert reads + writes == 3125
    # the totals on the executions agree
    on_tasks = total(store, g, "?e a mp:TaskExecution, mp:IOActivity ; mp:readCount ?c", "?c")
    assert on_tasks == reads


def test_r1_process_level_segments_are_on_the_processes(r1: RunRecords, r1_store: tuple) -> None:
    store, g = r1_store
    assert r1.io.accounting["by_status"]["process"] == 2074
    where = (
        "?a a mp:ProcessActivity ; prov:wasAssociatedWith ?p . ?p mp:processRole ?role . "
        "{ ?a prov:qualifiedUsage ?x . ?x mp:readCount ?c } UNION "
        "{ ?v prov:qualifiedGeneration ?x . ?x prov:activity ?a ; mp:writeCount ?c } "
        "?x mp:linkStatus 'process'"
    )
    assert total(store, g, where, "?c") == 2074
    got = _by_role(store, g, where)
    j = _joined(r1)
    want = j[j["status"] == "process"].groupby("role").size().to_dict()
    assert got == want == {"nanny": 1024, "resource_tracker": 16, "worker": 1034}
    # the worker processes that ran tasks are the agents' WorkerProcess of their worker
    mapped = r1.io.processes.dropna(subset=["worker"])
    chain = rows(
        store,
        g,
        "?address ?log",
        "?p a mp:WorkerProcess, mp:Process ; mp:darshanLog ?log ; prov:actedOnBehalfOf ?w . "
        "?w a mp:Worker ; mp:address ?address",
    )
    assert {(r["address"], r["log"]) for r in chain} == set(
        zip(mapped["worker"].astype(str), mapped["log"].astype(str), strict=True)
    )
    # every thread that ran a task with I/O acts for the process whose log traced it
    threads = rows(
        store,
        g,
        "?t ?log",
        "?e a mp:IOActivity ; prov:wasAssociatedWith ?t . ?t a mp:Thread ; "
        "prov:actedOnBehalfOf ?p . ?p mp:darshanLog ?log",
    )
    assert len(threads) == 6 and {r["log"] for r in threads} <= set(mapped["log"].astype(str))
    assert total(store, g, "?p a mp:Process", "1") == 33


def _by_role(store: ox.Store, g: str, where: str) -> dict[str, int]:
    q = f"{PREFIXES}SELECT ?role (SUM(?c) AS ?n) WHERE {{ GRAPH <{g}> {{ {where} }} }} GROUP BY ?role"
    return {s["role"].value: int(s["n"].value) for s in store.query(q)}


def test_r1_process_counters_are_the_sums_of_the_records(r1: RunRecords, r1_store: tuple) -> None:
    store, g = r1_store
    c = r1.darshan.counters
    want = c[c["counter"] == "POSIX_BYTES_READ"].groupby("log")["value"].sum()
    got = {
        r["log"]: float(r["v"])
        for r in rows(
            store,
            g,
            "?log ?v",
            "?p mp:darshanLog ?log ; mp:counter ?c . "
            "?c mp:counterName 'POSIX_BYTES_READ' ; mp:counterValue ?v",
        )
    }
    assert len(want) == 24  # the processes that read anything
    assert got == want.to_dict()


def test_r1_segment_detail(r1: RunRecords) -> None:
    graph = to_prov(r1, io_detail="segments")
    store = _store(graph)
    g = graph.graph_iri
    n = len(r1.darshan.segments)
    assert total(store, g, "?s a mp:IOSegment", "1") == n == 5199
    assert (
        total(store, g, "?s a mp:IOSegment ; mp:aggregatedBy ?a . ?a mp:linkStatus 'linked'", "1")
        == 3125
    )
    assert (
        total(store, g, "?r a mp:DarshanRecord", "1")
        == r1.darshan.counters.groupby(["log", "module", "rank", "record_id"]).ngroups
    )
    assert total(store, g, "?r a mp:DarshanRecord ; mp:counter ?c", "1") == len(r1.darshan.counters)
    report = validate(graph, engine="sparql")
    assert report.conforms, report.text()


@pytest.mark.parametrize("run", real_run_params())
def test_every_real_run_accounts_for_every_traced_call(run: Path) -> None:
    # (every format of every real run, I/O included, is parsed back and validated by
    # test_export_real.py; here: nothing of the I/O is lost on the way)
    records = read_run(run)
    graph = to_prov(records)
    store = _store(graph)
    g = graph.graph_iri
    logs = records.darshan.logs
    kept = logs[logs["in_run"].fillna(True).astype(bool) & logs["status"].ne("unreadable")]
    calls = records.darshan.segments["log"].isin(kept["log"]).sum()
    counted = total(
        store,
        g,
        "{ ?x a mp:IOUsage ; mp:readCount ?c } UNION { ?x a mp:IOGeneration ; mp:writeCount ?c }",
        "?c",
    )
    assert counted == calls > 5000
    assert total(store, g, "?p a mp:Process", "1") == len(kept) > 30
    # one file per identity (decision 16), and every path named
    seg = records.darshan.segments
    seg = seg[seg["log"].isin(kept["log"])]
    files = file_labels(logs, seg["log"], seg["path"])
    assert total(store, g, "?f a mp:File", "1") == files.nunique() >= seg["path"].nunique()
    paths = rows(store, g, "DISTINCT ?p", "?f a mp:File ; mp:path ?p")
    assert len(paths) == seg["path"].nunique()


def test_r1_file_identity_follows_the_mount_table(r1_store: tuple) -> None:
    """/home and /lus are Lustre in R1's mount table: one file each; /tmp is the node's overlay
    root: a file of the node; <STDERR> and the other streams: one per process (decision 16)."""
    store, g = r1_store
    got = rows(
        store,
        g,
        "?f ?path ?scope ?fs",
        "?f a mp:File ; mp:path ?path ; mp:fileScope ?scope . OPTIONAL { ?f mp:fileSystem ?fs }",
    )
    df = pd.DataFrame(got)
    shared = df[df["path"].str.startswith(("/home/", "/lus/"))]
    assert len(shared) and set(shared["scope"]) == {"shared"} and set(shared["fs"]) == {"lustre"}
    tmp = df[df["path"].str.startswith("/tmp/")]
    assert len(tmp) and set(tmp["scope"]) == {"node"}
    assert all("/node/" in f for f in tmp["f"])
    stderr = df[df["path"] == "<STDERR>"]
    assert set(stderr["scope"]) == {"process"} and len(stderr) > 1
    owners = rows(store, g, "?f ?p", "?f mp:path '<STDERR>' ; mp:process ?p . ?p a mp:Process")
    assert len({o["p"] for o in owners}) == len(stderr)  # one <STDERR> per process
    # the path still compares files: per path, every file names it
    assert df.groupby("path")["f"].nunique().max() > 1


def test_r1_worker_processes_merged_when_proven_and_why_not_otherwise(
    r1: RunRecords, r1_store: tuple
) -> None:
    store, g = r1_store
    procs = r1.io.processes
    mapped = procs[(procs["role"] == "worker") & procs["worker"].notna()]
    assert len(mapped) == 6
    # a proven worker's process is one node: <worker>/process, typed both ways, with the log
    merged = rows(store, g, "?p ?log", "?p a mp:WorkerProcess, mp:Process ; mp:darshanLog ?log")
    assert {m["log"] for m in merged} == set(mapped["log"])
    assert all(m["p"].endswith("/process") and "/worker/" in m["p"] for m in merged)
    # the two other worker logs: not merged, with both candidate workers and the reason
    apart = rows(
        store,
        g,
        "?p ?reason",
        "?p a mp:Process ; mp:processRole 'worker' ; mp:unmatchedReason ?reason",
    )
    assert len(apart) == 2
    for a in apart:
        assert "/process/" in a["p"] and "cannot be told" in a["reason"]
        cands = rows(store, g, "?w", f"<{a['p']}> mp:candidateWorker ?w . ?w a mp:Worker")
        assert len(cands) == 2
    # each of those workers still has its own (untraced) process node, without a log
    for w in {
        c["w"] for a in apart for c in rows(store, g, "?w", f"<{a['p']}> mp:candidateWorker ?w")
    }:
        assert not rows(store, g, "?log", f"<{w}/process> mp:darshanLog ?log")


def test_r1_new_links_exist_and_constraints_hold(r1: RunRecords, r1_store: tuple) -> None:
    store, g = r1_store
    n_ex = total(store, g, "?e a mp:TaskExecution", "1")
    assert total(store, g, "?e a mp:TaskExecution ; mp:partOfRun ?r . ?r a mp:Run", "1") == n_ex
    assert (
        total(store, g, "?c a mp:DataChunk ; prov:wasDerivedFrom ?d . ?d a mp:DataChunk", "1") > 0
    )
    report = validate(to_prov(r1), engine="sparql")
    assert report.conforms, report.text()


def test_r1_prov_xml_and_json_with_io_validate_against_the_w3c_schemas(r1: RunRecords) -> None:
    """Per-node and per-process files (``<process>/file/%3CSTDERR%3E``), candidate workers and
    derivations keep PROV-XML and PROV-JSON valid (the tiny run's check, on real I/O)."""
    import io
    import json
    import os

    import prov
    from lxml import etree

    from metaprov.write import write

    schemas = Path(os.path.dirname(prov.__file__)) / "tests" / "schemas"
    if not (schemas / "prov.xsd").is_file():
        pytest.skip(f"the prov package installed has no W3C schemas at {schemas}")
    jsonschema = pytest.importorskip("jsonschema")
    graph = to_prov(r1)
    out = {}
    for fmt in ("provxml", "provjson"):
        buf = io.BytesIO()
        write(graph, buf, fmt)
        out[fmt] = buf.getvalue()
    xsd = etree.XMLSchema(etree.parse(str(schemas / "prov.xsd")))
    assert xsd.validate(etree.fromstring(out["provxml"])), xsd.error_log
    assert b"STDERR" in out["provxml"] and b"wasDerivedFrom" in out["provxml"]
    schema = json.loads((schemas / "prov-json.schema.json").read_text())
    errors = list(jsonschema.Draft4Validator(schema).iter_errors(json.loads(out["provjson"])))
    assert not errors, errors[:3]
