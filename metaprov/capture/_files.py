"""File layout and buffered CSV writing shared by the capture plugins.

Input: rows (tuples of plain Python values) produced by the scheduler and worker plugins.
Output: CSV files in the Mofka-Dask schema (``pandas.DataFrame.to_csv`` layout: an unnamed index
column first, ``QUOTE_MINIMAL``, ``\\n`` line ends, ``None`` as an empty cell, floats as their
shortest ``repr``; a cell holding a carriage return quoted too, which pandas leaves bare), plus
the names of every file a capture directory holds.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from metaprov.records import csv_cell, csv_quote

log = logging.getLogger("metaprov.capture")

#: Name under which both plugins are registered (scheduler and worker plugin namespaces differ).
PLUGIN_NAME = "metaprov-capture"
#: Scheduler metadata key where the scheduler plugin publishes the capture directory.
METADATA_KEY = "metaprov-capture"
#: Environment variable naming the capture directory (used by ``--preload`` and by default).
ENV_DIRECTORY = "METAPROV_CAPTURE_DIR"
#: Environment variable: leave host and user names out of the environment records ("1").
ENV_ANONYMOUS = "METAPROV_CAPTURE_ANONYMOUS"
#: Dask config key naming the capture directory (``DASK_METAPROV__CAPTURE__DIRECTORY``).
CONFIG_DIRECTORY = "metaprov.capture.directory"
#: Dask config key: how many code frames a client sends with each graph (0 by default). The
#: capture's call sites need 1: the innermost user frame of compute/persist/submit.
NFRAMES = "distributed.diagnostics.computations.nframes"
#: Sub-directory where every worker process writes its own part files until they are merged.
PARTS_DIR = "metaprov-parts"
#: Sub-directory holding one environment record per process (metaprov.capture.environment).
ENV_DIR = "environment"
#: Version of the capture directory layout written to ``metaprov-run.json``.
LAYOUT = "metaprov-capture/1"

# The Mofka-Dask schemas, column for column (see docs/capture.md and design/inputs.md).
SCHEDULER_TRANSITION = (
    "key",
    "thread",
    "worker",
    "prefix",
    "group",
    "start",
    "finish",
    "stimulus_id",
    "called_from",
    "begins",
    "ends",
    "duration",
    "size",
    "time",
)
WORKER_TRANSITION = ("key", "start", "finish", "called_from", "time")
WORKER_TRANSFER = (
    "start",
    "stop",
    "middle",
    "duration",
    "keys",
    "total",
    "bandwidth",
    "who",
    "type",
    "called_from",
    "time",
    "compressed",
)
GRAPH = ("client", "keys", "dependencies", "time")
WORKER = ("worker", "action", "stimulus_id", "time")
CLIENT = ("client", "action", "time")

# Extra files (not in the Mofka schema) that close its gaps.
#: One row per execution attempt seen by a worker: exact compute window on the worker's clock.
WORKER_EXECUTION = ("key", "worker", "thread", "start", "stop", "outcome", "run_id", "time")
#: One row per worker: process id, host name, threads, memory, versions, config hash.
WORKERS_INFO = (
    "address",
    "name",
    "pid",
    "hostname",
    "nthreads",
    "memory_limit",
    "local_directory",
    "nanny",
    "python",
    "dask",
    "distributed",
    "config_sha256",
    "time",
)

# Task facts (extra files, see metaprov.capture.facts): what each task was.
#: One row per execution attempt that ended in memory or error: result type and size, exception.
WORKER_RESULT = (
    "key",
    "worker",
    "start",
    "outcome",
    "type",
    "nbytes",
    "exception_type",
    "exception_message",
    "traceback",
    "time",
)
#: Per submitted graph and task group: the function its tasks run (one row per key where the
#: tasks of a group run different functions).
TASK_FUNCTION = (
    "graph",
    "client",
    "group",
    "prefix",
    "key",
    "module",
    "qualname",
    "kind",
    "n_ops",
    "n_tasks",
    "time",
)
#: Per submitted graph: where the client called compute/persist/submit.
GRAPH_SUBMISSION = (
    "graph",
    "client",
    "file",
    "line",
    "cell",
    "sha256",
    "cell_source",
    "frames",
    "time",
)
#: Opt-in: literal arguments of every task (value only when small enough).
TASK_ARGUMENT = ("key", "position", "type", "size", "value", "status", "time")
#: One row per worker the scheduler removed: why (its stimulus), whether Dask expected it, and
#: the tasks it took along (Dask's own ``remove-worker`` event): running, results held only
#: there (computed again elsewhere), scattered data lost; the keys as JSON lists.
WORKER_LOSS = (
    "worker",
    "stimulus_id",
    "expected",
    "processing",
    "recomputed",
    "lost_data",
    "time",
)
#: Opt-in: inner operations of fused tasks, per task group.
TASK_FUSED_OP = ("group", "position", "name", "module", "qualname", "kind", "inputs", "time")

# Where the workers' time went (extra files, see docs/capture.md).
#: Dask's fine performance metrics as each worker digests them: one row per execution, context
#: and activity (``key`` set) for the ``execute`` context; summed per flush interval
#: (``key`` empty, ``start``..``stop``) for every other context (``gather-dep``, ``get-data``,
#: ``memory-monitor``, ...). ``span`` is Dask's span id, ``unit`` seconds, bytes or count.
WORKER_METRIC = (
    "worker",
    "key",
    "span",
    "context",
    "prefix",
    "activity",
    "unit",
    "value",
    "start",
    "stop",
    "time",
)
#: Each worker's memory as the scheduler sees it (heartbeats, task results), one row per worker
#: whenever a figure or the status changed since its previous row.
WORKER_MEMORY = (
    "worker",
    "process",
    "managed",
    "unmanaged",
    "unmanaged_old",
    "spilled",
    "memory_limit",
    "status",
    "time",
)
#: The spans (``dask.distributed.span``) the scheduler knows: id, name (JSON list of tags),
#: parent span id.
SPAN = ("span", "name", "parent", "time")

#: Mofka-schema files and their columns.
MOFKA_FILES: dict[str, tuple[str, ...]] = {
    "scheduler_transition.csv": SCHEDULER_TRANSITION,
    "worker_transition.csv": WORKER_TRANSITION,
    "worker_transfer.csv": WORKER_TRANSFER,
    "graph.csv": GRAPH,
    "worker.csv": WORKER,
    "client.csv": CLIENT,
}
#: Extra CSV files and their columns.
EXTRA_FILES: dict[str, tuple[str, ...]] = {
    "worker_execution.csv": WORKER_EXECUTION,
    "workers_info.csv": WORKERS_INFO,
    "worker_result.csv": WORKER_RESULT,
    "task_function.csv": TASK_FUNCTION,
    "graph_submission.csv": GRAPH_SUBMISSION,
    "task_argument.csv": TASK_ARGUMENT,
    "task_fused_op.csv": TASK_FUSED_OP,
    "worker_loss.csv": WORKER_LOSS,
    "worker_metric.csv": WORKER_METRIC,
    "worker_memory.csv": WORKER_MEMORY,
    "span.csv": SPAN,
}
#: Tables each worker process writes as parts (``<table>.<part-id>.csv``), merged at the end.
WORKER_TABLES: dict[str, tuple[str, ...]] = {
    "worker_transition": WORKER_TRANSITION,
    "worker_transfer": WORKER_TRANSFER,
    "worker_execution": WORKER_EXECUTION,
    "worker_result": WORKER_RESULT,
    "worker_metric": WORKER_METRIC,
}
#: Worker tables a worker writes only when asked to (no note when no part exists).
OPTIONAL_WORKER_TABLES = frozenset({"worker_result", "worker_metric"})
RUN_JSON = "metaprov-run.json"
CONFIG_JSON = "dask-config.json"
#: Every name a capture writes at the top of its directory.
#: The batch system's answers about the run's jobs (metaprov.capture.batch).
BATCH_JSON = "batch-jobs.json"
OUTPUT_NAMES = (*MOFKA_FILES, *EXTRA_FILES, RUN_JSON, CONFIG_JSON, BATCH_JSON)


#: ``fast(index_or_None, row) -> line | None``: a row formatted exactly as the csv module would.
FastFormat = Callable[[int | None, tuple[Any, ...]], str | None]
#: ``batch(rows, start_or_None) -> text | None``: a whole batch formatted exactly as the csv
#: module would (``start``: the first row's index, None without an index column), or None when
#: a row is not of the usual types (the batch then goes row by row).
BatchFormat = Callable[[list[tuple[Any, ...]], int | None], str | None]


#: One CSV cell as pandas writes it, a carriage return quoted too (the one rule of every CSV
#: metaprov writes: :func:`metaprov.records.csv_quote`).
quote = csv_quote


def csv_line(row: Sequence[Any]) -> str:
    """A row as the csv module writes it (``QUOTE_MINIMAL``, ``\\n``: None empty, a float its
    ``repr``, anything else its ``str``), a cell holding a carriage return quoted too."""
    return ",".join(csv_cell(v) for v in row) + "\n"


def plain(text: str) -> bool:
    """True when a cell never needs quoting (addresses, state names)."""
    return quote(text) == text


#: A task key's CSV cell by the key object's identity: a key recurs over its task's rows (five
#: to nine transitions, its execution, its metrics), so its text and quoting are made once. Each
#: entry holds its key (an id is not reused while the entry lives, and a key is never mistaken
#: for another that merely compares equal, as 1 and 1.0 do). An entry lives until its task's
#: ``forgotten`` row is formatted (the task's last row in that process), so the cache holds the
#: tasks the process still knows; emptied at ``_KEY_CAP`` entries (a graph larger than that).
_KEY_CELLS: dict[int, tuple[Any, str]] = {}
_KEY_CAP = 1 << 16


def key_cell(key: Any) -> str | None:
    """The CSV cell of a task key Dask gave as text or as a tuple (of text and numbers); None
    for anything else, or a key without text (the row then goes to the csv module)."""
    hit = _KEY_CELLS.get(id(key))
    if hit is not None and hit[0] is key:
        return hit[1]
    cls = key.__class__
    if cls is str:
        cell = quote(key)
    elif cls is tuple:
        try:
            cell = quote(str(key))
        except Exception:
            return None
    else:
        return None
    if len(_KEY_CELLS) >= _KEY_CAP:
        _KEY_CELLS.clear()
    _KEY_CELLS[id(key)] = (key, cell)
    return cell


def row_key(key: Any, finish: str) -> str | None:
    """:func:`key_cell` for a transition row; a ``forgotten`` row (its task's last in this
    process) drops the key's cached text after use."""
    cell = key_cell(key)
    if cell is not None and finish == "forgotten":
        # key_cell left this very object's entry (alive here, its id its own); another
        # thread's flush may have emptied the cache since
        _KEY_CELLS.pop(id(key), None)
    return cell


