"""Task facts: naming callables, summarising arguments, exceptions, call sites; reading them back.

The helpers run inside Dask's hooks, so each must degrade to a summary instead of raising; the
reader must keep every row or say why not.
"""

from __future__ import annotations

import functools
import operator
import pickle
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

from dask._task_spec import Task, TaskRef  # noqa: E402
from distributed.client import SourceCode  # noqa: E402

from metaprov.capture.facts import (  # noqa: E402
    call_site,
    describe_callable,
    exception_facts,
    fused_operations,
    literal_arguments,
    summarise,
    task_function,
)


class Scaler:
    def __call__(self, x):
        return 2 * x

    def method(self, x):
        return x


class BadRepr:
    def __repr__(self):
        raise RuntimeError("broken repr")


def add(a, b):
    return a + b


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        (add, (__name__, "add", "function")),
        (functools.partial(add, 1), (__name__, "add", "partial")),
        (functools.partial(functools.partial(operator.mul, 2), 3), ("_operator", "mul", "partial")),
        (Scaler(), (__name__, "Scaler", "callable")),
        (Scaler().method, (__name__, "Scaler.method", "function")),
        (lambda x: x, (__name__, "test_task_facts.<lambda>", "function")),
        (np.add, ("numpy", "add", "function")),
        (len, ("builtins", "len", "function")),
    ],
)
def test_callables_are_named_by_module_and_qualname(func, expected):
    got = describe_callable(func)
    if expected[1].endswith("<lambda>"):
        assert got[0] == expected[0] and got[1].endswith("<lambda>") and got[2] == "function"
    else:
        assert got == expected


def test_task_specs_partial_and_fused():
    t = Task("k", functools.partial(add, 10), TaskRef("dep"), 5, thresh=0.5)
    assert task_function(t) == (__name__, "add", "partial", 1)
    rows = literal_arguments(t, 64)
    # the reference to another task is a dependency, not a literal argument
    assert [(r[0], r[4]) for r in rows] == [("partial.0", "ok"), ("1", "ok"), ("thresh", "ok")]
    assert [r[3] for r in rows] == ['"10"', '"5"', '"0.5"']
    a = Task("a", add, 1, 2)
    b = Task("b", operator.mul, TaskRef("a"), 3)
    fused = Task.fuse(a, b, key="b")
    assert task_function(fused) == ("_operator", "mul", "fused", 2)
    assert fused_operations(fused) == [
        ("a", __name__, "add", "function", ""),
        ("b", "_operator", "mul", "function", "0"),
    ]
    assert task_function(None)[2] == "data"


def test_arguments_are_summarised_never_raised():
    assert summarise(BadRepr(), 256)[2:] == (None, "repr failed: RuntimeError: broken repr")
    typ, size, value, status = summarise(np.zeros(10_000), 256)
    assert (typ, size, value, status) == ("numpy.ndarray", 80_000, None, "too large")
    assert summarise("x" * 300, 256)[2:] == (None, "too large")
    assert summarise("two\nlines", 256)[2] == "\"'two\\\\nlines'\""  # JSON: one CSV line


def test_exceptions_type_and_message():
    e = KeyError("missing")
    # Serialized bytes are never unpickled: type and message come from the repr's text.
    assert exception_facts(pickle.dumps(e), repr(e)) == ("KeyError", "missing")
    assert exception_facts(e, repr(e)) == ("KeyError", "'missing'")  # the object: str(e)
    # Dask replaced an unpicklable exception by Exception(repr(e)): the repr's type is kept
    wrapped = pickle.dumps(Exception("Custom('boom')"))
    assert exception_facts(wrapped, "Custom('boom')") == ("Custom", "boom")
    assert exception_facts(b"not a pickle", "OSError('disk')") == ("OSError", "disk")
    long = ValueError("x" * 5000)
    _, message = exception_facts(pickle.dumps(long), repr(long))
    assert len(message) < 2100 and message.endswith("more characters]")


def test_call_sites_file_and_notebook_cell():
    assert call_site(()) is None
    file_site = call_site((SourceCode("x = 1\nx.compute()\n", 2, 1, "/home/u/pipeline.py"),))
    assert file_site[:3] == ("/home/u/pipeline.py", 2, None)
    assert file_site[4] is None  # a file's source is not copied, only hashed
    cell = call_site((SourceCode("y.compute()\n", 1, 0, "<ipython-input-12-0a1b2c>"),))
    assert cell[:3] == ("<ipython-input-12-0a1b2c>", 1, 12)
    assert cell[4] == '"y.compute()\\n"'
    kernel = call_site((SourceCode("z\n", 3, 0, "/tmp/ipykernel_4242/123456.py"),))
    assert kernel[2] is None and kernel[4] == '"z\\n"'


def test_reader_counts_what_it_cannot_use(tmp_path: Path):
    """Unmatched rows and cells that are not JSON strings are reported with their line."""
    from metaprov.ingest.facts import read_task_facts
    from metaprov.records import RunRecords

    (tmp_path / "worker_result.csv").write_text(
        ",key,worker,start,outcome,type,nbytes,exception_type,exception_message,traceback,time\n"
        "0,x,tcp://w:1,1.0,error,,,ValueError,not-json,,2.0\n"
    )
    (tmp_path / "graph_submission.csv").write_text(
        ",graph,client,file,line,cell,sha256,cell_source,frames,time\n"
        "0,0,Client-1,/a.py,3,,ab,,1,5.0\n"
    )
    (tmp_path / "task_argument.csv").write_text(
        ",key,position,type,size,value,status,time\n"
        '0,x,0,int,28,"""1""",ok,1.0\n'
        '1,x,0,int,28,"""2""",ok,1.0\n'
        "2,x,1,int,28,{bad,ok,1.0\n"
    )
    records = RunRecords(path=str(tmp_path))
    read_task_facts(tmp_path, records)
    acct = records.accounting.to_dict()["files"]
    assert acct["worker_result.csv"]["not_used"] == {
        "no worker-side execution to attach to (worker_transition.csv missing)": 1
    }
    assert acct["graph_submission.csv"]["not_used"] == {
        "matches no graph.csv row (client, time)": 1
    }
    assert acct["task_argument.csv"]["not_used"] == {
        "the same key and position again (first kept)": 1
    }
    reasons = {f["reason"] for f in acct["task_argument.csv"]["findings"]}
    assert "not a JSON string literal (cell left out)" in reasons
    assert list(records.arguments["value"].fillna("<NA>")) == ["1", "<NA>"]
