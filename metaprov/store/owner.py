"""Who owns an embedded store right now: a server serving it, or ``metaprov follow`` writing it.

Input: an embedded store directory. Output: owner files ``metaprov-owner-<pid>.json`` in it
(one per ``metaprov serve`` or ``metaprov follow`` process while it runs, removed when it stops),
and the check every writer makes before it opens the store for writing.

Why: ``metaprov serve`` runs Oxigraph's read-only server, which reads the store as it was when
the server opened it; a ``load`` or ``drop`` by another process would change the files under the
server (undefined behaviour for RocksDB's read-only mode, and the server would keep answering
from the old data). So writers refuse, naming the server. An owner file whose processes are gone
(kill -9, a crash) is stale: ignored, and removed by the next owner.

Owner files are untrusted (anyone with write access to the store can forge one): read only when
a regular file (never through a link or from a device), at most :data:`MAX_OWNER_BYTES`, JSON
nested at most :data:`MAX_DEPTH` deep; a pid outside ``1..``:data:`MAX_PID` is no process; and
text from them is shown with control characters escaped (:func:`printable`), never raw.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from metaprov.errors import StoreError

#: Pattern of the files in an embedded store's directory naming a process that serves or
#: follows into it (``metaprov-owner-<pid>.json``).
OWNER_GLOB = "metaprov-owner-*.json"
#: Largest owner file read (ours are under 1 KB).
MAX_OWNER_BYTES = 64 << 10
#: Deepest JSON nesting read from a store's own files (ours: 3).
MAX_DEPTH = 32
#: Largest process id (Linux's ``pid_max`` limit, 2^22).
MAX_PID = 1 << 22
#: Longest text shown from an owner file.
MAX_SHOWN = 300


def read_json(path: Path, limit: int, depth: int = MAX_DEPTH) -> Any:
    """The JSON of a file of a store that anyone with write access could have forged.

    Only a regular file (opened without following a link, without blocking on a FIFO), at most
    ``limit`` bytes, nested at most ``depth`` deep. Returns None for anything else (the file is
    then treated as absent: never a traceback, never a hang).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > limit or _too_deep(data, depth):
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None


def _too_deep(data: bytes, depth: int) -> bool:
    """Is the JSON text nested deeper than ``depth`` (brackets outside strings)?"""
    level = 0
    in_str = esc = False
    for b in data:
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:  # backslash
                esc = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            level += 1
            if level > depth:
                return True
        elif b in (0x5D, 0x7D):
            level -= 1
    return False


