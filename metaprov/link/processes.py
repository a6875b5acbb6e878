"""Stage 1 of the link: which process is which.

Each Darshan log is one process, with the role its command line gives (``darshan.logs``).
:func:`map_workers` finds the log of each Dask worker: every task's ``thread`` appears as a
pthread id in the log of the process that ran it, so each worker takes the log holding most of
its executions' thread ids (a pid recorded by the capture maps the rest). :func:`decide_other_logs`
then decides every segment of a log that is not a mapped worker: outside the run, a process that
runs no task, or a worker process whose threads ran none of the recorded tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from metaprov.link.decisions import Decisions
from metaprov.link.windows import Executions, Segments


@dataclass
class WorkerLogs:
    """The worker address of each mapped log, the votes that chose it, notes on what did not map."""

    worker_of_log: dict[int, str] = field(default_factory=dict)
    votes_of_log: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def map_workers(
    seg: Segments, logs: pd.DataFrame, ex: Executions, workers: pd.DataFrame
) -> WorkerLogs:
    """Worker address -> log: by thread-id membership (majority vote over the worker's
    executions), then by the pid the capture recorded for a worker-role log left unmatched."""
    out = WorkerLogs()
    log_names = logs["log"].astype(str).tolist()
    in_run = logs["in_run"].fillna(True).to_numpy(dtype=bool)
    if seg.n and len(ex.table):
        has_pt = seg.has_pthread
        lt = pd.DataFrame({"li": seg.log[has_pt], "thread": seg.pthread[has_pt]}).drop_duplicates()
        et = pd.DataFrame({"worker": ex.worker, "thread": ex.thread})
        m = et.merge(lt, on="thread", how="inner")
        m = m[in_run[m["li"].to_numpy()]] if len(m) else m
        if len(m):
            v = m.groupby(["worker", "li"]).size().rename("votes").reset_index()
            v = v.sort_values(["worker", "votes", "li"], ascending=[True, False, True])
            for w, grp in v.groupby("worker", sort=True):
                top = grp.iloc[0]
                if len(grp) > 1 and grp.iloc[1]["votes"] == top["votes"]:
                    out.notes.append(
                        f"worker {w}: its task threads appear equally often in "
                        f"{len(grp)} logs; no process assigned"
                    )
                    continue
                li = int(top["li"])
                if li in out.worker_of_log and out.votes_of_log[li] >= int(top["votes"]):
                    out.notes.append(
                        f"worker {w}: log {log_names[li]} already taken by another worker"
                    )
                    continue
                out.worker_of_log[li] = str(w)
                out.votes_of_log[li] = int(top["votes"])
    # fallback: pid known for a worker (capture plugin) and not mapped by membership
    if len(workers) and "pid" in workers and workers["pid"].notna().any():
        known = workers["pid"].notna()
        pid_to_worker = dict(
            zip(
                workers.loc[known, "pid"].astype(int),
                workers.loc[known, "address"].astype(str),
                strict=True,
            )
        )
        mapped = set(out.worker_of_log.values())
        roles = logs["role"].astype(str).to_numpy()
        for li, pid in enumerate(logs["pid"].tolist()):
            if li in out.worker_of_log or pd.isna(pid):
                continue
            w = pid_to_worker.get(int(pid))
            if w is not None and w not in mapped and roles[li] == "worker":
                out.worker_of_log[li] = w
                out.votes_of_log[li] = 0
    return out


def decide_other_logs(
    seg: Segments, logs: pd.DataFrame, mapped: dict[int, str], ex: Executions, d: Decisions
) -> None:
    """Decide every segment of the logs that are not a mapped worker process."""
    roles = logs["role"].astype(str).to_numpy()
    in_run = logs["in_run"].fillna(True).to_numpy(dtype=bool)
    for li in range(len(logs)):
        idx = seg.of_log(li)
        if not len(idx) or li in mapped:
            continue
        if not in_run[li]:
            d.decide(
                idx,
                "unlinked",
                "outside-run",
                "log from a program outside the run (other user, or disjoint in time)",
            )
        elif roles[li] != "worker":
            d.decide(idx, "process", "process-role", f"process runs no tasks: role {roles[li]}")
        elif ex.task_threads_known == 0 and ex.n_ran:
            # the run records no thread of any task: which task issued the I/O of a worker
            # process cannot be decided at all (said once, by link_io)
            d.decide(
                idx, "unlinked", "no-task-threads", "the run records no thread ids of its tasks"
            )
        else:
            d.decide(
                idx[seg.has_pthread[idx]],
                "process",
                "unmapped-process",
                "worker process whose threads ran none of the recorded tasks",
            )
            d.decide(
                idx[~seg.has_pthread[idx]],
                "unlinked",
                "no-thread-id",
                "no thread id recorded, and the process is not matched to a worker",
            )
