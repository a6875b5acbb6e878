"""Darshan logs -> columnar tables (:class:`DarshanRecords`).

Input: Darshan log files (``*.darshan``, ``*.darshan_partial``), one per traced process, given as
paths or as the run directory holding them.
Output: :class:`DarshanRecords`, four DataFrames with the ``darshan_*`` schemas of
:data:`metaprov.records.SCHEMAS`: ``logs`` (one row per log file), ``names`` (record id -> path),
``counters`` (POSIX / STDIO / MPI-IO counters, long format, zeros omitted) and ``segments``
(DXT_POSIX / DXT_MPIIO trace segments with absolute UTC times and the pthread id where recorded).

Everything is parsed here, byte by byte, with numpy structured dtypes: pydarshan does not read the
DXT records of these logs correctly (it returns only the first record of each log) and does not
know the layouts that carry a thread id. The format is described in ``docs/darshan.md``; the main
facts:

* header (1,328 bytes): version string, magic number (which also gives the byte order),
  compression (0 zlib, 1 bzip2, 2 none), a 64-bit partial-module bit field, the name-map region,
  64 module regions (offset, length) and 64 module versions;
* every region is compressed on its own and may be several concatenated compressed streams;
* DXT file record: a 104-byte header (record id, rank, shared flag, hostname[64], write count,
  read count) followed by the write segments and then the read segments; a segment is 32, 40, 96
  or 104 bytes, detected from the region itself (the module version number does not tell).

Nothing fails silently: an unreadable log, a corrupt region, a truncated file or a segment without
a thread id is reported to the :class:`~metaprov.records.Accounting` and in the ``problems``
column of ``logs``; the rest of the log is still read.
"""

from __future__ import annotations

import bz2
import logging
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from metaprov.errors import InputError
from metaprov.ingest.csvread import first_hole
from metaprov.ingest.smallfiles import read_head
from metaprov.records import STR, Accounting, conform, empty_table
from metaprov.redact import redact_words

log = logging.getLogger("metaprov")

__all__ = [
    "DarshanRecords",
    "read_darshan_logs",
    "find_darshan_logs",
    "classify_role",
    "HEADER_SIZE",
    "MAGIC",
    "MODULE_NAMES",
    "SEGMENT_LAYOUTS",
]

HEADER_SIZE = 1328
MAGIC = 6567223
MAX_MODS = 64
JOB_STRUCT_SIZE = 7 * 8 + 1024  # uid, start sec/nsec, end sec/nsec, nprocs, jobid, metadata[1024]
DXT_HEADER_SIZE = 104
COMPRESSION = {0: "zlib", 1: "bzip2", 2: "none"}

# Module ids of Darshan 3.4 logs (log format "3.41"); only the ones metaprov reads have names
# that matter, the others are listed so warnings can name them.
MODULE_NAMES: dict[int, str] = {
    0: "NULL",
    1: "POSIX",
    2: "MPI-IO",
    3: "H5F",
    4: "H5D",
    5: "PNETCDF_FILE",
    6: "PNETCDF_VAR",
    7: "BG/Q",
    8: "LUSTRE",
    9: "STDIO",
    10: "DXT_POSIX",
    11: "DXT_MPIIO",
    12: "MDHIM",
    13: "APXC",
    14: "APMPI",
    15: "HEATMAP",
    16: "DFS",
    17: "DAOS",
}
DXT_MODULES = {10: "DXT_POSIX", 11: "DXT_MPIIO"}

# Segment layouts by size in bytes. Detected from the data: DXT_POSIX version 1 is 32 bytes in
# stock Darshan but 96 in the fork used for the Dask runs, so the version number cannot decide.
SEGMENT_LAYOUTS: dict[int, str] = {
    32: "offset, length, start, end (stock Darshan, no thread id)",
    40: "offset, length, start, end, pthread_id (upstream Darshan since late 2025)",
    96: "offset, length, start, end, extra_info[64] with 'pthread_id=<n>' (Dask-run fork)",
    104: "offset, length, start, end, pthread_id, extra_info[64] (unmerged upstream variant)",
}

