"""Regenerate docs/records.md from metaprov.records.SCHEMAS: ``python docs/gen_records_doc.py``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metaprov.records import SCHEMAS  # noqa: E402

INTRO = """# The record tables (RunRecords)

`metaprov.read_run(path)` returns a `RunRecords`: one pandas DataFrame per table below, plus
`job`, `scheduler` and `software` dicts, `missing` (absent inputs) and `accounting`
(per input file: rows read, rows used, rows not used with reason and line).

Conventions: times are `datetime64[us, UTC]` (float epochs rounded once to microseconds); thread
ids are exact `UInt64` (never through float); counts are nullable `Int64`; text is pandas `str`
(the large `transitions` table uses `category`). Keys are normalised to `str(key)`, so the tuple
key `('x', 1)` in a transfer or graph literal and `"('x', 1)"` in a transition row are one task.

## As files: Parquet or CSV (`metaprov records`)

```bash
metaprov records examples/run -o example-records            # one run: a file per table
metaprov records runs/PMDA -o pmda-records                   # a folder of runs (or several RUNs)
metaprov records examples/run -o example-csv -f csv          # CSV instead of Parquet
```

One run gives `DIR/<table>.parquet` for every table below (empty tables too, with their
columns) and `DIR/run.json` (run id, job, scheduler, software, missing inputs, row accounting).
Several runs give one dataset per table partitioned by run, hive style:
`DIR/<table>/run_id=<id>/part-0.parquet`, and `DIR/runs.json`. Read them as one table with a
`run_id` column:

```python
import pandas as pd, polars as pl, duckdb
pd.read_parquet("pmda-records/tasks")                                  # pandas (pyarrow)
pl.scan_parquet("pmda-records/tasks/**/*.parquet", hive_partitioning=True).collect()
duckdb.sql("SELECT run_id, count(*) FROM read_parquet('pmda-records/tasks/**/*.parquet', "
           "hive_partitioning = true) GROUP BY run_id")
```

Parquet keeps the types below exactly (`UInt64` -> `uint64`, times -> `timestamp[us, tz=UTC]`,
`Int64` -> `int64`, `boolean` -> `bool`, `category` -> dictionary); pandas reads them back to the
same dtypes. CSV writes times as ISO 8601 with `Z` and floats exactly, in their shortest form.
Darshan I/O is linked to tasks first, so `darshan_links` says which task issued each segment.
The output directory must be new (or empty); it is written beside and renamed into place at the
end, so an error leaves nothing behind. In Python: `metaprov.write_records(runs, "DIR",
format="parquet")` returns what was written (`.to_dict()`); `metaprov.export.records.record_tables
(records)` gives the conformed tables of a `RunRecords`.

## Counts: one definition each

`metaprov inspect` (text and `--json`), the HTML report, the PROV export and the packaged
questions count the same things the same way (`metaprov.analysis.summary.counts`; a test holds
every surface to it on every real run and on runs with files missing):

| count | definition | in the records | in the PROV |
|---|---|---|---|
| tasks | every key the run names | rows of `tasks` | `mp:Task` |
| executions | every execution attempt on record | rows of `executions` | `mp:TaskExecution` (the `runs` question's `executions`) |
| executed | tasks with at least one execution | `n_executions > 0` | tasks that are the `mp:task` of an `mp:TaskExecution` |
| ran without a record | tasks with no execution that still ran: a result size or a transfer of their result shows it | `n_executions == 0` and not `never_ran` | neither `mp:neverRan` nor executed |
| never ran | nothing shows the task ran | `never_ran` | `mp:neverRan true` |
| retried | tasks with more than one execution (a task sent to processing again without a second execution, by work stealing or a lost worker, is not retried: see `lost_tasks`) | `retried` (`n_executions > 1`) | `mp:retried true` |
| erred | tasks that ended in error at least once | `erred` | `mp:erred true` |
| compute seconds | the sum of `end - start` over every execution with both (all attempts); unknown (not 0) when no execution has both | `executions.start`, `end` | the sum of `mp:duration` |
| executions of unknown compute time | executions missing a start or an end | `start` or `end` is NaT | `mp:incomplete true` |
| executions seen by the scheduler only | executions whose worker's own record is missing (the worker was lost, or its file cut) | `executions.record_lost` | `mp:recordLost true`; the run's and the worker's `mp:unrecordedExecutionCount` |
| workers lost | workers the scheduler removed while the run went on, unexpectedly or with work | `workers.lost`, `worker_events.lost` | `mp:lost true`; the run's `mp:lostWorkerCount` |
| processes | process records with a known software environment (a Spack record is the job's, not a process; a process whose environment is unknown is counted apart) | `environments` rows with `environment`, role not `job` | agents with `mp:environment` (the `environment` question's `processes`) |
| environments | distinct software environments | `environments.environment` | `mp:SoftwareEnvironment` |

`tasks = executed + ran without a record + never ran`, and `retried <= executions - executed`.
Where the data leaves a fact unknown, every surface says so the same way: inspect's `unknown`
lines (and `--json`'s `unknown` list) name what, why and the effect; a count that cannot be
known is absent (None), never 0. A run that lost workers or records says so in inspect (`lost`
lines), the report (`lost` row), the PROV (the terms above) and `metaprov validate` (warnings
`LostWorkers`, `LostRecords`, which do not break conformance). A worker that ran nothing on
record yet sent results it never received is named by a `warning` line: its execution records
are missing, or the data was scattered to it.

This page is generated by `docs/gen_records_doc.py`; a test keeps it in sync.
"""


def render() -> str:
    out = [INTRO]
    for name, cols in SCHEMAS.items():
        out.append(f"\n## `{name}`\n\n| column | dtype | meaning |\n|---|---|---|")
        for col, dtype, desc in cols:
            out.append(f"| `{col}` | `{dtype}` | {desc.replace('|', '/')} |")
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    (Path(__file__).parent / "records.md").write_text(render(), encoding="utf-8")
