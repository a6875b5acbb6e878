"""metaprov compare over timelines built in code: the shares add up, alignment rules, causes.

Schedules are written down by hand (or drawn at random), so the right answer is known: a chain
made slower by x seconds per task is x seconds of compute per task; the same work on half the
thread slots is parallelism; a worker whose tasks run longer is that worker.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from metaprov.analysis.compare import CAUSES, align, explain
from metaprov.analysis.timeline import Timeline, blame
from metaprov.compare import compare
from metaprov.compare.render import comparison_dict, explanation_lines
from metaprov.errors import InputError, UsageError
from metaprov.timeutil import NAT_US

T0 = 1_700_000_000_000_000  # µs


def timeline(
    rows: list[tuple],
    *,
    label: str = "run",
    workers: dict[str, int | None] | None = None,
    deps: list[tuple[str, str]] = (),
    transfers: list[tuple] = (),
    start: float = 0.0,
    end: float | None = None,
    transitions: bool = True,
) -> Timeline:
    """rows: (key, prefix, worker, start_s, end_s[, ok[, attempt[, thread]]])."""
    recs = []
    for r in rows:
        key, prefix, worker, s, e = r[:5]
        ok = r[5] if len(r) > 5 else True
        attempt = r[6] if len(r) > 6 else 0
        thread = r[7] if len(r) > 7 else 1
        recs.append(
            (key, prefix, attempt, worker, thread, T0 + round(s * 1e6), T0 + round(e * 1e6), ok)
        )
    ex = pd.DataFrame(
        recs, columns=["key", "prefix", "attempt", "worker", "thread", "start", "end", "ok"]
    )
    ex["thread"] = pd.array(ex["thread"], dtype="UInt64")
    ex["key"] = ex["key"].astype(object)
    workers = workers or {w: 1 for w in sorted(set(ex["worker"]))}
    w = pd.DataFrame(
        {
            "address": list(workers),
            "host": ["h"] * len(workers),
            "threads": pd.array(list(workers.values()), dtype="Int64"),
            "added": [NAT_US] * len(workers),
            "removed": [NAT_US] * len(workers),
        }
    )
    last = max(r[4] for r in rows)
    return Timeline(
        label=label,
        run_id=label,
        start=T0 + round(start * 1e6),
        end=T0 + round((end if end is not None else last) * 1e6),
        executions=ex,
        dependencies=pd.DataFrame(list(deps), columns=["key", "dependency"], dtype=object),
        transfers=pd.DataFrame(
            [
                (k, "a", d, T0 + round(s * 1e6), T0 + round(e * 1e6), n)
                for k, d, s, e, n in transfers
            ],
            columns=["key", "source", "destination", "start", "stop", "nbytes"],
        ),
        workers=w,
        submitted=pd.Series([], dtype="int64"),
        io=pd.DataFrame(columns=["key", "attempt", "path", "op", "bytes", "seconds"]),
        has_transitions=transitions,
    )


def chain(
    n: int, d: float, *, label: str, prefix: str = "step", gap: float = 0.0, key=str
) -> Timeline:
    rows, deps, t = [], [], 0.0
    for j in range(n):
        rows.append((key(j), prefix, "w1", t, t + d))
        if j:
            deps.append((key(j), key(j - 1)))
        t += d + gap
    return timeline(rows, label=label, deps=deps, workers={"w1": 4})


def random_timeline(rng: np.random.Generator, label: str, n: int = 60) -> Timeline:
    rows = []
    for i in range(n):
        s = rng.uniform(0, 5)
        rows.append(
            (
                f"('p{i % 3}-x', {i})",
                f"p{i % 3}",
                f"w{i % 3}",
                s,
                s + rng.uniform(0, 1),
                bool(rng.random() > 0.1),
                0,
                int(rng.integers(1, 3)),
            )
        )
    deps = [(f"('p{i % 3}-x', {i})", f"('p{(i - 1) % 3}-x', {i - 1})") for i in range(1, n, 4)]
    tr = [(f"('p{(i - 1) % 3}-x', {i - 1})", f"w{i % 3}", 1.0, 1.5, 1000) for i in range(1, n, 8)]
    return timeline(
        rows,
        label=label,
        deps=deps,
        transfers=tr,
        workers={"w0": 2, "w1": 2, "w2": None},
        start=-0.3,
        end=6.5,
    )


# -- every second of a run is shared out exactly once --------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_shares_add_up_to_the_makespan(seed: int) -> None:
    bl = blame(random_timeline(np.random.default_rng(seed), "r"))
    assert bl.parts_total == pytest.approx(bl.makespan, abs=1e-9)
    assert bl.makespan == pytest.approx(6.8)
    assert (bl.executions[["share", "wait", "xfer"]] >= -1e-12).all().all()


@pytest.mark.parametrize("seed", range(3))
def test_causes_add_up_to_the_difference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = blame(random_timeline(rng, "a")), blame(random_timeline(rng, "b", n=50))
    ex = explain(a, b)
    assert ex.causes["seconds"].sum() == pytest.approx(ex.difference_s, abs=1e-9)
    assert sum(ex.totals.values()) == pytest.approx(ex.difference_s, abs=1e-9)
    assert set(ex.totals) == set(CAUSES)
    assert ex.alignment.counts["key"] == 50 and ex.alignment.counts["baseline_only"] == 10


def test_a_serial_task_holds_the_whole_cluster() -> None:
    bl = blame(chain(4, 0.5, label="c"))  # 4 thread slots, one task at a time
    assert bl.executions["share"].tolist() == pytest.approx([0.5] * 4)
    assert bl.concurrency == pytest.approx(1.0) and bl.slots == pytest.approx(4.0)


# -- the causes -----------------------------------------------------------------------------------


def test_a_slower_prefix_is_compute_in_that_prefix() -> None:
    ex = explain(blame(chain(8, 0.1, label="a")), blame(chain(8, 0.15, label="b")))
    assert ex.difference_s == pytest.approx(0.4)
    top = ex.top
    assert top["cause"] == "compute" and top["prefix"] == "step"
    assert top["seconds"] == pytest.approx(0.4, abs=1e-6)
    assert "0.4 s more compute in `step`" in explanation_lines(ex)[0]


def test_fewer_threads_is_parallelism() -> None:
    def par(threads: int, label: str) -> Timeline:
        rows = [
            (
                f"t{i}",
                "work",
                "w1",
                (i // threads) * 1.0,
                (i // threads) * 1.0 + 1.0,
                True,
                0,
                i % threads,
            )
            for i in range(8)
        ]
        return timeline(rows, label=label, workers={"w1": threads})

    ex = explain(blame(par(4, "four")), blame(par(2, "two")))
    assert ex.difference_s == pytest.approx(2.0)
    assert ex.top["cause"] == "parallelism"
    assert ex.totals["parallelism"] == pytest.approx(2.0, abs=1e-6)
    assert ex.top["evidence"]["slots"] == [4.0, 2.0]


def test_a_slow_worker_is_that_worker() -> None:
    def run(slow: float, label: str) -> Timeline:
        rows, deps, t = [], [], 0.0
        for j in range(8):  # a chain alternating between two workers
            w = f"w{j % 2}"
            d = 0.1 + (slow if w == "w1" else 0.0)
            rows.append((f"s{j}", "step", w, t, t + d))
            if j:
                deps.append((f"s{j}", f"s{j - 1}"))
            t += d
        return timeline(rows, label=label, deps=deps, workers={"w0": 1, "w1": 1})

    ex = explain(blame(run(0.0, "a")), blame(run(0.1, "b")))
    assert ex.top["cause"] == "worker" and ex.top["worker"] == "w1"
    assert ex.top["seconds"] == pytest.approx(0.4, abs=1e-6)
    assert ex.top["evidence"]["ratio_to_median"] == pytest.approx(2.0)


def test_failed_attempts_are_retries() -> None:
    base = chain(4, 0.1, label="a")
    rows = [
        ("0", "step", "w1", 0.0, 0.1),
        ("1", "step", "w1", 0.1, 0.2, False, 0),
        ("1", "step", "w1", 0.25, 0.35, True, 1),
        ("2", "step", "w1", 0.35, 0.45),
        ("3", "step", "w1", 0.45, 0.55),
    ]
    other = timeline(rows, label="b", deps=[("1", "0"), ("2", "1"), ("3", "2")], workers={"w1": 4})
    ex = explain(blame(base), blame(other))
    assert ex.difference_s == pytest.approx(0.15)
    assert ex.top["cause"] == "retries"
    assert ex.totals["retries"] == pytest.approx(0.15, abs=1e-6)
    assert ex.top["evidence"]["failed_attempts"] == [0, 1]


def test_moving_more_data_is_transfers() -> None:
    def run(xfer: float, label: str) -> Timeline:
        rows = [("a", "load", "w0", 0.0, 0.1), ("b", "use", "w1", 0.1 + xfer, 0.2 + xfer)]
        return timeline(
            rows,
            label=label,
            deps=[("b", "a")],
            workers={"w0": 1, "w1": 1},
            transfers=[("a", "w1", 0.1, 0.1 + xfer, int(xfer * 1e9))],
        )

    ex = explain(blame(run(0.01, "small")), blame(run(0.5, "big")))
    assert ex.top["cause"] == "transfers" and ex.top["prefix"] == "use"
    assert ex.top["seconds"] == pytest.approx(0.49, abs=1e-6)
    assert ex.top["evidence"]["bytes_in"] == [10_000_000, 500_000_000]


def test_no_change_names_no_cause() -> None:
    ex = explain(blame(chain(8, 0.1, label="a")), blame(chain(8, 0.1, label="b")))
    assert ex.top is None
    assert "no cause is above the run-to-run noise" in explanation_lines(ex)[0]


def test_startup_and_tail() -> None:
    a = chain(4, 0.1, label="a")
    b = chain(4, 0.1, label="b")
    b.start -= 2_000_000
    b.end += 500_000
    ex = explain(blame(a), blame(b))
    assert ex.totals["startup"] == pytest.approx(2.0) and ex.totals["tail"] == pytest.approx(0.5)
    assert ex.causes["cause"].tolist()[:2] == ["startup", "tail"]


def test_queue_wait_is_evidence_of_startup() -> None:
    from metaprov.compare.render import cause_phrase

    a = chain(4, 0.1, label="a")
    b = chain(4, 0.1, label="b")
    b.start -= 2_000_000
    b.queue_wait, a.queue_wait = 1.9, None  # b's worker jobs waited in the queue
    ex = explain(blame(a), blame(b))
    row = ex.causes.set_index("cause").loc["startup"]
    assert row["evidence"]["queue_wait_s"] == [None, 1.9]
    assert "batch jobs waiting in the queue: 1.9 s vs unknown" in cause_phrase(
        ex.causes[ex.causes["cause"] == "startup"].iloc[0]
    )
    a.queue_wait = b.queue_wait = None  # no batch jobs: no such evidence
    assert (
        "queue_wait_s"
        not in explain(blame(a), blame(b)).causes.set_index("cause").loc["startup"]["evidence"]
    )


def test_a_faster_run_ranks_the_causes_that_made_it_faster_first() -> None:
    ex = explain(blame(chain(8, 0.15, label="a")), blame(chain(8, 0.1, label="b")))
    assert ex.difference_s < 0 and ex.top["cause"] == "compute" and ex.top["seconds"] < 0
    assert "shorter" in explanation_lines(ex)[0] and "less compute" in explanation_lines(ex)[0]


def test_without_transitions_or_threads_it_still_adds_up_and_says_why() -> None:
    a = chain(6, 0.1, label="a")
    b = chain(6, 0.12, label="b")
    b.has_transitions = False
    b.executions["thread"] = pd.array([None] * 6, dtype="UInt64")
    b.workers["threads"] = pd.array([None], dtype="Int64")
    b.notes.append("no thread ids")
    ex = explain(blame(a), blame(b))
    assert ex.causes["seconds"].sum() == pytest.approx(ex.difference_s, abs=1e-9)
    assert any("waiting and transfers are not attributed" in n for n in ex.notes)
    assert any("without a thread count" in n for n in ex.notes)


# -- alignment ------------------------------------------------------------------------------------


def test_alignment_rules() -> None:
    base = chain(4, 0.1, label="a", key=lambda j: f"('step-aaaa', {j})")
    other = chain(4, 0.1, label="b", key=lambda j: f"('step-bbbb', {j})")
    al = align(blame(base), blame(other))
    assert al.counts == {"key": 0, "index": 4, "prefix": 0, "baseline_only": 0, "other_only": 0}
    assert not al.same_graph
    pairs = al.pairs.set_index("key_b")["key_o"]
    assert pairs["('step-aaaa', 2)"] == "('step-bbbb', 2)"
    # keys without an index: matched by prefix, in start order
    other = chain(5, 0.1, label="c", key=lambda j: f"step-{j}-uuid")
    al = align(blame(base), blame(other))
    assert al.counts["prefix"] == 4 and al.counts["other_only"] == 1
    assert al.pairs.set_index("key_b")["key_o"]["('step-aaaa', 0)"] == "step-0-uuid"
    same = align(blame(base), blame(chain(4, 0.2, label="d", key=lambda j: f"('step-aaaa', {j})")))
    assert same.same_graph and same.counts["key"] == 4


def test_prefixes_added_and_removed() -> None:
    a = timeline([("x", "load", "w", 0, 1), ("y", "old", "w", 1, 2)], label="a")
    b = timeline([("x", "load", "w", 0, 1), ("z", "new", "w", 1, 3)], label="b")
    ex = explain(blame(a), blame(b))
    assert ex.alignment.added == ["new"] and ex.alignment.removed == ["old"]
    rows = ex.causes.set_index(["cause", "prefix"])
    assert rows.loc[("compute", "new"), "seconds"] == pytest.approx(2.0)
    assert rows.loc[("compute", "old"), "seconds"] == pytest.approx(-1.0)
    assert rows.loc[("compute", "new"), "evidence"]["added"] is True


def test_nothing_in_common_is_refused() -> None:
    a = timeline([("x", "load", "w", 0, 1)], label="a")
    b = timeline([("y", "other", "w", 0, 1)], label="b")
    with pytest.raises(InputError, match="no task prefix in common"):
        compare([a, b])


# -- campaigns and the JSON ------------------------------------------------------------------------


def test_campaign_against_the_median_flags_the_outlier() -> None:
    runs = [chain(6, d, label=f"r{i}") for i, d in enumerate([0.1, 0.101, 0.099, 0.1, 0.3, 0.1005])]
    c = compare(runs, baseline="median")
    assert c.baseline in {"r0", "r3", "r5"}
    assert c.runs["outlier"].tolist() == [False, False, False, False, True, False]
    row = c.runs.set_index("run").loc["r4"]
    assert row["top_cause"] == "compute" and row["top_prefix"] == "step"
    assert row["difference_s"] == pytest.approx(1.2, abs=0.01)
    d = comparison_dict(c)
    assert {r["run"] for r in d["runs"]} == {f"r{i}" for i in range(6)}
    assert len(d["comparisons"]) == 5
    assert "OUTLIER" in c.text()


def test_baseline_choice() -> None:
    runs = [chain(3, d, label=f"r{i}") for i, d in enumerate([0.1, 0.2])]
    assert compare(runs, baseline="r1").baseline == "r1"
    assert compare(runs, baseline=1).baseline == "r1"
    with pytest.raises(UsageError, match="no run 'nope'"):
        compare(runs, baseline="nope")
    with pytest.raises(UsageError, match="two runs or more"):
        compare(runs[:1])


def test_json_schema() -> None:
    c = compare([chain(8, 0.1, label="a"), chain(8, 0.15, label="b")])
    d = c.to_dict()
    assert d["difference_s"] == pytest.approx(0.4)
    seconds = [r["seconds"] for r in d["causes"]]
    assert seconds == sorted(seconds, reverse=True)  # ranked by seconds, descending
    assert sum(seconds) == pytest.approx(d["difference_s"], abs=1e-9)
    for r in d["causes"]:
        assert r["cause"] in CAUSES and isinstance(r["evidence"], dict)
        assert set(r) <= {
            "cause",
            "seconds",
            "prefix",
            "worker",
            "file",
            "noise",
            "significant",
            "evidence",
        }
    assert d["causes"][0] == {**d["causes"][0], "cause": "compute", "prefix": "step"}
    assert d["alignment"]["matched"]["key"] == 8
    import json

    json.dumps(d)  # JSON types only
    # evidence numbers are numbers in Python too (issue 39 saw strings): in the dict and the table
    evidences = [r["evidence"] for r in d["causes"]] + list(c.pair.causes["evidence"])
    numbers = [
        x
        for ev in evidences
        for v in ev.values()
        if isinstance(v, list)
        for x in v
        if isinstance(x, (int, float)) and not isinstance(x, bool)
    ]

    def numeric_text(x: object) -> bool:
        try:
            return isinstance(x, str) and bool(float(x) == float(x))
        except ValueError:
            return False

    texts = [x for ev in evidences for v in ev.values() if isinstance(v, list) for x in v] + [
        v for ev in evidences for v in ev.values()
    ]
    assert numbers and not [x for x in texts if numeric_text(x)]


def test_package_changes_are_evidence() -> None:
    """The recorded software of both runs: a package upgraded is named beside the causes."""

    def software(version: str) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "process": ["worker-1-x"] * 2,
                "role": ["worker"] * 2,
                "manager": ["pip"] * 2,
                "name": ["numpy", "dask"],
                "version": [version, "2024.1.0"],
            }
        )

    a, b = chain(8, 0.1, label="a"), chain(8, 0.15, label="b")
    a.software, b.software = software("1.26.4"), software("2.1.0")
    c = compare([a, b])
    ev = c.pair.evidence
    assert [(e["kind"], e["package"], e["before"], e["after"]) for e in ev] == [
        ("software", "numpy", "1.26.4", "2.1.0")
    ]
    assert "evidence: software: numpy 1.26.4 -> 2.1.0 between run a and run b" in c.text()
    assert c.to_dict()["evidence"][0]["detail"] == ev[0]["detail"]