# Counter names of the module versions found in Darshan 3.4 logs (POSIX 4, STDIO 2, MPI-IO 3),
# in record order; the same names pydarshan reports.
_SIZE_BINS = "0_100 100_1K 1K_10K 10K_100K 100K_1M 1M_4M 4M_10M 10M_100M 100M_1G 1G_PLUS".split()
_POSIX_COUNTERS = (
    "OPENS FILENOS DUPS READS WRITES SEEKS STATS MMAPS FSYNCS FDSYNCS RENAME_SOURCES "
    "RENAME_TARGETS RENAMED_FROM MODE BYTES_READ BYTES_WRITTEN MAX_BYTE_READ MAX_BYTE_WRITTEN "
    "CONSEC_READS CONSEC_WRITES SEQ_READS SEQ_WRITES RW_SWITCHES MEM_NOT_ALIGNED MEM_ALIGNMENT "
    "FILE_NOT_ALIGNED FILE_ALIGNMENT MAX_READ_TIME_SIZE MAX_WRITE_TIME_SIZE".split()
    + [f"SIZE_READ_{b}" for b in _SIZE_BINS]
    + [f"SIZE_WRITE_{b}" for b in _SIZE_BINS]
    + [f"STRIDE{i}_STRIDE" for i in range(1, 5)]
    + [f"STRIDE{i}_COUNT" for i in range(1, 5)]
    + [f"ACCESS{i}_ACCESS" for i in range(1, 5)]
    + [f"ACCESS{i}_COUNT" for i in range(1, 5)]
    + "FASTEST_RANK FASTEST_RANK_BYTES SLOWEST_RANK SLOWEST_RANK_BYTES".split()
)
_POSIX_FCOUNTERS = (
    "OPEN_START_TIMESTAMP READ_START_TIMESTAMP WRITE_START_TIMESTAMP CLOSE_START_TIMESTAMP "
    "OPEN_END_TIMESTAMP READ_END_TIMESTAMP WRITE_END_TIMESTAMP CLOSE_END_TIMESTAMP READ_TIME "
    "WRITE_TIME META_TIME MAX_READ_TIME MAX_WRITE_TIME FASTEST_RANK_TIME SLOWEST_RANK_TIME "
    "VARIANCE_RANK_TIME VARIANCE_RANK_BYTES".split()
)
_STDIO_COUNTERS = (
    "OPENS FDOPENS READS WRITES SEEKS FLUSHES BYTES_WRITTEN BYTES_READ MAX_BYTE_READ "
    "MAX_BYTE_WRITTEN FASTEST_RANK FASTEST_RANK_BYTES SLOWEST_RANK SLOWEST_RANK_BYTES".split()
)
_STDIO_FCOUNTERS = (
    "META_TIME WRITE_TIME READ_TIME OPEN_START_TIMESTAMP CLOSE_START_TIMESTAMP "
    "WRITE_START_TIMESTAMP READ_START_TIMESTAMP OPEN_END_TIMESTAMP CLOSE_END_TIMESTAMP "
    "WRITE_END_TIMESTAMP READ_END_TIMESTAMP FASTEST_RANK_TIME SLOWEST_RANK_TIME "
    "VARIANCE_RANK_TIME VARIANCE_RANK_BYTES".split()
)
_MPIIO_COUNTERS = (
    "INDEP_OPENS COLL_OPENS INDEP_READS INDEP_WRITES COLL_READS COLL_WRITES SPLIT_READS "
    "SPLIT_WRITES NB_READS NB_WRITES SYNCS HINTS VIEWS MODE BYTES_READ BYTES_WRITTEN RW_SWITCHES "
    "MAX_READ_TIME_SIZE MAX_WRITE_TIME_SIZE".split()
    + [f"SIZE_READ_AGG_{b}" for b in _SIZE_BINS]
    + [f"SIZE_WRITE_AGG_{b}" for b in _SIZE_BINS]
    + [f"ACCESS{i}_ACCESS" for i in range(1, 5)]
    + [f"ACCESS{i}_COUNT" for i in range(1, 5)]
    + "FASTEST_RANK FASTEST_RANK_BYTES SLOWEST_RANK SLOWEST_RANK_BYTES".split()
)

# module id -> (module name, supported version, counter names, fcounter names)
COUNTER_MODULES: dict[int, tuple[str, int, list[str], list[str]]] = {
    1: (
        "POSIX",
        4,
        [f"POSIX_{c}" for c in _POSIX_COUNTERS],
        [f"POSIX_F_{c}" for c in _POSIX_FCOUNTERS],
    ),
    2: (
        "MPI-IO",
        3,
        [f"MPIIO_{c}" for c in _MPIIO_COUNTERS],
        [f"MPIIO_F_{c}" for c in _POSIX_FCOUNTERS],
    ),
    9: (
        "STDIO",
        2,
        [f"STDIO_{c}" for c in _STDIO_COUNTERS],
        [f"STDIO_F_{c}" for c in _STDIO_FCOUNTERS],
    ),
}

_LOG_SUFFIXES = (".darshan", ".darshan_partial")
_CALL_COUNTERS = [
    "POSIX_READS",
    "POSIX_WRITES",
    "STDIO_READS",
    "STDIO_WRITES",
    "MPIIO_INDEP_READS",
    "MPIIO_INDEP_WRITES",
    "MPIIO_COLL_READS",
    "MPIIO_COLL_WRITES",
]
# findings that do not make a log "damaged" (the data read is complete and right)
_BENIGN = ("no DXT trace", "partial log", "segments without thread id", "counters not read")
_PID_RE = re.compile(r"_id(\d+)-(\d+)_")
_PTHREAD_KEY = b"pthread_id="


@dataclass
class DarshanRecords:
    """The Darshan logs of a run as tables (schemas ``darshan_*`` in :data:`~metaprov.records.SCHEMAS`).

    Attributes:
        logs: one row per log file: process facts, role, status and problems.
        names: record id -> path, per log.
        counters: POSIX / STDIO / MPI-IO counters in long format (log, module, record_id, rank,
            path, counter, value); counters equal to zero are omitted.
        segments: DXT trace segments, one row per read or write call.
    """

    logs: pd.DataFrame = field(default_factory=lambda: empty_table("darshan_logs"))
    names: pd.DataFrame = field(default_factory=lambda: empty_table("darshan_names"))
    counters: pd.DataFrame = field(default_factory=lambda: empty_table("darshan_counters"))
    segments: pd.DataFrame = field(default_factory=lambda: empty_table("darshan_segments"))

    def summary(self) -> dict[str, Any]:
        """Counts for humans and tests: logs, segments, reads, writes, file records."""
        seg = self.segments
        return {
            "logs": int(len(self.logs)),
            "segments": int(len(seg)),
            "reads": int((seg["op"] == "read").sum()),
            "writes": int((seg["op"] == "write").sum()),
            "file_records": int(
                seg[["log", "module", "record_id", "rank"]].drop_duplicates().shape[0]
            )
            if len(seg)
            else 0,
            "roles": {
                str(k): int(v) for k, v in self.logs["role"].value_counts().sort_index().items()
            },
        }


# --------------------------------------------------------------------------------------------
# finding logs and classifying processes


def find_darshan_logs(paths_or_dir: str | Path | Iterable[str | Path]) -> list[Path]:
    """The Darshan logs named by a directory (its ``*.darshan*`` files) or by a list of paths.

    Raises:
        InputError: a named path does not exist.
    """
    if isinstance(paths_or_dir, (str, Path)):
        items: list[Path] = [Path(paths_or_dir)]
    else:
        items = [Path(p) for p in paths_or_dir]
    out: list[Path] = []
    for p in items:
        if p.is_dir():
            out.extend(
                sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith(_LOG_SUFFIXES))
            )
        elif p.is_file():
            out.append(p)
        else:
            raise InputError(
                "no such file or directory",
                path=p,
                hint="give a run directory holding *.darshan files, or the log files themselves",
            )
    return out


