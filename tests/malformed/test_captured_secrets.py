"""Issue 36 item 5: every captured string passes the secret filter (a git branch, a path, ...).

A token in a git branch name (``feature/x-ghp_<36 chars>``) was written to the run's environment
files, the export, the crate and the records although ``looks_secret()`` said True for it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

from metaprov.cli import cli
from metaprov.redact import looks_secret, scrub

TOKEN = "ghp_" + "Ab3dEf6hIj9kLm2oPq5sTu8wXy1zAb4dEf7h"  # the shape of a GitHub token (36 chars)
BRANCH = f"feature/x-{TOKEN}"
SCRIPT = textwrap.dedent(
    """
    from distributed import Client, LocalCluster

    if __name__ == "__main__":
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                          host="127.0.0.1", dashboard_address=None) as cluster, Client(cluster) as c:
            print(sum(c.gather(c.map(lambda i: i * i, range(4)))))
    """
)


def _git(repo: Path, *args: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(repo),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def _no_token_under(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            if p.suffix == ".zip":
                with zipfile.ZipFile(p) as z:
                    data = b"".join(z.read(n) for n in z.namelist())
            assert TOKEN.encode() not in data, p


def test_the_filter_says_true_for_the_branch_and_scrub_withholds_it() -> None:
    assert looks_secret(BRANCH) and looks_secret(f"x_{TOKEN}")
    record = {
        "git": {"branch": BRANCH, "commit": "a" * 40, "root": "/src/app"},
        "script": {"path": f"/home/u/{TOKEN}/run.py", "sha256": "b" * 64},
        "packages": [{"name": "dask", "location": "/opt/site-packages"}],
    }
    clean, withheld = scrub(record)
    assert withheld == ["git.branch", "script.path"]
    assert clean["git"] == {"branch": None, "commit": "a" * 40, "root": "/src/app"}
    assert clean["script"]["sha256"] == "b" * 64 and clean["packages"] == record["packages"]


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_a_token_in_a_git_branch_reaches_no_output(tmp_path: Path) -> None:
    """A real git repository with the branch, a real capture, then export, records, crate."""
    pytest.importorskip("distributed")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "pipeline.py").write_text(SCRIPT)
    _git(repo, "add", "pipeline.py")
    _git(repo, "commit", "-q", "-m", "first")
    _git(repo, "checkout", "-q", "-b", BRANCH)
    _git(repo, "tag", f"v1-{TOKEN}")
    run = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "metaprov", "capture", "-o", str(run), str(repo / "pipeline.py")],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert res.returncode == 0, res.stderr
    envs = [json.loads(p.read_text()) for p in (run / "environment").iterdir()]
    scripted = [e for e in envs if e.get("git")]
    assert scripted, envs  # the git state was recorded: the commit is there, the branch is not
    assert all(e["git"]["branch"] is None and len(e["git"]["commit"]) == 40 for e in scripted)
    assert any("git.branch: withheld (looks like a secret)" in e["errors"] for e in scripted)
    outs = tmp_path / "outs"
    outs.mkdir()
    for args in (
        ["export", str(run), "-o", str(outs / "run.nt")],
        ["records", str(run), "-o", str(outs / "records"), "-f", "csv"],
    ):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, r.output
    if pytest.importorskip("rocrate"):
        r = CliRunner().invoke(cli, ["crate", str(run), "-o", str(outs / "c.zip"), "--no-report"])
        assert r.exit_code == 0, r.output
    _no_token_under(run)
    _no_token_under(outs)


def test_an_older_environment_file_is_scrubbed_at_ingest(tmp_path: Path) -> None:
    """A record written before the filter (or by hand) passes it when read."""
    run = write_run(tmp_path / "R1", tiny_files())
    (run / "environment").mkdir()
    record = {
        "layout": "metaprov-environment/1",
        "role": "client",
        "process": {"pid": 12},
        "python": {"executable": "/usr/bin/python3", "version": "3.11.7"},
        "packages": [{"name": "dask", "version": "2024.1.0", "location": f"/x/{TOKEN}"}],
        "script": {"kind": "script", "path": "/src/run.py", "sha256": "c" * 64},
        "git": {"root": "/src", "commit": "d" * 40, "branch": BRANCH, "dirty": False},
        "errors": [],
    }
    (run / "environment" / "client-12-ab12cd34.json").write_text(json.dumps(record))
    out = tmp_path / "out.nt"
    r = CliRunner().invoke(cli, ["export", str(run), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert TOKEN not in out.read_text() and "d" * 40 in out.read_text()
    r = CliRunner().invoke(cli, ["inspect", str(run)])
    assert "withheld: they look like secrets" in r.output, r.output
