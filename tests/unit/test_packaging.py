"""Issue 29: what a user installs and reads agrees with itself: one version, one documentation
URL (package metadata, mkdocs.yml, --help), extras for every feature and `all` over them, the
site's navigation over every page, --help texts that point at the site rather than at files the
wheel lacks. (CI builds the site and the wheel and runs the README's job from it: .ci/package.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from metaprov._version import DOCS_URL, SOURCE_URL, __version__, docs_url
from metaprov.cli import cli

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_one_documentation_url_everywhere() -> None:
    assert DOCS_URL.startswith("https://") and "example.invalid" not in DOCS_URL
    assert _pyproject()["project"]["urls"]["Documentation"] == DOCS_URL
    site_url = re.search(r"^site_url:\s*(\S+)", (REPO / "mkdocs.yml").read_text(), re.M)
    assert site_url and site_url.group(1) == DOCS_URL
    assert docs_url("scaling") == DOCS_URL + "scaling/"
    res = CliRunner().invoke(cli, ["--help"])
    assert res.exit_code == 0 and DOCS_URL in res.output


def test_version_from_one_place() -> None:
    project = _pyproject()
    assert "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "metaprov._version.__version__"
    res = CliRunner().invoke(cli, ["--version"])
    assert res.output.strip() == f"metaprov, version {__version__}"
    assert "## Unreleased" in (REPO / "CHANGELOG.md").read_text(encoding="utf-8")


def test_extras_cover_every_feature_and_all_installs_them() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    features = {"capture", "cluster", "report", "crate", "serve"}
    assert features <= set(extras)
    (line,) = extras["all"]
    assert set(re.search(r"\[(.*)\]", line).group(1).split(",")) == features
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "pip install '.[all]' && metaprov export examples/run" in readme


def test_the_site_lists_every_page() -> None:
    text = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^strict:\s*true", text, re.M)
    listed = set(re.findall(r":\s*([\w-]+\.md)\s*$", text, re.M))
    assert listed == {p.name for p in (REPO / "docs").glob("*.md")}


def test_help_points_at_the_site_not_at_repository_files() -> None:
    runner = CliRunner()
    for name in cli.commands:
        res = runner.invoke(cli, [name, "--help"])
        assert res.exit_code == 0, name
        assert not re.search(r"docs/\w+\.md", res.output), f"metaprov {name} --help"


def test_one_source_url_and_source_links_name_existing_files() -> None:
    """Pages link source files through the repository (a relative link out of docs/ is broken on
    the site): SOURCE_URL everywhere, and every such link names a file of this repository."""
    assert _pyproject()["project"]["urls"]["Source"] == SOURCE_URL
    repo_url = re.search(r"^repo_url:\s*(\S+)", (REPO / "mkdocs.yml").read_text(), re.M)
    assert repo_url and repo_url.group(1) == SOURCE_URL
    linked = []
    for page in (REPO / "docs").glob("*.md"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\]\(\.\./(?!docs/)", text), f"{page.name} links out of docs/"
        for path in re.findall(re.escape(SOURCE_URL) + r"/blob/main/([^)#\s]+)", text):
            assert (REPO / path).is_file(), f"{page.name} links {path}, which does not exist"
            linked.append(path)
    assert linked  # docs/compare.md links the modules it explains


def _site_check(tmp_path: Path, plant: str | None) -> subprocess.CompletedProcess:
    mkdocs = shutil.which("mkdocs") or str(Path(sys.executable).with_name("mkdocs"))
    work = tmp_path / "site-src"
    shutil.copytree(REPO / "docs", work / "docs", ignore=shutil.ignore_patterns("*.py"))
    shutil.copy(REPO / "mkdocs.yml", work / "mkdocs.yml")
    if plant:
        page = work / "docs" / "index.md"
        page.write_text(page.read_text(encoding="utf-8") + plant, encoding="utf-8")
    return subprocess.run(
        ["bash", str(REPO / ".ci" / "docs"), str(tmp_path / "site"), mkdocs],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(not (REPO / ".ci" / "docs").is_file(), reason="the CI scripts are not here")
def test_the_site_check_builds_the_docs_and_fails_on_a_broken_link(tmp_path: Path) -> None:
    """CI's documentation check (.ci/docs, run by .ci/package) passes on the docs as they are and
    fails on a planted broken link (it once ran mkdocs with --quiet, which hid the warnings strict
    mode counts, so broken links passed)."""
    ok = _site_check(tmp_path / "ok", None)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = _site_check(tmp_path / "broken", "\nSee [the code](../metaprov/cli.py).\n")
    assert broken.returncode != 0
    assert "metaprov/cli.py" in broken.stdout + broken.stderr


def test_the_readme_python_example_runs_on_the_bundled_run(tmp_path: Path) -> None:
    """The README's Python example, as written, on the bundled example run (it once read a run
    path no user has); and the quick start's lineage key is a key of that run."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"In Python:\s*```python\n(.*?)```", readme, re.S)
    assert block and '"examples/run"' in block.group(1)
    code = block.group(1).replace('"examples/run"', repr(str(REPO / "examples" / "run")))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run.ttl").stat().st_size > 0
    key = re.search(r"query lineage --param key=(\S+) --store example-store", readme)
    from metaprov import read_run

    assert key and key.group(1) in set(read_run(REPO / "examples" / "run").tasks["key"])
