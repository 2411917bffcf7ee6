"""`--faults sweep:fast`: every (site, kind) pair a full sweep reaches is still reached, each in at most two units
of distinct cases; the fault-free figures are the sweep's; the choice does not depend on concurrency."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evals.cli.main import main
from evals.faults.plan import FAST_UNITS_PER_PAIR, Fault, FaultPlan

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The same small mix of bundled cases (chat in English and Chinese, working path) under sweep and sweep:fast."""
    tmp = tmp_path_factory.mktemp("fast")
    dataset = tmp / "mix.jsonl"
    lines = []
    for name, count in (("chat_en.jsonl", 4), ("chat_zh.jsonl", 2), ("working.jsonl", 2)):
        lines += [line for line in (REPO / "datasets" / name).read_text(encoding="utf-8").splitlines()
                  if line.strip()][:count]
    dataset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = {}
    for label, faults, concurrency in (("sweep", "sweep", "2"), ("fast", "sweep:fast", "2"),
                                       ("fast1", "sweep:fast", "1")):
        out[label] = tmp / label
        assert main(["run", "--dataset", str(dataset), "--embedder", "hash", "--matcher", "text", "--no-progress",
                     "--faults", faults, "--concurrency", concurrency, "--out", str(out[label])]) == 0
    return out


def _faults(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "faults.parquet")


@pytest.mark.ci_heavy  # the fixture's three sweep runs (issue 35: run by `nox -s heavy`)
def test_fast_reaches_every_pair_the_full_sweep_reaches_in_at_most_two_units_of_distinct_cases(runs):
    sweep, fast = _faults(runs["sweep"]), _faults(runs["fast"])
    pairs = set(zip(sweep.site, sweep.kind, strict=True))
    assert {(site, kind) for site in ("lm.extract", "lm.extract_working", "lm.reconcile") for kind in
            ("non_json_200", "garbage")} | {("lm.reconcile", "null_ops"), ("lm.extract", "null_facts"),
                                            ("lm.extract_working", "null_facts")} <= pairs
    assert set(zip(fast.site, fast.kind, strict=True)) == pairs
    per_pair = fast.groupby(["site", "kind"]).case_id.agg(["size", "nunique"])
    assert (per_pair["size"] <= FAST_UNITS_PER_PAIR).all() and (per_pair["size"] == per_pair["nunique"]).all()
    assert len(fast) <= FAST_UNITS_PER_PAIR * len(pairs) < len(sweep)
    assert (fast.outcome == "ok").all()
    coverage = pd.read_parquet(runs["fast"] / "coverage.parquet")
    assert coverage.reached.all() and len(coverage) == len(pairs)
    manifest = json.loads((runs["fast"] / "manifest.json").read_text())
    assert manifest["faults"] == "sweep:fast" and manifest["verdict"] == "valid"


@pytest.mark.ci_heavy
def test_fast_keeps_the_sweeps_fault_free_figures(runs):
    figures = ["fact_f1", "fact_precision", "fact_recall", "subject_accuracy", "owner_accuracy", "no_memory_accuracy"]
    base, fast = (pd.read_parquet(runs[k] / "metrics.parquet").set_index(["dataset", "metric"]) for k in ("sweep", "fast"))
    rows = [(d, m) for d, m in base.index if m in figures]
    assert rows
    assert base.loc[rows, "value"].equals(fast.loc[rows, "value"])
    cases_sweep, cases_fast = (pd.read_parquet(runs[k] / "cases.parquet").set_index("case_id") for k in ("sweep", "fast"))
    assert cases_sweep.n_memories.equals(cases_fast.n_memories.loc[cases_sweep.index])


@pytest.mark.ci_heavy
def test_the_designated_units_do_not_depend_on_concurrency(runs):
    key = ["case_id", "write", "site", "kind", "occurrence"]
    one, two = (_faults(runs[k])[key].sort_values(key).reset_index(drop=True) for k in ("fast1", "fast"))
    assert one.equals(two)


def test_designate_gathers_pairs_in_few_cases_and_a_probe_runs_no_fault():
    probe = FaultPlan.parse("sweep:fast").probe()
    reached = {"lm.extract": 1, "embed": 1}
    assert probe.faults_for_write(reached, 0, "p|a|0") == []
    assert probe.faults_for_write(reached, 0, "p|b|0") == []
    assert probe.faults_for_write({"embed": 2}, 0, "p|b|1") == []
    offered = probe.offered
    assert {f.site for f in offered["p|a|0"]} == {"lm.extract", "embed"}
    plan = probe.designate(offered, seed=0)
    picked = [(key, tuple(p)) for key, picks in (plan.picks or {}).items() for p in picks]
    embed_units = [(k, p) for k, p in picked if p[0] == "embed"]
    # each embed kind: in both cases (2 per pair), case b at its first write only
    assert {k for k, _ in embed_units} == {"p|a|0", "p|b|0"}
    assert len(embed_units) == 2 * 3
    assert plan.designated_cases() == {("p", "a"), ("p", "b")}
    assert plan.faults_for_write({"embed": 2}, 0, "p|b|1") == []
    assert Fault("embed", "embed_nan", 0) in plan.faults_for_write(reached, 0, "p|a|0")
    assert str(plan) == "sweep:fast" and plan.name == "sweep"


def test_fast_is_refused_on_the_ray_executor(tmp_path, capsys):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text((REPO / "datasets" / "chat_en.jsonl").read_text(encoding="utf-8").splitlines()[0] + "\n",
                       encoding="utf-8")
    code = main(["run", "--dataset", str(dataset), "--embedder", "hash", "--no-progress", "--faults", "sweep:fast",
                 "--executor", "ray", "--out", str(tmp_path / "r")])
    assert code == 2
    assert "sweep:fast runs on the local executor" in capsys.readouterr().err
