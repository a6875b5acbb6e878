"""Darshan file I/O in the PROV export (metaprov/mapping/fileio.py) on a tiny run built in code.

The tiny run of ``tinyrun.py`` gets Darshan logs written by the project's writer: two worker
processes (their calls known to fall in given task windows), a nanny and a helper process. Every
expected figure below follows from the calls written here.
"""

from __future__ import annotations

import io
import json
import urllib.parse
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rdflib
from rdflib import RDF, Literal, URIRef
from tinyrun import KEY_A, KEY_B, KEY_ERR, KEY_SLASH, KEY_UNI, T0, TH1, TH2, W1, W2, tiny_records

from metaprov.errors import UsageError
from metaprov.ingest.darshan import read_darshan_logs
from metaprov.link import link_io
from metaprov.mapping import to_prov
from metaprov.mapping.terms import DEFAULT_BASE, MP, PROV, XSD
from metaprov.synthetic.darshan import log_file_name, write_darshan_log
from metaprov.validate import validate
from metaprov.write import write

MPN = rdflib.Namespace(MP.Run[: -len("Run")])
PROVN = rdflib.Namespace(PROV.used[: -len("used")])
RUN = f"{DEFAULT_BASE}/run/tiny0001"
WORKER_CMD = "python3 -c from multiprocessing.spawn import spawn_main --multiprocessing-fork"
NANNY_CMD = "python3 /x/bin/dask worker tcp://10.0.0.9:8786"
IN, OUT, LIB = "/data/in.h5", "/data/out.bin", "/usr/lib/python3/os.py"
MAIN_THREAD = 777  # a thread of worker 1 that ran no task
#: Darshan's mount table of every log: /data on a parallel file system, the rest node-local
MOUNTS = (("ext4", "/"), ("lustre", "/data"))


def q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def execution(key: str, attempt: int = 0) -> URIRef:
    return URIRef(f"{RUN}/task/{q(key)}/execution/{attempt}")


def file_iri(path: str, host: str | None = None) -> URIRef:
    """A shared file (``/data`` is a Lustre mount in these logs), else a file of ``host``."""
    if host is None:
        return URIRef(f"{RUN}/file/{q(path)}")
    return URIRef(f"{RUN}/node/{q(host)}/file/{q(path)}")


def worker_process(addr: str) -> URIRef:
    return URIRef(f"{RUN}/worker/{q(addr)}/process")


def _calls(rows: list[tuple]) -> pd.DataFrame:
    """(path, op, offset, length, start, end (seconds after T0), pthread or None) rows."""
    df = pd.DataFrame(rows, columns=["path", "op", "offset", "length", "t0", "t1", "pthread"])
    return pd.DataFrame(
        {
            "path": df["path"],
            "op": df["op"],
            "offset": df["offset"],
            "length": df["length"],
            "start_rel": df["t0"],
            "end_rel": df["t1"],
            "pthread": pd.array(df["pthread"].tolist(), dtype="UInt64"),
        }
    )


# Worker 1 (thread TH1 ran a (1.0-1.5), err#0 (1.0-1.2), b (2.0-2.5), err#1 (3.0-3.5)).
W1_CALLS = [
    (IN, "read", 0, 100, 2.10, 2.11, TH1),  # b
    (IN, "read", 100, 50, 2.20, 2.21, TH1),  # b
    (OUT, "write", 0, 64, 2.30, 2.31, TH1),  # b
    (OUT, "write", 64, 64, 2.40, 2.41, TH1),  # b
    (IN, "read", 500, 10, 1.10, 1.11, TH1),  # in a's and err#0's windows: ambiguous
    (IN, "read", 0, 8, 3.10, 3.11, TH1),  # err#1
    (LIB, "read", 0, 4096, 0.10, 0.11, MAIN_THREAD),  # the process itself
    (OUT, "write", 0, 10, 6.00, 6.01, MAIN_THREAD),  # the process itself, after every task
    (IN, "read", 0, 1, 0.20, 0.21, None),  # no thread id: unlinked
]
# Worker 2 (thread TH2 ran x/y z (4.0-4.25) and the unicode key (5.0-5.125)).
W2_CALLS = [
    (OUT, "write", 128, 32, 4.10, 4.11, TH2),  # x/y z
    (IN, "read", 0, 20, 5.05, 5.06, TH2),  # the unicode key
]


