"""Measurement validity: the oracle scores 1.0, and the noisy oracle's known error rates are recovered."""

from __future__ import annotations

import pandas as pd
import pytest

from evals.arms.oracle import oracle_plan
from evals.cases.dataset import load_cases
from evals.pipeline import run_eval
from evals.run.runner import RunConfig

NOISY = "oracle:flip_owner=0.2,swap_subject=0.1,drop=0.1,seed=7"
DATASET = "datasets/chat_en.jsonl"
# ci_heavy: the module's run scores both oracles on the whole English suite (run by `nox -s heavy`)
pytestmark = pytest.mark.ci_heavy


@pytest.fixture(scope="module")
def metrics(tmp_path_factory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("calibration") / "run"
    run_eval(RunConfig(datasets=[DATASET], providers=["oracle", NOISY], embedder="hash", faults="none", out=out,
                       progress=False))
    frame = pd.read_parquet(out / "metrics.parquet")
    return frame[frame["dataset"] == "all"].set_index(["provider", "metric"])


PERFECT = {"fact_precision": 1.0, "fact_recall": 1.0, "fact_f1": 1.0, "subject_accuracy": 1.0, "owner_accuracy": 1.0,
           "third_party_to_user_rate": 0.0, "ai_to_user_rate": 0.0, "profile_leak_rate": 0.0,
           "profile_name_accuracy": 1.0, "cross_subject_merge_proposed_rate": 0.0, "separate_kept_rate": 1.0,
           "same_subject_update_recall": 1.0, "no_memory_accuracy": 1.0,
           "proposed_fact_recall": 1.0, "proposed_owner_accuracy": 1.0}


@pytest.mark.parametrize("metric,value", sorted(PERFECT.items()))
def test_the_oracle_scores_perfectly(metrics, metric, value):
    assert metrics.loc[("oracle", metric), "value"] == value


def test_the_noisy_oracle_rates_are_recovered_within_their_cis(metrics):
    cases = load_cases([DATASET])
    plan = oracle_plan(NOISY, cases)
    n = sum(len(c.expect.facts or []) for c in cases)
    dropped = {(cid, p.fact) for cid, ps in plan.items() for p in ps if p.kind == "drop"}
    flipped = {(cid, p.fact) for cid, ps in plan.items() for p in ps if p.kind == "flip_owner"} - dropped
    by_id = {c.id: c for c in cases}

    def refiled(cid: str, p) -> bool:
        """The engine files a named speaker's fact labelled the user's under that speaker (README): a swap the
        engine undoes is no error left in the stored state."""
        case, fact = by_id[cid], (by_id[cid].expect.facts or [])[p.fact]
        speakers = {m["name"] for turn in case.turns for m in turn if m.get("role") == "assistant" and m.get("name")}
        return p.after in ("user", "用户") and fact.subject in speakers and fact.text.startswith(fact.subject)

    swapped = {(cid, p.fact) for cid, ps in plan.items() for p in ps
               if p.kind == "swap_subject" and not refiled(cid, p)} - dropped
    assert len(dropped) == round(0.1 * n)  # exactly round(rate × n) of the n gold facts
    expected = {"fact_recall": 1 - len(dropped) / n,
                "owner_accuracy": 1 - len(flipped) / (n - len(dropped)),
                "subject_accuracy": 1 - len(swapped) / (n - len(dropped))}
    for metric, value in expected.items():
        row = metrics.loc[(NOISY, metric)]
        assert row.ci_low <= value <= row.ci_high, (metric, value, row.ci_low, row.ci_high)
        assert abs(row.value - value) < 0.03, (metric, row.value, value)
    assert metrics.loc[(NOISY, "fact_precision"), "value"] == 1.0  # nothing invented
