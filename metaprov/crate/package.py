"""Where a crate is built and how it reaches its place: staging, zip, an existing crate.

Input: the output path (a directory or ``*.zip``) and, for ``--add-to``, an existing crate.
Output: a :class:`Staging` directory beside the output in which the crate is built, moved into
place only when it is complete (a rename; a zip written to a temporary file and renamed), so a
failure leaves nothing half-written and nothing outside the output path is touched.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metaprov.crate.builder import types_of
from metaprov.errors import InputError, UsageError

METADATA = "ro-crate-metadata.json"
#: Files larger than this are deflated at level 1 in a zip crate (PROV files of large runs).
FAST_DEFLATE_BYTES = 64 << 20


def is_zip_path(path: Path) -> bool:
    return path.suffix.lower() == ".zip"


def check_output(
    output: Path,
    *,
    force: bool,
    in_place: bool,
    inputs: Sequence[Path] = (),
) -> None:
    """Refuse an output that would overwrite something, or that cannot be written.

    The rules of every output (:mod:`metaprov.write.output`): it never is, holds or sits inside
    one of ``inputs`` (the runs, the workflow script, a crate added to elsewhere), ``--force``
    or not; an existing zip or non-empty directory is replaced only with ``force``.

    Raises:
        UsageError: the path is of the wrong kind, or its parent is not a writable directory.
        OutputError: the output overlaps an input, or exists (without ``force``).
    """
    from metaprov.write.output import is_store_dir, refuse_existing, refuse_overlap

    parent = output.parent if str(output.parent) else Path(".")
    if not parent.exists():
        raise UsageError(
            f"cannot write {output}: {parent} does not exist",
            hint="create the parent directory first",
        )
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write {output}: {parent} is not a writable directory",
            hint="choose an output in a directory you can write to",
        )
    if is_store_dir(parent):
        raise UsageError(
            f"refusing to write {output}: {parent} is a store directory (writing there destroys "
            "the store)",
            hint="write the crate outside the store directory",
        )
    refuse_overlap(output, inputs=inputs)
    if in_place:
        return
    if output.exists() and not (output.is_dir() or output.is_file()):
        raise UsageError(
            f"{output} is neither a file nor a directory (a FIFO, a device or a socket); "
            "refusing to replace it",
            hint="give a new directory or FILE.zip",
        )
    if is_zip_path(output):
        if output.is_dir():
            raise UsageError(f"{output} is a directory", hint="give a new FILE.zip")
        refuse_existing(output, overwrite=force)
        return
    if output.exists() and not output.is_dir():
        raise UsageError(
            f"{output} exists and is not a directory", hint="give a new directory or FILE.zip"
        )
    refuse_existing(output, overwrite=force, also=", or --add-to to add to a crate")


class Staging:
    """A temporary directory beside ``output``; :meth:`commit` moves the crate into place.

    Used as a context manager: on an exception the staging directory is removed. While it
    lives, the staging directory is locked (``flock``); a staging directory of the same output
    left by a killed earlier run (``.NAME.XXXXXXXX.crate-part``, owned by this user, unlocked) is
    removed by the next one.
    """

    def __init__(self, output: Path) -> None:
        import fcntl

        self.output = output
        parent = output.parent if str(output.parent) else Path(".")
        self.lock: int | None = None
        _remove_orphans(output)
        try:
            self.dir = Path(
                tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".crate-part", dir=parent)
            )
            self.lock = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(self.lock, fcntl.LOCK_EX)
        except OSError as exc:
            raise UsageError(
                f"cannot write {output}: {exc.strerror}", hint="choose a writable location"
            ) from exc

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None

    def commit(self) -> None:
        """Put the finished crate at ``output`` (replacing what was there) in one step: a zip
        by a rename, a directory by exchanging it with the old one (``renameat2``), so that at
        every instant ``output`` is either the old crate or the new one.

        Raises:
            OutputError: the crate cannot be put in place (the old one stays as it was).
        """
        from metaprov.errors import OutputError

        out = self.output
        try:
            if is_zip_path(out):
                fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
                os.close(fd)
                try:
                    write_zip(self.dir, Path(tmp))
                    os.chmod(tmp, 0o666 & ~_umask())
                    os.replace(tmp, out)
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
                shutil.rmtree(self.dir, ignore_errors=True)
                return
            os.chmod(self.dir, 0o777 & ~_umask())
            if out.exists() or out.is_symlink():
                if out.is_symlink() or not out.is_dir():
                    raise OutputError(
                        f"{out} is not a directory; refusing to replace it",
                        hint="give a new directory or FILE.zip",
                    )
                exchange(self.dir, out)  # the staging path now holds the old crate
                shutil.rmtree(self.dir, ignore_errors=True)
            else:
                os.rename(self.dir, out)
        except OSError as exc:
            import errno

            hint = (
                "free some space, or write the crate to another file system with -o"
                if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
                else "choose an output in a directory you can write to"
            )
            raise OutputError(
                f"cannot put the crate {out} in place: {exc.strerror or exc}; "
                "an earlier crate there is unchanged",
                hint=hint,
            ) from exc


def exchange(a: Path, b: Path) -> None:
    """Swap two directories atomically (Linux ``renameat2(RENAME_EXCHANGE)``).

    Raises:
        OSError: the exchange failed, or the platform has no ``renameat2`` (then nothing moved).
    """
    import ctypes
    import ctypes.util
    import errno

    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        raise OSError(errno.ENOSYS, "this system cannot exchange two directories atomically")
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(b))


def _remove_orphans(output: Path) -> None:
    """Remove staging directories of ``output`` left by killed runs (unlocked, ours)."""
    import fcntl
    import logging

    parent = output.parent if str(output.parent) else Path(".")
    pattern = re.compile(re.escape(f".{output.name}.") + r"[A-Za-z0-9_]{8}\.crate-part")
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if not pattern.fullmatch(entry.name):
            continue
        try:
            if (
                not entry.is_dir(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != os.getuid()
            ):
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
            logging.getLogger("metaprov").warning(
                "removed %s, left by an earlier interrupted crate of %s", entry.path, output
            )
        finally:
            os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_zip(top: Path, dest: Path) -> None:
    """Zip the crate directory ``top`` (files at the archive root, sorted, fixed timestamps:
    the same crate gives the same bytes)."""
    entries = sorted(top.rglob("*"))
    with zipfile.ZipFile(dest, "w", allowZip64=True) as zf:
        for p in entries:
            rel = p.relative_to(top).as_posix()
            if p.is_dir():
                # directory entries: a Dataset's folder is then in the payload, as in a directory
                info = zipfile.ZipInfo(rel + "/", date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = (0o40755 << 16) | 0x10
                zf.writestr(info, b"")
                continue
            info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            level = 1 if p.stat().st_size > FAST_DEFLATE_BYTES else 6
            # per-entry level: ``compress_level`` since Python 3.13, ``_compresslevel`` before
            for attr in ("compress_level", "_compresslevel"):
                try:
                    setattr(info, attr, level)
                    break
                except AttributeError:
                    continue
            with open(p, "rb") as src, zf.open(info, "w", force_zip64=True) as out:
                shutil.copyfileobj(src, out, 8 << 20)


#: Limits on an existing crate (untrusted input: ``--add-to``), see docs/reliability.md.
MAX_ENTRIES = 100_000
MAX_DEPTH = 64
#: A zip entry may unpack to at most this many times its compressed size (above
#: :data:`RATIO_FLOOR` bytes): PROV text deflates 5 to 30 times; deflate's own ceiling is 1032.
MAX_RATIO = 200
RATIO_FLOOR = 1 << 20
MAX_METADATA_BYTES = 512 << 20
_CHUNK = 8 << 20


def unpack_existing(source: Path, staging: Path) -> None:
    """Copy an existing crate's files into ``staging`` (a new, empty directory), treating the
    crate as untrusted input: files and folders only (a symbolic link, FIFO, device or socket
    refuses the crate: nothing is read or written through one), copies never share an inode
    with ``source`` (the original crate is never modified), a zip's names stay inside
    ``staging``, and the sizes and counts stay within :data:`MAX_ENTRIES`,
    :data:`MAX_DEPTH` and :data:`MAX_RATIO` (a zip bomb is refused before anything is written).
    Then the metadata is checked (:func:`check_metadata`).

    Raises:
        InputError: ``source`` does not exist, is not a crate, or is refused (what and why).
        OutputError: the staging file system is full.
    """
    if not source.exists():
        raise InputError(
            "no such crate", path=source, hint="give an existing crate directory or .zip"
        )
    if source.is_dir():
        if not (source / METADATA).is_file():
            raise InputError(
                f"not an RO-Crate: no {METADATA}",
                path=source,
                hint="give a crate made by an RO-Crate tool",
            )
        _copy_tree(source, staging)
    else:
        try:
            is_zip = zipfile.is_zipfile(source)
        except OSError as exc:
            raise InputError(f"cannot read the crate: {exc.strerror}", path=source) from exc
        if not is_zip:
            raise InputError("not an RO-Crate: neither a directory nor a zip file", path=source)
        _extract_zip(source, staging)
    check_metadata(staging / METADATA, source)


def _refuse(source: Path, what: str) -> InputError:
    return InputError(
        f"refusing the crate: {what}",
        path=source,
        hint="an existing crate must hold only files and folders, within the limits of "
        "docs/reliability.md",
    )


def _copy_error(exc: OSError, source: Path, rel: Any) -> Exception:
    import errno

    from metaprov.errors import OutputError

    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return OutputError(
            f"no space left to copy the crate's {rel}",
            hint="free some space, or write the new crate to another file system with -o",
        )
    return InputError(f"cannot copy the crate's {rel}: {exc.strerror or exc}", path=source)


def _copy_tree(source: Path, staging: Path) -> None:
    """Copy a crate directory file by file, never following a link (descriptors relative to
    their folder, ``O_NOFOLLOW``), without recursion (any depth up to :data:`MAX_DEPTH`)."""
    import stat

    nofollow = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        top = os.open(source, os.O_RDONLY | os.O_DIRECTORY | nofollow)
    except OSError as exc:
        raise InputError(f"cannot read the crate: {exc.strerror}", path=source) from exc
    stack: list[tuple[int, Path, int]] = [(top, Path(), 0)]
    count = 0
    try:
        while stack:
            dfd, rel, depth = stack.pop()
            try:
                try:
                    with os.scandir(dfd) as it:
                        names = sorted(e.name for e in it)
                except OSError as exc:
                    raise InputError(
                        f"cannot read the crate's folder {rel.as_posix() or '.'}: {exc.strerror}",
                        path=source,
                    ) from exc
                for name in names:
                    count += 1
                    if count > MAX_ENTRIES:
                        raise _refuse(source, f"more than {MAX_ENTRIES:,} files and folders")
                    r = rel / name
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        target = os.readlink(name, dir_fd=dfd)
                        raise _refuse(source, f"{r} is a symbolic link (to {target})")
                    if stat.S_ISDIR(st.st_mode):
                        if depth + 1 > MAX_DEPTH:
                            raise _refuse(source, f"folders nested deeper than {MAX_DEPTH}")
                        try:
                            child = os.open(
                                name, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=dfd
                            )
                            (staging / r).mkdir()
                        except OSError as exc:
                            raise _copy_error(exc, source, r) from exc
                        stack.append((child, r, depth + 1))
                    elif stat.S_ISREG(st.st_mode):
                        _copy_file(dfd, name, staging / r, source, r)
                    else:
                        raise _refuse(source, f"{r} is not a regular file ({_kind(st.st_mode)})")
            finally:
                os.close(dfd)
    finally:
        for dfd, _, _ in stack:
            os.close(dfd)


def _kind(mode: int) -> str:
    import stat

    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


def _copy_file(dfd: int, name: str, dest: Path, source: Path, rel: Path) -> None:
    import stat

    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        src = os.open(name, flags, dir_fd=dfd)
    except OSError as exc:
        raise InputError(
            f"cannot read the crate's {rel}: {exc.strerror}",
            path=source,
            hint="make the crate's files readable to you",
        ) from exc
    try:
        if not stat.S_ISREG(os.fstat(src).st_mode):  # replaced since it was listed
            raise _refuse(source, f"{rel} is not a regular file")
        try:
            out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise _copy_error(exc, source, rel) from exc
        try:
            while True:
                try:
                    chunk = os.read(src, _CHUNK)
                except OSError as exc:
                    raise InputError(
                        f"cannot read the crate's {rel}: {exc.strerror}", path=source
                    ) from exc
                if not chunk:
                    break
                try:
                    _write_all(out, chunk)
                except OSError as exc:
                    raise _copy_error(exc, source, rel) from exc
        finally:
            os.close(out)
    finally:
        os.close(src)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _zip_parts(name: str) -> tuple[str, ...] | None:
    """The path parts of a zip entry's name, or None when the name would leave the crate."""
    if not name or "\x00" in name or name.startswith(("/", "\\")) or "\\" in name:
        return None
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if not parts or any(p == ".." for p in parts) or re.match(r"^[A-Za-z]:", parts[0]):
        return None
    return parts