def _write_logs(tmp: Path) -> None:
    def log(pid: int, calls: list[tuple], cmd: str, host: str, layout: int = 96) -> None:
        write_darshan_log(
            tmp / log_file_name("alice", "python3", pid, pid, T0),
            _calls(calls),
            start=T0,
            cmdline=cmd,
            hostname=host,
            layout=layout,
            jobid=pid,
            mounts=MOUNTS,
        )

    log(101, W1_CALLS, WORKER_CMD, "node-a")
    log(102, W2_CALLS, WORKER_CMD, "node-b")
    log(100, [("/etc/dask.yaml", "read", 0, 300, 0.05, 0.06, None)], NANNY_CMD, "node-d", 32)
    log(103, [("/etc/hostname", "read", 0, 9, 0.07, 0.08, None)], "uname -a", "node-e", 32)


def io_records(tmp: Path):  # type: ignore[no-untyped-def]
    """The tiny run with its Darshan logs read (not linked)."""
    d = tmp / "logs"
    if not d.exists():
        d.mkdir()
        _write_logs(d)
    rec = tiny_records()
    # a node list naming the full host name that Darshan records only as "node-d"
    rec.job["nodes"] = {**rec.job["nodes"], "client": ["node-d.cluster.org"]}
    rec.darshan = read_darshan_logs(d, rec.accounting)
    return rec


def ntriples(rec, **kw) -> bytes:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    write(to_prov(rec, **kw), buf, "ntriples")
    return buf.getvalue()


def graph_of(rec, **kw) -> rdflib.Graph:  # type: ignore[no-untyped-def]
    return rdflib.Graph().parse(data=ntriples(rec, **kw), format="nt")


@pytest.fixture(scope="module")
def tmp_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("io")


@pytest.fixture(scope="module")
def g(tmp_logs: Path) -> rdflib.Graph:
    return graph_of(io_records(tmp_logs))


def one(g: rdflib.Graph, s: URIRef, p: URIRef) -> object:
    vals = list(g.objects(s, p))
    assert len(vals) == 1, (s, p, vals)
    return vals[0].toPython() if isinstance(vals[0], Literal) else vals[0]


def qualified(g: rdflib.Graph, activity: URIRef) -> dict[tuple[str, str], URIRef]:
    """(path, link status) -> I/O usage of an activity."""
    out = {}
    for u in g.objects(activity, PROVN.qualifiedUsage):
        path = str(one(g, one(g, u, PROVN.entity), MPN.path))
        out[(path, str(one(g, u, MPN.linkStatus)))] = u
    return out


def test_link_premise(tmp_logs: Path) -> None:
    rec = link_io(io_records(tmp_logs))
    assert rec.io.accounting["by_status"] == {
        "linked": 7,
        "process": 4,
        "ambiguous": 1,
        "unlinked": 1,
    }


def test_files_are_entities_with_their_path(g: rdflib.Graph) -> None:
    paths = {str(one(g, f, MPN.path)) for f in g.subjects(RDF.type, MPN.File)}
    assert paths == {IN, OUT, LIB, "/etc/dask.yaml", "/etc/hostname"}
    # /data is Lustre in the logs' mount table: one file for every node; the others are files
    # of the node whose process touched them (decision 16)
    assert set(g.subjects(RDF.type, MPN.File)) == {
        file_iri(IN),
        file_iri(OUT),
        file_iri(LIB, "node-a"),
        file_iri("/etc/dask.yaml", "node-d.cluster.org"),
        file_iri("/etc/hostname", "node-e"),
    }
    assert one(g, file_iri(IN), MPN.fileScope) == "shared"
    assert one(g, file_iri(IN), MPN.fileSystem) == "lustre"
    assert not list(g.objects(file_iri(IN), PROVN.atLocation))
    lib = file_iri(LIB, "node-a")
    assert one(g, lib, MPN.fileScope) == "node" and one(g, lib, MPN.fileSystem) == "ext4"
    assert one(g, lib, PROVN.atLocation) == URIRef(f"{RUN}/node/node-a")


