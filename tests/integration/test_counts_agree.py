"""One number per fact: inspect, the PROV, the packaged questions and the report give the same
counts (docs/records.md, "Counts"), on every real run in ../shared and on synthetic runs with
files missing (no worker transitions, no scheduler transitions, no transitions at all)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import REAL_RUNS, sample_runs

import metaprov
from metaprov.analysis.summary import summarize
from metaprov.queries import run_question
from metaprov.report.views import facts, run_view
from metaprov.store import open_store
from metaprov.synthetic import generate_run

SYNTHETIC = {
    "synthetic-whole": {},
    "synthetic-no-worker-transitions": {"with_worker_transitions": False},
    "synthetic-no-scheduler-transitions": {"with_scheduler_transitions": False},
    "synthetic-no-transitions": {
        "with_worker_transitions": False,
        "with_scheduler_transitions": False,
    },
}

COUNTS = """
PREFIX mp: <https://w3id.org/metaprov/ns#>
SELECT ?g
  (COUNT(DISTINCT ?t) AS ?tasks)
  (COUNT(DISTINCT ?e) AS ?executions)
  (COUNT(DISTINCT ?et) AS ?executed)
  (COUNT(DISTINCT ?n) AS ?never_ran)
  (COUNT(DISTINCT ?r) AS ?retried)
  (COUNT(DISTINCT ?i) AS ?compute_unknown)
  (COUNT(DISTINCT ?l) AS ?executions_unrecorded)
WHERE {
  GRAPH ?g {
    { ?t a mp:Task }
    UNION { ?e a mp:TaskExecution }
    UNION { ?x a mp:TaskExecution ; mp:task ?et }
    UNION { ?n a mp:Task ; mp:neverRan true }
    UNION { ?r a mp:Task ; mp:retried true }
    UNION { ?i a mp:TaskExecution ; mp:incomplete true }
    UNION { ?l a mp:TaskExecution ; mp:recordLost true }
  }
}
GROUP BY ?g
"""

COMPUTE = """
PREFIX mp: <https://w3id.org/metaprov/ns#>
SELECT ?g (SUM(?d) AS ?seconds) (COUNT(?d) AS ?n)
WHERE { GRAPH ?g { ?e a mp:TaskExecution ; mp:duration ?d } }
GROUP BY ?g
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The real runs (when present) and the synthetic ones, by name."""
    out: dict[str, Path] = {}
    base = tmp_path_factory.mktemp("counts")
    for seed, (name, kw) in enumerate(SYNTHETIC.items()):  # own seeds: own run ids
        out[name] = generate_run(base / name, 300, seed=seed, retried_fraction=0.05, **kw)
    # a run whose scheduler file is gone too: what the transfers and graph alone say
    cut = base / "synthetic-graph-and-transfers-only"
    shutil.copytree(out["synthetic-whole"], cut)
    for name in ("scheduler_transition.csv", "worker_transition.csv"):
        (cut / name).unlink()
    out[cut.name] = cut
    for run in sample_runs(list(REAL_RUNS), keep=1):  # METAPROV_FULL=1: every real run
        out[f"{run.parent.name}-{run.name}"] = run
    return out


@pytest.fixture(scope="module")
def surfaces(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Per run: inspect's JSON, the report's facts, the export's counts (SPARQL over the
    loaded graph) and the packaged questions' answers, all from one store."""
    store_dir = tmp_path_factory.mktemp("counts-store") / "store"
    names = list(runs)
    # Darshan logs (process environments) for the first real run only: the others' counts do
    # not depend on them, and reading them all costs minutes
    with_logs = names[len(SYNTHETIC) + 1 : len(SYNTHETIC) + 2]
    metaprov.load([runs[n] for n in names if n not in with_logs], store=store_dir, darshan=False)
    if with_logs:
        metaprov.load([runs[n] for n in with_logs], store=store_dir)
    out: dict[str, dict] = {}
    with open_store(store_dir, read_only=True) as st:
        counts = st.query(COUNTS).set_index("g")
        compute = st.query(COMPUTE).set_index("g")
        questions = run_question(st, "runs", {})
        graph_of = dict(zip(questions["run_id"], questions["graph"], strict=True))
        questions = questions.set_index("graph")
        env = run_question(st, "environment", {})
        for n in names:
            records = metaprov.read_run(runs[n], darshan=n in with_logs)
            s = summarize(records)
            g = graph_of[records.run_id]
            out[n] = {
                "inspect": s,
                "report": facts(run_view(records, s)),
                "prov": counts.loc[g].to_dict() if g in counts.index else {},
                "compute": compute.loc[g].to_dict() if g in compute.index else {},
                "runs": questions.loc[g].to_dict(),
                "environment": env[
                    (env["kind"] == "environment") & (env["run_id"] == records.run_id)
                ],
            }
    return out


