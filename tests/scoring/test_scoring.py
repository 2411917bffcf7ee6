"""Attribution and cross-subject-merge scoring on hand-built cases and runs."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from evals.cases.dataset import Case
from evals.record import CaseRun, WriteRecord
from evals.report.run_report import infra_errors
from evals.scoring import (
    DEFAULT_MATCHER,
    attribution_metrics,
    calibrate,
    case_rows,
    facts_frame,
    matcher_agreement,
    ops_frame,
    score_case,
)
from evals.scoring import matcher as matcher_module
from evals.scoring.attribution import FACTS_COLUMNS
from evals.scoring.matcher import LABELLED_PAIRS, same_subject, text_similarity
from evals.scoring.merges import OPS_COLUMNS

CID = "c1"


def make_case(facts: list[dict] | None, memories: list[dict] = (), turns: int = 1, lang: str = "en",
              case_id: str = CID, **expect: Any) -> Case:
    turn = [{"role": "user", "content": "hello"}]
    return Case(id=case_id, lang=lang, user_id="tim", memories=list(memories), turns=[turn] * turns,
                expect={"facts": facts, **expect})


def fact(text: str, subject: str = "user", owner: str | None = None, kind: str = "fact") -> dict:
    return {"text": text, "subject": subject, "owner": owner or ("agent" if subject == "assistant" else "user"),
            "kind": kind}


def memory(mid: int, f: dict, write: int, case_id: str = CID) -> dict:
    return {"id": mid, "user_id": "tim", **f, "request_id": f"{case_id}/w{write}"}


def add(mid: int, f: dict) -> dict:
    return {"op": "ADD", "memory_id": mid, "target_id": None, **f, "refused": None}


def make_run(case: Case, live: list[dict], turns: list[dict], profile: dict | None = None,
             status: str = "ok", dataset: str = "chat_en", provider: str = "p1") -> CaseRun:
    """`turns` holds one dict per turn write: proposed_facts, proposed_ops, ops. Seeds get ids 1..n."""
    writes = []
    if case.memories:
        seeds = [fact(m.text, m.subject, m.owner) for m in case.memories]
        writes.append(WriteRecord(index=0, path="extracted", request_id=f"{case.id}/w0", success=True, codes={},
                                  ops=[add(i + 1, f) for i, f in enumerate(seeds)], proposed_facts=seeds,
                                  proposed_ops=[{"op": "ADD", "fact": i, "id": None} for i in range(len(seeds))]))
    for t in turns:
        index = len(writes)
        writes.append(WriteRecord(index=index, path="chat", request_id=f"{case.id}/w{index}", success=True, codes={},
                                  ops=t.get("ops", []), proposed_facts=t.get("proposed_facts", []),
                                  proposed_ops=t.get("proposed_ops", [])))
    return CaseRun(case_id=case.id, dataset=dataset, provider=provider, lang=case.lang, tags=[], status=status,
                   writes=writes, memories=live, profile=profile or {})


def ratio(scores, metric: str) -> float:
    num, den = scores.tallies[metric]
    return num / den if den else math.nan


def dumped(rows: list) -> list[dict]:
    return [r.model_dump(exclude={"schema_version"}) for r in rows]


def row(rows: list[dict], metric: str, dataset: str = "chat_en") -> dict:
    return next(r for r in rows if r["metric"] == metric and r["dataset"] == dataset)


# ------------------------------------------------------------------ a perfect run
COFFEE, PARIS = fact("The user likes coffee."), fact("The user lives in Paris.")
BERLIN, STRIPE = fact("The user lives in Berlin."), fact("The user works at Stripe.")
NURSE, JOHN_COFFEE = fact("John is a nurse in Berlin.", "John"), fact("John likes coffee.", "John")
GOLD = [BERLIN, STRIPE, NURSE, JOHN_COFFEE]


def perfect_pair(case_id: str = CID, status: str = "ok") -> tuple[Case, CaseRun]:
    case = make_case(GOLD, memories=[COFFEE, PARIS],
                     case_id=case_id, profile={"name": "Tim"}, profile_excludes=["nurse"],
                     separate=[("The user likes coffee.", "John likes coffee.")],
                     updates=[{"old": "The user lives in Paris.", "new": "The user lives in Berlin."}],
                     absent=["The user is a nurse."])
    turn = {"proposed_facts": GOLD,
            "proposed_ops": [{"op": "SUPERSEDE", "fact": 0, "id": 2}, {"op": "ADD", "fact": 1, "id": None},
                             {"op": "ADD", "fact": 2, "id": None}, {"op": "ADD", "fact": 3, "id": None}],
            "ops": [{**add(3, BERLIN), "op": "SUPERSEDE", "target_id": 2}, add(4, STRIPE), add(5, NURSE),
                    add(6, JOHN_COFFEE)]}
    live = [memory(1, COFFEE, 0, case_id)] + [memory(i, f, 1, case_id) for i, f in zip((3, 4, 5, 6), GOLD, strict=True)]
    return case, make_run(case, live, [turn], profile={"name": "Tim", "location": "Berlin"}, status=status)


GOOD = ["fact_precision", "fact_recall", "fact_f1", "subject_accuracy", "owner_accuracy",
        "proposed_fact_precision", "proposed_fact_recall", "proposed_fact_f1", "proposed_subject_accuracy",
        "proposed_owner_accuracy", "profile_name_accuracy", "separate_kept_rate", "same_subject_update_recall"]
BAD = ["third_party_to_user_rate", "subject_text_mismatch_rate", "proposed_third_party_to_user_rate",
       "proposed_subject_text_mismatch_rate", "profile_leak_rate", "absent_violation_rate",
       "cross_subject_merge_proposed_rate", "cross_subject_merge_applied_rate"]


def test_perfect_predictions_score_one_on_every_metric_and_zero_on_every_bad_rate():
    case, run = perfect_pair()
    scores = score_case(case, run)
    assert {m: ratio(scores, m) for m in GOOD} == {m: 1.0 for m in GOOD}
    assert {m: ratio(scores, m) for m in BAD} == {m: 0.0 for m in BAD}
    assert scores.tallies["cross_subject_merge_applied_rate"] == (0, 1)  # the same-subject SUPERSEDE was judged
    rows = dumped(attribution_metrics([(case, run)], seed=1))
    assert {m: row(rows, m)["value"] for m in GOOD} == {m: 1.0 for m in GOOD}
    assert {m: row(rows, m)["value"] for m in BAD} == {m: 0.0 for m in BAD}
    assert row(rows, "fact_recall")["n"] == 1
    assert not any(r["metric"] == "infra_error_rate" for r in rows)  # counted once, by the report
    assert row(rows, "fact_recall", "all")["value"] == 1.0


def test_every_metric_row_has_the_report_columns_and_a_ci_around_its_value():
    rows = dumped(attribution_metrics([perfect_pair("a"), perfect_pair("b")], seed=3))
    for r in rows:
        assert set(r) == {"provider", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"}
        assert r["ci_low"] <= r["value"] <= r["ci_high"]
    assert row(rows, "fact_precision")["n"] == 2


# ------------------------------------------------------------------ attribution errors
def one_turn(gold: list[dict], stored: list[dict], **expect: Any) -> tuple[Case, CaseRun]:
    case = make_case(gold, **expect)
    live = [memory(10 + i, f, 0) for i, f in enumerate(stored)]
    ops = [add(10 + i, f) for i, f in enumerate(stored)]
    return case, make_run(case, live, [{"proposed_facts": stored, "ops": ops}])


def test_third_party_fact_filed_as_the_users_is_an_attribution_error_not_a_missing_fact():
    case, run = one_turn([NURSE], [fact("The user is a nurse in Berlin.")])
    scores = score_case(case, run)
    assert ratio(scores, "third_party_to_user_rate") == 1.0
    assert ratio(scores, "proposed_third_party_to_user_rate") == 1.0
    assert ratio(scores, "fact_recall") == 1.0 and ratio(scores, "subject_accuracy") == 0.0
    assert scores.tallies["subject_confusion_named_to_user"] == (1, 1)


def test_ai_suggestion_filed_as_the_users_raises_ai_to_user_rate():
    gold = fact("The assistant suggested that the user learn Go.", "assistant")
    case, run = one_turn([gold], [fact("The user should learn Go.")])
    scores = score_case(case, run)
    assert ratio(scores, "ai_to_user_rate") == 1.0
    assert ratio(scores, "owner_accuracy") == 0.0
    assert scores.tallies["third_party_to_user_rate"] == (0, 0)  # no named gold fact to misfile


def test_a_missing_fact_lowers_recall_but_not_precision():
    scores = score_case(*one_turn([BERLIN, STRIPE], [BERLIN]))
    assert ratio(scores, "fact_recall") == 0.5 and ratio(scores, "fact_precision") == 1.0


def test_an_extra_fact_lowers_precision_but_not_recall():
    scores = score_case(*one_turn([BERLIN], [BERLIN, fact("The user likes tea.")]))
    assert ratio(scores, "fact_precision") == 0.5 and ratio(scores, "fact_recall") == 1.0


def test_a_named_fact_pairs_with_its_own_gold_when_the_users_twin_exists():
    scores = score_case(*one_turn([COFFEE, JOHN_COFFEE], [JOHN_COFFEE, COFFEE]))
    assert ratio(scores, "subject_accuracy") == 1.0 and ratio(scores, "fact_f1") == 1.0


def test_a_subject_the_text_does_not_name_is_a_subject_text_mismatch():
    scores = score_case(*one_turn([NURSE], [fact("John is a nurse in Berlin.", "Kate")]))
    assert ratio(scores, "subject_text_mismatch_rate") == 1.0


def test_a_profile_leak_and_a_wrong_profile_name_are_counted():
    case = make_case([], profile={"name": "Tim"}, profile_excludes=["nurse"])
    run = make_run(case, [], [{}], profile={"name": "John", "occupation": "Nurse"})
    scores = score_case(case, run)
    assert ratio(scores, "profile_leak_rate") == 1.0 and ratio(scores, "profile_name_accuracy") == 0.0


def test_profile_field_accuracy_scores_each_expected_field_the_final_profile_holds():
    # A user who moved keeps the old city in the profile (tests/mutants/32): the name is right, the city is not.
    case = make_case([], profile={"name": "Tim", "location": "Berlin", "occupation": "nurse"})
    stale = score_case(case, make_run(case, [], [{}], profile={"name": "Tim", "location": "Paris",
                                                               "occupation": "Nurse "}))
    assert stale.tallies["profile_field_accuracy"] == (1, 2) and ratio(stale, "profile_name_accuracy") == 1.0
    moved = score_case(case, make_run(case, [], [{}], profile={"name": "Tim", "location": "berlin", "occupation": "nurse"}))
    assert moved.tallies["profile_field_accuracy"] == (2, 2)
    nameless = make_case([], profile={"name": None})  # a field expected empty is profile_leak_rate's, not this one's
    assert "profile_field_accuracy" not in score_case(nameless, make_run(nameless, [], [{}], profile={})).tallies


def test_an_absent_statement_left_live_is_a_violation_but_the_assistants_suggestion_is_not():
    suggestion = fact("The assistant suggested that the user stop drinking coffee after 2 pm.", "assistant")
    absent = ["The user stopped drinking coffee after 2 pm."]
    clean = score_case(*one_turn([suggestion], [suggestion], absent=absent))
    dirty = score_case(*one_turn([suggestion], [suggestion, fact("The user stopped drinking coffee after 2 pm.")],
                                 absent=absent))
    assert ratio(clean, "absent_violation_rate") == 0.0 and ratio(dirty, "absent_violation_rate") == 1.0


# ------------------------------------------------------------------ seeds, merges, updates
def test_seeded_memories_never_count_as_predictions():
    case = make_case([JOHN_COFFEE], memories=[COFFEE])
    run = make_run(case, [memory(1, COFFEE, 0)], [{"proposed_facts": [], "ops": []}])
    scores = score_case(case, run)
    assert scores.tallies["fact_precision"] == (0, 0) and ratio(scores, "fact_recall") == 0.0
    assert scores.tallies["third_party_to_user_rate"] == (0, 0)


def test_a_turn_that_stores_nothing_is_right_on_a_no_memory_case_even_with_seeds_live():
    case = make_case([], memories=[COFFEE], no_memory=True)
    good = make_run(case, [memory(1, COFFEE, 0)], [{}])
    bad = make_run(case, [memory(1, COFFEE, 0), memory(2, STRIPE, 1)], [{"ops": [add(2, STRIPE)]}])
    assert ratio(score_case(case, good), "no_memory_accuracy") == 1.0
    assert ratio(score_case(case, bad), "no_memory_accuracy") == 0.0


def test_cross_subject_supersede_is_counted_as_proposed_but_not_as_applied():
    case = make_case([JOHN_COFFEE], memories=[COFFEE], separate=[("The user likes coffee.", "John likes coffee.")])
    turn = {"proposed_facts": [JOHN_COFFEE], "proposed_ops": [{"op": "SUPERSEDE", "fact": 0, "id": 1}],
            "ops": [{**add(2, JOHN_COFFEE), "refused": "cross-subject SUPERSEDE of 1 refused"}]}
    run = make_run(case, [memory(1, COFFEE, 0), memory(2, JOHN_COFFEE, 1)], [turn])
    scores = score_case(case, run)
    assert scores.tallies["cross_subject_merge_proposed_rate"] == (1, 1)
    assert scores.tallies["cross_subject_merge_applied_rate"] == (0, 0)
    assert ratio(scores, "separate_kept_rate") == 1.0
    rows = dumped(attribution_metrics([(case, run)], seed=0))
    assert row(rows, "cross_subject_merge_proposed_rate")["value"] == 1.0
    assert not any(r["metric"] == "cross_subject_merge_applied_rate" for r in rows)  # no applied merge to judge
    ops = ops_frame([(case, run)])
    assert list(ops.columns) == OPS_COLUMNS == [
        "provider", "dataset", "case_id", "write", "source", "op", "fact_text", "fact_subject", "target_id",
        "target_text", "target_subject", "cross_subject", "refused"]
    proposed = ops[(ops.source == "proposed") & (ops.op == "SUPERSEDE")].iloc[0]
    assert bool(proposed.cross_subject) and proposed.target_subject == "user" and proposed.target_id == 1
    applied = ops[(ops.source == "applied") & (ops.write == 1)].iloc[0]
    assert applied.op == "ADD" and applied.refused.startswith("cross-subject") and applied.cross_subject is pd.NA


def test_a_merge_target_unknown_to_the_run_is_skipped_and_noted():
    case = make_case([BERLIN], memories=[PARIS])
    turn = {"proposed_facts": [BERLIN], "proposed_ops": [{"op": "UPDATE", "fact": 0, "id": 99}], "ops": []}
    scores = score_case(case, make_run(case, [memory(1, PARIS, 0)], [turn]))
    assert scores.tallies["cross_subject_merge_proposed_rate"] == (0, 0)
    assert scores.notes["cross_subject_merge_proposed_rate"] == 1


def test_an_update_that_duplicates_instead_of_replacing_is_not_recalled():
    case = make_case([BERLIN], memories=[PARIS], updates=[{"old": PARIS["text"], "new": BERLIN["text"]}])
    run = make_run(case, [memory(1, PARIS, 0), memory(2, BERLIN, 1)], [{"ops": [add(2, BERLIN)]}])
    assert ratio(score_case(case, run), "same_subject_update_recall") == 0.0


def test_a_restated_seed_is_not_an_extra_proposed_fact():
    case = make_case([JOHN_COFFEE], memories=[COFFEE])
    turn = {"proposed_facts": [JOHN_COFFEE, COFFEE], "ops": [add(2, JOHN_COFFEE)]}
    run = make_run(case, [memory(1, COFFEE, 0), memory(2, JOHN_COFFEE, 1)], [turn])
    assert ratio(score_case(case, run), "proposed_fact_precision") == 1.0
    frame = facts_frame([(case, run)])
    assert frame[frame.stage == "proposed"].note.fillna("").tolist() == ["", "restates a seeded memory"]


def test_a_proposed_fact_that_a_later_turn_replaced_is_not_an_extra():
    case = make_case([BERLIN], turns=2, absent=[PARIS["text"]])
    first = {"proposed_facts": [PARIS], "proposed_ops": [{"op": "ADD", "fact": 0, "id": None}], "ops": [add(1, PARIS)]}
    second = {"proposed_facts": [BERLIN], "proposed_ops": [{"op": "SUPERSEDE", "fact": 0, "id": 1}],
              "ops": [{**add(2, BERLIN), "op": "SUPERSEDE", "target_id": 1}]}
    run = make_run(case, [memory(2, BERLIN, 1)], [first, second])
    scores = score_case(case, run)
    assert ratio(scores, "proposed_fact_precision") == 1.0 and ratio(scores, "fact_precision") == 1.0
    assert ratio(scores, "absent_violation_rate") == 0.0
    assert scores.tallies["cross_subject_merge_applied_rate"] == (0, 1)  # target 1's subject came from write 0


# ------------------------------------------------------------------ infra errors
def test_an_engine_that_keeps_no_profile_is_not_measured_on_the_profile_metrics_not_scored_zero():
    ok, err = perfect_pair("ok"), perfect_pair("err", status="infra_error")
    for _, run in (ok, err):
        run.profile = None  # mem0: no profile to read (keeps_profile = False)
    err[1].writes, err[1].memories = [], []
    rows = dumped(attribution_metrics([ok, err], seed=7))
    assert not [r["metric"] for r in rows if r["metric"].startswith("profile_")]  # neither a 0 nor a vacuous pass
    assert row(rows, "fact_recall_with_errors")["value"] == 0.5  # the rest is scored as for any engine


def test_an_infra_error_case_is_left_out_of_plain_metrics_and_counted_all_wrong_with_errors():
    ok = perfect_pair("ok")
    err = perfect_pair("err", status="infra_error")
    err[1].writes, err[1].memories = [], []
    rows = dumped(attribution_metrics([ok, err], seed=7))
    assert row(rows, "fact_recall")["value"] == 1.0 and row(rows, "fact_recall")["n"] == 1
    assert row(rows, "fact_recall_with_errors")["value"] == 0.5 and row(rows, "fact_recall_with_errors")["n"] == 2
    assert row(rows, "profile_leak_rate")["value"] == 0.0
    assert row(rows, "profile_leak_rate_with_errors")["value"] == 0.5
    assert [infra_errors(r) for _, r in (ok, err)] == [(0, 1), (1, 1)]  # the report's one infra_error_rate
    assert not any(r["metric"].startswith("subject_confusion") and r["metric"].endswith("_with_errors") for r in rows)
    per_case = {(r["case_id"], r["metric"]): (r["num"], r["den"]) for r in dumped(case_rows([ok, err]))}
    assert per_case[("ok", "fact_recall")] == per_case[("ok", "fact_recall_with_errors")] == (4.0, 4.0)
    assert ("err", "fact_recall") not in per_case and per_case[("err", "fact_recall_with_errors")] == (0.0, 4.0)


# ------------------------------------------------------------------ the matcher
def test_chinese_paraphrase_matches_and_a_different_fact_does_not():
    m = DEFAULT_MATCHER
    assert m.same_fact("用户住在深圳。", "user", "用户现在住在深圳。", "user")
    assert m.same_fact("王芳是住在北京的护士。", "王芳", "王芳是护士，住在北京。", "王芳")
    assert not m.same_fact("用户住在北京。", "user", "用户住在深圳。", "user")
    assert not m.same_fact("用户吃辣。", "user", "用户不吃辣。", "user")
    gold = [fact("用户住在深圳。"), fact("用户是一名医生。")]
    scores = score_case(*one_turn(gold, [fact("用户目前住在深圳。"), fact("用户在北京工作。")]))
    assert ratio(scores, "fact_recall") == 0.5 and ratio(scores, "fact_precision") == 0.5


@pytest.mark.parametrize(("a", "b"), [("The user lives in Berlin.", "The user lives in Paris."),
                                      ("The user eats meat.", "The user does not eat meat."),
                                      ("The user lives in Berlin.", "The user is a nurse in Berlin.")])
def test_different_facts_about_the_same_subject_do_not_match(a, b):
    assert not DEFAULT_MATCHER.same_fact(a, "user", b, "user")


def test_the_user_and_john_liking_coffee_are_not_the_same_fact():
    assert DEFAULT_MATCHER.matches("The user likes coffee.", "John likes coffee.")  # text alone: yes
    assert not DEFAULT_MATCHER.same_fact("The user likes coffee.", "user", "John likes coffee.", "John")


def test_matcher_agrees_with_the_labelled_pairs_at_its_calibrated_threshold():
    assert matcher_agreement() >= 0.9
    assert calibrate()[0] == DEFAULT_MATCHER.threshold


def _best_agreement(similarity) -> float:
    """Agreement with LABELLED_PAIRS at the best threshold, with the matcher's subject rule."""
    scored = [(similarity(a, b), same_subject(sa, sb), label) for a, sa, b, sb, label in LABELLED_PAIRS]
    return max(sum((s >= t / 100 and ok) == label for s, ok, label in scored) / len(scored) for t in range(101))


