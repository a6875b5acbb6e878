"""Validation: clean exports conform; broken ones are caught by both engines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tinyrun import KEY_SLASH, partial_records, tiny_records

from metaprov.errors import InputError, UsageError
from metaprov.mapping import to_prov
from metaprov.validate import validate
from metaprov.write import write

ENGINES = ["shacl", "sparql", "columnar"]
XSD = "http://www.w3.org/2001/XMLSchema#"


@pytest.fixture()
def nt(tmp_path: Path) -> Path:
    out = tmp_path / "run.nt"
    write(to_prov(tiny_records(), detail="transitions"), out)
    return out


def edit(path: Path, drop: str | None = None, sub: tuple[str, str] | None = None) -> Path:
    """A broken copy of an N-Triples export: drop lines matching ``drop``, or substitute."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if drop:
        before = len(lines)
        lines = [ln for ln in lines if not re.search(drop, ln)]
        assert len(lines) < before, f"nothing matched {drop!r}"
    text = "".join(lines)
    if sub:
        assert re.search(sub[0], text), f"nothing matched {sub[0]!r}"
        text = re.sub(sub[0], sub[1], text, count=1)
    out = path.with_name("broken.nt")
    out.write_text(text, encoding="utf-8")
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_clean_exports_conform(engine: str, nt: Path) -> None:
    report = validate(nt, engine=engine)
    assert report.conforms, report.text()
    assert report.triples > 300
    assert validate(to_prov(partial_records()), engine=engine).conforms


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("broken", "shape", "message"),
    [
        (
            {"drop": r"x%2Fy%20z/execution/0> <http://www.w3.org/ns/prov#endedAtTime>"},
            "TaskExecutionShape",
            "a start and an end",
        ),
        (
            {"drop": r"/transfer/0> <https://w3id.org/metaprov/ns#destination>"},
            "TransferShape",
            "destination",
        ),
        (
            {"drop": r"/transfer/0> <https://w3id.org/metaprov/ns#source>"},
            "TransferShape",
            "source",
        ),
        ({"drop": r"/task/a> <https://w3id.org/metaprov/ns#key>"}, "TaskShape", "mp:key"),
        (
            {"drop": r"/task/a/chunk> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"},
            "",
            "used entity",
        ),
        (
            {"drop": r"/transfer/0/replica/a> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"},
            "TaskExecutionShape",
            "used replica is a described",
        ),
        (
            # the copy 'x/y z' read would have arrived after it started (in 2030)
            {
                "sub": (
                    r'(/transfer/0> <http://www.w3.org/ns/prov#endedAtTime> )"[^"]+"',
                    r'\1"2030-01-01T00:00:00.000000Z"',
                )
            },
            "TaskExecutionShape",
            "arrived by the execution's start",
        ),
        (
            {
                "sub": (
                    r'(<https://w3id.org/metaprov/ns#inputTransferSeconds> )"[^"]+"',
                    r'\1"-1.0"',
                )
            },
            "TaskExecutionShape",
            "input transfer",
        ),
        (
            {
                "sub": (
                    r'(/task/a/execution/0> <http://www.w3.org/ns/prov#startedAtTime> )"[^"]+"',
                    r'\1"2030-01-01T00:00:00.000000Z"',
                )
            },
            "",
            "start",
        ),
    ],
)
def test_broken_exports_are_caught(
    engine: str, nt: Path, broken: dict, shape: str, message: str
) -> None:
    bad = edit(nt, **broken)
    report = validate(bad, engine=engine)
    assert not report.conforms
    hits = [v for v in report.violations if message in v.message or message in v.shape]
    assert hits, report.text()
    if shape:
        assert any(v.shape == shape for v in hits), report.text()
    assert "does NOT conform" in report.text()


def test_every_format_validates(tmp_path: Path) -> None:
    graph = to_prov(tiny_records())
    for suffix in ("ttl", "nq", "trig", "jsonld", "rdf", "provn", "provjson", "provx"):
        out = tmp_path / f"run.{suffix}"
        write(graph, out)
        report = validate(out)
        assert report.conforms, report.text()


def test_prov_json_with_an_activity_ending_before_it_starts(tmp_path: Path) -> None:
    out = tmp_path / "run.provjson"
    write(to_prov(tiny_records()), out)
    text = out.read_text()
    # Swap one execution's start and end.
    key = KEY_SLASH.replace("/", "%2F").replace(" ", "%20")
    assert key in text
    text = text.replace(
        '"prov:startTime": "2024-04-19T19:01:44+00:00"',
        '"prov:startTime": "2024-04-19T19:01:59+00:00"',
    )
    out.write_text(text)
    report = validate(out)
    assert not report.conforms
    assert report.violations[0].shape == "prov:start-precedes-end"


def test_records_and_graphs_validate_directly() -> None:
    assert validate(tiny_records()).conforms
    assert validate(to_prov(tiny_records())).engine == "columnar"  # auto: by measured cost


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        validate(tiny_records(), engine="magic")
    with pytest.raises(InputError):
        validate(tmp_path / "nope.ttl")
    garbage = tmp_path / "garbage.ttl"
    garbage.write_text("this is not turtle <<<")
    with pytest.raises(InputError, match="cannot parse"):
        validate(garbage)


def test_large_graphs_switch_to_columnar(monkeypatch: pytest.MonkeyPatch, nt: Path) -> None:
    from metaprov import validate as vmod

    monkeypatch.setattr(vmod, "SHACL_LIMIT", 10)
    report = validate(nt)
    assert report.engine == "columnar"
    assert report.conforms
    assert any("engine columnar" in n and "more than pyshacl's limit" in n for n in report.notes)
    # another syntax above the limit: parsed by Oxigraph, then read column-wise
    ttl = nt.with_suffix(".ttl")
    write(to_prov(tiny_records(), detail="transitions"), ttl)
    report = validate(ttl)
    assert (report.engine, report.conforms) == ("columnar", True)
    assert any("converted to N-Quads" in n for n in report.notes)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_broken_batch_job_is_caught(engine: str, nt: Path) -> None:
    """Batch jobs (Slurm, PBS) have their shape: one state, submitted no later than started."""
    mp, prov, xsd = "https://w3id.org/metaprov/ns#", "http://www.w3.org/ns/prov#", XSD
    job = "<https://example.org/job/42>"
    bad = nt.with_name("job.nt")
    bad.write_text(
        nt.read_text(encoding="utf-8")
        + f"{job} <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{mp}Job> .\n"
        + f'{job} <{mp}jobState> "COMPLETED" .\n{job} <{mp}jobState> "CANCELLED" .\n'
        + f'{job} <{mp}submittedAt> "2030-01-01T00:00:00Z"^^<{xsd}dateTime> .\n'
        + f'{job} <{prov}startedAtTime> "2020-01-01T00:00:00Z"^^<{xsd}dateTime> .\n',
        encoding="utf-8",
    )
    report = validate(bad, engine=engine)
    assert not report.conforms
    found = {v.message for v in report.violations if v.shape == "JobShape"}
    assert "a job has at most one mp:jobState" in found, report.text()
    assert "a job has at most one mp:submittedAt, not after its start" in found, report.text()
