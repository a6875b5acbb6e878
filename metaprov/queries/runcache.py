"""What was read of a run directory, kept for the next question on the same run.

Input: a run directory. Output: its :class:`~metaprov.records.RunRecords`, read and linked as
``metaprov load`` reads them: from the cache when the run's files are unchanged, else read
again (and kept).

Reading a run of 10^6 tasks (1.3 GB of CSV) is most of the cost of an answer from a run
directory; its records, once read, are kept as Arrow IPC (Feather, LZ4) tables (exact types:
pandas' own metadata) and a JSON file of the rest, in ``$METAPROV_CACHE`` (default ``$XDG_CACHE_HOME/metaprov/runs`` or
``~/.cache/metaprov/runs``), one folder per run directory (its absolute path) and reading
options. An entry is used only when every file of the run directory (subfolders included) has
the size and modification time it had when the entry was written, and the entry was written by
the same metaprov version; otherwise the run is read again and the entry replaced. An entry is
written to a temporary folder and renamed into place, so a reader never sees half of one; an
unreadable or damaged entry is read again, never trusted. What is not kept: the row accounting
of the read (``metaprov inspect`` reports it; answers do not use it), and of the state
transitions all but the rows of their first and last time (answers map the task level,
``--detail tasks``, which reads nothing else of them than the run's span: at 10^6 tasks the
7 M transition rows were two thirds of an entry). No pickle: Arrow IPC and JSON only.

An entry of a run with Darshan logs may be written before the I/O was linked to tasks (a
question that reads nothing of the link answers without it: seconds at 10^6 tasks); the first
answer that links the run adds the link to the entry (:func:`keep_link`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from metaprov.records import RunRecords

log = logging.getLogger("metaprov")

ENV_CACHE = "METAPROV_CACHE"
#: What an entry keeps of the state transitions (the run's span; see the module docstring).
TRANSITION_COLUMNS = ("time",)
#: Format of an entry (raise it when the layout changes: older entries are then read again).
LAYOUT = 3
#: The tables' files: Arrow IPC, LZ4 (at 10^6 tasks a third of Parquet's time to write and
#: to read back, 1.5x its size).
_SUFFIX = ".arrow"


def cache_root(cache: bool | str | Path = True) -> Path | None:
    """The cache folder (None when caching is off)."""
    if cache is False:
        return None
    if cache is not True:
        return Path(cache)
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "metaprov" / "runs"


def cached_records(
    run: Path,
    *,
    darshan: bool = True,
    cache: bool | str | Path = True,
    progress: bool = False,
    link: bool = True,
    later: list[Callable[[], None]] | None = None,
) -> RunRecords:
    """The run's records with Darshan I/O linked, for answers (the task level: of the state
    transitions only their times are kept): the cache's entry when it is valid, else the run
    read again (and the entry written; a cache that cannot be written is skipped with a
    warning).

    ``link=False``: the Darshan I/O may be left unlinked (``records.io`` None), for answers that
    read nothing the link decides; an entry is then written without the link, and the first
    answer that links the run adds it (:func:`keep_link`). ``later``: a new entry is not
    written now; the function writing it is appended there (for a caller that answers
    first: it writes the records as they are then, the link included when one was made)."""
    from metaprov.ingest import read_run
    from metaprov.store.base import _maybe_link

    root = cache_root(cache)
    entry = None if root is None else root / _entry_name(run, darshan)
    files = _run_files(run)
    if entry is not None:
        found = _read_entry(entry, files)
        if found is not None:
            if link and found.io is None and found.darshan is not None:
                _maybe_link(found)
                keep_link(run, found, darshan=darshan, cache=cache)
            return found
    records = read_run(run, darshan=darshan, progress=progress)
    if link:
        _maybe_link(records)
    # what an entry keeps of the transitions, whether or not one is written: the same records
    # either way, and their memory (the largest table of a large run) handed back at once
    records.transitions = span_rows(records.transitions)
    if entry is not None:
        write = functools.partial(_keep, entry, records, files)
        if later is None:
            write()
        else:
            later.append(write)
    return records


def _keep(entry: Path, records: RunRecords, files: list[list[Any]]) -> None:
    """Write the entry, or warn that it could not be written (the answer stands)."""
    try:
        _write_entry(entry, records, files)
    except (OSError, TypeError, ValueError) as exc:
        log.warning("could not keep the run's records in %s: %s", entry, exc)


def span_rows(transitions: pd.DataFrame) -> pd.DataFrame:
    """Of the transitions, the times (:data:`TRANSITION_COLUMNS`) of the rows holding the
    first and the last time: what the run's span (:attr:`RunRecords.span`) reads of them."""
    times = transitions[list(TRANSITION_COLUMNS)]
    valid = times["time"].dropna()
    if not len(valid):
        return times.iloc[:0].reset_index(drop=True)
    rows = sorted({int(valid.argmin()), int(valid.argmax())})  # on the integers, not objects
    return valid.iloc[rows].to_frame().reset_index(drop=True)


