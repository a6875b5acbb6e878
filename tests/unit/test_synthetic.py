"""metaprov.synthetic: the generated run has the real files' schema, is deterministic, causally
consistent, and its truth.json agrees with counts taken independently from the CSV files."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from metaprov.errors import UsageError
from metaprov.synthetic import COLUMNS, format_floats, generate_run, load_truth

CSV = list(COLUMNS)
FLOAT_COLUMNS = {
    "scheduler_transition.csv": ["begins", "ends", "duration", "time"],
    "worker_transition.csv": ["time"],
    "worker_transfer.csv": [
        "start",
        "stop",
        "middle",
        "duration",
        "bandwidth",
        "time",
        "compressed",
    ],
    "graph.csv": ["time"],
    "worker.csv": ["time"],
    "client.csv": ["time"],
}


def _read_str(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, index_col=0, dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small run with every feature on: retries, errors, several graphs and clients."""
    return generate_run(
        tmp_path_factory.mktemp("syn") / "run",
        3000,
        seed=11,
        graphs=3,
        clients=2,
        erred_fraction=0.02,
        retried_fraction=0.03,
        chunk_rows=1000,  # several chunks per file: chunk seams must not show
    )


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference workload shape (no retries, no errors)."""
    return generate_run(tmp_path_factory.mktemp("syn") / "plain", 4000, seed=5)


# --- determinism -------------------------------------------------------------------------


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    kw = dict(seed=3, retried_fraction=0.02, erred_fraction=0.01, graphs=2, fetch_transitions=True)
    a = generate_run(tmp_path / "a", 1500, **kw)
    b = generate_run(tmp_path / "b", 1500, chunk_rows=333, **kw)  # chunking must not change bytes
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert set(CSV) <= set(names)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_other_seed_gives_other_run(tmp_path: Path) -> None:
    a = generate_run(tmp_path / "a", 500, seed=1)
    b = generate_run(tmp_path / "b", 500, seed=2)
    for name in CSV:
        assert (a / name).read_bytes() != (b / name).read_bytes(), name


# --- schema ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CSV)
def test_header_matches_real_run(name: str, plain_run: Path, pmda_r1: Path) -> None:
    real = (pmda_r1 / name).read_text().splitlines()[0]
    ours = (plain_run / name).read_text().splitlines()[0]
    assert ours == real
    assert ours == "," + ",".join(COLUMNS[name])


@pytest.mark.parametrize("name", CSV)
def test_files_are_what_pandas_to_csv_writes(name: str, run: Path) -> None:
    # Re-writing the parsed cells with pandas gives the same bytes: index column, quoting and
    # empty fields are exactly pandas' own.
    raw = (run / name).read_bytes()
    df = _read_str(run / name)
    buf = io.StringIO()
    df.to_csv(buf)
    assert buf.getvalue().encode() == raw
    assert list(df.index) == [str(i) for i in range(len(df))]


@pytest.mark.parametrize("name", CSV)
def test_float_cells_are_python_repr(name: str, run: Path) -> None:
    df = _read_str(run / name)
    for col in FLOAT_COLUMNS[name]:
        cells = [c for c in df[col] if c]
        assert cells, col
        assert all(repr(float(c)) == c for c in cells), col


def test_format_floats_matches_repr_over_magnitudes() -> None:
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, 1.0, 2.0, 50254.0, 1e-4, 9.999e-5, 1e-5, 1.5e-7, 1e15, 1e16, 1e22, 0.1]
    mags = 10.0 ** rng.uniform(-9, 20, 20_000) * rng.choice([-1, 1], 20_000)
    epochs = 1713553294.0 + rng.random(20_000) * 1e5
    bits = rng.integers(0, 2**63, 20_000).view(np.float64)
    values = np.concatenate([special, mags, epochs, bits[np.isfinite(bits)], np.floor(mags)])
    got = format_floats(values).to_pylist()
    assert got == [repr(float(v)) for v in values]
    assert format_floats(np.array([np.nan])).to_pylist() == [""]


def test_thread_ids_are_exact_integers(run: Path) -> None:
    df = _read_str(run / "scheduler_transition.csv")
    cells = [c for c in df["thread"] if c]
    assert cells and all(re.fullmatch(r"[1-9][0-9]*", c) for c in cells)
    ids = {int(c) for c in cells}
    assert len(ids) == 64  # 8 workers x 8 threads
    assert all(2**46 < i < 2**47 for i in ids)  # 0x7f... user-space addresses, as pthread_self()
    # One worker per thread id (ids are not shared between processes).
    per = df[df["thread"] != ""].groupby("thread")["worker"].nunique()
    assert (per == 1).all()


def test_wide_thread_ids_survive_only_exact_parsing(tmp_path: Path) -> None:
    r = generate_run(tmp_path / "w", 300, seed=1, wide_thread_ids=True)
    cells = [c for c in _read_str(r / "scheduler_transition.csv")["thread"] if c]
    ids = {int(c) for c in cells}
    assert all(i > 2**63 and i % 2 == 1 for i in ids)
    exact = pd.read_csv(r / "scheduler_transition.csv", index_col=0, dtype={"thread": "UInt64"})
    assert set(int(x) for x in exact["thread"].dropna()) == ids
    # ... and a float parse would change every one of them (what the generator is for).
    assert all(int(float(c)) != int(c) for c in cells)


def test_tuple_keys_quoted_in_transitions_and_literals_in_reprs(run: Path) -> None:
    raw = (run / "scheduler_transition.csv").read_text()
    assert re.search(r"""\n\d+,"\('(array|getitem|mul|block-info)-[0-9a-f]{32}', \d+\)",""", raw)
    sched = _read_str(run / "scheduler_transition.csv")
    tuple_keys = sched["key"][sched["key"].str.startswith("(")]
    # str(key) of a tuple is its repr, which parses back to a 2-tuple (string, int).
    parsed = {ast.literal_eval(k) for k in tuple_keys.unique()[:200]}
    assert all(
        isinstance(k, tuple) and isinstance(k[0], str) and isinstance(k[1], int) for k in parsed
    )
    tr = _read_str(run / "worker_transfer.csv")
    dict_keys = [k for cell in tr["keys"] for k in ast.literal_eval(cell)]
    assert any(isinstance(k, tuple) for k in dict_keys) and any(
        isinstance(k, str) for k in dict_keys
    )
    # Normalised with str(), transfer keys are the transition files' keys.
    assert {str(k) for k in dict_keys} <= set(sched["key"])


def test_prefix_and_group_follow_dask(run: Path) -> None:
    sched = _read_str(run / "scheduler_transition.csv").drop_duplicates("key")
    tup = sched[sched["key"].str.startswith("(")]
    assert (tup["group"] == tup["key"].map(lambda k: ast.literal_eval(k)[0])).all()
    assert (tup.apply(lambda r: r["group"].startswith(r["prefix"] + "-"), axis=1)).all()
    plain = sched[~sched["key"].str.startswith("(")]
    assert (plain["group"] == plain["prefix"]).all()
    helper = plain[plain["key"].str.startswith("_dask_helper-")]
    assert len(helper) and (helper["prefix"] == "dask_helper").all()


# --- transfers ----------------------------------------------------------------------------


def test_incoming_rows_are_written_twice(plain_run: Path) -> None:
    truth = load_truth(plain_run)
    tr = _read_str(plain_run / "worker_transfer.csv")
    no_time = tr.drop(columns="time")
    dup = no_time.duplicated(keep="first")
    assert dup.sum() == truth["duplicate_transfer_rows"] == truth["transfers"] > 0
    assert (tr.loc[dup, "type"] == "incoming_transfer").all()
    groups = no_time.groupby(list(no_time.columns)).size()
    incoming = groups.xs("incoming_transfer", level="type")
    assert (incoming == 2).all()
    # The two copies differ only in time, the second logged later.
    inc = tr[tr["type"] == "incoming_transfer"].copy()
    inc["t"] = inc["time"].astype(float)
    first_last = inc.groupby(list(no_time.columns))["t"].agg(["min", "max"])
    assert (first_last["max"] > first_last["min"]).all()


def test_each_transfer_is_logged_on_both_sides(plain_run: Path) -> None:
    tr = _read_str(plain_run / "worker_transfer.csv").drop(columns="time").drop_duplicates()
    inc = tr[tr["type"] == "incoming_transfer"]
    out = tr[tr["type"] == "outgoing_transfer"]
    assert len(inc) == len(out) == load_truth(plain_run)["transfers"]
    # incoming: called_from = receiver, who = sender; outgoing: the other way round.
    a = inc[["keys", "called_from", "who"]].rename(columns={"called_from": "dst", "who": "src"})
    b = out[["keys", "called_from", "who"]].rename(columns={"called_from": "src", "who": "dst"})
    merged = a.merge(b, on=["keys", "src", "dst"], how="outer", indicator=True)
    assert (merged["_merge"] == "both").all()
    assert (a["src"] != a["dst"]).all()
    assert (inc["compressed"] == "").all() and (out["compressed"] != "").all()
    # The sender's clock differs: the outgoing start is never the incoming start.
    assert not set(inc["start"]) & set(out["start"])


def test_scheduler_begins_ends_are_the_transfer_for_fetching_tasks(plain_run: Path) -> None:
    sched = _read_str(plain_run / "scheduler_transition.csv")
    done = sched[sched["finish"] == "memory"].set_index("key")
    inc = _read_str(plain_run / "worker_transfer.csv").query("type == 'incoming_transfer'")
    inc = inc.drop_duplicates(subset=["keys", "start"])
    # The fetched key is a dependency of the task that ran on the receiving worker right after.
    pairs = set(zip(done["begins"], done["ends"], strict=True))
    hits = sum((s, e) in pairs for s, e in zip(inc["start"], inc["stop"], strict=True))
    assert hits == len(inc)


# --- timing -----------------------------------------------------------------------------


def _windows(run: Path) -> pd.DataFrame:
    """Compute windows per execution from worker transitions, with the scheduler's thread."""
    w = pd.read_csv(run / "worker_transition.csv", index_col=0)
    starts = w[(w["start"] == "ready") & (w["finish"] == "executing")]
    ends = w[w["start"] == "executing"]
    ex = starts[["key", "called_from", "time"]].rename(columns={"time": "s"})
    ex = ex.merge(
        ends[["key", "called_from", "time"]].rename(columns={"time": "e"}),
        on=["key", "called_from"],
    )
    sched = pd.read_csv(run / "scheduler_transition.csv", index_col=0, dtype={"thread": "UInt64"})
    thr = sched.dropna(subset=["thread"])[["key", "worker", "thread"]]
    return ex.merge(thr, left_on=["key", "called_from"], right_on=["key", "worker"])


