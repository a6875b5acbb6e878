"""Darshan I/O (``io_fraction > 0``): the I/O plan, one DXT log per worker process, the I/O truth.

:func:`_io_plan` chooses which tasks do I/O and places their segments inside their compute
windows on their own thread ids (plus the processes' own start-up I/O); :func:`_write_darshan`
writes the logs with :mod:`metaprov.synthetic.darshan`; :func:`_io_truth` gives the counts a
linker must reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from metaprov.synthetic.csvtext import _hex
from metaprov.synthetic.graph import _n_dependents
from metaprov.synthetic.plan import _Plan

#: Default size of the pool of data files the I/O tasks read and write.
IO_FILES = 100
# Tasks shorter than this do no I/O: a segment needs room inside the window, with margins.
_IO_MIN_DURATION = 5e-4
# Every task segment keeps this share of its task's duration (at most 1 ms) from both window
# edges: >= 50 us, far above the rounding of times to microseconds on either side.
_IO_EDGE_SHARE = 0.1
_IO_EDGE_MAX = 1e-3
# Segments per I/O task: 1, 2, 3 or 4 with these probabilities.
_IO_SEGMENTS_P = (0.55, 0.25, 0.12, 0.08)
# Prefixes whose tasks read (array chunks and loaders read their input files).
_IO_READ_PREFIXES = ("load", "array")
# Darshan's clock is late against the worker's time.time() by this much (s), per process: the
# range measured on a real local Dask run (docs: shared/design/inputs.md, section 2).
_IO_LATE = (0.012, 0.058)
_IO_USER = "dask"
_IO_PROJECT = "DaskProv"
_IO_ENV = "/home/dask/.conda/envs/dask"
_IO_CMD = (
    f"{_IO_ENV}/bin/python3 -c from multiprocessing.spawn import spawn_main; "
    "spawn_main(tracker_fd=9, pipe_handle=15) --multiprocessing-fork"
)
_IO_MOUNTS = (("lustre", "/lus/grand"), ("xfs", "/local/scratch"), ("ext4", "/"))
# Files a worker process reads while it starts (imports, configuration): process-level I/O.
_IO_STARTUP_FILES = tuple(
    f"{_IO_ENV}/lib/python3.11/site-packages/{m}"
    for m in (
        "numpy/__init__.py",
        "numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
        "pandas/__init__.py",
        "pandas/_libs/lib.cpython-311-x86_64-linux-gnu.so",
        "dask/__init__.py",
        "dask/config.py",
        "dask/dask.yaml",
        "distributed/__init__.py",
        "distributed/worker.py",
        "distributed/distributed.yaml",
        "h5py/__init__.py",
        "h5py/_hl/files.py",
        "tornado/ioloop.py",
        "msgpack/__init__.py",
        "toolz/__init__.py",
        "yaml/__init__.py",
        "psutil/__init__.py",
        "zict/__init__.py",
        "tblib/__init__.py",
        "sortedcontainers/__init__.py",
    )
)


@dataclass
class _IOPlan:
    """Every DXT segment of the run, sorted by (worker, start); times on the worker's clock."""

    worker: np.ndarray  # int64
    task: np.ndarray  # int64; -1: process-level I/O (a thread that runs no task)
    pthread: np.ndarray  # uint64
    path: np.ndarray  # int64 code into paths
    write: np.ndarray  # bool
    offset: np.ndarray  # int64
    length: np.ndarray  # int64
    start: np.ndarray  # float64 epoch seconds, worker clock
    end: np.ndarray
    paths: list[str]
    io_tasks: int
    # per worker process
    pid: np.ndarray
    hostnames: list[str]  # per worker
    log_start_ns: np.ndarray  # Darshan's recorded job start (int ns)
    log_end_ns: np.ndarray
    late: np.ndarray  # Darshan clock minus worker clock (s)
    main_thread: np.ndarray
    log_names: list[str]
    jobid: int
    uid: int

    @property
    def bounds(self) -> np.ndarray:
        return np.searchsorted(self.worker, np.arange(len(self.pid) + 1))


