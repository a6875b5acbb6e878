"""read_run on a synthetic run == the generator's truth, and == a per-row reference consolidation.

The reference below is deliberately naive: the ``csv`` module, ``ast.literal_eval`` (a literal
parser: it never runs code) and Python loops over rows, following the consolidation rules of
``docs/records.md`` one row at a time. It is slow and obviously correct; the vectorised ingest
must give exactly the same tasks table, so an optimisation cannot silently change a result.
"""

from __future__ import annotations

import ast
import csv
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

import metaprov
from metaprov.synthetic import generate_run, load_truth

RUNNING = {"executing", "long-running", "cancelled", "resumed"}
CONFIGS = {
    "plain": dict(),  # the generator's defaults: one graph, no failures
    "retries": dict(graphs=2, clients=2, erred_fraction=0.02, retried_fraction=0.03),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def run(request, tmp_path_factory) -> Path:
    return generate_run(
        tmp_path_factory.mktemp(request.param), 2000, seed=1, **CONFIGS[request.param]
    )


@pytest.fixture(scope="module")
def records(run: Path):
    return metaprov.read_run(run, darshan=False)


# ----------------------------------------------------------------------------- truth counts


def test_counts_equal_the_generators_truth(run: Path, records) -> None:
    truth = load_truth(run)
    tasks = records.tasks
    assert len(tasks) == truth["tasks"]
    assert tasks["key"].is_unique
    assert len(records.executions) == truth["executions"]
    observed = records.transitions["observer"].value_counts()
    assert observed.get("scheduler", 0) == truth["scheduler_transitions"]
    assert observed.get("worker", 0) == truth["worker_transitions"]
    assert records.transfers["transfer"].nunique() == truth["transfers"]
    acct = records.accounting.files["worker_transfer.csv"]
    assert acct.rows_read == truth["transfer_rows"]
    assert acct.rows_used == truth["transfer_rows_distinct"]
    assert sum(acct.not_used.values()) == truth["duplicate_transfer_rows"]
    assert len(records.dependencies) == truth["edges"]
    assert len(records.graphs) == truth["graphs"]
    assert len(records.workers) == truth["workers"]
    assert len(records.clients) == truth["clients"]
    assert len(records.threads) == truth["threads"]
    assert int(tasks["wanted"].sum()) == truth["wanted"]
    assert int(tasks["key"].str.startswith("(").sum()) == truth["tuple_keys"]
    assert int(tasks["retried"].sum()) == truth["retried"]
    assert int((tasks["state"] == "erred").sum()) == truth["erred"]
    for name, rows in truth["rows"].items():
        assert records.accounting.files[name].rows_read == rows, name


# ----------------------------------------------------------------------------- reference


def _rows(path: Path) -> list[tuple[int, dict[str, str]]]:
    """(file line, row) for every data row; empty cells are ''."""
    limit = csv.field_size_limit(2**31 - 1)  # a graph.csv cell holds a whole graph
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            return [(reader.line_num, row) for row in reader]
    finally:
        csv.field_size_limit(limit)


def _us(text: str) -> int | None:
    """Epoch seconds text -> integer microseconds (rounded half to even, as the ingest does)."""
    return round(float(text) * 1e6) if text else None


def _later(a: int | None) -> float:
    """Sort key of a time: a missing one is the latest."""
    return float("inf") if a is None else a


def reference_tasks(run: Path) -> dict[str, dict[str, object]]:
    """key -> worker, thread, start, end, state, nbytes, n_executions, one row at a time."""
    sched = _rows(run / "scheduler_transition.csv")
    work = _rows(run / "worker_transition.csv")
    keys: set[str] = {r["key"] for _, r in sched} | {r["key"] for _, r in work}
    for _, g in _rows(run / "graph.csv"):
        for k, deps in ast.literal_eval(g["dependencies"]).items():
            keys.add(str(k))
            keys.update(str(d) for d in deps)
        keys.update(str(k) for k in ast.literal_eval(g["keys"]))
    for _, t in _rows(run / "worker_transfer.csv"):
        keys.update(str(k) for k in ast.literal_eval(t["keys"]))

    # state: the scheduler's last transition (by time, then line), else a worker's
    state: dict[str, tuple] = {}
    for line, r in sched:
        at = (_later(_us(r["time"])), line)
        if r["key"] not in state or at >= state[r["key"]][0]:
            state[r["key"]] = (at, r["finish"])
    wstate: dict[str, tuple] = {}
    for line, r in work:
        at = (_later(_us(r["time"])), line)
        if r["key"] not in wstate or at >= wstate[r["key"]][0]:
            wstate[r["key"]] = (at, r["finish"])

    # result size: the last scheduler row carrying thread / startstops / size
    nbytes: dict[str, tuple] = {}
    for line, r in sched:
        if r["thread"] or r["begins"] or r["size"]:
            at = (_later(_us(r["time"])), line)
            if r["key"] not in nbytes or at >= nbytes[r["key"]][0]:
                nbytes[r["key"]] = (at, round(float(r["size"])) if r["size"] else None)

    # executions on workers: a start (-> executing) and the next event of the same key on the
    # same worker if that event ends it (running -> not running)
    events: dict[tuple[str, str], list] = defaultdict(list)
    for line, r in work:
        start = r["finish"] == "executing" and r["start"] not in RUNNING
        end = r["start"] in RUNNING and r["finish"] not in RUNNING
        if start or end:
            events[(r["key"], r["called_from"])].append(
                ((_later(_us(r["time"])), line), start, _us(r["time"]), line)
            )
    execs: dict[str, list[dict]] = defaultdict(list)
    for (key, worker), evs in events.items():
        evs.sort(key=lambda e: e[0])
        for i, (_, is_start, t, _line) in enumerate(evs):
            if not is_start:
                continue
            nxt = evs[i + 1] if i + 1 < len(evs) and not evs[i + 1][1] else None
            execs[key].append(dict(worker=worker, start=t, end=nxt[2] if nxt else None))
    # the thread of a worker-side execution: the scheduler's latest row for that key and worker
    thread_of: dict[tuple[str, str], tuple] = {}
    for line, r in sched:
        if r["thread"]:
            at = (_later(_us(r["time"])), line)
            k = (r["key"], r["worker"])
            if k not in thread_of or at >= thread_of[k][0]:
                thread_of[k] = (at, int(r["thread"]))
    for key, ex in execs.items():
        for e in ex:
            e["thread"] = thread_of.get((key, e["worker"]), (None, None))[1]
    # keys no worker ran: the scheduler's processing -> ... rows with a thread or startstops
    ran_on_workers = set(execs)
    for _, r in sched:
        if r["key"] in ran_on_workers:
            continue
        if r["start"] == "processing" and (r["thread"] or r["begins"]):
            execs[r["key"]].append(
                dict(
                    worker=r["worker"] or None,
                    thread=int(r["thread"]) if r["thread"] else None,
                    start=_us(r["begins"]),
                    end=_us(r["ends"]),
                )
            )

    out: dict[str, dict[str, object]] = {}
    for key in keys:
        ex = sorted(
            execs.get(key, []),
            key=lambda e: (_later(e["start"]), e["worker"] is None, e["worker"] or ""),
        )
        final = ex[-1] if ex else {}
        st = state.get(key) or wstate.get(key)
        out[key] = dict(
            worker=final.get("worker"),
            thread=final.get("thread"),
            start=final.get("start"),
            end=final.get("end"),
            state=st[1] if st else None,
            nbytes=nbytes[key][1] if key in nbytes else None,
            n_executions=len(ex),
        )
    return out


def _value(v: object) -> object:
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, pd.Timestamp):
        return v.value // 1000  # ns -> us
    if hasattr(v, "item"):  # numpy scalars
        return v.item()
    return v


