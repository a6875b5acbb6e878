"""Critical path: the heaviest dependency chain, from records and from a store."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from metaprov.analysis.critical_path import critical_path, longest_path
from metaprov.errors import QueryError
from metaprov.queries.critical_path import critical_path_from_store
from metaprov.records import RunRecords, conform


def brute_force(n: int, w: list[float], edges: list[tuple[int, int]]) -> float:
    """Weight of the heaviest path by enumerating every simple path (tiny graphs only)."""
    succ: dict[int, list[int]] = {i: [] for i in range(n)}
    for a, b in edges:
        succ[a].append(b)
    best = 0.0

    def walk(v: int, total: float) -> None:
        nonlocal best
        best = max(best, total)
        for u in succ[v]:
            walk(u, total + w[u])

    for v in range(n):
        walk(v, w[v])
    return best


@pytest.mark.parametrize("method", ["networkx", "numpy"])
@pytest.mark.parametrize("seed", range(8))
def test_longest_path_matches_brute_force(seed: int, method: str) -> None:
    rng = np.random.default_rng(seed)
    n = 9
    w = rng.uniform(0, 5, n).round(3).tolist()
    w[int(rng.integers(n))] = 0.0  # a task that never ran
    edges = [(a, b) for a, b in itertools.combinations(range(n), 2) if rng.random() < 0.3]
    path = longest_path(
        np.arange(n),
        np.array(w),
        np.array([a for a, _ in edges], dtype=np.int64),
        np.array([b for _, b in edges], dtype=np.int64),
        method=method,
    )
    assert all((a, b) in edges for a, b in itertools.pairwise(path))
    assert sum(w[v] for v in path) == pytest.approx(brute_force(n, w, edges))


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_and_networkx_agree_on_larger_dags(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = 3000
    w = rng.exponential(1.0, n)
    src = rng.integers(0, n - 1, 6000)
    dst = src + 1 + rng.integers(0, 50, 6000)
    keep = dst < n
    src, dst = src[keep], dst[keep]
    a = longest_path(np.arange(n), w, src, dst, method="networkx")
    b = longest_path(np.arange(n), w, src, dst, method="numpy")
    edges = set(zip(src.tolist(), dst.tolist(), strict=True))
    assert all((x, y) in edges for x, y in itertools.pairwise(b))
    assert w[b].sum() == pytest.approx(w[a].sum(), rel=1e-12)


@pytest.mark.parametrize("weights", ["ties", "negative", "zero", "tenths"])
def test_vectorised_finds_networkx_path_among_ties(weights: str) -> None:
    """The vectorised programme picks networkx's very path where several are equally heavy
    (so ``auto``, which uses it at every size, answers as networkx did): its topological order,
    its first predecessor, its end; no path when every weight is 0; a negative sum restarts."""
    for seed in range(60):
        rng = np.random.default_rng(1000 + seed)
        n = int(rng.integers(1, 50))
        w = {
            "ties": rng.integers(0, 3, n).astype(float),
            "negative": rng.integers(-2, 3, n).astype(float),
            "zero": np.zeros(n),
            "tenths": rng.uniform(0, 1, n).round(1),
        }[weights]
        m = int(rng.integers(0, 3 * n + 1))
        a, b = rng.integers(0, n, m), rng.integers(0, n, m)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        perm = rng.permutation(n)  # node numbers not in dependency order
        edges = pd.DataFrame({"s": perm[lo[lo < hi]], "d": perm[hi[lo < hi]]}).drop_duplicates()
        src, dst = edges["s"].to_numpy(), edges["d"].to_numpy()
        want = longest_path(np.arange(n), w, src, dst, method="networkx")
        assert longest_path(np.arange(n), w, src, dst, method="numpy") == want, seed
        assert longest_path(np.arange(n), w, src, dst) == want, seed
    if weights == "zero":
        assert want == []  # nothing ran: no path, as networkx says


@pytest.mark.parametrize("method", ["networkx", "numpy"])
def test_cycle_is_reported(method: str) -> None:
    with pytest.raises(QueryError, match="cycle"):
        longest_path(
            np.array(["a", "b", "c"]),
            np.array([1.0, 1.0, 1.0]),
            np.array([2, 0, 1]),
            np.array([0, 1, 0]),
            method=method,
        )
    assert longest_path(np.array([]), np.array([]), np.array([]), np.array([])) == []


def _records() -> RunRecords:
    """a(1 s) -> c(5 s) -> d(1 s); b(3 s) -> d; e never ran and feeds d (weight 0)."""
    t0 = pd.Timestamp("2024-01-01T00:00:00Z")
    secs = {"a": 1.0, "b": 3.0, "c": 5.0, "d": 1.0}
    ex = pd.DataFrame(
        {
            "key": list(secs),
            "attempt": [0] * 4,
            "worker": ["tcp://w:1"] * 4,
            "start": [t0] * 4,
            "end": [t0 + pd.Timedelta(seconds=s) for s in secs.values()],
            "outcome": ["memory"] * 4,
        }
    )
    # A retried task: c ran twice, both attempts count (the path waited for each).
    ex = pd.concat([ex, ex[ex["key"] == "c"].assign(attempt=1)], ignore_index=True)
    tasks = pd.DataFrame({"key": [*secs, "e"], "prefix": ["p"] * 5, "worker": ["tcp://w:1"] * 5})
    dep = pd.DataFrame(
        {"graph": 0, "key": ["c", "d", "d", "d"], "dependency": ["a", "c", "b", "e"]}
    )
    return RunRecords(
        path="x",
        run_id="r1",
        tasks=conform("tasks", tasks),
        executions=conform("executions", ex),
        dependencies=conform("dependencies", dep),
    )


def test_critical_path_from_records() -> None:
    cp = critical_path(_records())
    assert list(cp["key"]) == ["a", "c", "d"]
    assert list(cp["duration"]) == [1.0, 10.0, 1.0]
    assert cp.attrs["total_seconds"] == 12.0
    assert list(cp["cumulative"]) == [1.0, 11.0, 12.0]
    assert list(cp["position"]) == [1, 2, 3]


def test_critical_path_from_store_agrees(tmp_path) -> None:
    """On a generated run (retries included), the store's answer equals the records' answer."""
    from metaprov.ingest import read_run
    from metaprov.mapping import to_prov
    from metaprov.store import EmbeddedStore
    from metaprov.synthetic import generate_run

    run = generate_run(tmp_path / "run", 300, seed=3, retried_fraction=0.05)
    rec = read_run(run, darshan=False)
    expected = critical_path(rec)
    st = EmbeddedStore(None)
    st.load_graph(to_prov(rec))
    cp = critical_path_from_store(st)
    assert len(expected) >= 1
    assert list(cp["key"]) == list(expected["key"])
    assert cp.attrs["total_seconds"] == pytest.approx(expected.attrs["total_seconds"], abs=1e-5)
    assert set(cp["run_id"]) == {rec.run_id}
    with pytest.raises(QueryError, match="no run 'zz'"):
        critical_path_from_store(st, run="zz")


def test_recorded_path_is_used_and_checked(tmp_path) -> None:
    """The embedded store records the path at load time; a stale record is recomputed."""
    from metaprov.ingest import read_run
    from metaprov.mapping import to_prov
    from metaprov.store import EmbeddedStore
    from metaprov.synthetic import generate_run

    rec = read_run(generate_run(tmp_path / "run", 400, seed=5), darshan=False)
    graph = to_prov(rec)
    st = EmbeddedStore(tmp_path / "store")
    st.load_graph(graph)
    recorded = st.cached_critical_path(graph.graph_iri)
    assert recorded is not None and len(recorded["tasks"]) == len(critical_path(rec))
    from_record = critical_path_from_store(st)
    recomputed = critical_path_from_store(st, method="numpy")  # same answer either way
    st.catalog.save({})
    assert st.cached_critical_path(graph.graph_iri) is None
    from_scan = critical_path_from_store(st)
    for other in (recomputed, from_scan):
        assert other.attrs["total_seconds"] == pytest.approx(from_record.attrs["total_seconds"])
    assert list(from_scan["key"]) == list(from_record["key"])
    # A record naming tasks the graph no longer holds is not trusted.
    st._remember(st.load_chunks("urn:other", [b"<urn:a> <urn:b> <urn:c> .\n"]))
    st.catalog.save(
        {
            graph.graph_iri: {
                "triples": 1,
                "critical_path": {"tasks": ["urn:gone"], "weights": [99.0]},
            }
        }
    )
    stale = critical_path_from_store(st, run=rec.run_id)
    assert list(stale["key"]) == list(from_record["key"])


def test_each_step_is_the_execution_that_fed_the_next() -> None:
    """Issue 25: a key executed again after the task it fed (recomputed after a worker loss)
    made a step start after the next one. The step is the execution that fed the next: the
    latest one that ended by the next step's start; from records and from a store alike."""
    from tinyrun import KEY_A, KEY_B, KEY_SLASH, T0, W2, tiny_records, utc

    from metaprov.mapping import to_prov
    from metaprov.store import EmbeddedStore

    rec = tiny_records()
    again = pd.DataFrame(
        {
            "key": [KEY_A],
            "attempt": pd.array([1], dtype="Int64"),
            "worker": [W2],
            "start": utc([T0 + 7]),
            "end": utc([T0 + 7.5]),
            "outcome": ["memory"],
            "time_source": ["worker"],
        }
    )
    rec.executions = conform("executions", pd.concat([rec.executions, again], ignore_index=True))
    st = EmbeddedStore(None)
    st.load_graph(to_prov(rec))
    for cp in (critical_path(rec), critical_path_from_store(st)):
        assert list(cp["key"]) == [KEY_A, KEY_B, KEY_SLASH]
        starts = pd.to_datetime(cp["start"], utc=True)
        assert starts.is_monotonic_increasing, list(starts)
        assert starts.iloc[0] == utc([T0 + 1]).iloc[0]  # the first run of A fed B
        assert (
            pd.to_datetime(cp["end"], utc=True).iloc[:-1].to_numpy() <= starts.iloc[1:].to_numpy()
        ).all()
        assert cp["duration"].iloc[0] == pytest.approx(1.0)  # both runs of A count as compute


