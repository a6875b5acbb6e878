"""The capture's CSV writer and schemas: pandas-compatible files with the Mofka-Dask columns."""

from __future__ import annotations

import ast
import csv
import json

import pandas as pd
import pytest

pytest.importorskip("distributed")

from metaprov.capture import _files  # noqa: E402
from metaprov.capture._files import (  # noqa: E402
    MOFKA_FILES,
    SCHEDULER_TRANSITION,
    WORKER_EXECUTION,
    WORKER_TRANSFER,
    WORKER_TRANSITION,
    CsvSink,
    PartSink,
    existing_outputs,
    json_text,
    scheduler_transitions,
    worker_transitions,
)


def test_sink_writes_the_pandas_to_csv_layout(tmp_path):
    rows = [
        ("a-1", None, 1795000000.1234567, 0),
        ("('x-9f', 3, 0)", "tcp://1.2.3.4:5", 1.5e-05, 2**64 - 1),
        ('he said "hi", twice\nthen left', "", 0.1, None),
    ]
    sink = CsvSink(
        tmp_path / "t.csv", ("key", "worker", "time", "thread"), index=True, flush_rows=2
    )
    for r in rows:
        sink.append(r)
    sink.close()
    # What pandas writes for the same cells (as Python objects, as the Mofka consumer held them)
    # is what the sink wrote, byte for byte. (A float64 column would lose the 64-bit thread id.)
    expected = pd.DataFrame(rows, columns=["key", "worker", "time", "thread"], dtype=object)
    assert (tmp_path / "t.csv").read_text() == expected.to_csv(lineterminator="\n")
    back = pd.read_csv(tmp_path / "t.csv", index_col=0, dtype=str, keep_default_na=False)
    assert list(back.index) == ["0", "1", "2"]
    assert back["key"].tolist() == [r[0] for r in rows]
    # Floats round-trip exactly; thread ids keep all 64 bits as text.
    assert float(back["time"].iloc[0]) == 1795000000.1234567
    assert int(back["thread"].iloc[1]) == 2**64 - 1


def test_sink_index_runs_on_across_batches_and_header_exists_when_empty(tmp_path):
    empty = CsvSink(tmp_path / "e.csv", ("client", "action", "time"), index=True)
    empty.close()
    assert (tmp_path / "e.csv").read_text() == ",client,action,time\n"
    sink = CsvSink(tmp_path / "n.csv", ("k",), index=True, flush_rows=3)
    for i in range(7):
        sink.append((f"k{i}",))
        if i == 4:
            sink.flush()
    assert sink.rows == 7
    sink.close()
    sink.close()  # idempotent
    df = pd.read_csv(tmp_path / "n.csv", index_col=0)
    assert df.index.tolist() == list(range(7))
    assert df["k"].tolist() == [f"k{i}" for i in range(7)]


def test_part_sinks_have_no_index_column(tmp_path):
    sink = CsvSink(tmp_path / "p.csv", ("key", "time"), index=False)
    sink.append(("a", 1.0))
    sink.close()
    assert (tmp_path / "p.csv").read_text() == "key,time\na,1.0\n"


def test_column_lists_equal_the_real_mofka_files(pmda_r1):
    for name, columns in MOFKA_FILES.items():
        header = (pmda_r1 / name).read_text().splitlines()[0]
        assert header == "," + ",".join(columns), name


def test_json_text_is_deterministic_and_json_safe():
    data = {"b": {2, 1}, "a": (1, 2), "f": len, "p": {"nested": None}}
    text = json_text(data)
    assert text == json_text(dict(reversed(list(data.items()))))
    back = json.loads(text)
    assert back["b"] == ["1", "2"] and back["a"] == [1, 2]
    assert "built-in function len" in back["f"]


def test_existing_outputs_sees_only_capture_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    assert existing_outputs(tmp_path) == []
    (tmp_path / "graph.csv").write_text(",client,keys,dependencies,time\n")
    (tmp_path / "metaprov-parts").mkdir()
    assert existing_outputs(tmp_path) == ["graph.csv", "metaprov-parts/"]


