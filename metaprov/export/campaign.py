"""Campaigns: many runs converted in parallel, one N-Quads shard (one named graph) per run.

Input: run directories, or directories holding run directories (found and expanded). Output, in
the output directory: ``shards/<run>.nq`` (the run's graph, byte for byte what
``metaprov export RUN -o x.nq`` writes), ``shards/<run>.json`` (that run's manifest entry,
written by the worker that converted it) and ``manifest.json`` (every entry, the options, the
backend and the totals).

One Dask task per run (:func:`export_shard`): it gets paths and options, reads the run, writes
its shard and returns a small dict; nothing bigger ever travels through the scheduler. A run
that fails records its error in its entry and the others go on; a run whose inputs and options
did not change since its shard was written (same fingerprint) is not converted again, so an
interrupted campaign resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from metaprov.errors import CampaignError, InputError, MetaprovError, UsageError
from metaprov.export.backend import peak_rss
from metaprov.export.partition import accounting_of
from metaprov.ingest import is_run_directory, run_directories
from metaprov.store.files import MANIFEST, MANIFEST_KIND

log = logging.getLogger("metaprov")

SHARDS = "shards"
FORMATS = ("nquads",)


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """The run directories named by ``paths``: a run directory is itself; any other directory is
    searched (recursively, sorted by path) for the run directories it holds.

    Raises:
        InputError: a path does not exist, or a directory holds no run.
    """
    found: list[Path] = []
    for item in paths:
        p = Path(item)
        if not p.exists():
            raise InputError("no such run or campaign directory", path=p)
        if not p.is_dir():
            raise InputError(
                "is a file, not a run or campaign directory",
                path=p,
                hint="give run directories, or directories holding them",
            )
        if is_run_directory(p):
            found.append(p)
            continue
        runs = sorted(d for d in p.rglob("*") if d.is_dir() and is_run_directory(d))
        # a run's own sub-directories (e.g. logs/) are not runs of their own
        runs = [r for r in runs if not any(q in r.parents for q in runs)]
        if not runs:
            raise InputError(
                "holds no run directory (none of its directories has Mofka-Dask CSV files)",
                path=p,
            )
        found.extend(runs)
    seen: set[Path] = set()
    out = []
    for r in found:
        key = r.resolve()
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def is_campaign(
    runs: Sequence[str | Path],
    output: str | Path | None = None,
    scheduler: str | None = None,
    local_workers: int | None = None,
    backend: str | None = None,
    partitions: int = 1,
) -> bool:
    """Whether an export call is a campaign: several inputs, a directory holding run directories, or
    an option only a campaign has (a backend, a scheduler, workers, partitions)."""
    if len(runs) != 1 or scheduler or local_workers or backend or partitions > 1:
        return True
    one = Path(runs[0])
    if not one.is_dir() or is_run_directory(one):
        return False
    return bool(run_directories(one))  # a folder of runs; any other folder is a bad run directory


def _check_not_a_file_name(out: Path) -> None:
    """Refuse an output named like an RDF file (``pmda.ttl``) unless it is already a campaign's
    directory: a campaign is a directory of N-Quads shards, and ``pmda.ttl/`` would surprise.

    Raises:
        UsageError: the name ends in a format's suffix (names the runs one by one instead).
    """
    from metaprov.errors import FormatError
    from metaprov.write import format_for_path

    if out.is_dir() and (out / MANIFEST).is_file():
        return  # the same campaign again
    try:
        fmt = format_for_path(out)
    except FormatError:
        return
    raise UsageError(
        f"{out} is named like a {fmt.name} file, but several runs (a campaign) are written into "
        "a directory: one N-Quads shard per run and a manifest.json",
        hint=f"give a directory name (e.g. -o {out.with_suffix('').name or 'campaign'}-prov/), "
        "or export each run to its own file: metaprov export RUN -o RUN.ttl",
    )


_UNSAFE = re.compile(r"[^A-Za-z0-9._+=@-]+")


def shard_names(runs: Sequence[Path]) -> list[str]:
    """A file name per run, unique in the campaign and the same wherever the campaign lives:
    the run directory's name, prefixed by as many parent names as it takes to tell runs apart."""
    parts = [r.resolve().parts for r in runs]
    depth = 1
    while True:
        names = ["__".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names) or depth >= max((len(p) for p in parts), default=1):
            break
        depth += 1
    safe = [_safe_name(n) for n in names]
    counts: dict[str, int] = {}
    for n in safe:
        counts[n] = counts.get(n, 0) + 1
    # one-to-one: a name changed to be safe carries a hash of the original, and so does any name
    # that still meets another (R:1 -> R-1-3f2a..., never the same file as R-1)
    return [
        f"{n}-{_short_hash(raw)}" if counts[n] > 1 and n == raw else n
        for n, raw in zip(safe, names, strict=True)
    ]


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.blake2b(os.fsencode(text), digest_size=4).hexdigest()


