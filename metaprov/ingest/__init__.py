"""Ingest stage: a run directory -> :class:`~metaprov.records.RunRecords`.

Input: a run directory (Mofka-Dask CSVs, Darshan logs, job files; every file optional).
Output: RunRecords with every table filled from what is there, ``missing`` naming what is not,
and the row accounting of every file.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from metaprov.errors import InputError
from metaprov.ingest.activity import read_activity
from metaprov.ingest.batch import read_batch_jobs
from metaprov.ingest.dask_csv import CSV_FILES, KeySelection, read_dask_csvs, run_id
from metaprov.ingest.environment import read_environment
from metaprov.ingest.executions import apply_worker_executions
from metaprov.ingest.facts import read_task_facts
from metaprov.ingest.job import read_job
from metaprov.ingest.losses import read_worker_losses
from metaprov.records import RunRecords

log = logging.getLogger("metaprov")

__all__ = [
    "read_run",
    "CSV_FILES",
    "KeySelection",
    "check_run_directory",
    "is_run_directory",
    "run_directories",
]


def darshan_files(run: Path) -> list[Path]:
    """The Darshan logs of a run directory (complete and partial), sorted by name."""
    return sorted(
        p
        for p in run.iterdir()
        if p.is_file() and (p.name.endswith(".darshan") or p.name.endswith(".darshan_partial"))
    )


def is_run_directory(path: str | Path) -> bool:
    """Whether ``path`` is a directory holding at least one of the run files (:data:`CSV_FILES`)."""
    p = Path(path)
    return p.is_dir() and any((p / n).is_file() for n in CSV_FILES)


def run_directories(path: str | Path, *, depth: int = 2) -> list[Path]:
    """The run directories ``path`` stands for: itself when it is one, else the run directories
    found below it (up to ``depth`` levels: a campaign folder, or a folder of applications
    holding campaign folders), sorted by path. Empty when there is none."""
    p = Path(path)
    if is_run_directory(p):
        return [p]
    if depth <= 0 or not p.is_dir():
        return []
    try:
        children = sorted(c for c in p.iterdir() if c.is_dir() and not c.name.startswith("."))
    except OSError:  # unreadable: no runs to be found there
        return []
    found: list[Path] = []
    for child in children:
        found.extend(run_directories(child, depth=depth - 1))
    return found


def check_run_directory(path: str | Path) -> Path:
    """``path`` as a run directory, or an :class:`InputError` saying why it is not one; for a
    folder of runs, the error names the run directories inside it.

    Raises:
        InputError: no such directory, a file, or none of the run files.
    """
    run = Path(path)
    try:
        os.fspath(run.absolute()).encode("utf-8")
    except UnicodeEncodeError as exc:
        shown = os.fspath(run).encode("utf-8", "backslashreplace").decode("ascii", "replace")
        raise InputError(
            "the run directory's path is not UTF-8 text (its name holds bytes of another "
            "encoding): its IRIs, records and reports could not name it",
            path=shown,
            hint="rename the directory (or a parent) with a UTF-8 name, e.g. with convmv",
        ) from exc
    if not run.exists():
        raise InputError(
            "no such directory",
            path=run,
            hint="give the path of a run directory holding the Mofka-Dask CSV files",
        )
    if not run.is_dir():
        raise InputError(
            "is a file, not a run directory",
            path=run,
            hint="give the directory that holds the CSV files, not a file in it",
        )
    if is_run_directory(run):
        return run
    inside = run_directories(run)
    if inside:
        shown = ", ".join(str(d.relative_to(run)) for d in inside[:5])
        more = f" and {len(inside) - 5} more" if len(inside) > 5 else ""
        levels = max(len(d.relative_to(run).parts) for d in inside)
        raise InputError(
            f"is a folder of {len(inside)} run directories, not a run directory "
            f"(it holds {shown}{more})",
            path=run,
            hint=f"give the run directories themselves, e.g. {Path(run, *['*'] * levels)} "
            "(the shell expands it to all of them)",
        )
    raise InputError(
        f"holds none of the run files ({', '.join(CSV_FILES)})",
        path=run,
        hint="is this a run directory? a capture writes them with metaprov.capture",
    )


def read_run(
    path: str | Path,
    *,
    darshan: bool = True,
    progress: bool = False,
    keys: KeySelection | None = None,
) -> RunRecords:
    """Read a run directory completely.

    Args:
        path: the run directory.
        darshan: also read the Darshan logs (``*.darshan``, ``*.darshan_partial``) if present.
        progress: show a progress bar on stderr.
        keys: read only one partition of the run's keys (see
            :class:`~metaprov.ingest.dask_csv.KeySelection`); ``records.run_id`` is then the
            partition's, not the run's.

    Returns:
        The run's records. ``records.missing`` lists the absent inputs and
        ``records.accounting`` says, per file, how many rows were read and used.

    Raises:
        InputError: the path does not exist, is not a directory, or holds none of the CSV files.

    Example:
        >>> records = read_run("runs/D2024-04-19_19:01:00_R1_W8")  # doctest: +SKIP
        >>> records.tasks[["key", "worker", "thread", "start", "end"]].head()  # doctest: +SKIP
    """
    run = check_run_directory(path)
    records = RunRecords(path=str(run))
    logs = darshan_files(run) if darshan else []
    from tqdm.auto import tqdm

    with tqdm(
        total=len(CSV_FILES) + 1 + (1 if logs else 0),
        desc=f"reading {run.name}",
        unit="file",
        disable=not progress,
        leave=False,
    ) as bar:
        read_dask_csvs(run, records, progress=bar, keys=keys)
        apply_worker_executions(run, records, keys.selection() if keys is not None else None)
        read_worker_losses(run, records)
        read_task_facts(run, records)
        if keys is None or not keys.transitions:
            # a partition of the keys maps no activity share (run-level nodes): the run-level
            # part (transitions=False) reads and accounts for these files, once
            read_activity(run, records)
        read_job(run, records)
        bar.update(1)
        if logs:
            from metaprov.ingest.darshan import read_darshan_logs

            records.darshan = read_darshan_logs(logs, records.accounting)
            bar.update(1)
        elif darshan:
            records.missing.append("*.darshan")
        process_jobs = read_environment(run, records)
        read_batch_jobs(run, records, process_jobs)
    records.run_id = run_id(records)
    return records