def _extract_zip(source: Path, staging: Path) -> None:
    import zlib

    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InputError(f"not a readable zip: {exc}", path=source) from exc
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ENTRIES:
            raise _refuse(source, f"{len(infos):,} entries, more than {MAX_ENTRIES:,}")
        plan: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] = []
        seen: set[tuple[str, ...]] = set()
        total = 0
        for info in infos:
            parts = _zip_parts(info.filename)
            if parts is None:
                raise _refuse(source, f"unsafe path in zip: {info.filename!r}")
            if len(parts) > MAX_DEPTH:
                raise _refuse(source, f"{info.filename!r} is nested deeper than {MAX_DEPTH}")
            if parts in seen and not info.is_dir():
                raise _refuse(source, f"{info.filename!r} is in the zip twice")
            seen.add(parts)
            if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(
                info.compress_size, 1
            ):
                raise _refuse(
                    source,
                    f"{info.filename!r} would unpack to {info.file_size:,} bytes from "
                    f"{info.compress_size:,} (more than {MAX_RATIO} times: a zip bomb?)",
                )
            total += info.file_size
            plan.append((info, parts))
        if (METADATA,) not in seen:
            raise InputError(f"not an RO-Crate: no {METADATA} at the top of the zip", path=source)
        free = shutil.disk_usage(staging).free
        if total > free:
            from metaprov.errors import OutputError

            raise OutputError(
                f"the crate {source} unpacks to {total:,} bytes; only {free:,} are free "
                f"beside the output",
                hint="free some space, or write the new crate to another file system with -o",
            )
        for info, parts in plan:
            dest = staging.joinpath(*parts)
            rel = "/".join(parts)
            try:
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except OSError as exc:
                raise _copy_error(exc, source, rel) from exc
            try:
                left = info.file_size  # zipfile stops there and checks the CRC
                with zf.open(info) as src:
                    while chunk := src.read(min(_CHUNK, left + 1)):
                        left -= len(chunk)
                        if left < 0:
                            raise _refuse(source, f"{rel} is larger than the zip says")
                        try:
                            _write_all(out, chunk)
                        except OSError as exc:
                            raise _copy_error(exc, source, rel) from exc
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
                raise InputError(f"damaged zip entry {rel}: {exc}", path=source) from exc
            except RuntimeError as exc:  # encrypted entries
                raise InputError(f"cannot read zip entry {rel}: {exc}", path=source) from exc
            finally:
                os.close(out)


