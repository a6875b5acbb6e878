"""Live provenance: a real LocalCluster run recorded by the capture while ``serve --follow`` runs.

Two parts (``--part cluster``, ``--part refresh``, default both):

**cluster** — a LocalCluster (2 worker processes x 2 threads, 127.0.0.1) runs ``--waves``
waves of ``--per-wave`` small tasks plus a reduction per wave, one wave every ``--pause``
seconds (defaults: 60 waves x 200 tasks + 21 = 13,260 tasks over more than 60 s), recorded with
``metaprov.capture.record`` while ``metaprov serve --follow RUN --interval I`` (a separate
process) follows the run into an embedded store and serves it. Meanwhile:

- a poller asks the endpoint every 0.25 s how many task executions the run in progress holds
  (and the snapshot time of the refresh answering, ``mp:liveUpdated``); the *staleness* of wave
  k is the first poll that counts all of its executions minus the time the client saw the wave
  finish (what a user waits for a finished task to answer a query), split into the wait for a
  snapshot (the capture's flush, then the next refresh to start) and the refresh that read it;
  checked against two bounds: two intervals + the refresh that read the wave (the issue's
  wording), and flush + max(interval, the refresh in progress when the rows reached disk) +
  the refresh that read them (the bound that holds when refreshes outlast the interval);
- every ``--snapshot-every`` waves the packaged questions ``runs`` and ``slowest-tasks`` are
  asked through the endpoint (``metaprov query --endpoint`` does the same): their task counts
  must only grow;
- after the run, the served graph is compared with ``metaprov export`` of the run directory
  (N-Quads, sorted, in the store's literal forms): they must be equal.

**refresh** — the cost of a refresh on synthetic runs of ``--sizes`` tasks (default 10^4 and
10^5) replayed by the tests' writer: the first refresh (90 % of the rows, everything inserted),
an append refresh (the last 10 % appended), an unchanged refresh (only the state triples move),
each split into conversion (read + map + N-Triples) / diff / store, and the process's peak
memory; ``--methods rows columnar sets``: the real ``follow`` loop (``rows``: after the first
refresh only the rows that changed are formatted, metaprov.live.rows; ``columnar``: every
refresh formats and keys the whole run, ``follow(incremental=False)``), and the diff of two
Python sets of lines it used before (one process per size and method). ``--part final-swap``: the final
swap (provisional graph -> the export's graph) into an embedded store, as ``follow`` does it
(bulk-loaded, then the provisional graph removed), and ``metaprov load`` of the same run beside it;
``--removals batched single``: the provisional graph removed as ``follow`` removes it (transactions
of at most 100,000 quads) and, in a store of its own, as it did before (one ``DELETE WHERE``
transaction, then ``remove_graph``), each with the process's memory growth while it removes.

``--part convert``: the full conversion and the row path (metaprov.live.rows) on the same two
snapshots, side by side (1 % and 10 % of the rows appended; wall and CPU seconds; same answer).

Run it under the machine's benchmark lock and say what the load was::

    flock /tmp/metaprov-bench.lock python benchmarks/bench_live.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

MP = "https://w3id.org/metaprov/ns#"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _select(url: str, q: str) -> list[dict[str, Any]]:
    r = requests.post(
        url, data={"query": q}, headers={"Accept": "application/sparql-results+json"}, timeout=60
    )
    r.raise_for_status()
    return r.json()["results"]["bindings"]


def _canonical(nquads: bytes) -> list[bytes]:
    import pyoxigraph as ox

    st = ox.Store()
    st.load(nquads, format=ox.RdfFormat.N_QUADS)
    return sorted(bytes(st.dump(format=ox.RdfFormat.N_QUADS)).splitlines())


def _int(value: Any) -> int:
    return 0 if value is None or value != value else int(value)


def _wave(x: int, w: int) -> int:
    time.sleep(0.001)
    return x * w


def _total(values: list[int]) -> int:
    return sum(values)


def cluster_part(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    import metaprov.capture as capture
    from metaprov.queries import query

    run = work / "live-run"
    store = work / "live-store"
    port = _free_port()
    served = subprocess.Popen(
        [sys.executable, "-m", "metaprov", "serve", "--store", str(store), "--port", str(port)]
        + ["--follow", str(run), "--interval", str(args.interval)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/query"
    assert "Serving" in (served.stdout.readline() if served.stdout else "")
    # (time the answer arrived, executions, snapshot time of the refresh that answered)
    polls: list[tuple[float, int, float]] = []
    stop = threading.Event()

    def poll() -> None:
        from datetime import datetime

        q = (
            f"PREFIX mp: <{MP}> SELECT ?u (COUNT(?e) AS ?n) "
            "{ ?r mp:liveState ?s ; mp:liveUpdated ?u . ?e a mp:TaskExecution } GROUP BY ?u"
        )
        while not stop.is_set():
            try:
                row = _select(url, q)[0]
                n = int(row["n"]["value"])
                u = datetime.fromisoformat(row["u"]["value"].replace("Z", "+00:00")).timestamp()
                polls.append((time.time(), n, u))
            except (requests.RequestException, KeyError, IndexError, ValueError):
                pass
            time.sleep(0.25)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    finished: list[tuple[float, int]] = []  # (time the wave finished, executions so far)
    snapshots: list[dict[str, Any]] = []
    t_start = time.time()
    done = 0
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=True,
            dashboard_address=None,
            host="127.0.0.1",
        ) as cluster,
        Client(cluster) as client,
    ):
        with capture.record(client, run, flush_interval=args.flush):
            for w in range(args.waves):
                futs = client.map(_wave, range(args.per_wave), w=w, pure=False)
                total = client.submit(_total, futs, pure=False)
                total.result()
                done += args.per_wave + 1
                finished.append((time.time(), done))
                if (w + 1) % args.snapshot_every == 0:
                    t0 = time.time()
                    runs = query("runs", endpoint=url)
                    slow = query("slowest-tasks", {"limit": 5}, endpoint=url)
                    live = runs[runs["live_state"].astype(str) == "in progress"]
                    snapshots.append(
                        {
                            "wave": w + 1,
                            "tasks_submitted": done,
                            "tasks": _int(live["tasks"].iloc[0]) if len(live) else None,
                            "executions": _int(live["executions"].iloc[0]) if len(live) else None,
                            "slowest_rows": int(len(slow)),
                            "answer_s": round(time.time() - t0, 3),
                        }
                    )
                time.sleep(args.pause)
    t_run = time.time() - t_start
    # wait for the final graph (the capture wrote "complete": the follow swaps the graphs)
    deadline = time.time() + 600
    final_graph = None
    while time.time() < deadline:
        rows = _select(
            url,
            f"PREFIX mp: <{MP}> SELECT ?g ?s {{ GRAPH ?g {{ ?r a mp:Run OPTIONAL {{ ?r mp:liveState ?s }} }} }}",
        )
        if rows and all("s" not in r for r in rows):
            final_graph = rows[0]["g"]["value"]
            break
        time.sleep(0.5)
    t_final = time.time() - t_start - t_run
    stop.set()
    poller.join(10)
    nt = requests.post(
        url,
        data={
            "query": f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ GRAPH <{final_graph}> {{ ?s ?p ?o }} }}"
        },
        headers={"Accept": "application/n-triples"},
        timeout=600,
    ).content
    served.send_signal(signal.SIGTERM)
    _, err = served.communicate(timeout=120)
    exp = work / "export.nq"
    subprocess.run(
        [sys.executable, "-m", "metaprov", "-q", "export", str(run), "-o", str(exp)], check=True
    )
    nq = b"".join(ln[:-2] + f" <{final_graph}> .\n".encode() for ln in nt.splitlines(keepends=True))
    equal = _canonical(nq) == _canonical(exp.read_bytes())
    # staleness per wave: first poll counting the wave's executions - when the wave finished;
    # split into waiting for a snapshot (the capture's flush, then the next refresh to start)
    # and the refresh that read the wave (its snapshot -> its answer)
    snaps = sorted({u for _, _, u in polls})
    shown = {u: min(t for t, _, v in polls if v == u) for u in snaps}  # ~ when each refresh ended
    dur = {u: shown[u] - u for u in snaps}
    stale, waits, reads, literal_ok, precise_ok = [], [], [], 0, 0
    per_wave: list[list[float]] = []  # finished at, staleness, wait, read, refresh in progress
    for t_done, n in finished:
        hit = next(((t, u) for t, c, u in polls if t >= t_done and c >= n), None)
        if hit is None:
            continue
        seen, u = hit
        stale.append(seen - t_done)
        waits.append(u - t_done)
        reads.append(seen - u)
        # the refresh before the one that read the wave: the one in progress when its rows
        # reached disk (the reading refresh started when it ended, or an interval after it began)
        i = snaps.index(u)
        d_prev = dur[snaps[i - 1]] if i else 0.0
        slack = 0.25 + 0.1  # the poll period and a query's answer time
        literal_ok += stale[-1] <= 2 * args.interval + dur[u] + slack
        precise_ok += stale[-1] <= args.flush + max(args.interval, d_prev) + dur[u] + slack
        per_wave.append(
            [round(x, 2) for x in (t_done - t_start, stale[-1], waits[-1], reads[-1], d_prev)]
        )
    refreshes = [ln for ln in err.splitlines() if ln.startswith("refresh ")]
    durations = []
    for ln in refreshes:
        if " in progress" in ln and ") in " in ln:
            durations.append(float(ln.split(") in ")[1].split(" s")[0]))
    counts = [s["tasks"] for s in snapshots if s["tasks"] is not None]
    refresh_median = statistics.median(durations) if durations else None
    refresh_max = max(durations) if durations else None
    bound = None if refresh_max is None else 2 * args.interval + refresh_max
    return {
        "tasks": done,
        "waves": args.waves,
        "run_seconds": round(t_run, 1),
        "final_swap_wait_seconds": round(t_final, 1),
        "interval": args.interval,
        "refreshes": len(refreshes),
        "last_refreshes": refreshes[-3:],
        "snapshots": snapshots,
        "snapshot_task_counts_only_grow": counts == sorted(counts) and len(counts) >= 5,
        "refresh_s": {
            "median": None if refresh_median is None else round(refresh_median, 2),
            "max": None if refresh_max is None else round(refresh_max, 2),
        },
        "bound_two_intervals_plus_slowest_refresh_s": None if bound is None else round(bound, 2),
        "waves_within_bound": None if bound is None else sum(x <= bound for x in stale),
        "waves_within_two_intervals_plus_the_refresh_that_read_them": literal_ok,
        "waves_within_flush_plus_max_interval_or_refresh_in_progress_plus_refresh": precise_ok,
        "staleness_parts_s": {
            "wait_for_snapshot_median": round(statistics.median(waits), 2) if waits else None,
            "wait_for_snapshot_max": round(max(waits), 2) if waits else None,
            "refresh_that_read_it_median": round(statistics.median(reads), 2) if reads else None,
            "refresh_that_read_it_max": round(max(reads), 2) if reads else None,
        },
        "flush_interval": args.flush,
        "per_wave_done_stale_wait_read_prev": per_wave,
        "refreshes_snapshot_s_duration_s": [
            [round(u - t_start, 2), round(dur[u], 2)] for u in snaps
        ],
        "staleness_s": {
            "waves_measured": len(stale),
            "median": round(statistics.median(stale), 2) if stale else None,
            "p90": round(sorted(stale)[int(0.9 * (len(stale) - 1))], 2) if stale else None,
            "max": round(max(stale), 2) if stale else None,
        },
        "final_graph_equals_export": equal,
        "final_triples": nt.count(b"\n"),
    }


def _prepared_run(work: Path, n: int) -> tuple[Path, Any]:
    """A synthetic run of ``n`` tasks replayed to 90 % of its rows (the replay writer of the
    tests: rows appended in time order, the last row of each file but graph.csv cut in half)."""
    import csv

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from live_replay import Replay

    csv.field_size_limit(1 << 30)  # a synthetic run's graph rows list many dependencies

    from metaprov.synthetic import generate_run

    src = generate_run(work / f"src-{n}" / "run", n, seed=1)
    # the graph's row whole from the first batch, as a client submits its graph before its
    # tasks run (cut, its one row would complete only in the last batch: every task then
    # changes at once, which no real run does)
    rep = Replay(src, work / f"run-{n}", steps=10, whole=("graph.csv",))
    for _ in range(9):
        rep.step()
    return work / f"run-{n}", rep


def _peak_mb() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def refresh_one(n: int, method: str, work: Path) -> dict[str, Any]:
    """Three refreshes of a run of ``n`` tasks, in this process (its peak memory is theirs):
    the first (90 % of the rows: everything inserted), an *append* refresh (the last 10 % of
    the rows appended), an *unchanged* refresh (the same rows: only the state triples move).

    ``rows``: the real ``follow`` loop into an embedded store on disk (after the first refresh,
    only the rows that changed formatted). ``columnar``: the same with ``incremental=False``
    (every refresh formats the whole run: Arrow lines, 128-bit keys, sorted merge). ``sets``: the diff ``follow`` used before (two Python sets of
    N-Triples lines), with the same store updates.
    """
    import gc

    from metaprov.live.follow import (
        EmbeddedTarget,
        convert,
        follow,
        provisional_id,
        state_lines,
    )
    from metaprov.mapping.terms import DEFAULT_BASE, RunIris
    from metaprov.store import EmbeddedStore

    run, rep = _prepared_run(work, n)
    gc.collect()
    rows: list[dict[str, Any]] = []
    if method in ("rows", "columnar"):
        st = EmbeddedStore(work / f"store-{n}")
        stop = threading.Event()

        def step(r: Any) -> None:
            rows.append(r.to_dict())
            if r.number == 1:
                rep.step()  # the last 10 % of the rows
            elif r.number == 3:
                stop.set()

        follow(
            run,
            store=st,
            interval=0.01,
            quiet=0,
            darshan=False,
            on_refresh=step,
            stop=stop,
            incremental=method == "rows",
        )
        st.close()
    else:
        pid = provisional_id(run)
        st = EmbeddedStore(work / f"store-{n}")
        target = EmbeddedTarget(st)
        graph = RunIris(DEFAULT_BASE, pid).graph
        held: set[bytes] = set()
        conv = None
        for k in (1, 2, 3):
            t0 = time.monotonic()
            if k < 3:  # the third refresh sees the same snapshot: follow reused its conversion
                conv = convert(
                    run, run, base=DEFAULT_BASE, detail="tasks", darshan=False, run_id=pid
                )
            assert conv is not None
            lines = conv.lines + state_lines(conv.run_iri, updated=time.time(), lag=0.5 + k)
            c1 = time.monotonic()
            new = set(lines)
            removed = sorted(held - new)
            added = [ln for ln in lines if ln not in held]
            d1 = time.monotonic()
            target.apply(graph, removed, added)
            s1 = time.monotonic()
            held = new
            rows.append(
                {
                    "number": k,
                    "tasks": conv.tasks,
                    "triples": len(new),
                    "added": len(added),
                    "removed": len(removed),
                    "convert_seconds": c1 - t0,
                    "diff_seconds": d1 - c1,
                    "store_seconds": s1 - d1,
                    "seconds": s1 - t0,
                }
            )
            del lines, new, removed, added
            if k == 1:
                rep.step()
        st.close()
    out = {"tasks": n, "method": method, "peak_mb": _peak_mb()}
    for name, r in zip(("first", "append", "unchanged"), rows, strict=True):
        out[name] = {
            k: (round(v, 3) if isinstance(v, float) else v)
            for k, v in r.items()
            if k
            in (
                "tasks",
                "triples",
                "added",
                "removed",
                "seconds",
                "convert_seconds",
                "diff_seconds",
                "store_seconds",
                "rows_formatted",
                "rows_mapped",
            )
        }
    return out


def refresh_part(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Each size and method in its own process (so its peak memory is its own)."""
    rows = []
    for n in args.sizes:
        for method in args.methods:
            res = subprocess.run(
                [sys.executable, __file__, "--part", "refresh-one", "--sizes", str(n)]
                + ["--methods", method],
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    return rows


class _RssPeak:
    """The process's resident memory sampled every 50 ms while in the ``with`` block: the peak
    above what it was on entry (MB)."""

    def __enter__(self) -> _RssPeak:
        self.start = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def growth_mb(self) -> float:
        return round((self.peak - self.start) / 2**20, 1)


def final_swap_part(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """The final swap (provisional graph -> the export's graph) into an embedded store, with
    each way of removing the provisional graph of ``args.removals`` (a store each)."""
    import pyoxigraph as ox

    from metaprov.live.follow import (
        EmbeddedTarget,
        convert,
        final_graph,
        provisional_id,
        state_lines,
    )
    from metaprov.mapping.terms import DEFAULT_BASE, RunIris
    from metaprov.store import EmbeddedStore
    from metaprov.synthetic import generate_run

    class SingleTransaction(EmbeddedTarget):
        """The removal follow used before: one DELETE WHERE transaction, then remove_graph."""

        def _remove(self, graph: str) -> None:
            node = self._node(graph)
            if self.ox.contains_named_graph(node):
                self.ox.update(f"DELETE WHERE {{ GRAPH <{graph}> {{ ?s ?p ?o }} }}")
                self.ox.remove_graph(node)

    targets = {"batched": EmbeddedTarget, "single": SingleTransaction}
    rows = []
    for n in args.sizes:
        run = generate_run(work / f"run-{n}", n, seed=1)
        pid = provisional_id(run)
        prov = RunIris(DEFAULT_BASE, pid).graph
        conv = convert(run, run, base=DEFAULT_BASE, detail="tasks", darshan=False, run_id=pid)
        prov_lines = conv.lines + state_lines(conv.run_iri, updated=time.time(), lag=0)
        del conv
        for removal in args.removals:
            st = EmbeddedStore(work / f"store-{n}-{removal}")
            target = targets[removal](st)
            target.apply(prov, [], prov_lines)
            n_prov = st.count(prov)
            # the final swap as follow does it: the export's graph replaces the provisional
            # one (mapped, bulk-loaded from staging files, the provisional graph removed)
            load_start = os.getloadavg()
            t0 = time.perf_counter()
            fin = final_graph(run, run, base=DEFAULT_BASE, detail="tasks", darshan=False)
            t_map = time.perf_counter() - t0
            fin_iri = fin.graph_iri
            swap = target._swap
            peak = _RssPeak()

            def measured_swap(graph: str, drop: Any, swap: Any = swap, peak: Any = peak) -> None:
                with peak:
                    swap(graph, drop)

            target._swap = measured_swap  # type: ignore[method-assign]
            n_final = target.replace(fin, (prov,), source=str(run))
            del fin
            t_final = time.perf_counter() - t0
            count = st.count(fin_iri)
            gone = st.count(prov) == 0 and not st.oxigraph.contains_named_graph(ox.NamedNode(prov))
            timings = target.timings
            st.close()
            del st, target
            shutil.rmtree(work / f"store-{n}-{removal}", ignore_errors=True)
            rows.append(
                {
                    "tasks": n,
                    "removal": removal,
                    "provisional_triples": n_prov,
                    "triples": n_final,
                    "final_swap_s": round(t_final, 2),
                    "final_swap_map_s": round(t_map, 2),
                    "final_swap_bulk_load_s": round(timings["final_load_s"], 2),
                    "final_swap_drop_provisional_s": round(timings["drop_s"], 2),
                    "drop_provisional_rss_growth_mb": peak.growth_mb,
                    "provisional_gone": gone,
                    "final_graph_triples_in_store": count,
                    "loadavg_before": load_start,
                    "loadavg": os.getloadavg(),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        del prov_lines
        if args.load:
            # what `metaprov load` of the same run costs (a new store: read, map, bulk load)
            t0 = time.perf_counter()
            with EmbeddedStore(work / f"store-load-{n}") as st2:
                st2.load_run(run, darshan=False)
            rows[-1]["metaprov_load_s"] = round(time.perf_counter() - t0, 2)
            shutil.rmtree(work / f"store-load-{n}", ignore_errors=True)
            print(json.dumps({"tasks": n, "metaprov_load_s": rows[-1]["metaprov_load_s"]}))
        shutil.rmtree(work / f"run-{n}", ignore_errors=True)
    return rows


def convert_part(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Full conversion against the row path, on the same two snapshots, side by side.

    A synthetic run of ``n`` tasks replayed (graph rows whole) in ``S`` batches; snapshot A after
    ``S - 2`` batches, B after ``S - 1``: B appends 1/S of the rows (S = 10: 10 %, S = 100: 1 %,
    about what a 2 s refresh of a run lasting a few minutes sees). From A's state, B's change is
    found both ways, alternately, ``--repeat`` times: **full** (``convert`` with N-Triples of
    every row, keyed, matched with A's lines: ``LineSet.of`` + ``diff``) and **rows** (``convert``
    of the blocks only, row keys computed as they are mapped, ``rows.advance`` from A's row
    state). Both must give the same lines to delete and insert. Wall and CPU seconds, medians.
    """
    import csv

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from live_replay import Replay

    from metaprov.live import rows as R
    from metaprov.live.follow import convert
    from metaprov.live.lines import SEEDS, LineSet, diff
    from metaprov.live.snapshot import take_snapshot
    from metaprov.mapping.terms import DEFAULT_BASE
    from metaprov.synthetic import generate_run

    csv.field_size_limit(1 << 30)
    out = []
    for n in args.sizes:
        src = generate_run(work / f"src-{n}" / "run", n, seed=1)
        for steps in (10, 100):
            run = work / f"run-{n}-{steps}" / "run"
            rep = Replay(src, run, steps=steps, whole=("graph.csv",))
            for _ in range(steps - 2):
                rep.step()
            a = work / f"a-{n}-{steps}" / "run"
            take_snapshot(run, a)
            rep.step()
            b = work / f"b-{n}-{steps}" / "run"
            take_snapshot(run, b)
            kw = {"base": DEFAULT_BASE, "detail": "tasks", "darshan": False, "run_id": "live-b"}
            ca = convert(a, run, **kw)
            held = LineSet.of(ca.text.chunks)
            state = R.start(ca.blocks, ca.text, SEEDS)
            assert state is not None
            del ca
            times: dict[str, list[tuple[float, float]]] = {"full": [], "rows": []}
            answers: dict[str, tuple[list[bytes], list[bytes]]] = {}
            for _ in range(args.repeat):
                for method in ("full", "rows"):
                    w0, c0 = time.perf_counter(), time.process_time()
                    if method == "full":
                        cb = convert(b, run, **kw)
                        removed, added = diff(held, LineSet.of(cb.text.chunks))
                    else:
                        cb = convert(b, run, lines=False, **kw)
                        step = R.advance(state, cb.blocks, SEEDS)
                        assert step is not None
                        removed, added = step[0], step[1]
                    times[method].append((time.perf_counter() - w0, time.process_time() - c0))
                    answers[method] = (sorted(removed), sorted(added))
                    del cb
            row = {
                "tasks": n,
                "appended": f"1/{steps} of the rows",
                "triples_b": len(held) + len(answers["full"][1]) - len(answers["full"][0]),
                "deleted": len(answers["full"][0]),
                "inserted": len(answers["full"][1]),
                "same_answer": answers["full"] == answers["rows"],
                "loadavg": os.getloadavg(),
            }
            for method, ts in times.items():
                row[f"{method}_wall_s"] = round(statistics.median(t[0] for t in ts), 3)
                row[f"{method}_cpu_s"] = round(statistics.median(t[1] for t in ts), 3)
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--part",
        choices=["cluster", "refresh", "both", "final-swap", "refresh-one", "convert"],
        default="both",
    )
    ap.add_argument("--methods", nargs="+", default=["rows", "columnar"])
    ap.add_argument("--waves", type=int, default=60)
    ap.add_argument("--per-wave", type=int, default=200)
    ap.add_argument("--pause", type=float, default=0.8)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--flush", type=float, default=2.0, help="the capture's flush interval")
    ap.add_argument("--snapshot-every", type=int, default=10)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument(
        "--removals",
        nargs="+",
        choices=["batched", "single"],
        default=["batched", "single"],
        help="final-swap: how the provisional graph is removed (batched: as follow does it)",
    )
    ap.add_argument(
        "--no-load",
        dest="load",
        action="store_false",
        help="final-swap: skip `metaprov load` of the same run",
    )
    ap.add_argument("--repeat", type=int, default=3, help="--part convert: runs per method")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="metaprov-bench-live-"))
    if args.part == "refresh-one":
        try:
            print(json.dumps(refresh_one(args.sizes[0], args.methods[0], work)))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    out: dict[str, Any] = {"loadavg_start": os.getloadavg()}
    try:
        if args.part in ("cluster", "both"):
            out["cluster"] = cluster_part(args, work)
            print(json.dumps(out["cluster"], indent=1), flush=True)
        if args.part in ("refresh", "both"):
            out["refresh"] = refresh_part(args, work)
        if args.part == "final-swap":
            out["final_swap"] = final_swap_part(args, work)
        if args.part == "convert":
            out["convert"] = convert_part(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