#: A task key's raw text (``str(key)``) by the key object's identity, for the workers' part
#: files (their cells are quoted once, at the merge): same lifetime rules as ``_KEY_CELLS``.
_KEY_TEXTS: dict[int, tuple[Any, str]] = {}


def key_text(key: Any) -> str | None:
    """``str(key)`` of a task key (text keys as they are, others made once per task and cached
    by identity); None for a key without text (its row is then left out, logged)."""
    if key.__class__ is str:
        return key  # type: ignore[no-any-return]
    hit = _KEY_TEXTS.get(id(key))
    if hit is not None and hit[0] is key:
        return hit[1]
    try:
        text = str(key)
    except Exception:
        return None
    if len(_KEY_TEXTS) >= _KEY_CAP:
        _KEY_TEXTS.clear()
    _KEY_TEXTS[id(key)] = (key, text)
    return text


def worker_transitions(rows: list[tuple[Any, ...]], start: int | None) -> str | None:
    """``key,start,finish,called_from,time`` rows, a whole batch (no call per row: the most
    numerous rows of a capture)."""
    out: list[str] = []
    add = out.append
    i = start
    for key, begin, finish, addr, t in rows:
        if t.__class__ is not float:
            return None
        cell = row_key(key, finish)
        if cell is None:
            return None
        if i is None:
            add(f"{cell},{begin},{finish},{addr},{t!r}\n")
        else:
            add(f"{i},{cell},{begin},{finish},{addr},{t!r}\n")
            i += 1
    return "".join(out)


