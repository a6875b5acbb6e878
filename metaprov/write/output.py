"""Where a command's output goes: one helper for every command that writes a file.

:func:`open_output` opens the destination the user named with ``-o`` and hands back a binary
sink; every command that writes (``export``, ``query -o``, and the ones to come) goes through
it, so they all keep the same promises (``docs/reliability.md``):

* ``-`` is standard output, streamed as it is produced.
* A target that is not a regular file (a pipe, a FIFO, a character device such as
  ``/dev/null`` or ``/dev/stdout``) is written *through*: opened and written, never replaced.
  Block devices, sockets and directories are refused.
* A symbolic link is followed: its target is written (atomically, when a regular file) and the
  link itself stays.
* A regular file is written atomically: into a temporary ``.NAME.metaprov-XXXXXXXX.part`` in
  the same directory, renamed over ``NAME`` only when complete. A failure (a full disk, a write
  error, an interrupt) removes the temporary file and leaves an earlier ``NAME`` unchanged.
* **An output never is, holds, or sits inside an input or a store of the same command**,
  ``--force`` or not (:func:`refuse_overlap`): compared after resolving symbolic links, and by
  device and inode (a hard link of an input file, a bind mount of a run directory). Refused
  before anything is read or written.
* **An existing output is replaced only when asked** (``overwrite=True``, the commands'
  ``--force``): a regular file, or a directory that is not empty, is otherwise refused naming it
  and the flag (:func:`refuse_existing`). A stream (``-``, a pipe, a device) is written through,
  never "replaced", so it needs no flag.
* A name ending in ``.gz`` is gzip-compressed (deterministic: no name, no time in the header).
* The folder the output goes in must exist: it is never created (a typo in ``-o`` would
  otherwise scatter folders); the error names the missing folder and the fix (``mkdir -p``).
* A file inside a store directory (an Oxigraph/RocksDB database: ``CURRENT`` and ``IDENTITY``
  or ``MANIFEST-*`` beside it) is refused: writing there destroys the store.
* A ``.part`` file left by a killed earlier run for the same ``NAME`` is removed by the next
  one. It is provably ours: the name pattern says which output it was for, and a writer holds
  an exclusive lock on its ``.part`` for as long as it lives, so an unlocked one is an orphan.

Errors are :class:`~metaprov.errors.OutputError` (exit code 9) naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import logging
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from metaprov.errors import OutputError

log = logging.getLogger("metaprov")

#: Marker in the name of an atomic write's temporary file: ``.NAME.metaprov-XXXXXXXX.part``.
PART_MARK = ".metaprov-"
PART_SUFFIX = ".part"
#: gzip level of ``.gz`` outputs (gzip's own default).
GZIP_LEVEL = 6

__all__ = [
    "open_output",
    "check_output",
    "refuse_overlap",
    "refuse_existing",
    "check_parent",
    "is_store_dir",
    "is_stdout",
    "PART_MARK",
    "PART_SUFFIX",
    "GZIP_LEVEL",
]


def is_stdout(target: str | os.PathLike[str]) -> bool:
    """Is ``target`` the name for standard output (``-``)?"""
    return os.fspath(target) == "-"


def _stat(path: str | Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError as exc:
        raise OutputError(
            f"cannot write {path}: a parent of it is a file, not a directory",
            hint="give a path whose folders are directories",
        ) from exc
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror}", hint=_hint(exc)) from exc


def _hint(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "free some space (or raise the quota), or write to another file system with -o"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "choose a place you may write to with -o"
    return "choose another output path with -o"


def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "stream"  # FIFO, character device (a terminal, /dev/null, /dev/full)


class _Plan:
    """What writing to a target means: stream through it, or replace a regular file atomically."""

    def __init__(self, target: str | os.PathLike[str]) -> None:
        self.name = os.fspath(target)
        self.stdout = is_stdout(target)
        self.compress = not self.stdout and self.name.lower().endswith(".gz")
        self.stream = self.stdout
        self.real: Path | None = None
        self.st: os.stat_result | None = None
        if self.stdout:
            return
        path = Path(self.name)
        st = _stat(path)  # follows symlinks, including /dev/stdout -> /proc/self/fd/1
        if st is not None:
            kind = _kind(st)
            if kind in ("directory", "block device", "socket"):
                raise OutputError(
                    f"{path} is a {kind}; refusing to write over it",
                    hint="give the name of a file to write (or - for standard output)",
                )
            self.st = st
            if kind == "stream" or _through_proc(path):
                self.stream = True
                return
        # a regular file, or a new one: written next to the symlink's target, if any
        self.real = Path(os.path.realpath(path))
        check_parent(self.real, label=path)

    def refuse(
        self,
        inputs: Iterable[str | os.PathLike[str]],
        stores: Iterable[str | os.PathLike[str]],
        overwrite: bool,
    ) -> None:
        """The two rules of every output (overlap, then overwrite); streams are written through."""
        if self.stdout:
            return
        refuse_overlap(self.name, inputs=inputs, stores=stores)
        if not self.stream:
            refuse_existing(self.name, overwrite=overwrite)


def _ident(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _chain(real: Path) -> list[tuple[int, int]]:
    """The (device, inode) of ``real``'s existing ancestors (``real`` itself excluded)."""
    return [i for i in (_ident(p) for p in real.parents) if i is not None]


