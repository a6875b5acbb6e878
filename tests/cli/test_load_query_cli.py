"""`metaprov load` and `metaprov query`: exit codes and messages, then the store re-read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PMDA_RUNS

from metaprov.cli import cli
from metaprov.errors import QueryError, StoreError, UsageError
from metaprov.queries import questions
from metaprov.store import open_store
from metaprov.synthetic import generate_run


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("runs")
    return [generate_run(base / f"run{i}", 150, seed=i, erred_fraction=0.02) for i in range(2)]


@pytest.fixture()
def store_dir(tmp_path: Path, runs: list[Path]) -> Path:
    path = tmp_path / "prov-store"
    res = invoke("load", *map(str, runs), "--store", str(path))
    assert res.exit_code == 0, res.output
    return path


def test_load_campaign_then_reread_through_the_library(tmp_path: Path, runs: list[Path]) -> None:
    path = tmp_path / "s"
    res = invoke("load", *map(str, runs), "--store", str(path), "--json")
    assert res.exit_code == 0, res.output
    reports = json.loads(res.output)
    assert len(reports) == 2 and all(r["triples"] > 1000 and not r["replaced"] for r in reports)
    with open_store(path, read_only=True) as st:
        assert st.graphs() == sorted(r["graph"] for r in reports)
        total = st.count()
        assert total == sum(r["triples"] for r in reports)
    res = invoke("load", str(runs[0]), "--store", str(path))
    assert res.exit_code == 0 and res.output.startswith("unchanged ")
    res = invoke("load", str(runs[0]), "--store", str(path), "--force")
    assert res.exit_code == 0 and res.output.startswith("replaced ")
    with open_store(path, read_only=True) as st:
        assert st.count() == total


def test_default_store_comes_from_the_environment(tmp_path: Path, runs: list[Path]) -> None:
    path = tmp_path / "from-env"
    res = invoke("load", str(runs[0]), env={"METAPROV_STORE": str(path)})
    assert res.exit_code == 0, res.output
    res = invoke("query", "runs", "-f", "json", env={"METAPROV_STORE": str(path)})
    assert res.exit_code == 0 and len(json.loads(res.output)) == 1


def test_query_formats(store_dir: Path, tmp_path: Path) -> None:
    res = invoke("query", "runs", "--store", str(store_dir), "-f", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert len(rows) == 2 and {r["tasks"] for r in rows} == {150}
    res = invoke("query", "worker-utilisation", "--store", str(store_dir), "-f", "csv")
    lines = res.output.splitlines()
    assert lines[0] == "run_id,worker,threads,executions,busy,span,utilisation" and len(lines) == 17
    out = tmp_path / "slow.json"
    res = invoke(
        "query",
        "slowest-tasks",
        "--store",
        str(store_dir),
        "-p",
        "limit=4",
        "-f",
        "json",
        "-o",
        str(out),
    )
    assert res.exit_code == 0 and res.output == ""
    slow = json.loads(out.read_text())
    assert len(slow) == 4 and slow[0]["duration"] >= slow[-1]["duration"]
    res = invoke("query", "problem-tasks", "--store", str(store_dir), "--param", "problem=erred")
    assert res.exit_code == 0 and "erred" in res.output


def test_query_list(store_dir: Path) -> None:
    res = invoke("query", "--list")
    assert res.exit_code == 0
    for q in questions():
        assert q.name in res.output
    assert "--param key (string)" in res.output


def test_user_query_file_and_export_file(store_dir: Path, runs: list[Path], tmp_path: Path) -> None:
    rq = tmp_path / "mine.rq"
    rq.write_text(
        "# title: Tasks of a prefix\n# param: prefix (string) the prefix\n"
        "PREFIX mp: <https://w3id.org/metaprov/ns#>\n"
        "SELECT (COUNT(?t) AS ?n) WHERE { GRAPH ?g { ?t mp:taskGroup/mp:taskPrefix/mp:name ?prefix } }\n"
    )
    res = invoke(
        "query", str(rq), "--store", str(store_dir), "--param", "prefix=nope", "-f", "json"
    )
    assert res.exit_code == 0 and json.loads(res.output) == [{"n": 0}]
    from metaprov.ingest import read_run
    from metaprov.mapping import to_prov
    from metaprov.write import write

    export = tmp_path / "run0.nq"
    write(to_prov(read_run(runs[0], darshan=False)), export)
    res = invoke("query", "runs", "--file", str(export), "-f", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)[0]["tasks"] == 150
    res = invoke(
        "query", "SELECT ?s WHERE { ?s ?p ?o } LIMIT 2", "--file", str(export), "-f", "csv"
    )
    assert res.exit_code == 0 and len(res.output.splitlines()) == 3


def test_errors_reach_the_user_as_one_line(store_dir: Path, tmp_path: Path) -> None:
    res = invoke("query", "slowest-task", "--store", str(store_dir))
    assert res.exit_code == QueryError.exit_code
    assert "Error: no packaged question called 'slowest-task'" in res.output
    assert "did you mean slowest-tasks" in res.output
    res = invoke("query", "lineage", "--store", str(store_dir))
    assert res.exit_code == QueryError.exit_code and "needs the parameter 'key'" in res.output
    res = invoke("query", "runs", "--store", str(store_dir), "--param", "run_id")
    assert res.exit_code == UsageError.exit_code and "is not NAME=VALUE" in res.output
    res = invoke("query", "runs", "--store", str(tmp_path / "nowhere"))
    assert res.exit_code == StoreError.exit_code and "no store at" in res.output
    res = invoke("query", "DROP ALL", "--store", str(store_dir))
    assert res.exit_code == QueryError.exit_code and "update" in res.output
    res = invoke("load", str(tmp_path / "missing-run"), "--store", str(tmp_path / "s"))
    assert res.exit_code == 3 and "no such run directory or file" in res.output
    res = invoke("query", "runs", "--endpoint", "http://u:p@127.0.0.1:9/query")
    assert res.exit_code == UsageError.exit_code and "credentials in the endpoint URL" in res.output
    assert "Traceback" not in res.output


def test_help_shows_examples() -> None:
    for cmd in ("load", "query"):
        res = invoke(cmd, "--help")
        assert res.exit_code == 0 and "Example:" in res.output and f"metaprov {cmd} " in res.output


@pytest.mark.realdata
def test_real_run_lineage_from_the_command_line(tmp_path: Path) -> None:
    if not PMDA_RUNS:
        pytest.skip("real run data not found (../shared/data)")
    path = tmp_path / "s"
    assert invoke("load", str(PMDA_RUNS[0]), "--store", str(path), "--no-darshan").exit_code == 0
    key = "list-8606d556-c6f4-465b-933b-4f2338e69364"
    res = invoke("query", "lineage", "--store", str(path), "--param", f"key={key}", "-f", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["relation"] for r in rows].count("upstream") == 4
    res = invoke("query", "critical-path", "--store", str(path), "-f", "json")
    path_rows = json.loads(res.output)
    assert [r["position"] for r in path_rows] == [1, 2]
    assert path_rows[-1]["cumulative"] == pytest.approx(12.895753, abs=1e-6)


def test_quiet_load_prints_nothing_and_json_still_answers(tmp_path: Path, runs: list[Path]) -> None:
    res = invoke("-q", "load", *map(str, runs), "--store", str(tmp_path / "q"))
    assert res.exit_code == 0 and res.output == ""
    res = invoke("load", str(runs[0]), "--store", str(tmp_path / "q"), "-q", "--json")
    assert res.exit_code == 0 and json.loads(res.output)[0]["unchanged"]


def test_a_load_stopped_by_ctrl_c_says_what_was_committed(tmp_path: Path, runs: list[Path]) -> None:
    """A real SIGINT to `metaprov load R0 R1 R0b` once R0 is loaded: exit 130, and stderr names R0
    as committed (it is in the store), the run being loaded and the one not started."""
    import shutil
    import signal
    import subprocess
    import sys
    import time

    third = generate_run(tmp_path / "big", 20_000, seed=7)  # slow enough to be stopped in
    store = tmp_path / "stopped"
    proc = subprocess.Popen(
        [sys.executable, "-m", "metaprov", "-v", "load", str(runs[0]), str(third), str(runs[1])]
        + ["--store", str(store)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    for line in proc.stderr:  # -v logs each committed load
        if f"loaded {runs[0]}" in line or time.monotonic() > deadline:
            break
    time.sleep(1.5)  # into the 20,000-task run's load (many seconds), past R0's last log line
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, rest
    assert f"committed: loaded {runs[0]}" in rest
    assert f"not committed: {third} (stopped while loading" in rest
    assert f"not loaded: {runs[1]}" in rest
    with open_store(store, read_only=True) as st:
        assert len(st.graphs()) >= 1
    shutil.rmtree(third)


def test_load_interrupted_in_the_library_keeps_what_was_committed(
    tmp_path: Path, runs: list[Path]
) -> None:
    from metaprov.store import LoadInterrupted, load

    def stop_after_first(_report: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(LoadInterrupted) as stopped:
        load(list(runs), store=tmp_path / "lib", progress=stop_after_first)
    assert [r.source for r in stopped.value.reports] == [str(runs[0])]
    assert stopped.value.interrupted is None and stopped.value.not_started == [str(runs[1])]
    assert isinstance(stopped.value, KeyboardInterrupt)  # callers catching Ctrl-C still do


def test_environment_says_which_runs_have_no_environment_records(
    tmp_path: Path, runs: list[Path]
) -> None:
    """The example run (captured) has environment records, a synthetic run none: the answer's
    rows are the example's, and a note names the other run instead of leaving it out silently."""
    example = Path(__file__).resolve().parents[2] / "examples" / "run"
    path = tmp_path / "env"
    assert invoke("-q", "load", str(example), str(runs[0]), "--store", str(path)).exit_code == 0
    res = invoke("query", "environment", "--store", str(path), "-f", "json")
    assert res.exit_code == 0, res.output
    with open_store(path, read_only=True) as st:
        ids = st.query(
            "PREFIX mp: <https://w3id.org/metaprov/ns#> SELECT ?i { GRAPH ?g { ?r a mp:Run ; mp:runId ?i } }"
        )
    rows = json.loads(res.stdout)  # the note is on stderr beside a json answer
    assert rows and len({r["run_id"] for r in rows}) == 1
    (without,) = set(ids["i"]) - {rows[0]["run_id"]}
    res = invoke("query", "environment", "--store", str(path))
    assert f"note: run {without} has no software environment records" in res.output


