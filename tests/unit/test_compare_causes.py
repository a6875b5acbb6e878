"""metaprov compare's causes of sick runs, on timelines written down by hand: the scheduler
holding ready work back, data (de)serialised between workers, workers spilling to disk, workers
lost mid-run; the parallelism noise against half the workers lost; a campaign's text.

Each schedule is small enough that the right answer is known, and every answer must still add
up to the difference.
"""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
from test_compare import T0, chain, timeline

from metaprov.analysis.compare import CAUSES, explain
from metaprov.analysis.timeline import Timeline, blame, dispatch_and_losses
from metaprov.compare import compare
from metaprov.compare.render import cause_phrase, explanation_lines
from metaprov.timeutil import NAT_US


def us(s: float) -> int:
    return T0 + round(s * 1e6)


def _adds_up(ex) -> None:
    assert ex.causes["seconds"].sum() == pytest.approx(ex.difference_s, abs=1e-9)
    assert set(ex.causes["cause"]) <= set(CAUSES)


def test_new_cause_names() -> None:
    for name in ("transfers", "serialisation", "spill", "scheduler", "lost-workers"):
        assert name in CAUSES


def test_dispatch_and_losses_from_transitions() -> None:
    tr = pd.DataFrame(
        {
            "key": ["a", "a", "b", "b", "b", "c"],
            "observer": ["scheduler"] * 5 + ["worker"],
            "from_state": ["waiting", "processing", "waiting", "memory", "waiting", "released"],
            "to_state": ["processing", "memory", "processing", "released", "processing", "waiting"],
            "time": [us(1), us(2), us(3), us(4), us(5), us(6)],
            "stimulus_id": ["x", "x", "x", "handle-worker-cleanup-17.2", "y", None],
        }
    )
    dispatched, lost, n, first = dispatch_and_losses(tr)
    assert dispatched.to_dict() == {"a": us(1), "b": us(3)}  # the first hand-out
    assert lost.to_dict() == {"b": us(4)}  # taken back from a lost worker
    assert n == 5 and first == us(1)


def _chain_dispatched(delay: float, label: str, n: int = 6, d: float = 0.1) -> Timeline:
    """A chain whose every task reaches the scheduler's ``processing`` ``delay`` s after its
    dependency ended (then starts at once)."""
    rows, deps, disp, t = [], [], {}, 0.0
    for j in range(n):
        if j:
            t += delay
            deps.append((str(j), str(j - 1)))
        disp[str(j)] = us(t)
        rows.append((str(j), "step", "w1", t, t + d))
        t += d
    tl = timeline(rows, label=label, deps=deps, workers={"w1": 4})
    tl.dispatched = pd.Series(disp, dtype="int64")
    tl.scheduler_transitions = 4 * n
    return tl


def test_a_slow_scheduler_is_the_scheduler() -> None:
    ex = explain(blame(_chain_dispatched(0.0, "fast")), blame(_chain_dispatched(0.2, "slow")))
    _adds_up(ex)
    assert ex.difference_s == pytest.approx(1.0)
    assert ex.top["cause"] == "scheduler"
    assert ex.totals["scheduler"] == pytest.approx(1.0, abs=1e-6)
    assert ex.totals["waiting"] == pytest.approx(0.0, abs=1e-6)
    assert ex.top["evidence"]["dispatch_s"] == pytest.approx([0.0, 1.0])
    assert "not yet handed to a worker" in explanation_lines(ex)[0]


def _opening(graph: float, first: float, label: str) -> Timeline:
    """A 3-task chain whose scheduler had the graph ``graph`` s in and handed out the first
    task ``first`` s in (a worker up from the start)."""
    tl = chain(3, 0.1, label=label)
    shift = pd.Series([round(first * 1e6)] * len(tl.executions))
    tl.executions["start"] += shift.to_numpy()
    tl.executions["end"] += shift.to_numpy()
    tl.start, tl.end = T0, int(tl.executions["end"].max())
    tl.submitted = pd.Series({"0": T0}, dtype="int64")
    tl.dispatched = pd.Series({"0": us(first), "1": us(first + 0.1), "2": us(first + 0.2)})
    tl.workers["added"] = T0
    tl.scheduler_first = T0 + round(graph * 1e6)
    return tl


def test_the_scheduler_before_the_first_task_is_not_startup() -> None:
    """The graph arrived, a worker was up, the first task was handed out 0.5 s later."""

    def run(late: float, label: str) -> Timeline:
        return _opening(0.001, late, label)  # the scheduler had the graph 1 ms in

    ex = explain(blame(run(0.0, "a")), blame(run(0.5, "b")))
    _adds_up(ex)
    assert ex.top["cause"] == "scheduler"
    assert ex.totals["scheduler"] == pytest.approx(0.499, abs=1e-6)
    assert ex.totals["startup"] == pytest.approx(0.001, abs=1e-6)
    bl = blame(run(0.5, "b"))
    assert bl.parts_total == pytest.approx(bl.makespan, abs=1e-9)
    assert bl.startup_sched == pytest.approx(0.499) and bl.startup == pytest.approx(0.001)