def _inside(a: Path, b: Path) -> bool:
    return a != b and a.is_relative_to(b)


def refuse_overlap(
    target: str | os.PathLike[str],
    *,
    inputs: Iterable[str | os.PathLike[str]] = (),
    stores: Iterable[str | os.PathLike[str]] = (),
) -> None:
    """Refuse an output that is, holds, or sits inside an input or a store of the same command.

    ``--force`` never lifts this: replacing a run directory by its crate, or a compared run's
    ``worker.csv`` by the comparison, destroys what the command read. Paths are compared after
    resolving symbolic links (every component) and by device and inode (a bind mount, a hard
    link of an input file: an existing output with several links is looked for under the input
    folders). A store that does not exist yet is compared by its path.

    Raises:
        OutputError: naming the output, the input or store, and how they overlap.
    """
    name = os.fspath(target)
    if is_stdout(name):
        return
    out = Path(os.path.realpath(name))
    out_id = _ident(out)
    out_chain = _chain(out)
    given = [("input", p) for p in inputs] + [("store", p) for p in stores]
    known = [(role, p, Path(os.path.realpath(p))) for role, p in given]
    idents = [_ident(real) for _role, _p, real in known]
    for (role, p, real), pid in zip(known, idents, strict=True):  # the same file first
        if out == real or (out_id is not None and out_id == pid):
            if role == "input":
                raise OutputError(
                    f"refusing to write the output over {p}: it is one of the inputs",
                    hint="give another output path with -o (--force does not change this)",
                )
            _overlap(name, "is", role, p)
    linked: list[Path] = []
    for (role, p, real), pid in zip(known, idents, strict=True):
        if _inside(out, real) or (pid is not None and pid in out_chain):
            _overlap(name, "sits inside", role, p)
        if _inside(real, out) or (out_id is not None and out_id in _chain(real)):
            _overlap(name, "holds", role, p)
        if role == "input" and pid is not None and os.path.isdir(real):
            linked.append(real)
    _refuse_hard_link(name, out, linked)


def _overlap(name: str, how: str, role: str, p: str | os.PathLike[str]) -> None:
    raise OutputError(
        f"refusing to write {name}: it {how} the {role} {os.fspath(p)}"
        + (" (the command's own store)" if role == "store" else ""),
        hint="write the output outside the command's inputs and stores "
        "(--force does not change this)",
    )


def _refuse_hard_link(name: str, out: Path, folders: list[Path]) -> None:
    """An existing output file with several names: is one of them a file of an input folder?"""
    try:
        st = os.stat(out)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
        return
    me = (st.st_dev, st.st_ino)
    for folder in folders:
        for root, _dirs, files in os.walk(folder):
            for f in files:
                if _ident(os.path.join(root, f)) == me:
                    raise OutputError(
                        f"refusing to write the output over {os.path.join(root, f)}: it is one "
                        f"of the inputs (a hard link of {name})",
                        hint="give another output path with -o (--force does not change this)",
                    )