def test_task_reads_are_qualified_usages_with_figures(g: rdflib.Graph) -> None:
    b = execution(KEY_B)
    assert (b, RDF.type, MPN.TaskExecution) in g and (b, RDF.type, MPN.IOActivity) in g
    # prov:used: the dependency's data chunk (tasks step) and the file read
    assert set(g.objects(b, PROVN.used)) == {file_iri(IN), URIRef(f"{RUN}/task/a/chunk")}
    (key, u), *rest = qualified(g, b).items()
    assert not rest and key == (IN, "linked")
    assert (u, RDF.type, MPN.IOUsage) in g
    assert one(g, u, MPN.bytesRead) == 150
    assert one(g, u, MPN.readCount) == 2
    assert one(g, u, MPN.minOffset) == 0
    assert one(g, u, MPN.endOffset) == 150
    first, last = one(g, u, MPN.firstTime), one(g, u, MPN.lastTime)
    assert first == pd.Timestamp(T0 + 2.10, unit="s", tz="UTC").round("us")
    assert last == pd.Timestamp(T0 + 2.21, unit="s", tz="UTC").round("us")
    assert one(g, u, MPN.ioTime) == pytest.approx(0.02)
    # totals on the activity: reads and writes
    assert one(g, b, MPN.bytesRead) == 150 and one(g, b, MPN.readCount) == 2
    assert one(g, b, MPN.bytesWritten) == 128 and one(g, b, MPN.writeCount) == 2
    # a task without I/O gets nothing; the retried task's second attempt read on its own
    assert (execution(KEY_A), RDF.type, MPN.IOActivity) not in g
    err1 = qualified(g, execution(KEY_ERR, 1))
    assert one(g, err1[(IN, "linked")], MPN.bytesRead) == 8
    assert not list(g.objects(execution(KEY_ERR, 0), PROVN.qualifiedUsage))
    # any key yields a valid IRI for its usages
    uni = qualified(g, execution(KEY_UNI))
    assert one(g, uni[(IN, "linked")], MPN.bytesRead) == 20
    assert not list(g.objects(execution(KEY_UNI), MPN.bytesWritten))


def test_writes_are_file_versions_generated_by_the_task_in_time_order(g: rdflib.Graph) -> None:
    versions = {
        int(str(v).rsplit("/", 1)[1]): v
        for v in g.subjects(MPN.file, file_iri(OUT))
        if (v, RDF.type, MPN.FileVersion) in g
    }
    assert sorted(versions) == [1, 2, 3]
    w1_activity = URIRef(f"{worker_process(W1)}/activity")
    expected = {
        1: (execution(KEY_B), 128, 2),
        2: (execution(KEY_SLASH), 32, 1),
        3: (w1_activity, 10, 1),
    }
    for n, (act, nbytes, count) in expected.items():
        v = versions[n]
        assert one(g, v, PROVN.wasGeneratedBy) == act
        assert one(g, v, PROVN.specializationOf) == file_iri(OUT)
        gen = one(g, v, PROVN.qualifiedGeneration)
        assert (gen, RDF.type, MPN.IOGeneration) in g
        assert one(g, gen, PROVN.activity) == act
        assert one(g, gen, MPN.bytesWritten) == nbytes
        assert one(g, gen, MPN.writeCount) == count
        assert one(g, gen, PROVN.atTime) == one(g, gen, MPN.lastTime)
        assert not list(g.objects(v, PROVN.generatedAtTime))
        prev = list(g.objects(v, PROVN.wasRevisionOf))
        assert prev == ([versions[n - 1]] if n > 1 else [])
    assert one(g, one(g, versions[1], PROVN.qualifiedGeneration), MPN.endOffset) == 128