def test_tasks_equal_a_per_row_reference(run: Path, records) -> None:
    ref = reference_tasks(run)
    tasks = records.tasks.set_index("key")
    assert sorted(tasks.index) == sorted(ref)
    cols = ["worker", "thread", "start", "end", "state", "nbytes", "n_executions"]
    mismatches = []
    for key, expected in ref.items():
        row = tasks.loc[key]
        got = {c: _value(row[c]) for c in cols}
        if got != expected:
            mismatches.append((key, got, expected))
    assert not mismatches, f"{len(mismatches)} tasks differ, e.g. {mismatches[:3]}"


def test_the_reference_sees_failures(run: Path, records) -> None:
    """The comparison above is not vacuous: retried runs have tasks with two executions."""
    ref = reference_tasks(run)
    retried = sum(1 for r in ref.values() if r["n_executions"] > 1)
    assert retried == load_truth(run)["retried"]
    assert sum(1 for r in ref.values() if r["start"] is not None) == len(ref)


# ----------------------------------------------------------------------------- literal parser tiers

_ATOMS = [
    "'a'", "'ab-c'", "'x y'", "'k:1'", "'{b}'", "'ü-键'", "1", "0", "-3", "007", "-0", "1.5",
    "12345678901234567", "('a', 1)", "('a', -1, 'b')", "('a',)", "( 'a', 1)", "('a',1)", '"q"',
    "'it\\'s'", "'\\\\'", "None", "True", "('a', ('b', 1))", "()", "('a', 1.5)", "x", "set",
    "'a''b'", "'", "'tab\tx'", "'nl\nx'", "(1, 2)",
]  # fmt: skip