def classify_role(cmdline: str) -> str:
    """The role of a traced process from its command line.

    Returns one of ``launcher`` (mpiexec, srun, ...), ``nanny`` (``dask worker`` / ``dask-worker``:
    the process that starts and watches the real worker), ``worker`` (the real worker process,
    started by multiprocessing with ``--multiprocessing-fork``), ``resource_tracker``
    (multiprocessing's helper), ``scheduler`` (``dask scheduler``) or ``other``.
    """
    text = cmdline or ""
    words = text.split()
    exe = words[0].rsplit("/", 1)[-1] if words else ""
    if exe in {"mpiexec", "mpirun", "srun", "aprun", "jsrun", "orterun", "mpiexec.hydra"}:
        return "launcher"
    if "multiprocessing.resource_tracker" in text:
        return "resource_tracker"
    if "--multiprocessing-fork" in text or "multiprocessing.spawn" in text:
        return "worker"
    if "multiprocessing.forkserver" in text:
        return "worker"
    joined = " ".join(w.rsplit("/", 1)[-1] for w in words[:4])
    if re.search(r"\bdask[ -]scheduler\b", joined) or "distributed.cli.dask_scheduler" in text:
        return "scheduler"
    if re.search(r"\bdask[ -]worker\b", joined) or "distributed.cli.dask_worker" in text:
        return "nanny"
    return "other"


# --------------------------------------------------------------------------------------------
# low-level decoding


class _LogProblem(Exception):
    """A problem that makes (part of) one log unreadable; reported, never raised to users."""


#: The most a compressed region may grow when decompressed: deflate cannot exceed 1032:1, and a
#: Darshan region holds counters and trace records that compress far less (the real logs: 4-40x).
#: A region that claims more is corrupt (a decompression bomb), reported at once.
MAX_RATIO = 1032
#: ... but a tiny region may always hold this much (a job record, a short name map).
MIN_BOUND = 1 << 20


def region_bound(compressed: int) -> int:
    """The most bytes a region of ``compressed`` bytes may decompress to."""
    return max(MIN_BOUND, MAX_RATIO * compressed)


def _decompressor(comp: str) -> Any:
    return zlib.decompressobj() if comp == "zlib" else bz2.BZ2Decompressor()


_STREAM_ERRORS = (zlib.error, OSError, ValueError, EOFError)


def _inflate(d: Any, data: bytes, budget: int) -> tuple[bytes, bool]:
    """Decompress one stream of ``data`` with ``d``, at most ``budget`` bytes of output.

    Returns the output and whether the stream wanted more than ``budget`` (then it is cut off
    there: nothing beyond the bound is ever produced).
    """
    out = d.decompress(data, budget + 1)
    if len(out) > budget:
        return out[:budget], True
    return out, False


def _decompress(data: bytes, comp: str) -> tuple[bytes, int, str | None]:
    """Decompress a region made of one or more concatenated streams.

    Returns the output of the complete streams, how many streams were complete and, if the data
    ended in a corrupt or cut stream, a description of that problem (the output then holds only
    the streams before it: a cut stream's partial output cannot be trusted record by record).
    The output never exceeds :func:`region_bound` of the region's size: a region that would
    decompress to more is reported as corrupt without producing it.
    """
    if comp == "none":
        return data, 1, None
    chunks: list[bytes] = []
    pos = 0
    n = 0
    budget = region_bound(len(data))
    while pos < len(data):
        d = _decompressor(comp)
        try:
            out, over = _inflate(d, data[pos:], budget)
        except _STREAM_ERRORS as exc:
            return b"".join(chunks), n, f"{comp} stream {n + 1} at byte {pos} is corrupt ({exc})"
        if over:
            return (
                b"".join(chunks),
                n,
                f"{comp} stream {n + 1} at byte {pos} decompresses to more than the "
                f"{region_bound(len(data)):,} bytes a {len(data):,}-byte region may hold "
                "(a decompression bomb, or a damaged header); nothing beyond that was decompressed",
            )
        if not d.eof:
            return b"".join(chunks), n, f"{comp} stream {n + 1} at byte {pos} is cut short"
        chunks.append(out)
        budget -= len(out)
        n += 1
        used = len(data) - pos - len(d.unused_data)
        if used <= 0:
            break
        pos += used
        # Darshan pads nothing between streams, but tolerate trailing zero bytes.
        if not data[pos:].strip(b"\0"):
            break
    return b"".join(chunks), n, None


def _streams_from(data: bytes, start: int, comp: str, count: int) -> list[tuple[int, bytes]]:
    """Decode up to ``count`` consecutive single streams from ``start`` (for a log without header);
    each bounded by :func:`region_bound` of the bytes left."""
    out: list[tuple[int, bytes]] = []
    pos = start
    while pos < len(data) and len(out) < count:
        d = _decompressor(comp)
        try:
            chunk, over = _inflate(d, data[pos:], region_bound(len(data) - pos))
        except _STREAM_ERRORS:
            break
        if over or not d.eof:
            break
        out.append((pos, chunk))
        pos = len(data) - len(d.unused_data)
    return out


@dataclass
class _Header:
    endian: str
    version: str
    comp: str
    partial_bits: int
    name_map: tuple[int, int]
    mod_map: list[tuple[int, int]]
    mod_ver: list[int]