def test_the_opening_trading_seconds_between_startup_and_dispatch_is_no_cause() -> None:
    """Two recordings of one workflow: in the first the scheduler had the graph 0.02 s in and
    started the first task 0.12 s in; in the second it had the graph 0.12 s in and started at
    once (as CI saw). The same opening, split at another point: neither startup nor scheduler
    is named. The same dispatch delay with no trade (the graph in at the same time) still is."""

    run = _opening
    ex = explain(blame(run(0.02, 0.12, "a")), blame(run(0.12, 0.12, "b")))
    _adds_up(ex)
    named = ex.causes.loc[ex.causes["significant"], "cause"].tolist()
    assert ex.totals["scheduler"] == pytest.approx(-0.1, abs=1e-6)
    assert ex.totals["startup"] == pytest.approx(0.1, abs=1e-6)
    assert "scheduler" not in named and "startup" not in named, ex.causes
    # no trade: the graph in at 0.02 s both times, the first task 0.5 s later in the second
    ex = explain(blame(run(0.02, 0.12, "a")), blame(run(0.02, 0.62, "b")))
    assert ex.top["cause"] == "scheduler" and ex.causes.iloc[0]["significant"]


def _moved(xfer: float, ser: float | None, label: str, nbytes: int = 1_000_000) -> Timeline:
    """``a`` on w0, then ``b`` on w1 after ``a``'s result moved for ``xfer`` seconds, of which
    ``ser`` were spent (de)serialising it (fine metrics; None: not recorded)."""
    rows = [("a", "load", "w0", 0.0, 0.1), ("b", "use", "w1", 0.1 + xfer, 0.2 + xfer)]
    tl = timeline(
        rows,
        label=label,
        deps=[("b", "a")],
        workers={"w0": 1, "w1": 1},
        transfers=[("a", "w1", 0.1, 0.1 + xfer, nbytes)],
    )
    if ser is not None:
        tl.activity = pd.DataFrame(
            {
                "worker": ["w0", "w1", "w1"],
                "prefix": [None, None, "use"],
                "context": ["get-data", "gather-dep", "execute"],
                "activity": ["serialize", "deserialize", "thread-cpu"],
                "unit": ["seconds"] * 3,
                "value": [ser * 0.75, ser * 0.25, 0.1],
            }
        )
    return tl


def test_slow_pickling_is_serialisation_not_transfers() -> None:
    ex = explain(blame(_moved(0.1, 0.0, "a")), blame(_moved(0.5, 0.4, "b")))
    _adds_up(ex)
    assert ex.top["cause"] == "serialisation"
    assert ex.totals["serialisation"] == pytest.approx(0.4, abs=1e-6)
    assert ex.totals["transfers"] == pytest.approx(0.0, abs=1e-6)
    assert ex.top["evidence"]["serialisation_s"] == pytest.approx([0.0, 0.4])
    assert ex.top["evidence"]["bytes_moved"] == [1_000_000, 1_000_000]
    assert "0.4 s vs 0 s spent (de)serialising" in cause_phrase(ex.top)


def test_without_fine_metrics_slow_moves_are_transfers_with_their_bytes() -> None:
    ex = explain(blame(_moved(0.1, None, "a")), blame(_moved(0.5, None, "b", 40_000_000)))
    _adds_up(ex)
    assert ex.top["cause"] == "transfers" and ex.top["prefix"] == "use"
    assert ex.totals["transfers"] == pytest.approx(0.4, abs=1e-6)
    assert "serialisation" not in set(ex.causes["cause"])
    assert "0.5 s vs 0.1 s of transfers" in cause_phrase(ex.top)


def _moved_chain(
    moves: list[float], ser_share: float | None, label: str, nbytes: int = 1_000_000
) -> Timeline:
    """A chain ``s-0`` .. ``s-n`` alternating between two workers, each step's input
    (``nbytes``) moving for ``moves[i]`` seconds, ``ser_share`` of all that time
    (de)serialising (fine metrics; None: not recorded)."""
    rows, deps, transfers, t = [("s-0", "s", "w0", 0.0, 0.1)], [], [], 0.1
    for i, x in enumerate(moves, 1):
        w = f"w{i % 2}"
        transfers.append((f"s-{i - 1}", w, t, t + x, nbytes))
        rows.append((f"s-{i}", "s", w, t + x, t + x + 0.1))
        deps.append((f"s-{i}", f"s-{i - 1}"))
        t += x + 0.1
    tl = timeline(rows, label=label, deps=deps, workers={"w0": 1, "w1": 1}, transfers=transfers)
    if ser_share is not None:
        tl.activity = pd.DataFrame(
            {
                "worker": ["w1"],
                "prefix": [None],
                "context": ["gather-dep"],
                "activity": ["deserialize"],
                "unit": ["seconds"],
                "value": [ser_share * sum(moves)],
            }
        )
    return tl


