"""The row path of a live refresh (metaprov.live.rows): formatting only the rows that changed
gives exactly the set difference of two full formattings, whatever the rows do (change, leave,
repeat, state the same triple as another row, gain a column another row brought in), refresh
after refresh; where a 64-bit collision makes it unsafe it says so instead of guessing."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from metaprov.live import rows as R
from metaprov.live.lines import SEEDS, LineSet, as_bytes_lines, diff
from metaprov.mapping.block import Block, Column
from metaprov.mapping.terms import RDF, XSD

LARGE = pa.large_string()


def _block(rng: random.Random, n: int, cls: str, *, sparse: float, unique: bool = False) -> Block:
    """A block of ``n`` subjects (some repeated), an IRI, an escaped string, a typed literal
    and a multi-valued column; values null with probability ``sparse``."""
    ids = rng.sample(range(n * 2), n) if unique else [rng.randrange(n * 2) for _ in range(n)]
    subj = [f"http://x/{cls}/{i}" for i in ids]

    def maybe(v: str | None) -> str | None:
        return None if rng.random() < sparse else v

    b = Block(pa.array(subj, LARGE), [Column(RDF.type, f"http://x/{cls}")])
    b.add("http://x/p", pa.array([maybe(f"http://x/o{rng.randrange(5)}") for _ in subj], LARGE))
    b.add(
        "http://x/label",
        pa.array([maybe(f'a "q"\n{rng.randrange(4)}') for _ in subj], LARGE),
        kind="str",
    )
    b.add(
        "http://x/n",
        pa.array([maybe(str(rng.randrange(3))) for _ in subj], LARGE),
        kind="typed",
        datatype=XSD.integer,
    )
    lists = [
        None
        if rng.random() < sparse
        else [f"http://x/m{rng.randrange(4)}" for _ in range(rng.randrange(3))]
        for _ in subj
    ]
    b.add("http://x/m", pa.array(lists, pa.large_list(LARGE)))
    b.add("http://x/const", "http://x/everyone")
    return b


def _graph(rng: random.Random, sparse: float) -> list[Block]:
    blocks = [_block(rng, rng.randrange(1, 40), c, sparse=sparse) for c in ("A", "B", "A")]
    # a block stating some of the same triples as another (same subjects, same type)
    twin = Block(blocks[0].subjects.slice(0, 5), [Column(RDF.type, "http://x/A")])
    return [*blocks, twin]


def _full(blocks: list[Block]) -> LineSet:
    return LineSet.of(R.all_lines(blocks).chunks)


def test_the_row_path_gives_the_full_difference_refresh_after_refresh() -> None:
    rng = random.Random(3)
    blocks = _graph(rng, 0.3)
    state = R.start(blocks, R.all_lines(blocks), SEEDS)
    assert state is not None and len(state) == len(_full(blocks))
    for step in range(25):
        # a new graph: some rows kept as they were, others changed, gone or new; columns that
        # appear or vanish in a block (all null: Block.add leaves them out)
        new = _graph(random.Random(3 if step % 3 == 0 else 100 + step), 0.3 if step % 2 else 1.0)
        if step % 4 == 1:
            new = blocks[:2] + new[2:]  # two blocks unchanged
        out = R.advance(state, new, SEEDS)
        assert out is not None
        removed, added, state, formatted = out
        exp_removed, exp_added = diff(_full(blocks), _full(new))
        assert sorted(removed) == sorted(exp_removed), step
        assert sorted(added) == sorted(exp_added), step
        assert len(state) == len(_full(new))
        assert formatted <= sum(map(len, blocks)) + sum(map(len, new))
        blocks = new


def test_unchanged_rows_are_not_formatted_and_an_unchanged_graph_changes_nothing() -> None:
    rng = random.Random(5)
    blocks = _graph(rng, 0.2)
    state = R.start(blocks, R.all_lines(blocks), SEEDS)
    assert state is not None
    removed, added, state2, formatted = R.advance(state, blocks, SEEDS) or ((), (), None, -1)
    assert (removed, added, formatted) == ([], [], 0)
    # one row changes one value: that row formatted (its old and new version), nothing else
    changed = list(blocks)
    b = changed[1]
    vals = b.columns[1].values.to_pylist()
    vals[0] = "http://x/changed"
    changed[1] = Block(
        b.subjects,
        [b.columns[0], Column(b.columns[1].predicate, pa.array(vals, LARGE)), *b.columns[2:]],
    )
    out = R.advance(state2, changed, SEEDS)
    assert out is not None
    removed, added, _, formatted = out
    assert added == [f"<{b.subjects[0].as_py()}> <http://x/p> <http://x/changed> .\n".encode()]
    assert formatted == 2 * int(np.sum(np.asarray(b.subjects) == b.subjects[0].as_py()))
    assert len(removed) <= 1


def test_a_line_two_rows_state_leaves_only_with_the_last() -> None:
    s = pa.array(["http://x/s"], LARGE)
    one = Block(s, [Column(RDF.type, "http://x/A")])
    two = Block(s, [Column(RDF.type, "http://x/A")]).add(
        "http://x/p", pa.array(["http://x/o"], LARGE)
    )
    state = R.start([one, two], R.all_lines([one, two]), SEEDS)
    assert state is not None
    # the row of `two` goes: its p line leaves, the type line stays (`one` still states it)
    removed, added, state, _ = R.advance(state, [one], SEEDS) or ((), (), None, 0)
    assert removed == [b"<http://x/s> <http://x/p> <http://x/o> .\n"] and added == []
    removed, added, state, _ = R.advance(state, [], SEEDS) or ((), (), None, 0)
    assert removed == [
        b"<http://x/s> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <http://x/A> .\n"
    ]


def test_a_64_bit_collision_of_row_keys_is_reported_not_guessed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(9)
    blocks = _graph(rng, 0.2)
    state = R.start(blocks, R.all_lines(blocks), SEEDS)
    assert state is not None
    real = R.row_keys

    def colliding(block: Block, seeds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        a, b = real(block, seeds)
        return np.zeros_like(a), b  # every row the same first key, different second keys

    monkeypatch.setattr(R, "row_keys", colliding)
    assert R.advance(state, blocks, SEEDS) is None
    assert R.start(blocks, R.all_lines(blocks), SEEDS) is None


def test_lines_of_taken_rows_are_those_rows_lines() -> None:
    rng = random.Random(11)
    b = _block(rng, 30, "C", sparse=0.4, unique=True)
    mask = np.array([i % 3 == 0 for i in range(len(b))])
    part = as_bytes_lines(R.all_lines([R.take_rows(b, mask)]))
    every = as_bytes_lines(R.all_lines([b]))
    subjects = {f"<{s}>".encode() for s in np.asarray(b.subjects)[mask]}
    assert sorted(part) == sorted(ln for ln in every if ln.split(b" ", 1)[0] in subjects)


def test_a_row_keeps_its_key_when_another_row_brings_a_column_into_its_block() -> None:
    s = pa.array(["http://x/a", "http://x/b"], LARGE)
    before = Block(s, [Column(RDF.type, "http://x/A")]).add(
        "http://x/p", pa.array(["http://x/o", None], LARGE)
    )
    after = Block(s, [Column(RDF.type, "http://x/A")]).add(
        "http://x/p", pa.array(["http://x/o", None], LARGE)
    )
    after.add("http://x/q", pa.array([None, "http://x/o"], LARGE))  # only b has it
    ka, kb = R.row_keys(before, SEEDS), R.row_keys(after, SEEDS)
    assert ka[0][0] == kb[0][0] and ka[1][0] == kb[1][0]  # a: same lines, same key
    assert ka[0][1] != kb[0][1] and ka[1][1] != kb[1][1]  # b gained a line