def _parse_header(data: bytes) -> _Header:
    if len(data) < HEADER_SIZE:
        raise _LogProblem(
            f"file is {len(data)} bytes, shorter than the {HEADER_SIZE}-byte Darshan header "
            "(truncated or not a Darshan log)"
        )
    (magic_le,) = struct.unpack_from("<q", data, 8)
    (magic_be,) = struct.unpack_from(">q", data, 8)
    if magic_le == MAGIC:
        e = "<"
    elif magic_be == MAGIC:
        e = ">"
    elif not data[:HEADER_SIZE].strip(b"\0"):
        raise _LogProblem("header is all zeros (the process ended before Darshan wrote it)")
    else:
        raise _LogProblem(
            f"bad magic number {magic_le} (expected {MAGIC}): not a Darshan log, or a version "
            "older than 3.0"
        )
    version = data[:8].split(b"\0", 1)[0].decode("ascii", "replace")
    comp_code = data[16]
    if comp_code not in COMPRESSION:
        raise _LogProblem(f"unknown compression type {comp_code}")
    (partial_bits,) = struct.unpack_from(e + "Q", data, 24)
    maps = struct.unpack_from(e + "130Q", data, 32)
    name_map = (maps[0], maps[1])
    mod_map = [(maps[2 + 2 * i], maps[3 + 2 * i]) for i in range(MAX_MODS)]
    mod_ver = list(struct.unpack_from(e + "64I", data, 32 + 16 + 16 * MAX_MODS))
    return _Header(e, version, COMPRESSION[comp_code], partial_bits, name_map, mod_map, mod_ver)


def _parse_job(buf: bytes, e: str) -> dict[str, Any]:
    if len(buf) < JOB_STRUCT_SIZE:
        raise _LogProblem(f"job region is {len(buf)} bytes, expected at least {JOB_STRUCT_SIZE}")
    uid, ssec, snsec, esec, ensec, nprocs, jobid = struct.unpack_from(e + "7q", buf, 0)
    metadata = buf[56:JOB_STRUCT_SIZE].split(b"\0", 1)[0].decode("utf-8", "replace")
    tail = buf[JOB_STRUCT_SIZE:].split(b"\0", 1)[0].decode("utf-8", "replace")
    cmdline, _, mounts = tail.partition("\n")
    return {
        "uid": uid,
        "start_sec": ssec,
        "start_nsec": snsec,
        "end_sec": esec,
        "end_nsec": ensec,
        "nprocs": nprocs,
        "jobid": jobid,
        "metadata": metadata.strip(),
        "cmdline": cmdline.strip(),
        "mounts": mounts.strip("\n"),
    }


def _parse_names(buf: bytes, e: str) -> tuple[np.ndarray, list[str], str | None]:
    """Name records: 8-byte id then a NUL-terminated path, back to back."""
    ids: list[int] = []
    paths: list[str] = []
    pos = 0
    n = len(buf)
    problem = None
    unpack = struct.Struct(e + "Q").unpack_from
    while pos + 8 <= n:
        (rid,) = unpack(buf, pos)
        end = buf.find(b"\0", pos + 8)
        if end < 0:
            problem = f"name record at byte {pos} has no terminating NUL"
            break
        ids.append(rid)
        paths.append(buf[pos + 8 : end].decode("utf-8", "surrogateescape"))
        pos = end + 1
    # Paths must be valid UTF-8 downstream (RDF literals): keep undecodable bytes visible.
    paths = [p.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for p in paths]
    return np.array(ids, dtype=np.uint64), paths, problem


def _walk_dxt(buf: bytes, seg_size: int, e: str) -> list[tuple[int, int, int]] | None:
    """Record boundaries for one segment size: [(header offset, writes, reads)], or None."""
    unpack = struct.Struct(e + "qq").unpack_from
    n = len(buf)
    pos = 0
    out: list[tuple[int, int, int]] = []
    while pos < n:
        if pos + DXT_HEADER_SIZE > n:
            return None
        w, r = unpack(buf, pos + 88)
        if w < 0 or r < 0:
            return None
        nxt = pos + DXT_HEADER_SIZE + (w + r) * seg_size
        if nxt > n:
            return None
        out.append((pos, w, r))
        pos = nxt
    return out


def _seg_dtype(size: int, e: str) -> np.dtype:
    fields: list[tuple[str, str] | tuple[str, str, int]] = [
        ("offset", e + "i8"),
        ("length", e + "i8"),
        ("start", e + "f8"),
        ("end", e + "f8"),
    ]
    if size in (40, 104):
        fields.append(("pthread", e + "u8"))
    if size in (96, 104):
        fields.append(("extra", "u1", 64))
    return np.dtype(fields)


