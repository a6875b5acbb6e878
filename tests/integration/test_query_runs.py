"""One meaning per question (issue 38): every packaged question asked of a store holding runs and
straight of the run directories gives the same bytes (csv and json) and the same notes.

Both ways are asked on the example run, on synthetic runs with retries, errors, Darshan I/O
and missing files, on two runs at once, and (``realdata``) on PMDA R1 and a run under real
Darshan; ``METAPROV_FULL=1``: on every real run in ../shared. The
run-directory answer is asked twice: through the in-memory store (``engine="store"``) and the
default way (a question's direct form where it has one).

By default (the suite's 10 minutes on 2 cores), every question with every parameter case is
asked of the example run and of the synthetic run with retries, errors and I/O, and each
question once of PMDA R1. The runs that lack files (``bare``, ``lost``) and the two runs at
once are asked what can differ there: the direct forms (Python of their own over the records,
per run), a question for each set of needs whose notes say what a run lacks (``# needs:``; of
two runs, those whose notes name one of them) and the questions that span runs. A store-only question's answer from the run directory is the same
SPARQL over the triples its text names, kept whatever the run holds, so asking it of the
richest runs is what shows its narrowing right; ``METAPROV_FULL=1`` asks everything everywhere.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import DARSHAN_DASK_RUNS, FULL, REAL_RUNS, REPO

from metaprov.errors import QueryError
from metaprov.queries import format_result, questions, run_question
from metaprov.queries.direct import FORMS
from metaprov.queries.fromruns import Timing, query_runs
from metaprov.store import EmbeddedStore

EXAMPLE = REPO / "examples" / "run"


def _store(runs: list[Path]) -> EmbeddedStore:
    store = EmbeddedStore(None)
    for run in runs:
        store.load_run(run)
    return store


def _cases(store: EmbeddedStore) -> list[tuple[str, dict[str, Any]]]:
    """Every question with its defaults (and a key for those that need one), then a few
    parameters: a run, a worker, an exception type, a prefix, a limit."""
    runs = store.runs()
    run_id = str(runs["run_id"].iloc[-1])
    keys = store.query(
        "PREFIX mp: <https://w3id.org/metaprov/ns#> SELECT ?key WHERE { GRAPH ?g { "
        "?e a mp:TaskExecution ; mp:task/mp:key ?key } } ORDER BY ?key LIMIT 1"
    )
    workers = store.query(
        "PREFIX mp: <https://w3id.org/metaprov/ns#> SELECT ?a WHERE { GRAPH ?g { "
        "?w a mp:Worker ; mp:address ?a } } ORDER BY ?a LIMIT 1"
    )
    cases: list[tuple[str, dict[str, Any]]] = []
    for q in questions():
        params: dict[str, Any] = {}
        if q.param("key") is not None and q.param("key").required:
            if not len(keys):
                continue
            params["key"] = str(keys["key"].iloc[0])
        if q.name == "critical-path" and len(runs) > 1:
            params["run_id"] = run_id
        cases.append((q.name, params))
    cases += [
        ("failures", {"run_id": run_id, "limit": "1"}),
        ("failures", {"exception_type": "ValueError"}),
        ("slowest-tasks", {"limit": "3", "run_id": run_id}),
        ("runs", {"run_id": run_id}),
    ]
    if len(workers):
        worker = str(workers["a"].iloc[0])
        cases += [
            ("thread-utilisation", {"worker": worker}),
            ("worker-utilisation", {"run_id": run_id}),
        ]
    return cases


def _same(
    store: EmbeddedStore, runs: list[Path], name: str, params: dict[str, Any], cache: Path
) -> None:
    want = run_question(store, name, dict(params))
    engines = ("store", "auto") if name in FORMS else ("store",)
    for engine in engines:
        got = query_runs(name, runs, dict(params), engine=engine, cache=cache)
        where = f"{name} {params} ({engine})"
        assert format_result(got, "csv") == format_result(want, "csv"), where
        assert format_result(got, "json") == format_result(want, "json"), where
        if not isinstance(want, bool):
            assert got.attrs.get("notes", []) == want.attrs.get("notes", []), where


def _ask_all(
    runs: list[Path], cache: Path, variants: bool = True, only: set[str] | None = None
) -> None:
    """Every question with its defaults and (``variants``) the parameter cases, both ways;
    ``only``: those questions alone (every question with METAPROV_FULL=1)."""
    store = _store(runs)
    cases = _cases(store)
    if not variants:  # each question once, the first case of its name
        cases = list({name: (name, params) for name, params in reversed(cases)}.values())
    if only is not None and not FULL:
        cases = [(name, params) for name, params in cases if name in only]
        assert {name for name, _ in cases} == only, "a question named here no longer exists"
    for name, params in cases:
        _same(store, runs, name, params, cache)


def _lacking() -> set[str]:
    """What can differ on a run that lacks files: the direct forms, and a question for each
    set of needs (``# needs:``) whose notes say what a run lacks (one note-maker serves every
    question of a set; the others: METAPROV_FULL=1)."""
    by_needs: dict[tuple[str, ...], str] = {}
    for q in questions():
        if q.needs:
            by_needs.setdefault(tuple(sorted(q.needs)), q.name)
    return set(FORMS) | set(by_needs.values())


#: Of two runs at once, by default: the direct forms (they combine the runs in Python), the
#: questions that span runs, and those whose notes name the one run of two that lacks what they
#: need (the example run has no Darshan logs).
TWO_RUNS = {*FORMS, "runs", "prefix-across-runs", "file-access", "io-per-prefix"}


def test_example_run_every_question_both_ways(tmp_path: Path) -> None:
    _ask_all([EXAMPLE], tmp_path / "cache")


@pytest.fixture(scope="module")
def synthetic_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small synthetic runs: retries and errors with Darshan I/O; without the transition files
    (no thread ids); without transfers and workers' file (lost, missing files)."""
    from metaprov.synthetic import generate_run

    root = tmp_path_factory.mktemp("synthetic")
    full = generate_run(
        root / "faulty",
        400,
        seed=3,
        erred_fraction=0.03,
        retried_fraction=0.05,
        io_fraction=0.2,
        workers=3,
        threads=2,
    )
    bare = generate_run(
        root / "bare",
        300,
        seed=4,
        with_worker_transitions=False,
        with_scheduler_transitions=False,
        retried_fraction=0.02,
        workers=2,
        threads=2,
    )
    lost = generate_run(root / "lost", 300, seed=5, erred_fraction=0.02, workers=2, threads=3)
    for name in ("worker_transfer.csv", "worker.csv"):
        (lost / name).unlink(missing_ok=True)
    return {"faulty": full, "bare": bare, "lost": lost}


