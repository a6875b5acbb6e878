"""All real runs in one embedded store: one named graph each, idempotent reloads, and every
packaged question answered, with PMDA R1's answers checked against its records and files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pytest
from conftest import IMAGEPROC_RUNS, PMDA_RUNS, REAL_RUNS

import metaprov
from metaprov.analysis.critical_path import critical_path
from metaprov.queries import questions, run_question
from metaprov.store import Store, load, open_store

pytestmark = pytest.mark.realdata

LIST_TASK = "list-8606d556-c6f4-465b-933b-4f2338e69364"  # R1: gathers 4 _dask_helper results
HELPER_TASK = "_dask_helper-191790f6-67cc-4318-98c5-df523aa88fa2"  # R1: one of those 4


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    if not REAL_RUNS:
        pytest.skip("real run data not found (set METAPROV_SHARED to the shared/ folder)")
    path = tmp_path_factory.mktemp("store") / "prov-store"
    reports = load(REAL_RUNS, store=path)
    return path, reports


@pytest.fixture(scope="module")
def store(loaded: tuple[Path, list]) -> Store:
    with open_store(loaded[0], read_only=True) as st:
        yield st


@pytest.fixture(scope="module")
def r1() -> metaprov.RunRecords:
    records = metaprov.read_run(PMDA_RUNS[0])
    metaprov.link_io(records)
    return records


def ask(store: Store, name: str, **params: object) -> pd.DataFrame:
    df = run_question(store, name, {k: str(v) for k, v in params.items()})
    assert isinstance(df, pd.DataFrame)
    return df


def test_each_run_is_its_own_named_graph(loaded: tuple[Path, list], store: Store) -> None:
    _, reports = loaded
    graphs = [r.graph for r in reports]
    assert len(set(graphs)) == len(REAL_RUNS) == len(reports)
    assert store.graphs() == sorted(graphs)
    assert sum(r.triples for r in reports) == store.count()
    runs = ask(store, "runs")
    assert sorted(runs["graph"]) == sorted(graphs)
    assert sorted(runs["run_name"]) == sorted(p.name for p in REAL_RUNS)


def test_reloading_replaces_and_never_duplicates(tmp_path: Path) -> None:
    if not REAL_RUNS:
        pytest.skip("real run data not found (set METAPROV_SHARED to the shared/ folder)")
    run = PMDA_RUNS[1] if len(PMDA_RUNS) > 1 else REAL_RUNS[0]
    path = tmp_path / "s"
    (first,) = load([run], store=path)
    other = load([REAL_RUNS[0]], store=path)
    with open_store(path) as st:
        total = st.count()
        # Same files, same options: recognised, nothing rewritten.
        again = st.load_run(run)
        assert again.unchanged and again.graph == first.graph and st.count() == total
        # Forced: the graph is dropped and loaded again; the totals do not move.
        forced = st.load_run(run, force=True)
        assert forced.replaced and not forced.unchanged and forced.triples == first.triples
        assert st.count() == total and st.count(first.graph) == first.triples
        assert st.graphs() == sorted({first.graph, other[0].graph})


def test_every_packaged_question_answers(store: Store) -> None:
    for q in questions():
        key = HELPER_TASK if q.name == "downstream" else LIST_TASK
        params = {"key": key} if q.param("key") and q.param("key").required else {}
        if q.name == "critical-path":
            params = {"run": PMDA_RUNS[0].name}
        df = run_question(store, q.name, params)
        assert isinstance(df, pd.DataFrame), q.name
        if q.name == "failures":
            # Mofka-schema runs record no exceptions (the capture's worker_result.csv does):
            # the question answers, with nothing to group.
            assert len(df) == 0, "failures found exceptions the real runs do not record"
            continue
        if q.name == "worker-time":
            # Mofka-schema runs have no fine performance metrics: no rows, and a note per run
            # saying so (not recorded, not 0)
            assert len(df) == 0 and df.attrs.get("notes"), "worker-time on Mofka runs"
            continue
        io_question = q.name in ("file-access", "io-per-prefix")
        if not io_question or _has_io(store):
            assert len(df) > 0, f"{q.name} gave no answer on the real runs"


def _has_io(store: Store) -> bool:
    # The real runs have Darshan logs and the export maps them (metaprov/mapping/fileio.py):
    # the I/O answers are always checked; an export without I/O is a failure, not a skip.
    assert store.query(
        "PREFIX mp: <https://w3id.org/metaprov/ns#> ASK { GRAPH ?g { ?u a mp:IOUsage } }"
    ), "the exports hold no Darshan I/O (mp:IOUsage)"
    return True


# --- PMDA R1, answer by answer ------------------------------------------------------------------


def test_r1_runs_row(store: Store, r1: metaprov.RunRecords) -> None:
    row = ask(store, "runs", run_id=r1.run_id).iloc[0]
    assert (row["tasks"], row["executions"], row["workers"], row["transfers"]) == (9, 9, 8, 6)
    assert row["run_name"] == "D2024-04-19_19:01:00_R1_W8"
    assert row["job_id"].startswith("1873179.")
    first, last = r1.span
    assert row["start"] == first and row["end"] == last


def test_r1_utilisation(store: Store, r1: metaprov.RunRecords) -> None:
    workers = ask(store, "worker-utilisation", run_id=r1.run_id)
    assert len(workers) == 8 and workers["executions"].sum() == 9
    busy = (r1.executions["end"] - r1.executions["start"]).dt.total_seconds()
    assert workers["busy"].sum() == pytest.approx(busy.sum(), abs=1e-5)
    assert set(workers["threads"]) == {8}
    threads = ask(store, "thread-utilisation", run_id=r1.run_id)
    expected = r1.threads.set_index(r1.threads["thread"].astype("int64"))["n_tasks"]
    got = threads.set_index(threads["thread"].astype("int64"))["executions"]
    assert got.sort_index().tolist() == expected.sort_index().tolist()
    one = ask(store, "thread-utilisation", run_id=r1.run_id, worker=threads["worker"].iloc[0])
    assert set(one["worker"]) == {threads["worker"].iloc[0]}


def test_r1_slowest_and_prefixes(store: Store, r1: metaprov.RunRecords) -> None:
    slow = ask(store, "slowest-tasks", run_id=r1.run_id, limit=3)
    top = r1.tasks.sort_values("duration", ascending=False).iloc[0]
    assert len(slow) == 3 and slow["key"].iloc[0] == top["key"]
    assert slow["duration"].iloc[0] == pytest.approx(top["duration"], abs=1e-6)
    assert slow["worker"].iloc[0] == top["worker"] and int(slow["thread"].iloc[0]) == int(
        top["thread"]
    )
    only_list = ask(store, "slowest-tasks", run_id=r1.run_id, prefix="list")
    assert len(only_list) == 3 and set(only_list["prefix"]) == {"list"}
    summary = ask(store, "prefix-summary", run_id=r1.run_id).set_index("prefix")
    assert summary.loc["dask_helper", "executions"] == 6 and summary.loc["list", "executions"] == 3
    assert summary.loc["dask_helper", "slowest_key"] == top["key"]


def test_r1_lineage_and_downstream(store: Store, r1: metaprov.RunRecords) -> None:
    lin = ask(store, "lineage", key=LIST_TASK, run_id=r1.run_id)
    tasks = lin[lin["kind"] == "task"]
    deps = set(r1.dependencies.loc[r1.dependencies["key"] == LIST_TASK, "dependency"])
    assert set(tasks.loc[tasks["relation"] == "upstream", "item"]) == deps and len(deps) == 4
    assert list(tasks.loc[tasks["relation"] == "self", "item"]) == [LIST_TASK]
    if _has_io(store):
        files = lin[lin["kind"] == "file"]
        # each of the 4 upstream helpers read the same 2 input files
        assert set(files["via"]) == deps and len(files) == 8
        assert {Path(p).name for p in files["item"]} == {
            "NhaA_non_water.gro",
            ".NhaA_non_water.xtc_offsets.npz",
        }
    # Every task row says where, when and how long it ran and how big its result is, as the
    # records do (no column left empty by aggregating over rows without those values).
    truth = r1.tasks.set_index("key")
    for answer in (tasks, ask(store, "downstream", key=HELPER_TASK, run_id=r1.run_id)):
        for _, row in answer[answer["kind"] == "task"].iterrows():
            want = truth.loc[row["item"]]
            assert row["prefix"] == want["prefix"] and row["worker"] == want["worker"]
            assert int(row["thread"]) == int(want["thread"]) and row["start"] == want["start"]
            assert row["duration"] == pytest.approx(want["duration"], abs=1e-6)
            assert int(row["bytes"]) == int(want["nbytes"])
    down = ask(store, "downstream", key=HELPER_TASK, run_id=r1.run_id)
    assert list(down["item"]) == [LIST_TASK]


def test_r1_transfers(store: Store, r1: metaprov.RunRecords) -> None:
    matrix = ask(store, "transfer-matrix", run_id=r1.run_id)
    assert matrix["transfers"].sum() == 6
    per_transfer = r1.transfers.drop_duplicates("transfer")
    assert matrix["bytes"].sum() == per_transfer["total"].sum()
    assert matrix["keys"].sum() == per_transfer["n_keys"].sum()
    assert matrix["seconds"].sum() == pytest.approx(per_transfer["duration"].sum())
    to_client = matrix[matrix["destination"].str.startswith("Client-")]
    assert to_client["transfers"].sum() == 3
    # Only the list task waited for data (3 helper results moved to its worker, each before it
    # started: the execution mp:usedReplica each copy); the other transfers went to the client.
    tvc = ask(store, "transfer-vs-compute", run_id=r1.run_id)
    assert list(tvc["key"]) == [LIST_TASK] and tvc["transfers"].iloc[0] == 3
    assert tvc["transfer_bytes"].iloc[0] == 3 * 50208
    assert 0.9 < tvc["transfer_share"].iloc[0] < 1.0
    # Every PMDA run has the same shape; ImageProcessing recorded no execution.
    every = ask(store, "transfer-vs-compute")
    assert len(every) == len(PMDA_RUNS) and set(every["transfers"]) == {3}
    assert every["key"].str.startswith("list-").all()


def test_r1_files_read_by_each_task(store: Store, r1: metaprov.RunRecords) -> None:
    if not _has_io(store):
        pytest.skip("the exports hold no Darshan I/O (mp:IOUsage): the I/O mapping step is absent")
    files = ask(store, "file-access", run_id=r1.run_id)
    assert len(files) == 12 and set(files["operation"]) == {"read"}
    helpers = r1.tasks[r1.tasks["prefix"] == "dask_helper"].set_index("key")
    assert set(files["key"]) == set(helpers.index)
    assert files.groupby("key")["path"].nunique().eq(2).all()
    # worker and thread of each read are those of the task that read
    for row in files.itertuples():
        assert row.worker == helpers.loc[row.key, "worker"]
        assert int(row.thread) == int(helpers.loc[row.key, "thread"])
    gro = files[files["path"].str.endswith("NhaA_non_water.gro")]
    assert sorted(gro["bytes"]) == [8385186] + [12573683] * 5
    one = ask(store, "file-access", run_id=r1.run_id, key=HELPER_TASK)
    assert len(one) == 2 and set(one["key"]) == {HELPER_TASK}
    io = ask(store, "io-per-prefix", run_id=r1.run_id)
    assert (
        list(io["prefix"]) == ["dask_helper"] and io["bytes_read"].iloc[0] == files["bytes"].sum()
    )


def test_r1_configuration(store: Store, r1: metaprov.RunRecords) -> None:
    cfg = ask(store, "configuration", run_id=r1.run_id)
    files = cfg[cfg["category"] == "file"].set_index("item")
    for name in ("config.txt", "config.json"):
        digest = hashlib.sha256((PMDA_RUNS[0] / name).read_bytes()).hexdigest()
        assert files.loc[name, "sha256"] == digest
        assert files.loc[name, "bytes"] == (PMDA_RUNS[0] / name).stat().st_size
    items = dict(zip(cfg["item"], cfg["value"], strict=False))
    assert items["workers"] == "8" and items["threads per worker"] == "8"
    assert items["job id"].startswith("1873179.")


def test_r1_critical_path_matches_records(store: Store, r1: metaprov.RunRecords) -> None:
    expected = critical_path(r1)
    got = ask(store, "critical-path", run=PMDA_RUNS[0].name)
    assert (
        list(got["key"])
        == list(expected["key"])
        == [
            "_dask_helper-10af37fe-2ee2-4173-ad5b-1a37485446f0",
            "list-a7bf8a51-e4f9-47b4-9407-0c54aeecdfb1",
        ]
    )
    assert got["cumulative"].iloc[-1] == pytest.approx(12.895753, abs=1e-6)


def test_campaign_and_problems(store: Store) -> None:
    across = ask(store, "prefix-across-runs", prefix="dask_helper")
    assert len(across) == len(PMDA_RUNS) and set(across["runs"]) == {len(PMDA_RUNS)}
    assert across["deviation"].abs().max() < 0.05  # the five PMDA runs behave alike
    if IMAGEPROC_RUNS:
        ip = metaprov.read_run(IMAGEPROC_RUNS[0], darshan=False)
        problems = ask(store, "problem-tasks", run_id=ip.run_id, problem="never ran", limit=100000)
        assert len(problems) == int(ip.tasks["never_ran"].sum()) > 0
        assert set(problems["problem"]) == {"never ran"}
    r1_problems = ask(
        store, "problem-tasks", run_id=metaprov.read_run(PMDA_RUNS[0], darshan=False).run_id
    )
    assert len(r1_problems) == 0
