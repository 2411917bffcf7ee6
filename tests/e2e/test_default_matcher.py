"""`hymem-eval run` end to end with the default (semantic) matcher: every other run in the tests scores with the
text matcher (conftest sets `HYMEM_MATCHER=text`, for speed), so this is the one that scores a run the way a user's
run is scored, and checks the fact scores it writes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from evals.cli.main import main

# One write; the offline model stores "The user lives in Berlin." and "The user works at Stripe as an engineer.".
# The gold holds a paraphrase of the second (the text matcher, word overlap 0.53, misses it), a near miss of the
# first (a former home: the text matcher, overlap 0.84, takes it) and a fact the conversation never states.
PARAPHRASE, NEAR_MISS, UNSTATED = "The user has a job at Stripe.", "The user used to live in Berlin.", "The user is a nurse."
CASE = {"id": "default-matcher", "lang": "en", "user_id": "tim",
        "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin last spring. I work at Stripe as an engineer."}]],
        "expect": {"facts": [{"text": PARAPHRASE}, {"text": NEAR_MISS}, {"text": UNSTATED}]}}


@pytest.fixture
def default_matcher(monkeypatch):
    monkeypatch.delenv("HYMEM_MATCHER", raising=False)


def test_a_run_with_the_default_matcher_matches_the_paraphrase_and_not_the_near_miss(
        default_matcher, tmp_path, capsys):
    dataset = tmp_path / "tiny.jsonl"
    dataset.write_text(json.dumps(CASE) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(["run", "--dataset", str(dataset), "--faults", "none", "--embedder", "hash", "--out", str(out),
                 "--no-progress"]) == 0
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["matcher_spec"] == "semantic"

    facts = pd.read_parquet(out / "facts.parquet")
    stored = facts[facts["stage"] == "stored"]
    assert set(stored["matcher"]) == {"semantic"}
    gold = stored[stored["gold_text"].notna()]
    assert dict(zip(gold["gold_text"], gold["matched"], strict=True)) == {
        PARAPHRASE: True, NEAR_MISS: False, UNSTATED: False}
    assert gold.loc[gold["gold_text"] == PARAPHRASE, "pred_text"].item() == "The user works at Stripe as an engineer."
    # the stored fact the near miss did not take stands alone, a wrong prediction
    assert stored.loc[stored["gold_text"].isna(), "pred_text"].tolist() == ["The user lives in Berlin."]

    # the fact scores: 1 of 3 gold facts found, 1 of the 2 stored facts right
    metrics = pd.read_parquet(out / "metrics.parquet")
    value = {m: metrics.loc[(metrics["metric"] == m) & (metrics["dataset"] == "all"), "value"].item()
             for m in ("fact_recall", "fact_precision", "fact_f1")}
    assert value["fact_recall"] == pytest.approx(1 / 3)
    assert value["fact_precision"] == pytest.approx(1 / 2)
    assert value["fact_f1"] == pytest.approx(0.4)
    assert "fact_recall" in capsys.readouterr().out