def test_worker_process_is_the_agents_worker_process(g: rdflib.Graph) -> None:
    p = worker_process(W1)
    assert {(p, RDF.type, MPN.WorkerProcess), (p, RDF.type, MPN.Process)} <= set(g)
    assert one(g, p, PROVN.actedOnBehalfOf) == URIRef(f"{RUN}/worker/{q(W1)}")
    thread = URIRef(f"{RUN}/worker/{q(W1)}/thread/{TH1}")
    assert one(g, thread, PROVN.actedOnBehalfOf) == p
    assert one(g, p, MPN.pid) == 101
    assert one(g, p, MPN.processRole) == "worker"
    assert one(g, p, MPN.darshanLog).startswith("alice_python3_id101-101_")
    assert one(g, p, MPN.clockOffset) == pytest.approx(0.0, abs=0.006)
    # its node comes from the agents step only (no second node from Darshan's host name)
    assert len(list(g.objects(p, MPN.node))) == 1
    assert one(g, worker_process(W2), MPN.pid) == 102


def test_process_level_io_is_the_process_activity_with_link_status(g: rdflib.Graph) -> None:
    p = worker_process(W1)
    act = URIRef(f"{p}/activity")
    assert (act, RDF.type, MPN.ProcessActivity) in g
    assert one(g, act, PROVN.wasAssociatedWith) == p
    usages = qualified(g, act)
    assert set(usages) == {(LIB, "process"), (IN, "ambiguous"), (IN, "unlinked")}
    assert one(g, usages[(IN, "ambiguous")], MPN.bytesRead) == 10
    assert one(g, usages[(IN, "unlinked")], MPN.bytesRead) == 1
    assert str(usages[(IN, "ambiguous")]).endswith("/read-ambiguous/" + q(IN))
    # one prov:used per file, whatever the statuses
    assert set(g.objects(act, PROVN.used)) == {file_iri(LIB, "node-a"), file_iri(IN)}
    assert one(g, act, MPN.readCount) == 3 and one(g, act, MPN.writeCount) == 1
    assert one(g, act, PROVN.startedAtTime) == pd.Timestamp(T0, unit="s", tz="UTC")


def test_other_processes_are_agents_on_their_node(g: rdflib.Graph) -> None:
    procs = {str(one(g, p, MPN.processRole)): p for p in g.subjects(RDF.type, MPN.Process)}
    roles = sorted(str(one(g, p, MPN.processRole)) for p in g.subjects(RDF.type, MPN.Process))
    assert roles == ["nanny", "other", "worker", "worker"]
    nanny = procs["nanny"]
    assert str(nanny).startswith(f"{RUN}/process/alice_python3_id100-100_")
    assert (nanny, RDF.type, MPN.WorkerProcess) not in g
    assert one(g, nanny, MPN.pid) == 100
    # "node-d" is the node listed as node-d.cluster.org; "node-e" is new and described once
    assert one(g, nanny, MPN.node) == URIRef(f"{RUN}/node/node-d.cluster.org")
    node_e = one(g, procs["other"], MPN.node)
    assert node_e == URIRef(f"{RUN}/node/node-e")
    assert (node_e, RDF.type, MPN.Node) in g and one(g, node_e, MPN.hostname) == "node-e"
    usages = qualified(g, URIRef(f"{nanny}/activity"))
    assert set(usages) == {("/etc/dask.yaml", "process")}


def _pid(log: str) -> int:
    return int(log.split("_id")[1].split("-")[0])


