"""Broken input -> an accounted warning, or an ``Error:`` naming file/line/column with exit code != 0.

One table: each case builds its input, then states what the user must get. Every case also runs
through the CLI to prove no traceback ever reaches the user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from runfiles import SHARED_HEAD, tiny_files, write_run

import metaprov
from metaprov.cli import cli
from metaprov.errors import InputError


@dataclass
class Case:
    id: str
    build: Callable[[Path], Path]
    error: str | None = None  # substring of the error message (an InputError)
    file: str | None = None  # file whose accounting must hold the finding
    reason: str | None = None  # substring of the accounting reason
    line: int | None = None
    column: str | None = None


def _with(**changes: str | bytes | None) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        files: dict = tiny_files()
        for name, content in changes.items():
            name = name.replace("__", ".")
            if content is None:
                files.pop(name, None)
            else:
                files[name] = content
        return write_run(tmp / "run", files)

    return build


def _edit(name: str, fn: Callable[[str], str | bytes]) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        files: dict = tiny_files()
        files[name] = fn(files[name])
        return write_run(tmp / "run", files)

    return build


def _missing_dir(tmp: Path) -> Path:
    return tmp / "does-not-exist"


def _a_file(tmp: Path) -> Path:
    p = tmp / "scheduler_transition.csv"
    p.write_text(tiny_files()["scheduler_transition.csv"])
    return p


def _no_run_files(tmp: Path) -> Path:
    d = tmp / "empty-run"
    d.mkdir()
    (d / "notes.txt").write_text("nothing here")
    return d


def _real_truncated(tmp: Path) -> Path:
    """The real ImageProcessing head file (cut mid-run), with its last row cut mid-line too."""
    if SHARED_HEAD is None:
        pytest.skip("../shared/data not present: real scheduler_transition.head.csv unavailable")
    d = tmp / "run"
    d.mkdir()
    data = SHARED_HEAD.read_bytes()
    (d / "scheduler_transition.csv").write_bytes(data[: len(data) - 40])  # cut inside the last row
    return d


def _drop_line(text: str, n: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:n] + lines[n + 1 :])


EVIL = "{__import__('os').system('touch PWNED-MARKER'): 1}"

CASES = [
    Case("missing-directory", _missing_dir, error="no such directory"),
    Case("file-not-directory", _a_file, error="is a file, not a run directory"),
    Case("no-run-files", _no_run_files, error="holds none of the run files"),
    Case(
        "zero-byte-csv",
        _with(worker_transfer__csv=""),
        file="worker_transfer.csv",
        reason="empty file",
    ),
    Case(
        "header-only-csv",
        _with(
            worker_transfer__csv=",start,stop,middle,duration,keys,total,bandwidth,who,type,called_from,time,compressed\n"
        ),
    ),
    Case(
        "truncated-last-row",
        _edit("scheduler_transition.csv", lambda t: t[:-30]),
        file="scheduler_transition.csv",
        reason="malformed row",
        line=7,
    ),
    Case(
        "truncated-real-head-file",
        _real_truncated,
        file="scheduler_transition.csv",
        reason="malformed row",
        line=5000,
    ),
    Case(
        "missing-required-column",
        _edit("scheduler_transition.csv", lambda t: t.replace(",key,", ",kee,", 1)),
        error="missing required column(s) 'key'",
    ),
    Case(
        "missing-optional-column",
        _edit(
            "worker_transfer.csv",
            lambda t: "\n".join(ln.rsplit(",", 1)[0] for ln in t.splitlines()) + "\n",
        ),
        file="worker_transfer.csv",
        reason="missing optional column",
        column="compressed",
    ),
    Case(
        "extra-unknown-column",
        _edit(
            "client.csv",
            lambda t: (
                t.replace(",time\n", ",time,colour\n")
                .replace("\n0,", ",blue\n0,", 0)
                .replace("5\n", "5,blue\n")
                .replace(".0\n", ".0,red\n")
            ),
        ),
        file="client.csv",
        reason="unknown extra column",
        column="colour",
    ),
    Case(
        "malformed-keys-literal",
        _edit("worker_transfer.csv", lambda t: t.replace("{'inc-1111': 28}", "{'inc-1111': 28", 1)),
        file="worker_transfer.csv",
        reason="malformed 'keys' literal",
        line=2,
        column="keys",
    ),
    Case(
        "malformed-dependencies-literal",
        _edit("graph.csv", lambda t: t.replace("set(), ", "set(, ")),
        file="graph.csv",
        reason="malformed 'dependencies' literal",
        line=2,
        column="dependencies",
    ),
    Case(
        "code-in-literal-never-runs",
        _edit("worker_transfer.csv", lambda t: t.replace("{'inc-1111': 28}", '"' + EVIL + '"', 1)),
        file="worker_transfer.csv",
        reason="malformed 'keys' literal",
        line=2,
    ),
    Case(
        "unknown-task-state-kept",
        _edit(
            "worker_transition.csv",
            lambda t: t + "11,inc-1111,memory,teleported,tcp://127.0.0.1:40001,1700000009.0\n",
        ),
    ),
    Case(
        "garbage-time",
        _edit("worker_transition.csv", lambda t: t.replace("1700000000.4", "yesterday")),
        file="worker_transition.csv",
        reason="unparseable number in column 'time'",
        line=3,
        column="time",
    ),
    Case(
        "nan-time",
        _edit("worker_transition.csv", lambda t: t.replace("1700000000.4", "nan")),
        file="worker_transition.csv",
        reason="unparseable number in column 'time'",
        line=3,
    ),
    Case(
        "garbage-thread-id",
        _edit("scheduler_transition.csv", lambda t: t.replace("140000000000001", "0xdeadbeef")),
        file="scheduler_transition.csv",
        reason="not a thread id",
        column="thread",
    ),
    Case(
        "non-utf8-bytes",
        _edit(
            "worker_transition.csv",
            lambda t: (
                t.replace("1,inc-1111", "1,inc-\xff\xfe")
                .encode("utf-8")
                .replace(b"\xc3\xbf\xc3\xbe", b"\xff\xfe")
            ),
        ),
        file="worker_transition.csv",
        reason="not UTF-8",
        line=3,
    ),
    Case(
        "non-utf8-header",
        _edit("client.csv", lambda t: b"\xff" + t.encode()),
        error="header is not UTF-8",
    ),
    Case(
        "blank-line",
        _edit("worker.csv", lambda t: t.replace("\n1,", "\n\n1,")),
        file="worker.csv",
        reason="blank line",
        line=3,
    ),
    Case(
        "unknown-transfer-type",
        _edit("worker_transfer.csv", lambda t: t.replace("outgoing_transfer", "sideways_transfer")),
        file="worker_transfer.csv",
        reason="unknown transfer type",
        line=4,
    ),
    Case(
        "duplicate-rows-interleaved",
        _edit(
            "worker_transition.csv",
            lambda t: (
                t.splitlines(keepends=True)[0]
                + "".join(ln + ln for ln in t.splitlines(keepends=True)[1:])
            ),
        ),
        file="worker_transition.csv",
        reason="duplicate row",
        line=3,
    ),
    Case(
        "duplicate-file-appended",
        _edit(
            "scheduler_transition.csv",
            lambda t: t + "".join(t.splitlines(keepends=True)[1:]),
        ),
        file="scheduler_transition.csv",
        reason="duplicate row",
        line=8,
    ),
    Case(
        "negative-epoch",
        _edit("worker_transition.csv", lambda t: t.replace("1700000000.4", "-1700000000.4")),
        file="worker_transition.csv",
        reason="implausible time in column 'time'",
        line=3,
        column="time",
    ),
    Case(
        "year-3000",
        _edit("worker_transition.csv", lambda t: t.replace("1700000000.4", "32503680000.0")),
        file="worker_transition.csv",
        reason="implausible time",
        line=3,
    ),
    Case(
        "epoch-in-milliseconds",
        _edit("worker_transition.csv", lambda t: t.replace("1700000002.0", "1700000002000.0")),
        file="worker_transition.csv",
        reason="implausible time",
        line=11,
    ),
    Case(
        "time-that-overflows",
        _edit("worker_transition.csv", lambda t: t.replace("1700000002.4", "1e300")),
        file="worker_transition.csv",
        reason="time out of range in column 'time'",
        line=12,
    ),
    Case(
        "end-before-start",
        _edit("worker_transition.csv", lambda t: t.replace("1700000002.4", "1700000001.0")),
        file="worker_transition.csv",
        reason="end of an execution with no start before it",
    ),
    Case(
        "transfer-stop-before-start",
        _edit(
            "worker_transfer.csv",
            lambda t: t.replace("1700000001.771,1700000001.785", "1700000001.771,1700000001.7"),
        ),
        file="worker_transfer.csv",
        reason="'stop' before 'start'",
        line=4,
    ),
    Case(
        "transfer-start-overflows",
        _edit("worker_transfer.csv", lambda t: t.replace("0,1700000001.77,", "0,1e300,", 1)),
        file="worker_transfer.csv",
        reason="no usable 'start' time",
        line=2,
    ),
    Case(
        "only-graph-and-transfers",
        _with(
            scheduler_transition__csv=None,
            worker_transition__csv=None,
            worker__csv=None,
            client__csv=None,
        ),
    ),
]


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no raw numpy warning reaches a user
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_library(case: Case, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = case.build(tmp_path)
    if case.error:
        with pytest.raises(InputError) as exc:
            metaprov.read_run(path)
        assert case.error in str(exc.value)
        assert str(path.name) in str(exc.value) or "does-not-exist" in str(exc.value)
        return
    records = metaprov.read_run(path)
    if case.file:
        issues = records.accounting.issues
        hit = issues[
            (issues["file"] == case.file) & issues["reason"].str.contains(case.reason, regex=False)
        ]
        assert len(hit), f"no finding {case.reason!r} for {case.file}: {issues.to_dict('records')}"
        if case.line is not None:
            assert case.line in hit["line"].dropna().astype(int).tolist()
        if case.column is not None:
            assert case.column in hit["column"].tolist()
        acct = records.accounting.files[case.file]
        assert acct.rows_used + sum(acct.not_used.values()) == acct.rows_read
    assert not (tmp_path / "PWNED-MARKER").exists()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli(case: Case, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = case.build(tmp_path)
    result = CliRunner().invoke(cli, ["inspect", str(path)])
    assert "Traceback" not in result.output
    if case.error:
        assert result.exit_code == InputError.exit_code
        assert result.output.startswith("Error: ") or "Error: " in result.output
        assert case.error in result.output
    else:
        assert result.exit_code == 0, result.output
        if case.file and case.reason and case.reason not in ("malformed row",):
            assert case.file in result.output
    assert not (tmp_path / "PWNED-MARKER").exists()


def test_unknown_state_is_kept(tmp_path: Path) -> None:
    path = _edit(
        "worker_transition.csv",
        lambda t: t + "11,inc-1111,memory,teleported,tcp://127.0.0.1:40001,1700000009.0\n",
    )(tmp_path)
    r = metaprov.read_run(path)
    assert "teleported" in set(r.transitions["to_state"])
    assert (
        r.tasks.set_index("key").loc["inc-1111", "state"] == "memory"
    )  # the scheduler's view wins


def test_keys_with_quotes_unicode_and_long_tuples_join_across_files(tmp_path: Path) -> None:
    from runfiles import TRANSFER_HEADER, WORKER_HEADER, csv_row

    keys = ['quo"te-1', "apo'strophe-2", "ünï-ключ-3", str(("long", *range(200)))]
    literal_keys = ['quo"te-1', "apo'strophe-2", "ünï-ключ-3", ("long", *range(200))]
    w = WORKER_HEADER + "".join(
        csv_row([i, k, "ready", "executing", "tcp://127.0.0.1:1", 10.0 + i])
        for i, k in enumerate(keys)
    )
    t = TRANSFER_HEADER + "".join(
        csv_row(
            [
                i,
                1.0,
                2.0,
                1.5,
                1.0,
                repr({k: 8}),
                8,
                8.0,
                "tcp://127.0.0.1:2",
                "incoming_transfer",
                "tcp://127.0.0.1:1",
                3.0 + i,
                "",
            ]
        )
        for i, k in enumerate(literal_keys)
    )
    r = metaprov.read_run(
        write_run(tmp_path / "run", {"worker_transition.csv": w, "worker_transfer.csv": t})
    )
    assert sorted(r.tasks["key"]) == sorted(keys)  # one task per key, never two ids
    assert sorted(r.transfers["key"]) == sorted(keys)


def test_duplicate_rows_are_not_retries(tmp_path: Path) -> None:
    def doubled(t: str) -> str:
        lines = t.splitlines(keepends=True)
        return lines[0] + "".join(ln + ln for ln in lines[1:])

    files: dict = tiny_files()
    for name in ("scheduler_transition.csv", "worker_transition.csv"):
        files[name] = doubled(files[name])
    doubled_run = metaprov.read_run(write_run(tmp_path / "doubled", files))
    plain = metaprov.read_run(write_run(tmp_path / "plain", tiny_files()))
    assert not doubled_run.tasks["retried"].any()
    assert len(doubled_run.executions) == len(plain.executions)
    assert len(doubled_run.transitions) == len(plain.transitions)
    acct = doubled_run.accounting.files["worker_transition.csv"]
    assert acct.not_used == {next(iter(acct.not_used)): 11} and acct.rows_read == 22


def test_exports_of_implausible_times_still_conform(tmp_path: Path) -> None:
    """Every bad-time case at once: counted, and the export passes the project's own shapes."""
    from metaprov.validate import validate

    files: dict = tiny_files()
    w = files["worker_transition.csv"]
    w = w.replace("1700000000.4", "-1700000000.4").replace("1700000002.0", "1700000002000.0")
    files["worker_transition.csv"] = w.replace("1700000001.5", "1e300")
    t = files["worker_transfer.csv"].replace("0,1700000001.77,", "0,1e300,", 1)
    files["worker_transfer.csv"] = t.replace("1700000001.785", "1700000001.7")
    run = write_run(tmp_path / "run", files)
    report = validate(run)
    assert report.conforms, report.text()
