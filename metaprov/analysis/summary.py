"""Summaries of a run for people (text) and scripts (JSON).

Input: :class:`~metaprov.records.RunRecords`.
Output: a JSON-ready dict (:func:`summarize`) and its text rendering (:func:`format_summary`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from metaprov.records import RunRecords
from metaprov.timeutil import format_utc


def _counts(s: pd.Series) -> dict[str, int]:
    # value_counts on the column as it is (a 7-million-row categorical is not turned into text)
    out: dict[str, int] = {}
    for k, v in s.value_counts(dropna=False).items():
        if v:
            name = "(none)" if pd.isna(k) else str(k)
            out[name] = out.get(name, 0) + int(v)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def summarize(records: RunRecords, *, io_evidence: bool = True) -> dict[str, Any]:
    """Everything ``metaprov inspect`` shows, as plain JSON types.

    ``io_evidence=False``: the Darshan part without the per-link evidence (``links``,
    ``ambiguous``), which the HTML report does not show.
    """
    t = records.tasks
    first, last = records.span
    tr = records.transfers
    unknown = unknowns(records)
    c = counts(records)
    executed = t[executions_per_task(records) > 0]
    per_transfer = tr.drop_duplicates("transfer") if len(tr) else tr
    summary: dict[str, Any] = {
        "run": {
            "path": records.path,
            "run_id": records.run_id,
            "first_event": format_utc(first),
            "last_event": format_utc(last),
            "duration_s": None if first is None else round((last - first).total_seconds(), 6),
            "missing_inputs": list(records.missing),
        },
        "job": _jsonable(records.job),
        "batch_jobs": batch_jobs(records),
        "scheduler": _jsonable(records.scheduler),
        "software": _jsonable(records.software),
        "environments": _environments(records),
        "tasks": {
            "total": c["tasks"],
            "executed": c["executed"],
            "ran_unrecorded": c["ran_unrecorded"],
            "never_ran": c["never_ran"],
            "erred": c["erred"],
            "retried": c["retried"],
            "by_state": _counts(t["state"]),
            "by_prefix": _counts(t["prefix"]),
            "time_source": _counts(executed["time_source"]) if len(executed) else {},
            "compute_seconds": c["compute_seconds"]
            if c["compute_seconds"] is not None
            else (None if any(u["what"].startswith("compute time") for u in unknown) else 0.0),
            "compute_unknown": c["compute_unknown"],
        },
        "executions": c["executions"],
        "losses": _losses(records, c),
        "transitions": {
            "total": int(len(records.transitions)),
            "by_observer": _counts(records.transitions["observer"]),
        },
        "workers": {
            "total": int(len(records.workers)),
            "addresses": records.workers["address"].astype(str).tolist(),
            "threads_per_worker": _counts(records.workers["threads"].astype("string")),
        },
        "threads": int(len(records.threads)),
        "clients": records.clients["client"].astype(str).tolist(),
        "graphs": {
            "total": int(len(records.graphs)),
            "tasks": int(records.graphs["n_tasks"].sum()) if len(records.graphs) else 0,
            "edges": int(len(records.dependencies)),
        },
        "transfers": {
            "distinct": int(per_transfer["transfer"].nunique()) if len(tr) else 0,
            "keys_moved": int(len(tr)),
            "bytes": int(tr["nbytes"].fillna(0).sum()) if len(tr) else 0,
            "to_clients": int(per_transfer["destination"].isna().sum()) if len(tr) else 0,
            "logged_by": _counts(per_transfer["logged_by"]) if len(tr) else {},
        },
        "configs": records.configs["name"].astype(str).tolist(),
        "time_went": _time_went(records),
        "unknown": unknown,
        "accounting": records.accounting.to_dict(),
    }
    if records.darshan is not None or records.io is not None:
        try:
            from metaprov.analysis.io_summary import summarize_io
        except ImportError:  # pragma: no cover - the I/O part ships with the Darshan reader
            pass
        else:
            summary["io"] = summarize_io(records, evidence=io_evidence)
    return summary


_TRANSITION_FILES = ("scheduler_transition.csv", "worker_transition.csv")


def counts(records: RunRecords) -> dict[str, Any]:
    """The run's counts, one definition each (``docs/records.md``, "Counts"), shared by
    ``inspect``, the report and the tests that hold the PROV and the questions to them.

    - ``tasks``: rows of ``tasks`` (``mp:Task``);
    - ``executions``: rows of ``executions`` (``mp:TaskExecution``), with
      ``executions_unrecorded`` of them known from the scheduler only (``mp:recordLost``);
    - ``executed``: tasks with at least one execution (``mp:task`` of an ``mp:TaskExecution``);
    - ``ran_unrecorded``: tasks with no execution that still ran (a result size or a transfer
      of their result shows it: neither ``mp:neverRan`` nor executed);
    - ``never_ran``: the rest (``mp:neverRan``); ``tasks = executed + ran_unrecorded + never_ran``;
    - ``retried``: tasks with more than one execution (``mp:retried``);
    - ``erred``: tasks that ended in error at least once (``mp:erred``);
    - ``compute_seconds``: the sum of ``end - start`` over every execution with both (all
      attempts; ``mp:duration``), None when no execution has both;
    - ``compute_unknown``: executions missing a start or an end (``mp:incomplete``);
    - ``workers``, ``workers_lost`` (``mp:lost``), ``processes`` and ``environments``
      (see :func:`_environments`).
    """
    t = records.tasks
    ex = records.executions
    n_exec = executions_per_task(records)
    never = t["never_ran"].fillna(False).to_numpy(dtype=bool)
    known = ex["start"].notna().to_numpy() & ex["end"].notna().to_numpy()
    dur = (ex["end"] - ex["start"]).dt.total_seconds()[known]
    w = records.workers
    env = _environments(records)
    return {
        "tasks": int(len(t)),
        "executions": int(len(ex)),
        "executions_unrecorded": int(ex["record_lost"].fillna(False).sum()),
        "executed": int((n_exec > 0).sum()),
        "ran_unrecorded": int(((n_exec == 0) & ~never).sum()),
        "never_ran": int(never.sum()),
        "retried": int((n_exec > 1).sum()),
        "erred": int(t["erred"].fillna(False).sum()),
        "compute_seconds": round(float(dur.sum()), 6) if known.any() else None,
        "compute_unknown": int((~known).sum()),
        "workers": int(len(w)),
        "workers_lost": int(w["lost"].fillna(False).sum()),
        "processes": env.get("processes", 0),
        "environments": env.get("environments", 0),
    }


def executions_per_task(records: RunRecords) -> np.ndarray:
    """Rows of ``executions`` per row of ``tasks`` (what the PROV links with ``mp:task``)."""
    keys = records.tasks["key"].astype(object)
    per = records.executions["key"].astype(object).value_counts()
    return per.reindex(keys).fillna(0).to_numpy(dtype=np.int64)


def _losses(records: RunRecords, c: dict[str, Any]) -> dict[str, Any]:
    """Workers lost, executions known from the scheduler only, and workers whose transfers
    show data no record of theirs explains (their records are likely missing)."""
    ev = records.worker_events
    lost = ev[ev["lost"].fillna(False).to_numpy(dtype=bool)]
    return {
        "workers_lost": c["workers_lost"],
        "executions_unrecorded": c["executions_unrecorded"],
        "removals": [
            {
                "worker": str(r.worker),
                "time": format_utc(r.time),
                "reason": None if pd.isna(r.reason) else str(r.reason),
                "running": None if pd.isna(r.n_processing) else int(r.n_processing),
                "results": None if pd.isna(r.n_results) else int(r.n_results),
                "data": None if pd.isna(r.n_data) else int(r.n_data),
            }
            for r in lost.itertuples(index=False)
        ],
        "redone": int(records.lost_tasks["redone"].fillna(False).sum()),
        "silent_senders": silent_senders(records),
    }


def silent_senders(records: RunRecords) -> list[dict[str, Any]]:
    """Workers that ran nothing on record yet sent results they never received: their
    executions are not in the records (files lost or cut), or the data was scattered to them.

    Only for runs with execution records (without any, every worker is silent and the run's
    ``unknown`` entries say why)."""
    ex = records.executions
    tr = records.transfers
    if not len(ex) or not len(tr):
        return []
    ran = set(ex["worker"].dropna().astype(str))
    sent = tr[tr["source"].notna() & ~tr["source"].astype(str).isin(ran)]
    if not len(sent):
        return []
    got = set(
        zip(
            tr["destination"].dropna().astype(str),
            tr.loc[tr["destination"].notna(), "key"].astype(str),
            strict=True,
        )
    )
    src = sent["source"].astype(str)
    unexplained = [(w, k) not in got for w, k in zip(src, sent["key"].astype(str), strict=True)]
    sent = sent[unexplained]
    out = []
    for w, g in sent.groupby(sent["source"].astype(str), sort=True):
        per = g.drop_duplicates("transfer")
        out.append(
            {
                "worker": w,
                "transfers": int(len(per)),
                "keys": int(len(g)),
                "bytes": int(g["nbytes"].fillna(0).sum()),
            }
        )
    return out


def _time_went(records: RunRecords) -> dict[str, Any]:
    """Where the workers' time went (Dask's fine performance metrics) and their memory:
    ``recorded`` False when the run has none (never zeros), else seconds per context and per
    (context, activity), bytes per context, and the memory samples' figures."""
    act, mem = records.activity, records.memory
    out: dict[str, Any] = {"recorded": bool(len(act)), "memory_recorded": bool(len(mem))}
    if len(act):
        sec = act[act["unit"] == "seconds"]
        by_ctx = sec.groupby("context")["value"].sum().sort_values(ascending=False)
        by_act = sec.groupby(["context", "activity"])["value"].sum().sort_values(ascending=False)
        nbytes = act[act["unit"] == "bytes"].groupby("context")["value"].sum()
        out.update(
            seconds_by_context={k: round(float(v), 6) for k, v in by_ctx.items()},
            seconds_by_activity={f"{c}/{a}": round(float(v), 6) for (c, a), v in by_act.items()},
            bytes_by_context={k: int(v) for k, v in nbytes.items()},
            executions_measured=int(
                act.dropna(subset=["key"]).drop_duplicates(["key", "worker", "attempt"]).shape[0]
            ),
        )
    if len(mem):
        out.update(
            memory_samples=int(len(mem)),
            max_process_bytes=int(mem["process"].max()),
            max_spilled_bytes=int(mem["spilled"].max()),
            paused_workers=sorted(
                mem.loc[mem["paused"].fillna(False).astype(bool), "worker"]
                .astype(str)
                .unique()
                .tolist()
            ),
        )
    return out