def compute_entry(startstops: Any) -> dict[str, Any] | None:
    """The last ``compute`` entry of a task's ``startstops`` (Dask appends it last, after the
    transfers of its dependencies), or None."""
    if startstops:
        last = startstops[-1]
        if last.get("action") == "compute":
            return last  # type: ignore[no-any-return]
        for entry in reversed(startstops):
            if entry.get("action") == "compute":
                return entry  # type: ignore[no-any-return]
    return None


#: Cells that recur over many rows (task prefixes and groups, stimulus ids) and their quoted
#: form; emptied when it holds 4,096 (a long-lived scheduler sees ever new stimulus ids).
_QUOTED: dict[str, str] = {}


def _quoted(text: str) -> str:
    if len(_QUOTED) >= 4096:
        _QUOTED.clear()
    q = _QUOTED[text] = quote(text)
    return q


def scheduler_row(row: tuple[Any, ...], address: str) -> tuple[Any, ...]:
    """A scheduler row in column order. The hook buffers a state-only transition (four in five)
    as seven cells, ``(key, prefix, group, start, finish, stimulus id, time)``, not fourteen of
    which eight are always empty; rows with execution details come whole."""
    if len(row) != 7:
        return row
    key, prefix, group, start, finish, stim, t = row
    return (key, None, None, prefix, group, start, finish, stim, address, None, None, None, None, t)