def refuse_existing(
    target: str | os.PathLike[str],
    *,
    overwrite: bool,
    flag: str = "--force",
    also: str = "",
) -> None:
    """Refuse to replace an existing output unless ``overwrite`` (the commands' ``--force``).

    An existing regular file, or a directory that is not empty, counts; a missing path, an empty
    directory and a stream (a pipe, a device: written through) do not.

    Raises:
        OutputError: naming the output and the flag (``also``: one more way out, for the hint).
    """
    if overwrite:
        return
    name = os.fspath(target)
    try:
        st = os.stat(name)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        what = "already exists"
    elif stat.S_ISDIR(st.st_mode):
        try:
            with os.scandir(name) as it:
                if next(it, None) is None:
                    return
        except OSError:
            pass
        what = "already exists and is not empty"
    else:
        return
    raise OutputError(
        f"{name} {what}",
        hint=f"pass {flag} to replace it, or choose another output path{also}",
    )


def is_store_dir(path: str | os.PathLike[str]) -> bool:
    """Is ``path`` a store directory (an Oxigraph store: a RocksDB database)?"""
    p = Path(path)
    try:
        return (p / "CURRENT").is_file() and (
            (p / "IDENTITY").is_file() or any(p.glob("MANIFEST-*"))
        )
    except OSError:
        return False


def check_parent(
    target: str | os.PathLike[str], *, label: str | os.PathLike[str] | None = None
) -> None:
    """Refuse an output whose folder does not exist, is not a directory, or is a store.

    The folder is never created: ``-o results/x.ttl`` with no ``results`` is an error naming
    the folder (a typo must not scatter new folders); create it first.

    Raises:
        OutputError: naming ``label`` (default: ``target``) and the fix.
    """
    name = os.fspath(label if label is not None else target)
    parent = Path(os.path.realpath(target)).parent
    pst = _stat(parent)
    if pst is None:
        raise OutputError(
            f"cannot write {name}: the folder {parent} does not exist",
            hint=f"create it first (mkdir -p {parent}), or choose another output path",
        )
    if not stat.S_ISDIR(pst.st_mode):
        raise OutputError(
            f"cannot write {name}: {parent} is a file, not a directory",
            hint="give a path whose folders are directories",
        )
    if is_store_dir(parent):
        raise OutputError(
            f"refusing to write {name}: {parent} is a store directory (writing there "
            "destroys the store)",
            hint="write the output outside the store directory",
        )


def _through_proc(path: Path) -> bool:
    """Does ``path`` name an open file descriptor (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``)? Such a target is written through even when it is a regular file: the
    file behind it belongs to whoever opened the descriptor (``metaprov ... -o /dev/stdout > f``)."""
    text = str(path.absolute())
    return text.startswith(("/dev/", "/proc/")) and os.path.realpath(text) != text


def check_output(
    target: str | os.PathLike[str],
    inputs: Iterable[str | os.PathLike[str]] = (),
    *,
    stores: Iterable[str | os.PathLike[str]] = (),
    overwrite: bool = False,
) -> None:
    """Raise the :class:`OutputError` :func:`open_output` would raise before writing anything.

    Lets a command fail at once (a directory given as output, a parent that is a file, an input
    or store overlapping the output, an existing file without ``overwrite``) instead of after
    reading its inputs.
    """
    _Plan(target).refuse(inputs, stores, overwrite)


class _Guard:
    """A sink whose write errors become an :class:`OutputError` naming the output."""

    def __init__(self, raw: Any, label: str) -> None:
        self.raw = raw
        self.label = label
        self.broken = False
        self.error: OutputError | None = None  # the first write error

    def fail(self, exc: OSError) -> OutputError:
        """The :class:`OutputError` for a failed write (remembered: the first one is the cause)."""
        err = self._error(exc)
        if self.error is None:
            self.error = err
        return self.error

    def _error(self, exc: OSError) -> OutputError:
        if isinstance(exc, BrokenPipeError):
            self.broken = True
            return OutputError(
                f"the reader of {self.label} stopped reading before the output was complete",
                hint="read the whole output (or write it to a file with -o FILE)",
            )
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "no space left on the device"
        elif exc.errno == errno.EFBIG:
            what = "the file grew larger than allowed"
        else:
            what = exc.strerror or str(exc)
        written = (
            ""
            if self.raw is None or not hasattr(self.raw, "total")
            else "; nothing was written under its name"
        )
        return OutputError(f"writing {self.label} failed: {what}{written}", hint=_hint(exc))

    def write(self, data: Any) -> int:
        try:
            return int(self.raw.write(data))
        except OSError as exc:
            raise self.fail(exc) from exc

    def flush(self) -> None:
        try:
            self.raw.flush()
        except OSError as exc:
            raise self.fail(exc) from exc


