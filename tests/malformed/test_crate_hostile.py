"""An existing crate is untrusted input (``crate --add-to``): ids that leave the crate, symbolic
links, FIFOs, zip bombs and unsafe zip names, malformed metadata, a ``javascript:`` author; the
original crate is never modified; in-place updates are atomic under ``kill -9``.
See docs/reliability.md ("Existing crates").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from runfiles import tiny_files, write_run

pytest.importorskip("rocrate", reason="the crate extra (rocrate) is not installed")

from metaprov.cli import cli  # noqa: E402
from metaprov.crate import crate  # noqa: E402
from metaprov.errors import InputError  # noqa: E402

FAST = {"report": False, "formats": ("turtle",), "darshan": False}
FAST_CLI = ["--no-report", "--prov", "turtle", "--no-darshan"]


def _ok_error(res: object, code: int, *words: str) -> None:
    out = res.output  # type: ignore[attr-defined]
    assert res.exit_code == code, out  # type: ignore[attr-defined]
    assert "Error: " in out and "Traceback" not in out, out
    for w in words:
        assert w in out, out


def tree_state(top: Path) -> dict[str, tuple[str, int]]:
    """Every entry under ``top``: kind + sha256 or link target, and the inode."""
    out = {}
    for p in sorted(top.rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            what = "link:" + os.readlink(p)
        elif p.is_file():
            what = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            what = "dir"
        out[p.relative_to(top).as_posix()] = (what, st.st_ino)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    top = tmp_path_factory.mktemp("runs")
    r1 = write_run(top / "R1", tiny_files())
    files2 = {  # another run: another scheduler address, so another run id
        k: v.replace("127.0.0.1:8786", "127.0.0.1:8787") for k, v in tiny_files().items()
    }
    r2 = write_run(top / "R2", files2)
    return r1, r2


@pytest.fixture(scope="module")
def base_crate(runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("crate") / "base"
    crate([runs[0]], out, **FAST)
    return out


@pytest.fixture
def old(base_crate: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "old"
    shutil.copytree(base_crate, dest, symlinks=True)
    return dest


def metadata(c: Path) -> dict:
    return json.loads((c / "ro-crate-metadata.json").read_text(encoding="utf-8"))


def put_metadata(c: Path, doc: dict) -> None:
    (c / "ro-crate-metadata.json").write_text(json.dumps(doc), encoding="utf-8")


def run_identifier(c: Path) -> str:
    for e in metadata(c)["@graph"]:
        t = e.get("@type")
        if "CreateAction" in (t if isinstance(t, list) else [t]) and e.get("identifier"):
            return str(e["identifier"])
    raise AssertionError("no run in the crate")


# --- item 1: ids that leave the crate never reach the file system -------------------------------


@pytest.mark.parametrize(
    "bad_id", ["../victim", "%2e%2e/victim", "/ABS/victim", "file:///ABS/victim"]
)
def test_an_id_outside_the_crate_is_refused_and_nothing_outside_is_touched(
    old: Path, runs: tuple[Path, Path], tmp_path: Path, bad_id: str
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    bad_id = bad_id.replace("/ABS", str(tmp_path))
    doc = metadata(old)
    doc["@graph"].append(
        {"@id": bad_id, "@type": "CreateAction", "identifier": run_identifier(old)}
    )
    put_metadata(old, doc)
    before = tree_state(old)
    with pytest.raises(InputError, match="points outside the crate"):
        crate([runs[0]], add_to=old, **FAST)
    assert (victim / "precious.txt").read_text() == "keep me"
    assert tree_state(old) == before
    res = CliRunner().invoke(cli, ["crate", str(runs[0]), "--add-to", str(old), *FAST_CLI])
    _ok_error(res, InputError.exit_code, "points outside the crate")
    assert (victim / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    ("bad_id", "kind"),
    [
        ("%252e%252e/victim.txt", "File"),
        ("\u2024\u2024/victim.txt", "File"),
        ("\uff0e\uff0e/victim/", "Dataset"),
        ("%252e%252e/victim/", "Dataset"),
    ],
    ids=["double-encoded-file", "one-dot-leaders", "full-width-dots", "double-encoded-folder"],
)
def test_a_data_entity_the_crate_does_not_hold_is_a_clear_error(
    old: Path, runs: tuple[Path, Path], bad_id: str, kind: str
) -> None:
    """Issue 36 item 7: such ids used to end in a FileNotFoundError traceback from rocrate."""
    doc = metadata(old)
    doc["@graph"].append({"@id": bad_id, "@type": kind})
    put_metadata(old, doc)
    before = tree_state(old)
    res = CliRunner().invoke(cli, ["crate", str(runs[0]), "--add-to", str(old), *FAST_CLI])
    _ok_error(res, InputError.exit_code, "names a file or folder the crate does not hold")
    assert tree_state(old) == before
    assert not [p for p in old.parent.iterdir() if ".crate-part" in p.name]


# --- item 2: --add-to OLD -o NEW never modifies OLD ---------------------------------------------


def test_add_to_old_into_new_leaves_old_untouched_and_shares_no_inode(
    old: Path, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    before = tree_state(old)
    new = tmp_path / "new"
    crate([runs[1]], new, add_to=old, **FAST)
    assert tree_state(old) == before
    old_inodes = {ino for _, ino in before.values()}
    new_inodes = {p.stat().st_ino for p in new.rglob("*") if p.is_file()}
    assert not old_inodes & new_inodes
    assert len(metadata(new)["@graph"]) > len(metadata(old)["@graph"])


# --- item 3: symlinks, FIFOs and devices in an existing crate -----------------------------------


def test_symlinked_readme_is_refused_and_its_target_untouched(
    old: Path, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    (old / "README.md").unlink()
    (old / "README.md").symlink_to(outside)
    res = CliRunner().invoke(
        cli, ["crate", str(runs[1]), "--add-to", str(old), "-o", str(tmp_path / "n"), *FAST_CLI]
    )
    _ok_error(res, InputError.exit_code, "symbolic link", "README.md")
    res = CliRunner().invoke(cli, ["crate", str(runs[1]), "--add-to", str(old), *FAST_CLI])
    _ok_error(res, InputError.exit_code, "symbolic link")
    assert outside.read_text() == "not yours"
    assert not (tmp_path / "n").exists()


def test_a_secret_behind_a_symlink_never_reaches_the_new_zip(
    old: Path, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("TOPSECRET-4711")
    (old / "notes.txt").symlink_to(secret)
    (old / "loop").symlink_to(old / "loop")  # a symlink loop: refused like any link
    new = tmp_path / "NEW.zip"
    res = CliRunner().invoke(
        cli, ["crate", str(runs[1]), "--add-to", str(old), "-o", str(new), *FAST_CLI]
    )
    _ok_error(res, InputError.exit_code, "symbolic link")
    assert not new.exists()
    leftovers = [
        p for p in tmp_path.iterdir() if "TOPSECRET" in (p.read_text() if p.is_file() else "")
    ]
    assert leftovers == [secret]


def _mknod_or_skip(path: Path, mode: int, device: int = 0) -> None:
    try:
        os.mknod(path, mode, device)
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD); the FIFO case covers the rest")


@pytest.mark.parametrize("kind", ["fifo", "chardev"])
def test_a_fifo_or_device_in_the_crate_is_refused_without_hanging(
    old: Path, runs: tuple[Path, Path], tmp_path: Path, kind: str
) -> None:
    import stat

    node = old / "runs" / "pipe"
    if kind == "fifo":
        os.mkfifo(node)
    else:
        _mknod_or_skip(node, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    new = tmp_path / "NEW.zip"
    cmd = [sys.executable, "-m", "metaprov", "crate", str(runs[1]), "--add-to", str(old)]
    proc = subprocess.run(
        [*cmd, "-o", str(new), *FAST_CLI], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == InputError.exit_code, proc.stderr
    assert "Traceback" not in proc.stderr and "not a regular file" in proc.stderr
    assert not new.exists()


# --- item 4: an in-place --add-to is atomic under kill -9 ----------------------------------------


def _consistent(c: Path) -> bool:
    """A complete crate: its metadata parses and every local data entity it lists exists."""
    doc = metadata(c)
    for e in doc["@graph"]:
        i = e["@id"]
        t = e.get("@type")
        types = t if isinstance(t, list) else [t]
        if (
            ("File" in types or "Dataset" in types)
            and not i.startswith(("#", "http"))
            and i != "./"
        ):
            if not (c / i).exists():
                return False
    return True


def test_in_place_add_to_killed_at_any_moment_leaves_old_or_new(
    old: Path, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    pristine = tmp_path / "pristine"
    shutil.copytree(old, pristine)
    cmd = [sys.executable, "-m", "metaprov", "-q", "crate", str(runs[1]), "--add-to", str(old)]
    old_state = {k: v[0] for k, v in tree_state(old).items()}
    t0 = time.monotonic()
    subprocess.run([*cmd, *FAST_CLI], check=True, capture_output=True, timeout=120)
    full = time.monotonic() - t0
    new_state = {k: v[0] for k, v in tree_state(old).items()}
    assert new_state != old_state
    for frac in (0.75, 0.95):  # later and later into the run, the end included
        shutil.rmtree(old)
        shutil.copytree(pristine, old)
        proc = subprocess.Popen(
            [*cmd, *FAST_CLI], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(full * frac)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = {k: v[0] for k, v in tree_state(old).items()}
        assert state in (old_state, new_state), frac
        assert _consistent(old)
    # the next run removes the staging directories the killed ones left beside the crate
    subprocess.run([*cmd, *FAST_CLI], check=True, capture_output=True, timeout=120)
    assert not [p for p in old.parent.iterdir() if p.name.endswith(".crate-part")]


# --- item 10 (zip part): bombs and unsafe names --------------------------------------------------


def _zip_with(path: Path, entries: dict[str, bytes], base: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(base.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(base).as_posix())
        for name, data in entries.items():
            zf.writestr(name, data)
    return path


def test_a_zip_bomb_is_refused_before_anything_is_unpacked(
    base_crate: Path, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    bomb = _zip_with(tmp_path / "bomb.zip", {"runs/zeros.bin": bytes(64 << 20)}, base_crate)
    assert bomb.stat().st_size < 1 << 20
    t0 = time.monotonic()
    res = CliRunner().invoke(
        cli, ["crate", str(runs[1]), "--add-to", str(bomb), "-o", str(tmp_path / "n"), *FAST_CLI]
    )
    _ok_error(res, InputError.exit_code, "zip bomb", "runs/zeros.bin")
    assert time.monotonic() - t0 < 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.zip"]


@pytest.mark.parametrize("name", ["../escape.txt", "/abs.txt", "a/../../escape.txt"])
def test_a_zip_name_outside_the_crate_is_refused(
    base_crate: Path, runs: tuple[Path, Path], tmp_path: Path, name: str
) -> None:
    z = _zip_with(tmp_path / "evil.zip", {name: b"x"}, base_crate)
    res = CliRunner().invoke(
        cli, ["crate", str(runs[1]), "--add-to", str(z), "-o", str(tmp_path / "n"), *FAST_CLI]
    )
    _ok_error(res, InputError.exit_code, "unsafe path in zip")
    assert not (tmp_path.parent / "escape.txt").exists() and not Path("/abs.txt").exists()


def test_a_zip_crate_is_added_to(base_crate: Path, runs: tuple[Path, Path], tmp_path: Path) -> None:
    z = _zip_with(tmp_path / "ok.zip", {}, base_crate)
    before = z.read_bytes()
    crate([runs[1]], tmp_path / "n.zip", add_to=z, **FAST)
    assert z.read_bytes() == before
    with zipfile.ZipFile(tmp_path / "n.zip") as zf:
        doc = json.loads(zf.read("ro-crate-metadata.json"))
    assert sum("CreateAction" in str(e.get("@type")) for e in doc["@graph"]) >= 2


# --- item 9 and 15: malformed metadata, javascript: links ------------------------------------------


def test_a_javascript_author_is_not_a_live_link_in_the_preview(
    old: Path, runs: tuple[Path, Path]
) -> None:
    doc = metadata(old)
    js = "javascript:alert(document.cookie)"
    for e in doc["@graph"]:
        if e["@id"] == "./":
            e["author"] = [{"@id": js}, {"@id": "https://orcid.org/0000-0002-1825-0097"}]
    doc["@graph"].append({"@id": js, "@type": "Person", "name": "Mallory"})
    doc["@graph"].append(
        {"@id": "https://orcid.org/0000-0002-1825-0097", "@type": "Person", "name": "Josiah"}
    )
    put_metadata(old, doc)
    crate([runs[1]], add_to=old, **FAST)
    page = (old / "ro-crate-preview.html").read_text(encoding="utf-8")
    assert "Mallory" in page
    assert 'href="javascript' not in page.lower()
    assert 'href="https://orcid.org/0000-0002-1825-0097"' in page


def _deep(n: int) -> dict:
    d: dict = {}
    for _ in range(n):
        d = {"x": d}
    return d


@pytest.mark.parametrize(
    "damage",
    ["content_size", "missing_id", "deep_json", "graph_not_list", "not_json", "deep_parts"],
)
def test_malformed_existing_metadata_is_an_error_or_kept_never_a_traceback(
    old: Path, runs: tuple[Path, Path], damage: str
) -> None:
    doc = metadata(old)
    if damage == "content_size":
        for e in doc["@graph"]:
            if e.get("@type") == "File":
                e["contentSize"] = "lots"
    elif damage == "missing_id":
        doc["@graph"].append({"@type": "Person", "name": "nobody"})
    elif damage == "deep_json":
        doc["@graph"].append({"@id": "#deep", "x": _deep(100_000)})
    elif damage == "graph_not_list":
        doc["@graph"] = {"@id": "./"}
    elif damage == "deep_parts":  # a chain of 3,000 nested datasets
        root = next(e for e in doc["@graph"] if e["@id"] == "./")
        root["hasPart"] = [*root.get("hasPart", []), {"@id": "d0/"}]
        for k in range(3000):
            doc["@graph"].append(
                {"@id": f"d{k}/", "@type": "Dataset", "hasPart": [{"@id": f"d{k + 1}/"}]}
            )
    if damage == "not_json":
        (old / "ro-crate-metadata.json").write_bytes(b"{\xff")
    elif damage == "deep_json":
        text = (
            json.dumps(doc["@graph"][:-1])[:-1]
            + ', {"@id": "#deep", "x": '
            + "[" * 100_000
            + "]" * 100_000
            + "}]"
        )
        (old / "ro-crate-metadata.json").write_text(
            '{"@context": "https://w3id.org/ro/crate/1.1/context", "@graph": ' + text + "}"
        )
    else:
        put_metadata(old, doc)
    res = CliRunner().invoke(cli, ["crate", str(runs[1]), "--add-to", str(old), *FAST_CLI])
    assert "Traceback" not in res.output, res.output
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), repr(
        res.exception
    )
    if damage == "content_size":
        assert res.exit_code == 0, res.output  # kept as it is, shown as text
    else:
        _ok_error(res, InputError.exit_code)
