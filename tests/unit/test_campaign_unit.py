"""Campaign planning without a cluster: backend choice, run discovery, partitions (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from conftest import FULL

from metaprov.errors import InputError, UsageError
from metaprov.export.backend import SMALL_RUN_BYTES, choose_backend, partition_share
from metaprov.export.campaign import find_runs, is_campaign, shard_names
from metaprov.export.partition import partition_of_keys
from metaprov.synthetic import generate_run

GIB = 1 << 30


def test_one_small_run_stays_in_process() -> None:
    b = choose_backend(["r"], sizes=[10 << 20], cores=8, memory=16 * GIB)
    assert b.name == "in-process" and "one run" in b.why


def test_a_campaign_gets_a_local_cluster_sized_to_cores_and_memory() -> None:
    runs = [f"r{i}" for i in range(20)]
    # one export keeps ~1.3 cores busy: 8 cores run 6 at once
    b = choose_backend(runs, sizes=[100 << 20] * 20, cores=8, memory=64 * GIB)
    assert (b.name, b.workers) == ("local", 6) and "cores" in b.why and "6 at once" in b.why
    # memory bounds it: each run needs ~2 GB, 5 GB usable -> 2 workers
    b = choose_backend(runs, sizes=[800 << 20] * 20, cores=8, memory=6 * GIB)
    assert (b.name, b.workers) == ("local", 2) and "memory" in b.why
    b = choose_backend(runs[:3], sizes=[1 << 20] * 3, cores=8, memory=64 * GIB)
    assert b.workers == 3  # never more workers than runs


def test_a_large_run_or_partitions_get_a_cluster_and_the_user_decides_last() -> None:
    assert choose_backend(["r"], sizes=[SMALL_RUN_BYTES], cores=4, memory=8 * GIB).name == "local"
    b = choose_backend(["r"], sizes=[1], partitions=4, cores=4, memory=8 * GIB)
    assert (b.name, b.workers) == ("local", 3)
    b = choose_backend(["r", "s"], scheduler="tcp://10.0.0.1:8786")
    assert (b.name, b.address) == ("scheduler", "tcp://10.0.0.1:8786")
    b = choose_backend(["r", "s"], backend="in-process", sizes=[1, 1], cores=2, memory=GIB)
    assert b.name == "in-process" and "--backend" in b.why
    b = choose_backend(["r"], local_workers=3, sizes=[1], cores=2, memory=8 * GIB)
    assert (b.name, b.workers) == ("local", 3)
    b = choose_backend(["r", "s"], backend="local", sizes=[1, 1], cores=2, memory=8 * GIB)
    assert (b.name, b.workers) == ("local", 1) and "--backend local" in b.why
    with pytest.raises(UsageError, match="needs --scheduler"):
        choose_backend(["r"], backend="scheduler")
    with pytest.raises(UsageError, match="--scheduler names a cluster"):
        choose_backend(["r"], backend="local", scheduler="tcp://x:1")


def test_a_machine_with_fewer_cores_than_two_exports_need_runs_the_jobs_in_process() -> None:
    """One export keeps ~1.3 cores busy (measured): on 2 cores a LocalCluster of 2 was slower
    than one process, so the rule converts there, one job after the other, and says why."""
    from metaprov.export.backend import export_slots

    assert [export_slots(c) for c in (1, 2, 3, 4, 8, 16)] == [1, 1, 2, 3, 6, 12]
    runs = [f"r{i}" for i in range(20)]
    b = choose_backend(runs, sizes=[100 << 20] * 20, cores=2, memory=64 * GIB)
    assert b.name == "in-process" and "2 cores" in b.why and "~1.3" in b.why
    b = choose_backend(["r"], sizes=[GIB], partitions=4, cores=2, memory=64 * GIB)
    assert b.name == "in-process"
    b = choose_backend(runs, sizes=[100 << 20] * 20, cores=3, memory=64 * GIB)
    assert (b.name, b.workers) == ("local", 2)


def test_a_partition_is_planned_at_its_measured_share_of_the_run_peak_not_one_over_p() -> None:
    # 1 GiB of CSV peaks at ~2.5 GiB whole; a partition of 4 at ~0.55 of that (not 1/4), so
    # 3 GiB usable fits 2 such workers (1/4 would have promised 4)
    b = choose_backend(["r"], sizes=[GIB], partitions=4, cores=8, memory=4 * GIB)
    assert (b.name, b.workers) == ("local", 2) and "memory" in b.why and "1.4 GiB" in b.why
    assert partition_share(1) == 1.0 and partition_share(2) > partition_share(4) > 0.4
    # at or above the measured shares (10^5: P = 2, 4, 8, 16; 10^6: P = 4, twice)
    assert partition_share(2) >= 0.49 and partition_share(4) >= 0.54 and partition_share(8) >= 0.36


def test_run_discovery_expands_campaign_directories(tmp_path: Path) -> None:
    a = generate_run(tmp_path / "camp" / "appA" / "R1", 20, seed=1)
    b = generate_run(tmp_path / "camp" / "appB" / "R1", 20, seed=2)
    (tmp_path / "camp" / "appA" / "R1" / "logs").mkdir()
    assert find_runs([tmp_path / "camp"]) == [a, b]
    assert find_runs([a, tmp_path / "camp"]) == [a, b]  # each run once
    # the same directory name in two applications: told apart by their parents
    assert shard_names([a, b]) == ["appA__R1", "appB__R1"]
    assert is_campaign([tmp_path / "camp"]) and not is_campaign([a])
    assert is_campaign([a], local_workers=2) and is_campaign([a, b])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no run directory"):
        find_runs([tmp_path / "empty"])
    with pytest.raises(InputError, match="no such run"):
        find_runs([tmp_path / "nope"])


def _reference_partition(key: str, n: int) -> int:
    """The documented rule, one key at a time: FNV-1a (64 bit) over the UTF-8 bytes of the key's
    IRI segment, a 64-bit finaliser, modulo n."""
    from urllib.parse import quote

    mask = (1 << 64) - 1
    h = 0xCBF29CE484222325
    for byte in quote(key, safe="").encode():
        h = ((h ^ byte) * 0x100000001B3) & mask
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & mask
    h ^= h >> 33
    return h % n


def test_the_key_partition_is_fixed_and_covers_every_key() -> None:
    keys = [
        "list-8606d556-c6f4-465b-933b-4f2338e69364",
        "('array-88', 127)",
        "é/ü key",
        "",
    ]
    keys += [f"('save_file-331f', {i}, 0, 0, 0)" for i in range(2000)]
    parts = partition_of_keys(pa.array(keys), 4)
    # the vectorised hash is the documented rule (the same on every machine and version)
    assert parts.tolist() == [_reference_partition(k, 4) for k in keys]
    assert parts[:4].tolist() == [0, 1, 2, 2]
    counts = [parts.tolist().count(p) for p in range(4)]
    assert min(counts) > 400  # spread over every partition
    assert partition_of_keys(pa.array([None, "a"], pa.string()), 3)[0] == -1


def test_partitions_in_process_union_to_the_single_process_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from metaprov.export import export
    from metaprov.export.campaign import export_campaign

    # partitions map in blocks smaller than a whole run's: many blocks here, cut anywhere
    monkeypatch.setattr("metaprov.export.partition.PART_CHUNK_ROWS", 150)

    run = generate_run(tmp_path / "run", 600, seed=7, retried_fraction=0.05, erred_fraction=0.02)
    export(run, tmp_path / "single.nq", detail="transitions", darshan=False)
    result = export_campaign(
        [run],
        tmp_path / "out",
        backend="in-process",
        partitions=3,
        detail="transitions",
        darshan=False,
    )
    (entry,) = result.manifest["runs"]
    single = set((tmp_path / "single.nq").read_bytes().splitlines())
    parts = (tmp_path / "out" / entry["shard"]).read_bytes().splitlines()
    assert set(parts) == single and len(parts) == len(single)
    assert not list((tmp_path / "out" / "shards").glob(".*"))  # no part files left behind


def test_a_partition_reads_its_rows_block_by_block_with_every_line_accounted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition keeps only its rows while a transition file is read in blocks; malformed,
    blank and keyless rows are reported once (by partition 0), with their true line numbers."""
    from metaprov.export import export
    from metaprov.export.campaign import export_campaign
    from metaprov.export.partition import Owner, accounting_of
    from metaprov.ingest import csvread, read_run
    from metaprov.ingest.dask_csv import SPECS, KeySelection
    from metaprov.records import Accounting

    run = generate_run(tmp_path / "run", 400, seed=3, retried_fraction=0.05)
    path = run / "worker_transition.csv"
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(50, b"7,\"('x', 1)\",released\n")  # too few fields
    lines.insert(120, b"\n")  # blank
    lines.insert(300, b"8,,released,waiting,tcp://127.0.0.1:1,1713553297.5\n")  # no key
    lines.append(b"9,\"('x', 2)\",rele")  # truncated last row
    path.write_bytes(b"".join(lines))
    monkeypatch.setattr(csvread, "_BLOCK", 4096)  # many blocks

    def same_rows_as_the_whole_read() -> None:
        whole = csvread.read_csv(path, acct=Accounting(), **SPECS[path.name])
        got_lines = []
        for p in range(3):
            sel = KeySelection(Owner(p, 3), keeps_keyless=p == 0)
            acct = Accounting()
            part = csvread.read_csv(path, acct=acct, select=sel.selection(), **SPECS[path.name])
            keep, _ = sel.masks(whole.table)
            # the rows and file lines of the whole read, filtered
            assert part.lines.tolist() == whole.lines[keep].tolist()
            assert part.table["key"].to_pylist() == whole.take(keep).arrow("key").to_pylist()
            reasons = acct.files[path.name].not_used
            assert bool(reasons) == (p == 0), reasons
            got_lines += part.lines.tolist()
        assert sorted(got_lines) == whole.lines.tolist()

    same_rows_as_the_whole_read()

    export(run, tmp_path / "single.nq", detail="transitions")
    result = export_campaign(
        [run], tmp_path / "out", backend="in-process", partitions=3, detail="transitions"
    )
    (entry,) = result.manifest["runs"]
    single = set((tmp_path / "single.nq").read_bytes().splitlines())
    assert set((tmp_path / "out" / entry["shard"]).read_bytes().splitlines()) == single
    files = accounting_of(read_run(run))["files"]
    assert entry["accounting"]["files"] == files
    assert files[path.name]["not_used"]["blank line"] == 1

    # a line that is not UTF-8: the block reader gives way to the whole-file reader
    path.write_bytes(b"".join([*lines[:200], b"5,\"('\xff', 1)\",a,b,c,1.0\n", *lines[200:]]))
    same_rows_as_the_whole_read()