def test_dict_reprs_parse_with_a_literal_parser():
    # graph.csv / worker_transfer.csv cells are Python literals: what we write must parse safely.
    deps = {("x-1", 0): {"y-2"}, "y-2": set()}
    assert ast.literal_eval(str(deps)) == deps


_AWKWARD_KEYS = [
    "inc-1",
    "('x-9f', 3, 0)",
    'say "hi"',
    "line\nbreak",
    "cr\rhere",
    "",
    "caf\u00e9-\u4e2d",
    " lead space",
]


def _scheduler_row(key: str, j: int) -> tuple:
    import numpy as np

    head = (key,)
    states = ("processing", "memory", "task-finished-1.5", "tcp://s:1")
    variant = j % 5
    if variant == 0:  # state only (most rows); prefix/group needing quotes
        return (
            key,
            None,
            None,
            "p,x",
            'g"1',
            "released",
            "waiting",
            "update-graph-1.5",
            "tcp://s:1",
            None,
            None,
            None,
            None,
            1795000000.0 + j / 3,
        )
    if variant == 1:  # finished: 64-bit thread, 0 bytes
        return (
            *head,
            2**63 + j,
            "tcp://w:1",
            "p",
            "g",
            *states,
            1.5,
            2.25,
            0.75,
            0,
            1795000000.125,
        )
    if variant == 2:  # erred without a compute entry
        return (
            *head,
            None,
            "tcp://w:1",
            "p",
            "g",
            "processing",
            "erred",
            "s",
            "tcp://s:1",
            None,
            None,
            None,
            None,
            1.0,
        )
    if variant == 3:  # numpy size: declined by the fast path, written by the csv module
        return (*head, 7, "tcp://w:1", "p", "g", *states, 1.5, 2.0, 0.5, np.int64(8), 2.0)
    return (
        *head,
        None,
        None,
        None,
        None,
        "released",
        "forgotten",
        "s",
        "tcp://s:1",
        None,
        None,
        None,
        None,
        3.0,
    )


def _formatter(f):
    """CsvSink's keyword for a formatter: a whole batch's, or one row's."""
    if f is None:
        return {}
    return {"batch": f} if f in (worker_transitions, scheduler_transitions) else {"fast": f}


def _execution_row(key: str, j: int) -> tuple:
    """Execution rows as the worker writes them: every optional cell present and absent, and
    cells of other types (declined by the fast path, written by the csv module)."""
    import numpy as np

    t = 1795000000.0 + j / 7
    variants = [
        (key, "tcp://10.0.0.1:4000", 140234, t, t + 1e-05, "memory", 12, t + 0.5),
        (key, "tcp://10.0.0.1:4000", None, None, t, "error", None, t),
        (key, "tcp://10.0.0.1:4000", 2**64 - 1, -0.0, 1e16, "memory", 0, 5e-324),
        (key, "tcp://10.0.0.1:4000", np.int64(7), t, t, "memory", 1, t),  # declined
        (key, "tcp://10.0.0.1:4000", 1, t, t, 'odd, "state"', 1, t),
    ]
    return variants[j % len(variants)]


def _transfer_row(key: str, j: int) -> tuple:
    """Transfer log entries as Dask appends them (incoming without ``compressed``, outgoing
    with it), and cells of other types (declined by the fast path)."""
    import numpy as np

    t = 1795000000.0 + j / 7
    keys = str({key: 28, (key, 1): 2**40})
    variants = [
        (
            t,
            t + 0.01,
            t + 0.005,
            0.01,
            keys,
            2**40 + 28,
            1.1e14,
            "tcp://10.0.0.2:4001",
            "incoming_transfer",
            "tcp://10.0.0.1:4000",
            t + 1,
            None,
        ),
        (
            t,
            t,
            t,
            0.0,
            keys,
            0,
            0.0,
            "tcp://10.0.0.2:4001",
            "outgoing_transfer",
            "tcp://10.0.0.1:4000",
            t,
            0,
        ),
        (
            None,
            None,
            None,
            None,
            keys,
            None,
            None,
            None,
            "incoming_transfer",
            "tcp://10.0.0.1:4000",
            t,
            12.5,
        ),
        (
            t,
            t,
            t,
            0.0,
            keys,
            np.int64(3),
            1.0,
            "tcp://w",
            "incoming_transfer",
            "tcp://10.0.0.1:4000",
            t,
            True,
        ),  # declined: numpy size, a bool
        (
            t,
            t,
            t,
            0.0,
            key,
            1,
            1.0,
            ("tcp://w", 1),
            "incoming_transfer",
            "tcp://10.0.0.1:4000",
            t,
            None,
        ),  # declined: a peer that is not text
    ]
    return variants[j % len(variants)]