@contextlib.contextmanager
def open_output(
    target: str | os.PathLike[str],
    *,
    inputs: Iterable[str | os.PathLike[str]] = (),
    stores: Iterable[str | os.PathLike[str]] = (),
    overwrite: bool = False,
    background: bool = True,
    digest: Any = None,
) -> Iterator[IO[bytes]]:
    """Open ``target`` for writing bytes (see the module docstring for what each kind of target
    means); the output is complete when the ``with`` block ends without an error.

    Args:
        target: a path, or ``-`` for standard output.
        inputs: the command's inputs (files or run directories): the output must not be, hold
            or sit inside one of them (:func:`refuse_overlap`).
        stores: the command's stores, under the same rule.
        overwrite: replace an existing file (the commands' ``--force``); else it is refused.
        background: hand the bytes to a writer thread (formatting overlaps with the disk).
        digest: a ``hashlib`` object updated with every byte written (before compression).

    Raises:
        OutputError: the target cannot be written (a directory, an input, a full disk, ...).

    Example:
        >>> with open_output("answer.csv.gz") as out:  # doctest: +SKIP
        ...     out.write(b"a,b\\n")
    """
    plan = _Plan(target)
    plan.refuse(inputs, stores, overwrite)
    out = _Output(plan, background, digest)
    try:
        yield out.sink
    except BaseException as exc:
        out.abort()
        # A writer that calls ``write`` from native code (polars) re-raises our error as an
        # OSError: the user gets the OutputError that started it.
        if out.guard.error is not None and exc is not out.guard.error:
            raise out.guard.error from exc
        raise
    out.commit()