def time_went_text(t: dict[str, Any]) -> tuple[str, str]:
    """Where the workers' time went and their memory, as two short texts (``summary
    ["time_went"]``): "not recorded" where the run has none, never zeros."""
    if t.get("recorded"):
        ctx = ", ".join(f"{c} {v:.3f} s" for c, v in t["seconds_by_context"].items())
        top = ", ".join(f"{k} {v:.3f} s" for k, v in list(t["seconds_by_activity"].items())[:4])
        time_text = f"{ctx}; most: {top}"
    else:
        time_text = (
            "not recorded (no fine performance metrics: metaprov.capture records them; not 0)"
        )
    if t.get("memory_recorded"):
        paused = t["paused_workers"]
        memory_text = (
            f"{t['memory_samples']} samples, max process {t['max_process_bytes']:,} bytes, "
            f"max spilled {t['max_spilled_bytes']:,} bytes; paused: "
            f"{', '.join(paused) if paused else 'none'}"
        )
    else:
        memory_text = "not recorded"
    return time_text, memory_text


def unknowns(records: RunRecords) -> list[dict[str, str]]:
    """What the run's files cannot tell, and why: ``what``, ``why`` and ``effect`` (the
    consequence for the export and the questions), one entry each.

    - no thread ids (the transition files, which carry them, are missing): Darshan I/O stays
      with the worker processes, and per-thread questions have nothing to answer;
    - no compute windows for executed tasks: their compute time is unknown, not 0.
    """
    missing = [n for n in _TRANSITION_FILES if n in records.missing]
    why = (
        f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
        if missing
        else "no transition or worker_execution.csv row names a thread"
    )
    out: list[dict[str, str]] = []
    ex = records.executions
    ran = ~records.tasks["never_ran"].fillna(False).to_numpy(dtype=bool)
    if len(records.tasks) and records.executions["thread"].isna().all():
        out.append(
            {
                "what": "thread ids",
                "why": why,
                "effect": "Darshan I/O stays with the worker processes (not linked to tasks); "
                "thread and task I/O questions have no answer for this run",
            }
        )
    timeless = int((ex["start"].isna() | ex["end"].isna()).sum())
    if timeless or (missing and len(records.tasks) and not len(ex)):
        out.append(
            {
                "what": "compute time"
                + ("" if timeless in (0, len(ex)) else f" of {timeless} executions"),
                "why": (why if missing else "their start or end was never observed"),
                "effect": "unknown, not 0: the compute windows were never seen",
            }
        )
    unrecorded = int(((executions_per_task(records) == 0) & ran).sum())
    if unrecorded:
        out.append(
            {
                "what": f"executions of {unrecorded} tasks that ran",
                "why": "a result size or a transfer shows they ran, but no execution of theirs "
                "is recorded" + (f" ({' and '.join(missing)} missing)" if missing else ""),
                "effect": "counted as ran without a record (neither executed nor never ran); "
                "no mp:TaskExecution, so where, when and how long is unknown",
            }
        )
    return out


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out[k] = _jsonable(v)
        elif isinstance(v, pd.Timestamp):
            out[k] = format_utc(v)
        elif isinstance(v, (str, int, float, bool, list)) or v is None:
            out[k] = v
        else:
            out[k] = str(v)
    return out


