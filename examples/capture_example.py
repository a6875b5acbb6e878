"""Produce a small, real Dask run record with metaprov's capture (the data in ``examples/run``).

Input: nothing but this script; it starts its own LocalCluster (2 worker processes x 2 threads).
Output: a run directory in the Mofka-Dask CSV schema (plus the capture's extra files).

The workload is small but has everything provenance should show: tasks that write and read files,
dependencies, data moving between the two workers, one task that fails for good, one that fails
once and succeeds on its retry, and a dask.array reduction (tuple keys)::

    python examples/capture_example.py examples/run --overwrite
    metaprov inspect examples/run

It records with ``anonymous=True`` (no host or user names in the files, so the bundled example can
be published) and with the task facts on (``task_function.csv``, ``worker_result.csv``: the
function of every task group, the result or exception of every attempt). After recording it checks
that this machine's host name and user name appear in none of the files it wrote, and fails if
they do.
"""

from __future__ import annotations

import argparse
import csv
import getpass
import hashlib
import io
import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import dask.array as da
from distributed import Client, LocalCluster

from metaprov.capture import record


def measure(i: int, workdir: str) -> dict:
    """Write a sample file, read it back, and describe it (file I/O on a worker thread)."""
    path = Path(workdir) / f"sample-{i}.dat"
    path.write_bytes(bytes((i * 7 + j) % 256 for j in range(1024 * (i + 1))))
    data = path.read_bytes()
    time.sleep(0.01)  # long enough for the two threads of a worker to overlap
    return {"name": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def pair(a: dict, b: dict) -> dict:
    """Combine two measurements (its inputs sit on different workers: a transfer)."""
    return {"names": [a["name"], b["name"]], "bytes": a["bytes"] + b["bytes"]}


def total(*pairs: dict) -> int:
    """Sum all pairs."""
    return sum(p["bytes"] for p in pairs)


def normalise(value: int, marker: str) -> float:
    """Fails the first time it runs (a marker file remembers), succeeds on the retry."""
    if not os.path.exists(marker):
        Path(marker).write_text("attempt 1 failed\n")
        raise RuntimeError("transient failure (first attempt)")
    return value / 1024


def validate(value: int) -> None:
    """Always fails: the erred task of the run."""
    raise ValueError(f"total {value} is not a multiple of 1000")


def leaks(directory: Path) -> list[str]:
    """Where the files under ``directory`` name this machine's host or user.

    Looks at values only (every CSV cell, every JSON string value, not the JSON keys), split into
    words at anything but letters, digits, ``_``, ``.`` and ``-``: ``tcp://vm:8786`` names host
    ``vm``, ``/home/ann/x`` names user ``ann``; the key ``"root"`` does not name user ``root``."""
    names = {"host": socket.gethostname()}
    try:
        names["user"] = getpass.getuser()
    except Exception:  # no passwd entry (containers)
        pass

    def strings(value: object) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    found = []
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            values = list(strings(json.loads(text)))
        else:
            values = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
        words = {w for v in values for w in re.split(r"[^A-Za-z0-9_.-]+", v)}
        found += [
            f"{what} {name!r} in {path.relative_to(directory)}"
            for what, name in names.items()
            if name in words
        ]
    return found


def workload(
    client: Client, directory: Path, *, overwrite: bool = False, anonymous: bool = True
) -> dict:
    """Run the workload under capture on a client with two workers; return the capture summary."""
    workdir = tempfile.mkdtemp(prefix="metaprov-example-")
    w0, w1 = sorted(client.scheduler_info()["workers"])[:2]
    with record(client, directory, overwrite=overwrite, anonymous=anonymous) as cap:
        # Measurements alternate between the two workers ...
        samples = [
            client.submit(measure, i, workdir, key=("measure", i), workers=[(w0, w1)[i % 2]])
            for i in range(8)
        ]
        # ... so each pair needs one input from the other worker.
        pairs = [
            client.submit(pair, samples[i], samples[i + 1], key=("pair", i // 2), workers=[w0])
            for i in range(0, 8, 2)
        ]
        grand = client.submit(total, *pairs, key="total", workers=[w1])
        marker = os.path.join(workdir, "marker")
        norm = client.submit(normalise, grand, marker, key="normalise", retries=1)
        check = client.submit(validate, grand, key="validate")
        arr = client.compute(da.arange(64, chunks=16).sum())
        print(f"total bytes {grand.result()}, normalised {norm.result()}, array sum {arr.result()}")
        try:
            check.result()
        except ValueError as exc:
            print("validate failed as intended:", exc)
    print(f"run written to {cap.directory}")
    for name, rows in sorted(cap.files.items()):
        print(f"  {name:28s} {rows:5d} rows")
    return cap.summary


def run(directory: Path, *, overwrite: bool = False, anonymous: bool = True) -> dict:
    """Start a LocalCluster, run the workload under capture, return the capture summary."""
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        summary = workload(client, directory, overwrite=overwrite, anonymous=anonymous)
    if anonymous and (found := leaks(directory)):
        raise SystemExit("anonymous capture still names this machine: " + "; ".join(found))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="run directory to write, e.g. examples/run")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier capture there")
    parser.add_argument(
        "--named", action="store_true", help="keep host and user names (default: anonymous)"
    )
    args = parser.parse_args()
    run(args.directory, overwrite=args.overwrite, anonymous=not args.named)


if __name__ == "__main__":
    main()