@pytest.mark.parametrize("kind", ["faulty", "bare", "lost"])
def test_synthetic_runs_every_question_both_ways(
    synthetic_runs: dict[str, Path], kind: str, tmp_path: Path
) -> None:
    # by default, of the runs that lack files: what can differ there (module docstring)
    only = None if kind == "faulty" else _lacking()
    _ask_all([synthetic_runs[kind]], tmp_path / "cache", only=only)


def test_two_runs_at_once_both_ways(synthetic_runs: dict[str, Path], tmp_path: Path) -> None:
    """Two runs: answers scoped per run, critical-path needs a run, as in a store of both."""
    runs = [EXAMPLE, synthetic_runs["faulty"]]
    # the variants: on one run above; by default, what can differ with two runs (TWO_RUNS)
    _ask_all(runs, tmp_path / "cache", variants=False, only=TWO_RUNS)
    store = _store(runs)
    with pytest.raises(QueryError) as want:
        run_question(store, "critical-path", {})
    with pytest.raises(QueryError) as got:
        query_runs("critical-path", runs, {}, cache=tmp_path / "cache")
    assert got.value.message == want.value.message
    assert "several runs" in got.value.message


def test_errors_are_the_stores(tmp_path: Path) -> None:
    """Unknown parameters, runs and keys: the same errors and hints as a store holding the run."""
    store = _store([EXAMPLE])
    for name, params in [
        ("failures", {"nosuch": "1"}),
        ("failures", {"run_id": "0000000000000000"}),
        ("thread-utilisation", {"run_id": "nosuch"}),
        ("lineage", {"key": "nosuch-key"}),
        ("slowest-tasks", {"prefix": "nosuch"}),
        ("failures", {"limit": "-1"}),
    ]:
        with pytest.raises(QueryError) as want:
            run_question(store, name, dict(params))
        with pytest.raises(QueryError) as got:
            query_runs(name, [EXAMPLE], dict(params), cache=tmp_path / "cache")
        assert (got.value.message, got.value.hint) == (want.value.message, want.value.hint)


