"""The SPARQL engine without a network: queries run where no connection can be opened.

Input: a function that runs a query on pyoxigraph (and reads its answer), or the command line
of Oxigraph's server. Output: the function's result, computed on a worker thread that cannot
reach the network; the server's command line wrapped so that the server cannot either.

Why: a federated query (``SERVICE <url>``) makes the engine fetch ``url``. metaprov refuses
such queries before they reach the engine (:func:`metaprov.store.sparql.checked_query`), and
this module is the second wall behind that refusal: should a query ever reach the engine with a
``SERVICE`` the check did not see, the engine's connection fails (``Permission denied``) instead
of reaching the URL.

How (Linux, x86-64 and arm64): a seccomp filter, installed with ``prctl(PR_SET_NO_NEW_PRIVS)``
and ``seccomp(SECCOMP_SET_MODE_FILTER)``, no privilege needed.

* Engine threads (:func:`offline`): a filter on the worker thread only (seccomp filters belong
  to a thread and the threads it starts) refuses ``socket()`` for IPv4, IPv6 and packet sockets,
  ``connect()`` and ``io_uring_setup()``. The rest of the process keeps its network (``query
  --endpoint``, the HTTP servers). The workers have a large stack (:data:`STACK_BYTES`): the
  engine's parser and planner recurse once per nested group, joined pattern or path step.
* Oxigraph's server (:func:`offline_command`): this file is run as a script that installs a
  filter refusing ``connect()`` and ``io_uring_setup()`` (the server still binds, listens and
  accepts) and then executes the server, which keeps the filter. ``RUST_MIN_STACK`` gives the
  server's request threads the same large stack.

Elsewhere (other systems or architectures, or a kernel without seccomp) the queries still run
on the workers, and :func:`network_blocked` says False: the refusal before the engine is then
the only wall.

This file imports nothing but the standard library (it runs as a script with ``python -I -S``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import queue
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Stack of an engine thread (address space only: pages are used as the engine recurses).
STACK_BYTES = 512 << 20
#: Engine threads (queries from several HTTP clients run side by side).
WORKERS = 4

# Architecture -> (AUDIT_ARCH value, socket, connect, io_uring_setup, seccomp) syscall numbers.
_ARCH = {
    "x86_64": (0xC000003E, 41, 42, 425, 317),
    "amd64": (0xC000003E, 41, 42, 425, 317),
    "aarch64": (0xC00000B7, 198, 203, 425, 277),
    "arm64": (0xC00000B7, 198, 203, 425, 277),
}
_AF_INET, _AF_INET6, _AF_PACKET = 2, 10, 17
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_X32_BIT = 0x40000000
# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06


def _stmt(code: int, k: int) -> bytes:
    return struct.pack("HBBI", code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def _program(*, sockets: bool) -> bytes:
    """The BPF program: refuse network syscalls with EACCES, allow everything else.

    ``sockets``: also refuse creating IPv4/IPv6/packet sockets (engine threads; a server must
    still create its listening socket, so its filter refuses only ``connect``).
    """
    arch, nr_socket, nr_connect, nr_uring, _ = _ARCH[platform.machine().lower()]
    deny = _RET_ERRNO | errno.EACCES
    prog = [
        _stmt(_LD_W_ABS, 4),  # seccomp_data.arch
        _jump(_JEQ_K, arch, 1, 0),
        _stmt(_RET_K, _RET_KILL_PROCESS),  # another ABI than the one the numbers are for
        _stmt(_LD_W_ABS, 0),  # seccomp_data.nr
        _jump(_JGE_K, _X32_BIT, 0, 1),  # x32 system calls on x86-64
        _stmt(_RET_K, deny),
        _jump(_JEQ_K, nr_connect, 0, 1),
        _stmt(_RET_K, deny),
        _jump(_JEQ_K, nr_uring, 0, 1),
        _stmt(_RET_K, deny),
    ]
    if sockets:
        prog += [
            _jump(_JEQ_K, nr_socket, 0, 5),
            _stmt(_LD_W_ABS, 16),  # seccomp_data.args[0] (low 32 bits): the address family
            _jump(_JEQ_K, _AF_INET, 2, 0),
            _jump(_JEQ_K, _AF_INET6, 1, 0),
            _jump(_JEQ_K, _AF_PACKET, 0, 1),
            _stmt(_RET_K, deny),
        ]
    prog.append(_stmt(_RET_K, _RET_ALLOW))
    return b"".join(prog)


def install_filter(*, sockets: bool = True) -> None:
    """Install the network filter on the calling thread (and the threads it will start).

    Raises:
        OSError: the system has no seccomp, or not for this architecture.
    """
    if sys.platform != "linux" or platform.machine().lower() not in _ARCH:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {sys.platform}/{platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    code = _program(sockets=sockets)

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    nr_seccomp = _ARCH[platform.machine().lower()][4]
    if libc.syscall(nr_seccomp, _SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(prog)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")


def _drop_locals(exc: BaseException) -> None:
    """Free the locals of the frames an exception's traceback holds, on this thread: pyoxigraph
    answers may only be dropped on the thread that made them."""
    import traceback

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


class TimedOut(Exception):
    """A query ran longer than its time limit: its caller stopped waiting (:func:`offline`)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the query ran longer than {seconds:g} s")
        self.seconds = seconds


class EngineBusy(Exception):
    """Too many queries past their time limit are still running: no more is started."""


#: Most queries past their time limit left running at once (each keeps one core busy until
#: the engine ends it); beyond them, a query with a limit is refused at once.
MAX_ABANDONED = WORKERS


