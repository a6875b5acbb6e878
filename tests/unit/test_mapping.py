"""Mapping: RunRecords -> PROV triples (checked by parsing the N-Triples output back with rdflib)."""

from __future__ import annotations

import io
import urllib.parse
from pathlib import Path

import pandas as pd
import pytest
import rdflib
from rdflib import RDF, Literal, URIRef
from replica_rule import expected_links, exported_links, link_frame
from tinyrun import (
    CLIENT,
    KEY_A,
    KEY_B,
    KEY_CUT,
    KEY_ERR,
    KEY_NEVER,
    KEY_SLASH,
    KEY_UNI,
    T0,
    TH2,
    W1,
    W2,
    partial_records,
    tiny_records,
    utc,
)

from metaprov.errors import UsageError
from metaprov.mapping import Block, register_step, steps, to_prov
from metaprov.mapping.terms import DEFAULT_BASE, MP, PROV, XSD
from metaprov.records import RunRecords, conform
from metaprov.synthetic import generate_run, load_truth
from metaprov.write import write

MPN = rdflib.Namespace(MP.Run[: -len("Run")])
PROVN = rdflib.Namespace(PROV.used[: -len("used")])
RUN = f"{DEFAULT_BASE}/run/tiny0001"


def q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def task(key: str) -> URIRef:
    return URIRef(f"{RUN}/task/{q(key)}")


def execution(key: str, attempt: int = 0) -> URIRef:
    return URIRef(f"{task(key)}/execution/{attempt}")


def chunk(key: str) -> URIRef:
    return URIRef(f"{task(key)}/chunk")


def worker(addr: str) -> URIRef:
    return URIRef(f"{RUN}/worker/{q(addr)}")


def graph_of(records, **kw) -> rdflib.Graph:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    write(to_prov(records, **kw), buf, "ntriples")
    return rdflib.Graph().parse(data=buf.getvalue(), format="nt")


@pytest.fixture(scope="module")
def g() -> rdflib.Graph:
    return graph_of(tiny_records())


def of_type(g: rdflib.Graph, cls: str) -> set:
    return set(g.subjects(RDF.type, URIRef(cls)))


def test_one_execution_per_row_and_one_task_per_key(g: rdflib.Graph) -> None:
    rec = tiny_records()
    assert len(of_type(g, MP.TaskExecution)) == len(rec.executions)
    assert of_type(g, MP.Task) == {task(k) for k in rec.tasks["key"]}
    assert execution(KEY_ERR, 1) in of_type(g, MP.TaskExecution)


def test_keys_round_trip_exactly_through_escaping_and_iris(g: rdflib.Graph) -> None:
    for key in (KEY_A, KEY_B, KEY_SLASH, KEY_UNI):
        assert g.value(task(key), MPN.key) == Literal(key)


def test_execution_window_duration_and_association(g: rdflib.Graph) -> None:
    e = execution(KEY_SLASH)
    assert g.value(e, PROVN.startedAtTime) == Literal(
        "2024-04-19T19:01:44.000000Z", datatype=XSD.dateTime
    )
    assert g.value(e, PROVN.endedAtTime) == Literal(
        "2024-04-19T19:01:44.250000Z", datatype=XSD.dateTime
    )
    assert float(g.value(e, MPN.duration)) == pytest.approx(0.25)
    thread = URIRef(f"{worker(W2)}/thread/{TH2}")
    assert g.value(e, PROVN.wasAssociatedWith) == thread
    assoc = g.value(e, PROVN.qualifiedAssociation)
    assert g.value(assoc, PROVN.agent) == thread
    assert g.value(assoc, PROVN.hadPlan) == URIRef(f"{RUN}/prefix/x")
    # The 64-bit thread id stays exact.
    assert g.value(thread, MPN.threadId).toPython() == TH2


def test_a_thread_with_a_64_bit_id_keeps_its_busy_time(g: rdflib.Graph) -> None:
    """The busy time of each thread is summed per (worker, thread id): an id past 2^53 (the
    tiny run's thread near 2^64) is matched exactly, never through a float."""
    thread = URIRef(f"{worker(W2)}/thread/{TH2}")
    assert TH2 > 2**53
    assert int(g.value(thread, MPN.busyExecutionCount)) == 2
    assert float(g.value(thread, MPN.busySeconds)) == pytest.approx(0.375)