def test_the_transfers_noise_is_in_the_units_of_the_transfers_row() -> None:
    """The spread of the tasks' transfer shares is the noise of the transfers row; with half
    of the moving time taken out as serialisation, half of that spread is left with the row
    (it was the row's noise in seconds of transfer time, not of what the row keeps)."""
    base, slow = [0.01] * 6, [0.3, 0.25, 0.35, 0.3, 0.28, 0.32]  # 40x the bytes moved

    def pair(ser: float | None):
        return explain(
            blame(_moved_chain(base, ser, "a")), blame(_moved_chain(slow, ser, "b", 40_000_000))
        )

    plain, half = pair(None), pair(0.5)
    _adds_up(half)

    def row(ex):
        return ex.causes[ex.causes["cause"] == "transfers"].iloc[0]

    assert row(half)["seconds"] == pytest.approx(row(plain)["seconds"] / 2, rel=1e-6)
    assert row(half)["noise"] == pytest.approx(row(plain)["noise"] / 2, rel=1e-6)
    assert row(half)["significant"] and row(plain)["significant"]


def _spilling(disk: float, label: str) -> Timeline:
    """Two tasks on one single-thread worker; ``b`` is ready when ``a`` ends but waits
    ``disk`` seconds while the worker writes spilled data to disk."""
    rows = [("a", "make", "w1", 0.0, 0.1), ("b", "use", "w1", 0.1 + disk, 0.2 + disk)]
    tl = timeline(rows, label=label, deps=[("b", "a")], workers={"w1": 1})
    tl.activity = pd.DataFrame(
        {
            "worker": ["w1", "w1"],
            "prefix": ["make", "make"],
            "context": ["execute", "execute"],
            "activity": ["disk-write", "disk-write"],
            "unit": ["seconds", "bytes"],
            "value": [disk, 50e6 if disk else 0.0],
        }
    )
    tl.memory = pd.DataFrame(
        {
            "worker": ["w1"],
            "time": [us(0.1)],
            "managed": [0],
            "unmanaged": [0],
            "spilled": [int(50e6) if disk else 0],
            "paused": [False],
        }
    )
    return tl


def test_spilling_is_spill_not_waiting() -> None:
    ex = explain(blame(_spilling(0.0, "a")), blame(_spilling(0.6, "b")))
    _adds_up(ex)
    assert ex.top["cause"] == "spill"
    assert ex.totals["spill"] == pytest.approx(0.6, abs=1e-6)
    assert ex.totals["waiting"] == pytest.approx(0.0, abs=1e-6)
    assert ex.top["evidence"]["spilled_bytes"] == [0, 50_000_000]
    assert "50.0 MB vs 0 B written" in cause_phrase(ex.top)


def test_a_lost_worker_is_lost_workers() -> None:
    """Four one-second tasks on two workers; in the other run w2 dies at 0.5 s, the scheduler
    takes its task back and w1 runs it again (work redone, capacity lost)."""

    def run(lose: bool, label: str) -> Timeline:
        if not lose:
            rows = [
                ("t0", "work", "w1", 0.0, 1.0),
                ("t1", "work", "w2", 0.0, 1.0),
                ("t2", "work", "w1", 1.0, 2.0),
                ("t3", "work", "w2", 1.0, 2.0),
            ]
            return timeline(rows, label=label, workers={"w1": 1, "w2": 1})
        rows = [
            ("t0", "work", "w1", 0.0, 1.0),
            ("t1", "work", "w2", 0.0, 0.5, True, 0),  # its result died with w2
            ("t2", "work", "w1", 1.0, 2.0),
            ("t1", "work", "w1", 2.0, 3.0, True, 1),
            ("t3", "work", "w1", 3.0, 4.0),
        ]
        tl = timeline(rows, label=label, workers={"w1": 1, "w2": 1})
        tl.workers.loc[tl.workers["address"] == "w2", "removed"] = us(0.5)
        tl.lost = pd.Series({"t1": us(0.5)}, dtype="int64")
        return tl

    ex = explain(blame(run(False, "a")), blame(run(True, "b")))
    _adds_up(ex)
    assert ex.difference_s == pytest.approx(2.0)
    assert ex.top["cause"] == "lost-workers"
    ev = ex.top["evidence"]
    assert ev["workers_lost"] == [0, 1] and ev["tasks_lost"] == [0, 1]
    assert ev["redone_s"] == pytest.approx([0.0, 0.5])
    assert ex.totals["lost-workers"] > 1.0
    assert "1 vs 0 worker(s) lost" in cause_phrase(ex.top)