class _Job:
    __slots__ = ("abandoned", "box", "done", "fn")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.box: list[tuple[bool, Any]] = []
        self.done = threading.Event()
        self.abandoned = False


class _Pool:
    """Engine threads, each with the network filter and a large stack, started on first use.

    A query past its time limit is abandoned, not stopped (pyoxigraph cannot interrupt a
    query): its thread goes on until the engine ends it, then exits, and a new thread takes
    its place at once, so the other queries never wait for it."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.started = 0
        self.blocked: bool | None = None
        self.reason = ""
        self.abandoned = 0  # queries past their limit still running
        self._serial = 0

    def _work(self, ready: threading.Event) -> None:
        try:
            install_filter(sockets=True)
            blocked, reason = True, ""
        except (OSError, AttributeError, ValueError) as exc:
            blocked, reason = False, str(exc)
        with self.lock:
            if self.blocked is None or not blocked:
                self.blocked, self.reason = blocked, reason
        ready.set()
        while True:
            job = self.jobs.get()
            try:
                job.box.append((True, job.fn()))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                _drop_locals(exc)
                job.box.append((False, exc))
            with self.lock:
                job.done.set()
                gone = job.abandoned
                if gone:
                    self.abandoned -= 1
            if gone:
                # no one waits for it: dropped here (pyoxigraph answers may only be dropped on
                # the thread that made them); a new thread already took this one's place
                job.box.clear()
                return
            del job

    def _spawn(self, n: int) -> None:
        """Start ``n`` engine threads (each with the large stack where possible) and wait until
        each has its filter."""
        before = threading.stack_size()
        waits = []
        try:
            big = True
            for _ in range(n):
                ready = threading.Event()
                self._serial += 1
                name = f"metaprov-sparql-{self._serial}"
                try:
                    threading.stack_size(STACK_BYTES if big else 0)
                    threading.Thread(
                        target=self._work, args=(ready,), name=name, daemon=True
                    ).start()
                except (ValueError, RuntimeError):  # no such stack here: the default one
                    big = False
                    threading.stack_size(0)
                    threading.Thread(
                        target=self._work, args=(ready,), name=name, daemon=True
                    ).start()
                waits.append(ready)
        finally:
            threading.stack_size(before)
        for ready in waits:
            ready.wait()

    def start(self) -> None:
        with self.lock:
            if self.started == os.getpid():
                return
            # first use, or a forked child (threads do not survive a fork): start the workers
            self.started = os.getpid()
            self.jobs = queue.SimpleQueue()
            self.abandoned = 0
        self._spawn(WORKERS)

    def run(self, fn: Callable[[], T], seconds: float | None = None) -> T:
        self.start()
        job = _Job(fn)
        if seconds is not None:
            with self.lock:
                if self.abandoned >= MAX_ABANDONED:
                    raise EngineBusy(
                        f"{self.abandoned} earlier queries past their time limit are still running"
                    )
        self.jobs.put(job)
        if not job.done.wait(seconds):
            with self.lock:
                if not job.done.is_set():
                    job.abandoned = True
                    self.abandoned += 1
            if job.abandoned:
                self._spawn(1)  # its place in the pool
                raise TimedOut(seconds or 0.0)
        ok, value = job.box[0]
        if ok:
            return value  # type: ignore[no-any-return]
        raise value


_POOL = _Pool()


def offline(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` computed on an engine thread (no network, large stack).

    Run there everything that drives pyoxigraph's query engine: the ``query`` call and the
    reading or serialising of its answer (a ``SELECT`` answer is computed as it is read).
    The exception ``fn`` raises is raised here.
    """
    return offline_within(None, fn, *args, **kwargs)


def offline_within(seconds: float | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """:func:`offline`, waiting at most ``seconds`` (None: no limit) for the result.

    Raises:
        TimedOut: ``fn`` did not end in time. Its thread is left to finish (the engine cannot be
            interrupted; a ``fn`` that checks the time itself, between the rows it reads,
            ends sooner) and another takes its place.
        EngineBusy: with a limit, while :data:`MAX_ABANDONED` such threads still run.
    """
    if threading.current_thread().name.startswith("metaprov-sparql-"):
        return fn(*args, **kwargs)  # already on one (a nested call)
    return _POOL.run(lambda: fn(*args, **kwargs), seconds)


def network_blocked() -> bool:
    """Do the engine threads run without network here (seccomp filter installed)?"""
    _POOL.start()
    return bool(_POOL.blocked)


def offline_command(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``argv`` (Oxigraph's server) with no outgoing
    connection, and a large stack for its threads.

    Returns ``argv`` itself (with the stack setting) where no filter can be installed.
    """
    env = dict(os.environ)
    env["RUST_MIN_STACK"] = str(STACK_BYTES)
    if sys.platform != "linux" or platform.machine().lower() not in _ARCH:
        return list(argv), env
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), "--exec", *argv], env


def _main(args: list[str]) -> int:
    """``python offline.py --exec PROGRAM ARGS...``: filter, then become PROGRAM."""
    if len(args) < 2 or args[0] != "--exec":
        print("usage: offline.py --exec PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    try:
        install_filter(sockets=False)
    except OSError as exc:
        print(f"metaprov: cannot take the network away from {args[1]}: {exc}", file=sys.stderr)
    os.execv(args[1], args[1:])  # noqa: S606 - the fixed server program, no shell
    return 127  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = [
    "MAX_ABANDONED",
    "STACK_BYTES",
    "EngineBusy",
    "TimedOut",
    "install_filter",
    "network_blocked",
    "offline",
    "offline_command",
    "offline_within",
]