def keep_link(
    run: Path, records: RunRecords, *, darshan: bool = True, cache: bool | str | Path = True
) -> None:
    """Add the records' Darshan I/O link to the run's entry when the entry was written without
    it (nothing when there is no entry, it has the link, or the records have none). Its
    tables are written beside the entry's, then the entry's description is replaced at once:
    a reader sees the entry with or without the link, never half of it."""
    root = cache_root(cache)
    if root is None or records.io is None:
        return
    entry = root / _entry_name(run, darshan)
    if not (entry / "entry.json").is_file():  # not written (a warning said why)
        return
    try:
        meta = json.loads((entry / "entry.json").read_text(encoding="utf-8"))
        fields = meta["fields"]
        if fields.get("io") is not None:
            return
        tmp = Path(tempfile.mkdtemp(prefix=".writing-", dir=entry))
        try:
            tables: list[str] = []
            io = _encode_fields(records.io, tmp, "io.", tables)
            for name in tables:
                os.replace(tmp / f"{name}{_SUFFIX}", entry / f"{name}{_SUFFIX}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        meta["tables"] = [*meta["tables"], *tables]
        fields["io"] = {"__fields__": io}
        new = entry / ".entry.json.writing"
        new.write_text(json.dumps(meta), encoding="utf-8")
        os.replace(new, entry / "entry.json")
    except (OSError, KeyError, TypeError, ValueError) as exc:
        log.warning("could not keep the run's I/O link in %s: %s", entry, exc)


def _entry_name(run: Path, darshan: bool) -> str:
    key = f"{Path(run).resolve()}\0darshan={darshan}"
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


def _run_files(run: Path) -> list[list[Any]]:
    """(relative path, size, mtime in ns) of every file under the run directory, sorted."""
    out = []
    for dirpath, _dirs, names in os.walk(run):
        for name in names:
            p = Path(dirpath) / name
            try:
                st = p.stat()
            except OSError:
                continue
            out.append([str(p.relative_to(run)), st.st_size, st.st_mtime_ns])
    return sorted(out)


# --- writing ----------------------------------------------------------------------------------


def _write_entry(entry: Path, records: RunRecords, files: list[list[Any]]) -> None:
    """Write the entry to a new folder beside it, then put it in place."""
    from metaprov._version import __version__

    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".writing-", dir=entry.parent))
    try:
        tables: list[str] = []
        rest = _encode_fields(records, tmp, "", tables)
        meta = {
            "layout": LAYOUT,
            "version": __version__,
            "files": files,
            "tables": tables,
            "fields": rest,
        }
        (tmp / "entry.json").write_text(json.dumps(meta), encoding="utf-8")
        old = entry.with_name(entry.name + ".old")
        if entry.exists():
            os.replace(entry, old)
        os.replace(tmp, entry)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _encode_fields(obj: Any, folder: Path, prefix: str, tables: list[str]) -> dict[str, Any]:
    """The dataclass's fields: tables written as Arrow IPC files (named in ``tables``), nested
    dataclasses by their fields, anything else as tagged JSON."""
    out: dict[str, Any] = {"__class__": type(obj).__module__ + ":" + type(obj).__qualname__}
    for f in dataclasses.fields(obj):
        if f.name == "accounting" and prefix == "":
            continue
        value = getattr(obj, f.name)
        name = prefix + f.name
        if isinstance(value, pd.DataFrame):
            _write_table(value, folder / f"{name}{_SUFFIX}")
            tables.append(name)
            out[f.name] = {"__table__": name}
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            out[f.name] = {"__fields__": _encode_fields(value, folder, name + ".", tables)}
        else:
            out[f.name] = _json_value(value)
    return out


