"""`metaprov crate`: exit codes and messages, then the crate re-read with rocrate."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from metaprov.cli import cli

pytest.importorskip("rocrate", reason="the crate extra (rocrate) is not installed")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "examples" / "run")


def invoke(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_crate_zip_then_reread(tmp_path: Path) -> None:
    from rocrate.rocrate import ROCrate

    out = tmp_path / "run-crate.zip"
    result = invoke(
        "crate",
        EXAMPLE,
        "-o",
        str(out),
        "--prov",
        "turtle",
        "--license",
        "CC-BY-4.0",
        "--author",
        "Josiah Carberry <https://orcid.org/0000-0002-1825-0097>",
        "--name",
        "Example run",
        "--description",
        "A small run",
    )
    assert result.exit_code == 0, result.output
    assert "1 run(s)" in result.stderr and "Warning" not in result.stderr
    c = ROCrate(out)
    assert c.root_dataset["name"] == "Example run"
    assert c.root_dataset["license"].id == "https://spdx.org/licenses/CC-BY-4.0"
    assert c.root_dataset["author"].id == "https://orcid.org/0000-0002-1825-0097"
    assert zipfile.ZipFile(out).testzip() is None


def test_crate_warns_about_license_and_author(tmp_path: Path) -> None:
    result = invoke("crate", EXAMPLE, "-o", str(tmp_path / "c"), "--prov", "turtle")
    assert result.exit_code == 0, result.output
    assert "no license" in result.stderr and "no author" in result.stderr
    quiet = invoke("crate", EXAMPLE, "-o", str(tmp_path / "d"), "--prov", "turtle", "-q")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def _not_empty(tmp: Path) -> list[str]:
    (tmp / "full").mkdir()
    (tmp / "full" / "keep.txt").write_text("mine", encoding="utf-8")
    return [EXAMPLE, "-o", str(tmp / "full")]


def _zip_exists(tmp: Path) -> list[str]:
    (tmp / "c.zip").write_bytes(b"old")
    return [EXAMPLE, "-o", str(tmp / "c.zip")]


def _not_a_crate(tmp: Path) -> list[str]:
    (tmp / "plain").mkdir()
    (tmp / "plain" / "a.txt").write_text("x", encoding="utf-8")
    return [EXAMPLE, "--add-to", str(tmp / "plain")]


def _broken_metadata(tmp: Path) -> list[str]:
    (tmp / "broken").mkdir()
    (tmp / "broken" / "ro-crate-metadata.json").write_text("{not json", encoding="utf-8")
    return [EXAMPLE, "--add-to", str(tmp / "broken")]


def _unwritable(tmp: Path) -> list[str]:
    (tmp / "afile").write_text("x", encoding="utf-8")
    return [EXAMPLE, "-o", str(tmp / "afile" / "crate")]


@pytest.mark.parametrize(
    ("make", "code", "message"),
    [
        (lambda t: ["/no/such/run", "-o", str(t / "c")], 3, "no such run directory"),
        (_not_empty, 9, "exists and is not empty"),
        (_zip_exists, 9, "already exists"),
        (_not_a_crate, 3, "not an RO-Crate"),
        (_broken_metadata, 3, "not a readable RO-Crate"),
        (_unwritable, 2, "is not a writable directory"),
        (lambda t: [EXAMPLE], 2, "no output given"),
    ],
    ids=[
        "missing-run",
        "not-empty",
        "zip-exists",
        "not-a-crate",
        "broken-metadata",
        "unwritable",
        "no-output",
    ],
)
def test_crate_errors_leave_nothing_behind(
    tmp_path: Path, make: object, code: int, message: str
) -> None:
    args = make(tmp_path)  # type: ignore[operator]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    stamps = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    result = invoke("crate", *args, "--prov", "turtle")
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("Error: ") and message in result.stderr
    assert "Traceback" not in result.output
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert all(p.read_bytes() == b for p, b in stamps.items())


def test_crate_force_replaces_and_needs_rocrate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = _not_empty(tmp_path)
    result = invoke("crate", *args, "--prov", "turtle", "--force")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "full" / "keep.txt").exists()
    assert (tmp_path / "full" / "ro-crate-metadata.json").exists()
    import sys

    monkeypatch.setitem(sys.modules, "rocrate", None)
    monkeypatch.setitem(sys.modules, "rocrate.rocrate", None)
    result = invoke("crate", EXAMPLE, "-o", str(tmp_path / "x"))
    assert result.exit_code == 2 and "pip install 'metaprov[crate]'" in result.stderr