#: Each file's specialised formatter and a maker of its rows (key, position).
_FORMATTERS = [
    (
        WORKER_TRANSITION,
        worker_transitions,
        lambda k, j: (k, "ready", "executing", "tcp://10.0.0.1:4000", 1795000000.0 + j / 7),
    ),
    (SCHEDULER_TRANSITION, scheduler_transitions, lambda k, j: _scheduler_row(k, j)),
]


@pytest.mark.parametrize(("columns", "fast", "make"), _FORMATTERS)
def test_fast_formatting_is_byte_identical_to_the_csv_module(tmp_path, columns, fast, make):
    rows = [make(k, j) for j, k in enumerate(_AWKWARD_KEYS * 3)]
    for index in (True, False):
        ref = CsvSink(tmp_path / f"ref{index}.csv", columns, index=index, flush_rows=5)
        quick = CsvSink(
            tmp_path / f"fast{index}.csv", columns, index=index, flush_rows=5, **_formatter(fast)
        )
        for r in rows:
            ref.append(r)
            quick.append(r)
        ref.close()
        quick.close()
        assert (tmp_path / f"fast{index}.csv").read_bytes() == (
            tmp_path / f"ref{index}.csv"
        ).read_bytes()


def _compact(full: tuple) -> tuple:
    """A state-only scheduler row as the hook buffers it: key, prefix, group, states, stimulus
    and time (the other cells are empty, ``called_from`` is the scheduler's own address)."""
    key, _, _, prefix, group, start, finish, stim, _, _, _, _, _, t = full
    return (key, prefix, group, start, finish, stim, t)


@pytest.mark.parametrize("address", ["tcp://s:1", "tcp://[::1]:8786,x"])
def test_the_schedulers_buffered_rows_are_written_as_whole_rows(tmp_path, address):
    """The scheduler's hook buffers a state-only transition as seven cells and the sink writes
    the very bytes the csv module writes for the whole row, ``called_from`` the scheduler's
    address (quoted where it needs it: then every row goes through the csv module). A task
    without a state (a key the scheduler never knew) has empty prefix and group: its batch goes
    row by row, the same bytes."""
    from metaprov.capture._files import SchedulerTransitionSink

    full = [_scheduler_row(k, j) for j, k in enumerate(_AWKWARD_KEYS * 3)]
    full = [(*r[:8], address, *r[9:]) for r in full]

    def state_only(r: tuple) -> bool:
        return all(r[i] is None for i in (1, 2, 9, 10, 11, 12))

    expected = []
    for j, r in enumerate(full):
        if state_only(r) and j % 7 == 3:
            r = (("decoded", r[0]), None, None, None, None, *r[5:])  # no task state
        expected.append(r)
    got = [_compact(r) if state_only(r) else r for r in expected]
    assert sum(len(r) == 7 for r in got) >= 8
    ref = CsvSink(tmp_path / "ref.csv", SCHEDULER_TRANSITION, index=True, flush_rows=5)
    sink = SchedulerTransitionSink(tmp_path / "s.csv", address, flush_rows=5)
    for a, b in zip(expected, got, strict=True):
        ref.append(a)
        sink.append(b)
    ref.close()
    sink.close()
    assert (tmp_path / "s.csv").read_bytes() == (tmp_path / "ref.csv").read_bytes()
    with (tmp_path / "s.csv").open(newline="", encoding="utf-8") as fh:
        back = list(csv.reader(fh))[1:]
    assert back[0][1:6] == ["inc-1", "", "", "p,x", 'g"1']
    assert back[0][9] == address
    stateless = [r for r in back if r[1].startswith("('decoded', ")]
    assert stateless and all(r[4:6] == ["", ""] and r[9] == address for r in stateless)