def test_agent_chain_thread_process_worker_scheduler_client_user(g: rdflib.Graph) -> None:
    thread = URIRef(f"{worker(W2)}/thread/{TH2}")
    process = g.value(thread, PROVN.actedOnBehalfOf)
    assert (process, RDF.type, URIRef(MP.WorkerProcess)) in g
    assert g.value(process, PROVN.actedOnBehalfOf) == worker(W2)
    scheduler = g.value(worker(W2), PROVN.actedOnBehalfOf)
    assert (scheduler, RDF.type, URIRef(MP.Scheduler)) in g
    client = g.value(scheduler, PROVN.actedOnBehalfOf)
    assert client == URIRef(f"{RUN}/client/{CLIENT}")
    assert (g.value(client, PROVN.actedOnBehalfOf), RDF.type, URIRef(MP.User)) in g


def test_retried_task_chunk_generated_by_successful_attempt(g: rdflib.Graph) -> None:
    assert g.value(chunk(KEY_ERR), PROVN.wasGeneratedBy) == execution(KEY_ERR, 1)
    assert g.value(execution(KEY_ERR, 0), MPN.outcome) == Literal("error")
    assert (task(KEY_ERR), MPN.erred, Literal(True)) in g


def test_dependency_usage_uses_the_dependency_chunks(g: rdflib.Graph) -> None:
    used = set(g.objects(execution(KEY_SLASH), PROVN.used))
    assert used == {chunk(KEY_A), chunk(KEY_B)}  # duplicate edge in the records counted once
    assert set(g.objects(task(KEY_SLASH), MPN.dependsOn)) == {task(KEY_A), task(KEY_B)}
    # A task that never ran keeps its static dependency, has no execution and no chunk.
    assert set(g.objects(task(KEY_NEVER), MPN.dependsOn)) == {task(KEY_SLASH)}
    assert (None, MPN.task, task(KEY_NEVER)) not in g
    assert (task(KEY_NEVER), MPN.neverRan, Literal(True)) in g


def test_incomplete_execution_is_marked_and_has_no_end(g: rdflib.Graph) -> None:
    e = execution(KEY_CUT)
    assert (e, MPN.incomplete, Literal(True)) in g
    assert g.value(e, PROVN.endedAtTime) is None
    assert g.value(e, MPN.duration) is None
    # Unknown thread: associated with the worker itself.
    assert g.value(e, PROVN.wasAssociatedWith) == worker(W2)


def test_transfer_uses_source_chunks_and_generates_replicas(g: rdflib.Graph) -> None:
    t0 = URIRef(f"{RUN}/transfer/0")
    assert set(g.objects(t0, PROVN.used)) == {chunk(KEY_A), chunk(KEY_B)}
    assert g.value(t0, MPN.source) == worker(W1)
    assert g.value(t0, MPN.destination) == worker(W2)
    replicas = set(g.subjects(PROVN.wasGeneratedBy, t0))
    assert len(replicas) == 2
    for r in replicas:
        assert g.value(r, PROVN.atLocation) == URIRef(f"{RUN}/node/10.0.0.2")  # W2's host
        assert g.value(r, PROVN.specializationOf) in {chunk(KEY_A), chunk(KEY_B)}
    # A gather by the client has no worker destination: the client receives it.
    t1 = URIRef(f"{RUN}/transfer/1")
    assert g.value(t1, MPN.destination) == URIRef(f"{RUN}/client/{CLIENT}")


def test_tiny_run_execution_used_the_replicas_moved_to_its_worker(g: rdflib.Graph) -> None:
    # Transfer 0 moved a and ('b-1f', 0) to W2 by T0+3.25; 'x/y z' started there at T0+4.
    t0 = f"{RUN}/transfer/0/replica"
    want = {URIRef(f"{t0}/{q(KEY_A)}"), URIRef(f"{t0}/{q(KEY_B)}")}
    assert set(g.objects(execution(KEY_SLASH), MPN.usedReplica)) == want
    # ('b-1f', 0) ran on W1, where a was computed: no replica, only the chunk.
    assert set(g.objects(execution(KEY_B), MPN.usedReplica)) == set()
    assert set(g.objects(execution(KEY_B), PROVN.used)) == {chunk(KEY_A)}
    assert len(list(g.subject_objects(MPN.usedReplica))) == 2