def scheduler_transitions(
    rows: list[tuple[Any, ...]], start: int | None, address: str | None = None
) -> str | None:
    """Scheduler rows, a whole batch: state-only rows (whole, or as the hook buffers them: see
    :func:`scheduler_row`; ``address`` is their ``called_from``), and rows with execution
    details of the usual types (no call per row: the scheduler's most numerous rows)."""
    out: list[str] = []
    add = out.append
    quoted = _QUOTED
    i = start
    for row in rows:
        if len(row) == 7:
            key, prefix, group, begin, finish, stim, t = row
            if address is None:
                return None
            addr = address
            thread = worker = b = e = d = size = None
        else:
            key, thread, worker, prefix, group, begin, finish, stim, addr, b, e, d, size, t = row
        if not (
            prefix.__class__ is str
            and group.__class__ is str
            and stim.__class__ is str
            and t.__class__ is float
        ):
            return None
        cell = row_key(key, finish)
        if cell is None:
            return None
        # a prefix, group and stimulus recur over many rows: quoted once each
        q_prefix = quoted.get(prefix)
        if q_prefix is None:
            q_prefix = _quoted(prefix)
        q_group = quoted.get(group)
        if q_group is None:
            q_group = _quoted(group)
        q_stim = quoted.get(stim)
        if q_stim is None:
            q_stim = _quoted(stim)
        if i is None:
            lead = ""
        else:
            lead = f"{i},"
            i += 1
        if thread is None and worker is None and b is None and size is None:
            add(f"{lead}{cell},,,{q_prefix},{q_group},{begin},{finish},{q_stim},{addr},,,,,{t!r}\n")
        elif (
            (thread is None or thread.__class__ is int)
            and worker.__class__ is str
            and (size is None or size.__class__ is int)
            and (
                b is None
                or (b.__class__ is float and e.__class__ is float and d.__class__ is float)
            )
        ):
            q_worker = quoted.get(worker)
            if q_worker is None:
                q_worker = _quoted(worker)
            add(
                f"{lead}{cell},{'' if thread is None else thread},{q_worker},{q_prefix},"
                f"{q_group},{begin},{finish},{q_stim},{addr},"
                f"{'' if b is None else repr(b)},{'' if e is None else repr(e)},"
                f"{'' if d is None else repr(d)},{'' if size is None else size},{t!r}\n"
            )
        else:
            return None
    return "".join(out)


def _row_by_row(batch: BatchFormat) -> FastFormat:
    """A batch formatter applied to one row (the batch declined: its rows one at a time)."""

    def fast(i: int | None, r: tuple[Any, ...]) -> str | None:
        return batch([r], i)

    return fast