def test_tasks_on_a_thread_never_overlap(plain_run: Path) -> None:
    ex = _windows(plain_run)
    assert len(ex) == load_truth(plain_run)["tasks"]
    assert (ex["e"] > ex["s"]).all()
    ex = ex.sort_values(["worker", "thread", "s"])
    same = (ex["worker"].values[1:] == ex["worker"].values[:-1]) & (
        ex["thread"].values[1:] == ex["thread"].values[:-1]
    )
    gap = ex["s"].values[1:] - ex["e"].values[:-1]
    assert (gap[same] > 0).all()
    # back to back: threads are busy, not idle most of the time
    assert np.median(gap[same]) < 0.01


def test_failed_first_attempts_also_fit_between_tasks(run: Path) -> None:
    # First attempts of retried tasks take their own slot on a thread (checked on the plan,
    # because the CSV files do not say which thread ran a failed attempt).
    from metaprov.synthetic.plan import _plan

    p = _plan(
        3000, seed=11, workers=8, threads=8, transfer_fraction=0.1, tuple_key_fraction=0.5,
        graphs=3, clients=2, erred_fraction=0.02, retried_fraction=0.03, wide_thread_ids=False,
    )  # fmt: skip
    thr = np.concatenate([p.thread, p.retry_thread])
    s = np.concatenate([p.start, p.retry_start])
    e = np.concatenate([p.end, p.retry_end])
    o = np.lexsort((s, thr))
    same = thr[o][1:] == thr[o][:-1]
    assert len(p.retry_task) > 0
    assert (s[o][1:][same] > e[o][:-1][same]).all()
    assert (p.retry_end + 0.25 <= p.start[p.retry_task]).all()


