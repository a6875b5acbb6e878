"""Run a user's Python script with the capture switched on for every Dask cluster it starts.

Input: a script path and its arguments.
Output: the run directory written by :mod:`metaprov.capture`, and a :class:`ScriptRun` saying how
the script ended and what was written.

The script runs unchanged in a child process whose environment preloads ``metaprov.capture``
into every Dask scheduler and worker it starts (``distributed.scheduler.preload`` /
``distributed.worker.preload``), so ``LocalCluster()`` or ``Client()`` in the script are recorded.
A script that only connects to an already-running scheduler is not recorded (that scheduler was
started without the preload).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaprov.capture._files import (
    ENV_ANONYMOUS,
    ENV_DIRECTORY,
    NFRAMES,
    RUN_JSON,
    existing_outputs,
    remove_outputs,
)
from metaprov.errors import InputError, UsageError

PRELOAD = "metaprov.capture"


@dataclass
class ScriptRun:
    """How a captured script ended.

    Attributes:
        returncode: the script's exit code.
        directory: the run directory.
        directories: every run directory written (one per Dask scheduler the script started).
        summaries: the ``metaprov-run.json`` of each.
    """

    returncode: int
    directory: Path
    directories: list[Path] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)


def _with_preload(key: str) -> str:
    import dask

    current = dask.config.get(key, default=None) or []
    if isinstance(current, str):
        current = [current]
    merged = [*current, PRELOAD] if PRELOAD not in current else list(current)
    return repr(merged)  # dask parses DASK_* values as Python literals


def capture_env(
    directory: Path, base: dict[str, str] | None = None, *, anonymous: bool = False
) -> dict[str, str]:
    """The environment that makes every Dask scheduler/worker of a child process capture."""
    env = dict(os.environ if base is None else base)
    env[ENV_DIRECTORY] = str(directory)
    if anonymous:
        env[ENV_ANONYMOUS] = "1"
    env["DASK_DISTRIBUTED__SCHEDULER__PRELOAD"] = _with_preload("distributed.scheduler.preload")
    env["DASK_DISTRIBUTED__WORKER__PRELOAD"] = _with_preload("distributed.worker.preload")
    # The script's clients send the call site of each graph (unless the user chose a number).
    import dask

    if (dask.config.get(NFRAMES, default=0) or 0) < 1:
        env.setdefault("DASK_DISTRIBUTED__DIAGNOSTICS__COMPUTATIONS__NFRAMES", "1")
    # metaprov must be importable in the child (and in the worker processes it spawns).
    root = str(Path(__file__).resolve().parents[2])
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    return env


def run_script(
    script: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    args: Sequence[str] = (),
    overwrite: bool = False,
    python: str | None = None,
    anonymous: bool = False,
) -> ScriptRun:
    """Run ``python script args...`` with the capture preloaded into its Dask clusters.

    Args:
        script: the Python script.
        directory: the run directory; a script that starts several clusters one after the other
            gets ``directory``, ``directory-2``, ...
        args: arguments for the script.
        overwrite: replace an earlier capture in ``directory``.
        python: interpreter (default: this one).
        anonymous: leave host and user names out of the environment records.

    Returns:
        A :class:`ScriptRun`.

    Raises:
        InputError: the script does not exist.
        UsageError: ``directory`` already holds a capture and ``overwrite`` is false.
    """
    path = Path(script)
    if not path.is_file():
        raise InputError("no such script", path=path, hint="give the path of a Python script")
    run_dir = Path(directory).expanduser().absolute()
    if run_dir.exists():
        present = existing_outputs(run_dir)
        if present and not overwrite:
            raise UsageError(
                f"{run_dir} already holds a capture ({', '.join(present[:4])})",
                hint="choose a new directory or pass --overwrite",
            )
        remove_outputs(run_dir, present)
    t0 = time.time()
    proc = subprocess.run(  # noqa: S603 - the user's own script, by design
        [python or sys.executable, str(path), *args],
        env=capture_env(run_dir, anonymous=anonymous),
        check=False,
    )
    from metaprov.capture.merge import merge_run

    candidates = [run_dir, *sorted(run_dir.parent.glob(f"{run_dir.name}-[0-9]*"), key=_suffix)]
    written = []
    summaries = []
    for d in candidates:
        try:
            meta = json.loads((d / RUN_JSON).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if float(meta.get("started_epoch") or 0.0) < t0:
            continue  # an earlier capture, not this script's
        written.append(d)
        if meta.get("status") != "complete" or meta.get("incomplete_workers"):
            merge_run(d)  # the scheduler was killed, or a worker outlived it
            meta = json.loads((d / RUN_JSON).read_text(encoding="utf-8"))
        summaries.append(meta)
    return ScriptRun(proc.returncode, run_dir, written, summaries)


def _suffix(path: Path) -> int:
    tail = path.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0