def _top(d: dict[str, int], n: int = 10) -> str:
    items = list(d.items())
    text = ", ".join(f"{k} {v}" for k, v in items[:n])
    if len(items) > n:
        text += f", ... ({len(items) - n} more)"
    return text or "-"


def _compute(tasks: dict[str, Any]) -> str:
    if tasks["compute_seconds"] is None:
        return "unknown (see below)"
    text = f"{tasks['compute_seconds']:.3f} s"
    if tasks.get("compute_unknown"):
        text += f" (+ {tasks['compute_unknown']} executions of unknown compute time)"
    return text


def format_summary(s: dict[str, Any]) -> str:
    """Render :func:`summarize`'s dict as a short human report."""
    run, tasks, tr = s["run"], s["tasks"], s["transfers"]
    lines = [
        f"run        {run['path']}",
        f"run id     {run['run_id']}",
        f"span       {run['first_event']} .. {run['last_event']} ({run['duration_s']} s)",
    ]
    job = s.get("job") or {}
    if job.get("id"):
        lines.append(
            f"job        {job.get('id')} on {job.get('server', '?')} user {job.get('user', '?')}"
        )
    b = s.get("batch_jobs") or {}
    if b.get("total"):
        states = ", ".join(f"{n} {k}" for k, n in (b.get("states") or {}).items())
        wait = b.get("max_queue_wait_s")
        lines.append(
            f"batch jobs {b['total']:,} ({', '.join(b['ids'][:5])}{', ...' if b['total'] > 5 else ''})"
            + (f": {states}" if states else "")
            + ("" if wait is None else f"; up to {wait:.3g} s in the queue")
        )
    if s["scheduler"].get("address"):
        lines.append(f"scheduler  {s['scheduler']['address']}")
    live = bool(run.get("in_progress"))
    if live:
        lines.append(f"state      {run.get('in_progress_note') or 'in progress'}")
    never = "not run yet (waiting or running)" if live else "never ran"
    lines += [
        f"tasks      {tasks['total']} ({tasks['executed']} executed, "
        + (
            f"{tasks['ran_unrecorded']} ran without a record, "
            if tasks.get("ran_unrecorded")
            else ""
        )
        + f"{tasks['never_ran']} {never}, "
        f"{tasks['erred']} erred, {tasks['retried']} retried); {s['executions']} executions; "
        f"compute {_compute(tasks)}",
        f"  by state   {_top(tasks['by_state'])}",
        f"  by prefix  {_top(tasks['by_prefix'])}",
        f"  times from {_top(tasks['time_source'])}",
        f"transitions {s['transitions']['total']} ({_top(s['transitions']['by_observer'])})",
        f"workers    {s['workers']['total']}, threads seen {s['threads']}, threads per worker {', '.join(f'{k} (x{v})' for k, v in s['workers']['threads_per_worker'].items()) or '-'}",
        f"clients    {len(s['clients'])}",
        f"graphs     {s['graphs']['total']} ({s['graphs']['tasks']} tasks, {s['graphs']['edges']} edges)",
        f"transfers  {tr['distinct']} distinct, {tr['keys_moved']} keys, {tr['bytes']:,} bytes, "
        f"{tr['to_clients']} to clients; sides {_top(tr['logged_by'])}",
        f"configs    {', '.join(s['configs']) or '-'}",
    ]
    env = s.get("environments") or {}
    if env.get("processes"):
        line = (
            f"software   {env['environments']} environment(s) over {env['processes']} process(es)"
            + (
                f" (+ {env['processes_unknown']} of unknown environment)"
                if env.get("processes_unknown")
                else ""
            )
            + f", {env['packages']} package versions"
        )
        if env["differing"]:
            line += f"; differ between processes: {', '.join(env['differing'][:8])}"
            line += " ..." if len(env["differing"]) > 8 else ""
        lines.append(line)
    lines += format_losses(s.get("losses") or {})
    if "time_went" in s:
        time_text, memory_text = time_went_text(s["time_went"])
        lines += [f"time went  {time_text}", f"  memory   {memory_text}"]
    if run["missing_inputs"]:
        lines.append(f"missing    {', '.join(run['missing_inputs'])}")
    for u in s.get("unknown", []):
        lines.append(f"unknown    {u['what']}: {u['why']}; {u['effect']}")
    if "io" in s:
        try:
            from metaprov.analysis.io_summary import format_io

            lines += format_io(s["io"])
        except ImportError:  # pragma: no cover
            pass
    lines.append("accounting (rows read / used; not used by reason)")
    files = s["accounting"]["files"]
    logs = {n: a for n, a in files.items() if ".darshan" in n}
    if logs:
        # One line for all Darshan logs (a run has one per process); per log in --json.
        read = sum(a["rows_read"] for a in logs.values())
        used = sum(a["rows_used"] for a in logs.values())
        reasons: dict[str, int] = {}
        for a in logs.values():
            for k, v in a["not_used"].items():
                reasons[k] = reasons.get(k, 0) + v
            for f in a.get("findings", []):
                if f["reason"] not in a["not_used"]:
                    reasons[f"warning: {f['reason']}"] = (
                        reasons.get(f"warning: {f['reason']}", 0) + f["count"]
                    )
        text = "; ".join(f"{k}: {v}" for k, v in sorted(reasons.items()))
        lines.append(f"  {f'{len(logs)} Darshan logs':28s} {read:>9} / {used:<9} {text}")
    for name, a in files.items():
        if name in logs:
            continue
        if not a["present"]:
            lines.append(f"  {name:28s} missing")
            continue
        reasons = "; ".join(f"{k}: {v}" for k, v in a["not_used"].items())
        lines.append(f"  {name:28s} {a['rows_read']:>9} / {a['rows_used']:<9} {reasons}")
        for f in a.get("findings", []):
            if f["reason"] in a["not_used"]:
                continue
            ex = f["examples"][0] if f["examples"] else {}
            where = (
                f" (line {ex.get('line')}"
                + (f", column {ex.get('column')}" if ex.get("column") else "")
                + ")"
                if ex.get("line")
                else ""
            )
            lines.append(f"    warning: {f['reason']}{where}")
    return "\n".join(lines)