W3 = "tcp://10.0.0.3:4003"
SRC, OTHER = "src", "other"


def replica_records() -> RunRecords:
    """Key ``src`` computed on W1 and moved six times; its dependents run on W2 and W3.

    Replicas of ``src``: transfers 0..3 to W2, ending at T0+10, +20, +20 (a tie) and +30;
    transfer 4 to W3 at T0+5; transfer 5 to the client at T0+1. Dependents: ``b`` (also depends
    on ``other``, computed on W2 itself) starts on W2 at T0+25 (attempt 0) and at T0+30 with an
    unknown thread (attempt 1); ``c`` on W2 at T0+5 (before any copy reached W2); ``d`` on W3 at
    T0+6; ``e`` on W2 without a start.
    """
    rec = RunRecords(path="/runs/replicas")
    keys = [SRC, OTHER, "b", "c", "d", "e"]
    rec.tasks = conform(
        "tasks",
        pd.DataFrame(
            {
                "key": keys,
                "prefix": keys,
                "group": keys,
                "state": ["memory"] * 6,
                "worker": [W1, W2, W2, W2, W3, W2],
                "nbytes": pd.array([10] * 6, dtype="Int64"),
            }
        ),
    )
    rec.executions = conform(
        "executions",
        pd.DataFrame(
            {
                "key": [SRC, OTHER, "b", "b", "c", "d", "e"],
                "attempt": pd.array([0, 0, 0, 1, 0, 0, 0], dtype="Int64"),
                "worker": [W1, W2, W2, W2, W2, W3, W2],
                "thread": pd.array([1, 2, 2, None, 2, 3, 2], dtype="UInt64"),
                "start": utc([T0, T0 + 1, T0 + 25, T0 + 30, T0 + 5, T0 + 6, None]),
                "end": utc([T0 + 0.5, T0 + 2, T0 + 26, T0 + 31, T0 + 7, T0 + 7, T0 + 8]),
                "outcome": ["memory", "memory", "error", "memory", "memory", "memory", "memory"],
                "time_source": ["worker"] * 7,
            }
        ),
    )
    dependents = ["b", "b", "c", "d", "e"]
    rec.dependencies = conform(
        "dependencies",
        pd.DataFrame(
            {
                "graph": pd.array([0] * 5, dtype="Int64"),
                "key": dependents,
                "dependency": [SRC, OTHER, SRC, SRC, SRC],
            }
        ),
    )
    ends = [10, 20, 20, 30, 5, 1]
    rec.transfers = conform(
        "transfers",
        pd.DataFrame(
            {
                "transfer": pd.array(range(6), dtype="Int64"),
                "key": [SRC] * 6,
                "nbytes": pd.array([10] * 6, dtype="Int64"),
                "source": [W1] * 6,
                "destination": [W2, W2, W2, W2, W3, None],
                "start": utc([T0 + e - 0.5 for e in ends]),
                "stop": utc([T0 + e for e in ends]),
                "duration": [0.5] * 6,
                "total": pd.array([10] * 6, dtype="Int64"),
                "n_keys": pd.array([1] * 6, dtype="Int64"),
                "logged_by": ["both"] * 6,
            }
        ),
    )
    rec.run_id = "repl0001"
    return rec


#: The links the rule gives on :func:`replica_records`.
REPLICA_LINKS = {
    # the last copy in W2 by T0+25: transfers 1 and 2 tie at +20, 2 wins; 3 came too late
    ("b", 0, 2, SRC),
    # arrived at T0+30, the very start: in time; thread unknown, the worker is known
    ("b", 1, 3, SRC),
    # the copy at W3, not the ones at W2
    ("d", 0, 4, SRC),
}


def ntriples(records: RunRecords, **kw) -> bytes:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    write(to_prov(records, **kw), buf, "ntriples")
    return buf.getvalue()


