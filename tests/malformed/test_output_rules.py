"""Issue 36 item 2 and issue 39 (overwriting): one output-path rule and one overwrite rule.

An output never is, holds or sits inside an input or a store of the same command, ``--force``
or not (symlinks resolved, hard links and bind mounts by inode); an existing output file (or
non-empty directory) is replaced only with ``--force``. Each case runs the real command; see
docs/reliability.md.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

import metaprov
from metaprov.cli import cli
from metaprov.errors import OutputError

EXE = [sys.executable, "-m", "metaprov"]


def _tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` with its digest (what a refused command must leave as it was)."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _refused(res: object, *words: str) -> None:
    out = res.output  # type: ignore[attr-defined]
    assert res.exit_code == OutputError.exit_code, out  # type: ignore[attr-defined]
    assert "Error: " in out and "Traceback" not in out, out
    for w in words:
        assert w in out, out


def _cli(*args: str) -> object:
    return CliRunner().invoke(cli, [*map(str, args)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from metaprov.synthetic import generate_run

    root = tmp_path_factory.mktemp("rules")
    return (
        generate_run(root / "A", 30, seed=1, workers=2, threads=1),
        generate_run(root / "B", 30, seed=2, workers=2, threads=1),
    )


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "R1", tiny_files())


# --- an output never is, holds or sits inside an input or a store -------------------------------


def test_crate_onto_its_own_run_is_refused_even_with_force(run: Path) -> None:
    """`metaprov crate RUN -o RUN --force` replaced the run directory with the crate."""
    pytest.importorskip("rocrate")
    before = _tree(run)
    _refused(_cli("crate", run, "-o", run, "--force", "--no-report"), "one of the inputs")
    link = run.parent / "link"
    link.symlink_to(run, target_is_directory=True)  # the same folder by another name
    _refused(_cli("crate", run, "-o", link, "--force", "--no-report"), "one of the inputs")
    _refused(
        _cli("crate", run, "-o", run / "crate.zip", "--force", "--no-report"),
        "sits inside the input",
    )
    _refused(_cli("crate", run, "-o", run.parent, "--force", "--no-report"), "holds the input")
    assert _tree(run) == before


def test_compare_page_onto_a_compared_runs_file_is_refused(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    """`metaprov compare A B -o A/worker.csv` overwrote the compared run's own file."""
    pytest.importorskip("bokeh")
    a, b = runs
    before = _tree(a)
    for extra in ([], ["--force"]):
        res = _cli("compare", a, b, "-o", a / "worker.csv", *extra)
        _refused(res, "sits inside the input", "--force does not change this")
        _refused(_cli("compare", a, b, "-o", a / "page.html", *extra), "sits inside the input")
    hard = tmp_path / "hard.html"
    os.link(a / "worker.csv", hard)  # the same file by a hard link outside the run
    _refused(_cli("compare", a, b, "-o", hard, "--force"), "one of the inputs", "hard link")
    assert _tree(a) == before and not (a / "page.html").exists()


@pytest.mark.parametrize("command", ["report", "records", "export", "campaign", "load"])
def test_an_output_inside_the_run_is_refused(command: str, run: Path, tmp_path: Path) -> None:
    if command == "report":
        pytest.importorskip("bokeh")
    other = write_run(tmp_path / "R2", tiny_files())
    before = _tree(run)
    args = {
        "report": ["report", run, "-o", run / "r.html", "--force"],
        "records": ["records", run, "-o", run / "recs", "--force"],
        "export": ["export", run, "-o", run / "x" / ".." / "prov.nt", "--force"],
        "campaign": ["export", run, other, "-o", run / "shards"],
        "load": ["load", run, other, "--store", other / "st"],
    }[command]
    _refused(_cli(*args), "sits inside the input")
    assert _tree(run) == before
    assert sorted(p.name for p in other.iterdir()) == sorted(tiny_files())