def format_losses(losses: dict[str, Any]) -> list[str]:
    """The ``lost`` and ``warning`` lines of a run that lost workers or records."""
    lines = []
    for r in losses.get("removals", []):
        took = ", ".join(
            f"{r[k]} {label}"
            for k, label in (("running", "running"), ("results", "results"), ("data", "data"))
            if r.get(k)
        )
        lines.append(
            f"lost       worker {r['worker']} at {r['time']} ({r['reason'] or 'reason unknown'})"
            + (f": took {took}" if took else "")
        )
    if losses.get("executions_unrecorded"):
        lines.append(
            f"lost       records of {losses['executions_unrecorded']} executions: known from the "
            "scheduler only (its transitions; the worker's own records are missing)"
        )
    for w in losses.get("silent_senders", []):
        lines.append(
            f"warning    worker {w['worker']} ran nothing on record yet sent {w['keys']} keys "
            f"({w['bytes']:,} bytes) in {w['transfers']} transfers it never received: "
            "its execution records are missing (or the data was scattered to it)"
        )
    return lines


def _environments(records: RunRecords) -> dict[str, Any]:
    """Environments, processes and the packages whose version differs between processes."""
    env = getattr(records, "environments", None)
    if env is None or not len(env):
        return {}
    from metaprov.analysis.environment import process_differences

    diff = process_differences(records)
    pk = records.packages
    # processes: the records of a process with a known environment (what the PROV links with
    # mp:environment); a Spack record is the job's, not a process
    proc = env[env["role"].astype(str).ne("job")]
    known = proc["environment"].notna()
    return {
        "environments": int(env["environment"].nunique()),
        "processes": int(known.sum()),
        "processes_unknown": int((~known).sum()),
        "packages": int(len(pk.drop_duplicates(["manager", "name", "version"]))),
        "differing": sorted(set(diff["package"].astype(str))) if len(diff) else [],
    }


def batch_jobs(records: RunRecords) -> dict[str, Any]:
    """The batch jobs the run's processes ran in: how many, their last states, the longest
    queue wait (start minus submission, seconds: part of the run's startup; None unknown)."""
    jobs = records.jobs
    wait = (jobs["started"] - jobs["submitted"]).dt.total_seconds().dropna()
    return {
        "total": int(len(jobs)),
        "ids": [str(j) for j in jobs["job"]],
        "states": _counts(jobs["state"].dropna()),
        "max_queue_wait_s": float(wait.max()) if len(wait) else None,
    }