class _Sink:
    """What both kinds of sink share: an append-only file, rows buffered in memory and written
    in batches (every ``flush_rows`` rows, on :meth:`flush` and on :meth:`close`), so a hook
    costs one ``list.append``. Subclasses write in :meth:`flush`."""

    def __init__(self, path: Path, columns: Sequence[str], flush_rows: int, mode: str) -> None:
        self.path = Path(path)
        self.columns = tuple(columns)
        self._flush_rows = max(1, int(flush_rows))
        self._rows: list[tuple[Any, ...]] = []
        self._written = 0
        self._lock = threading.Lock()
        if mode == "w":
            self._fh: Any = open(self.path, "w", newline="", encoding="utf-8")  # noqa: SIM115
        else:
            self._fh = open(self.path, "wb")  # noqa: SIM115 - long-lived

    @property
    def rows(self) -> int:
        """Rows appended so far (written or still buffered)."""
        return self._written + len(self._rows)

    def append(self, row: tuple[Any, ...]) -> None:
        """Buffer one row (values in column order); writes a batch when the buffer is full."""
        self._rows.append(row)
        if len(self._rows) >= self._flush_rows:
            self.flush()

    def flush(self) -> None:  # pragma: no cover - every sink writes its own way
        raise NotImplementedError

    def close(self) -> None:
        """Flush and close the file (idempotent)."""
        self.flush()
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