def test_records_over_the_folder_holding_the_run_is_refused(run: Path) -> None:
    keep = run.parent / "keep.txt"
    keep.write_text("mine")
    _refused(_cli("records", run, "-o", run.parent, "--force"), "holds the input")
    assert keep.read_text() == "mine" and (run / "graph.csv").is_file()


def test_query_answer_never_replaces_its_question_file(tmp_path: Path, run: Path) -> None:
    st = tmp_path / "st"
    metaprov.load([run], store=st)
    rq = tmp_path / "q.rq"
    rq.write_text("SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }\n")
    before = rq.read_text()
    _refused(
        _cli("query", rq, "--store", st, "-f", "csv", "-o", rq, "--force"), "one of the inputs"
    )
    assert rq.read_text() == before
    _refused(_cli("query", rq, "--store", st, "-f", "csv", "-o", st / "a.csv"), "store")


def test_follow_refuses_a_store_inside_the_followed_run(run: Path) -> None:
    """`follow --store RUN/st` never completed: its own writes reset the quiet period."""
    before = _tree(run)
    res = subprocess.run(
        [
            *EXE,
            "follow",
            str(run),
            "--store",
            str(run / "st"),
            "--quiet-period",
            "1",
            "--interval",
            "0.2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == OutputError.exit_code, res.stderr
    assert "sits inside the input" in res.stderr and "Traceback" not in res.stderr
    assert not (run / "st").exists() and _tree(run) == before
    res = subprocess.run(
        [*EXE, "serve", "--store", str(run / "st"), "--follow", str(run), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == OutputError.exit_code, res.stderr
    assert "sits inside the input" in res.stderr and not (run / "st").exists()


# --- one overwrite rule: an existing output is replaced only with --force -----------------------


@pytest.mark.parametrize("command", ["export", "query", "report", "compare", "records", "crate"])
def test_an_existing_output_is_replaced_only_with_force(
    command: str, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = runs
    if command in ("report", "compare"):
        pytest.importorskip("bokeh")
    if command == "crate":
        pytest.importorskip("rocrate")
    out = tmp_path / {"records": "recs", "crate": "c.zip"}.get(command, "out.txt")
    if command == "records":
        out.mkdir()
        (out / "mine.txt").write_text("old")
        old = out / "mine.txt"
    else:
        out.write_text("old")
        old = out
    st = tmp_path / "st"
    if command == "query":
        metaprov.load([a], store=st)
    args = {
        "export": ["export", a, "-f", "nt", "-o", out],
        "query": ["query", "runs", "--store", st, "-f", "csv", "-o", out],
        "report": ["report", a, "-o", out, "--no-darshan"],
        "compare": ["compare", a, b, "-o", out],
        "records": ["records", a, "-o", out],
        "crate": ["crate", a, "-o", out, "--no-report"],
    }[command]
    res = _cli(*args)
    _refused(res, str(out), "already exists", "pass --force to replace it")
    assert old.read_text() == "old"
    res = _cli(*args, "--force")
    assert res.exit_code == 0, res.output
    assert not old.exists() or old.read_bytes() != b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [out.name, *(["st"] if command == "query" else [])]
    )  # no temporary file left beside


def test_streams_need_no_force(run: Path) -> None:
    res = _cli("export", run, "-f", "nt", "-o", os.devnull)
    assert res.exit_code == 0, res.output
    res = _cli("export", run, "-f", "nt", "-o", "-")
    assert res.exit_code == 0 and res.output.count(" .\n") > 10


def test_capture_takes_force_as_its_overwrite_flag() -> None:
    res = _cli("capture", "--help")
    assert "--force, --overwrite" in res.output


def test_inline_sparql_longer_than_a_file_name_with_an_output(run: Path, tmp_path: Path) -> None:
    """The question is looked up as a file (never written over): a long inline query is text."""
    st = tmp_path / "st"
    metaprov.load([run], store=st)
    text = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }" + " " * 5000
    out = tmp_path / "n.csv"
    res = _cli("query", text, "--store", st, "-f", "csv", "-o", out)
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("n\n")