def _under_failed_attempts(p: _Plan) -> np.ndarray:
    """Tasks whose window overlaps a failed first attempt once that is put on their thread.

    The CSV files give a failed first attempt no thread (only the final ``processing->memory``
    row carries one), so readers place it on the thread of the final attempt; there it can
    overlap other tasks, and I/O inside such a task would fit two windows. Those tasks do no I/O.
    """
    n, k = p.n, len(p.retry_task)
    hit = np.zeros(n, dtype=bool)
    if not k or not n:
        return hit
    t0 = min(float(p.start.min()), float(p.retry_start.min()))
    span = np.int64(int((max(float(p.end.max()), float(p.retry_end.max())) - t0) * 1e9) + 10**9)

    def at(thread: np.ndarray, t: np.ndarray) -> np.ndarray:  # (thread, time) as one int64 axis
        return thread.astype(np.int64) * span + np.round((t - t0) * 1e9).astype(np.int64)

    order = np.lexsort((p.start, p.thread))  # per thread, windows are disjoint and in order
    s_key = at(p.thread[order], p.start[order])
    e_key = at(p.thread[order], p.end[order])
    th = p.thread[p.retry_task]
    # windows [a, b) of the thread: from the first ending after the attempt's start to the last
    # starting before its end
    a = np.searchsorted(e_key, at(th, p.retry_start), side="left")
    b = np.searchsorted(s_key, at(th, p.retry_end), side="right")
    ok = b > a
    mark = np.zeros(n + 1, dtype=np.int64)
    np.add.at(mark, a[ok], 1)
    np.add.at(mark, b[ok], -1)
    hit[order] = np.cumsum(mark[:n]) > 0
    return hit


def _io_plan(p: _Plan, seed: int, io_fraction: float, io_files: int) -> _IOPlan:
    """The run's I/O: which tasks do it, on which files, when; plus the processes' own I/O."""
    # Its own stream: the CSV files do not depend on the I/O options. The steps draw from it in
    # this order, so their order is part of the output.
    rng = np.random.Generator(np.random.PCG64([seed, 2]))
    procs = _processes(p, rng)
    tasks, task_segs = _task_io(p, rng, io_fraction, io_files)
    paths, n_spill = _paths(p, rng, io_files)
    proc_segs = _process_io(p, rng, procs, n_spill, io_files)
    segs = _Segs.concat(task_segs, proc_segs).sorted()
    return _IOPlan(
        worker=segs.worker,
        task=segs.task,
        pthread=segs.pthread,
        path=segs.path,
        write=segs.write,
        offset=_sequential_offsets(segs, p.workers),
        length=segs.length,
        start=segs.start,
        end=segs.end,
        paths=paths,
        io_tasks=len(tasks),
        pid=procs.pid,
        hostnames=procs.hostnames,
        log_start_ns=procs.log_start_ns,
        log_end_ns=procs.log_end_ns,
        late=procs.late,
        main_thread=procs.main_thread,
        log_names=procs.log_names,
        jobid=procs.jobid,
        uid=procs.uid,
    )


@dataclass
class _Processes:
    """The worker processes as Darshan sees them (one per worker)."""

    jobid: int
    uid: int
    pid: np.ndarray
    hostnames: list[str]
    log_start_ns: np.ndarray  # Darshan's recorded job start (int ns)
    log_end_ns: np.ndarray
    late: np.ndarray  # Darshan clock minus worker clock (s)
    removed: np.ndarray  # when the worker left (s), as in worker.csv
    main_thread: np.ndarray  # pthread ids of the threads that run no task
    offload_thread: np.ndarray
    log_names: list[str]