class CsvSink(_Sink):
    """Buffered, append-only CSV file with a fixed header.

    Rows are kept in memory and written in batches (every ``flush_rows`` rows, on :meth:`flush`
    and on :meth:`close`), so a plugin hook costs one ``list.append``. With ``index=True`` the
    file has the unnamed running index column that ``pandas.DataFrame.to_csv`` writes.
    """

    def __init__(
        self,
        path: Path,
        columns: Sequence[str],
        *,
        index: bool,
        flush_rows: int = 10_000,
        fast: FastFormat | None = None,
        batch: BatchFormat | None = None,
    ) -> None:
        super().__init__(path, columns, flush_rows, "w")
        self.index = index
        self._batch = batch
        if fast is None and batch is not None:
            fast = _row_by_row(batch)
        self._fast = fast
        self._writer = csv.writer(self._fh, lineterminator="\n")
        self._writer.writerow(("", *self.columns) if index else self.columns)
        self._fh.flush()

    def flush(self) -> None:
        """Write the buffered rows and flush the file to the OS."""
        with self._lock:
            # Swap first: a row appended while we write lands in the new buffer, not lost.
            rows, self._rows = self._rows, []
            if self._fh.closed:
                return
            if rows:
                text, written = self._format(rows, self._written)
                self._fh.write(text)
                self._written += written
            self._fh.flush()

    def _format(self, rows: list[tuple[Any, ...]], start: int) -> tuple[str, int]:
        """The rows' CSV text and how many were written. The common rows go through a
        specialised f-string (half the cost of the csv module); any row it declines (returns
        None) goes through the csv module, in order. Hooks buffer a task's key as Dask gave it
        (its text is made here, in the batch): a row with a cell that has no text is the only
        one left out (logged), never the batch."""
        index = self.index
        if self._batch is not None:
            text = self._batch(rows, start if index else None)
            if text is not None:
                return text, len(rows)
        rows = self._whole(rows)
        buf = io.StringIO()
        one = io.StringIO()
        slow = csv.writer(one, lineterminator="\n")
        fast = self._fast
        i = start
        for r in rows:
            line = None if fast is None else fast(i if index else None, r)
            if line is None:
                row = (i, *r) if index else r
                one.seek(0)
                one.truncate()
                try:
                    slow.writerow(row)
                    line = one.getvalue()
                    if "\r" in line:  # the csv module leaves a carriage return bare
                        line = csv_line(row)
                except Exception:  # the csv module writes a line whole or not at all
                    log.warning("metaprov capture: a row of %s not recorded", self.path.name)
                    continue
            buf.write(line)
            i += 1
        return buf.getvalue(), i - start

    def _whole(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The buffered rows in column order, for the row-by-row path (as buffered here)."""
        return rows


_NONE = type(None)


class SchedulerTransitionSink(CsvSink):
    """``scheduler_transition.csv``: a :class:`CsvSink` that takes the rows as the scheduler's
    hook buffers them (state-only transitions as seven cells, :func:`scheduler_row`) and writes
    them whole: through :func:`scheduler_transitions` in one batch when the scheduler's address
    never needs quoting, else (and for a batch it declines) row by row, as the other files."""

    def __init__(self, path: Path, address: str, *, flush_rows: int = 10_000) -> None:
        batch: BatchFormat | None = None
        if plain(address):

            def batch(rows: list[tuple[Any, ...]], start: int | None) -> str | None:
                return scheduler_transitions(rows, start, address)

        super().__init__(path, SCHEDULER_TRANSITION, index=True, flush_rows=flush_rows, batch=batch)
        self.address = address

    def _whole(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        address = self.address
        return [scheduler_row(r, address) for r in rows]


def text_cell(value: Any) -> str:
    """A value's text as the csv module writes it, unquoted (floats as their ``repr``)."""
    return repr(float(value)) if isinstance(value, float) else str(value)


def arrow_column(values: Sequence[Any], bad: set[int]) -> list[tuple[str, Any]]:
    """One column of a flush as Arrow arrays, each with the suffix of its name: ``float64``
    when it holds Python floats (and None), ``int64`` for Python ints, both (the ints under
    ``#int``) for floats and ints, text for text, and the text the csv module would write for
    anything else. A value without text is null and its row index goes to ``bad``."""
    import pyarrow as pa

    from metaprov.ingest.parts import INT_SUFFIX

    kinds = set(map(type, values))
    kinds.discard(_NONE)
    try:
        if len(kinds) == 1:
            kind = kinds.pop()
            if kind is float:
                return [("", pa.array(values, pa.float64()))]
            if kind is str:
                return [("", pa.array(values, pa.string()))]
            if kind is int:
                return [("", pa.array(values, pa.int64()))]
        elif not kinds:
            return [("", pa.nulls(len(values), pa.string()))]
        elif kinds == {float, int}:
            import pyarrow.compute as pc

            # one pass in Python (which are ints), the rest in Arrow: every number as a double
            # (exact for the ints below 2**53, checked), the ints taken back as int64
            is_int = pa.array([v.__class__ is int for v in values], pa.bool_())
            numbers = pa.array(values, pa.float64())
            ints = pc.if_else(is_int, numbers, None)
            if pc.max(pc.abs(ints)).as_py() < 2.0**53:
                return [
                    ("", pc.if_else(is_int, None, numbers)),
                    (INT_SUFFIX, pc.cast(ints, pa.int64())),
                ]
    except (OverflowError, pa.ArrowException):
        pass  # an int beyond 64 bits: as text
    texts: list[str | None] = []
    add = texts.append
    for i, v in enumerate(values):
        if v is None:
            add(None)
            continue
        try:
            add(text_cell(v))
        except Exception:
            add(None)
            bad.add(i)
    return [("", pa.array(texts, pa.string()))]


def arrow_chunk(arrays: list[Any], names: Sequence[str], bad: set[int]) -> list[Any]:
    """One flush's columns as a chunk of a part file (Arrow IPC stream: schema, record batch,
    end marker), as buffers to write in order; the rows in ``bad`` left out."""
    import pyarrow as pa

    from metaprov.ingest.parts import EOS

    batch = pa.RecordBatch.from_arrays(arrays, names=list(names))
    if bad:
        keep = [i not in bad for i in range(batch.num_rows)]
        batch = batch.filter(pa.array(keep, pa.bool_()))
    return [batch.schema.serialize(), batch.serialize(), EOS]


class PartSink(_Sink):
    """A worker's part file of one table (``<table>.<part id>.arrows``): rows kept as tuples of
    Python values, written at each flush as one chunk of typed columns (numbers stay binary),
    formatted as CSV text once, at the merge (:mod:`metaprov.ingest.parts`).

    Args:
        path: the part file.
        columns: the table's columns.
        flush_rows: rows that trigger a flush.
        key: index of the column holding task keys as Dask gave them (their text is made at the
            flush, once per task, by :func:`key_text`).
        finish: index of the column holding a transition's new state: a ``forgotten`` row drops
            its key's cached text.
    """

    def __init__(
        self,
        path: Path,
        columns: Sequence[str],
        *,
        flush_rows: int = 10_000,
        key: int | None = None,
        finish: int | None = None,
    ) -> None:
        # imported here, at the worker's setup, not in its first flush (pyarrow.compute alone
        # takes 0.07 s of CPU to import)
        import pyarrow  # noqa: F401
        import pyarrow.compute  # noqa: F401

        import metaprov.ingest.parts  # noqa: F401

        super().__init__(path, columns, flush_rows, "wb")
        self._key = key
        self._finish = finish

    def flush(self) -> None:
        """Write the buffered rows as one chunk and flush the file to the OS."""
        with self._lock:
            rows, self._rows = self._rows, []  # a row appended meanwhile: the next chunk's
            if self._fh.closed:
                return
            if rows:
                self._write(self._chunk(rows))
            self._fh.flush()

    def _write(self, buffers: list[Any]) -> None:
        for b in buffers:
            self._fh.write(b)

    def _chunk(self, rows: list[tuple[Any, ...]]) -> list[Any]:
        import pyarrow as pa

        bad: set[int] = set()
        cols = list(zip(*rows, strict=True))
        names: list[str] = []
        arrays = []
        for j, col in enumerate(cols):
            name = self.columns[j]
            if j == self._key:
                texts = self._key_texts(col, None if self._finish is None else cols[self._finish])
                key_array = pa.array(texts, pa.string())
                if key_array.null_count:
                    bad.update(i for i, t in enumerate(texts) if t is None)
                names.append(name)
                arrays.append(key_array)
            else:
                for suffix, array in arrow_column(col, bad):
                    names.append(name + suffix)
                    arrays.append(array)
        if bad:
            log.warning("metaprov capture: %d row(s) of %s not recorded", len(bad), self.path.name)
        self._written += len(rows) - len(bad)
        return arrow_chunk(arrays, names, bad)

    @staticmethod
    def _key_texts(keys: Sequence[Any], finishes: Sequence[Any] | None) -> list[str | None]:
        texts = [k if k.__class__ is str else key_text(k) for k in keys]
        cache = _KEY_TEXTS
        if finishes is not None and cache:  # text keys are never cached
            for k, f in zip(keys, finishes, strict=True):
                if f == "forgotten" and k.__class__ is not str:
                    cache.pop(id(k), None)  # the task's last row in this process
        return texts


class TransitionPart(PartSink):
    """The ``worker_transition`` part file, its rows buffered as columns.

    A worker's most numerous rows (five to nine per task): the hook appends the key (as Dask
    gave it), the two states and the time to four buffers, the time as a raw double
    (``array('d')``): no tuple per row for the garbage collector to count, and nothing at the
    flush walks row objects made seconds earlier (cold in the cache on a busy worker). The
    ``called_from`` cell is the worker's own address on every row. The buffers are emptied in
    place, so the hook may hold their ``append`` methods (:attr:`adders`).
    """

    def __init__(self, path: Path, address: str, *, flush_rows: int = 10_000) -> None:
        super().__init__(path, WORKER_TRANSITION, flush_rows=flush_rows, key=0, finish=2)
        from array import array

        self.address = address
        self._keys: list[Any] = []
        self._starts: list[Any] = []
        self._finishes: list[Any] = []
        self._times = array("d")
        #: the four buffers' ``append``: key, start state, finish state, time (a float)
        self.adders = (
            self._keys.append,
            self._starts.append,
            self._finishes.append,
            self._times.append,
        )

    @property
    def rows(self) -> int:
        """Rows appended so far (written or still buffered)."""
        return self._written + len(self._keys)

    @property
    def full(self) -> bool:
        """Whether ``flush_rows`` rows wait (the hook appends without looking)."""
        return len(self._keys) >= self._flush_rows

    def append(self, row: tuple[Any, ...]) -> None:
        """Buffer one whole row (its ``called_from`` is this worker's address)."""
        key, start, finish, _address, t = row
        add_key, add_start, add_finish, add_time = self.adders
        add_key(key)
        add_start(start)
        add_finish(finish)
        add_time(t)
        if self.full:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one chunk and flush the file to the OS."""
        with self._lock:
            n = min(len(self._keys), len(self._starts), len(self._finishes), len(self._times))
            keys, starts, finishes = self._keys[:n], self._starts[:n], self._finishes[:n]
            times = self._times[:n]
            del self._keys[:n], self._starts[:n], self._finishes[:n], self._times[:n]
            if self._fh.closed:
                return
            if n:
                self._write(self._columns_chunk(keys, starts, finishes, times))
            self._fh.flush()

    def _columns_chunk(
        self, keys: list[Any], starts: list[Any], finishes: list[Any], times: Any
    ) -> list[Any]:
        import numpy as np
        import pyarrow as pa

        bad: set[int] = set()
        texts = self._key_texts(keys, finishes)
        key_array = pa.array(texts, pa.string())
        if key_array.null_count:
            bad.update(i for i, t in enumerate(texts) if t is None)
        names = ["key"]
        arrays = [key_array]
        for name, states in (("start", starts), ("finish", finishes)):
            try:
                columns = [("", pa.array(states, pa.string()))]  # Dask's states: text
            except (pa.ArrowException, TypeError):
                columns = arrow_column(states, bad)
            for suffix, array in columns:
                names.append(name + suffix)
                arrays.append(array)
        names += ["called_from", "time"]
        arrays += [
            pa.repeat(self.address, len(keys)).cast(pa.string()),
            pa.array(np.frombuffer(times, dtype=np.float64)),
        ]
        if bad:
            log.warning("metaprov capture: %d row(s) of %s not recorded", len(bad), self.path.name)
        self._written += len(keys) - len(bad)
        return arrow_chunk(arrays, names, bad)


#: Epoch seconds, the clock the Mofka plugins used (bound directly: it runs once per row).
now = time.time


def utc_stamp(t: float | None = None) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` for epoch seconds (now by default)."""
    return datetime.fromtimestamp(now() if t is None else t, tz=timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(map(str, value))
    if isinstance(value, Path):
        return str(value)
    # Callables, classes and other objects a config may hold: keep a readable trace.
    return repr(value)


def json_text(data: Any) -> str:
    """Deterministic, JSON-safe text for any config-like structure."""
    return json.dumps(data, indent=1, sort_keys=True, default=_json_default, ensure_ascii=False)


def dask_config_snapshot() -> tuple[str, str]:
    """The effective ``dask.config.config`` of this process as JSON text, and its sha256."""
    import dask

    text = json_text(dask.config.config) + "\n"
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON through a temporary file and a rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json_text(data) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def versions() -> dict[str, str]:
    """Python, dask, distributed and metaprov versions of this process."""
    import platform

    import dask
    import distributed

    from metaprov._version import __version__

    return {
        "python": platform.python_version(),
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "metaprov": __version__,
    }


def existing_outputs(directory: Path) -> list[str]:
    """Names of capture outputs already present in ``directory``."""
    names = [n for n in OUTPUT_NAMES if (directory / n).exists()]
    if (directory / PARTS_DIR).exists():
        names.append(PARTS_DIR + "/")
    if (directory / ENV_DIR).exists():
        names.append(ENV_DIR + "/")
    return names


def remove_outputs(directory: Path, names: Iterable[str]) -> None:
    """Delete capture outputs (only files this package writes)."""
    import shutil

    for name in names:
        p = directory / name.rstrip("/")
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def configured_directory() -> str | None:
    """The capture directory named by ``$METAPROV_CAPTURE_DIR`` or the dask config, if any."""
    env = os.environ.get(ENV_DIRECTORY)
    if env:
        return env
    try:
        import dask

        value = dask.config.get(CONFIG_DIRECTORY, default=None)
    except Exception:  # a broken user config must not stop the scheduler
        value = None
    return str(value) if value else None


def default_directory() -> Path:
    """``./metaprov-run-<UTC time>``: a fresh directory per scheduler start."""
    stamp = datetime.now(tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path.cwd() / f"metaprov-run-{stamp}"
