"""Issue 26, beyond crates and serve: parser bombs (RDF/XML entity expansion, deep JSON-LD and
RDF/XML), every command's output through the same rules (inputs, FIFOs, store directories,
missing folders, umask), campaign shard names and resume digests, full and read-only file
systems. Each case runs the real command; see docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

import metaprov
from metaprov.cli import cli
from metaprov.errors import InputError, OutputError

EXE = [sys.executable, "-m", "metaprov"]


def _ok_error(res: object, code: int, *words: str) -> None:
    out = res.output  # type: ignore[attr-defined]
    assert res.exit_code == code, out  # type: ignore[attr-defined]
    assert "Error: " in out and "Traceback" not in out, out
    for w in words:
        assert w in out, out


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXE, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tmp_path_factory.mktemp("hm") / "R1", tiny_files())


@pytest.fixture(scope="module")
def store(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hm-store") / "st"
    metaprov.load([run], store=path)
    return path


# --- item 10: parser bombs ------------------------------------------------------------------------

LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE rdf:RDF [\n <!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">\n'
    + "".join(
        f' <!ENTITY {n} "{("&" + p + ";") * 10}">\n'
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + ']>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://ex/">\n'
    '<rdf:Description rdf:about="http://ex/s"><ex:p>&i;</ex:p></rdf:Description>\n</rdf:RDF>\n'
)


def _deep_files(tmp: Path) -> dict[str, Path]:
    d = 70_000
    files = {
        "laughs.rdf": LAUGHS,
        "arrays.jsonld": '{"@id":"http://ex/s","http://ex/p":' + "[" * d + "1" + "]" * d + "}",
        "objects.jsonld": '{"@id":"http://ex/s","http://ex/p":'
        + '{"http://ex/q":' * d
        + "1"
        + "}" * d
        + "}",
        "lists.jsonld": '{"@id":"http://ex/s","http://ex/p":'
        + '{"@list":[' * 30_000
        + "1"
        + "]}" * 30_000
        + "}",
        "deep.rdf": '<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
        ' xmlns:ex="http://ex/"><rdf:Description rdf:about="http://ex/s">'
        + '<ex:p rdf:parseType="Resource">' * d
        + "<ex:q>1</ex:q>"
        + "</ex:p>" * d
        + "</rdf:Description></rdf:RDF>",
    }
    out = {}
    for name, text in files.items():
        (tmp / name).write_text(text, encoding="utf-8")
        out[name] = tmp / name
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["load", "validate"])
def test_parser_bombs_are_refused_with_an_error_never_an_abort(
    tmp_path: Path, command: str
) -> None:
    # in this process: refused before any parser runs (before the fix, these hung or killed it)
    for name, path in _deep_files(tmp_path).items():
        args = [command, str(path)] + (
            ["--store", str(tmp_path / "st")] if command == "load" else []
        )
        t0 = time.monotonic()
        res = CliRunner().invoke(cli, args)
        _ok_error(
            res, InputError.exit_code, "entity" if name == "laughs.rdf" else "nested more than"
        )
        assert time.monotonic() - t0 < 30, name


def test_a_parser_bomb_through_the_real_command(tmp_path: Path) -> None:
    path = _deep_files(tmp_path)["lists.jsonld"]  # crashed the process (SIGSEGV) before
    proc = _run("load", str(path), "--store", str(tmp_path / "st"), timeout=60)
    assert proc.returncode == InputError.exit_code, (proc.returncode, proc.stderr[-500:])
    assert proc.stderr.startswith("Error: ") and "Traceback" not in proc.stderr


def _depth_by_json(text: str) -> int:
    def depth(v: object) -> int:
        if isinstance(v, tuple):  # an object, its pairs kept (duplicate keys too)
            return 1 + max((depth(x) for _, x in v), default=0)
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        return 0

    return depth(json.loads(text, object_pairs_hook=tuple))


def test_the_json_depth_scan_skips_strings_and_escapes_across_pieces(tmp_path: Path) -> None:
    from metaprov.store.files import _json_depth

    rng = random.Random(7)
    tricky = ['"]]]"', '"[[["', '"\\\\"', '"\\"]"', '"a\\\\\\"[b"', '"{\\"x\\":[}"', "1", "null"]

    def value(level: int) -> str:
        k = rng.random()
        if level > 6 or k < 0.3:
            return rng.choice(tricky)
        if k < 0.65:
            return "[" + ",".join(value(level + 1) for _ in range(rng.randint(0, 3))) + "]"
        items = [f"{rng.choice(tricky)}:{value(level + 1)}" for _ in range(rng.randint(0, 3))]
        return "{" + ",".join(i for i in items if i.startswith('"')) + "}"

    for n in range(60):
        text = value(0)
        path = tmp_path / f"{n}.json"
        path.write_text(text, encoding="utf-8")
        want = _depth_by_json(text)
        for piece in (1, 2, 3, 7, 1 << 20):
            assert _json_depth(path, 10_000, piece_size=piece) == want, (text, piece)


def test_metaprov_json_ld_and_rdf_xml_exports_still_load(run: Path, tmp_path: Path) -> None:
    for suffix in ("jsonld", "rdf"):
        out = tmp_path / f"r.{suffix}"
        from metaprov.export import export

        export(run, out)
        st = tmp_path / f"st-{suffix}"
        res = CliRunner().invoke(cli, ["load", str(out), "--store", str(st)])
        assert res.exit_code == 0, res.output
        assert CliRunner().invoke(cli, ["validate", str(out)]).exit_code == 0


# --- item 5: every command that writes a file goes through the same output rules -----------------


def test_report_never_writes_over_an_input(run: Path) -> None:
    victim = run / "worker_transition.csv"
    before = victim.read_bytes()
    res = CliRunner().invoke(cli, ["report", str(run), "-o", str(victim), "--force"])
    _ok_error(res, OutputError.exit_code, "sits inside the input")
    assert victim.read_bytes() == before


def test_report_onto_a_fifo_writes_through_it(run: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    res = CliRunner().invoke(cli, ["report", str(run), "-o", str(fifo), "--no-darshan"])
    t.join(60)
    assert res.exit_code == 0, res.output
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert got and got[0].startswith(b"<!DOCTYPE html")


def test_report_follows_the_umask_like_exports(run: Path, tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        out = tmp_path / "r.html"
        res = CliRunner().invoke(cli, ["report", str(run), "-o", str(out), "--no-darshan"])
        assert res.exit_code == 0, res.output
        assert stat.S_IMODE(out.stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_an_output_inside_a_store_is_refused(store: Path, run: Path, tmp_path: Path) -> None:
    current = store / "CURRENT"
    before = current.read_bytes()
    res = CliRunner().invoke(
        cli, ["query", "runs", "--store", str(store), "-f", "csv", "-o", str(current)]
    )
    _ok_error(res, OutputError.exit_code, "store directory")
    res = CliRunner().invoke(cli, ["export", str(run), "-o", str(store / "x.nq")])
    _ok_error(res, OutputError.exit_code, "store directory")
    res = CliRunner().invoke(cli, ["report", str(run), "-o", str(store / "r.html")])
    _ok_error(res, OutputError.exit_code, "store directory")
    assert current.read_bytes() == before
    assert not (store / "x.nq").exists()
    res = CliRunner().invoke(cli, ["query", "runs", "--store", str(store), "-f", "csv"])
    assert res.exit_code == 0 and "run_id" in res.output


@pytest.mark.parametrize("command", ["export", "query", "report", "records", "crate"])
def test_a_missing_output_folder_is_never_created(
    command: str, run: Path, store: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no" / "such"
    args = {
        "export": ["export", str(run), "-o", str(missing / "x.ttl")],
        "query": [
            "query",
            "runs",
            "--store",
            str(store),
            "-f",
            "csv",
            "-o",
            str(missing / "a.csv"),
        ],
        "report": ["report", str(run), "-o", str(missing / "r.html")],
        "records": ["records", str(run), "-o", str(missing / "recs")],
        "crate": ["crate", str(run), "-o", str(missing / "c")],
    }[command]
    if command == "crate":
        pytest.importorskip("rocrate")
    res = CliRunner().invoke(cli, args)
    assert res.exit_code in (OutputError.exit_code, 2), res.output  # crate: a usage error
    assert "Error: " in res.output and "Traceback" not in res.output
    assert "does not exist" in res.output
    assert not (tmp_path / "no").exists()


def test_crate_onto_a_fifo_is_refused(run: Path, tmp_path: Path) -> None:
    pytest.importorskip("rocrate")
    fifo = tmp_path / "c.zip"
    os.mkfifo(fifo)
    res = CliRunner().invoke(cli, ["crate", str(run), "-o", str(fifo), "--force", "--no-report"])
    _ok_error(res, 2, "FIFO")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


# --- item 14: campaign shard names are one-to-one; resume checks the shard's digest --------------


def test_campaign_shard_names_never_collide_and_resume_checks_digests(tmp_path: Path) -> None:
    from metaprov.export.campaign import export_campaign, shard_names

    names = ["R:1", "R-1", "R 1", "-R1-", "R1", "r1"]
    assert len(set(shard_names([tmp_path / n for n in names]))) == len(names)
    assert shard_names([tmp_path / "R1"]) == ["R1"]  # safe names are kept as they are
    runs = []
    for k, n in enumerate(["R:1", "R-1"]):
        files = {
            f: t.replace("127.0.0.1:8786", f"127.0.0.1:{8800 + k}") for f, t in tiny_files().items()
        }
        runs.append(write_run(tmp_path / "runs" / n, files))
    out = tmp_path / "out"
    res = export_campaign(runs, out, backend="in-process")
    shards = [out / e["shard"] for e in res.entries]
    assert len(set(shards)) == 2 and all(s.is_file() for s in shards)
    ids = {e["run_id"] for e in res.entries}
    assert len(ids) == 2
    # damage one shard without changing its size: resume converts it again
    good = shards[0].read_bytes()
    shards[0].write_bytes(good.replace(b"<", b"(", 1))
    again = export_campaign(runs, out, backend="in-process")
    by_shard = {out / e["shard"]: e for e in again.entries}
    assert by_shard[shards[0]]["reused"] is False and by_shard[shards[1]]["reused"] is True
    assert shards[0].read_bytes() == good


# --- items 12, 15: full and read-only file systems --------------------------------------------


def _tmpfs(path: Path, *options: str) -> Path:
    path.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(["size=64k", *options]), "tmpfs", str(path)],
        capture_output=True,
    )
    if res.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (mounting needs root)")
    return path


def _fill(disk: Path) -> None:
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.parametrize("command", ["crate", "report", "records", "campaign"])
def test_full_disk_returns_with_an_error(command: str, run: Path, tmp_path: Path) -> None:
    if command == "crate":
        pytest.importorskip("rocrate")
    disk = _tmpfs(tmp_path / "disk")
    try:
        _fill(disk)
        args = {
            "crate": ["crate", str(run), "-o", str(disk / "c.zip"), "--no-report", "--no-darshan"],
            "report": ["report", str(run), "-o", str(disk / "r.html"), "--no-darshan"],
            "records": ["records", str(run), "-o", str(disk / "recs"), "-f", "csv"],
            "campaign": ["export", str(run), str(run.parent / "R2"), "-o", str(disk / "camp")],
        }[command]
        if command == "campaign":
            write_run(
                run.parent / "R2",
                {f: t.replace("127.0.0.1:8786", "127.0.0.1:8799") for f, t in tiny_files().items()},
            )
        proc = _run(*args, "--backend", "in-process") if command == "campaign" else _run(*args)
        assert proc.returncode != 0, proc.stderr
        assert proc.stderr.startswith("Error: ") or "\nError: " in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        if command != "campaign":
            assert sorted(p.name for p in disk.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.parametrize("command", ["report", "records", "campaign", "crate", "export"])
def test_read_only_file_system_is_an_error(command: str, run: Path, tmp_path: Path) -> None:
    if command == "crate":
        pytest.importorskip("rocrate")
    disk = _tmpfs(tmp_path / "ro", "ro")
    try:
        args = {
            "crate": ["crate", str(run), "-o", str(disk / "c"), "--no-report"],
            "report": ["report", str(run), "-o", str(disk / "r.html"), "--no-darshan"],
            "records": ["records", str(run), "-o", str(disk / "recs")],
            "campaign": [
                "export",
                str(run),
                "-o",
                str(disk / "camp"),
                "-f",
                "nq",
                "--backend",
                "in-process",
            ],
            "export": ["export", str(run), "-o", str(disk / "x.ttl")],
        }[command]
        res = CliRunner().invoke(cli, args)
        assert res.exit_code != 0, res.output
        assert "Error: " in res.output and "Traceback" not in res.output, res.output
        assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), (
            repr(res.exception)
        )
    finally:
        subprocess.run(["umount", str(disk)], check=False)