def _write_table(df: pd.DataFrame, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.feather as feather

    table = pa.Table.from_pandas(df, preserve_index=False)
    feather.write_feather(table, path, compression="lz4")


def _read_table(path: Path) -> pd.DataFrame:
    import pyarrow.feather as feather

    return feather.read_table(path, memory_map=False).to_pandas()


def _json_value(value: Any) -> Any:
    """Tagged JSON of a plain value (times, numbers, text, lists, dicts of those)."""
    import numpy as np

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return {"__float__": repr(float(value))}
    if isinstance(value, pd.Timestamp):
        return {"__time__": value.isoformat()}
    if isinstance(value, tuple):
        return {"__tuple__": [_json_value(v) for v in value]}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _json_value(v) for k, v in value.items()}}
    raise TypeError(f"a value of type {type(value).__name__} is not kept in the cache")


# --- reading ----------------------------------------------------------------------------------


def _read_entry(entry: Path, files: list[list[Any]]) -> RunRecords | None:
    """The records of a valid entry; None when it is absent, stale or damaged."""
    from metaprov._version import __version__

    try:
        meta = json.loads((entry / "entry.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(meta, dict)
        or meta.get("layout") != LAYOUT
        or meta.get("version") != __version__
        or meta.get("files") != files
    ):
        return None
    try:
        records = _decode_fields(meta["fields"], entry)
    except Exception as exc:  # noqa: BLE001 - a damaged entry is read again, never trusted
        log.warning("the cached records in %s are damaged (%s): reading the run again", entry, exc)
        return None
    from metaprov.records import RunRecords

    return records if isinstance(records, RunRecords) else None


#: The classes an entry may name (nothing else is built from a cache file).
def _classes() -> dict[str, type]:
    from metaprov.ingest.darshan import DarshanRecords
    from metaprov.link import LinkedIO
    from metaprov.records import RunRecords

    return {f"{c.__module__}:{c.__qualname__}": c for c in (RunRecords, DarshanRecords, LinkedIO)}


def _decode_fields(data: dict[str, Any], folder: Path) -> Any:
    cls = _classes()[data["__class__"]]
    values = {}
    for name, value in data.items():
        if name == "__class__":
            continue
        if isinstance(value, dict) and "__table__" in value:
            table = value["__table__"]
            if not isinstance(table, str) or Path(table).name != table or table.startswith("."):
                raise ValueError(f"a table name that is no file of the entry: {table!r}")
            values[name] = _read_table(folder / f"{table}{_SUFFIX}")
        elif isinstance(value, dict) and "__fields__" in value:
            values[name] = _decode_fields(value["__fields__"], folder)
        else:
            values[name] = _from_json(value)
    return cls(**values)


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if "__float__" in value:
            return float(value["__float__"])
        if "__time__" in value:
            return pd.Timestamp(value["__time__"])
        if "__tuple__" in value:
            return tuple(_from_json(v) for v in value["__tuple__"])
        if "__dict__" in value:
            return {k: _from_json(v) for k, v in value["__dict__"].items()}
        raise ValueError(f"unknown value in the cache entry: {sorted(value)[:3]}")
    return value


__all__ = ["ENV_CACHE", "cache_root", "cached_records", "keep_link"]