def test_execution_used_the_last_replica_at_its_worker_that_arrived_by_its_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = replica_records()
    with caplog.at_level("INFO", logger="metaprov"):
        got = exported_links(to_prov(rec))
    assert got == REPLICA_LINKS, link_frame(got)
    # c's copy came after it started, e has no start: said, not linked.
    assert "1 (execution, dependency) pairs had a replica" in caplog.text
    assert "1 one at an execution without a start" in caplog.text
    assert expected_links(rec) == REPLICA_LINKS  # the slow reference agrees on the same rule
    g = graph_of(rec)
    run = f"{DEFAULT_BASE}/run/repl0001"

    def ex(key: str) -> URIRef:
        return URIRef(f"{run}/task/{key}/execution/0")

    def ck(key: str) -> URIRef:
        return URIRef(f"{run}/task/{key}/chunk")

    # Not linked: c started before any copy reached W2, e has no start; both still use the chunk.
    for key in ("c", "e"):
        assert g.value(ex(key), MPN.usedReplica) is None
        assert set(g.objects(ex(key), PROVN.used)) == {ck(SRC)}
    # b's other dependency was computed on W2: its chunk, no replica.
    assert set(g.objects(ex("b"), PROVN.used)) == {ck(SRC), ck(OTHER)}
    assert g.value(ex("b"), MPN.usedReplica) == URIRef(f"{run}/transfer/2/replica/{SRC}")
    # The sub-property is declared, so a store with RDFS reasoning also sees prov:used.
    for e, r in g.subject_objects(MPN.usedReplica):
        assert (r, RDF.type, URIRef(MP.ChunkReplica)) in g
        assert g.value(r, PROVN.specializationOf) in set(g.objects(e, PROVN.used))


def test_used_replicas_do_not_depend_on_row_order_or_block_size() -> None:
    ref = ntriples(replica_records())
    assert b"usedReplica" in ref
    shuffled = replica_records()
    for name in ("tasks", "executions", "dependencies", "transfers"):
        df = getattr(shuffled, name)
        setattr(shuffled, name, df.sample(frac=1.0, random_state=3).reset_index(drop=True))
    assert ntriples(shuffled) == ref
    assert sorted(ntriples(replica_records(), chunk_rows=2).splitlines()) == sorted(
        ref.splitlines()
    )


def test_used_replicas_on_a_synthetic_run_follow_the_rule(tmp_path: Path) -> None:
    from metaprov.ingest import read_run

    run = generate_run(
        tmp_path / "run", 3000, seed=4, workers=4, transfer_fraction=0.3, retried_fraction=0.03
    )
    rec = read_run(run)
    got = exported_links(to_prov(rec, chunk_rows=700))
    assert got == expected_links(rec)
    assert len({(k, a) for k, a, _, _ in got}) == load_truth(run)["replica_uses"] > 0


def test_tiny_run_execution_sums_the_transfers_that_brought_its_inputs(g: rdflib.Graph) -> None:
    # 'x/y z' used two replicas, both made by transfer 0: one transfer, its seconds and bytes.
    t0 = URIRef(f"{RUN}/transfer/0")
    e = execution(KEY_SLASH)
    assert g.value(e, MPN.inputTransferCount).toPython() == 1
    assert g.value(e, MPN.inputTransferSeconds) == g.value(t0, MPN.duration)
    assert g.value(e, MPN.inputTransferBytes) == g.value(t0, MPN.totalBytes)
    # an execution that used no replica has none of the three
    for p in (MPN.inputTransferCount, MPN.inputTransferSeconds, MPN.inputTransferBytes):
        assert g.value(execution(KEY_B), p) is None


def test_input_transfer_totals_on_a_synthetic_run(tmp_path: Path) -> None:
    """Per execution: the distinct transfers behind its used replicas, summed once each."""
    from metaprov.ingest import read_run

    run = generate_run(
        tmp_path / "run", 2000, seed=6, workers=3, transfer_fraction=0.5, retried_fraction=0.02
    )
    rec = read_run(run)
    per_transfer = rec.transfers.drop_duplicates("transfer").set_index("transfer")
    want: dict[tuple[str, int], tuple[int, float, int]] = {}
    by_execution: dict[tuple[str, int], set[int]] = {}
    for key, attempt, transfer, _ in expected_links(rec):
        by_execution.setdefault((key, int(attempt)), set()).add(int(transfer))
    for ex_key, transfers in by_execution.items():
        rows = per_transfer.loc[sorted(transfers)]
        want[ex_key] = (len(transfers), float(rows["duration"].sum()), int(rows["total"].sum()))
    assert any(n > 1 for n, _, _ in want.values())  # some executions had several transfers

    graph = rdflib.Graph()
    graph.parse(data=ntriples(rec).decode(), format="nt")
    got = {}
    for e, n in graph.subject_objects(MPN.inputTransferCount):
        key = str(graph.value(graph.value(e, MPN.task), MPN.key))
        attempt = int(graph.value(e, MPN.attempt).toPython())
        seconds = float(graph.value(e, MPN.inputTransferSeconds).toPython())
        size = int(graph.value(e, MPN.inputTransferBytes).toPython())
        got[(key, attempt)] = (int(n.toPython()), seconds, size)
    assert got.keys() == want.keys()
    for k, (n, seconds, size) in want.items():
        assert got[k][0] == n and got[k][2] == size, k
        assert got[k][1] == pytest.approx(seconds, rel=1e-12), k