def _feeding_reference(path_ids: list, rows: pd.DataFrame, id_col: str) -> pd.DataFrame:
    """The rules of feeding_executions written plainly: a pandas sort and filters per step."""
    groups = dict(iter(rows.groupby(id_col, sort=False))) if len(rows) else {}
    chosen: list = []
    next_start = pd.NaT
    for pid in reversed(path_ids):
        g = groups.get(pid)
        if g is None:
            chosen.append(None)
            continue
        g = g.sort_values(["start", "end"], kind="stable", na_position="first")
        fed = g[g["end"].notna() & (g["end"] <= next_start)] if pd.notna(next_start) else None
        began = g[g["start"].notna() & (g["start"] <= next_start)] if fed is not None else None
        if fed is None:
            pick = g.iloc[-1]
        elif len(fed):
            pick = fed.sort_values("end", kind="stable").iloc[-1]
        else:
            pick = began.iloc[-1] if len(began) else g.iloc[0]
        chosen.append(pick)
        if pd.notna(pick["start"]):
            next_start = pick["start"]
    chosen.reverse()
    out = pd.DataFrame(
        {c: [None if r is None else r[c] for r in chosen] for c in rows.columns},
        columns=list(rows.columns),
    )
    out[id_col] = list(path_ids)
    for c in ("start", "end"):
        out[c] = pd.to_datetime(out[c], utc=True)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_feeding_executions_follows_its_rules_on_random_rows(seed: int) -> None:
    """Ties, missing starts and ends, steps without executions, rows without a step."""
    from metaprov.analysis.critical_path import feeding_executions

    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2024-04-19T19:00:00Z")
    for _ in range(100):
        n, k = int(rng.integers(0, 25)), int(rng.integers(1, 7))
        start = pd.Series(t0 + pd.to_timedelta(rng.integers(0, 10, n), unit="s"))
        start[rng.random(n) < 0.15] = pd.NaT
        end = start + pd.to_timedelta(rng.integers(0, 4, n), unit="s")
        end[rng.random(n) < 0.15] = pd.NaT
        ids = pd.Series([f"t{i}" for i in rng.integers(0, k, n)], dtype=object)
        ids[rng.random(n) < 0.05] = None
        rows = pd.DataFrame(
            {
                "task": ids,
                "worker": [f"w{i}" for i in rng.integers(0, 3, n)],
                "start": start,
                "end": end,
            }
        )
        path = list(dict.fromkeys(f"t{i}" for i in rng.integers(0, k + 2, int(rng.integers(0, 8)))))
        got = feeding_executions(path, rows, "task")
        pd.testing.assert_frame_equal(got, _feeding_reference(path, rows, "task"), check_exact=True)


def test_a_task_without_an_execution_on_the_path_has_no_worker() -> None:
    # its worker is unknown: not every worker of the run (an unbound variable in an OPTIONAL
    # once matched them all, and the "take the first" rule then named an arbitrary one)
    import pyoxigraph as ox

    from metaprov.queries.critical_path import _details
    from metaprov.store import EmbeddedStore

    mp = "https://w3id.org/metaprov/ns#"
    g = "http://x/run/graph"
    nt = (
        f'<http://x/t1> <{mp}key> "t1" .\n'
        f'<http://x/w1> <{mp}address> "tcp://10.0.0.1:1" .\n'
        f'<http://x/w2> <{mp}address> "tcp://10.0.0.2:2" .\n'
    )
    st = EmbeddedStore(None)
    st.oxigraph.load(nt.encode(), format=ox.RdfFormat.N_TRIPLES, to_graph=ox.NamedNode(g))
    out = _details(st, f"<{g}>", np.array(["http://x/t1"], dtype=object))
    assert list(out.index) == ["http://x/t1"] and out.loc["http://x/t1", "key"] == "t1"
    assert pd.isna(out.loc["http://x/t1", "worker"]), out
