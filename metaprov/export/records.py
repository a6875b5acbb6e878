"""The consolidated record tables of runs, written as Parquet (or CSV) for pandas, polars and DuckDB.

Input: run directories (or a folder holding run directories).
Output: one file per record table with the schemas of :data:`metaprov.records.SCHEMAS`
(``docs/records.md``): ``DIR/tasks.parquet``, ``DIR/executions.parquet``, ... for one run; for
several runs one dataset per table partitioned by run, hive style
(``DIR/tasks/run_id=<id>/part-0.parquet``), which ``pandas.read_parquet(DIR/"tasks")``,
``polars.scan_parquet(..., hive_partitioning=True)`` and DuckDB's ``read_parquet(...,
hive_partitioning=true)`` read as one table with a ``run_id`` column. Beside them ``run.json``
(one run) or ``runs.json`` (several) holds the job, scheduler, software, missing inputs and row
accounting of each run.

Parquet keeps the dtypes exactly (UInt64 thread ids, ``timestamp[us, UTC]`` times, nullable
integers, booleans, categories as dictionaries); CSV writes times as ISO 8601 with ``Z`` and
floats shortest-roundtrip.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from metaprov.errors import InputError, UsageError
from metaprov.records import SCHEMAS, RunRecords, conform, csv_text, empty_table, text_columns
from metaprov.timeutil import format_utc

#: Output formats of :func:`write_records`.
RECORD_FORMATS = ("parquet", "csv")

#: The tables of a RunRecords itself (the Darshan ones hang off records.darshan and records.io).
_MAIN = tuple(name for name in SCHEMAS if not name.startswith("darshan_"))


def record_tables(records: RunRecords) -> dict[str, pd.DataFrame]:
    """Every record table of :data:`~metaprov.records.SCHEMAS` for a run, conformed to its
    schema: the Darshan tables are empty when no log was read, the link tables until linked."""
    tables = {name: getattr(records, name) for name in _MAIN}
    darshan, io = records.darshan, records.io
    for name in ("logs", "names", "counters", "segments"):
        tables[f"darshan_{name}"] = getattr(darshan, name) if darshan is not None else None
    tables["darshan_links"] = io.segments if io is not None else None
    tables["darshan_processes"] = io.processes if io is not None else None
    return {
        name: empty_table(name) if df is None else conform(name, df) for name, df in tables.items()
    }


def arrow_schema(name: str) -> Any:
    """The pyarrow schema of record table ``name`` (exact types: uint64 thread ids,
    ``timestamp[us, tz=UTC]`` times, int64 counts, dictionary-encoded categories)."""
    import pyarrow as pa

    def arrow_type(t: Any) -> Any:
        if isinstance(t, pd.DatetimeTZDtype):
            return pa.timestamp("us", tz="UTC")
        return {
            "Int64": pa.int64(),
            "UInt64": pa.uint64(),
            "boolean": pa.bool_(),
            "float64": pa.float64(),
            "category": pa.dictionary(pa.int32(), pa.string()),
        }.get(str(t), pa.string())

    return pa.schema([(c, arrow_type(t)) for c, t, _ in SCHEMAS[name]])


@dataclass
class RecordsResult:
    """What :func:`write_records` wrote.

    Attributes:
        output: the output directory.
        format: ``parquet`` or ``csv``.
        runs: per run: ``run_id``, ``path`` and rows per table.
        files: files written, relative to ``output``.
        seconds: wall time.
    """

    output: str
    format: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        """One line for humans."""
        rows = sum(sum(r["tables"].values()) for r in self.runs)
        tables = len(self.runs[0]["tables"]) if self.runs else 0
        return (
            f"{self.output}: {len(self.runs)} run(s), {tables} tables ({self.format}), "
            f"{rows:,} rows, {self.seconds:.1f} s"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "output": self.output,
            "format": self.format,
            "runs": self.runs,
            "files": self.files,
            "seconds": round(self.seconds, 3),
        }


def write_records(
    runs: str | Path | Sequence[str | Path],
    output: str | Path,
    *,
    format: str = "parquet",
    darshan: bool = True,
    progress: bool = False,
    on_run: Callable[[dict[str, Any]], None] | None = None,
    overwrite: bool = False,
) -> RecordsResult:
    """Write the consolidated record tables of runs into a new directory ``output``.

    One run: ``output/<table>.parquet`` (or ``.csv``) per table and ``output/run.json``. Several
    runs (or a folder of run directories): one dataset per table partitioned by run,
    ``output/<table>/run_id=<id>/part-0.parquet``, and ``output/runs.json``. Darshan I/O is linked
    to tasks first, so ``darshan_links`` says which task issued each segment.

    The directory is written beside its final place and renamed into it at the end: an error
    leaves nothing behind; an existing non-empty ``output`` is refused unless ``overwrite`` (then
    replaced only once the new one is complete); ``output`` never is, holds or sits inside a run.

    Args:
        runs: run directories, or folders holding run directories.
        output: directory to create (it may exist if empty).
        format: ``parquet`` (exact types) or ``csv`` (ISO 8601 times, shortest floats).
        darshan: read and link Darshan logs.
        progress: show a progress bar over the runs.
        on_run: called with each run's entry once it is written.
        overwrite: replace an existing non-empty ``output`` (the CLI's ``--force``).

    Returns:
        A :class:`RecordsResult`.

    Raises:
        UsageError: unknown format, or ``output`` is a file.
        OutputError: ``output`` overlaps a run, or is not empty (without ``overwrite``).
        InputError: a run cannot be read.

    Example:
        >>> write_records("examples/run", "example-records")  # doctest: +SKIP
        >>> pd.read_parquet("example-records/tasks.parquet")  # doctest: +SKIP
    """
    from tqdm.auto import tqdm

    from metaprov.ingest import read_run, run_directories
    from metaprov.link import link_io

    t0 = time.perf_counter()
    if format not in RECORD_FORMATS:
        raise UsageError(
            f"unknown records format {format!r}", hint=f"use one of: {', '.join(RECORD_FORMATS)}"
        )
    out = Path(output)
    from metaprov.write.output import check_parent, refuse_existing, refuse_overlap

    check_parent(out)  # the folder exists, is a directory and not a store (never created)
    items = [runs] if isinstance(runs, (str, Path)) else list(runs)
    refuse_overlap(out, inputs=items)  # never a run, in one, or holding one: --force or not
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file", hint="give a directory for the records (new or empty)")
    refuse_existing(out, overwrite=overwrite)
    dirs: list[Path] = []
    for item in items:
        dirs.extend(run_directories(item))
    if not dirs:
        raise UsageError(
            "no run given", hint="give run directories, e.g. metaprov records RUN -o DIR"
        )
    partitioned = len(dirs) > 1
    result = RecordsResult(str(out), format)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.part-", dir=out.parent))
    except OSError as exc:
        raise _output_error(out, exc) from exc
    try:
        seen: dict[str, str] = {}
        facts: list[dict[str, Any]] = []
        for run in tqdm(dirs, desc="records", unit="run", disable=not progress, leave=False):
            records = read_run(run, darshan=darshan)
            if records.darshan is not None:
                link_io(records)
            if records.run_id in seen:
                raise InputError(
                    f"is the same run as {seen[records.run_id]} (run id {records.run_id})",
                    path=run,
                    hint="give each run once",
                )
            seen[records.run_id] = str(run)
            entry = _write_run(records, tmp, format, partitioned, result.files)
            result.runs.append(entry)
            facts.append(_run_facts(records))
            if on_run is not None:
                on_run(entry)
        name = "runs.json" if partitioned else "run.json"
        (tmp / name).write_text(
            json.dumps(facts if partitioned else facts[0], indent=2, default=_json_default) + "\n",
            encoding="utf-8",
        )
        result.files.append(name)
        _put_in_place(tmp, out)
    except OSError as exc:  # a full or read-only file system while writing the tables
        shutil.rmtree(tmp, ignore_errors=True)
        raise _output_error(out, exc) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    result.seconds = time.perf_counter() - t0
    return result


def _put_in_place(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` to ``out``; an earlier ``out`` (replaced with ``overwrite``)
    is moved aside first and removed only once the new one is in place."""
    old: Path | None = None
    if out.exists():
        try:
            out.rmdir()  # empty
        except OSError:
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
    try:
        os.replace(tmp, out)
    except BaseException:
        if old is not None:
            os.replace(old / out.name, out)
            old.rmdir()
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _output_error(out: Path, exc: OSError) -> Exception:
    from metaprov.errors import OutputError

    return OutputError(
        f"cannot write the records to {out}: {exc.strerror or exc}; nothing was left there",
        hint="free some space, or choose a place you may write to with -o",
    )


def _write_run(
    records: RunRecords, where: Path, format: str, partitioned: bool, files: list[str]
) -> dict[str, Any]:
    rows: dict[str, int] = {}
    for name, df in record_tables(records).items():
        if partitioned:
            rel = Path(name) / f"run_id={records.run_id}" / f"part-0.{format}"
        else:
            rel = Path(f"{name}.{format}")
        target = where / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if format == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(df, schema=arrow_schema(name), preserve_index=False)
            pq.write_table(table, target)
        else:
            csv_text(text_columns(df), target)
        files.append(rel.as_posix())
        rows[name] = int(len(df))
    return {"run_id": records.run_id, "path": records.path, "tables": rows}


def _json_default(value: Any) -> Any:
    if isinstance(value, pd.Timestamp):
        return format_utc(value)
    return str(value)


def _run_facts(records: RunRecords) -> dict[str, Any]:
    """What a run's tables do not hold: job, scheduler, software, missing inputs, accounting."""
    return {
        "run_id": records.run_id,
        "path": records.path,
        "job": records.job,
        "scheduler": records.scheduler,
        "software": records.software,
        "missing_inputs": list(records.missing),
        "accounting": records.accounting.to_dict(),
    }


__all__ = ["RECORD_FORMATS", "RecordsResult", "arrow_schema", "record_tables", "write_records"]