def test_run_job_configs_and_software(g: rdflib.Graph) -> None:
    run = URIRef(RUN)
    assert (run, RDF.type, URIRef(MP.Run)) in g
    job = g.value(run, MPN.partOfJob)
    assert job == URIRef(f"{DEFAULT_BASE}/job/123.pbs01")
    used = set(g.objects(run, PROVN.used))
    assert used == {URIRef(f"{RUN}/input/config.txt")}  # the job output is not a plan
    assert (URIRef(f"{RUN}/input/123.pbs.OU"), PROVN.wasGeneratedBy, job) in g
    assert g.value(URIRef(f"{RUN}/input/config.txt"), MPN.content) == Literal(
        'MODMEM 4\n"quoted"\\'
    )
    assert {str(o) for o in g.objects(run, MPN.software)} == {"dask 2024.4.1", "python 3.11"}
    assert g.value(run, MPN.missingInput) is None


def test_transitions_only_with_detail_transitions(g: rdflib.Graph) -> None:
    assert not of_type(g, MP.Transition)
    gt = graph_of(tiny_records(), detail="transitions")
    trans = of_type(gt, MP.Transition)
    assert len(trans) == 4
    w = URIRef(f"{RUN}/transition/worker/4")
    assert gt.value(w, MPN.execution) == execution(KEY_ERR, 0)
    assert gt.value(w, MPN.observedBy) == worker(W1)
    s = URIRef(f"{RUN}/transition/scheduler/2")
    assert gt.value(s, MPN.observedBy) == URIRef(f"{RUN}/scheduler")
    assert gt.value(s, MPN.stimulusId) == Literal("update-graph-1")


def test_partial_run_exports_what_it_holds_and_names_missing_inputs() -> None:
    rec = partial_records()
    g = graph_of(rec)
    run = next(iter(of_type(g, MP.Run)))
    assert {str(o) for o in g.objects(run, MPN.missingInput)} == set(rec.missing)
    assert len(of_type(g, MP.Transfer)) == 2
    assert len(of_type(g, MP.Task)) == len(rec.tasks)
    assert not of_type(g, MP.TaskExecution)
    # The client seen only in graph.csv is still an agent the graph is attributed to.
    tg = next(iter(of_type(g, MP.TaskGraph)))
    assert (g.value(tg, PROVN.wasAttributedTo), RDF.type, URIRef(MP.Client)) in g


def test_output_does_not_depend_on_input_row_order() -> None:
    a = tiny_records()
    b = tiny_records()
    for name in (
        "tasks",
        "executions",
        "dependencies",
        "transfers",
        "transitions",
        "workers",
        "threads",
    ):
        df = getattr(b, name)
        setattr(b, name, df.iloc[::-1].reset_index(drop=True))
    out = []
    for rec in (a, b):
        buf = io.BytesIO()
        write(to_prov(rec, detail="transitions"), buf, "ntriples")
        out.append(buf.getvalue())
    assert out[0] == out[1]


def test_small_chunk_rows_give_the_same_triples() -> None:
    whole = io.BytesIO()
    write(to_prov(tiny_records()), whole, "ntriples")
    parts = io.BytesIO()
    write(to_prov(tiny_records(), chunk_rows=2), parts, "ntriples")
    assert sorted(whole.getvalue().splitlines()) == sorted(parts.getvalue().splitlines())


