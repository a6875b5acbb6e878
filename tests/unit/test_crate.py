"""metaprov.crate on examples/run: what the crate says, its files, zip, --add-to, PROV-N refusal."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("rocrate", reason="the crate extra (rocrate) is not installed")

from rocrate.rocrate import ROCrate  # noqa: E402

from metaprov.crate import crate  # noqa: E402
from metaprov.errors import UsageError  # noqa: E402
from metaprov.ingest import read_run  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "run"
ORCID = "https://orcid.org/0000-0002-1825-0097"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def graph_of(out: Path) -> dict[str, dict]:
    doc = json.loads((out / "ro-crate-metadata.json").read_text(encoding="utf-8"))
    return {e["@id"]: e for e in doc["@graph"]}


def ids(v: object) -> list[str]:
    items = v if isinstance(v, list) else [v]
    return [x["@id"] for x in items if isinstance(x, dict)]


def of_type(g: dict[str, dict], t: str) -> list[dict]:
    return [
        e for e in g.values() if t in (e["@type"] if isinstance(e["@type"], list) else [e["@type"]])
    ]


@pytest.fixture(scope="module")
def example_crate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("crate") / "example"
    crate(
        [EXAMPLE],
        out,
        license="CC-BY-4.0",
        authors=[f"Josiah Carberry <{ORCID}>"],
    )
    return out


def test_run_action_steps_and_engine(example_crate: Path) -> None:
    g = graph_of(example_crate)
    root = g["./"]
    assert "https://w3id.org/ro/wfrun/provenance/0.5" in ids(root["conformsTo"])
    records = read_run(EXAMPLE)
    runs = [a for a in of_type(g, "CreateAction") if a.get("identifier") == records.run_id]
    assert len(runs) == 1
    run = runs[0]
    assert run["startTime"].endswith("+00:00") and run["endTime"] >= run["startTime"]
    wf = g[ids(run["instrument"])[0]]
    assert {"File", "ComputationalWorkflow", "HowTo"} <= set(wf["@type"])
    assert ids(root["mainEntity"]) == [wf["@id"]]
    # recorded anonymous: no account, so no Person is invented (a named run's: below)
    assert "agent" not in run and [p["name"] for p in of_type(g, "Person")] == ["Josiah Carberry"]
    # one step per task prefix, one ControlAction + CreateAction per prefix that ran
    prefixes = sorted(records.tasks["prefix"].dropna().unique())
    steps = of_type(g, "HowToStep")
    assert sorted(s["name"] for s in steps) == prefixes
    assert sorted(ids(wf["step"])) == sorted(s["@id"] for s in steps)
    (org,) = of_type(g, "OrganizeAction")
    assert ids(org["result"]) == [run["@id"]]
    controls = [g[i] for i in ids(org["object"])]
    assert len(controls) == len(prefixes) and all(c["@type"] == "ControlAction" for c in controls)
    acts = [g[ids(c["object"])[0]] for c in controls]

    # counts as resourceUsage PropertyValues: per prefix, summing to the run's tasks
    def usage(a: dict, term: str) -> object:
        for i in ids(a["resourceUsage"]):
            if g[i]["propertyID"].endswith("#" + term):
                return g[i]["value"]
        return None

    assert sum(usage(a, "taskCount") for a in acts) == len(records.tasks) == usage(run, "taskCount")
    failed = [a for a in acts if a["actionStatus"].endswith("FailedActionStatus")]
    assert [g[ids(a["instrument"])[0]]["name"] for a in failed] == ["validate"]
    assert all(a["startTime"] <= a["endTime"] for a in acts)
    # per prefix, not per task (plus one SoftwareApplication per package of the environment)
    software = of_type(g, "SoftwareApplication")
    assert len(software) < 10 + records.packages[["name", "version"]].drop_duplicates().shape[0]
    assert len(g) - len(software) < 20 * len(prefixes) + 60


def test_prov_files_described_and_valid(example_crate: Path) -> None:
    from metaprov.validate import validate

    g = graph_of(example_crate)
    prov = [e for e in g.values() if e["@id"].rsplit("/", 1)[-1].startswith("prov.")]
    assert sorted(e["encodingFormat"] for e in prov) == [
        "application/ld+json",
        "text/provenance-notation",
        "text/turtle",
    ]
    for e in prov:
        path = example_crate / e["@id"]
        assert int(e["contentSize"]) == path.stat().st_size
        assert e["sha256"] == sha256(path)
        assert "https://www.w3.org/TR/prov-o/" in ids(e["conformsTo"])
        assert "https://w3id.org/metaprov/ns/0.1.0" in ids(e["conformsTo"])
        assert validate(path).conforms, path


def test_records_listed_with_size_and_sha256(example_crate: Path) -> None:
    g = graph_of(example_crate)
    listed = {e["name"]: e for e in g.values() if "/record/" in e["@id"]}
    on_disk = sorted(p.relative_to(EXAMPLE).as_posix() for p in EXAMPLE.rglob("*") if p.is_file())
    assert any(n.startswith("environment/") for n in on_disk)  # sub-directories listed too
    assert sorted(listed) == on_disk
    for name, e in listed.items():
        assert e["sha256"] == sha256(EXAMPLE / name)
        assert int(e["contentSize"]) == (EXAMPLE / name).stat().st_size
    assert not (example_crate / "runs" / "records").exists()


def test_preview_readme_and_same_bytes(example_crate: Path, tmp_path: Path) -> None:
    html = (example_crate / "ro-crate-preview.html").read_text(encoding="utf-8")
    assert "measure" in html and "prov.ttl" in html and "<script" not in html
    assert "Josiah Carberry" in html
    again = tmp_path / "again"
    crate([EXAMPLE], again, license="CC-BY-4.0", authors=[f"Josiah Carberry <{ORCID}>"])
    for p in sorted(example_crate.rglob("*")):
        if p.is_file():
            assert p.read_bytes() == (again / p.relative_to(example_crate)).read_bytes(), p


def test_zip_round_trip(example_crate: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.zip"
    crate([EXAMPLE], out, license="CC-BY-4.0", authors=[f"Josiah Carberry <{ORCID}>"])
    with zipfile.ZipFile(out) as zf:
        zf.extractall(tmp_path / "x")
    a, b = ROCrate(example_crate), ROCrate(tmp_path / "x")
    assert sorted(e.id for e in a.get_entities()) == sorted(e.id for e in b.get_entities())
    for e in b.get_entities():
        if e.get("sha256") and not e.id.startswith("#"):
            assert sha256(tmp_path / "x" / e.id) == e["sha256"]
    assert sorted(e.id for e in ROCrate(out).get_entities()) == sorted(
        e.id for e in b.get_entities()
    )


def test_add_to_foreign_crate_keeps_everything(tmp_path: Path) -> None:
    from rocrate.model.person import Person

    src = tmp_path / "src"
    src.mkdir()
    (src / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    c = ROCrate(version="1.1")
    c.name, c.description = "My dataset", "made by another tool"
    person = c.add(Person(c, ORCID, properties={"name": "Josiah Carberry"}))
    c.add_file(src / "data.csv", "data/data.csv", properties={"name": "data", "author": person})
    c.root_dataset["author"] = person
    dest = tmp_path / "dataset"
    c.write(dest)
    before = graph_of(dest)

    crate([EXAMPLE], add_to=dest)  # in place
    after = graph_of(dest)
    for i, e in before.items():
        if i == "./":
            for k, v in e.items():
                if k not in ("hasPart", "conformsTo"):
                    assert after[i][k] == v, k
            assert set(ids(e["hasPart"])) <= set(ids(after[i]["hasPart"]))
        elif i != "ro-crate-metadata.json":
            assert after[i] == e, i
    assert (dest / "data" / "data.csv").read_text(encoding="utf-8") == "a,b\n1,2\n"
    run_id = read_run(EXAMPLE).run_id
    assert len([a for a in of_type(after, "CreateAction") if a.get("identifier") == run_id]) == 1

    crate([EXAMPLE], add_to=dest)  # again: replaced, not duplicated
    again = graph_of(dest)
    assert sorted(again) == sorted(after)
    assert len(json.loads((dest / "ro-crate-metadata.json").read_text())["@graph"]) == len(after)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_provn_is_always_included(tmp_path: Path) -> None:
    """PROV-N streams at any size (issue 39): no crate leaves it out any more."""
    out = tmp_path / "c"
    result = crate([EXAMPLE], out)
    folder = out / result.runs[0]["folder"]
    assert (folder / "prov.ttl").exists() and (folder / "prov.provn").exists()
    assert not result.runs[0]["notes"]
    assert {"no license", "no author"} <= {w.split(":")[0] for w in result.warnings}


def test_include_inputs_copies_records(tmp_path: Path) -> None:
    out = tmp_path / "c"
    result = crate([EXAMPLE], out, formats=("turtle",), include_inputs=True)
    folder = out / result.runs[0]["folder"] / "records"
    for p in EXAMPLE.iterdir():
        if p.is_file():
            assert (folder / p.name).read_bytes() == p.read_bytes()
    g = graph_of(out)
    assert all("/record/" not in i for i in g)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"license": "not a licence!"}, "neither an SPDX license identifier nor a URL"),
        ({"authors": ["0000-0002-1825-0098"]}, "not a valid ORCID iD"),
        ({"formats": ("turtle", "rdfxml")}, "unknown PROV format"),
        ({"date_published": "yesterday"}, "not an ISO 8601 date"),
    ],
)
def test_bad_options(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        crate([EXAMPLE], tmp_path / "c", **kwargs)
    assert not list(tmp_path.iterdir())


def test_the_crate_holds_the_run_report(tmp_path: Path) -> None:
    """The run's HTML report (issue 14) is in its folder, drawn from the records the crate
    read (the same facts as ``metaprov report`` of the run), listed with its checksum and
    linked from the preview; ``report=False`` leaves it out."""
    pytest.importorskip("bokeh", reason="the report extra (bokeh) is not installed")
    from metaprov.report import read_facts, write_report

    out = tmp_path / "c"
    result = crate([EXAMPLE], out, formats=("turtle",))
    rel = result.runs[0]["folder"] + "report.html"
    direct = write_report([EXAMPLE], tmp_path / "direct.html")
    facts = read_facts(out / rel)
    # the same facts, the run named by its directory's name (not the builder's path: issue 25)
    assert [r["path"] for r in facts["runs"]] == [EXAMPLE.name]
    assert str(EXAMPLE) not in (out / rel).read_text(encoding="utf-8")
    for r in direct.facts["runs"]:
        r["path"] = EXAMPLE.name
    assert facts == direct.facts
    g = graph_of(out)
    assert g[rel]["encodingFormat"] == "text/html" and g[rel]["sha256"] == sha256(out / rel)
    assert rel in (out / "ro-crate-preview.html").read_text(encoding="utf-8")
    crate([EXAMPLE], tmp_path / "d", formats=("turtle",), report=False)
    assert not (tmp_path / "d" / result.runs[0]["folder"] / "report.html").exists()


def test_same_run_twice_is_added_once(tmp_path: Path) -> None:
    # a copy of the example with the account recorded (the example is anonymous)
    named = tmp_path / "run"
    shutil.copytree(EXAMPLE, named)
    meta = json.loads((named / "metaprov-run.json").read_text(encoding="utf-8"))
    (named / "metaprov-run.json").write_text(json.dumps({**meta, "user": "ann"}), encoding="utf-8")
    result = crate([named, named], tmp_path / "c", formats=("turtle",))
    assert len(result.runs) == 1
    g = graph_of(tmp_path / "c")
    runs = [a for a in of_type(g, "CreateAction") if a.get("identifier")]
    assert len(runs) == 1
    assert len(of_type(g, "Person")) == 1 and len(of_type(g, "OrganizeAction")) == 1
    (person,) = of_type(g, "Person")
    assert ids(runs[0]["agent"]) == [person["@id"]] and person["name"] == "ann"


def test_client_script_as_the_workflow(tmp_path: Path) -> None:
    script = REPO / "examples" / "capture_example.py"
    out = tmp_path / "c"
    crate([EXAMPLE], out, formats=("turtle",), workflow=script)
    g = graph_of(out)
    wf = g["workflow/capture_example.py"]
    assert ids(g["./"]["mainEntity"]) == [wf["@id"]]
    assert g[ids(wf["programmingLanguage"])[0]]["name"] == "Python"
    (run,) = [a for a in of_type(g, "CreateAction") if a.get("identifier")]
    assert ids(run["instrument"]) == [wf["@id"]]
    assert len(ids(wf["step"])) == len(of_type(g, "HowToStep")) > 0
    graphs = [e for e in g.values() if e["@id"].endswith("task-graph.json")]
    assert graphs and all(e["@type"] == "File" for e in graphs)
    assert (out / "workflow" / "capture_example.py").read_bytes() == script.read_bytes()


def test_files_at_hand_are_regular_files_inside_the_data_folders(tmp_path: Path) -> None:
    """The crate reads (for size and sha256) only regular files inside the folders the user
    gave: a path out of them, a symbolic link leading out, a folder or a FIFO is not read."""
    import os

    from metaprov.crate.builder import _inside

    data, other = tmp_path / "data", tmp_path / "other"
    data.mkdir()
    other.mkdir()
    (data / "in.h5").write_bytes(b"x")
    (other / "secret").write_bytes(b"s")
    (data / "link").symlink_to(other / "secret")
    os.mkfifo(data / "fifo")
    folders = [data.resolve()]
    assert _inside(data / "in.h5", folders) == (data / "in.h5").resolve()
    assert _inside(other / "secret", folders) is None
    assert _inside(data / "link", folders) is None
    assert _inside(data / "fifo", folders) is None
    assert _inside(data, folders) is None
    assert _inside(Path("in.h5"), folders) is None  # relative: not a path the run recorded
    assert _inside(data / ".." / "other" / "secret", folders) is None


def test_software_files_are_not_inputs() -> None:
    import pandas as pd

    from metaprov.crate.figures import is_software, software_roots

    env = pd.DataFrame(
        {
            "venv": ["/home/u/venv", None],
            "conda_prefix": [None, "/opt/conda"],
            "python_executable": ["/home/u/venv/bin/python", "/usr/bin/python3"],
        }
    )
    roots = software_roots(env)
    assert roots == ["/home/u/venv/", "/opt/conda/", "/usr/"]
    paths = pd.Series(
        [
            "/lus/p/data/part-1.h5",
            "/home/u/venv/share/x.json",
            "/opt/conda/lib/libz.so.1",
            "/srv/code/model.py",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/data/run/config.yaml",
        ]
    )
    assert is_software(paths, roots).tolist() == [False, True, True, True, True, False]


def _without_transitions(path: Path, n_tasks: int) -> Path:
    """A synthetic Mofka run with its transition files gone (as ImageProcessing R1): what ran
    shows only in result sizes and transfers, no execution is on record."""
    from metaprov.synthetic import generate_run

    run = generate_run(path, n_tasks, seed=0)
    for name in ("scheduler_transition.csv", "worker_transition.csv"):
        (run / name).unlink()
    return run


def test_steps_that_ran_without_a_record_have_their_actions(tmp_path: Path) -> None:
    """Issue 39: with executed = tasks with an execution, a run without transition files had no
    step action and no tool in the workflow's hasPart (roc-validator REQUIRED 1.1 and 8.3)."""
    run = _without_transitions(tmp_path / "run", 120)
    tasks = read_run(run).tasks
    ran = sorted(tasks.loc[~tasks["never_ran"].astype(bool), "prefix"].unique())
    assert (tasks["n_executions"] == 0).all() and ran and len(ran) < tasks["prefix"].nunique()
    out = tmp_path / "crate"
    result = crate([run], out, formats=("turtle",), report=False, license="CC-BY-4.0")
    assert not [w for w in result.warnings if "no task" in w]
    g = graph_of(out)
    (org,) = of_type(g, "OrganizeAction")
    controls = [g[i] for i in ids(org["object"])]
    assert all(c["@type"] == "ControlAction" for c in controls)
    acts = [g[ids(c["object"])[0]] for c in controls]
    tools = [g[ids(a["instrument"])[0]] for a in acts]
    assert sorted(t["name"] for t in tools) == ran
    (wf,) = of_type(g, "ComputationalWorkflow")
    assert sorted(ids(wf["hasPart"])) == sorted(t["@id"] for t in tools)
    assert len(ids(wf["step"])) == tasks["prefix"].nunique()  # never-ran steps kept, no action
    for a in acts:
        assert "ran without a record of their execution" in a["description"], a["description"]
        assert "startTime" not in a and "endTime" not in a  # unknown, not invented
        usage = [g[i]["propertyID"].rsplit("#", 1)[-1] for i in ids(a["resourceUsage"])]
        assert "Worker" not in usage and "totalDuration" not in usage, usage
    (action,) = [a for a in of_type(g, "CreateAction") if a.get("identifier")]
    usage = [g[i]["propertyID"].rsplit("#", 1)[-1] for i in ids(action["resourceUsage"])]
    assert "totalDuration" not in usage and "ran without a record" in action["description"]


def test_a_run_none_of_whose_tasks_ran_is_warned_about(tmp_path: Path) -> None:
    run = _without_transitions(tmp_path / "run", 60)
    assert read_run(run).tasks["never_ran"].astype(bool).all()
    result = crate([run], tmp_path / "crate", formats=("turtle",), report=False)
    assert [w for w in result.warnings if "no task of the run ran" in w and str(run) in w]