#: Keys as Dask hands them to the hooks (the hooks buffer them as they are; their text is made at
#: the flush): tuples of text and numbers, with the characters that need quoting.
_TUPLE_KEYS = [
    ("x-9f", 3, 0),
    ("a,b", 1),
    ('say "hi"', 2.5),
    ("line\nbreak", -1),
    ("caf\u00e9", 10**20),
    (),
]


@pytest.mark.parametrize(("columns", "fast", "make"), _FORMATTERS)
def test_keys_given_as_tuples_are_written_as_their_text(tmp_path, columns, fast, make):
    """A tuple key buffered as Dask gave it is written as ``str(key)`` quoted as the csv module
    quotes it, by the fast path exactly as by the csv module (which writes ``str()`` of it)."""
    rows = [make(k, j) for j, k in enumerate(_TUPLE_KEYS * 3)]
    texts = [(str(r[0]), *r[1:]) for r in rows]
    for index in (True, False):
        ref = CsvSink(tmp_path / f"ref{index}.csv", columns, index=index, flush_rows=4)
        quick = CsvSink(
            tmp_path / f"q{index}.csv", columns, index=index, flush_rows=4, **_formatter(fast)
        )
        for r, text in zip(rows, texts, strict=True):
            ref.append(text)
            quick.append(r)
        ref.close()
        quick.close()
        got = (tmp_path / f"q{index}.csv").read_bytes()
        assert got == (tmp_path / f"ref{index}.csv").read_bytes()
        assert b"\"('x-9f', 3, 0)\"" in got  # a tuple's text holds ", ": always quoted


class _NoText:
    def __str__(self) -> str:
        raise ValueError("no text")

    __repr__ = __str__  # a tuple's text is made of its items' repr


def test_a_key_without_text_loses_only_its_own_row(tmp_path, caplog):
    """A key whose ``str()`` fails at the flush (Dask never hands one; a plugin must not trust
    that) costs its row, logged; the rows around it are written and the index runs on."""
    good = [
        ("a", "ready", "executing", "tcp://w:1", 1.5),
        (("b", 1), "ready", "memory", "tcp://w:1", 2.5),
    ]
    rows = [good[0], (_NoText(), "ready", "executing", "tcp://w:1", 2.0), good[1]]
    for fast in (worker_transitions, None):
        path = tmp_path / f"t{fast is None}.csv"
        sink = CsvSink(path, WORKER_TRANSITION, index=True, **_formatter(fast))
        for r in rows:
            sink.append(r)
        with caplog.at_level("WARNING", logger="metaprov.capture"):
            sink.close()
        assert path.read_text().splitlines() == [
            ",key,start,finish,called_from,time",
            "0,a,ready,executing,tcp://w:1,1.5",
            "1,\"('b', 1)\",ready,memory,tcp://w:1,2.5",
        ]
        assert sink.rows == 2
        assert f"a row of {path.name} not recorded" in caplog.text


def test_keys_that_compare_equal_keep_their_own_text(tmp_path):
    """A key's cell is remembered by the key object itself (it recurs over its task's rows):
    keys that merely compare equal (``("x", 1)`` and ``("x", 1.0)``) keep their own text, and a
    tuple holding something without text costs its row only."""
    a, b = ("x", 1), ("x", 1.0)
    bad = ("y", _NoText())
    rows = [(k, "ready", "executing", "tcp://w:1", 1.5) for k in (a, b, a, bad, b, "x")]
    path = tmp_path / "t.csv"
    sink = CsvSink(path, WORKER_TRANSITION, index=False, batch=worker_transitions)
    for r in rows:
        sink.append(r)
    sink.close()
    assert [line.split(",ready")[0] for line in path.read_text().splitlines()[1:]] == [
        "\"('x', 1)\"",
        "\"('x', 1.0)\"",
        "\"('x', 1)\"",
        "\"('x', 1.0)\"",
        "x",
    ]


def _sched_row(key, start, finish, t):
    return (key, None, None, "p", "p-1", start, finish, "s-1", "tcp://s:1", *[None] * 4, t)