def printable(value: Any, limit: int = MAX_SHOWN) -> str:
    """``value`` as text safe to print on a terminal: control and format characters (escape
    sequences, bidi overrides) escaped, at most ``limit`` characters."""
    text = str(value)
    out = []
    for ch in text[: limit + 1]:
        cat = unicodedata.category(ch)
        if cat[0] == "C" or cat in ("Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    shown = "".join(out)
    return shown[:limit] + "..." if len(text) > limit else shown


def _pid(value: Any) -> int | None:
    """A process id from an owner file, or None when it cannot be one."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_PID:
        return value
    return None


def _checked(data: Any) -> dict[str, Any] | None:
    """The fields of an owner record that are what they claim to be (others dropped)."""
    if not isinstance(data, dict):
        return None
    out: dict[str, Any] = {}
    for key in ("pid", "server_pid"):
        pid = _pid(data.get(key))
        if pid is not None:
            out[key] = pid
    started = data.get("started")
    if isinstance(started, (int, float)) and not isinstance(started, bool):
        if math.isfinite(started):
            out["started"] = float(started)
    for key in ("role", "url", "run"):
        if isinstance(data.get(key), str):
            out[key] = data[key]
    return out if "pid" in out or "server_pid" in out else None


def owner_file(store: str | Path, pid: int | None = None) -> Path:
    """The owner file of process ``pid`` (this one by default) in ``store``."""
    return Path(store) / f"metaprov-owner-{os.getpid() if pid is None else pid}.json"


def _alive(pid: Any) -> bool:
    """Whether process ``pid`` exists and is a metaprov or oxigraph process (not a reused pid)."""
    pid = _pid(pid)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").lower()
    except OSError:
        return True  # no /proc: trust the pid
    return b"metaprov" in cmdline or b"oxigraph" in cmdline or b"python" in cmdline


def owners(store: str | Path, *, clean: bool = False) -> list[dict[str, Any]]:
    """The live owners of an embedded store (their owner files), oldest first.

    Args:
        clean: remove stale owner files (their processes are gone).
    """
    found = []
    try:
        paths = sorted(Path(store).glob(OWNER_GLOB))
    except OSError:
        return []
    for path in paths:
        data = _checked(read_json(path, MAX_OWNER_BYTES))
        if data is None:
            continue  # not an owner record: not ours to remove either
        pids = [data.get("pid"), data.get("server_pid")]
        if any(_alive(p) for p in pids if p is not None):
            found.append(data)
        elif clean:
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(found, key=lambda d: float(d.get("started") or 0))


def describe(owner: dict[str, Any]) -> str:
    """``metaprov serve (pid 123) at http://127.0.0.1:7878`` for an owner record."""
    role = printable(owner.get("role", "serve"), 20)
    text = f"metaprov {role} (pid {_pid(owner.get('pid'))})"
    url = owner.get("url")
    if isinstance(url, str) and url:
        text += f" at {printable(url)}"
    run = owner.get("run")
    if isinstance(run, str) and run:
        text += f", following {printable(run)}"
    return text


def check_not_owned(store: str | Path, *, action: str, readers_ok: bool = False) -> None:
    """Refuse ``action`` on a store another live process serves or follows into.

    Args:
        readers_ok: only a process writing the store (``follow``) stands in the way; servers
            reading it do not (several read-only servers may share a store).

    Raises:
        StoreError: naming the owner (command, pid, URL) and what to do instead.
    """
    for owner in owners(store):
        if owner.get("pid") == os.getpid():
            continue
        writing = owner.get("role") == "follow" or bool(owner.get("run"))
        if readers_ok and not writing:
            continue
        url = owner.get("url")
        if writing:
            hint = (
                "it replaces the followed run's graph at every refresh; wait until the run is "
                "complete and the follow has stopped, or stop it (Ctrl-C), then run this again"
            )
        else:
            hint = (
                "the server reads the store as it was when it started and would keep answering "
                "from the old data: stop it first (Ctrl-C in its terminal), then run this again"
            )
        if isinstance(url, str) and url:
            hint += (
                "; meanwhile query through it: metaprov query runs --endpoint "
                f"{printable(url)}/query"
            )
        raise StoreError(
            f"cannot {action}: the store {store} is in use by {describe(owner)}", hint=hint
        )


@contextlib.contextmanager
def owning(store: str | Path, *, readers_ok: bool = False, **facts: Any) -> Iterator[Path]:
    """Hold this process's owner file in ``store`` while the block runs (removed after).

    Raises:
        StoreError: another live process owns the store (see :func:`check_not_owned`).
    """
    directory = Path(store)
    role = str(facts.get("role", "serve"))
    check_not_owned(directory, action=f"{role} this store", readers_ok=readers_ok)
    owners(directory, clean=True)
    path = owner_file(directory)
    _write(path, {"pid": os.getpid(), "started": time.time(), **facts})
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def update_owner(store: str | Path, **facts: Any) -> None:
    """Add facts (e.g. the server's URL and pid once it listens) to this process's owner file."""
    path = owner_file(store)
    data = read_json(path, MAX_OWNER_BYTES)
    if isinstance(data, dict):
        data.update(facts)
        _write(path, data)


__all__ = [
    "MAX_OWNER_BYTES",
    "OWNER_GLOB",
    "printable",
    "read_json",
    "check_not_owned",
    "describe",
    "owner_file",
    "owners",
    "owning",
    "update_owner",
]
