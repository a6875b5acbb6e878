"""A writer of small synthetic, format-correct Darshan logs (for tests and benchmarks).

Input: a table of I/O calls (path, op, offset, length, relative start/end seconds, pthread id)
and the process facts (start time, command line, host, ...).
Output: one Darshan log file (format "3.41") that :func:`metaprov.ingest.darshan.read_darshan_logs`
and Darshan's own tools can read: header, job region (with command line and mount table), name
map, a POSIX counter region and a DXT_POSIX (or DXT_MPIIO) region in any of the four segment
layouts (32, 40, 96 or 104 bytes), compressed with zlib (optionally as several concatenated
streams, as MPI ranks write them), bzip2, or not at all.

The project cannot run Darshan itself (no ``darshan-runtime`` package in Debian), so every test
that needs a log with a known answer writes one with this module.
"""

from __future__ import annotations

import bz2
import hashlib
import struct
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from metaprov.ingest.darshan import (
    COUNTER_MODULES,
    DXT_HEADER_SIZE,
    HEADER_SIZE,
    MAGIC,
    MAX_MODS,
)

__all__ = ["write_darshan_log", "record_id", "log_file_name", "pthread_extra_info"]

_COMP_CODES = {"zlib": 0, "bzip2": 1, "none": 2}
_DXT_MODULE_IDS = {"DXT_POSIX": 10, "DXT_MPIIO": 11}


def record_id(path: str) -> int:
    """A deterministic 64-bit record id for a path (Darshan hashes the name the same way in spirit)."""
    return int.from_bytes(hashlib.blake2b(path.encode("utf-8"), digest_size=8).digest(), "little")


def log_file_name(
    user: str, exe: str, jobid: int, pid: int, start: float, *, partial: bool = False
) -> str:
    """The conventional log name ``<user>_<exe>_id<jobid>-<pid>_<month>-<day>-<secs>-<hash>_1.darshan``."""
    t = pd.Timestamp(start, unit="s", tz="UTC")
    secs = t.hour * 3600 + t.minute * 60 + t.second
    h = record_id(f"{user}{exe}{jobid}{pid}{start}") % 10**19
    base = f"{user}_{exe}_id{jobid}-{pid}_{t.month}-{t.day}-{secs}-{h}"
    return base + (".darshan_partial" if partial else "_1.darshan")


def pthread_extra_info(pthread: np.ndarray, missing: np.ndarray | None = None) -> np.ndarray:
    """``extra_info[64]`` fields ``b"pthread_id=<n>"`` NUL-padded, vectorised: an (N, 64) uint8 array.

    Rows flagged in ``missing`` get a text without a thread id (``b"mode=unknown"``).
    """
    n = len(pthread)
    out = np.zeros((n, 64), dtype=np.uint8)
    key = np.frombuffer(b"pthread_id=", dtype=np.uint8)
    out[:, : len(key)] = key
    x = np.asarray(pthread, dtype=np.uint64).copy()
    rev = np.zeros((n, 20), dtype=np.uint8)  # digits, least significant first
    ndig = np.ones(n, dtype=np.int64)
    for j in range(20):
        rev[:, j] = (x % np.uint64(10)).astype(np.uint8) + 48
        x //= np.uint64(10)
        ndig = np.where(x > 0, j + 2, ndig)
    cols = np.arange(20)
    src = np.clip(ndig[:, None] - 1 - cols[None, :], 0, 19)
    digits = np.take_along_axis(rev, src, axis=1)
    digits = np.where(cols[None, :] < ndig[:, None], digits, 0)
    out[:, len(key) : len(key) + 20] = digits
    if missing is not None and missing.any():
        alt = np.zeros(64, dtype=np.uint8)
        alt[:12] = np.frombuffer(b"mode=unknown", dtype=np.uint8)
        out[missing] = alt
    return out


def _compress(chunks: list[bytes], comp: str) -> bytes:
    if comp == "none":
        return b"".join(chunks)
    if comp == "zlib":
        return b"".join(zlib.compress(c, 6) for c in chunks)
    if comp == "bzip2":
        return b"".join(bz2.compress(c, 9) for c in chunks)
    raise ValueError(f"unknown compression {comp!r}; use zlib, bzip2 or none")