def test_transitions_of_a_key_are_in_causal_order(run: Path) -> None:
    order = {
        ("released", "waiting"): 0, ("waiting", "ready"): 1, ("ready", "executing"): 2,
        ("executing", "memory"): 3, ("executing", "error"): 3, ("error", "released"): 4,
    }  # fmt: skip
    w = pd.read_csv(run / "worker_transition.csv", index_col=0)
    w["step"] = [order[(a, b)] for a, b in zip(w["start"], w["finish"], strict=True)]
    # rows are in time order; per (key, worker) the states follow the worker state machine
    assert w["time"].is_monotonic_increasing
    # One attempt is 0123; a failed first attempt is 01234 (then the retry, maybe elsewhere).
    seqs = w.groupby(["key", "called_from"], sort=False)["step"].agg(lambda x: "".join(map(str, x)))
    assert set(seqs) == {"0123", "01234", "012340123"}
    s = pd.read_csv(run / "scheduler_transition.csv", index_col=0)
    assert s["time"].is_monotonic_increasing
    seq = s.groupby("key", sort=False)["finish"].agg(tuple)
    allowed = {
        ("waiting", "processing", "memory"),
        ("waiting", "processing", "erred"),
        ("waiting", "processing", "released", "waiting", "processing", "memory"),
    }
    assert set(seq) <= allowed


def test_dependencies_finish_before_dependents_start(plain_run: Path) -> None:
    g = pd.read_csv(plain_run / "graph.csv", index_col=0)
    edges = [
        (str(k), str(d))
        for cell in g["dependencies"]
        for k, ds in ast.literal_eval(cell).items()
        for d in ds
    ]
    ex = _windows(plain_run).set_index("key")
    s = ex["s"].reindex([k for k, _ in edges]).to_numpy()
    e = ex["e"].reindex([d for _, d in edges]).to_numpy()
    assert len(edges) and not np.isnan(s).any() and not np.isnan(e).any()
    assert (e < s).all()