def test_losing_half_the_slots_is_named_whatever_the_waiting() -> None:
    """Many short tasks queued (lots of waiting in both runs) on 4 then 2 slots: the change of
    capacity is not hidden by the waiting's jitter."""

    def run(threads: int, label: str) -> Timeline:
        rows = [
            (
                f"t{i}",
                "work",
                "w1",
                (i // threads) * 0.1,
                (i // threads) * 0.1 + 0.1,
                True,
                0,
                i % threads,
            )
            for i in range(40)
        ]
        tl = timeline(rows, label=label, workers={"w1": threads})
        tl.submitted = pd.Series({f"t{i}": T0 for i in range(40)}, dtype="int64")
        return tl

    ex = explain(blame(run(4, "four")), blame(run(2, "two")))
    _adds_up(ex)
    assert ex.top["cause"] == "parallelism" and ex.top["significant"]
    par = ex.causes[ex.causes["cause"] == "parallelism"].iloc[0]
    assert par["noise"] < par["seconds"]


def test_no_change_names_none_of_the_new_causes() -> None:
    ex = explain(blame(_chain_dispatched(0.01, "a")), blame(_chain_dispatched(0.01, "b")))
    _adds_up(ex)
    assert ex.top is None


# -- the campaign's text --------------------------------------------------------------------------


def test_campaign_text_has_no_nan_and_hides_no_larger_cause() -> None:
    runs = [chain(6, d, label=f"r{i}") for i, d in enumerate([0.1, 0.1, 0.1, 0.1, 0.3])]
    c = compare(runs, baseline="median")
    text = c.text()
    assert "nan" not in text
    assert "(none above the noise)" in text  # the unchanged runs
    assert c.to_dict()["runs"][1]["top_cause"] in (None, "baseline")


def test_a_larger_cause_in_the_other_direction_is_shown() -> None:
    """Ranked in the direction of the difference, a large negative cause comes last: it is
    said, not summarised as 'smaller'."""
    rows = [
        ("compute", 5.0, "a"),
        ("compute", 4.0, "b"),
        ("waiting", 3.0, "c"),
        ("transfers", 2.0, "d"),
        ("retries", 1.5, "e"),
        ("compute", -19.6, "f"),
    ]
    causes = pd.DataFrame(
        [
            {
                "cause": c,
                "seconds": s,
                "noise": 0.1,
                "significant": True,
                "prefix": p,
                "worker": None,
                "file": None,
                "evidence": {},
            }
            for c, s, p in rows
        ]
    )
    ex = SimpleNamespace(difference_s=-4.1, other="o", baseline="b", causes=causes, evidence=[])
    lines = explanation_lines(ex, top=3, table_shown=False)
    text = "\n".join(lines)
    assert "19.6 s less compute in `f`" in text
    assert "(2 smaller cause(s) above the noise: `metaprov compare b o` lists them)" in text
    assert "see the table above" not in text


def test_json_names_of_a_sick_pair() -> None:
    c = compare([_spilling(0.0, "a"), _spilling(0.6, "b")])
    d = c.to_dict()
    names = {r["cause"] for r in d["causes"]}
    assert "spill" in names and names <= set(CAUSES)
    assert d["totals"]["spill"] == pytest.approx(0.6, abs=1e-6)
    assert sum(r["seconds"] for r in d["causes"]) == pytest.approx(d["difference_s"], abs=1e-9)


def test_nat_dispatch_is_ignored() -> None:
    tl = _chain_dispatched(0.1, "a")
    tl.dispatched = pd.Series({"1": NAT_US}, dtype="int64")
    bl = blame(tl)
    assert bl.parts_total == pytest.approx(bl.makespan, abs=1e-9)
    assert bl.executions["sched"].sum() == pytest.approx(0.0)


def test_the_page_carries_each_cause_with_its_evidence(tmp_path) -> None:
    pytest.importorskip("bokeh")
    from metaprov.compare.page import write_page

    c = compare([_spilling(0.0, "a"), _spilling(0.6, "b")])
    html = write_page(c, tmp_path / "p.html").read_text()
    assert "what and evidence" in html
    assert "held up by workers spilling to disk" in html and "50.0 MB vs 0 B written" in html


def test_more_tasks_dispatch_goes_with_their_compute() -> None:
    """Twice the tasks, each handed out as slowly as before: more work, not a slower scheduler."""
    ex = explain(blame(_chain_dispatched(0.1, "a", n=4)), blame(_chain_dispatched(0.1, "b", n=8)))
    _adds_up(ex)
    assert ex.top["cause"] == "compute" and ex.top["prefix"] == "step"
    assert abs(ex.totals["scheduler"]) < 0.11  # the chain's first task has no dispatch wait
