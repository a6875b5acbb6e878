"""read_run / inspect --json on the real runs: counts equal counts computed here from the raw files."""

from __future__ import annotations

import ast
import json

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import real_run_params

import metaprov
from metaprov.cli import cli


def _independent_counts(run) -> dict:
    """Counts straight from the CSVs with pandas + ast.literal_eval (a different code path)."""
    out = {}
    keys: set[str] = set()
    n_trans = 0
    for name in ("scheduler_transition.csv", "worker_transition.csv"):
        p = run / name
        if p.exists():
            df = pd.read_csv(p, dtype=str, keep_default_na=False)
            keys |= set(df["key"])
            n_trans += len(df)
    out["transitions"] = n_trans
    g = pd.read_csv(run / "graph.csv", dtype=str)
    edges = set()
    for i, cell in enumerate(g["dependencies"]):
        for k, deps in ast.literal_eval(cell).items():
            keys.add(str(k))
            for d in deps:
                edges.add((i, str(k), str(d)))
                keys.add(str(d))
        keys |= {str(k) for k in ast.literal_eval(g["keys"][i])}
    out["edges"] = len(edges)
    out["graphs"] = len(g)
    t = pd.read_csv(run / "worker_transfer.csv", dtype=str, keep_default_na=False)
    content = t.drop(columns=[t.columns[0], "time"])
    distinct = content.drop_duplicates()
    out["duplicates"] = len(t) - len(distinct)
    for cell in distinct["keys"]:
        keys |= {str(k) for k in ast.literal_eval(cell)}
    # one transfer = an incoming row and/or the outgoing row of the other side
    sides = distinct.assign(
        src=distinct["who"].where(distinct["type"] == "incoming_transfer", distinct["called_from"]),
        dst=distinct["called_from"].where(distinct["type"] == "incoming_transfer", distinct["who"]),
        ks=distinct["keys"].map(lambda c: tuple(sorted(str(k) for k in ast.literal_eval(c)))),
    )
    per_group = sides.groupby(["src", "dst", "ks", "type"]).size().unstack(fill_value=0)
    out["transfers"] = int(per_group.max(axis=1).sum())
    out["tasks"] = len(keys)
    out["workers"] = pd.read_csv(run / "worker.csv", dtype=str)["worker"].nunique()
    out["clients"] = pd.read_csv(run / "client.csv", dtype=str)["client"].nunique()
    return out


@pytest.mark.realdata
@pytest.mark.parametrize("run", real_run_params())
def test_inspect_counts_equal_raw_counts(run):
    expected = _independent_counts(run)
    result = CliRunner().invoke(cli, ["--quiet", "inspect", "--json", "--no-darshan", str(run)])
    assert result.exit_code == 0, result.output
    s = json.loads(result.output)
    assert s["tasks"]["total"] == expected["tasks"]
    assert s["transitions"]["total"] == expected["transitions"]
    assert s["transfers"]["distinct"] == expected["transfers"]
    assert s["graphs"]["edges"] == expected["edges"]
    assert s["graphs"]["total"] == expected["graphs"]
    assert s["workers"]["total"] == expected["workers"]
    assert len(s["clients"]) == expected["clients"]
    dup = s["accounting"]["files"]["worker_transfer.csv"]["not_used"]
    assert sum(dup.values()) == expected["duplicates"]


def test_pmda_r1_facts(pmda_r1):
    r = metaprov.read_run(pmda_r1, darshan=False)
    assert len(r.tasks) == 9 and len(r.executions) == 9
    assert (r.tasks["time_source"] == "worker").all()
    assert len(r.workers) == 8 and (r.workers["threads"] == 8).all()
    assert r.job["id"] == "1873179" and r.job["user"] == "agueroud"
    assert r.scheduler["address"] == "tcp://10.201.1.129:8786"
    assert set(r.configs["kind"]) == {"darshan", "mofka-bedrock", "job-output"}
    assert r.missing == []
    # every executed task's thread appears exactly, as in the raw file (no float rounding)
    raw = pd.read_csv(pmda_r1 / "scheduler_transition.csv", dtype=str)
    raw_threads = {int(x) for x in raw["thread"].dropna()}
    assert set(int(x) for x in r.tasks["thread"].dropna()) == raw_threads


def test_partial_run_reads_and_reports_missing(imageproc_r1):
    r = metaprov.read_run(imageproc_r1, darshan=False)
    assert r.missing == ["scheduler_transition.csv", "worker_transition.csv"]
    assert r.accounting.files["worker_transfer.csv"].not_used == {
        "duplicate (re-sent log entry; identical but for 'time')": 3070
    }
    assert len(r.dependencies) > 11000
    moved = r.tasks["key"].isin(r.transfers["key"])
    assert not r.tasks.loc[moved, "never_ran"].any()  # data that moved was computed
    assert r.tasks.loc[~moved, "never_ran"].all()  # nothing else says they ran
    assert (r.tasks["n_executions"] == 0).all()