def test_process_counters_are_totals_over_its_files(tmp_logs: Path, g: rdflib.Graph) -> None:
    counters = io_records(tmp_logs).darshan.counters
    got = {}
    for p in g.subjects(RDF.type, MPN.Process):
        assert not list(g.objects(p, MPN.darshanRecord)), "per-file records need segment detail"
        for c in g.objects(p, MPN.counter):
            got[(one(g, p, MPN.pid), str(one(g, c, MPN.counterName)))] = one(g, c, MPN.counterValue)
    w1 = counters[counters["log"].map(_pid) == 101].set_index(["path", "counter"])["value"]
    assert got[(101, "POSIX_BYTES_READ")] == 169 + 4096 == w1.xs("POSIX_BYTES_READ", level=1).sum()
    assert got[(101, "POSIX_BYTES_WRITTEN")] == 138
    assert got[(101, "POSIX_OPENS")] == 3  # one per file
    starts = w1.xs("POSIX_F_OPEN_START_TIMESTAMP", level=1)
    ends = w1.xs("POSIX_F_CLOSE_END_TIMESTAMP", level=1)
    assert got[(101, "POSIX_F_OPEN_START_TIMESTAMP")] == starts.min() < starts.max()
    assert got[(101, "POSIX_F_CLOSE_END_TIMESTAMP")] == ends.max() > ends.min()
    assert got[(100, "POSIX_BYTES_READ")] == 300
    # every process with counters has them, and nothing else
    assert {pid for pid, _ in got} == {_pid(str(x)) for x in counters["log"].unique()}


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("POSIX_BYTES_READ", "sum"),
        ("POSIX_F_META_TIME", "sum"),
        ("POSIX_SIZE_READ_0_100", "sum"),
        ("STDIO_F_OPEN_START_TIMESTAMP", "min"),
        ("POSIX_F_CLOSE_END_TIMESTAMP", "max"),
        ("POSIX_MEM_ALIGNMENT", "skip"),
        ("POSIX_MAX_BYTE_READ", "skip"),
        ("POSIX_F_MAX_READ_TIME", "skip"),
        ("POSIX_ACCESS1_COUNT", "skip"),
        ("MPIIO_MODE", "skip"),
        ("POSIX_FASTEST_RANK_BYTES", "skip"),
    ],
)
def test_counter_totals_rule(name: str, rule: str) -> None:
    from metaprov.mapping.fileio import _counter_rule

    assert _counter_rule(name) == rule


def test_segment_detail_adds_per_file_counter_records(tmp_logs: Path) -> None:
    counters = io_records(tmp_logs).darshan.counters
    want = {
        (_pid(str(r.log)), str(r.path), str(r.counter)): float(r.value)
        for r in counters.itertuples()
    }
    g = graph_of(io_records(tmp_logs), io_detail="segments")
    got = {}
    for p in g.subjects(RDF.type, MPN.Process):
        pid = int(one(g, p, MPN.pid))
        for r in g.objects(p, MPN.darshanRecord):
            assert one(g, r, MPN.module) == "POSIX" and one(g, r, MPN.rank) == 0
            path = str(one(g, one(g, r, MPN.file), MPN.path))
            for c in g.objects(r, MPN.counter):
                got[(pid, path, str(one(g, c, MPN.counterName)))] = one(g, c, MPN.counterValue)
    assert got == want
    assert got[(101, IN, "POSIX_BYTES_READ")] == 169  # 100 + 50 + 10 + 8 + 1
    assert got[(101, IN, "POSIX_READS")] == 5


def test_segment_detail_adds_every_call_summed_by_its_aggregate(tmp_logs: Path) -> None:
    rec = io_records(tmp_logs)
    g = graph_of(rec, io_detail="segments")
    segs = set(g.subjects(RDF.type, MPN.IOSegment))
    assert len(segs) == len(rec.darshan.segments) == 13
    per_agg: dict[URIRef, int] = {}
    for s in segs:
        agg = one(g, s, MPN.aggregatedBy)
        per_agg[agg] = per_agg.get(agg, 0) + 1
        assert one(g, s, PROVN.startedAtTime) <= one(g, s, PROVN.endedAtTime)
        assert one(g, s, MPN.operation) in ("read", "write")
    for agg, n in per_agg.items():
        count = list(g.objects(agg, MPN.readCount)) + list(g.objects(agg, MPN.writeCount))
        assert [c.toPython() for c in count] == [n]
    b_usage = qualified(g, execution(KEY_B))[(IN, "linked")]
    a_segs = sorted(
        (one(g, s, MPN.offset), one(g, s, MPN.length), one(g, s, MPN.callingThread))
        for s in segs
        if one(g, s, MPN.aggregatedBy) == b_usage
    )
    assert a_segs == [(0, 100, TH1), (100, 50, TH1)]
    rules = {str(one(g, s, MPN.linkRule)) for s in segs}
    assert {"worker-window", "thread-ran-no-task", "several-windows", "no-thread-id"} <= rules
    # the aggregate-only export has the same aggregates and no segment
    g0 = graph_of(io_records(tmp_logs))
    assert not set(g0.subjects(RDF.type, MPN.IOSegment))
    assert set(g0.subjects(RDF.type, MPN.IOUsage)) == set(g.subjects(RDF.type, MPN.IOUsage))