def test_partitions_of_a_run_with_darshan_io_union_to_the_single_process_export(
    tmp_path: Path,
) -> None:
    """Darshan segments are linked against every partition's execution windows and written
    once, by the run-level part (with every traced call: io_detail segments)."""
    from metaprov.export import export
    from metaprov.export.campaign import export_campaign

    run = generate_run(tmp_path / "run", 500, seed=9, io_fraction=0.3, retried_fraction=0.04)
    export(run, tmp_path / "single.nq", io_detail="segments")
    result = export_campaign(
        [run], tmp_path / "out", backend="in-process", partitions=3, io_detail="segments"
    )
    (entry,) = result.manifest["runs"]
    single = set((tmp_path / "single.nq").read_bytes().splitlines())
    parts = (tmp_path / "out" / entry["shard"]).read_bytes().splitlines()
    assert any(b"#IOSegment>" in q for q in single)
    assert set(parts) == single and len(parts) == len(single)


def _with_chunk_versions(run: Path) -> tuple[int, int]:
    """Edit a synthetic run so that some keys have chunk versions (decision 21): transferred
    keys with dependents computed a second time at the end of the run, and dependents of other
    keys whose execution is moved before those keys started (a consumer no execution can have
    served). Returns (keys computed twice, consumers moved)."""
    import ast
    import csv

    graph = next(csv.DictReader((run / "graph.csv").open()))
    users: dict = {}
    for k, deps in ast.literal_eval(graph["dependencies"]).items():
        for d in deps:
            users.setdefault(d, []).append(k)
    moved = set()
    for row in list(csv.reader((run / "worker_transfer.csv").open()))[1:]:
        moved.update(ast.literal_eval(row[5]))

    def text(k: object) -> str:
        return k if isinstance(k, str) else repr(k)

    path = run / "worker_transition.csv"
    rows = list(csv.reader(path.open()))
    last, worker = max(float(r[-1]) for r in rows[1:]), rows[1][4]
    twice = sorted((k for k in users if k in moved), key=str)[:6]
    steps = ("memory", "released", "waiting", "ready", "executing", "memory")
    for i, k in enumerate(twice):
        for j in range(5):
            t = last + 1 + i + 0.1 * j
            rows.append([str(len(rows) - 1), text(k), steps[j], steps[j + 1], worker, repr(t)])
    first: dict = {}
    for r in rows[1:] + list(csv.reader((run / "scheduler_transition.csv").open()))[1:]:
        first[r[1]] = min(first.get(r[1], float("inf")), float(r[-1]))
    others = [k for k in sorted(users, key=str) if k not in moved and text(k) in first][:3]
    for k in others:
        d, t0 = text(users[k][0]), first[text(k)]
        for r in rows[1:]:
            if r[1] == d and r[2:4] in (["ready", "executing"], ["executing", "memory"]):
                r[-1] = repr(t0 - (2.0 if r[2] == "ready" else 1.5))
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    return len(twice), len(others)


