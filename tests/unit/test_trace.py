"""The trace export (issue 39): a run in the Trace Event Format that Perfetto, chrome://tracing
and speedscope read: schema-valid, a process per worker and a track per thread, each execution a
slice named by its key, failed attempts marked, transfers as flows between workers, phases as
instants, times in microseconds from the run's start, the same bytes every time."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
from click.testing import CliRunner
from tinyrun import KEY_ERR, tiny_records
from trace_check import check_trace

from metaprov.cli import cli
from metaprov.ingest import read_run
from metaprov.mapping import to_prov
from metaprov.write import format_for_path, get_format, write
from metaprov.write.trace import write_trace_runs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run"


def _trace(records) -> dict:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    write(to_prov(records), buf, "trace")
    return json.loads(buf.getvalue())


def test_format_is_registered_by_name_alias_and_suffix() -> None:
    assert format_for_path("run.trace.json").name == "trace"
    assert format_for_path("run.trace.json.gz").name == "trace"
    assert get_format("chrome-trace").name == get_format("perfetto").name == "trace"
    assert format_for_path("run.json").name == "json-ld"  # .json alone stays JSON-LD
    result = CliRunner().invoke(cli, ["export", "--help"])
    assert "trace (chrome-trace" in result.output and "run.trace.json" in result.output


def test_example_run_trace_has_a_process_per_worker_and_a_slice_per_execution() -> None:
    rec = read_run(EXAMPLE)
    doc = _trace(rec)
    check_trace(doc)
    ev = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    workers = set(rec.executions["worker"])
    assert workers <= set(names.values())
    slices = [e for e in ev if e["ph"] == "X" and e["cat"].startswith("execution")]
    assert len(slices) == len(rec.executions)
    one = rec.executions.iloc[0]
    (s,) = [
        e for e in slices if e["args"]["thread"] == str(one["thread"]) and e["name"] == one["key"]
    ]
    assert names[s["pid"]] == one["worker"]
    assert s["args"]["worker"] == one["worker"] and s["args"]["attempt"] == int(one["attempt"])
    assert s["args"]["prefix"] and s["args"]["status"] == "memory"
    start = pd.Timestamp(doc["otherData"]["start_utc"])
    assert s["ts"] == (one["start"] - start) // pd.Timedelta(microseconds=1)
    assert s["dur"] == (one["end"] - one["start"]) // pd.Timedelta(microseconds=1)
    assert min(e["ts"] for e in ev if "ts" in e) == 0
    threads = {e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert {f"thread {t}" for t in rec.executions["thread"].dropna()} <= threads
    # transfers: a slice at each end and a flow from the sender's track to the receiver's
    flows = [e for e in ev if e["ph"] in ("s", "f")]
    assert len(flows) == 2 * rec.transfers["destination"].notna().sum() > 0
    phases = {e["name"] for e in ev if e["ph"] == "i" and e["cat"] == "phase"}
    assert {"run start", "run end", "worker added"} <= phases
    assert any(p.startswith("graph ") and p.endswith(" submitted") for p in phases)


def test_failed_and_incomplete_attempts_are_marked_and_counted() -> None:
    doc = _trace(tiny_records())
    check_trace(doc)
    ev = doc["traceEvents"]
    failed = [e for e in ev if e.get("cat") == "execution,failed"]
    assert failed and all(e.get("cname") == "terrible" for e in failed)
    err = [e for e in failed if e["args"]["status"] == "error"]
    assert err and err[0]["name"] == f"{KEY_ERR} [error]"
    ok = [e for e in ev if e.get("cat") == "execution" and e["name"] == KEY_ERR]
    assert ok and ok[0]["args"]["attempt"] == 1  # the retry that succeeded
    incomplete = [e for e in ev if e.get("cat") == "execution,incomplete"]
    assert incomplete and all(e["ph"] == "i" for e in incomplete)
    assert doc["otherData"]["not_drawn"][
        "executions drawn as an instant (end unknown or before start)"
    ] == len(incomplete)


def test_trace_bytes_are_deterministic(tmp_path: Path) -> None:
    rec = read_run(EXAMPLE)
    a, b = tmp_path / "a.trace.json", tmp_path / "b.trace.json"
    write(to_prov(rec), a)
    write(to_prov(read_run(EXAMPLE)), b)
    assert a.read_bytes() == b.read_bytes()


def test_two_runs_share_one_time_axis_each_from_its_own_start() -> None:
    buf = io.BytesIO()
    write_trace_runs([("A", read_run(EXAMPLE)), ("B", tiny_records())], buf)
    doc = json.loads(buf.getvalue())
    check_trace(doc)
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert {n.split(": ")[0] for n in procs.values()} == {"A", "B"}
    assert [r["run"] for r in doc["otherData"]["runs"]] == ["A", "B"]
    for label in ("A", "B"):
        pids = {p for p, n in procs.items() if n.startswith(label + ": ")}
        assert min(e["ts"] for e in ev if "ts" in e and e["pid"] in pids) == 0


def test_cli_export_and_compare_write_traces(tmp_path: Path) -> None:
    out = tmp_path / "run.trace.json"
    result = CliRunner().invoke(cli, ["export", str(EXAMPLE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "events (trace)" in result.output
    check_trace(json.loads(out.read_text()))
    pair = tmp_path / "pair.trace.json"
    result = CliRunner().invoke(cli, ["compare", str(EXAMPLE), str(EXAMPLE), "-o", str(pair)])
    assert result.exit_code == 0, result.output
    doc = json.loads(pair.read_text())
    check_trace(doc)
    assert {r["run"] for r in doc["otherData"]["runs"]} == {"run", "run#2"}


def test_an_execution_without_a_worker_is_drawn_on_a_worker_unknown_process() -> None:
    rec = tiny_records()
    rec.executions.loc[0, "worker"] = None
    doc = _trace(rec)
    check_trace(doc)
    ev = doc["traceEvents"]
    (pid,) = [
        e["pid"]
        for e in ev
        if e["name"] == "process_name" and e["args"]["name"] == "worker unknown"
    ]
    assert [e for e in ev if e.get("cat", "").startswith("execution") and e["pid"] == pid]