def _processes(p: _Plan, rng: np.random.Generator) -> _Processes:
    """Per worker process: pid, host, Darshan's start/end, clock lateness, non-task threads."""
    from metaprov.synthetic.darshan import log_file_name

    nw = p.workers
    jobid = int(rng.integers(1_000_000, 2_000_000))
    uid = int(rng.integers(20_000, 40_000))
    pid = np.sort(rng.choice(np.arange(10_000, 60_000), size=nw, replace=False)).astype(np.int64)
    rng.shuffle(pid)
    node = rng.choice(560, size=(nw + 3) // 4, replace=False)
    host_names = [f"x{3001 + int(v) // 28}c{int(v) % 28 // 7}s{int(v) % 7}b0n0" for v in node]
    proc_start = p.worker_added - rng.uniform(1.0, 1.6, nw)
    log_start_ns = np.round(proc_start * 1e6).astype(np.int64) * 1000
    late = rng.uniform(_IO_LATE[0], _IO_LATE[1], nw)
    removed = p.end_time + 0.2 + np.arange(nw) * 1.1e-3  # as in worker.csv
    log_end_ns = np.round((removed + late + rng.uniform(0.01, 0.05, nw)) * 1e6).astype(np.int64)
    log_end_ns *= 1000
    # pthread_self() of the main thread (event loop) and of the offload thread: addresses above
    # the worker's task threads, ending in 0x740 where task thread ids end in 0x640 (0x641 when
    # wide): never equal to any task thread of any worker.
    top = p.thread_ids[:: p.threads] & np.uint64(0x7FFF_FFFF_FFFF_F000)
    main_thread = (top + np.uint64(0x800_0000)) | np.uint64(0x740)
    return _Processes(
        jobid=jobid,
        uid=uid,
        pid=pid,
        hostnames=[host_names[w // 4] for w in range(nw)],
        log_start_ns=log_start_ns,
        log_end_ns=log_end_ns,
        late=late,
        removed=removed,
        main_thread=main_thread,
        offload_thread=main_thread + np.uint64(0x80_1000),
        log_names=[
            log_file_name(_IO_USER, "python3", jobid, int(pid[w]), int(log_start_ns[w]) / 1e9)
            for w in range(nw)
        ],
    )


@dataclass
class _Segs:
    """DXT segments as columns (times: worker clock, float epoch seconds)."""

    worker: np.ndarray
    task: np.ndarray  # -1: process-level I/O
    pthread: np.ndarray
    path: np.ndarray
    write: np.ndarray
    length: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @classmethod
    def concat(cls, a: _Segs, b: _Segs) -> _Segs:
        return cls(*(np.concatenate([x, y]) for x, y in zip(a.columns(), b.columns(), strict=True)))

    def columns(self) -> tuple[np.ndarray, ...]:
        return (
            self.worker,
            self.task,
            self.pthread,
            self.path,
            self.write,
            self.length,
            self.start,
            self.end,
        )

    def sorted(self) -> _Segs:
        """By (worker, start)."""
        order = np.lexsort((self.start, self.worker))
        return _Segs(*(a[order] for a in self.columns()))


def _task_io(
    p: _Plan, rng: np.random.Generator, io_fraction: float, io_files: int
) -> tuple[np.ndarray, _Segs]:
    """Which tasks do I/O, read or write, on which file, how many segments, when."""
    n = p.n
    dur = p.end - p.start
    eligible = np.flatnonzero((dur >= _IO_MIN_DURATION) & ~_under_failed_attempts(p))
    k = min(int(round(io_fraction * n)), len(eligible))
    tasks = np.sort(rng.choice(eligible, size=k, replace=False)) if k else eligible[:0]
    read_prefix = np.isin(
        np.asarray(p.prefix_names.to_pylist(), dtype=object), list(_IO_READ_PREFIXES)
    )
    sink = _n_dependents(p.dep1, p.dep2)[tasks] == 0
    coin = rng.random(k) < 0.5
    t_write = ~read_prefix[p.prefix_code[tasks]] & (sink | coin)
    t_file = rng.integers(0, io_files, k)
    nseg = rng.choice(len(_IO_SEGMENTS_P), size=k, p=_IO_SEGMENTS_P) + 1
    m = int(nseg.sum())
    owner = np.repeat(np.arange(k), nseg)
    j = np.arange(m) - np.repeat(np.cumsum(nseg) - nseg, nseg)
    tk = tasks[owner]
    d = dur[tk]
    edge = np.minimum(_IO_EDGE_SHARE * d, _IO_EDGE_MAX)
    slot = (d - 2 * edge) / nseg[owner]
    seg_len = slot * rng.uniform(0.15, 0.85, m)
    # Segments of a task follow one another, each inside its own slot of the inner window.
    t_start = p.start[tk] + (edge + j * slot + (slot - seg_len) * rng.random(m))
    bandwidth = np.exp(rng.normal(np.log(8e8), 0.7, m))
    return tasks, _Segs(
        worker=(p.thread[tk] // p.threads).astype(np.int64),
        task=tk,
        pthread=p.thread_ids[p.thread[tk]],
        path=t_file[owner].astype(np.int64),
        write=t_write[owner],
        length=np.maximum(np.floor(seg_len * bandwidth), 512).astype(np.int64),
        start=t_start,
        end=t_start + seg_len,
    )


def _paths(p: _Plan, rng: np.random.Generator, io_files: int) -> tuple[list[str], np.ndarray]:
    """Every file path: the data files, the start-up files, each worker's log file, then each
    worker's spill files (how many per worker: the second value)."""
    width = max(4, len(str(io_files)))
    paths = [
        f"/lus/grand/projects/{_IO_PROJECT}/data/part-{i + 1:0{width}d}.h5" for i in range(io_files)
    ]
    paths += list(_IO_STARTUP_FILES)
    paths += [
        f"/lus/grand/projects/{_IO_PROJECT}/logs/worker-{a.split('//')[-1].replace(':', '-')}.log"
        for a in p.addresses.to_pylist()
    ]
    n_spill = rng.integers(0, 4, p.workers)
    spill_dir = _hex(rng.integers(0, 256, size=(p.workers, 4), dtype=np.uint8))
    for w in range(p.workers):
        d8 = spill_dir[w].tobytes().decode()
        paths += [
            f"/local/scratch/dask-scratch-space/worker-{d8}/storage/spill-{i}.bin"
            for i in range(int(n_spill[w]))
        ]
    return paths, n_spill


def _process_io(
    p: _Plan,
    rng: np.random.Generator,
    procs: _Processes,
    n_spill: np.ndarray,
    io_files: int,
) -> _Segs:
    """Process-level I/O on threads that run no task: start-up reads on the main thread, spills
    on the offload thread during the run, log writes on the main thread at the end."""
    n_startup = len(_IO_STARTUP_FILES)
    pw: list[np.ndarray] = []
    pth: list[np.ndarray] = []
    ppath: list[np.ndarray] = []
    pwrite: list[np.ndarray] = []
    pstart: list[np.ndarray] = []
    plen: list[np.ndarray] = []
    spill_at = io_files + n_startup + p.workers  # the first spill file (see _paths)
    t_run0 = float(p.start.min()) if p.n else float(p.worker_added.max())
    for w in range(p.workers):  # a handful of rows per worker (<= 192 workers): not the hot path
        ns = int(rng.integers(10, n_startup + 1))
        files = np.sort(rng.choice(n_startup, size=ns, replace=False)) + io_files
        t0 = int(procs.log_start_ns[w]) / 1e9
        st = np.sort(rng.uniform(t0 + 0.05, float(p.worker_added[w]) - 0.05, ns))
        nl = int(rng.integers(2, 5))
        lt = np.sort(rng.uniform(p.end_time + 0.05, float(procs.removed[w]) - 0.02, nl))
        ks = int(n_spill[w])
        sp = np.sort(rng.uniform(t_run0, max(p.end_time - 0.05, t_run0), ks))
        pw.append(np.full(ns + nl + ks, w, np.int64))
        pth.append(
            np.concatenate(
                [
                    np.full(ns + nl, procs.main_thread[w], np.uint64),
                    np.full(ks, procs.offload_thread[w]),
                ]
            )
        )
        ppath.append(
            np.concatenate(
                [
                    files,
                    np.full(nl, io_files + n_startup + w, np.int64),
                    spill_at + np.arange(ks, dtype=np.int64),
                ]
            )
        )
        spill_at += ks
        pwrite.append(np.r_[np.zeros(ns, bool), np.ones(nl + ks, bool)])
        pstart.append(np.concatenate([st, lt, sp]))
        plen.append(
            np.concatenate(
                [
                    np.exp(rng.normal(np.log(30_000), 1.0, ns)),
                    rng.uniform(80, 400, nl),
                    np.exp(rng.normal(np.log(5e7), 0.8, ks)),
                ]
            ).astype(np.int64)
        )
    p_start = np.concatenate(pstart)
    p_len = np.concatenate(plen)
    return _Segs(
        worker=np.concatenate(pw),
        task=np.full(len(p_start), -1, np.int64),
        pthread=np.concatenate(pth),
        path=np.concatenate(ppath),
        write=np.concatenate(pwrite),
        length=p_len,
        start=p_start,
        end=p_start + rng.uniform(2e-5, 3e-4, len(p_start)) + p_len / 2e9,
    )


def _sequential_offsets(segs: _Segs, n_workers: int) -> np.ndarray:
    """Offsets: each (file, read|write) is accessed sequentially in time order, across tasks;
    process files per process."""
    group = (segs.path * 2 + segs.write) * (n_workers + 1) + np.where(
        segs.task < 0, segs.worker + 1, 0
    )
    o = np.lexsort((segs.start, group))
    cum = np.cumsum(segs.length[o]) - segs.length[o]
    g = group[o]
    head = np.r_[True, g[1:] != g[:-1]]
    cum -= np.maximum.accumulate(np.where(head, cum, 0))
    offset = np.empty_like(cum)
    offset[o] = cum
    return offset


def _write_darshan(run: Path, p: _Plan, io: _IOPlan) -> None:
    """One Darshan log (96-byte DXT layout, POSIX counters) per worker process."""
    import pandas as pd

    from metaprov.synthetic.darshan import write_darshan_log

    paths = np.asarray(io.paths, dtype=object)
    ops = np.asarray(["read", "write"], dtype=object)
    b = io.bounds
    for w in range(p.workers):
        sl = slice(int(b[w]), int(b[w + 1]))
        sec, nsec = divmod(int(io.log_start_ns[w]), 1_000_000_000)
        esec, ensec = divmod(int(io.log_end_ns[w]), 1_000_000_000)
        # Relative to the recorded start, on Darshan's (late) clock; the integer second is
        # taken off first so the subtraction is exact.
        late = float(io.late[w]) - nsec / 1e9
        segs = pd.DataFrame(
            {
                "path": paths[io.path[sl]],
                "op": ops[io.write[sl].astype(np.int64)],
                "offset": io.offset[sl],
                "length": io.length[sl],
                "start_rel": (io.start[sl] - sec) + late,
                "end_rel": (io.end[sl] - sec) + late,
                "pthread": pd.array(io.pthread[sl], dtype="UInt64"),
            }
        )
        write_darshan_log(
            run / io.log_names[w],
            segs,
            start=(sec, nsec),
            end=(esec, ensec),
            cmdline=_IO_CMD,
            uid=io.uid,
            jobid=io.jobid,
            nprocs=1,
            hostname=io.hostnames[w],
            mounts=_IO_MOUNTS,
            layout=96,
        )


def _io_truth(p: _Plan, io: _IOPlan, io_fraction: float, io_files: int) -> dict[str, Any]:
    """The I/O ground truth: what ``link_io`` must find, and the answers of the I/O questions."""
    on_task = io.task >= 0
    n_files = io_files

    def totals(mask: np.ndarray) -> dict[str, int]:
        w, ln = io.write[mask], io.length[mask]
        return {
            "segments": int(mask.sum()),
            "reads": int((~w).sum()),
            "writes": int(w.sum()),
            "bytes_read": int(ln[~w].sum()),
            "bytes_written": int(ln[w].sum()),
            "files": int(len(np.unique(io.path[mask]))),
            "files_read": int(len(np.unique(io.path[mask][~w]))),
            "files_written": int(len(np.unique(io.path[mask][w]))),
        }

    task_io = totals(on_task)
    tk, tw = io.task[on_task], io.write[on_task]
    task_io["tasks"] = io.io_tasks
    task_io["tasks_read"] = int(len(np.unique(tk[~tw])))
    task_io["tasks_written"] = int(len(np.unique(tk[tw])))

    # per prefix (Dask's key_split) and per data file, from the task segments
    names = p.prefix_names.to_pylist()
    code = p.prefix_code[tk].astype(np.int64)
    ln = io.length[on_task]
    npx = len(names)
    ntask = np.bincount(p.prefix_code[np.unique(tk)].astype(np.int64), minlength=npx)
    by_prefix = {}
    for c in range(npx):
        sel = code == c
        if not sel.any():
            continue
        by_prefix[names[c]] = {
            "tasks": int(ntask[c]),
            "segments": int(sel.sum()),
            "reads": int((sel & ~tw).sum()),
            "writes": int((sel & tw).sum()),
            "bytes_read": int(ln[sel & ~tw].sum()),
            "bytes_written": int(ln[sel & tw].sum()),
        }
    fp = io.path[on_task]
    reads_f = np.bincount(fp[~tw], minlength=n_files)
    writes_f = np.bincount(fp[tw], minlength=n_files)
    br_f = np.bincount(fp[~tw], weights=ln[~tw], minlength=n_files)
    bw_f = np.bincount(fp[tw], weights=ln[tw], minlength=n_files)
    # distinct (file, read|write, task): tasks that read / wrote each file
    pairs = np.unique((fp * 2 + tw) * np.int64(p.n) + tk)
    pair_file, pair_write = pairs // p.n // 2, (pairs // p.n) % 2 == 1
    treads_f = np.bincount(pair_file[~pair_write], minlength=n_files)
    twrites_f = np.bincount(pair_file[pair_write], minlength=n_files)
    by_file = {
        io.paths[f]: {
            "reads": int(reads_f[f]),
            "writes": int(writes_f[f]),
            "bytes_read": int(br_f[f]),
            "bytes_written": int(bw_f[f]),
            "tasks_read": int(treads_f[f]),
            "tasks_written": int(twrites_f[f]),
        }
        for f in range(n_files)
        if reads_f[f] or writes_f[f]
    }
    counts = np.bincount(io.worker, minlength=p.workers)
    tcounts = np.bincount(io.worker[on_task], minlength=p.workers)
    addresses = p.addresses.to_pylist()
    logs = [
        {
            "log": io.log_names[w],
            "worker": addresses[w],
            "pid": int(io.pid[w]),
            "hostname": io.hostnames[w],
            "clock_late_s": float(io.late[w]),
            "main_thread": int(io.main_thread[w]),
            "segments": int(counts[w]),
            "task_segments": int(tcounts[w]),
        }
        for w in range(p.workers)
    ]
    n_task, n_proc = int(on_task.sum()), int((~on_task).sum())
    return {
        "io_fraction": io_fraction,
        "io_files": io_files,
        "logs": logs,
        "segments": int(len(io.task)),
        # what metaprov.link_io must report: every task segment linked to its task, every other
        # segment attributed to its process
        "link": {"linked": n_task, "process": n_proc, "ambiguous": 0, "unlinked": 0},
        "task": task_io,
        "process": totals(~on_task),
        "by_prefix": by_prefix,
        "by_file": by_file,
    }
