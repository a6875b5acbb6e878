"""Who owns an embedded store right now: a server serving it, or ``metaprov follow`` writing it.

Input: an embedded store directory. Output: owner files ``metaprov-owner-<pid>.json`` in it
(one per ``metaprov serve`` or ``metaprov follow`` process while it runs, removed when it stops),
and the check every writer makes before it opens the store for writing.

Why: ``metaprov serve`` runs Oxigraph's read-only server, which reads the store as it was when
the server opened it; a ``load`` or ``drop`` by another process would change the files under the
server (undefined behaviour for RocksDB's read-only mode, and the server would keep answering
from the old data). So writers refuse, naming the server. An owner file whose processes are gone
(kill -9, a crash) is stale: ignored, and removed by the next owner.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from metaprov.errors import StoreError

#: Pattern of the files in an embedded store's directory naming a process that serves or
#: follows into it (``metaprov-owner-<pid>.json``).
OWNER_GLOB = "metaprov-owner-*.json"


def owner_file(store: str | Path, pid: int | None = None) -> Path:
    """The owner file of process ``pid`` (this one by default) in ``store``."""
    return Path(store) / f"metaprov-owner-{os.getpid() if pid is None else pid}.json"


def _alive(pid: Any) -> bool:
    """Whether process ``pid`` exists and is a metaprov or oxigraph process (not a reused pid)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
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
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        pids = [data.get("pid"), data.get("server_pid")]
        if any(_alive(p) for p in pids if p is not None):
            found.append(data)
        elif clean:
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(found, key=lambda d: float(d.get("started") or 0))


def describe(owner: dict[str, Any]) -> str:
    """``metaprov serve (pid 123) at http://127.0.0.1:7878`` for an owner record."""
    role = str(owner.get("role", "serve"))
    text = f"metaprov {role} (pid {owner.get('pid')})"
    url = owner.get("url")
    if isinstance(url, str) and url:
        text += f" at {url}"
    run = owner.get("run")
    if isinstance(run, str) and run:
        text += f", following {run}"
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
            hint += f"; meanwhile query through it: metaprov query runs --endpoint {url}/query"
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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(data, dict):
        data.update(facts)
        _write(path, data)


__all__ = [
    "OWNER_GLOB",
    "check_not_owned",
    "describe",
    "owner_file",
    "owners",
    "owning",
    "update_owner",
]