def test_the_matcher_beats_generic_string_measures_by_the_margins_its_docstring_states():
    def trigram_jaccard(a: str, b: str) -> float:
        ga, gb = ({s[i:i + 3] for i in range(max(len(s) - 2, 1))} for s in (a, b))
        return len(ga & gb) / len(ga | gb)

    token_set = round(_best_agreement(lambda a, b: fuzz.token_set_ratio(a, b, processor=default_process) / 100), 2)
    jaccard = round(_best_agreement(trigram_jaccard), 2)
    ours = round(_best_agreement(text_similarity), 2)
    assert (token_set, jaccard, ours) == (0.72, 0.73, 0.95)
    doc = " ".join(matcher_module.__doc__.split())
    for claim in (f"token_set_ratio agrees {token_set}", f"Jaccard {jaccard}", f"this matcher agrees {ours}"):
        assert claim in doc


def test_facts_frame_has_one_row_per_gold_fact_and_unmatched_prediction_per_stage():
    frame = facts_frame([one_turn([BERLIN, STRIPE], [BERLIN, fact("The user likes tea.")])])
    assert list(frame.columns) == FACTS_COLUMNS == [
        "provider", "dataset", "case_id", "stage", "gold_text", "gold_subject", "gold_owner", "pred_text",
        "pred_subject", "pred_owner", "match_score", "matched", "subject_ok", "owner_ok", "gold_class",
        "pred_class", "note", "matcher", "epoch"]
    stored = frame[frame.stage == "stored"]
    assert len(stored) == 3 and stored.matched.tolist() == [True, False, False]
    assert stored.pred_text.fillna("").tolist() == ["The user lives in Berlin.", "", "The user likes tea."]
    assert len(frame[frame.stage == "proposed"]) == 3