@pytest.mark.parametrize(
    ("batch", "make"),
    [
        (worker_transitions, lambda k, a, b, t: (k, a, b, "tcp://w:1", t)),
        (scheduler_transitions, _sched_row),
    ],
)
def test_a_keys_cached_text_lives_until_its_task_is_forgotten(tmp_path, batch, make):
    """The text of a key is made once for all its task's rows, however far apart they come
    (a 10^4-task graph's first and last rows are seconds and thousands of rows apart), and
    dropped with the task's ``forgotten`` row: the cache holds the tasks the process still
    knows, not every key it ever saw. A key submitted again after it was forgotten, as an equal
    but new object, gets its text anew."""
    _files._KEY_CELLS.clear()
    keys = [("k", i) for i in range(20_000)]  # more tasks than any earlier bound (8,192)
    sink = CsvSink(
        tmp_path / "a.csv",
        WORKER_TRANSITION if batch is worker_transitions else SCHEDULER_TRANSITION,
        index=True,
        flush_rows=10**6,
        batch=batch,
    )
    for k in keys:
        sink.append(make(k, "released", "waiting", 1.0))
    sink.flush()
    assert len(_files._KEY_CELLS) == len(keys)
    made = {id(k): _files._KEY_CELLS[id(k)][1] for k in keys}
    for k in keys:
        sink.append(make(k, "waiting", "processing", 2.0))
    sink.flush()
    # the same strings, not new ones: each key's text was made once
    assert all(_files._KEY_CELLS[id(k)][1] is made[id(k)] for k in keys)
    for k in keys[:15_000]:
        sink.append(make(k, "released", "forgotten", 3.0))
    sink.flush()
    assert len(_files._KEY_CELLS) == 5_000
    again = ("k", 0)  # equal to a forgotten key, a new object
    sink.append(make(again, "released", "waiting", 4.0))
    sink.close()
    last = (tmp_path / "a.csv").read_text().splitlines()[-1]
    assert last.startswith("55000,\"('k', 0)\",")
    assert _files._KEY_CELLS[id(again)][0] is again


# -- the workers' part files: typed columns, CSV text made at the merge -------------------------


def _merged(path, columns):
    """A part file's rows as the merge writes them (no index column): its cells' text, each
    line as the csv module writes it (a carriage return quoted too, as the merge does)."""
    from metaprov.ingest.parts import read_part

    got = read_part(path, columns)
    assert got.cut_bytes == 0 and not got.notes, got.notes
    frame = got.frame
    lines = [_files.csv_line(frame.columns)]
    lines += [_files.csv_line(r) for r in frame.itertuples(index=False, name=None)]
    return "".join(lines)


def test_a_carriage_return_in_a_cell_is_quoted_so_every_row_reads_back(tmp_path):
    """The csv module (and pandas) leave a bare carriage return unquoted with ``\\n`` line
    ends, and every CSV reader ends the row there: a task keyed ``"odd\\rkey"`` cost the capture
    rows in every file. The capture's files (specialised formatters, the csv-module path, the
    merge of the workers' parts) quote such a cell, and every row reads back whole."""
    from metaprov.ingest.parts import write_merged

    rows = [("odd\rkey", "ready", "executing", "tcp://w:1", 1.5), ("plain", "a\rb", "c", "d", 2.0)]
    fast = CsvSink(
        tmp_path / "fast.csv", WORKER_TRANSITION, index=True, batch=_files.worker_transitions
    )
    slow = CsvSink(tmp_path / "slow.csv", WORKER_TRANSITION, index=True)
    for r in rows:
        fast.append(r if r[1] == "ready" else (r[0], "ready", *r[2:]))  # states: Dask's names
        slow.append(r)
    fast.close()
    slow.close()
    merged = tmp_path / "merged.csv"
    frame = pd.DataFrame([[str(c) for c in r] for r in rows], columns=list(WORKER_TRANSITION))
    assert write_merged([frame], merged) == 2
    plain = tmp_path / "plain.csv"
    assert write_merged([frame.iloc[[0]].replace("odd\rkey", "odd-key")], plain) == 1
    assert plain.read_text() == (
        frame.iloc[[0]].replace("odd\rkey", "odd-key").to_csv(lineterminator="\n")
    )  # no carriage return: pandas' own bytes
    for path in (tmp_path / "fast.csv", tmp_path / "slow.csv", merged):
        text = path.read_bytes().decode("utf-8")
        assert '"odd\rkey"' in text, path.name
        back = pd.read_csv(path, index_col=0, dtype=str, keep_default_na=False)
        assert back["key"].tolist() == ["odd\rkey", "plain"], path.name
        if (
            path != tmp_path / "fast.csv"
        ):  # states are Dask's names: the formatter never quotes them
            assert '"a\rb"' in text, path.name
            assert back["start"].tolist() == ["ready", "a\rb"], path.name
        with path.open(newline="", encoding="utf-8") as fh:
            assert len(list(csv.reader(fh))) == 3, path.name