#: A URI scheme at the start of an id (``http:``, ``file:``, ``javascript:``).
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def crate_path(staging: Path, ident: str, label: Path | None = None) -> Path | None:
    """The file or folder an entity id names inside the crate at ``staging``, or None when the
    id names nothing there (a URL, a ``#fragment``, the root, the metadata file). Raises
    :class:`InputError` for an id that would leave the crate (``..``, absolute, ``file:``)."""
    from urllib.parse import unquote

    if not isinstance(ident, str) or ident.startswith("#") or ident in ("./", ".", ""):
        return None
    if _SCHEME.match(ident):
        if ident.lower().startswith("file:"):
            raise _unsafe_id(ident, label)
        return None
    path = unquote(ident.split("#", 1)[0])
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or "\x00" in path or "\\" in path or any(p == ".." for p in parts):
        raise _unsafe_id(ident, label)
    if not parts or parts == [METADATA]:
        return None
    return staging.joinpath(*parts)


def _unsafe_id(ident: str, label: Path | None) -> InputError:
    return InputError(
        f"refusing the crate: the entity id {ident!r} points outside the crate",
        path=label,
        hint="an existing crate's ids must be URLs, #fragments or paths inside the crate",
    )


def check_metadata(path: Path, label: Path) -> None:
    """Check an existing crate's ``ro-crate-metadata.json`` before the rocrate library reads it:
    bounded size, JSON (any depth refused cleanly), a ``@graph`` of objects with string ids,
    and no id that points outside the crate (:func:`crate_path`).

    Raises:
        InputError: naming the crate (``label``) and what is wrong.
    """
    import json

    try:
        size = path.stat().st_size
        if size > MAX_METADATA_BYTES:
            raise _refuse(label, f"{METADATA} has {size:,} bytes, more than {MAX_METADATA_BYTES:,}")
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InputError(f"not a readable RO-Crate: {METADATA}: {what}", path=label) from exc
    except OSError as exc:
        raise InputError(f"cannot read {METADATA}: {exc.strerror}", path=label) from exc
    graph = data.get("@graph") if isinstance(data, dict) else None
    if not isinstance(graph, list):
        raise InputError(f"not a readable RO-Crate: {METADATA} has no @graph list", path=label)
    root = path.parent
    for n, ent in enumerate(graph):
        ident = ent.get("@id") if isinstance(ent, dict) else None
        if not isinstance(ident, str):
            raise InputError(
                f"not a readable RO-Crate: entity {n} of the @graph has no @id", path=label
            )
        local = crate_path(root, ident, label)
        if local is not None and _is_data_entity(ent) and not os.path.lexists(local):
            # a File or Dataset the crate does not hold (an id such as %252e%252e/x, U+2024 or
            # full-width dots names a folder nobody made): the rocrate library would fail
            # copying it, half-way through writing the new crate
            raise InputError(
                f"not a usable RO-Crate: the entity {ident!r} names a file or folder the crate "
                "does not hold",
                path=label,
                hint="remove that entity from its ro-crate-metadata.json (or add the file), "
                "then run this again; the crate was not changed",
            )