def _safe_name(raw: str) -> str:
    """A readable file name for ``raw``; when characters had to change, a short hash of
    ``raw`` follows, so two runs never share a shard (``R:1``, ``R 1``, ``-R1-`` vs ``R-1``)."""
    name = _UNSAFE.sub("-", raw).strip("-") or "run"
    return name if name == raw else f"{name}-{_short_hash(raw)}"


def fingerprint(run: str | Path, options: dict[str, Any]) -> str:
    """The store's run fingerprint (files' names and contents, options, metaprov version), also
    covering the export options the store does not use."""
    import hashlib

    from metaprov.store.catalog import run_fingerprint

    base = run_fingerprint(
        run, base=options["base"], detail=options["detail"], darshan=options["darshan"]
    )
    extra = f"io_detail={options['io_detail']}\nformat=nquads\npartitions={options['partitions']}\n"
    return hashlib.blake2b((base + "\n" + extra).encode(), digest_size=20).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    from metaprov.errors import OutputError

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:  # a full or read-only file system: an error naming the file
        raise OutputError(
            f"cannot write {path}: {exc.strerror or exc}",
            hint="free some space, or write the campaign where you may write (-o)",
        ) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _where() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def _new_entry(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": job["name"],
        "run": job["run"],
        "shard": job["shard_rel"],
        "status": "failed",
        "reused": False,
        "started": _now(),
        "worker": _where(),
    }


def _reusable(job: dict[str, Any], fp: str) -> dict[str, Any] | None:
    """The entry of the shard already written from the same inputs and options, if intact."""
    old = _read_json(Path(job["entry"]))
    shard = Path(job["shard"])
    if (
        isinstance(old, dict)
        and old.get("status") == "ok"
        and old.get("fingerprint") == fp
        and shard.is_file()
        and shard.stat().st_size == old.get("bytes")
        and old.get("sha256") is not None
        and file_sha256(shard) == old.get("sha256")  # a damaged shard of the same size
    ):
        old["reused"] = True
        return old
    return None


def _convert(job: dict[str, Any], entry: dict[str, Any], work: Any) -> dict[str, Any]:
    """Run ``work(fingerprint) -> dict`` for ``job`` unless its shard is up to date; record
    the outcome (failures included) in ``entry`` and in the entry file beside the shard."""
    t0 = time.perf_counter()
    worker_logging(job.get("log_level"))
    shard, entry_path = Path(job["shard"]), Path(job["entry"])
    try:
        fp = fingerprint(job["run"], job["options"])
        entry["fingerprint"] = fp
        old = _reusable(job, fp)
        if old is not None:
            return old
        entry["inputs"] = sorted(p.name for p in Path(job["run"]).iterdir() if p.is_file())
        entry.update(work())
        entry.update(
            status="ok",
            bytes=shard.stat().st_size,
            sha256=file_sha256(shard),
            error=None,
            peak_rss=peak_rss(),
        )
    except MetaprovError as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a bug on one run must not stop the campaign
        entry["error"] = f"internal error {type(exc).__name__}: {exc}"
        entry["traceback"] = traceback.format_exc(limit=8)
    if entry["status"] != "ok":
        shard.unlink(missing_ok=True)  # a stale shard of earlier inputs would be loaded as current
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    try:
        _write_json(entry_path, entry)
    except MetaprovError as exc:
        entry.update(status="failed", error=f"cannot write {entry_path}: {exc}")
    return entry


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in 8 MB pieces."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def worker_logging(level: int | None) -> None:
    """In a worker process, print metaprov's messages as the command does (``WARNING: ...``)
    at the command's level (``-q``: errors only). Python's last-resort handler would print
    them bare; in the command's own process (in-process backend) nothing changes."""
    if level is None:
        return
    logger = logging.getLogger("metaprov")
    logger.setLevel(level)
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    handler.setLevel(level)
    logger.addHandler(handler)