def _result_row(key, j: int) -> tuple:
    t = 1795000000.0 + j / 7
    variants = [
        (key, "tcp://10.0.0.1:4000", t, "memory", "numpy.ndarray", 8_000_000, None, None, None, t),
        (key, "tcp://10.0.0.1:4000", None, "error", None, None, "ValueError", '"bad, x"', "", t),
        (key, "tcp://10.0.0.1:4000", t, "memory", "int", 2**70, None, None, None, t),
    ]
    return variants[j % len(variants)]


#: Each worker table and a maker of its rows (key, position): awkward cells, every optional
#: cell present and absent, numbers of every kind Python and numpy give.
_WORKER_ROWS = [
    (WORKER_TRANSITION, 0, lambda k, j: (k, "ready", "executing", "tcp://10.0.0.1:4000", 1.5 + j)),
    (WORKER_EXECUTION, 0, _execution_row),
    (WORKER_TRANSFER, None, _transfer_row),
    (_files.WORKER_RESULT, 0, _result_row),
]


@pytest.mark.parametrize(("columns", "key", "make"), _WORKER_ROWS)
def test_part_files_merge_to_the_bytes_the_csv_module_writes(tmp_path, columns, key, make):
    """A worker's part file keeps its rows as typed columns (floats and ints binary); once
    merged, its text is byte for byte what the csv module writes of the same rows: every float
    its ``repr`` (-0.0, 5e-324, 1e16), ints beyond 64 bits, numpy numbers, bools, None, and keys
    that need quoting, given as text or as tuples (written as ``str(key)``)."""
    keys = [*_AWKWARD_KEYS, *_TUPLE_KEYS]
    rows = [make(k, j) for j, k in enumerate(keys * 2)]
    ref = CsvSink(tmp_path / "ref.csv", columns, index=False, flush_rows=3)
    part = PartSink(tmp_path / "p.arrows", columns, key=key, flush_rows=3)
    for r in rows:
        ref.append(r if key is None else (str(r[key]), *r[1:]))
        part.append(r)
    ref.close()
    part.close()
    assert part.rows == ref.rows == len(rows)
    assert _merged(tmp_path / "p.arrows", columns) == (tmp_path / "ref.csv").read_bytes().decode()


def test_a_column_of_floats_and_ints_keeps_each_as_it_was(tmp_path):
    """Dask's metric values are seconds and counts in one column: written as two typed columns
    (the ints under ``value#int``), read back as one, each cell as the csv module writes it."""
    cols = ("key", "value", "time")
    rows = [("a", 0.5, 1.0), ("b", 3, 2.0), ("c", None, 3.0), ("d", 2**53 + 1, 4.0)]
    part = PartSink(tmp_path / "p.arrows", cols, key=0)
    for r in rows[:3]:
        part.append(r)
    part.flush()
    part.append(rows[3])  # beyond a double's exact ints: a chunk of its own, as text
    part.close()
    assert _merged(tmp_path / "p.arrows", cols) == (
        "key,value,time\na,0.5,1.0\nb,3,2.0\nc,,3.0\nd,9007199254740993,4.0\n"
    )