def test_output_does_not_depend_on_log_row_order(tmp_logs: Path) -> None:
    rec = io_records(tmp_logs)
    ref = ntriples(rec, io_detail="segments")
    assert len(ref.splitlines()) == len(set(ref.splitlines())), "duplicate triples"
    shuffled = io_records(tmp_logs)
    rng = np.random.default_rng(3)
    dr = shuffled.darshan
    dr.segments = dr.segments.iloc[rng.permutation(len(dr.segments))].reset_index(drop=True)
    dr.counters = dr.counters.iloc[rng.permutation(len(dr.counters))].reset_index(drop=True)
    dr.logs = dr.logs.iloc[::-1].reset_index(drop=True)
    assert ntriples(shuffled, io_detail="segments") == ref


def test_to_prov_links_the_io_itself(tmp_logs: Path) -> None:
    rec = io_records(tmp_logs)
    assert rec.io is None
    to_prov(rec)
    assert rec.io is not None and rec.io.accounting["by_status"]["linked"] == 7


def test_without_darshan_nothing_changes() -> None:
    plain = ntriples(tiny_records())
    g = rdflib.Graph().parse(data=plain, format="nt")
    for cls in ("File", "Process", "IOUsage", "IOActivity", "DarshanRecord"):
        assert not set(g.subjects(RDF.type, MPN[cls])), cls
    rec = tiny_records()
    link_io(rec)  # no logs: an empty link table
    assert ntriples(rec) == plain


@pytest.mark.parametrize("engine", ["shacl", "sparql", "columnar"])
@pytest.mark.parametrize("io_detail", ["aggregate", "segments"])
def test_io_exports_validate(tmp_logs: Path, engine: str, io_detail: str) -> None:
    report = validate(to_prov(io_records(tmp_logs), io_detail=io_detail), engine=engine)
    assert report.conforms, report.text()


@pytest.mark.parametrize("engine", ["shacl", "sparql", "columnar"])
@pytest.mark.parametrize(
    ("drop", "message"),
    [
        (MP.path, "a file has exactly one mp:path"),
        (MP.readCount, "an I/O usage counts at least one read"),
        (PROV.activity, "an I/O generation names exactly one I/O activity"),
        (MP.counterValue, "a Darshan counter has exactly one name and one value"),
        (PROV.qualifiedUsage, "an I/O usage qualifies the usage of exactly one activity"),
    ],
)
def test_broken_io_exports_are_caught(
    tmp_logs: Path, tmp_path: Path, engine: str, drop: str, message: str
) -> None:
    lines = ntriples(io_records(tmp_logs)).splitlines(keepends=True)
    broken = b"".join(line for line in lines if f"<{drop}>".encode() not in line)
    assert len(broken) < sum(len(x) for x in lines)
    path = tmp_path / "broken.nt"
    path.write_bytes(broken)
    report = validate(path, engine=engine)
    assert not report.conforms
    assert any(message in v.message for v in report.violations), report.text()


def test_jsonld_keeps_every_io_property_compact(tmp_logs: Path) -> None:
    buf = io.BytesIO()
    write(to_prov(io_records(tmp_logs), io_detail="segments"), buf, "json-ld")
    keys = {k for node in json.loads(buf.getvalue())["@graph"] for k in node}
    assert not [k for k in keys if "://" in k]
    assert {"bytesRead", "qualifiedUsage", "counterValue", "aggregatedBy"} <= keys


def test_counter_values_are_doubles(g: rdflib.Graph) -> None:
    values = list(g.objects(None, MPN.counterValue))
    assert values and {v.datatype for v in values} == {URIRef(XSD.double)}


def test_unknown_io_detail_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="I/O detail"):
        to_prov(tiny_records(), io_detail="calls")