def test_query_run_directories_without_a_store(
    store_dir: Path, runs: list[Path], tmp_path: Path
) -> None:
    """`metaprov query QUESTION RUN_DIR...`: the bytes of the store's answer, its notes on
    stderr, its errors; a store and run directories at once is a usage error."""
    env = {"METAPROV_CACHE": str(tmp_path / "cache")}
    for question in ("failures", "worker-utilisation", "runs"):
        want = invoke("query", question, "--store", str(store_dir), "-f", "csv")
        got = invoke("query", question, *map(str, runs), "-f", "csv", env=env)
        assert want.exit_code == got.exit_code == 0, got.output
        assert got.output == want.output
    out = tmp_path / "answer.json"
    res = invoke("query", "thread-utilisation", str(runs[0]), "-f", "json", "-o", str(out), env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())[0]["executions"] > 0
    res = invoke("query", "critical-path", *map(str, runs), env=env)
    assert res.exit_code == QueryError.exit_code
    assert "several runs" in res.output and "run_id" in res.output
    res = invoke("query", "failures", str(runs[0]), "--store", str(store_dir))
    assert res.exit_code == UsageError.exit_code and "not both" in res.output
    res = invoke("query", "failures", str(tmp_path), env=env)
    assert res.exit_code != 0 and "run director" in res.output
    res = invoke("query", "failures", str(runs[0]), "--engine", "direct", "-p", "nosuch=1", env=env)
    assert res.exit_code == QueryError.exit_code and "no parameter 'nosuch'" in res.output
    res = invoke("query", "runs", str(runs[0]), "--engine", "direct", env=env)
    assert res.exit_code == UsageError.exit_code and "no direct form" in res.output