def test_partitions_union_to_the_single_export_with_chunk_versions_across_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dependencies in other partitions, keys computed twice and transferred, and consumers no
    execution can have served (chunk versions, decision 21): each partition maps only its own
    keys, and the versions a key has in the whole run reach every partition and the transfers
    (written by the run-level part, which has no executions)."""
    from metaprov.export import export
    from metaprov.export.partition import export_partitioned

    run = generate_run(tmp_path / "run", 300, seed=11, transfer_fraction=0.3, retried_fraction=0.05)
    assert _with_chunk_versions(run) == (6, 3)
    export(run, tmp_path / "single.nq", darshan=False)
    single = (tmp_path / "single.nq").read_bytes().splitlines()
    assert sum(b"/chunk/1>" in q for q in single) > 6  # versions, used by other keys' tasks
    opts = {"base": "https://w3id.org/metaprov/id", "detail": "tasks"}
    configs = ((2, "spill"), (3, "spill"), (3, "run")) if FULL else ((3, "spill"), (3, "run"))
    for parts, source in configs:
        if source == "run":  # a partition whose records cannot be spilled is read again
            monkeypatch.setattr("metaprov.export.partition.spill_records", lambda r, w: False)
        out = tmp_path / f"p{parts}-{source}.nq"
        info = export_partitioned(None, run, out, parts, **opts)
        got = out.read_bytes().splitlines()
        assert set(got) == set(single) and len(got) == len(single), (parts, source)
        assert info["triples"] == len(single)
        assert [p["read_from"] for p in info["parts"][1:]] == [source] * parts
        assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith(".")) == []


def test_partitions_below_one_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    from metaprov.export.campaign import export_campaign

    run = tmp_path / "runs" / "R1"
    generate_run(run, 10, seed=3)
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="--partitions must be at least 1"):
        export_campaign([tmp_path / "runs"], out, partitions=0)
    assert not out.exists()