def _random_column(rng, shape: str) -> list[str | None]:
    def atom() -> str:
        return rng.choice(_ATOMS[:8] * 4 + _ATOMS)

    def sep(s: str) -> str:
        return s if rng.random() < 0.9 else rng.choice([",", " , ", ":", "  ", "", "\t", "\n"])

    def cell() -> str:
        if rng.random() < 0.05:
            return rng.choice(["", " ", "set()", "{}", "{", "}", "set ()", "{'a'}", "{5}"])
        k = rng.randint(0, 4)
        if shape == "set":
            c = "{" + sep(", ").join(atom() for _ in range(k)) + "}" if k else "set()"
        elif shape == "dict_int":
            vals = ["1", "336", "-5", "0", "1e3", "'v'", "007"] + ["42"] * 8
            c = "{" + sep(", ").join(atom() + sep(": ") + rng.choice(vals) for _ in range(k)) + "}"
        else:

            def deps() -> str:
                m = rng.randint(0, 3)
                return "{" + sep(", ").join(atom() for _ in range(m)) + "}" if m else "set()"

            c = "{" + sep(", ").join(atom() + sep(": ") + deps() for _ in range(k)) + "}"
        if rng.random() < 0.05:  # a stray character anywhere
            i = rng.randrange(len(c) + 1)
            c = c[:i] + rng.choice("'(){},: \"x") + c[i:]
        return c

    return [cell() if rng.random() > 0.05 else None for _ in range(rng.randint(1, 10))]


@pytest.mark.parametrize("slice_bytes", [3, 1 << 23])
def test_literal_tiers_agree(monkeypatch, slice_bytes: int) -> None:
    """The byte scanner (tier 1) only accepts cells it reads exactly as the regex tier would."""
    import random

    from metaprov.ingest import literals

    monkeypatch.setattr(literals, "_SLICE", slice_bytes)  # words, strings across slice ends
    rng = random.Random(slice_bytes)
    accepted = 0
    for _ in range(150):
        shape = rng.choice(["set", "dict_int", "deps"])
        cells = pd.Series(_random_column(rng, shape), dtype=object)
        both = literals.parse_cells(cells, shape)
        p, section, by_cell = literals._parse_regex(cells, shape)
        order = literals._order(p.cell, section, by_cell)
        assert both.cell.tolist() == p.cell[order].tolist(), cells.tolist()
        assert both.key.tolist() == p.key[order].tolist(), cells.tolist()
        got, want = both.value.tolist(), p.value[order].tolist()
        assert [None if v != v else v for v in got] == [None if v != v else v for v in want]
        assert both.bad_cells.tolist() == p.bad_cells.tolist()
        assert both.bad_detail == p.bad_detail
        accepted += int(literals._scan(literals._as_large_string(cells), shape)[0].sum())
    assert accepted > 100  # tier 1 did read a good share of the cells