def _lost(job: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """The entry of a run whose task died with its worker (killed, out of memory)."""
    entry = _new_entry(job)
    entry.update(
        worker=None,
        error=f"the task was lost with its worker: {type(exc).__name__}: {exc}",
    )
    Path(job["shard"]).unlink(missing_ok=True)
    try:
        _write_json(Path(job["entry"]), entry)
    except MetaprovError:
        pass
    return entry


def export_shard(job: dict[str, Any]) -> dict[str, Any]:
    """Convert one run into its shard; the function each Dask task runs.

    Args:
        job: ``run`` (directory), ``shard`` (N-Quads file to write), ``entry`` (its JSON file)
            and ``options`` (base, detail, io_detail, darshan).

    Returns:
        The run's manifest entry (also written to ``job["entry"]``): status ``ok`` or
        ``failed`` (with ``error``), ``reused`` when the shard was already up to date. Never
        raises: a failure is reported in the entry, so the other runs go on.
    """
    opts = job["options"]

    def work() -> dict[str, Any]:
        from metaprov.export import export
        from metaprov.ingest import read_run

        records = read_run(job["run"], darshan=opts["darshan"])
        result = export(
            records,
            job["shard"],
            format="nquads",
            base=opts["base"],
            detail=opts["detail"],
            io_detail=opts["io_detail"],
            overwrite=True,  # the shard of an earlier campaign whose run changed
        )
        return {
            "run_id": result.run_id,
            "run_iri": result.run_iri,
            "graph_iri": result.graph_iri,
            "triples": result.triples,
            "missing": result.missing,
            "accounting": accounting_of(records),
        }

    return _convert(job, _new_entry(job), work)


def export_shard_partitioned(client: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Convert one run in ``job["partitions"]`` partitions (see :mod:`.partition`): the
    partitions run as tasks on ``client`` (in this process when None); the entry as for
    :func:`export_shard`."""
    from metaprov.export.partition import export_partitioned

    opts = job["options"]

    def work() -> dict[str, Any]:
        return export_partitioned(
            client,
            job["run"],
            Path(job["shard"]),
            job["partitions"],
            base=opts["base"],
            detail=opts["detail"],
            darshan=opts["darshan"],
            io_detail=opts["io_detail"],
        )

    return _convert(job, _new_entry(job), work)


@dataclass
class CampaignResult:
    """What :func:`export_campaign` did: the manifest, and where it was written."""

    manifest: dict[str, Any]
    path: Path
    backend: Any = None
    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["status"] != "ok"]

    def summary(self) -> str:
        t = self.manifest["totals"]
        text = (
            f"{self.path}: {t['ok']} of {t['runs']} runs converted "
            f"({t['reused']} unchanged, reused), {t['triples']:,} triples, {t['seconds']:.1f} s"
        )
        for e in self.failed:
            text += f"\n  failed {e['run']}: {e.get('error')}"
        return text


def export_campaign(
    runs: str | Path | Sequence[str | Path],
    output: str | Path,
    *,
    format: str | None = "nquads",
    base: str | None = None,
    detail: str = "tasks",
    io_detail: str = "aggregate",
    darshan: bool = True,
    backend: str | None = None,
    scheduler: str | None = None,
    local_workers: int | None = None,
    partitions: int = 1,
    progress: bool = False,
    announce: Any = None,
    raise_on_failure: bool = True,
) -> CampaignResult:
    """Convert many runs in parallel, one N-Quads shard (one named graph) per run.

    Args:
        runs: run directories, or directories holding run directories.
        output: the output directory (created; only ``manifest.json`` and ``shards/`` are written).
        format: ``nquads`` (alias ``nq``), the only campaign format (one named graph per run).
        base, detail, io_detail, darshan: as for :func:`metaprov.export.export`.
        backend: ``in-process``, ``local`` or ``scheduler`` (default: chosen, see
            :func:`metaprov.export.backend.choose_backend`).
        scheduler: address of a running Dask scheduler (``tcp://host:8786``).
        local_workers: LocalCluster size.
        partitions: split each run into this many partitions of its keys, each mapped on a
            worker (a run too large for one machine; see :mod:`metaprov.export.partition`).
        progress: a progress bar over the runs (stderr).
        announce: a callable given one line saying which backend was chosen and why.
        raise_on_failure: raise :class:`CampaignError` (after writing the manifest) when some
            runs failed.

    Returns:
        A :class:`CampaignResult`; ``result.manifest`` is what ``manifest.json`` holds.

    Raises:
        CampaignError: some runs failed (the manifest is written; the others completed).
        InputError, UsageError: nothing could start (no run found, bad options).

    Example:
        >>> export_campaign(["runs/"], "out", local_workers=2).manifest["totals"]  # doctest: +SKIP
    """
    from metaprov.export.backend import choose_backend

    t0 = time.perf_counter()
    base = _checked_base(format, base, detail, io_detail)
    found = find_runs([runs] if isinstance(runs, (str, Path)) else list(runs))
    out = Path(output)
    if partitions < 1:  # before anything is created
        raise UsageError("--partitions must be at least 1")
    _prepare_output(out, found)
    options = {
        "base": base,
        "detail": detail,
        "io_detail": io_detail,
        "darshan": darshan,
        "partitions": partitions,
    }
    jobs = _jobs(found, out, options, partitions)
    chosen = choose_backend(
        found,
        backend=backend,
        scheduler=scheduler,
        local_workers=local_workers,
        partitions=partitions,
    )
    if announce is not None:
        announce(chosen.describe())
    log.info("%s", chosen.describe())
    ordered = _run_jobs(chosen, jobs, partitions, progress)
    manifest = _manifest(options, chosen, ordered, t0)
    path = out / MANIFEST
    _write_json(path, manifest)
    result = CampaignResult(manifest, path, chosen, ordered)
    if raise_on_failure and result.failed:
        raise _failure(result, path)
    return result


def _checked_base(format: str | None, base: str | None, detail: str, io_detail: str) -> str:
    """Check the export options of a campaign; return the base IRI, without its trailing ``/``."""
    from metaprov.mapping import DETAILS, IO_DETAILS, _check_base
    from metaprov.mapping.terms import DEFAULT_BASE
    from metaprov.write import resolve_format

    fmt = resolve_format(None, format or "nquads")
    if fmt.name not in FORMATS:
        raise UsageError(
            f"a campaign is written as N-Quads (one named graph per run), not {fmt.name}",
            hint="use -f nq, or export the runs one by one",
        )
    base = (base or DEFAULT_BASE).rstrip("/")
    _check_base(base)
    if detail not in DETAILS or io_detail not in IO_DETAILS:
        raise UsageError(f"unknown detail {detail!r} / I/O detail {io_detail!r}")
    return base


def _prepare_output(out: Path, runs: Sequence[Path] = ()) -> None:
    """Check that ``out`` can be the campaign's directory, and create it with its ``shards/``.

    The directory is *updated*, never replaced (a run again skips the shards whose inputs did
    not change), so an existing one needs no ``--force``; but it never is, holds or sits inside
    one of the runs (:func:`metaprov.write.output.refuse_overlap`)."""
    from metaprov.write.output import refuse_overlap

    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file", hint="a campaign is written into a directory")
    refuse_overlap(out, inputs=runs)
    _check_not_a_file_name(out)
    _make_outdir(out)


def _jobs(
    found: list[Path], out: Path, options: dict[str, Any], partitions: int
) -> list[dict[str, Any]]:
    """One job per run: where its shard and entry go, and the export options."""
    names = shard_names(found)
    return [
        {
            "run": str(r.resolve()),
            "name": n,
            "shard": str((out / SHARDS / f"{n}.nq").resolve()),
            "shard_rel": f"{SHARDS}/{n}.nq",
            "entry": str((out / SHARDS / f"{n}.json").resolve()),
            "options": options,
            "partitions": partitions,
            "log_level": logging.getLogger("metaprov").getEffectiveLevel(),
        }
        for r, n in zip(found, names, strict=True)
    ]


def _run_jobs(
    chosen: Any, jobs: list[dict[str, Any]], partitions: int, progress: bool
) -> list[dict[str, Any]]:
    """Run the jobs on the chosen backend; return their entries in the order of ``jobs``."""
    from tqdm.auto import tqdm

    from metaprov.export.backend import open_backend, run_tasks

    entries: dict[str, dict[str, Any]] = {}
    with (
        open_backend(chosen) as client,
        tqdm(total=len(jobs), desc="runs", unit="run", disable=not progress) as bar,
    ):
        if partitions > 1:
            # one run after the other, each spread over the workers in partitions
            done = (export_shard_partitioned(client, j) for j in jobs)
        else:
            done = run_tasks(client, export_shard, jobs, [_task_key(j) for j in jobs], _lost)
        for entry in done:
            entries[entry["name"]] = entry
            bar.update(1)
            if entry["status"] != "ok":
                bar.write(f"failed {entry['run']}: {entry.get('error')}")
    return [entries[j["name"]] for j in jobs]


def _manifest(
    options: dict[str, Any], chosen: Any, ordered: list[dict[str, Any]], t0: float
) -> dict[str, Any]:
    """What ``manifest.json`` holds: the options, the backend, one entry per run, the totals."""
    return {
        "kind": MANIFEST_KIND,
        "metaprov": _version(),
        "format": "nquads",
        "created": _now(),
        "options": options,
        "backend": chosen.to_dict(),
        "runs": ordered,
        "totals": {
            "runs": len(ordered),
            "ok": sum(e["status"] == "ok" for e in ordered),
            "failed": sum(e["status"] != "ok" for e in ordered),
            "reused": sum(bool(e.get("reused")) for e in ordered),
            "triples": sum(int(e.get("triples") or 0) for e in ordered),
            "seconds": round(time.perf_counter() - t0, 3),
        },
    }


def _failure(result: CampaignResult, path: Path) -> CampaignError:
    """The error raised when some runs failed (the manifest at ``path`` is written)."""
    n = len(result.failed)
    return CampaignError(
        f"{n} of {len(result.entries)} runs failed (the other shards are written; see {path}):\n"
        + "\n".join(f"  {e['run']}: {e.get('error')}" for e in result.failed),
        manifest=result.manifest,
        hint="fix those runs and run the same command again: finished shards are skipped",
    )


def _make_outdir(out: Path) -> None:
    """Create ``out/shards`` (``out`` itself may be new; its folder must exist, as for every
    output: :func:`metaprov.write.output.check_parent`)."""
    from metaprov.errors import OutputError
    from metaprov.write.output import check_parent

    if not out.is_dir():
        check_parent(out)
    try:
        (out / SHARDS).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"cannot create {out / SHARDS}: {exc.strerror or exc}",
            hint="choose an output directory you can write to (-o)",
        ) from exc


def _task_key(job: dict[str, Any]) -> str:
    """The Dask key of a run's task: readable on a dashboard, unique per call (a scheduler
    may still remember the task of an earlier campaign with the same run)."""
    import uuid

    return f"metaprov-export-{job['name']}-{uuid.uuid4().hex[:8]}"


def _version() -> str:
    from metaprov._version import __version__

    return __version__