def test_base_iri_is_configurable_and_checked() -> None:
    graph = to_prov(tiny_records(), base="https://example.org/prov/")
    assert graph.run_iri == "https://example.org/prov/run/tiny0001"
    assert graph.graph_iri == graph.run_iri + "/graph"
    with pytest.raises(UsageError):
        to_prov(tiny_records(), base="not an iri")
    with pytest.raises(UsageError):
        to_prov(tiny_records(), base="https://example.org/a b")
    with pytest.raises(UsageError):
        to_prov(tiny_records(), detail="everything")


def test_run_id_derived_when_records_have_none() -> None:
    ids = []
    for path in ("/one/place", "/another/place"):
        rec = tiny_records(path)
        rec.run_id = ""
        ids.append(to_prov(rec).run_id)
    assert len(ids[0]) == 16
    assert ids[0] == ids[1]


def test_registered_step_adds_blocks_after_a_named_step() -> None:
    def add_extra(ctx):  # type: ignore[no-untyped-def]
        import pyarrow as pa

        blk = Block(pa.array([ctx.iris.run + "/extra"], pa.large_string()))
        blk.add(str(RDF.type), MP.File)
        blk.add(MP.path, pa.array(["/data/x.h5"], pa.large_string()), "str")
        yield blk

    register_step("test-extra", add_extra, after="tasks")
    try:
        assert steps().index("test-extra") == steps().index("tasks") + 1
        g = graph_of(tiny_records())
        assert g.value(URIRef(RUN + "/extra"), MPN.path) == Literal("/data/x.h5")
    finally:
        from metaprov import mapping

        mapping._STEPS[:] = [e for e in mapping._STEPS if e.name != "test-extra"]
    with pytest.raises(ValueError):
        register_step("x", add_extra, after="no-such-step")


def test_count_triples_matches_written(g: rdflib.Graph) -> None:
    assert to_prov(tiny_records()).count_triples() == len(g)


def test_lone_surrogates_in_keys_still_give_valid_utf8() -> None:
    import pandas as pd

    from metaprov.records import conform

    rec = tiny_records()
    extra = conform("tasks", pd.DataFrame({"key": ["placeholder"], "group": ["g"], "state": ["x"]}))
    tasks = pd.concat([rec.tasks, extra], ignore_index=True)
    # Arrow-backed str columns cannot even hold a lone surrogate; object columns can.
    tasks["key"] = tasks["key"].astype(object)
    tasks["state"] = tasks["state"].astype(object)
    tasks.loc[len(tasks) - 1, ["key", "state"]] = ["bad\udcffkey", "x\udcff"]
    rec.tasks = tasks
    buf = io.BytesIO()
    write(to_prov(rec), buf, "ntriples")
    text = buf.getvalue().decode("utf-8")  # strict: raises on invalid UTF-8
    assert '"bad\ufffdkey"' in text
    assert q("bad\ufffdkey") in text
    assert '"x\ufffd"' in text


def test_worker_transitions_link_to_the_attempt_running_then() -> None:
    import pandas as pd
    from tinyrun import T0, utc

    from metaprov.records import conform

    rec = tiny_records()
    extra = conform(
        "transitions",
        pd.DataFrame(
            {
                "key": [KEY_ERR, KEY_ERR, KEY_ERR],
                "observer": ["worker"] * 3,
                "address": [W1] * 3,
                "from_state": ["released", "ready", "executing"],
                "to_state": ["waiting", "executing", "memory"],
                "time": utc([T0 + 0.5, T0 + 3.0, T0 + 3.5]),
                "line": pd.array([10, 11, 12], dtype="Int64"),
            }
        ),
    )
    rec.transitions = pd.concat([rec.transitions, extra], ignore_index=True)
    g = graph_of(rec, detail="transitions")
    link = {
        line: g.value(URIRef(f"{RUN}/transition/worker/{line}"), MPN.execution)
        for line in (4, 10, 11, 12)
    }
    assert link == {
        4: execution(KEY_ERR, 0),  # executing -> error, during attempt 0
        10: execution(KEY_ERR, 0),  # before any start: the first attempt
        11: execution(KEY_ERR, 1),
        12: execution(KEY_ERR, 1),  # nearer attempt 1's start than its end, still attempt 1
    }