def test_a_part_key_without_text_loses_only_its_own_row(tmp_path, caplog):
    rows = [
        ("a", "ready", "executing", "tcp://w:1", 1.5),
        (_NoText(), "ready", "executing", "tcp://w:1", 2.0),
        (("b", 1), "ready", "memory", "tcp://w:1", 2.5),
        (("y", _NoText()), "ready", "memory", "tcp://w:1", 3.0),
    ]
    part = PartSink(tmp_path / "t.arrows", WORKER_TRANSITION, key=0, finish=2)
    for r in rows:
        part.append(r)
    with caplog.at_level("WARNING", logger="metaprov.capture"):
        part.close()
    assert _merged(tmp_path / "t.arrows", WORKER_TRANSITION).splitlines() == [
        "key,start,finish,called_from,time",
        "a,ready,executing,tcp://w:1,1.5",
        "\"('b', 1)\",ready,memory,tcp://w:1,2.5",
    ]
    assert part.rows == 2
    assert "2 row(s) of t.arrows not recorded" in caplog.text


def test_a_part_keys_text_is_made_once_and_dropped_when_its_task_is_forgotten(tmp_path):
    """As for the scheduler's file: a tuple key's text is made once for all its task's rows and
    dropped with its ``forgotten`` row; keys that merely compare equal keep their own text."""
    _files._KEY_TEXTS.clear()
    keys = [("k", i) for i in range(20_000)]
    part = PartSink(tmp_path / "t.arrows", WORKER_TRANSITION, key=0, finish=2, flush_rows=10**6)
    for k in keys:
        part.append((k, "released", "waiting", "tcp://w:1", 1.0))
    part.flush()
    made = {id(k): _files._KEY_TEXTS[id(k)][1] for k in keys}
    for k in keys:
        part.append((k, "waiting", "ready", "tcp://w:1", 2.0))
    part.flush()
    assert all(_files._KEY_TEXTS[id(k)][1] is made[id(k)] for k in keys)
    for k in keys[:15_000]:
        part.append((k, "released", "forgotten", "tcp://w:1", 3.0))
    part.flush()
    assert len(_files._KEY_TEXTS) == 5_000
    a, b = ("x", 1), ("x", 1.0)
    for k in (a, b, a):
        part.append((k, "ready", "executing", "tcp://w:1", 4.0))
    part.close()
    tail = _merged(tmp_path / "t.arrows", WORKER_TRANSITION).splitlines()[-3:]
    assert [line.split(",ready")[0] for line in tail] == [
        "\"('x', 1)\"",
        "\"('x', 1.0)\"",
        "\"('x', 1)\"",
    ]


def test_transition_part_buffers_columns_and_merges_to_the_csv_modules_bytes(tmp_path, caplog):
    """The workers' most numerous rows go to four column buffers (no tuple per row): whole rows
    and the hook's four appends interleave in order, a flush takes only rows complete in all
    four buffers, and the merged text is what the csv module writes of the same rows."""
    from metaprov.capture._files import TransitionPart

    addr = "tcp://10.0.0.1:4000"
    keys = [*_AWKWARD_KEYS, *_TUPLE_KEYS, _NoText()]
    rows = [(k, "ready", "executing", addr, 1795000000.0 + j / 7) for j, k in enumerate(keys)]
    ref = CsvSink(tmp_path / "ref.csv", WORKER_TRANSITION, index=False)
    part = TransitionPart(tmp_path / "t.arrows", addr, flush_rows=4)
    add_key, add_start, add_finish, add_time = part.adders
    for j, r in enumerate(rows):
        if not isinstance(r[0], _NoText):
            ref.append((str(r[0]), *r[1:]))
        if j % 2:
            part.append(r)  # whole rows flush when full
        else:
            add_key(r[0])
            add_start(r[1])
            add_finish(r[2])
            add_time(r[4])
    add_key("half")  # a row the hook is still appending: not flushed, not lost
    part.flush()
    assert part.rows == len(rows) - 1 + 1 and part.full is False
    add_start("ready")
    add_finish("memory")
    add_time(9.0)
    ref.append(("half", "ready", "memory", addr, 9.0))
    ref.close()
    with caplog.at_level("WARNING", logger="metaprov.capture"):
        part.close()
    assert "1 row(s) of t.arrows not recorded" in caplog.text  # the key without text
    assert part.rows == len(rows)  # written: every row but the key without text, and "half"
    got = _merged(tmp_path / "t.arrows", WORKER_TRANSITION)
    assert got == (tmp_path / "ref.csv").read_bytes().decode()