def _is_data_entity(ent: dict[str, Any]) -> bool:
    types = ent.get("@type")
    names = types if isinstance(types, list) else [types]
    return any(t in ("File", "Dataset") for t in names if isinstance(t, str))


def load_crate(staging: Path, label: Path) -> Any:
    """Read the crate in ``staging`` with the rocrate library.

    Raises:
        InputError: its metadata is not a readable RO-Crate (names ``label``, the user's path).
    """
    from rocrate.rocrate import ROCrate

    try:
        return ROCrate(staging)
    except (
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        OSError,
        AssertionError,
        RecursionError,
        IndexError,
    ) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InputError(f"not a readable RO-Crate: {what}", path=label) from exc


def owned_ids(crate: Any, run_id: str, run_iri: str) -> set[str]:
    """@ids of the entities a run put in ``crate`` (to replace them when it is added again).

    A run owns: its CreateAction (the run IRI, or any CreateAction whose ``identifier`` is the run
    id, e.g. written with another ``--base``) and every id under it (``<run>#...``, ``<run>/...``),
    ids under ``#<run id>/``, and the files under ``runs/<name>_<run id>/``.
    """
    bases = {run_iri}
    for e in crate.get_entities():
        ident = e.get("identifier")
        if ident == run_id and "CreateAction" in types_of(e):
            bases.add(e.id)
    folder = re.compile(rf"^runs/[^/]*_{re.escape(run_id)}/")
    out = set()
    for e in crate.get_entities():
        i = e.id
        if i in bases or any(i.startswith(b + "#") or i.startswith(b + "/") for b in bases):
            out.add(i)
        elif i.startswith(f"#{run_id}/") or folder.match(i):
            out.add(i)
    return out


def remove_entities(crate: Any, ids: set[str], staging: Path) -> None:
    """Delete entities and every reference to them; remove their files from ``staging``."""
    if not ids:
        return
    for i in sorted(ids):
        e = crate.get(i)
        if e is None:
            continue
        p = crate_path(staging, i)  # None: nothing on disk; refuses ids outside the crate
        if p is not None:
            if p.is_symlink() or not p.is_dir():
                p.unlink(missing_ok=True)
            else:
                shutil.rmtree(p)
        crate.delete(e)
    for e in crate.get_entities():
        props = e.properties()
        for k in list(props):
            if k.startswith("@"):
                continue
            v = props[k]
            if isinstance(v, list):
                kept = [x for x in v if not (isinstance(x, dict) and x.get("@id") in ids)]
                if len(kept) != len(v):
                    if kept:
                        props[k] = kept[0] if len(kept) == 1 else kept
                    else:
                        del props[k]
            elif isinstance(v, dict) and v.get("@id") in ids:
                del props[k]
