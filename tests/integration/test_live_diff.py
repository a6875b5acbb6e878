"""Live provenance: every refresh in progress leaves exactly the graph a full conversion of the
same snapshot gives (the columnar diff of metaprov.live.lines), refresh by refresh, on a real
run replayed in time order and on a synthetic run with retries and errors; a restart resumes
from what the store holds (stray triples included) to the same graph.

Real parts: the replay writer of tests/live_replay.py appending rows (and cutting the last one)
as Mofka-Dask writers do, the real follow loop, a real (in-memory) Oxigraph store.
"""

from __future__ import annotations

import random
import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import DARSHAN_DASK_RUNS

from metaprov.live.follow import Refresh, convert, follow, provisional_id
from metaprov.live.lines import LineSet, as_bytes_lines, diff, split_lines
from metaprov.live.snapshot import take_snapshot
from metaprov.mapping.terms import DEFAULT_BASE, MP, RunIris

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from live_replay import Replay  # noqa: E402

MIXED = DARSHAN_DASK_RUNS / "mixed-mofka"
LIVE = (f"<{MP.liveState}>", f"<{MP.liveUpdated}>", f"<{MP.liveLag}>")


def _canonical(nt: bytes) -> list[bytes]:
    """N-Triples as Oxigraph holds them (its literal forms), sorted."""
    import pyoxigraph as ox

    st = ox.Store()
    st.load(nt, format=ox.RdfFormat.N_TRIPLES)
    data = st.dump(format=ox.RdfFormat.N_TRIPLES, from_graph=ox.DefaultGraph())
    return sorted(bytes(data).splitlines())


def _full(run: Path, tmp: Path, k: int) -> list[bytes]:
    """A full conversion of a snapshot of ``run`` taken now (what a refresh must leave)."""
    dest = tmp / f"expected-{k}" / run.name
    take_snapshot(run, dest)
    conv = convert(
        dest, run, base=DEFAULT_BASE, detail="tasks", darshan=False, run_id=provisional_id(run)
    )
    shutil.rmtree(dest.parent)
    return _canonical(b"".join(conv.lines))


def _held(store, graph: str) -> tuple[list[bytes], list[bytes]]:
    """(mapped triples, state triples) of the graph in the store, in the store's forms."""
    from metaprov.live.follow import EmbeddedTarget

    lines = _canonical(EmbeddedTarget(store).current_text(graph))
    state = [ln for ln in lines if any(f" {p} " in ln.decode() for p in LIVE)]
    return [ln for ln in lines if ln not in state], state


