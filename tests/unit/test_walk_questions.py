"""Questions on a synthetic run: those that walk the dependency DAG step by step
(``#%% repeat``: lineage and downstream) and the problem tasks.

Ground truth for the walks is the DAG of the export itself (every ``mp:dependsOn`` edge read back
with one query, then networkx), on a synthetic run deep enough for walks of many levels; for
the problems, the records the export was made from.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pyoxigraph as ox
import pytest

from metaprov.errors import QueryError
from metaprov.ingest import read_run
from metaprov.mapping import to_prov
from metaprov.queries import check_question, parse_header, run_question, split_steps
from metaprov.records import RunRecords
from metaprov.store import EmbeddedStore
from metaprov.synthetic import generate_run

MP = "https://w3id.org/metaprov/ns#"


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> RunRecords:
    run = generate_run(
        tmp_path_factory.mktemp("walk") / "run",
        3000,
        seed=11,
        erred_fraction=0.01,
        retried_fraction=0.01,
    )
    return read_run(run, darshan=False)


@pytest.fixture(scope="module")
def loaded(records: RunRecords) -> tuple[EmbeddedStore, nx.DiGraph]:
    store = EmbeddedStore(None)
    store.load_graph(to_prov(records))
    edges = store.query(
        f"PREFIX mp: <{MP}> SELECT ?a ?b WHERE {{ GRAPH ?g {{ ?t mp:dependsOn ?d . "
        "?t mp:key ?a . ?d mp:key ?b } }"
    )
    dag = nx.DiGraph()
    dag.add_edges_from(zip(edges["b"], edges["a"], strict=True))  # dependency -> dependent
    return store, dag


def _deepest(dag: nx.DiGraph, direction: str) -> str:
    reach = nx.descendants if direction == "down" else nx.ancestors
    return max(sorted(dag.nodes), key=lambda k: len(reach(dag, k)))


def test_downstream_is_every_descendant_then_the_nearest_first(loaded) -> None:
    store, dag = loaded
    key = _deepest(dag, "down")
    below = nx.descendants(dag, key)
    assert len(below) > 50  # a walk of several levels, not one lookup
    everything = run_question(store, "downstream", {"key": key, "limit": "100000"})
    tasks = everything[everything["kind"] == "task"]
    assert set(tasks["item"]) == below and len(tasks) == len(below)
    assert key not in set(tasks["item"])  # the task itself is not downstream of itself

    depth = nx.single_source_shortest_path_length(dag, key)
    few = run_question(store, "downstream", {"key": key, "limit": "7"})
    kept = set(few.loc[few["kind"] == "task", "item"])
    assert len(kept) == 7 and kept <= below
    # breadth first: nothing left out is nearer than something kept
    assert max(depth[k] for k in kept) <= min(depth[k] for k in below - kept)
    again = run_question(store, "downstream", {"key": key, "limit": "7"})
    assert set(again.loc[again["kind"] == "task", "item"]) == kept  # deterministic at the cut


def test_lineage_is_the_task_and_every_ancestor(loaded) -> None:
    store, dag = loaded
    key = _deepest(dag, "up")
    above = nx.ancestors(dag, key)
    assert len(above) > 20
    lin = run_question(store, "lineage", {"key": key, "limit": "100000"})
    tasks = lin[lin["kind"] == "task"]
    assert set(tasks.loc[tasks["relation"] == "upstream", "item"]) == above
    assert tasks.loc[tasks["relation"] == "self", "item"].tolist() == [key]
    few = run_question(store, "lineage", {"key": key, "limit": "3"})
    assert (few["relation"] == "upstream").sum() == 3 and (few["relation"] == "self").sum() == 1
    # issue 25: nearest first, with the distance (edges from the task) as a column
    depth = nx.single_source_shortest_path_length(dag.reverse(), key)
    # (a key appears once per execution that fed the lineage: its nearest is its distance)
    got = tasks.groupby("item")["distance"].min().astype(int).to_dict()
    assert got == {k: depth[k] for k in got} and got[key] == 0
    assert tasks["distance"].astype(int).is_monotonic_increasing
    assert lin["distance"].astype(int).is_monotonic_increasing
    # each row is one execution: an attempt of its key
    assert tasks["attempt"].notna().all()


def _recomputed_store() -> EmbeddedStore:
    from tinyrun import recomputed_records

    store = EmbeddedStore(None)
    store.load_graph(to_prov(recomputed_records()))
    return store


def _fed_in_time_order(lin, deps: dict[str, set[str]]) -> list[str]:
    """Rows of a lineage answer that no row one level nearer (a task depending on it) can have
    used: the row ends after every such row started (a row below that never ran has no start:
    anything may have fed it)."""
    import pandas as pd

    tasks = lin[lin["kind"] == "task"].copy()
    tasks["start"] = pd.to_datetime(tasks["start"], utc=True)
    tasks["end"] = tasks["start"] + pd.to_timedelta(tasks["duration"].astype(float), unit="s")
    bad = []
    for row in tasks[tasks["relation"] == "upstream"].itertuples():
        feeds = [k for k, up in deps.items() if row.item in up]
        below = tasks[(tasks["distance"] == row.distance - 1) & tasks["item"].isin(feeds)]
        if not len(below) or not (below["start"].isna() | (below["start"] >= row.end)).any():
            bad.append(f"{row.item} at distance {row.distance}: {row.start} + {row.duration} s")
    return bad


def test_lineage_rows_are_the_executions_that_fed_the_row_below() -> None:
    """Issue 25: a key executed again (a longer attempt, after the task it had fed) made its
    lineage row end after the task it feeds began (first start of any attempt, longest
    duration). Each row is now the execution whose result the row below used: the task itself
    its last execution; a key that fed two executions appears once for each."""
    import pandas as pd
    from tinyrun import KEY_A, KEY_B, KEY_NEVER, KEY_SLASH, T0, W1, W2, utc

    store = _recomputed_store()
    deps = {KEY_B: {KEY_A}, KEY_SLASH: {KEY_A, KEY_B}, KEY_NEVER: {KEY_SLASH}}
    lin = run_question(store, "lineage", {"key": KEY_SLASH})
    assert _fed_in_time_order(lin, deps) == []
    got = [
        (r.item, int(r.distance), int(r.attempt), pd.Timestamp(r.start)) for r in lin.itertuples()
    ]
    at = utc([T0 + 13, T0 + 2, T0 + 7, T0 + 1])
    assert got == [  # nearest first, then by start
        (KEY_SLASH, 0, 1, at[0]),  # the last execution of the task itself
        (KEY_B, 1, 0, at[1]),
        (KEY_A, 1, 1, at[2]),  # the second a fed it
        (KEY_A, 2, 0, at[3]),  # the first a fed b
    ]
    assert lin["duration"].astype(float).tolist() == [0.5, 0.5, 5.0, 0.5]
    assert lin["worker"].tolist() == [W1, W1, W2, W1]
    # a task that never ran: its dependencies' last executions, then what fed them
    never = run_question(store, "lineage", {"key": KEY_NEVER})
    assert _fed_in_time_order(never, deps) == []
    assert [(r.item, r.attempt) for r in never.itertuples()][:2] == [
        (KEY_NEVER, pd.NA),
        (KEY_SLASH, 1),
    ]
    assert len(never) == 5
    # a limit counts executions upstream
    assert len(run_question(store, "lineage", {"key": KEY_SLASH, "limit": "2"})) == 3


WALK = """# title: reachable
# param: start (iri) where to start
# param: limit (limit, default 100) at most this many
PREFIX ex: <http://example.org/>
SELECT ?n WHERE { BIND (?start AS ?n) }
#%% repeat
PREFIX ex: <http://example.org/>
SELECT DISTINCT ?m WHERE { VALUES (?n) { } ?n ex:next ?m }
"""


def _ring_store() -> EmbeddedStore:
    store = EmbeddedStore(None)
    ex = "http://example.org/"
    # a -> b, a -> c, b -> d, c -> d, d -> a (a cycle back to the start)
    for s, o in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "a")]:
        store.oxigraph.add(
            ox.Quad(ox.NamedNode(ex + s), ox.NamedNode(ex + "next"), ox.NamedNode(ex + o))
        )
    return store


def test_a_walk_visits_each_row_once_level_by_level_and_stops_on_cycles() -> None:
    q = parse_header(WALK, name="walk")
    check_question(q)
    store = _ring_store()
    ex = "http://example.org/"
    out = run_question(store, q, {"start": ex + "a"})
    assert out["n"].tolist() == [ex + "a", ex + "b", ex + "c", ex + "d"]
    # the limit caps the rows the walk adds; the level is cut in sorted order
    assert run_question(store, q, {"start": ex + "a", "limit": "1"})["n"].tolist() == [
        ex + "a",
        ex + "b",
    ]
    assert run_question(store, q, {"start": ex + "a", "limit": "0"})["n"].tolist() == [ex + "a"]


def test_a_repeating_step_must_return_the_columns_it_is_given() -> None:
    bad = WALK.replace("SELECT DISTINCT ?m WHERE", "SELECT DISTINCT ?n ?m WHERE")
    with pytest.raises(QueryError, match="repeats on its own rows, so it must return as many"):
        check_question(parse_header(bad, name="bad"))
    with pytest.raises(QueryError, match="'#%% repeat' takes nothing after it"):
        split_steps(WALK.replace("#%% repeat", "#%% repeat twice"))
    with pytest.raises(QueryError, match="follows no step"):
        split_steps("#%% repeat\nSELECT * WHERE { ?s ?p ?o }\n")


def test_walk_questions_also_run_on_an_export_file(loaded, tmp_path: Path) -> None:
    """The same walk through `--file` (an in-memory store of an export): same answer."""
    store, dag = loaded
    key = _deepest(dag, "down")
    path = tmp_path / "run.nq"
    store.oxigraph.dump(str(path), ox.RdfFormat.N_QUADS)
    other = EmbeddedStore(None)
    other.load_file(path)
    a = run_question(store, "downstream", {"key": key, "limit": "9"})
    b = run_question(other, "downstream", {"key": key, "limit": "9"})
    assert a.equals(b)


def test_problem_tasks_name_every_erred_and_retried_task_with_its_executions(
    loaded, records: RunRecords
) -> None:
    store, _ = loaded
    tasks = records.tasks.set_index("key")
    runs = records.executions.groupby("key").size()
    got = run_question(store, "problem-tasks", {"limit": "100000"})
    for problem, flag in (("erred", "erred"), ("retried", "retried")):
        rows = got[got["problem"] == problem].set_index("key")
        want = set(tasks.index[tasks[flag].fillna(False).astype(bool)])
        assert set(rows.index) == want and len(want) > 5, problem
        assert (rows["executions"] == runs.reindex(rows.index).fillna(0)).all(), problem
        assert (rows["prefix"] == tasks.loc[rows.index, "prefix"]).all(), problem
    assert (got.loc[got["problem"] == "retried", "executions"] > 1).all()
    # the limit keeps the first rows in (run, problem, task) order, the same on every call
    few = run_question(store, "problem-tasks", {"limit": "4"})
    assert len(few) == 4 and few.equals(run_question(store, "problem-tasks", {"limit": "4"}))


def test_slowest_tasks_of_one_prefix_and_of_all(loaded, records: RunRecords) -> None:
    """Both variants of step 1 (with and without a prefix) against the records."""
    store, _ = loaded
    ex = records.executions.merge(records.tasks[["key", "prefix"]], on="key")
    ex["duration"] = (ex["end"] - ex["start"]).dt.total_seconds()
    ex = ex.dropna(subset=["duration"])
    cases = [(p, ex[ex["prefix"] == p]) for p in sorted(ex["prefix"].dropna().unique())[:3]]
    for prefix, rows in [*cases, (None, ex)]:
        want = rows.nlargest(5, "duration")
        params = {"limit": "5"} if prefix is None else {"prefix": prefix, "limit": "5"}
        got = run_question(store, "slowest-tasks", params)
        assert set(zip(got["key"], got["attempt"], strict=True)) == set(
            zip(want["key"], want["attempt"], strict=True)
        ), prefix
        assert list(got["duration"]) == pytest.approx(list(want["duration"]), abs=1e-6)
        assert list(got["prefix"]) == list(want["prefix"])