class _Output:
    """The chain of one output: raw file or stream <- error guard <- gzip <- writer thread."""

    def __init__(self, plan: _Plan, background: bool, digest: Any = None) -> None:
        self.plan = plan
        self.label = "standard output" if plan.stdout else plan.name
        self.tmp: str | None = None
        self.lock: int | None = None
        self.raw: Any = self._open_raw()
        self.guard = _Guard(self.raw, self.label)
        self.gz = (
            gzip.GzipFile(
                filename="", mode="wb", fileobj=self.guard, compresslevel=GZIP_LEVEL, mtime=0
            )
            if plan.compress
            else None
        )
        inner: Any = self.gz if self.gz is not None else self.guard
        self.bg = _BackgroundWriter(inner, digest=digest) if background or digest else None
        self.sink: Any = self.bg if self.bg is not None else inner

    def _open_raw(self) -> Any:
        plan = self.plan
        if plan.stdout:
            sys.stdout.flush()
            return sys.stdout.buffer
        if plan.stream:
            flags = os.O_WRONLY
            if plan.st is not None and stat.S_ISREG(plan.st.st_mode):
                flags |= os.O_APPEND  # /dev/stdout sent to a file: add to what the shell opened
            try:
                return os.fdopen(os.open(plan.name, flags), "wb")
            except OSError as exc:
                raise OutputError(
                    f"cannot open {plan.name} for writing: {exc.strerror}", hint=_hint(exc)
                ) from exc
        return self._open_part()

    def _open_part(self) -> Any:
        import fcntl

        assert self.plan.real is not None
        real = self.plan.real
        parent = real.parent
        check_parent(real, label=self.plan.name)  # again: it may have changed since the plan
        remove_leftovers(real)
        try:
            fd, self.tmp = tempfile.mkstemp(
                prefix=f".{real.name}{PART_MARK}", suffix=PART_SUFFIX, dir=parent
            )
        except OSError as exc:
            raise OutputError(f"cannot write in {parent}: {exc.strerror}", hint=_hint(exc)) from exc
        # The lock lives on its own descriptor until the rename: an unlocked .part is an orphan.
        self.lock = os.open(self.tmp, os.O_RDONLY)
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        return _AlignedFile(fd, self.tmp)

    def commit(self) -> None:
        """Finish every layer, then put a file in place; on any failure, :meth:`abort`."""
        try:
            if self.bg is not None:
                self.bg.close()
            if self.gz is not None:
                self.gz.close()
            try:
                self._close_raw(complete=True)
            except OSError as exc:
                raise self.guard.fail(exc) from exc
            if self.tmp is not None:
                assert self.plan.real is not None
                try:
                    os.chmod(self.tmp, 0o666 & ~_umask())
                    os.replace(self.tmp, self.plan.real)
                except OSError as exc:
                    raise OutputError(
                        f"cannot put {self.plan.name} in place: {exc.strerror}", hint=_hint(exc)
                    ) from exc
                self.tmp = None
        except BaseException:
            self.abort()
            raise
        self._unlock()

    def abort(self) -> None:
        """Stop every layer and throw the temporary file away (best effort, never raises)."""
        if self.bg is not None:
            with contextlib.suppress(BaseException):
                self.bg.close()
            self.bg = None
        with contextlib.suppress(BaseException):
            self._close_raw(complete=False)
        if self.plan.stdout and self.guard.broken:
            _silence_stdout()
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)
            self.tmp = None
        self._unlock()

    def _close_raw(self, complete: bool) -> None:
        """Flush standard output, or close the file or stream (a ``.part`` padded only when
        ``complete``)."""
        raw, self.raw = self.raw, None
        if raw is None:
            return
        if self.plan.stdout:
            raw.flush()
        elif self.tmp is not None:
            raw.close(complete=complete)
        else:
            raw.close()

    def _unlock(self) -> None:
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None


