"""The subset of the Trace Event Format (JSON Object Format) metaprov writes, as a JSON Schema,
and checks that hold for every trace metaprov writes (tests of ``metaprov.write.trace``)."""

from __future__ import annotations

from typing import Any

_INT = {"type": "integer"}
_BASE = {
    "name": {"type": "string"},
    "cat": {"type": "string"},
    "pid": {"type": "integer", "minimum": 0},
    "tid": {"type": "integer", "minimum": 0},
    "ts": {"type": "integer", "minimum": 0},
    "args": {"type": "object"},
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["traceEvents", "otherData", "displayTimeUnit"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
        "traceEvents": {
            "type": "array",
            "items": {
                "oneOf": [
                    {  # metadata: process and thread names and order
                        "type": "object",
                        "required": ["name", "ph", "pid", "tid", "args"],
                        "properties": {
                            **_BASE,
                            "ph": {"const": "M"},
                            "name": {
                                "enum": [
                                    "process_name",
                                    "process_sort_index",
                                    "process_labels",
                                    "thread_name",
                                    "thread_sort_index",
                                ]
                            },
                        },
                        "additionalProperties": False,
                    },
                    {  # complete slices: executions, transfers, I/O
                        "type": "object",
                        "required": ["name", "cat", "ph", "pid", "tid", "ts", "dur", "args"],
                        "properties": {
                            **_BASE,
                            "ph": {"const": "X"},
                            "dur": {"type": "integer", "minimum": 0},
                            "cname": {"type": "string"},
                        },
                        "additionalProperties": False,
                    },
                    {  # instants: phases, executions without an end
                        "type": "object",
                        "required": ["name", "cat", "ph", "s", "pid", "tid", "ts"],
                        "properties": {
                            **_BASE,
                            "ph": {"const": "i"},
                            "s": {"enum": ["g", "p", "t"]},
                        },
                        "additionalProperties": False,
                    },
                    {  # flow start and end: transfers between workers
                        "type": "object",
                        "required": ["name", "cat", "ph", "id", "pid", "tid", "ts"],
                        "properties": {
                            **_BASE,
                            "ph": {"enum": ["s", "f"]},
                            "id": _INT,
                            "bp": {"const": "e"},
                        },
                        "additionalProperties": False,
                    },
                ]
            },
        },
    },
}


def check_trace(doc: dict[str, Any]) -> None:
    """Schema-valid; every slice and flow on a named thread of a named process; flows in
    pairs (start at one worker, end at another); slices on one track nest."""
    import jsonschema

    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    ev = doc["traceEvents"]
    procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    tids = [tid for _, tid in threads]
    assert len(tids) == len(set(tids)), "a tid is used by two processes"
    for e in ev:
        if e["ph"] in ("X", "s", "f") or (e["ph"] == "i" and e["s"] == "t"):
            assert (e["pid"], e["tid"]) in threads, e
        if e["ph"] != "M":
            assert e["pid"] in procs, e
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    for i, s in starts.items():
        assert s["pid"] != ends[i]["pid"] or s["tid"] != ends[i]["tid"]
    by_track: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in ev:
        if e["ph"] == "X":
            by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for track, spans in by_track.items():
        open_: list[int] = []
        for s, t in sorted(spans, key=lambda x: (x[0], -x[1])):
            while open_ and open_[-1] <= s:
                open_.pop()
            assert not open_ or t <= open_[-1], (track, s, t, open_[-1])
            open_.append(t)