# --- truth --------------------------------------------------------------------------------


def test_truth_counts_match_the_files(run: Path) -> None:
    truth = load_truth(run)
    sched = _read_str(run / "scheduler_transition.csv")
    work = _read_str(run / "worker_transition.csv")
    tr = _read_str(run / "worker_transfer.csv")
    graph = _read_str(run / "graph.csv")
    workers = _read_str(run / "worker.csv")
    clients = _read_str(run / "client.csv")

    deps = [ast.literal_eval(c) for c in graph["dependencies"]]
    keys = {str(k) for d in deps for k in d}
    assert truth["tasks"] == len(keys) == sched["key"].nunique() == work["key"].nunique() == 3000
    assert truth["edges"] == sum(len(v) for d in deps for v in d.values())
    assert truth["wanted"] == sum(len(ast.literal_eval(c)) for c in graph["keys"])
    assert truth["graphs"] == len(graph) == 3
    assert truth["clients"] == clients["client"].nunique() == graph["client"].nunique() == 2
    assert truth["workers"] == workers["worker"].nunique() == 8
    assert set(workers["worker"]) == set(work["called_from"])
    assert truth["threads"] == sched.loc[sched["thread"] != "", "thread"].nunique()
    assert truth["scheduler_transitions"] == len(sched)
    assert truth["worker_transitions"] == len(work)
    assert truth["transfer_rows"] == len(tr)
    assert truth["transfers"] == (tr["type"] == "outgoing_transfer").sum()
    assert truth["transfer_rows_distinct"] == len(tr.drop(columns="time").drop_duplicates())
    assert truth["tuple_keys"] == sum(k.startswith("(") for k in keys)
    assert truth["erred"] == (sched["finish"] == "erred").sum() > 0
    assert (
        truth["retried"]
        == ((sched["start"] == "processing") & (sched["finish"] == "released")).sum()
        > 0
    )
    assert (
        truth["executions"] == ((work["start"] == "ready") & (work["finish"] == "executing")).sum()
    )
    assert truth["failed_executions"] == (work["finish"] == "error").sum()
    assert truth["rows_total"] == sum(truth["rows"].values())
    assert truth["bytes"] == {n: (run / n).stat().st_size for n in truth["rows"]}


def test_reference_workload_shape(plain_run: Path) -> None:
    t = load_truth(plain_run)
    n = t["tasks"]
    assert t["scheduler_transitions"] == 3 * n
    assert t["worker_transitions"] == 4 * n
    assert t["transfers"] == round(0.10 * n)
    assert t["transfer_rows"] == 3 * t["transfers"]
    assert 0.4 < t["tuple_keys"] / n < 0.6
    assert 1.0 < t["edges"] / n < 1.4
    assert t["erred"] == t["retried"] == 0
    # Each fetching task's execution reads the copy its transfer brought (mp:usedReplica); no
    # other execution runs where a fetched key was sent.
    assert t["replica_uses"] == t["transfers"]


def test_files_can_be_left_out(tmp_path: Path) -> None:
    r = generate_run(
        tmp_path / "r", 200, with_worker_transitions=False, with_scheduler_transitions=False
    )
    assert not (r / "worker_transition.csv").exists()
    assert not (r / "scheduler_transition.csv").exists()
    t = load_truth(r)
    assert t["worker_transitions"] == t["scheduler_transitions"] == 0
    assert "replica_uses" not in t  # counted on worker-transition windows only
    assert (r / "graph.csv").exists() and (r / "worker_transfer.csv").exists()


def test_fetch_transitions_on_the_receiving_worker(tmp_path: Path) -> None:
    r = generate_run(tmp_path / "r", 1000, fetch_transitions=True)
    w = _read_str(r / "worker_transition.csv")
    fetch = w[w["finish"] == "fetch"]
    assert len(fetch) == load_truth(r)["transfers"]
    inc = _read_str(r / "worker_transfer.csv").query("type == 'incoming_transfer'")
    fetched = {
        (str(next(iter(ast.literal_eval(k)))), dst)
        for k, dst in zip(inc["keys"], inc["called_from"], strict=True)
    }
    assert set(zip(fetch["key"], fetch["called_from"], strict=True)) == fetched


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_tasks": 0},
        {"n_tasks": 10, "workers": 0},
        {"n_tasks": 10, "graphs": 11},
        {"n_tasks": 10, "transfer_fraction": 1.5},
        {"n_tasks": 10, "retried_fraction": 0.9},
    ],
)
def test_bad_parameters_raise_usage_error(tmp_path: Path, kwargs: dict) -> None:
    n = kwargs.pop("n_tasks")
    with pytest.raises(UsageError):
        generate_run(tmp_path / "x", n, **kwargs)
    assert not (tmp_path / "x").exists()