def test_prefix_io_summary_sums_the_usages_and_generations_of_its_executions(
    g: rdflib.Graph,
) -> None:
    # The per-prefix I/O figures equal the qualified usages/generations of the task executions
    # whose plan is that prefix (process-level I/O is nobody's prefix).
    sums = g.query(
        (
            f"""PREFIX mp: <{MP}> PREFIX prov: <{PROV}>
            SELECT ?plan (COUNT(?u) AS ?n) (SUM(?b) AS ?bytes) (SUM(?c) AS ?ops) WHERE {{
                 ?e a mp:TaskExecution ; prov:qualifiedAssociation/prov:hadPlan ?plan .
                 {{ ?e prov:qualifiedUsage ?u . ?u a mp:IOUsage ; mp:bytesRead ?b ; mp:readCount ?c .
                   BIND ("read" AS ?op) }}
                 UNION
                 {{ ?u prov:activity ?e ; a mp:IOGeneration ; mp:bytesWritten ?b ;
                      mp:writeCount ?c . BIND ("write" AS ?op) }}
               }} GROUP BY ?plan ?op"""
        ).replace("SELECT ?plan", "SELECT ?plan ?op")
    )
    got: dict = {}
    for plan, op, n, nbytes, ops in sums:
        got[(plan, str(op))] = (int(n), int(nbytes), int(ops))
    assert got, "the tiny run's tasks read and write files"
    for plan in g.subjects(RDF.type, MP.TaskPrefix):
        reads = got.get((plan, "read"), (0, 0, 0))
        writes = got.get((plan, "write"), (0, 0, 0))
        if reads == writes == (0, 0, 0):
            assert g.value(plan, MP.fileReadCount) is None
            continue
        assert (
            int(g.value(plan, MP.fileReadCount)),
            int(g.value(plan, MP.bytesRead)),
            int(g.value(plan, MP.readCount)),
        ) == reads
        assert (
            int(g.value(plan, MP.fileWriteCount)),
            int(g.value(plan, MP.bytesWritten)),
            int(g.value(plan, MP.writeCount)),
        ) == writes


def test_a_node_local_path_on_two_hosts_is_two_files_and_streams_are_per_process(
    tmp_path: Path,
) -> None:
    # two nannies on two hosts: each writes /tmp/x (node-local), its <STDERR>, and reads a file
    # on the Lustre mount /data (one file for both)
    calls = [
        ("/tmp/x", "write", 0, 10, 0.1, 0.11, None),
        ("<STDERR>", "write", 0, 5, 0.2, 0.21, None),
        (IN, "read", 0, 7, 0.3, 0.31, None),
    ]
    logs = tmp_path / "logs"
    logs.mkdir()
    names = {}
    for pid, host in ((201, "node-a"), (202, "node-b")):
        names[host] = log_file_name("alice", "python3", pid, pid, T0)
        write_darshan_log(
            logs / names[host],
            _calls(calls),
            start=T0,
            cmdline=NANNY_CMD,
            hostname=host,
            layout=32,
            jobid=pid,
            mounts=MOUNTS,
        )
    rec = tiny_records()
    rec.darshan = read_darshan_logs(logs, rec.accounting)
    g = graph_of(rec)
    files = {f: str(one(g, f, MPN.path)) for f in g.subjects(RDF.type, MPN.File)}
    procs = {h: URIRef(f"{RUN}/process/{q(n)}") for h, n in names.items()}
    assert sorted(files.values()) == sorted(["/tmp/x", "/tmp/x", "<STDERR>", "<STDERR>", IN])
    assert {file_iri("/tmp/x", "node-a"), file_iri("/tmp/x", "node-b"), file_iri(IN)} <= set(files)
    for host, p in procs.items():
        stderr = URIRef(f"{p}/file/{q('<STDERR>')}")
        assert one(g, stderr, MPN.fileScope) == "process" and one(g, stderr, MPN.process) == p
        tmp_x = file_iri("/tmp/x", host)
        assert one(g, tmp_x, PROVN.atLocation) == URIRef(f"{RUN}/node/{host}")
        # each process's version 1 of its own /tmp/x: no revision across hosts
        v1 = URIRef(f"{tmp_x}/version/1")
        assert one(g, v1, PROVN.wasGeneratedBy) == URIRef(f"{p}/activity")
        assert not list(g.objects(v1, PROVN.wasRevisionOf))
    # both read the one shared file
    readers = set(g.subjects(PROVN.used, file_iri(IN)))
    assert readers == {URIRef(f"{p}/activity") for p in procs.values()}
    assert validate(to_prov(rec), engine="sparql").conforms