def _follow_refresh_by_refresh(
    source: Path, tmp: Path, steps: int, *, incremental: bool = True
) -> None:
    from metaprov.store import EmbeddedStore

    run = tmp / source.name
    rep = Replay(source, run, steps=steps)
    rep.step()
    st = EmbeddedStore(None)
    graph = RunIris(DEFAULT_BASE, provisional_id(run)).graph
    seen: list[tuple[Refresh, list[bytes]]] = []
    stop = threading.Event()
    failures: list[str] = []

    def check(r: Refresh) -> None:
        # the run directory does not move while the follow waits for this callback
        try:
            expected = _full(run, tmp, r.number)
            body, state = _held(st, graph)
            if body != expected:
                failures.append(
                    f"refresh {r.number}: {len(set(body) - set(expected))} extra, "
                    f"{len(set(expected) - set(body))} missing triples"
                )
            if len(state) not in (2, 3):  # liveLag only once a row has a time
                failures.append(f"refresh {r.number}: state triples {state}")
            seen.append((r, expected))
        except Exception as exc:  # reported by the test, not lost in the follow's thread
            failures.append(f"refresh {r.number}: {exc!r}")
        if failures or r.number > steps:
            stop.set()  # one refresh of an unchanged run (or a failure), then stop
        elif not rep.finished:
            rep.step()

    res = follow(
        run,
        store=st,
        interval=0.01,
        quiet=0,
        darshan=False,
        on_refresh=check,
        stop=stop,
        incremental=incremental,
    )
    assert not failures, failures
    assert len(res.refreshes) == steps + 1
    # the first refresh converts in full; later ones format only the rows that changed (or,
    # not incremental, everything again); the last saw the same snapshot
    methods = [r.method for r in res.refreshes]
    changed = "rows" if incremental else "full"
    assert methods == ["full"] + [changed] * (steps - 1) + ["unchanged"], methods
    rows = [(r.rows_formatted, r.rows_mapped) for r in res.refreshes]
    assert rows[0][0] == rows[0][1] > 0 and rows[-1][0] == 0, rows
    if incremental:  # the rows new or gone since the previous refresh, not the whole run
        assert all(done > 0 for done, _ in rows[1:-1]), rows
        assert sum(d for d, _ in rows[1:-1]) < sum(m for _, m in rows[1:-1]), rows
    else:
        assert all(done == mapped for done, mapped in rows[:-1]), rows
    # tasks only grow; each refresh sent exactly the difference of two full conversions
    # (plus the state triples: two or three of them change at every refresh)
    prev: list[bytes] = []
    for r, expected in seen:
        gone, come = set(prev) - set(expected), set(expected) - set(prev)
        assert r.removed - len(gone) in ((1, 2) if prev else (0,)), (r, len(gone))
        assert r.added - len(come) in ((1, 2) if prev else (2, 3)), (r, len(come))
        assert r.triples - len(expected) in (2, 3)
        prev = expected
    tasks = [r.tasks for r, _ in seen]  # a real run's graph rows come first: may stay equal
    assert tasks == sorted(tasks) and seen[0][0].triples < seen[-1][0].triples
    # the last refresh saw the same snapshot: only the state moved
    assert seen[-1][0].added == seen[-1][0].removed in (1, 2)
    # refreshes of appended rows sent what changed, not the graph again
    assert all(r.added < r.triples // 2 for r, _ in seen[2:]), [r for r, _ in seen]

    # restart: a new follow reads the graph back from the store (a stray triple too: whatever
    # the store holds, the refresh leaves the full conversion)
    stray = f"<{RunIris(DEFAULT_BASE, provisional_id(run)).run}> <http://x/stray> <http://x/o> .\n"
    from metaprov.live.follow import EmbeddedTarget

    EmbeddedTarget(st).apply(graph, [], [stray.encode()])
    again: list[Refresh] = []
    stop2 = threading.Event()

    def once(r: Refresh) -> None:
        again.append(r)
        stop2.set()

    follow(run, store=st, interval=0.01, quiet=0, darshan=False, on_refresh=once, stop=stop2)
    assert again[0].method == "full"  # a restart reads the graph back from the store
    body, state = _held(st, graph)
    assert body == _full(run, tmp, 99) and len(state) in (2, 3)
    # the restart sent the stray triple's removal and the state lines: not the graph, and not
    # the triples the store writes in other literal forms (the same triples)
    assert 2 <= again[0].removed <= 4 and 1 <= again[0].added == again[0].removed - 1, again[0]


@pytest.mark.parametrize("incremental", [True, False], ids=["rows", "full"])
def test_refreshes_equal_full_conversions_on_a_synthetic_run_with_retries_and_errors(
    tmp_path: Path, incremental: bool
) -> None:
    from metaprov.synthetic import generate_run

    source = generate_run(
        tmp_path / "source" / "synthetic",
        300,
        seed=7,
        graphs=2,
        erred_fraction=0.05,
        retried_fraction=0.05,
        transfer_fraction=0.2,
    )
    _follow_refresh_by_refresh(source, tmp_path / "live", steps=5, incremental=incremental)


def test_a_refresh_the_row_path_cannot_decide_is_converted_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the row path says it cannot decide (as on a 64-bit collision of its keys): the refresh
    # reads the graph back from the store and converts in full, to the same graph
    from metaprov.live import rows
    from metaprov.store import EmbeddedStore
    from metaprov.synthetic import generate_run

    monkeypatch.setattr(rows, "advance", lambda *a, **k: None)
    source = generate_run(tmp_path / "source" / "synthetic", 120, seed=3)
    run = tmp_path / "synthetic"
    rep = Replay(source, run, steps=3)
    rep.step()
    st = EmbeddedStore(None)
    seen: list[Refresh] = []
    stop = threading.Event()

    def step(r: Refresh) -> None:
        seen.append(r)
        if rep.finished:
            stop.set()
        else:
            rep.step()

    follow(run, store=st, interval=0.01, quiet=0, darshan=False, on_refresh=step, stop=stop)
    assert [r.method for r in seen] == ["full"] * 3
    body, _ = _held(st, RunIris(DEFAULT_BASE, provisional_id(run)).graph)
    assert body == _full(run, tmp_path, 1)


@pytest.mark.realdata
def test_refreshes_equal_full_conversions_on_a_real_run_being_appended(tmp_path: Path) -> None:
    if not MIXED.is_dir():
        pytest.skip(f"real run not found: {MIXED}")
    _follow_refresh_by_refresh(MIXED, tmp_path, steps=6)


# --------------------------------------------------------------------------------------------
# The diff itself: exactly the set difference, whatever the lines
# --------------------------------------------------------------------------------------------


def _lines(rng: random.Random, n: int) -> list[bytes]:
    return [
        f'<http://x/s{rng.randrange(n)}> <http://x/p> "{rng.random()}" .\n'.encode()
        for _ in range(n)
    ]


def test_the_diff_is_the_set_difference_with_duplicates_and_any_chunking() -> None:
    rng = random.Random(5)
    old = _lines(rng, 400)
    new = old[100:] + _lines(rng, 150) + old[:20]  # duplicates, kept, dropped and new lines
    held = LineSet.of([split_lines(b"".join(old))])
    # the text cut into chunks anywhere between lines
    text = b"".join(new)
    cut = text.index(b"\n", len(text) // 3) + 1
    fresh = LineSet.of([split_lines(text[:cut]), split_lines(text[cut:])])
    removed, added = diff(held, fresh)
    new_set = {ln.rstrip(b"\n") for ln in new}
    assert {ln.rstrip(b"\n") for ln in removed} == {ln.rstrip(b"\n") for ln in old} - new_set
    assert {ln.rstrip(b"\n") for ln in added} == new_set - {ln.rstrip(b"\n") for ln in old}
    assert len(added) == len(set(added)) and len(removed) == len(set(removed))
    assert len(fresh) == len(new_set) and len(held) == len(set(old))
    # nothing to do between equal graphs; everything from or to an empty one
    assert diff(held, LineSet.of([split_lines(b"".join(reversed(old)))])) == ([], [])
    assert sorted(diff(LineSet.of([]), held)[1]) == sorted(set(old))
    assert sorted(diff(held, LineSet.from_text(b""))[0]) == sorted(set(old))


def test_a_64_bit_collision_between_lines_does_not_lose_a_change() -> None:
    # two different lines given the same first key (a 64-bit collision, forced): the diff
    # compares both keys, so neither is taken for the other
    a = [
        b"<http://x/a> <http://x/p> <http://x/o> .\n",
        b"<http://x/b> <http://x/p> <http://x/o> .\n",
    ]
    held = LineSet.of([split_lines(a[0])])
    new = LineSet.of([split_lines(a[1])])
    held.a = new.a = np.zeros(1, dtype=np.uint64)  # the same a, a different b
    assert diff(held, new) == ([a[0]], [a[1]])
    both = LineSet.of([split_lines(b"".join(a))])
    both.a = np.zeros(2, dtype=np.uint64)
    both.a_unique = False  # a repeats within one set: the hash-join path gives the same answer
    assert diff(both, new) == ([a[0]], [])
    assert diff(held, both) == ([], [a[1]])


def test_lines_become_bytes_only_where_asked_and_exactly() -> None:
    text = b'<http://x/s> <http://x/p> "a\\r\\nb" .\n<http://x/s> <http://x/q> "\xc3\xa9" .\n'
    # a text whose last line has no "\n" keeps that line as it is
    assert as_bytes_lines(split_lines(text[:-1])) == text[:-1].splitlines(keepends=True)
    arr = split_lines(text)
    assert isinstance(arr, pa.Array) and len(arr) == 2
    assert as_bytes_lines(arr) == text.splitlines(keepends=True)
    assert as_bytes_lines(pa.chunked_array([arr.take(pa.array([1])), arr[:1]])) == [
        text.splitlines(keepends=True)[1],
        text.splitlines(keepends=True)[0],
    ]


def test_the_same_triple_in_two_literal_forms_is_not_a_change() -> None:
    from metaprov.live.follow import same_triples_apart

    xsd = "http://www.w3.org/2001/XMLSchema#"
    stored = [
        f'<http://x/e> <http://x/t> "2024-04-19T19:01:36.42527Z"^^<{xsd}dateTime> .\n'.encode(),
        b'<http://x/e> <http://x/gone> "1" .\n',
    ]
    ours = [
        f'<http://x/e> <http://x/t> "2024-04-19T19:01:36.425270Z"^^<{xsd}dateTime> .\n'.encode(),
        f'<http://x/e> <http://x/n> "1.50"^^<{xsd}decimal> .\n'.encode(),
    ]
    removed, added = same_triples_apart(stored, ours)
    assert removed == [stored[1]]
    assert len(added) == 1 and added[0].startswith(b"<http://x/e> <http://x/n> ")
    # nothing in common: every line stays (insertions in the store's forms: the same triples)
    assert same_triples_apart(stored[1:], ours[1:]) == (
        stored[1:],
        [f'<http://x/e> <http://x/n> "1.5"^^<{xsd}decimal> .\n'.encode()],
    )
    assert same_triples_apart([], ours) == ([], ours)