def _silence_stdout() -> None:
    """After a broken pipe: stdout to /dev/null, so the interpreter's exit flush stays quiet."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _part_pattern(name: str) -> re.Pattern[str]:
    return re.compile(
        re.escape(f".{name}{PART_MARK}") + r"[A-Za-z0-9_]{8}" + re.escape(PART_SUFFIX)
    )


def remove_leftovers(target: Path) -> list[Path]:
    """Remove the orphaned ``.part`` files of earlier, killed writes of ``target``.

    Only files named ``.NAME.metaprov-XXXXXXXX.part`` (NAME: the target's name), regular, owned
    by this user, and whose writer is gone (no lock on them) are removed. Returns their paths.
    """
    import fcntl

    pattern = _part_pattern(target.name)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        if not pattern.fullmatch(entry.name):
            continue
        try:
            if (
                not entry.is_file(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != os.getuid()
            ):
                continue
            fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # a live writer holds it
            continue
        try:
            size = os.fstat(fd).st_size
            os.unlink(entry.path)
            removed.append(Path(entry.path))
            log.warning(
                "removed %s (%s bytes), left by an earlier interrupted write of %s",
                entry.path,
                f"{size:,}",
                target,
            )
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


class _BackgroundWriter:
    """A binary file whose ``write`` hands the bytes to a thread, so formatting the next block
    overlaps with writing this one to disk.

    At most ``depth`` chunks (pieces of a block's text, at most 8 MB each from the row writers)
    wait in the queue, which bounds the extra memory.
    """

    def __init__(self, raw: IO[bytes] | _AlignedFile, depth: int = 4, digest: Any = None) -> None:
        import queue
        import threading

        self.raw = raw
        self.digest = digest
        self.queue: queue.Queue[bytes | memoryview | None] = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="metaprov-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            chunk = self.queue.get()
            if chunk is None:
                return
            if self.error is None:
                try:
                    self.raw.write(chunk)
                    if self.digest is not None:
                        self.digest.update(chunk)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the producer
                    self.error = exc

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self.error is not None:
            raise self.error
        # a read-only view is queued as is: its owner does not change the bytes after writing
        # them (the N-Triples rows hand out views of their text buffer); anything else is copied
        chunk = data if isinstance(data, bytes) or _readonly(data) else bytes(data)
        self.queue.put(chunk)
        return len(chunk)

    def flush(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error

    def __enter__(self) -> _BackgroundWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _readonly(data: Any) -> bool:
    return isinstance(data, memoryview) and data.readonly


#: Bytes gathered before each write to the file (a multiple of every usual block size).
ALIGNED_BUFFER_BYTES = 8 << 20
_ALIGN = 4096


class _AlignedFile:
    """The raw sink of a file export: bytes gathered in a page-aligned buffer and written in
    :data:`ALIGNED_BUFFER_BYTES` pieces with ``O_DIRECT`` where the file system allows it.

    A large export is written once and not read back by this process: copying it through the
    page cache costs more CPU than formatting it (measured at 10^6 tasks, 6.5 GB: 12-16 s of
    kernel time buffered, under 1 s direct, on the 2-core reference machine). The last piece is
    padded to the block size and the file truncated to its true length. Where ``O_DIRECT`` is
    refused (tmpfs, some network file systems, a platform without it), the same large writes go
    through the page cache. The bytes written are the same either way.

    Args:
        fd: the open (empty) file, from :func:`tempfile.mkstemp`; closed by :meth:`close`.
        path: its path, re-opened with ``O_DIRECT``.
    """

    def __init__(self, fd: int, path: str, size: int = ALIGNED_BUFFER_BYTES) -> None:
        import mmap

        import numpy as np

        self.fd = fd
        self.direct_fd: int | None = None
        direct = getattr(os, "O_DIRECT", 0)
        if direct:
            try:
                self.direct_fd = os.open(path, os.O_WRONLY | direct)
            except OSError:
                self.direct_fd = None
        self.size = size
        self.buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
        self.view = memoryview(self.buf)
        self.arr = np.frombuffer(self.buf, dtype=np.uint8)
        self.pos = 0
        self.total = 0  # bytes received
        self.written = 0  # bytes written to the file (padding included)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        import numpy as np

        src = np.frombuffer(data, dtype=np.uint8)
        n = len(src)
        done = 0
        while done < n:
            k = min(n - done, self.size - self.pos)
            self.arr[self.pos : self.pos + k] = src[done : done + k]  # numpy copies without the GIL
            self.pos += k
            done += k
            if self.pos == self.size:
                self._drain(self.size)
        self.total += n
        return n

    def _drain(self, length: int) -> None:
        """Write ``buf[:length]`` (a multiple of the block size while writing directly).

        Every view of the buffer is released even when a write fails (a full disk): an error's
        traceback must not keep the buffer exported, or it could not be closed.
        """
        done = 0
        while done < length:
            with self.view[done:length] as piece:
                if self.direct_fd is not None:
                    try:
                        k = os.write(self.direct_fd, piece)
                    except OSError as exc:
                        import errno

                        if exc.errno != errno.EINVAL:
                            raise
                        # Direct I/O refused at write time: go on through the page cache.
                        os.close(self.direct_fd)
                        self.direct_fd = None
                        os.lseek(self.fd, self.written, os.SEEK_SET)
                        continue
                else:
                    k = os.write(self.fd, piece)
            done += k
            self.written += k
        self.pos = 0

    def flush(self) -> None:
        pass

    def close(self, complete: bool = True) -> None:
        """Write what is left (``complete``) and close the file."""
        try:
            if complete and self.pos:
                if self.direct_fd is not None:
                    used = self.pos
                    padded = -(-used // _ALIGN) * _ALIGN
                    self.arr[used:padded] = 0
                    self._drain(padded)
                else:
                    self._drain(self.pos)
            if complete and self.written != self.total:
                os.ftruncate(self.fd, self.total)
        finally:
            if self.direct_fd is not None:
                os.close(self.direct_fd)
                self.direct_fd = None
            os.close(self.fd)
            del self.arr
            self.view.release()
            self.buf.close()

    def __enter__(self) -> _AlignedFile:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(complete=exc_type is None)


def _umask() -> int:
    """The process umask (mkstemp creates 0600 files; the output gets normal permissions)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
