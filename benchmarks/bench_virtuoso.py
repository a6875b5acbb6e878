"""Loading into Virtuoso: metaprov through the Graph Store endpoint vs Virtuoso's own bulk loader,
on the same quads, side by side.

Input: the number of tasks N of a seeded synthetic run (:func:`metaprov.synthetic.generate_run`),
mapped once to PROV and written as N-Triples. Output: a table on stdout and
``benchmarks/results/bench_virtuoso_<N>.json``. A fresh Virtuoso 7 (tests/virtuoso_server.py, the
recipe of docs/store.md) is started in a temporary directory on 127.0.0.1 for each way, so neither
inherits the other's caches:

- ``bulk``: Virtuoso's bulk loader, as its manual gives it: ``ld_dir`` on the file, then
  ``rdf_loader_run()`` and ``checkpoint`` through ``isql-vt``;
- ``endpoint``: ``EndpointStore.load_chunks`` (HTTP Digest; pieces of ``MIB`` MiB: one PUT, then
  POSTs, ``N`` of them in flight, for each ``--ways MIB:N``), including metaprov's check that the
  server holds every triple afterwards.

Run it under ``flock /tmp/metaprov-bench.lock`` on a shared machine; the load average is printed.

Example::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_virtuoso.py --n 20000 --ways 32:1 8:2 4:2 4
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

GRAPH = "https://w3id.org/metaprov/id/run/bench/graph"


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def quads(n: int, work: Path) -> tuple[Path, int]:
    """The synthetic run's graph as one N-Triples file; (path, triples)."""
    import metaprov
    from metaprov.mapping import to_prov
    from metaprov.synthetic import generate_run
    from metaprov.write import iter_ntriples

    run = work / "run"
    generate_run(run, n_tasks=n, seed=1)
    graph = to_prov(metaprov.read_run(run, darshan=False))
    path = work / "load" / "run.nt"
    path.parent.mkdir()
    triples = 0
    with open(path, "wb") as fh:
        for chunk in iter_ntriples(graph):
            fh.write(chunk)
            triples += chunk.count(b"\n")
    return path, triples


def bulk(path: Path, triples: int, work: Path) -> dict:
    from virtuoso_server import start

    server = start(work / "bulk", buffers=200_000, allowed=path.parent)
    try:
        t0 = time.perf_counter()
        server.isql(
            f"ld_dir('{path.parent}', '{path.name}', '{GRAPH}')",
            "rdf_loader_run()",
            "checkpoint",
        )
        seconds = time.perf_counter() - t0
        held = _count(server)
    finally:
        server.stop()
    return {"way": "bulk (ld_dir + rdf_loader_run)", "seconds": seconds, "held": held}


def _count(server) -> int:  # noqa: ANN001
    from metaprov.store import EndpointStore

    os.environ["METAPROV_ENDPOINT_USER"] = "dba"
    os.environ["METAPROV_ENDPOINT_PASSWORD"] = "dba"
    return EndpointStore(server.query_url).count(GRAPH)


def endpoint(path: Path, triples: int, work: Path, chunk_mb: int, concurrency: int) -> dict:
    from virtuoso_server import start

    from metaprov.store import EndpointStore

    server = start(work / f"endpoint-{chunk_mb}-{concurrency}", buffers=200_000)
    try:
        os.environ["METAPROV_ENDPOINT_USER"] = "dba"
        os.environ["METAPROV_ENDPOINT_PASSWORD"] = "dba"
        st = EndpointStore(server.query_url, chunk_bytes=chunk_mb << 20, concurrency=concurrency)

        def chunks():  # noqa: ANN202
            with open(path, "rb") as fh:
                while block := fh.read(8 << 20):
                    rest = fh.readline()
                    yield block + rest

        t0 = time.perf_counter()
        report = st.load_chunks(GRAPH, chunks())
        seconds = time.perf_counter() - t0
        server.isql("checkpoint")
        held = st.count(GRAPH)
    finally:
        server.stop()
    return {
        "way": f"metaprov endpoint, {chunk_mb} MiB pieces, {concurrency} in flight",
        "seconds": seconds,
        "held": held,
        "requests": report.requests,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=30000, help="tasks of the synthetic run")
    ap.add_argument(
        "--ways",
        nargs="+",
        default=["32:1", "8:2", "4:2"],
        help="MIB:N: pieces of MIB MiB, N requests in flight (default: 32:1 8:2 4:2)",
    )
    args = ap.parse_args(argv)
    print(f"load average at start: {loadavg()}")
    with tempfile.TemporaryDirectory(prefix="metaprov-bench-virtuoso-") as tmp:
        work = Path(tmp)
        path, triples = quads(args.n, work)
        size = path.stat().st_size
        rows = [bulk(path, triples, work)]
        for way in args.ways:
            mib, n = (int(x) for x in way.split(":"))
            rows.append(endpoint(path, triples, work, mib, n))
    print(f"load average at end: {loadavg()}")
    base = rows[0]["seconds"]
    print(f"{triples:,} triples ({size / 1e6:.1f} MB N-Triples), N = {args.n:,} tasks")
    for r in rows:
        r["triples"] = triples
        r["rate"] = triples / r["seconds"]
        r["vs_bulk"] = r["seconds"] / base
        assert r["held"] == triples, r
        print(
            f"{r['way']:<45} {r['seconds']:8.2f} s {r['rate']:>10,.0f} triples/s {r['vs_bulk']:5.2f}x"
        )
    out = ROOT / "benchmarks" / "results" / f"bench_virtuoso_{args.n}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
