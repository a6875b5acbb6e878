"""Where the workers' time went and their memory: ingest, accounting, PROV, shapes, question.

Small run directories written here (the 2-task run of ``runfiles``) with the capture's
``worker_metric.csv``, ``span.csv`` and ``worker_memory.csv``, good rows and bad ones.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from runfiles import W1, W2, A, B, tiny_files, write_run

from metaprov import read_run
from metaprov.mapping import to_prov
from metaprov.validate import validate
from metaprov.write import write

METRIC = ",worker,key,span,context,prefix,activity,unit,value,start,stop,time\n"
MEMORY = ",worker,process,managed,unmanaged,unmanaged_old,spilled,memory_limit,status,time\n"
SPAN = ",span,name,parent,time\n"


def _metric_rows() -> str:
    rows = [
        f"{W1},{A},s1,execute,inc,thread-cpu,seconds,0.75,1700000000.49,1700000001.55",
        f"{W1},{A},s1,execute,inc,thread-noncpu,seconds,0.25,1700000000.49,1700000001.55",
        f'{W2},"{B}",s1,execute,sum,thread-cpu,seconds,0.3,1700000001.99,1700000002.45',
        f"{W2},,,gather-dep,,network,seconds,0.02,1700000001.0,1700000003.0",
        f"{W1},,,get-data,,memory-read,bytes,28,1700000001.0,1700000003.0",
        f"{W1},,,get-data,,serialize,seconds,abc,1700000001.0,1700000003.0",  # value
        f",{A},s1,execute,inc,other,seconds,0.01,1700000000.49,1700000001.55",  # worker
        f"{W1},{A},s1,execute,inc,thread-cpu,seconds,0.75,1700000000.49,1700000001.55",  # again
        f"{W2},,,gather-dep,,other,seconds,0.5,1700000001.0,x",  # stop
        f"{W2},,,gather-dep,,,seconds,0.5,1700000001.0,1700000003.0",  # activity
    ]
    return METRIC + "".join(f"{i},{r},1700000003.0\n" for i, r in enumerate(rows))


def _files() -> dict[str, str]:
    files = tiny_files()
    files["worker_metric.csv"] = _metric_rows()
    files["span.csv"] = SPAN + '0,s1,"[""default""]",,1700000000.0\n1,s2,not json,,1700000000.0\n'
    files["worker_memory.csv"] = MEMORY + "".join(
        [
            f"0,{W1},100,28,72,70,0,1000,running,1700000001.0\n",
            f"1,{W1},120,28,92,70,10,1000,paused,1700000002.0\n",
            f"2,{W2},90,0,90,90,0,,running,1700000001.0\n",
            f"3,{W2},lots,0,90,90,0,,running,1700000002.0\n",  # process
            f"4,{W2},90,0,90,90,0,,running,soon\n",  # time
        ]
    )
    return files


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", _files())


def test_metrics_read_into_typed_rows_and_matched_to_their_attempt(run_dir: Path) -> None:
    rec = read_run(run_dir)
    act = rec.activity
    assert len(act) == 5
    per = act[act["key"].notna()].sort_values(["prefix", "activity"])
    assert per["key"].tolist() == [A, A, B]
    assert per["prefix"].tolist() == ["inc", "inc", "sum"]
    assert per["worker"].tolist() == [W1, W1, W2]
    assert per["attempt"].tolist() == [0, 0, 0]
    assert per["span"].tolist() == ["default"] * 3
    interval = act[act["key"].isna()]
    assert interval["attempt"].isna().all() and interval["prefix"].isna().all()
    assert interval["span"].isna().all()
    cpu = act[(act["key"] == A) & (act["activity"] == "thread-cpu")]
    assert cpu["value"].tolist() == [0.75]
    assert str(cpu["start"].iloc[0]) == "2023-11-14 22:13:20.490000+00:00"
    assert str(act["value"].dtype) == "float64" and str(act["start"].dtype) == "datetime64[us, UTC]"


def test_every_bad_row_is_counted_with_its_reason(run_dir: Path) -> None:
    acct = read_run(run_dir).accounting.files
    assert acct["worker_metric.csv"].rows_read == 10
    assert acct["worker_metric.csv"].not_used == {
        "the value is not a finite number": 1,
        "no worker": 1,
        "the same measurement again (first kept)": 1,
        "no end time (stop is not a time)": 1,
        "no context, activity or unit": 1,
    }
    assert acct["span.csv"].not_used == {"no span id, or a name that is not a JSON list of tags": 1}
    assert acct["worker_memory.csv"].not_used == {
        "time is not a time": 1,
        "process, managed or spilled bytes are not whole numbers": 1,
    }


def test_memory_samples(run_dir: Path) -> None:
    mem = read_run(run_dir).memory
    assert mem["worker"].tolist() == [W1, W2, W1]
    assert mem["paused"].tolist() == [False, False, True]
    assert mem["memory_limit"].isna().tolist() == [False, True, False]
    assert mem["spilled"].tolist() == [0, 0, 10]


def test_a_run_without_them_has_empty_tables(tmp_path: Path) -> None:
    rec = read_run(write_run(tmp_path / "plain", tiny_files()))
    assert rec.activity.empty and rec.memory.empty
    assert list(rec.activity.columns)[:3] == ["worker", "key", "attempt"]
    assert "worker_metric.csv" not in rec.accounting.files


def test_prov_shares_and_samples_conform_and_are_deterministic(
    run_dir: Path, tmp_path: Path
) -> None:
    out1, out2 = tmp_path / "a.nt", tmp_path / "b.nt"
    write(to_prov(read_run(run_dir)), out1)
    write(to_prov(read_run(run_dir)), out2)
    assert out1.read_bytes() == out2.read_bytes()
    text = out1.read_text(encoding="utf-8")
    assert text.count("#ActivityShare>") == 5
    assert text.count("#MemorySample>") == 3
    assert "/activity/execute/inc/s1/thread-cpu/seconds>" in text
    assert "/activity/gather-dep///network/seconds>" in text
    assert '#metricValue> "0.75"^^' in text
    assert '/memory/1> <https://w3id.org/metaprov/ns#paused> "true"^^' in text
    # the share of prefix inc links to its task prefix; shares outside execute name none
    assert "#sharePrefix> <" in text
    for engine in ("columnar", "shacl"):
        report = validate(out1, engine=engine)
        assert report.conforms, report.text()


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        (r"#measuredOn>", "measured on exactly one worker"),
        (r"#metricValue>", "exactly one mp:metricValue"),
        (r"/memory/0> <http://www.w3.org/ns/prov#generatedAtTime>", "prov:generatedAtTime"),
    ],
)
def test_shapes_catch_a_broken_share_or_sample(
    run_dir: Path, tmp_path: Path, drop: str, message: str
) -> None:
    import re

    out = tmp_path / "run.nt"
    write(to_prov(read_run(run_dir)), out)
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [ln for ln in lines if not re.search(drop, ln)]
    assert len(kept) < len(lines)
    broken = tmp_path / "broken.nt"
    broken.write_text("".join(kept), encoding="utf-8")
    report = validate(broken, engine="columnar")
    assert not report.conforms
    assert message in report.text()


def test_record_tables_include_activity_and_memory(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow.parquet")
    import pyarrow.parquet as pq

    from metaprov.export.records import write_records

    write_records(run_dir, tmp_path / "tables")
    act = pq.read_table(tmp_path / "tables" / "activity.parquet")
    mem = pq.read_table(tmp_path / "tables" / "memory.parquet")
    assert act.num_rows == 5 and mem.num_rows == 3
    assert str(act.schema.field("start").type) == "timestamp[us, tz=UTC]"
    assert str(mem.schema.field("paused").type) == "bool"


def test_the_question_says_which_runs_did_not_record_them(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyoxigraph")
    from metaprov.queries import run_question
    from metaprov.store import load, open_store

    with open_store(tmp_path / "store") as store:
        load([run_dir], store)
        answer = run_question(store, "worker-time")
    assert isinstance(answer, pd.DataFrame)
    got = {
        (r.prefix if isinstance(r.prefix, str) else "", r.context, r.activity): float(r.seconds)
        for r in answer.itertuples()
    }
    assert got == {
        ("inc", "execute", "thread-cpu"): 0.75,
        ("inc", "execute", "thread-noncpu"): 0.25,
        ("sum", "execute", "thread-cpu"): 0.3,
        ("", "gather-dep", "network"): 0.02,
    }
    assert answer["share"].astype(float).sum() == pytest.approx(1.0)
    assert not answer.attrs["notes"]
    # the same run without the capture's metrics (as a Mofka run): no rows, and a note saying so
    plain = write_run(tmp_path / "plain", tiny_files())
    with open_store(tmp_path / "plain-store") as store:
        load([plain], store)
        answer = run_question(store, "worker-time")
    assert isinstance(answer, pd.DataFrame) and answer.empty
    notes = answer.attrs["notes"]
    assert len(notes) == 1 and "no fine performance metrics" in notes[0]
    assert "not recorded, not 0" in notes[0]


def test_inspect_says_where_the_time_went_or_that_it_was_not_recorded(
    run_dir: Path, tmp_path: Path
) -> None:
    from metaprov.analysis.summary import format_summary, summarize

    s = summarize(read_run(run_dir))
    assert s["time_went"]["seconds_by_context"] == {"execute": 1.3, "gather-dep": 0.02}
    assert s["time_went"]["executions_measured"] == 2
    assert s["time_went"]["paused_workers"] == [W1]
    text = format_summary(s)
    assert "time went  execute 1.300 s, gather-dep 0.020 s" in text
    assert "max spilled 10 bytes; paused: " + W1 in text
    plain = summarize(read_run(write_run(tmp_path / "plain", tiny_files())))
    assert plain["time_went"] == {"recorded": False, "memory_recorded": False}
    assert "time went  not recorded" in format_summary(plain)
    assert "  memory   not recorded" in format_summary(plain)


def _merged_text(part: Path) -> str:
    """A metric part file's rows as the capture's merge writes them (no index column)."""
    from metaprov.ingest.parts import read_part

    got = read_part(part, None)
    assert got.cut_bytes == 0 and not got.notes and got.frame is not None
    text: str = got.frame.to_csv(index=False, lineterminator="\n")
    return text


def test_metric_rows_are_written_exactly_as_the_csv_module_would(tmp_path: Path) -> None:
    """The worker plugin formats an execution's metric rows itself (the shared cells once):
    byte for byte what ``csv.writer`` (and pandas) write, for awkward keys and numbers too."""
    import csv
    import io

    pytest.importorskip("distributed")
    from metaprov.capture._files import WORKER_METRIC
    from metaprov.capture.worker import MetricSink, WorkerCapture

    cap = WorkerCapture(tmp_path, metrics=True)
    cap.address, cap._closed = "tcp://127.0.0.1:1234", False
    cap._sinks = {"worker_metric": MetricSink(tmp_path / "m.arrows", cap.address)}
    key = "('a, \"b\"', 0)"
    metrics = {
        ("execute", "s-1", 'a, "b"', "thread-cpu", "seconds"): 0.1 + 0.2,
        ("execute", None, "inc", "memory-read", "bytes"): 1600000,
        ("execute", "s-1", "inc", ("disk", "read"), "count"): 2,
    }
    digested = [(name, value) for name, value in metrics.items()]
    digested.append((("execute", None, "inc", "memory-read", "bytes"), 400000))  # twice: summed
    sink = cap._sinks["worker_metric"]
    mark = sink.waiting
    for name, value in digested:  # as the wrapped digest_metric keeps them
        sink._names.append(sink._name_id(name))
        sink._values.append(value)
    cap._execution_rows(key, 1700000000.125, mark)
    cap._interval = {("gather-dep", "network", "seconds"): 1e-05}
    cap._interval_start = 1700000000.0
    cap._interval_rows(1700000002.5)
    cap._sinks["worker_metric"].close()
    text = _merged_text(tmp_path / "m.arrows")
    rows = list(csv.reader(io.StringIO(text)))
    t = rows[1][-1]
    want = io.StringIO()
    w = csv.writer(want, lineterminator="\n")
    w.writerow(WORKER_METRIC)
    addr = cap.address
    w.writerow(
        [
            addr,
            key,
            "s-1",
            "execute",
            'a, "b"',
            "thread-cpu",
            "seconds",
            0.1 + 0.2,
            1700000000.125,
            float(t),
            float(t),
        ]
    )
    w.writerow(
        [
            addr,
            key,
            None,
            "execute",
            "inc",
            "memory-read",
            "bytes",
            2000000,
            1700000000.125,
            float(t),
            float(t),
        ]
    )
    w.writerow(
        [
            addr,
            key,
            "s-1",
            "execute",
            "inc",
            "disk/read",
            "count",
            2,
            1700000000.125,
            float(t),
            float(t),
        ]
    )
    w.writerow(
        [
            addr,
            None,
            None,
            "gather-dep",
            None,
            "network",
            "seconds",
            1e-05,
            1700000000.0,
            1700000002.5,
            1700000002.5,
        ]
    )
    assert text == want.getvalue()
    assert cap._sinks["worker_metric"].rows == 4


def test_buffered_metric_rows_reach_the_file_at_flush_and_an_odd_key_loses_only_its_own(
    tmp_path: Path,
) -> None:
    """Executions' metrics wait as numbers (and the key as Dask gave it): written when
    ``flush_rows`` rows wait or at close, in order; a key or value that cannot be written costs
    its own rows only, not the batch (counted as waiting until the flush finds it)."""
    import csv
    import io

    pytest.importorskip("distributed")
    from metaprov.capture.worker import MetricSink

    class Odd:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    path = tmp_path / "m.arrows"
    sink = MetricSink(path, "tcp://127.0.0.1:1234", flush_rows=3)
    m = {("execute", "s", "inc", "thread-cpu", "seconds"): 0.5}
    sink.append_execution("inc-1", 1.0, 2.0, dict(m))
    assert sink.rows == 1 and path.stat().st_size == 0  # nothing written: waiting
    sink.append_execution(Odd(), 1.0, 2.0, dict(m))  # waits: its text is made at the flush
    assert sink.rows == 2
    sink.append_execution(("inc", 2), 1.5, 2.5, dict(m))  # 3 rows wait: the batch is written
    rows = list(csv.reader(io.StringIO(_merged_text(path))))
    assert [r[1] for r in rows[1:]] == ["inc-1", "('inc', 2)"]  # the odd key's row only lost
    assert sink.rows == 2
    sink.append_execution("inc-3", 1.5, 2.5, dict(m))
    sink.append_execution("inc-4", 3.0, 4.0, dict(m))
    odd = {**m, ("execute", "s", "inc", "x", "count"): Odd()}
    sink.append_execution("inc-5", 3.0, 4.0, odd)  # 3 rows wait: written, the odd one not
    assert sink.rows == 5
    sink.close()
    rows = list(csv.reader(io.StringIO(_merged_text(path))))
    assert [r[1] for r in rows[1:]] == ["inc-1", "('inc', 2)", "inc-3", "inc-4", "inc-5"]
    assert rows[-1][-3:] == ["3.0", "4.0", "4.0"] and sink.rows == 5


def test_the_report_says_where_the_time_went_or_that_it_was_not_recorded(
    run_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("bokeh")
    from metaprov.report import write_report

    plain = write_run(tmp_path / "plain", tiny_files())
    write_report([run_dir], tmp_path / "a.html")
    write_report([plain], tmp_path / "b.html")
    a = (tmp_path / "a.html").read_text(encoding="utf-8")
    b = (tmp_path / "b.html").read_text(encoding="utf-8")
    assert "where the workers&#x27; time went" in a or "where the workers' time went" in a
    assert "execute 1.300 s, gather-dep 0.020 s" in a
    assert "not recorded (no fine performance metrics" in b