def parse_pthread_extra(extra: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Thread ids from ``extra_info[64]`` fields holding ``"...pthread_id=<n>"``.

    Vectorised over an ``(N, 64)`` uint8 array. The text ends at the first NUL; bytes after it
    are garbage left in the buffer and must be ignored. The texts of one thread repeat, so only
    the distinct cleaned texts are parsed.

    Returns:
        (values as uint64, boolean mask of rows where a valid id was found).
    """
    n, width_all = extra.shape[0], extra.shape[1] if extra.ndim == 2 else 64
    if n == 0:
        return np.zeros(0, np.uint64), np.zeros(0, bool)
    is_nul = extra == 0
    first_nul = np.where(is_nul.any(axis=1), is_nul.argmax(axis=1), width_all)
    clean = np.where(np.arange(width_all)[None, :] < first_nul[:, None], extra, np.uint8(0))
    clean = np.ascontiguousarray(clean, dtype=np.uint8)
    if width_all % 8 == 0 and n > 64:
        # distinct texts by a 64-bit hash of the cleaned bytes, verified byte for byte
        words = clean.view(np.uint64)
        mult = np.arange(1, words.shape[1] + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        h = (words * mult).sum(axis=1, dtype=np.uint64)
        _, first, inv = np.unique(h, return_index=True, return_inverse=True)
        inv = inv.ravel()
        if len(first) < n // 2 and np.array_equal(clean[first][inv], clean):
            val, ok = _parse_pthread_clean(clean[first])
            return val[inv], ok[inv]
    return _parse_pthread_clean(clean)


def _parse_pthread_clean(clean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, w_all = clean.shape
    text = clean.view(f"S{w_all}").ravel()
    where = np.strings.find(text, _PTHREAD_KEY)
    found = where >= 0
    p0 = np.where(found, where + len(_PTHREAD_KEY), 0)
    width = 21  # 2**64 - 1 has 20 digits; a 21st digit makes the text invalid
    cols = p0[:, None] + np.arange(width)[None, :]
    inside = cols < w_all
    digits = np.take_along_axis(clean, np.minimum(cols, w_all - 1), axis=1)
    is_digit = inside & (digits >= 48) & (digits <= 57)
    run = np.logical_and.accumulate(is_digit, axis=1)
    ndig = run.sum(axis=1)
    val = np.zeros(n, dtype=np.uint64)
    for j in range(20):
        d = (digits[:, j].astype(np.int64) - 48).clip(0, 9).astype(np.uint64)
        val = np.where(run[:, j], val * np.uint64(10) + d, val)
    # 20 digits above 18446744073709551615 overflowed: compare digit by digit
    top = np.frombuffer(b"18446744073709551615", dtype=np.uint8)
    d20 = digits[:, :20]
    differs = d20 != top[None, :]
    first = differs.argmax(axis=1)
    over = (ndig == 20) & differs.any(axis=1) & (d20[np.arange(n), first] > top[first])
    ok = found & (ndig > 0) & (ndig <= 20) & ~over
    return val, ok


# --------------------------------------------------------------------------------------------
# one log


@dataclass
class _LogResult:
    row: dict[str, Any]
    names: tuple[np.ndarray, list[str]] | None = None
    counters: list[pd.DataFrame] = field(default_factory=list)
    segments: list[dict[str, Any]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (reason, detail)
    id_to_path: dict[int, str] = field(default_factory=dict)

    def problem(self, reason: str, detail: str = "") -> None:
        self.problems.append((reason, detail))


def _read_one(path: Path) -> _LogResult:
    name = path.name
    m = _PID_RE.search(name)
    row: dict[str, Any] = {
        "log": name,
        "path": str(path),
        "pid": int(m.group(2)) if m else None,
        "partial": name.endswith(".darshan_partial"),
        "status": "ok",
    }
    res = _LogResult(row)
    try:
        size = path.stat().st_size
        hole = first_hole(path, size)
        if hole < size:
            # a hole: its size is not data (truncate -s 3G); reading it would expand gigabytes
            # of zeros in memory (a Darshan log is written whole, without holes)
            row["status"] = "unreadable"
            res.problem(
                "not a readable Darshan log",
                f"a sparse file: only its first {hole:,} of {size:,} bytes were ever written; "
                "not read",
            )
            return res
        data = read_head(path, size)[0]
    except OSError as exc:
        row["status"] = "unreadable"
        res.problem("cannot read the file", str(exc))
        return res
    row["size"] = len(data)
    try:
        hdr = _parse_header(data)
    except _LogProblem as exc:
        if data[:HEADER_SIZE].strip(b"\0") or len(data) <= HEADER_SIZE:
            row["status"] = "unreadable"
            res.problem("not a readable Darshan log", str(exc))
            return res
        _recover_headerless(data, res, str(exc))
        return res
    row.update(
        version=hdr.version,
        compression=hdr.comp,
        partial=bool(row["partial"]),
        partial_modules=",".join(
            MODULE_NAMES.get(i, str(i)) for i in range(MAX_MODS) if hdr.partial_bits >> i & 1
        ),
    )
    if row["partial"]:
        row["status"] = "partial"
        res.problem("partial log", "the .darshan_partial file was not finalised by Darshan")

    def region(off: int, ln: int, what: str) -> bytes | None:
        if ln == 0:
            return b""
        if off < HEADER_SIZE or off > len(data):
            res.problem(f"{what} region out of the file", f"offset {off}, file {len(data)} bytes")
            return None
        raw = data[off : off + ln]
        if len(raw) < ln:
            res.problem(
                f"{what} region truncated",
                f"{len(raw)} of {ln} bytes present (file cut short?)",
            )
        out, nstreams, prob = _decompress(raw, hdr.comp)
        if prob:
            res.problem(
                f"{what} region corrupt",
                prob
                + (f"; kept {nstreams} complete stream(s)" if nstreams else "; region skipped"),
            )
            if not nstreams:
                return None
        return out

    # job region: from the end of the header to the name map
    job_buf = region(HEADER_SIZE, hdr.name_map[0] - HEADER_SIZE, "job")
    if job_buf is None:
        row["status"] = "unreadable"
        return res
    try:
        job = _parse_job(job_buf, hdr.endian)
    except _LogProblem as exc:
        row["status"] = "unreadable"
        res.problem("job region unreadable", str(exc))
        return res
    _fill_job(row, job)

    names_buf = region(hdr.name_map[0], hdr.name_map[1], "name")
    id_to_path: dict[int, str] = {}
    if names_buf is not None:
        ids, paths, prob = _parse_names(names_buf, hdr.endian)
        if prob:
            res.problem("name region damaged", prob)
        res.names = (ids, paths)
        id_to_path = dict(zip(ids.tolist(), paths, strict=True))
        res.id_to_path = id_to_path

    n_segments = 0
    layouts: set[int] = set()
    any_dxt_region = False
    hostnames: list[str] = []
    for mod in range(MAX_MODS):
        off, ln = hdr.mod_map[mod]
        if ln == 0:
            continue
        mname = MODULE_NAMES.get(mod, f"module {mod}")
        if mod in COUNTER_MODULES:
            buf = region(off, ln, mname)
            if buf:
                _read_counters(res, mod, hdr.mod_ver[mod], buf, hdr.endian, id_to_path)
        elif mod in DXT_MODULES:
            any_dxt_region = True
            buf = region(off, ln, mname)
            if buf:
                seg = _read_dxt(res, mname, buf, hdr.endian, id_to_path)
                if seg is not None:
                    n_segments += len(seg["offset"])
                    layouts.add(seg["layout"])
                    hostnames.extend(seg["hosts"])
                    res.segments.append(seg)
    if not any_dxt_region:
        # An empty DXT region is normal for a process that did no traced I/O (uname, mpiexec);
        # it is worth a warning only when the counters show read/write calls DXT should hold.
        calls = sum(
            float(c.loc[c["counter"].isin(_CALL_COUNTERS), "value"].clip(lower=0).sum())
            for c in res.counters
        )
        if calls > 0:
            res.problem(
                "no DXT trace",
                f"the counters show {int(calls)} read/write call(s) but the log has no "
                "DXT_POSIX/DXT_MPIIO data (DXT disabled, or out of memory?): only counters read",
            )
    row["n_segments"] = n_segments
    row["layout"] = min(layouts) if len(layouts) == 1 else (None if not layouts else max(layouts))
    row["hostname"] = hostnames[0] if hostnames else None
    if row["status"] == "ok" and any(
        not any(b in reason for b in _BENIGN) for reason, _ in res.problems
    ):
        row["status"] = "damaged"
    return res


def _fill_job(row: dict[str, Any], job: dict[str, Any]) -> None:
    start_ns = job["start_sec"] * 1_000_000_000 + job["start_nsec"]
    end_ns = job["end_sec"] * 1_000_000_000 + job["end_nsec"]
    # the command line and Darshan's metadata pass the secret filter (a token given as an
    # argument would otherwise reach the export, the crate and the records)
    cmdline, _ = redact_words(job["cmdline"])
    metadata, _ = redact_words(job["metadata"])
    words = cmdline.split()
    row.update(
        uid=job["uid"],
        jobid=job["jobid"],
        nprocs=job["nprocs"],
        start_ns=start_ns,
        end_ns=end_ns,
        start_sec=job["start_sec"],
        start_nsec=job["start_nsec"],
        exe=words[0] if words else "",
        cmdline=cmdline,
        role=classify_role(cmdline),
        mounts=job["mounts"],
        metadata=metadata,
    )


def _recover_headerless(data: bytes, res: _LogResult, why: str) -> None:
    """A log whose header was never written: recover the job and name regions.

    Darshan writes the header last; the regions follow it in a fixed order (job, names, modules),
    so the first two complete streams are the job and the name map. The module regions cannot be
    told apart without the header and are not read.
    """
    row = res.row
    row["partial"] = True
    row["status"] = "partial"
    for comp in ("zlib", "bzip2"):
        streams = _streams_from(data, HEADER_SIZE, comp, 2)
        if streams:
            break
    if not streams:
        row["status"] = "unreadable"
        res.problem("not a readable Darshan log", why + "; no job region could be recovered")
        return
    row["compression"] = comp
    try:
        job = _parse_job(streams[0][1], "<")
    except _LogProblem as exc:
        row["status"] = "unreadable"
        res.problem("not a readable Darshan log", f"{why}; {exc}")
        return
    _fill_job(row, job)
    if len(streams) > 1:
        ids, paths, _ = _parse_names(streams[1][1], "<")
        res.names = (ids, paths)
    res.problem(
        "partial log without header",
        f"{why}: job and name map recovered, module data (counters, DXT) not readable",
    )


def _read_counters(
    res: _LogResult, mod: int, ver: int, buf: bytes, e: str, id_to_path: dict[int, str]
) -> None:
    mname, want, cnames, fnames = COUNTER_MODULES[mod]
    if ver != want:
        res.problem(
            f"{mname} counters not read",
            f"module version {ver} is not supported (metaprov reads version {want})",
        )
        return
    dt = np.dtype(
        [
            ("id", e + "u8"),
            ("rank", e + "i8"),
            ("c", e + "i8", (len(cnames),)),
            ("f", e + "f8", (len(fnames),)),
        ]
    )
    if len(buf) % dt.itemsize:
        res.problem(
            f"{mname} counters not read",
            f"region of {len(buf)} bytes is not a whole number of {dt.itemsize}-byte records",
        )
        return
    recs = np.frombuffer(buf, dtype=dt)
    if not len(recs):
        return
    vals = np.concatenate([recs["c"].astype(np.float64), recs["f"].astype(np.float64)], axis=1)
    rows, cols = np.nonzero(vals)
    all_names = np.array(cnames + fnames, dtype=object)
    ids = recs["id"][rows]
    res.counters.append(
        pd.DataFrame(
            {
                "log": res.row["log"],
                "module": mname,
                "record_id": ids,
                "rank": recs["rank"][rows],
                "path": [id_to_path.get(i) for i in ids.tolist()],
                "counter": all_names[cols],
                "value": vals[rows, cols],
            }
        )
    )


def _read_dxt(
    res: _LogResult, mname: str, buf: bytes, e: str, id_to_path: dict[int, str]
) -> dict[str, Any] | None:
    walks: dict[int, list[tuple[int, int, int]]] = {}
    for size in (96, 40, 32, 104):
        w = _walk_dxt(buf, size, e)
        if w is not None:
            walks[size] = w
    if not walks:
        res.problem(
            f"{mname} region not decodable",
            f"{len(buf)} bytes fit none of the segment layouts {sorted(SEGMENT_LAYOUTS)}",
        )
        return None
    if len(walks) > 1:
        # The same region can only fit two layouts when every record has zero segments or by a
        # coincidence of counts; prefer the layout whose record ids are all in the name map.
        counts = {s: sum(w + r for _, w, r in recs) for s, recs in walks.items()}
        if not any(counts.values()):
            walks = {min(walks): walks[min(walks)]}
        else:
            known = {
                s: all(struct.unpack_from(e + "Q", buf, p)[0] in id_to_path for p, _, _ in recs)
                for s, recs in walks.items()
            }
            good = [s for s in walks if known[s]]
            if len(good) != 1:
                res.problem(
                    f"{mname} region ambiguous",
                    f"fits segment layouts {sorted(walks)} equally well: not read",
                )
                return None
            walks = {good[0]: walks[good[0]]}
    size, recs = next(iter(walks.items()))
    nrec = len(recs)
    hdr_dt = np.dtype(
        [
            ("id", e + "u8"),
            ("rank", e + "i8"),
            ("shared", e + "i8"),
            ("host", "S64"),
            ("w", e + "i8"),
            ("r", e + "i8"),
        ]
    )
    pos = np.fromiter((p for p, _, _ in recs), dtype=np.int64, count=nrec)
    mv = memoryview(buf)
    headers = np.frombuffer(
        b"".join(mv[p : p + DXT_HEADER_SIZE] for p in pos.tolist()), dtype=hdr_dt
    )
    w = headers["w"].astype(np.int64)
    r = headers["r"].astype(np.int64)
    n = w + r
    # Segments of a record are contiguous: join those byte ranges once, then view them.
    body = b"".join(
        mv[p + DXT_HEADER_SIZE : p + DXT_HEADER_SIZE + k * size]
        for p, k in zip(pos.tolist(), n.tolist(), strict=True)
        if k
    )
    seg = np.frombuffer(body, dtype=_seg_dtype(size, e))
    rec_idx = np.repeat(np.arange(nrec), n)
    k = np.arange(len(seg)) - np.repeat(np.cumsum(n) - n, n)
    is_write = k < w[rec_idx]
    hosts = [h.split(b"\0", 1)[0].decode("utf-8", "replace") for h in headers["host"].tolist()]
    pthread: np.ndarray
    has_pthread: np.ndarray
    if size in (40, 104):
        pthread = seg["pthread"].astype(np.uint64)
        has_pthread = pthread != 0
    elif size == 96:
        pthread, has_pthread = parse_pthread_extra(seg["extra"])
    else:
        pthread = np.zeros(len(seg), np.uint64)
        has_pthread = np.zeros(len(seg), bool)
    if size == 104 and not has_pthread.all():
        # The text may carry the id too: the binary field wins, the text fills a zero field.
        zero = np.flatnonzero(~has_pthread)
        pt2, ok2 = parse_pthread_extra(seg["extra"][zero])
        pthread[zero[ok2]] = pt2[ok2]
        has_pthread[zero[ok2]] = True
    missing = int((~has_pthread).sum())
    if size != 32 and missing:
        res.problem(
            f"{mname} segments without thread id",
            f"{missing} of {len(seg)} segments carry no pthread id "
            f"({size}-byte layout): they cannot be linked to a task",
        )
    ids = headers["id"][rec_idx]
    return {
        "module": mname,
        "layout": size,
        "rank": headers["rank"][rec_idx].astype(np.int64),
        "record_id": ids,
        "host_idx": rec_idx,
        "hosts": hosts,
        "is_write": is_write,
        "offset": seg["offset"].astype(np.int64),
        "length": seg["length"].astype(np.int64),
        "start": seg["start"].astype(np.float64),
        "end": seg["end"].astype(np.float64),
        "pthread": pthread,
        "has_pthread": has_pthread,
    }


# --------------------------------------------------------------------------------------------
# assembling the tables


def _str_col(codes: np.ndarray, categories: list[str | None]) -> pd.Series:
    """A string column from codes into ``categories`` (repeats and None allowed; fast at 10^6 rows)."""
    values = pa.array(categories, type=pa.string())
    arr = pa.DictionaryArray.from_arrays(pa.array(np.asarray(codes, dtype=np.int32)), values)
    return pd.Series(pd.array(arr.dictionary_decode(), dtype=STR))


def _abs_us(base_ns: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Absolute microseconds: job start (exact integer ns) + relative seconds, rounded once."""
    rel_ns = np.rint(rel * 1e9).astype(np.int64)
    return (base_ns + rel_ns + 500) // 1000


def _build_segments(results: list[_LogResult]) -> pd.DataFrame:
    parts = [(i, s) for i, r in enumerate(results) for s in r.segments]
    if not parts:
        return empty_table("darshan_segments")
    log_names = [r.row["log"] for r in results]
    n_each = [len(s["offset"]) for _, s in parts]
    total = sum(n_each)
    log_codes = np.repeat(np.array([i for i, _ in parts], dtype=np.int64), n_each)
    modules = ["DXT_POSIX", "DXT_MPIIO"]
    mod_codes = np.repeat(np.array([modules.index(s["module"]) for _, s in parts]), n_each)
    base_ns = np.repeat(np.array([results[i].row["start_ns"] for i, _ in parts], np.int64), n_each)

    def cat(key: str) -> np.ndarray:
        return np.concatenate([s[key] for _, s in parts]) if total else np.zeros(0)

    start_rel = cat("start")
    end_rel = cat("end")
    record_id = cat("record_id").astype(np.uint64)
    host_codes_list = []
    host_names: list[str] = []
    for _, seg in parts:
        host_codes_list.append(seg["host_idx"] + len(host_names))
        host_names.extend(seg["hosts"])
    host_codes = np.concatenate(host_codes_list)
    uniq_hosts, host_inv = np.unique(np.array(host_names, dtype=object), return_inverse=True)
    host_col = _str_col(host_inv[host_codes], list(uniq_hosts))
    # paths: look each distinct record id of each log up once, not once per segment
    path_codes = np.empty(total, dtype=np.int64)
    paths: list[str | None] = []
    pos = 0
    for (li, _), k in zip(parts, n_each, strict=True):
        uniq, inv = np.unique(record_id[pos : pos + k], return_inverse=True)
        path_codes[pos : pos + k] = inv.ravel() + len(paths)
        id_map = results[li].id_to_path
        paths.extend(id_map.get(int(r)) for r in uniq.tolist())
        pos += k
    path_col = _str_col(path_codes, paths)
    pthread = cat("pthread").astype(np.uint64)
    has_pt = cat("has_pthread").astype(bool)
    start_us = _abs_us(base_ns, start_rel)
    end_us = _abs_us(base_ns, end_rel)
    df = pd.DataFrame(
        {
            "log": _str_col(log_codes, log_names),
            "module": _str_col(mod_codes, modules),
            "rank": cat("rank").astype(np.int64),
            "record_id": record_id,
            "path": path_col,
            "hostname": host_col,
            "op": _str_col(np.where(cat("is_write").astype(bool), 1, 0), ["read", "write"]),
            "offset": cat("offset").astype(np.int64),
            "length": cat("length").astype(np.int64),
            "start": pd.Series(start_us.view("datetime64[us]")).dt.tz_localize("UTC"),
            "end": pd.Series(end_us.view("datetime64[us]")).dt.tz_localize("UTC"),
            "start_rel": start_rel,
            "end_rel": end_rel,
            "pthread": pd.arrays.IntegerArray(pthread, ~has_pt),
        }
    )
    return conform("darshan_segments", df)


def _build_logs(results: list[_LogResult]) -> pd.DataFrame:
    rows = []
    for r in results:
        row = dict(r.row)
        if "start_ns" in row:
            row["start"] = pd.Timestamp(int(row["start_ns"] + 500) // 1000, unit="us", tz="UTC")
            row["end"] = pd.Timestamp(int(row["end_ns"] + 500) // 1000, unit="us", tz="UTC")
            row["runtime"] = (row["end_ns"] - row["start_ns"]) / 1e9
        row["problems"] = "; ".join(f"{a}: {b}" if b else a for a, b in r.problems)
        rows.append(row)
    if not rows:
        return empty_table("darshan_logs")
    df = pd.DataFrame(rows)
    if "role" not in df:
        df["role"] = None
    df["role"] = df["role"].fillna("unknown")
    return conform("darshan_logs", df)


def _mark_unrelated(logs: pd.DataFrame, acct: Accounting) -> None:
    """Flag logs that cannot belong to the same run: another user, or disjoint in time."""
    ok = logs["status"].ne("unreadable") & logs["start"].notna()
    logs["in_run"] = pd.array(np.where(ok, True, pd.NA), dtype="boolean")
    if ok.sum() < 2:
        return
    good = logs[ok]
    uid_mode = good["uid"].mode().iloc[0]
    # The run's time span: the union of the logs of the majority user, widened by a minute so
    # helpers started just before or after still count.
    same_user = good[good["uid"] == uid_mode]
    lo = same_user["start"].min()
    hi = same_user["end"].max()
    for idx, row in good.iterrows():
        reasons = []
        if row["uid"] != uid_mode:
            reasons.append(f"uid {row['uid']} differs from the run's uid {uid_mode}")
        others = same_user.drop(index=idx, errors="ignore")
        if len(others):
            olo = others["start"].min() - pd.Timedelta(minutes=1)
            ohi = others["end"].max() + pd.Timedelta(minutes=1)
            if row["end"] < olo or row["start"] > ohi:
                reasons.append(f"its time span does not overlap the other logs ({lo} .. {hi})")
        if reasons:
            logs.loc[idx, "in_run"] = False
            detail = f"{'; '.join(reasons)}; command line: {row['cmdline']!r}"
            acct.warn(row["log"], "log from an unrelated program", detail=detail)
            prev = logs.loc[idx, "problems"]
            logs.loc[idx, "problems"] = (prev + "; " if prev else "") + (
                "log from an unrelated program: " + detail
            )


def read_darshan_logs(
    paths_or_dir: str | Path | Iterable[str | Path],
    accounting: Accounting | None = None,
    *,
    strict: bool = False,
) -> DarshanRecords:
    """Read Darshan logs into tables.

    Args:
        paths_or_dir: a run directory (its ``*.darshan`` and ``*.darshan_partial`` files are read)
            or an iterable of log paths.
        accounting: where findings go (one entry per log file: segments read, problems). A new
            one is used when omitted.
        strict: raise :class:`~metaprov.errors.InputError` on the first log that cannot be read at
            all, instead of reporting it and going on.

    Returns:
        The logs as :class:`DarshanRecords`. Logs are read in file-name order, so the same input
        always gives the same tables.

    Raises:
        InputError: a named path does not exist, or (``strict``) a log is unreadable.

    Example:
        >>> recs = read_darshan_logs("runs/R1")                     # doctest: +SKIP
        >>> recs.segments.groupby("op").size()                      # doctest: +SKIP
    """
    acct = accounting if accounting is not None else Accounting()
    paths = find_darshan_logs(paths_or_dir)
    results: list[_LogResult] = []
    for p in paths:
        res = _read_one(p)
        results.append(res)
        name = res.row["log"]
        acct.read(name, int(res.row.get("n_segments") or 0))
        for reason, detail in res.problems:
            acct.warn(name, reason, detail=detail)
        if strict and res.row["status"] == "unreadable":
            reason, detail = res.problems[0] if res.problems else ("unreadable", "")
            raise InputError(f"{reason}: {detail}", path=p)
    logs = _build_logs(results)
    if len(logs):
        _mark_unrelated(logs, acct)
    names_parts = [
        pd.DataFrame({"log": r.row["log"], "record_id": r.names[0], "path": r.names[1]})
        for r in results
        if r.names is not None and len(r.names[0])
    ]
    names = (
        conform("darshan_names", pd.concat(names_parts, ignore_index=True))
        if names_parts
        else empty_table("darshan_names")
    )
    counter_parts = [c for r in results for c in r.counters]
    counters = (
        conform("darshan_counters", pd.concat(counter_parts, ignore_index=True))
        if counter_parts
        else empty_table("darshan_counters")
    )
    segments = _build_segments(results)
    if paths:
        acct.note(
            f"Darshan: {len(paths)} log(s), {len(segments)} DXT segment(s), "
            f"{int((logs['status'] != 'ok').sum())} log(s) with problems"
        )
    return DarshanRecords(logs=logs, names=names, counters=counters, segments=segments)
