"""Texts encoded while a run replays (issue 35): the same scores and report, bit for bit, and nothing encoded twice."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

from evals.cli.main import main
from tests.scoring.test_matcher_cost import _fresh_matcher

FIRST = (["The user lives in New York City.", "The user is learning machine learning."],
         ["The user lives in NYC.", "The user studies ML at night.", "The user plays the cello."])
SECOND = (["用户住在深圳。", "Maria, the user's sister, teaches piano."],
          ["用户现在住在深圳。", "The user's sister Maria is a piano teacher.", "The user lives in NYC."])


def test_texts_prepared_ahead_in_another_order_score_the_same_and_are_not_encoded_again():
    plain, plain_words, plain_sentences = _fresh_matcher(None)
    expected = [plain.scores(*FIRST), plain.scores(*SECOND)]
    ahead, words, sentences = _fresh_matcher(None)
    worker = threading.Thread(target=lambda: [ahead.prepare_ahead(*case) for case in (SECOND, FIRST)])
    worker.start()
    worker.join()
    assert sentences.texts == plain_sentences.texts > 0 and words.texts == 0  # the words wait for scoring
    got = [ahead.scores(*FIRST), ahead.scores(*SECOND)]
    assert sentences.texts == plain_sentences.texts  # scoring encoded no sentence again
    assert words.texts == plain_words.texts  # the same word batches, in scoring's order
    for want, have in zip(expected, got, strict=True):
        assert np.array_equal(want, have)


def test_a_sentence_model_whose_vectors_depend_on_the_batch_is_not_used_ahead():
    from evals.scoring.semantic import PARAMS_FILE, SemanticMatcher, SemanticParams
    from hymem.embedder import make_embedder
    from tests.scoring.test_matcher_cost import _Counting

    params = SemanticParams.model_validate_json(PARAMS_FILE.read_text(encoding="utf-8"))
    minilm = _Counting(make_embedder("minilm"))  # MiniLM as the sentence model too: its last bits follow the batch
    matcher = SemanticMatcher(params.model_copy(update={"sentence_embedder": "minilm"}), minilm)
    matcher.prepare_ahead(*FIRST)
    assert minilm.texts == 0  # texts prepared, nothing encoded: scoring encodes in its own order
    assert matcher.scores(*FIRST).shape == (2, 3) and minilm.texts > 0


@pytest.mark.ci_heavy  # two runs with the semantic matcher
def test_a_run_encoding_ahead_reports_what_a_run_scoring_afterwards_reports(tmp_path, monkeypatch):
    import evals.pipeline as pipeline
    from evals.scoring import semantic
    from evals.scoring.ahead import EncodeAhead

    monkeypatch.delenv("HYMEM_MATCHER", raising=False)  # conftest sets `text` for every other test
    used: list[EncodeAhead] = []

    def recorded(matcher):
        used.append(EncodeAhead(matcher))
        return used[-1]

    args = ["run", "--dataset", "datasets/chat_en.jsonl", "--limit", "4", "--faults", "none", "--embedder", "hash",
            "--no-cache", "--no-progress"]
    monkeypatch.setattr(pipeline, "EncodeAhead", recorded)
    semantic._shared.cache_clear()  # each run with a fresh matcher: nothing kept from another test or run
    assert main([*args, "--out", str(tmp_path / "ahead")]) == 0
    assert used[-1].prepared == 4 and used[-1].failed == 0
    monkeypatch.setattr(pipeline, "EncodeAhead", lambda matcher: EncodeAhead(None))  # nothing ahead
    semantic._shared.cache_clear()
    assert main([*args, "--out", str(tmp_path / "after")]) == 0
    semantic._shared.cache_clear()  # no warm matcher left for a later test (it would find these texts encoded)
    for table in ("facts.parquet", "case_metrics.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "ahead" / table),
                                      pd.read_parquet(tmp_path / "after" / table), check_exact=True)


class _Recording:
    """A matcher's `prepare_ahead` that records the texts it is handed, or fails."""

    def __init__(self, fail: bool = False):
        self.calls: list[tuple[list[str], list[str]]] = []
        self.fail = fail

    def prepare_ahead(self, gold, pred):
        if self.fail:
            raise RuntimeError("the sentence model is gone")
        self.calls.append((list(gold), list(pred)))


def _finished_unit(status: str = "ok"):
    from evals.cases.gold import case_gold
    from tests.scoring.test_scoring import fact, make_case, make_run

    case = make_case([fact("The user lives in Berlin.")])
    run = make_run(case, [], [{"proposed_facts": [fact("The user lives in Berlin, Germany.")]}], status=status)
    return run.model_copy(update={"gold": case_gold(case)})


def test_the_worker_hands_a_finished_units_texts_to_the_matcher_and_a_failure_to_scoring():
    from evals.scoring.ahead import EncodeAhead

    matcher = _Recording()
    ahead = EncodeAhead(matcher)
    ahead.submit(_finished_unit())
    ahead.submit(_finished_unit(status="infra_error"))  # scored without its texts: none to encode
    ahead.close()
    assert ahead.prepared == 1 and matcher.calls == [(["The user lives in Berlin."], ["The user lives in Berlin, Germany."])]
    failing = EncodeAhead(_Recording(fail=True))
    failing.submit(_finished_unit())
    failing.close()  # no exception here: scoring does the work again and raises where it always did
    assert failing.prepared == 0 and failing.failed == 1
    none = EncodeAhead(object())  # a matcher with nothing to do ahead (text, the LLM judge): no thread
    none.submit(_finished_unit())
    none.close()
    assert none.prepared == 0 and none.failed == 0
