"""Reading a run's small files (configurations, job logs, ``metaprov-run.json``) whatever sits
under their names.

Input: a path in a run directory (untrusted: it may be a FIFO, a link to ``/dev/zero``, a
sparse file of gigabytes). Output: at most ``limit`` bytes of a regular file and its size, read
without blocking on a FIFO and without reading past the limit; anything else is an ``OSError``
the caller reports (never a hang, never gigabytes in memory).
"""

from __future__ import annotations

import errno
import os
import stat


def read_head(path: str | os.PathLike[str], limit: int) -> tuple[bytes, int]:
    """The first ``limit`` bytes of the regular file ``path`` (links followed) and its size.

    Raises:
        OSError: it cannot be opened or read, or it is not a regular file (a FIFO, a device, a
            folder: ``EINVAL``, saying what it is).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})", str(path))
        chunks = []
        left = limit
        while left > 0:
            piece = os.read(fd, min(left, 1 << 20))
            if not piece:
                break
            chunks.append(piece)
            left -= len(piece)
        return b"".join(chunks), st.st_size
    finally:
        os.close(fd)


def read_small(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole regular file ``path`` when it holds at most ``limit`` bytes.

    Raises:
        OSError: as :func:`read_head`, and ``EFBIG`` naming the limit for a larger file.
    """
    data, size = read_head(path, limit + 1)
    if size > limit or len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit:,} bytes ({size:,}); not read", str(path))
    return data


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


__all__ = ["read_head", "read_small"]
