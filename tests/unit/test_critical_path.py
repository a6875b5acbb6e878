"""Critical path: the heaviest dependency chain, from records and from a store."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from metaprov.critical_path import critical_path, critical_path_from_store, longest_path
from metaprov.errors import QueryError
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


@pytest.mark.parametrize("seed", range(8))
def test_longest_path_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 9
    w = rng.uniform(0, 5, n).round(3).tolist()
    edges = [(a, b) for a, b in itertools.combinations(range(n), 2) if rng.random() < 0.3]
    path = longest_path(
        np.arange(n), np.array(w), np.array([a for a, _ in edges]), np.array([b for _, b in edges])
    )
    assert all((a, b) in edges for a, b in itertools.pairwise(path))
    assert sum(w[v] for v in path) == pytest.approx(brute_force(n, w, edges))


def test_cycle_is_reported() -> None:
    with pytest.raises(QueryError, match="cycle"):
        longest_path(np.array(["a", "b"]), np.array([1.0, 1.0]), np.array([0, 1]), np.array([1, 0]))
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
