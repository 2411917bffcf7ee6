"""The semantic matcher's cost (issue 35): abbreviations tried only where they can hold, each text encoded once and
kept beside the response cache, pairs the cheap features decide never aligned, and the default matcher end to end."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evals.cli.main import main
from evals.scoring.abbreviations import abbreviated_runs, abbreviates

VOCAB = ("of and for the de a an in on at to New York City machine learning JavaScript Kubernetes PostgreSQL Master "
         "Science Graduate Management Admission Test Democratic Republic Congo obsessive-compulsive disorder OfTheBox "
         "iPhone 3D s ssss maths National Society Prevention Cruelty Children 2024 k8s O'Brien FedEx user hiking").split()


def _every_run(short: str, words: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """The definition: `abbreviates` asked of every run of up to 12 Latin words."""
    found = []
    for start in range(len(words)):
        for end in range(start + 1, min(start + 12, len(words)) + 1):
            if not all(re.match(r"[A-Za-z]", w) for w in words[start:end]):
                break
            if abbreviates(short, list(words[start:end])):
                found.append((start, end))
    return tuple(found)


def test_the_runs_an_abbreviation_can_stand_for_are_those_abbreviates_accepts():
    rng = random.Random(35)
    matched = 0
    for _ in range(600):
        words = tuple(rng.choice(VOCAB) for _ in range(rng.randint(1, 20)))
        i = rng.randrange(len(words))
        spelt = "".join(w[:rng.randint(1, 2)] for w in words[i:i + rng.randint(1, 5)])
        short = rng.choice([spelt, spelt.upper(), "NYC", "ML", "k8s", "ssss", "OCD", "the", rng.choice(words)])
        runs = abbreviated_runs(short, words)
        assert runs == _every_run(short, words), (short, words)
        matched += bool(runs)
    assert matched > 60  # the comparison saw many abbreviations, not only misses


class _Counting:
    """An embedder that counts the texts it is asked to encode."""

    def __init__(self, inner):
        self.inner, self.name, self.texts = inner, inner.name, 0

    def embed(self, texts):
        self.texts += len(texts)
        return self.inner.embed(texts)


def _fresh_matcher(vectors: Path | None):
    from evals.scoring.semantic import PARAMS_FILE, SemanticMatcher, SemanticParams
    from hymem.embedder import make_embedder

    params = SemanticParams.model_validate_json(PARAMS_FILE.read_text(encoding="utf-8"))
    words, sentences = _Counting(make_embedder(params.embedder)), _Counting(make_embedder(params.sentence_embedder))
    matcher = SemanticMatcher(params, words, sentence_embedder=sentences)
    matcher.persist_vectors(vectors)
    return matcher, words, sentences


GOLD = ["The user lives in New York City.", "The user is learning machine learning.", "用户住在深圳。"]
PRED = ["The user lives in NYC.", "The user studies ML at night.", "The user plays the cello.", "用户现在住在深圳。"]


def test_a_fresh_matcher_reads_the_kept_vectors_and_encodes_nothing_again(tmp_path):
    first, words, sentences = _fresh_matcher(tmp_path / "vectors.sqlite")
    scores = first.scores(GOLD, PRED)
    assert sentences.texts == len(set(GOLD + PRED)) and words.texts > 0  # each predicate encoded once
    assert scores[0, 0] >= first.threshold and scores[2, 3] >= first.threshold and scores[0, 2] < first.threshold
    again, words, sentences = _fresh_matcher(tmp_path / "vectors.sqlite")
    assert np.array_equal(again.scores(GOLD, PRED), scores)
    assert words.texts == sentences.texts == 0
    alone, words, sentences = _fresh_matcher(None)  # --no-cache: nothing kept, everything encoded
    assert np.array_equal(alone.scores(GOLD, PRED), scores) and sentences.texts == len(set(GOLD + PRED))


@pytest.mark.ci_heavy
def test_a_pair_the_cheap_features_rule_out_is_one_the_full_features_rule_out():
    """Each step of the bound (the cheap features; the alignment's floor; every feature but the thesaurus) is an upper
    bound of the regression's logit, on labelled pairs and on unrelated ones, and `scores` (which stops at the first
    step that decides) decides every pair as the full features do, with equal scores for matches."""
    from evals.scoring.pairs import load_pairs
    from evals.scoring.semantic import (
        _align_floor,
        _aligned,
        _bound_aligned,
        _bound_logit,
        _bound_with_floor,
        _bound_without_cosine,
        _cosine_terms,
        _values,
        named_in_place,
    )

    pairs = random.Random(35).sample(load_pairs(split="all"), 150)
    matcher, _, _ = _fresh_matcher(None)
    gold, pred = [p.gold.text for p in pairs], [p.pred.text for p in pairs]
    matcher.prepare(gold, pred)
    w, intercept = matcher._weights, matcher.params.intercept
    decided = {"cheap": 0, "floor": 0, "aligned": 0}
    for g, p in [*zip(gold, pred, strict=True), *zip(gold[:40], pred[40:80], strict=True)]:  # labelled, unrelated
        x, _ = matcher.evaluate([g], [p])
        logit = float(x[0, 0] @ w + intercept)
        a, b = matcher._texts[g], matcher._texts[p]
        if named_in_place(a, b) or named_in_place(b, a):  # compared whole, as `scores` and `evaluate` compare it
            a, b = matcher._whole(g), matcher._whole(p)
        cosine = float(matcher._vectors[a.predicate] @ matcher._vectors[b.predicate])
        cheap, zh = _bound_without_cosine(a, b, w, intercept)
        floor = _bound_with_floor(a, b, cheap, _align_floor(a, b, matcher._word_vectors), w)
        aligned = _aligned(a, b, matcher._word_vectors)
        last = _bound_aligned(a, b, aligned, _values(a, b, 0.0, aligned, aligned.flags["polarity"], (0.0, 0.0)), w,
                              intercept)
        terms = _cosine_terms(cosine, zh, w)
        assert _bound_logit(a, b, cosine, w, intercept) == cheap + terms
        for step, bound in (("cheap", cheap), ("floor", floor), ("aligned", last)):
            assert bound + terms >= logit - 1e-6, (step, g, p)
            decided[step] += bound + terms < 0
    fast, _, _ = _fresh_matcher(None)
    fast.prepare(gold, pred)  # the same batch: MiniLM's word vectors differ by ~1e-7 from one batch to another
    for g, p in zip(gold, pred, strict=True):
        exact, quick = matcher.probabilities([g], [p])[0, 0], fast.scores([g], [p])[0, 0]
        assert (quick >= fast.threshold) == (exact >= matcher.threshold), (g, p)
        assert quick == exact or exact < matcher.threshold
    unrelated = fast.scores(gold[:60], pred[:60])  # unrelated facts, as a run mostly compares
    assert 0 < decided["cheap"] < decided["floor"] < decided["aligned"]  # each step decides more pairs
    assert (unrelated < fast.threshold).mean() > 0.9


@pytest.mark.ci_heavy  # two runs with the semantic matcher; the default run has tests/e2e/test_default_matcher.py (run by `nox -s heavy`)
def test_the_default_matcher_scores_a_run_end_to_end_and_keeps_its_vectors_beside_the_response_cache(
        tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HYMEM_MATCHER", raising=False)  # conftest sets `text` for every other test
    out = tmp_path / "runs" / "run"
    assert main(["run", "--dataset", "datasets/chat_en.jsonl", "--limit", "3", "--faults", "none",
                 "--embedder", "hash", "--out", str(out), "--no-progress"]) == 0
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["matcher_spec"] == "semantic" and manifest["matcher"]["fingerprint"].startswith("semantic:")
    facts = pd.read_parquet(out / "facts.parquet")
    assert set(facts["matcher"]) == {"semantic"} and facts["matched"].any()
    vectors = tmp_path / "runs" / ".cache" / "vectors.sqlite"
    import sqlite3

    with sqlite3.connect(vectors) as db:
        models = {m.split("@")[0]: n for m, n in db.execute("SELECT model, COUNT(*) FROM vectors GROUP BY model")}
    assert models.get("e5", 0) > 0 and models.get("minilm", 0) > 0
    # the same cases run again, their vectors already kept: the same metrics
    assert main(["run", "--dataset", "datasets/chat_en.jsonl", "--limit", "3", "--faults", "none",
                 "--embedder", "hash", "--out", str(tmp_path / "runs" / "again"), "--no-progress"]) == 0
    first = pd.read_parquet(out / "case_metrics.parquet")
    second = pd.read_parquet(tmp_path / "runs" / "again" / "case_metrics.parquet")
    key = ["provider", "case_id", "metric"]
    merged = first.merge(second, on=key, suffixes=("", "_again"))
    assert len(merged) == len(first) > 0
    assert (merged["num"] == merged["num_again"]).all() and (merged["den"] == merged["den_again"]).all()