def test_the_cache_is_used_and_renewed(tmp_path: Path) -> None:
    """A second question reads the kept records; a changed file makes the run be read again."""
    run = shutil.copytree(EXAMPLE, tmp_path / "run")
    cache = tmp_path / "cache"
    first = query_runs("failures", [run], cache=cache)
    entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1
    stamp = (entries[0] / "entry.json").stat().st_mtime_ns
    timing = Timing()
    again = query_runs("failures", [run], cache=cache, timing=timing)
    assert format_result(again, "csv") == format_result(first, "csv")
    assert (entries[0] / "entry.json").stat().st_mtime_ns == stamp  # read, not rewritten
    with (run / "worker_execution.csv").open("a", encoding="utf-8") as f:
        f.write("")  # same size: the time alone tells
    import os

    os.utime(run / "worker_execution.csv", ns=(stamp + 10**9, stamp + 10**9))
    query_runs("failures", [run], cache=cache)
    assert (entries[0] / "entry.json").stat().st_mtime_ns != stamp
    (entries[0] / "entry.json").write_text("{damaged", encoding="utf-8")
    assert format_result(query_runs("failures", [run], cache=cache), "csv") == format_result(
        first, "csv"
    )


def test_an_entry_naming_a_table_outside_itself_is_read_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cache entry is a file on disk, not ours to trust: a table name that is a path (here to
    a table planted beside the cache) is a damaged entry, never read; the run is read again."""
    import json

    run = shutil.copytree(EXAMPLE, tmp_path / "run")
    cache = tmp_path / "cache"
    first = format_result(query_runs("failures", [run], cache=cache), "csv")
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    meta = json.loads((entry / "entry.json").read_text(encoding="utf-8"))
    name = meta["fields"]["tasks"]["__table__"]
    shutil.copy(entry / f"{name}.arrow", tmp_path / "planted.arrow")
    meta["fields"]["tasks"]["__table__"] = "../../planted"
    (entry / "entry.json").write_text(json.dumps(meta), encoding="utf-8")
    with caplog.at_level("WARNING", logger="metaprov"):
        again = format_result(query_runs("failures", [run], cache=cache), "csv")
    assert again == first
    assert "no file of the entry" in caplog.text and "reading the run again" in caplog.text


def test_a_form_told_empty_from_the_records_is_so_in_the_mapping(
    synthetic_runs: dict[str, Path],
) -> None:
    """A form that skips mapping a run its records say it finds nothing in (``failures`` on a
    run without recorded exceptions) skips only runs whose graph has none of its triples."""
    from metaprov.ingest import read_run
    from metaprov.mapping import to_prov
    from metaprov.mapping.terms import MP
    from metaprov.queries.direct import triple_tables

    starts = {"failures": MP.exceptionType}  # the triples each such form's joins start from
    assert {n for n, f in FORMS.items() if f.empty is not None} == set(starts)
    told = []
    for run in (EXAMPLE, synthetic_runs["faulty"], synthetic_runs["lost"]):
        graph = to_prov(read_run(run, darshan=False))
        for name, first in starts.items():
            tables = triple_tables(graph, [first])  # every step
            told.append(FORMS[name].empty(graph.records))
            assert told[-1] == (len(tables[first]) == 0), (run, name)
    assert sorted(set(told)) == [False, True]  # both cases seen


def test_the_answer_comes_before_the_run_is_kept(tmp_path: Path) -> None:
    """With ``on_answer`` (how ``metaprov query`` prints), the answer is handed over before the
    cache entry is written; the entry is there when the call returns, and answers the next."""
    cache = tmp_path / "cache"
    seen: list[Any] = []

    def on_answer(answer: Any) -> None:
        seen.append(format_result(answer, "csv"))
        assert not cache.exists() or not any(cache.glob("*/entry.json"))

    got = query_runs("failures", [EXAMPLE], cache=cache, on_answer=on_answer)
    assert seen == [format_result(got, "csv")]
    assert len(list(cache.glob("*/entry.json"))) == 1
    timing = Timing()
    again = query_runs("failures", [EXAMPLE], cache=cache, timing=timing)
    assert format_result(again, "csv") == seen[0] and timing.keep == 0.0


def test_the_link_is_left_to_the_questions_that_read_it(
    synthetic_runs: dict[str, Path], tmp_path: Path
) -> None:
    """A direct form that reads nothing of the Darshan I/O link answers the run unlinked and
    keeps it so (seconds at 10^6 tasks); the first question that reads the I/O links it, adds
    the link to the entry, and answers as the store does."""
    import json

    from metaprov.queries.runcache import cached_records

    run, cache = synthetic_runs["faulty"], tmp_path / "cache"
    query_runs("thread-utilisation", [run], cache=cache)
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    fields = json.loads((entry / "entry.json").read_text(encoding="utf-8"))["fields"]
    assert fields["darshan"] is not None and fields["io"] is None
    want = run_question(_store([run]), "io-per-prefix", {})
    assert len(want)
    got = query_runs("io-per-prefix", [run], cache=cache)
    assert format_result(got, "csv") == format_result(want, "csv")
    fields = json.loads((entry / "entry.json").read_text(encoding="utf-8"))["fields"]
    assert fields["io"] is not None
    kept = cached_records(run, cache=cache, link=False)  # read back, linked
    assert kept.io is not None and len(kept.io.segments) == len(kept.darshan.segments)


def _real_runs() -> list[Any]:
    from metaprov.ingest import is_run_directory

    # by default: PMDA R1 (Darshan) and one run under real Darshan (Mofka's plugins) -- runs
    # without transition files are the synthetic "bare" run above; METAPROV_FULL=1: every run
    runs = list(REAL_RUNS) if FULL else list(REAL_RUNS[:1])
    if DARSHAN_DASK_RUNS.is_dir():
        dask_runs = sorted(p for p in DARSHAN_DASK_RUNS.iterdir() if is_run_directory(p))
        runs += dask_runs if FULL else dask_runs[-1:]
    if not runs:
        from conftest import SKIP_REASON

        return [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON))]
    # the Mofka-captured Darshan run: the second real run by default, slow (METAPROV_FULL=1)
    return [
        pytest.param(
            p,
            id=f"{p.parent.name}-{p.name.split('_')[-2]}" if "_" in p.name else p.name,
            marks=[pytest.mark.slow] if p.parent == DARSHAN_DASK_RUNS else [],
        )
        for p in runs
    ]


@pytest.mark.realdata
@pytest.mark.parametrize("run", _real_runs())
def test_real_runs_every_question_both_ways(run: Path, tmp_path: Path) -> None:
    # each question once by default (its parameter cases: on the example and faulty runs)
    _ask_all([run], tmp_path / "cache", variants=FULL)


def test_slowest_tasks_picks_the_same_tied_executions_in_every_store(tmp_path: Path) -> None:
    """The example run has executions of equal duration at the 20th place: an in-memory and an
    on-disk store (and the run directory) give the same bytes (ties broken by the IRI)."""
    memory, disk = _store([EXAMPLE]), EmbeddedStore(tmp_path / "st")
    disk.load_run(EXAMPLE)
    for params in ({}, {"limit": "3"}, {"limit": "7"}):
        want = format_result(run_question(memory, "slowest-tasks", dict(params)), "csv")
        assert format_result(run_question(disk, "slowest-tasks", dict(params)), "csv") == want
        got = query_runs("slowest-tasks", [EXAMPLE], dict(params), cache=tmp_path / "cache")
        assert format_result(got, "csv") == want, params