def _split(buf: bytes, bounds: list[int], streams: int) -> list[bytes]:
    """Cut a region into ``streams`` pieces at record boundaries (``bounds``: record starts)."""
    if streams <= 1 or len(bounds) < 2:
        return [buf]
    idx = np.linspace(0, len(bounds), streams + 1).astype(int)[1:-1]
    cuts = sorted({bounds[i] for i in idx if 0 < i < len(bounds)})
    edges = [0, *cuts, len(buf)]
    return [buf[a:b] for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _segments_frame(segments: pd.DataFrame | Mapping[str, Any]) -> pd.DataFrame:
    df = pd.DataFrame(segments).reset_index(drop=True)
    for col in ("path", "op", "start_rel", "end_rel"):
        if col not in df:
            raise ValueError(f"segments need a {col!r} column")
    if "offset" not in df:
        df["offset"] = 0
    if "length" not in df:
        df["length"] = 0
    if "rank" not in df:
        df["rank"] = 0
    if "pthread" not in df:
        df["pthread"] = pd.array([None] * len(df), dtype="UInt64")
    return df


def _dxt_region(
    df: pd.DataFrame, layout: int, hostname: str, garbage_after_nul: bool
) -> tuple[bytes, list[int], list[str]]:
    """DXT records (header + writes + reads per file) and the record start offsets."""
    if layout not in (32, 40, 96, 104):
        raise ValueError(f"layout must be 32, 40, 96 or 104 bytes, not {layout}")
    paths, path_codes = np.unique(
        df["path"].astype(str).to_numpy(dtype=object), return_inverse=True
    )
    rank = df["rank"].to_numpy(dtype=np.int64)
    is_read = (df["op"].astype(str) == "read").to_numpy()
    start = df["start_rel"].to_numpy(dtype=np.float64)
    # one record per (file, rank); writes first, then reads, each in time order (as Darshan does)
    order = np.lexsort((start, is_read, rank, path_codes))
    rec_key = path_codes[order].astype(np.int64) * (1 << 20) + rank[order]
    uniq_rec, rec_first, rec_n = np.unique(rec_key, return_index=True, return_counts=True)
    pth = df["pthread"].astype("UInt64")
    pt_missing = pth.isna().to_numpy()[order]
    pt_vals = pth.fillna(0).to_numpy(dtype=np.uint64)[order]
    fields: list[Any] = [("offset", "<i8"), ("length", "<i8"), ("start", "<f8"), ("end", "<f8")]
    if layout in (40, 104):
        fields.append(("pthread", "<u8"))
    if layout in (96, 104):
        fields.append(("extra", "u1", 64))
    seg = np.zeros(len(df), dtype=np.dtype(fields))
    seg["offset"] = df["offset"].to_numpy(dtype=np.int64)[order]
    seg["length"] = df["length"].to_numpy(dtype=np.int64)[order]
    seg["start"] = start[order]
    seg["end"] = df["end_rel"].to_numpy(dtype=np.float64)[order]
    if layout in (40, 104):
        seg["pthread"] = np.where(pt_missing, 0, pt_vals)
    if layout in (96, 104):
        extra = pthread_extra_info(pt_vals, pt_missing if layout == 96 else None)
        if layout == 104:
            extra[:] = 0  # the binary field carries the id; the text is free-form
            extra[:, :4] = np.frombuffer(b"tag=", dtype=np.uint8)
        if garbage_after_nul:
            # Darshan leaves stale bytes after the NUL: readers must stop at the first NUL.
            text_len = (extra != 0).sum(axis=1)
            tail = np.arange(64)[None, :] > text_len[:, None]
            extra = np.where(tail, np.uint8(ord("7")), extra)
        seg["extra"] = extra
    seg_bytes = seg.tobytes()
    hdr_dt = np.dtype(
        [
            ("id", "<u8"),
            ("rank", "<i8"),
            ("shared", "<i8"),
            ("host", "S64"),
            ("w", "<i8"),
            ("r", "<i8"),
        ]
    )
    nrec = len(uniq_rec)
    hdr = np.zeros(nrec, dtype=hdr_dt)
    rec_paths = [str(paths[k >> 20]) for k in uniq_rec.tolist()]
    hdr["id"] = np.array([record_id(p) for p in rec_paths], dtype=np.uint64)
    hdr["rank"] = uniq_rec & ((1 << 20) - 1)
    hdr["host"] = hostname.encode()
    sorted_read = is_read[order]
    reads = np.add.reduceat(sorted_read.astype(np.int64), rec_first) if nrec else np.zeros(0)
    hdr["r"] = reads
    hdr["w"] = rec_n - reads
    hdr_bytes = hdr.tobytes()
    size = layout
    parts: list[bytes] = []
    bounds: list[int] = []
    pos = 0
    for i, (first, n) in enumerate(zip(rec_first.tolist(), rec_n.tolist(), strict=True)):
        bounds.append(pos)
        parts.append(hdr_bytes[i * DXT_HEADER_SIZE : (i + 1) * DXT_HEADER_SIZE])
        parts.append(seg_bytes[first * size : (first + n) * size])
        pos += DXT_HEADER_SIZE + n * size
    return b"".join(parts), bounds, rec_paths


def _posix_region(df: pd.DataFrame) -> bytes:
    """One POSIX (version 4) record per (file, rank) with the main counters filled in."""
    _, _, cnames, fnames = COUNTER_MODULES[1]
    dt = np.dtype(
        [("id", "<u8"), ("rank", "<i8"), ("c", "<i8", (len(cnames),)), ("f", "<f8", (len(fnames),))]
    )
    g = df.assign(
        rd=(df["op"] == "read").astype(int),
        wr=(df["op"] == "write").astype(int),
        br=np.where(df["op"] == "read", df["length"], 0),
        bw=np.where(df["op"] == "write", df["length"], 0),
        dur=df["end_rel"] - df["start_rel"],
    )
    agg = g.groupby(["path", "rank"], sort=True).agg(
        reads=("rd", "sum"),
        writes=("wr", "sum"),
        bytes_read=("br", "sum"),
        bytes_written=("bw", "sum"),
        first=("start_rel", "min"),
        last=("end_rel", "max"),
        time=("dur", "sum"),
    )
    rec = np.zeros(len(agg), dtype=dt)
    rec["id"] = [record_id(p) for p, _ in agg.index]
    rec["rank"] = [r for _, r in agg.index]
    ci = {n: i for i, n in enumerate(cnames)}
    fi = {n: i for i, n in enumerate(fnames)}
    rec["c"][:, ci["POSIX_OPENS"]] = 1
    rec["c"][:, ci["POSIX_READS"]] = agg["reads"].to_numpy()
    rec["c"][:, ci["POSIX_WRITES"]] = agg["writes"].to_numpy()
    rec["c"][:, ci["POSIX_BYTES_READ"]] = agg["bytes_read"].to_numpy()
    rec["c"][:, ci["POSIX_BYTES_WRITTEN"]] = agg["bytes_written"].to_numpy()
    rec["f"][:, fi["POSIX_F_OPEN_START_TIMESTAMP"]] = agg["first"].to_numpy()
    rec["f"][:, fi["POSIX_F_CLOSE_END_TIMESTAMP"]] = agg["last"].to_numpy()
    rec["f"][:, fi["POSIX_F_READ_TIME"]] = agg["time"].to_numpy()
    return rec.tobytes()


def write_darshan_log(
    path: str | Path,
    segments: pd.DataFrame | Mapping[str, Any],
    *,
    start: tuple[int, int] | float,
    end: tuple[int, int] | float | None = None,
    cmdline: str = "python3 -c pass",
    uid: int = 1000,
    jobid: int = 1,
    nprocs: int = 1,
    hostname: str = "node0",
    mounts: Iterable[tuple[str, str]] = (("ext4", "/"), ("lustre", "/lus/grand")),
    metadata: str = "lib_ver=3.4.4\n",
    layout: int = 96,
    module: str = "DXT_POSIX",
    compression: str = "zlib",
    streams: int = 1,
    counters: bool = True,
    garbage_after_nul: bool = True,
    header: bool = True,
    partial_modules: int = 0,
) -> Path:
    """Write one synthetic Darshan log.

    Args:
        path: output file (its name should follow :func:`log_file_name` for the pid to be known).
        segments: I/O calls with columns ``path``, ``op`` ('read'/'write'), ``start_rel``,
            ``end_rel`` (seconds since ``start``) and optionally ``offset``, ``length``, ``rank``,
            ``pthread`` (UInt64; NA writes a segment without thread id).
        start: job start as (seconds, nanoseconds) or float epoch seconds.
        end: job end (default: start + last segment end + 1 ms).
        cmdline: command line stored in the job region (decides the process role).
        uid, jobid, nprocs, hostname, mounts, metadata: the job facts.
        layout: DXT segment size: 32, 40, 96 or 104 bytes.
        module: ``DXT_POSIX`` or ``DXT_MPIIO``.
        compression: ``zlib``, ``bzip2`` or ``none``.
        streams: number of concatenated compressed streams per region (cut at record boundaries).
        counters: also write a POSIX counter record per file.
        garbage_after_nul: fill ``extra_info`` after its NUL with stale bytes, as Darshan does.
        header: write the header (False: all zeros, like a log whose process died early).
        partial_modules: bit field of modules flagged as out of memory.

    Returns:
        The path written.
    """
    if compression not in _COMP_CODES:
        raise ValueError(f"unknown compression {compression!r}; use zlib, bzip2 or none")
    if module not in _DXT_MODULE_IDS:
        raise ValueError(f"module must be DXT_POSIX or DXT_MPIIO, not {module!r}")
    df = _segments_frame(segments)
    if isinstance(start, tuple):
        ssec, snsec = int(start[0]), int(start[1])
    else:
        ssec = int(np.floor(start))
        snsec = int(round((start - ssec) * 1e9))
        if snsec >= 1_000_000_000:
            ssec, snsec = ssec + 1, snsec - 1_000_000_000
    if end is None:
        last = float(df["end_rel"].max()) if len(df) else 0.0
        end_ns = ssec * 1_000_000_000 + snsec + int((last + 0.001) * 1e9)
        esec, ensec = divmod(end_ns, 1_000_000_000)
    elif isinstance(end, tuple):
        esec, ensec = int(end[0]), int(end[1])
    else:
        esec = int(np.floor(end))
        ensec = int(round((end - esec) * 1e9))

    job = struct.pack("<7q", uid, ssec, snsec, esec, ensec, nprocs, jobid)
    meta = metadata.encode()[:1023]
    job += meta + b"\0" * (1024 - len(meta))
    mount_text = "".join(f"{t}\t{p}\n" for t, p in mounts)
    job += (cmdline + " \n" + mount_text).encode() + b"\0"

    dxt, bounds, rec_paths = (
        _dxt_region(df, layout, hostname, garbage_after_nul)
        if len(df)
        else (
            b"",
            [],
            [],
        )
    )
    all_paths = sorted(set(df["path"].astype(str))) if len(df) else []
    names = b"".join(struct.pack("<Q", record_id(p)) + p.encode() + b"\0" for p in all_paths)

    regions: list[tuple[int, bytes]] = []  # (module id, compressed bytes)
    if counters and len(df):
        regions.append((1, _compress([_posix_region(df)], compression)))
    if dxt:
        regions.append(
            (_DXT_MODULE_IDS[module], _compress(_split(dxt, bounds, streams), compression))
        )

    body = bytearray()
    job_c = _compress([job], compression)
    names_c = _compress([names], compression)
    body += job_c
    name_map = (HEADER_SIZE + len(body), len(names_c))
    body += names_c
    mod_map = [(0, 0)] * MAX_MODS
    for mod, data in regions:
        mod_map[mod] = (HEADER_SIZE + len(body), len(data))
        body += data
    mod_ver = [0] * MAX_MODS
    mod_ver[1] = 4
    mod_ver[9] = 2
    mod_ver[10] = 2 if layout in (40, 104) else 1
    mod_ver[11] = 3 if layout in (40, 104) else 2
    if header:
        hdr = bytearray(HEADER_SIZE)
        hdr[0:8] = b"3.41".ljust(8, b"\0")
        struct.pack_into("<q", hdr, 8, MAGIC)
        hdr[16] = _COMP_CODES[compression]
        struct.pack_into("<Q", hdr, 24, partial_modules)
        flat = [name_map[0], name_map[1]] + [v for m in mod_map for v in m]
        struct.pack_into(f"<{len(flat)}Q", hdr, 32, *flat)
        struct.pack_into("<64I", hdr, 32 + 16 + 16 * MAX_MODS, *mod_ver)
    else:
        hdr = bytearray(HEADER_SIZE)
    out = Path(path)
    out.write_bytes(bytes(hdr) + bytes(body))
    del rec_paths
    return out