def test_key_lookup_agrees_with_index_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hash-sorted key lookup: exact (texts compared), nulls and absent keys -1, and the
    index_in fallback when two values share a hash."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from metaprov.mapping import tables as tasks_mod
    from metaprov.mapping.tables import KeyLookup

    values = pa.array(
        ["a", "b", "('x', 1)", "ü/ß", "", "key with space", *[f"k{i}" for i in range(500)]],
        pa.large_string(),
    )
    queries = pa.array(
        ["b", None, "zz", "", "ü/ß", "k499", "k500", "('x', 1)", "a", "k7", "k7"], pa.large_string()
    )
    want = np.asarray(pc.fill_null(pc.index_in(queries, value_set=values), -1), np.int64)
    lookup = KeyLookup(values)
    assert lookup.exact
    assert lookup.rows(queries).tolist() == want.tolist()
    order = np.random.default_rng(0).permutation(len(values))
    moved = lookup.permuted(order)
    assert moved.values.equals(values.take(pa.array(order)))
    assert (
        moved.rows(queries).tolist()
        == np.asarray(pc.fill_null(pc.index_in(queries, value_set=moved.values), -1)).tolist()
    )
    assert lookup.rows(pa.array([], pa.large_string())).tolist() == []
    assert KeyLookup(pa.array([], pa.large_string())).rows(queries).tolist() == [-1] * len(queries)
    # Every value hashing alike: candidates are checked (no false hits), then index_in is used.
    monkeypatch.setattr(tasks_mod, "_hash64", lambda v: np.zeros(len(v), np.uint64))
    same = KeyLookup(values)
    assert not same.exact
    assert same.rows(queries).tolist() == want.tolist()
    one = KeyLookup(values.slice(0, 1))
    assert one.rows(queries).tolist() == [-1, -1, -1, -1, -1, -1, -1, -1, 0, -1, -1]


def test_blocks_ahead_gives_the_same_blocks_and_stops_early() -> None:
    graph = to_prov(tiny_records(), detail="transitions")
    plain = [(b.subjects.to_pylist(), [c.predicate for c in b.columns]) for b in graph.blocks()]
    ahead = [
        (b.subjects.to_pylist(), [c.predicate for c in b.columns]) for b in graph.blocks(ahead=2)
    ]
    assert ahead == plain
    it = graph.blocks(ahead=1)
    next(it)
    it.close()  # the producer thread stops (joined in close)


def test_blocks_ahead_raises_the_mappings_error() -> None:
    from metaprov.mapping import _ahead

    def failing():  # type: ignore[no-untyped-def]
        yield 1
        raise RuntimeError("mapping failed")

    it = _ahead(failing(), 1)
    assert next(it) == 1
    with pytest.raises(RuntimeError, match="mapping failed"):
        next(it)


def test_prefix_summary_equals_the_executions_it_summarises(g: rdflib.Graph) -> None:
    # Every prefix's mp:executionCount/totalDuration/min/max/mean and slowest execution equal
    # what the exported executions themselves say (via mp:duration and the association's plan).
    rows = g.query(
        """PREFIX mp: <https://w3id.org/metaprov/ns#> PREFIX prov: <http://www.w3.org/ns/prov#>
        SELECT ?plan ?e ?d WHERE { ?e a mp:TaskExecution ; mp:duration ?d ;
                                      prov:qualifiedAssociation/prov:hadPlan ?plan }"""
    )
    per_plan: dict = {}
    for plan, e, d in rows:
        per_plan.setdefault(plan, []).append((float(d), str(e)))
    assert per_plan, "the tiny run has executions with a duration"
    for plan in g.subjects(RDF.type, MP.TaskPrefix):
        runs = per_plan.get(plan, [])
        assert int(g.value(plan, MP.executionCount)) == len(runs)
        if not runs:
            assert g.value(plan, MP.totalDuration) is None
            assert g.value(plan, MP.slowestExecution) is None
            continue
        durations = [d for d, _ in runs]
        assert float(g.value(plan, MP.totalDuration)) == pytest.approx(sum(durations), abs=1e-9)
        assert float(g.value(plan, MP.minDuration)) == min(durations)
        assert float(g.value(plan, MP.maxDuration)) == max(durations)
        assert float(g.value(plan, MP.meanDuration)) == pytest.approx(
            sum(durations) / len(durations)
        )
        slowest = g.value(plan, MP.slowestExecution)
        assert (max(durations), str(slowest)) in runs