def _n(value: object) -> int:
    return 0 if value is None or pd.isna(value) else int(value)


@pytest.mark.realdata
def test_every_count_agrees_across_inspect_prov_questions_and_report(
    runs: dict[str, Path], surfaces: dict
) -> None:
    assert len(surfaces) >= len(SYNTHETIC) + 1
    for name, s in surfaces.items():
        t = s["inspect"]["tasks"]
        prov = s["prov"]
        # tasks: inspect, mp:Task, the runs question, the report
        assert t["total"] == _n(prov.get("tasks")) == _n(s["runs"]["tasks"]), name
        assert s["report"]["tasks"]["total"] == t["total"], name
        # executions and executed tasks
        assert s["inspect"]["executions"] == _n(prov.get("executions")), name
        assert _n(s["runs"]["executions"]) == s["inspect"]["executions"], name
        assert s["report"]["executions"] == s["inspect"]["executions"], name
        assert t["executed"] == _n(prov.get("executed")) == s["report"]["tasks"]["executed"], name
        # the three kinds of task add up; never ran, retried as in the PROV
        assert t["executed"] + t["ran_unrecorded"] + t["never_ran"] == t["total"], name
        assert t["never_ran"] == _n(prov.get("never_ran")), name
        assert t["retried"] == _n(prov.get("retried")) == s["report"]["tasks"]["retried"], name
        assert t["retried"] <= max(s["inspect"]["executions"] - t["executed"], 0), name
        # unknown compute: executions without a window, as mp:incomplete; seconds as mp:duration
        assert t["compute_unknown"] == _n(prov.get("compute_unknown")), name
        if t["compute_seconds"] is not None:
            got = float(s["compute"]["seconds"])
            assert t["compute_seconds"] == pytest.approx(got, abs=1e-3), (name, got)
        else:
            assert not s["compute"] or _n(s["compute"]["n"]) == 0, name
        assert s["inspect"]["losses"]["executions_unrecorded"] == _n(
            prov.get("executions_unrecorded")
        ), name
        # processes and environments: inspect as the environment question and the PROV
        env = s["inspect"]["environments"]
        q = s["environment"]
        if env:
            assert env["environments"] == q["environment"].nunique(), name
            per_env = q.drop_duplicates("environment")["processes"].astype(int).sum()
            assert env["processes"] == per_env, name
        else:
            assert q.empty, name


@pytest.mark.realdata
def test_a_run_without_transition_files_says_its_executions_are_unrecorded(
    surfaces: dict,
) -> None:
    s = surfaces["synthetic-graph-and-transfers-only"]["inspect"]
    assert s["executions"] == 0 and s["tasks"]["executed"] == 0
    assert s["tasks"]["ran_unrecorded"] > 0
    text = metaprov.analysis.summary.format_summary(s)
    assert "0 executed" in text and "ran without a record" in text
    assert any(u["what"].startswith("executions of") for u in s["unknown"])
