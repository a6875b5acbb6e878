"""Crates of real runs pass roc-validator (Provenance Run Crate 0.5, REQUIRED) offline, and their
metadata parses as JSON-LD with the RO-Crate contexts from ../shared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IMAGEPROC_RUNS, PMDA_RUNS, SHARED

pytest.importorskip("rocrate", reason="the crate extra (rocrate) is not installed")
pytest.importorskip("rocrate_validator", reason="roc-validator (test extra) is not installed")

from metaprov.crate import crate  # noqa: E402

pytestmark = pytest.mark.realdata

REPO = Path(__file__).resolve().parents[2]
CONTEXTS = SHARED / "data" / "rocrate-contexts"
SEEDER = SHARED / "tools" / "seed-rocrate-validator-cache"
PROFILE = "provenance-run-crate-0.5"


@pytest.fixture(scope="module")
def validator_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """roc-validator's HTTP cache seeded with the RO-Crate contexts (no internet here)."""
    if not SEEDER.is_file() or not CONTEXTS.is_dir():
        pytest.skip(f"RO-Crate contexts not found under {SHARED} (set METAPROV_SHARED)")
    cache = tmp_path_factory.mktemp("rocv") / "http_cache"
    subprocess.run([sys.executable, str(SEEDER), str(cache)], check=True, capture_output=True)
    return cache


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One crate holding examples/run and the first real PMDA run."""
    if not PMDA_RUNS:
        pytest.skip(f"real run data not found under {SHARED}/data")
    out = tmp_path_factory.mktemp("crate") / "campaign.zip"
    crate([REPO / "examples" / "run", PMDA_RUNS[0]], out, license="CC-BY-4.0")
    return out


@pytest.fixture(scope="module")
def every_other_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One crate of every other real run in ../shared/data/xpdamoda (the rest of PMDA and the
    partial ImageProcessing run): Turtle only and no report, which keeps it cheap; what the
    profile checks (actions, steps, engine, files, PROV entities) is all there."""
    runs = PMDA_RUNS[1:] + IMAGEPROC_RUNS
    if not runs:
        pytest.skip(f"real run data not found under {SHARED}/data")
    out = tmp_path_factory.mktemp("crate") / "rest"
    crate(runs, out, formats=("turtle",), report=False, license="CC-BY-4.0")
    return out


def validate(path: Path, cache: Path) -> list[str]:
    from rocrate_validator import services
    from rocrate_validator.models import Severity

    settings = services.ValidationSettings(
        rocrate_uri=str(path.absolute()),
        profile_identifier=PROFILE,
        requirement_severity=Severity.REQUIRED,
        offline=True,
        cache_path=cache,
    )
    result = services.validate(settings)
    return [f"{i.check.identifier}: {i.message}" for i in result.get_issues()]


def test_real_runs_pass_required(campaign: Path, validator_cache: Path) -> None:
    assert validate(campaign, validator_cache) == []


def test_every_other_real_run_passes_required(every_other_run: Path, validator_cache: Path) -> None:
    meta = json.loads((every_other_run / "ro-crate-metadata.json").read_text(encoding="utf-8"))
    runs = [
        e for e in meta["@graph"] if "CreateAction" in str(e.get("@type")) and e.get("instrument")
    ]
    assert runs, "no CreateAction in the crate"
    assert validate(every_other_run, validator_cache) == []


def test_metadata_is_json_ld(campaign: Path) -> None:
    import zipfile

    import rdflib

    if not CONTEXTS.is_dir():
        pytest.skip(f"RO-Crate contexts not found under {SHARED}")
    doc = json.loads(zipfile.ZipFile(campaign).read("ro-crate-metadata.json"))
    local = {
        "https://w3id.org/ro/crate/1.1/context": "ro-crate-1.1-context.jsonld",
        "https://w3id.org/ro/terms/workflow-run/context": "workflow-run-context.json",
    }
    doc["@context"] = [
        json.loads((CONTEXTS / local[c]).read_text(encoding="utf-8"))["@context"]
        for c in doc["@context"]
    ]
    g = rdflib.Graph().parse(data=json.dumps(doc), format="json-ld", base="arcp://name,crate/")
    schema = rdflib.Namespace("http://schema.org/")
    runs = set(g.subjects(rdflib.RDF.type, schema.OrganizeAction))
    assert len(runs) == 2
    assert len(set(g.subjects(rdflib.RDF.type, schema.ControlAction))) > 2


def test_the_crate_says_no_builder_path_and_whole_byte_counts(campaign: Path) -> None:
    """Issue 25: report.html embedded the builder's absolute run path; the preview printed byte
    counts as 75,851,923.000000."""
    import re
    import zipfile

    with zipfile.ZipFile(campaign) as z:
        reports = [n for n in z.namelist() if n.endswith("report.html")]
        assert len(reports) == 2
        for name in reports:
            text = z.read(name).decode("utf-8")
            for path in (PMDA_RUNS[0], REPO / "examples" / "run"):
                assert str(path) not in text, name
            assert str(REPO) not in text and str(SHARED) not in text, name
        preview = z.read("ro-crate-preview.html").decode("utf-8")
    counts = re.findall(r"(?i)bytes[^:;<]*: ([0-9][0-9,.]*)", preview)
    assert len(counts) >= 3, preview[:500]
    assert all(re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})*", c) for c in counts), counts
