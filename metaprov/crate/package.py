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
from pathlib import Path
from typing import Any

from metaprov.crate.builder import types_of
from metaprov.errors import InputError, UsageError

METADATA = "ro-crate-metadata.json"
#: Files larger than this are deflated at level 1 in a zip crate (PROV files of large runs).
FAST_DEFLATE_BYTES = 64 << 20


def is_zip_path(path: Path) -> bool:
    return path.suffix.lower() == ".zip"


def check_output(output: Path, *, force: bool, in_place: bool) -> None:
    """Refuse an output that would overwrite something, or that cannot be written.

    Raises:
        UsageError: the directory exists and is not empty, the zip exists (without ``force``),
            the path is of the wrong kind, or its parent is not a writable directory.
    """
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
    if in_place:
        return
    if is_zip_path(output):
        if output.is_dir():
            raise UsageError(f"{output} is a directory", hint="give a new FILE.zip")
        if output.exists() and not force:
            raise UsageError(
                f"{output} already exists", hint="choose a new name, or pass --force to replace it"
            )
        return
    if output.exists() and not output.is_dir():
        raise UsageError(
            f"{output} exists and is not a directory", hint="give a new directory or FILE.zip"
        )
    if output.is_dir() and any(output.iterdir()) and not force:
        raise UsageError(
            f"{output} exists and is not empty",
            hint="choose a new directory, pass --force to replace it, or --add-to to add to a crate",
        )


class Staging:
    """A temporary directory beside ``output``; :meth:`commit` moves the crate into place.

    Used as a context manager: on an exception the staging directory is removed.
    """

    def __init__(self, output: Path) -> None:
        self.output = output
        parent = output.parent if str(output.parent) else Path(".")
        try:
            self.dir = Path(
                tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".crate-part", dir=parent)
            )
        except OSError as exc:
            raise UsageError(
                f"cannot write {output}: {exc.strerror}", hint="choose a writable location"
            ) from exc

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)

    def commit(self) -> None:
        """Put the finished crate at ``output`` (replacing what was there)."""
        out = self.output
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
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            os.rmdir(old)
            os.rename(out, old)
            try:
                os.rename(self.dir, out)
            except BaseException:
                os.rename(old, out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(self.dir, out)


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


def unpack_existing(source: Path, staging: Path) -> None:
    """Put an existing crate's files into ``staging`` (hard links where possible, else copies;
    a zip is extracted), checking that it is an RO-Crate.

    Raises:
        InputError: ``source`` does not exist, or is not a crate (no ro-crate-metadata.json).
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
        for p in sorted(source.rglob("*")):
            rel = p.relative_to(source)
            dest = staging / rel
            if p.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(p, dest)
            except OSError:
                shutil.copy2(p, dest)
        return
    if not zipfile.is_zipfile(source):
        raise InputError("not an RO-Crate: neither a directory nor a zip file", path=source)
    with zipfile.ZipFile(source) as zf:
        names = zf.namelist()
        if METADATA not in names:
            raise InputError(f"not an RO-Crate: no {METADATA} at the top of the zip", path=source)
        for info in zf.infolist():
            name = info.filename
            if name.startswith("/") or ".." in Path(name).parts:
                raise InputError(f"unsafe path in zip: {name!r}", path=source)
            zf.extract(info, staging)


def load_crate(staging: Path, label: Path) -> Any:
    """Read the crate in ``staging`` with the rocrate library.

    Raises:
        InputError: its metadata is not a readable RO-Crate (names ``label``, the user's path).
    """
    from rocrate.rocrate import ROCrate

    try:
        return ROCrate(staging)
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise InputError(f"not a readable RO-Crate: {exc}", path=label) from exc


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
        if not i.startswith(("#", "http:", "https:")):
            p = staging / i
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
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
