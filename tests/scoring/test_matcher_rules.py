"""The semantic matcher's words, tables and pattern alternatives live in rule files (`evals/scoring/rules/`): a
bad file is refused with its path and key, the files are what the matcher reads, and `--matcher semantic-v1`
(a frozen copy of them with the weights of its day) keeps the decisions the matcher gave before they moved
out of the code (`tests/data/semantic_v1_decisions.json`, recorded from the code of cc9859c)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from evals.scoring.rulebook import LIVE_DIR, RulesError, RuleSet, frozen, live, use

DECISIONS = Path(__file__).parents[1] / "data" / "semantic_v1_decisions.json"
# A code change outside the rule files that moves a v1 decision to the pair's label is recorded in that file (its
# "same" list), with the id and why under "changed_since"; a change away from the label is a regression to fix.
# Pairs on which the live rules are meant to decide otherwise than semantic-v1 (id -> why); a rule change that
# moves a decision is declared here, with the agreement it gains on pairs written after it.
LIVE_CHANGES: dict[str, str] = {
    # an active/passive paraphrase with each person in the same role (evals/scoring/voice.py, the subject check and
    # the voice feature); blind batch 8 (in-sample: it showed the error) gained 2 of 120
    "en-paraphrase_passive-25": "voice: 'was hired by Accenture' / 'Accenture hired the user' now matches",
    "en-paraphrase_passive-31": "voice: 'uncle taught the user' / 'was taught by their uncle' now matches",
    "en-paraphrase_passive-32": "voice: 'was headhunted by Siemens' / 'Siemens headhunted the user' now matches",
    # a verb stated through a light verb and a noun (lexicon.phrase_verbs) in the antonym check; batches 7 and 8
    # (in-sample) gained 1 each
    "en-role-27": "phrase verbs: 'teaches piano' / 'takes piano lessons' is ruled out (teach / learn)",
    "en-role-69": "phrase verbs: 'teaches ceramics' / 'takes ceramics classes' is ruled out",
    "en-role-93": "phrase verbs: 'teaches yoga at …' / 'Takes yoga classes at …' is ruled out",
    # a person noun (WordNet) reached 'to' / 给 on one side and 'from' / 向 on the other (alignment direction);
    # batch 8 (in-sample) gained 1
    "en-role-44": "direction: 'lets a room to a student' / 'rents a room from a student' no longer matches",
    # life-event kinds (evals/scoring/events.py, [events] in the rule files): two events that share a place, date or
    # organisation are ruled out, two words for one event are paired; built from batches 7-9 (in-sample), held-out
    # 0.919 -> 0.926 (10 fixed, 1 broken), calibration 0.961 -> 0.964 (7 fixed)
    "en-role-02": "events: 'works at Google' / 'interviewed at Google' is ruled out (work / interview)",
    "en-role-28": "events: 'interviewed at Netflix' / 'works at Netflix' is ruled out",
    "en-role-38": "events: 'interviewed at Rolls-Royce' / 'works at Rolls-Royce' is ruled out",
    "en-role-68": "events: 'coaches the office cricket team' / 'plays on …' is ruled out (coach / play)",
    "en-modality-51": "events: 'works in Shenzhen' / 'is moving to Shenzhen for work' is ruled out (work / move)",
    "zh-role-02": "events: 在华为工作 / 参加过华为的面试 is ruled out",
    "zh-role-18": "events: 面试过网易 / 在网易上班 is ruled out",
    "zh-role-50": "events: 面试过美团 / 在美团上班 is ruled out",
    "zh-role-06": "events: 把房子租出去了 / 租了一套房子 is ruled out (rent out / rent)",
    "zh-role-48": "events: 把房子租给了表弟 / 租了表弟的房子 is ruled out",
    "zh-role-68": "events: 把车租给了邻居 / 租了邻居的车 is ruled out",
    "en-paraphrase_nominal-56": "events: 'works for Deloitte' / 'User's employer: Deloitte' now matches (one event)",
    "en-paraphrase_nominal-66": "events: 'was born in …' / 'User's birthplace: …' now matches",
    "en-paraphrase_nominal-90": "events: 'was born in …' / 'Birthplace: …' now matches",
    "zh-paraphrase_qualifier-16": "events: 去日本旅行 / 去日本旅游 now matches",
    "zh-paraphrase_qualifier-58": "events: 考虑搬到… / 考虑移居… now matches",
    "zh-entity_sub-74": "events: 在叠纸游戏工作 / 在莉莉丝游戏上班 now matches (wrongly: 工作 / 上班 are paired and the "
                        "company names are not read as names)",
    # a subject split off one side and named on the other after 被 / 把 / 是 (a cleft) / "by": the pair is compared
    # whole on both sides, the name in both (`semantic.named_in_place`); v1 keeps this pair apart on the subject half
    # (no voice tables). Written for zh-paraphrase_passive-44 / -68 (in-sample: calibration), it gained this one too
    "en-paraphrase_passive-63": "names in place: 'Ximena was hired by Unilever' / 'Unilever hired Ximena' now matches",
    # quantities: "in" after a number followed by a word is a preposition, not inches
    "en-paraphrase_number-10": "quantities: '$1,200 in rent monthly' no longer reads 1,200 inches",
}
# Pairs whose rule reading (features) changed without their decision changing (id -> why)
LIVE_READINGS: dict[str, str] = {
    "zh-role-57": "events: 从老林那里转租 / 把房间转租给了老林 is ruled out (rent / rent out); rejected before too",
    "zh-paraphrase_synonym-70": "events: 在大疆工作 / 在大疆上班: 工作 / 上班 are paired as one event; matched before too",
    "zh-time-81": "time words: 中秋节 / 端午节 now read as two festivals; rejected before too",
    "zh-number_sub-53": "quantities: 一小时五十分 / 1小时15分 read as 110 / 75 minutes (v1: 五十 as 5); rejected before too",
}


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(LIVE_DIR, target)
    return target


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_a_pattern_that_does_not_compile_is_refused_with_its_file_and_key(tmp_path):
    rules = _copy(tmp_path)
    _edit(rules / "en.toml", "negation = ['not',", "negation = ['(not',")
    with pytest.raises(RulesError) as caught:
        RuleSet(rules, "edited")
    assert f"{rules / 'en.toml'}: checks.negation.0:" in str(caught.value)
    assert "not a valid pattern" in str(caught.value)


def test_a_wrong_kind_of_entry_is_refused_with_its_file_and_key(tmp_path):
    rules = _copy(tmp_path)
    _edit(rules / "zh.toml", "name_tags = [", "name_tags = 3\nunused = [")
    with pytest.raises(RulesError, match=re.escape(f"{rules / 'zh.toml'}: checks.name_tags: Input should be")):
        RuleSet(rules, "edited")


def test_a_file_that_is_not_toml_is_refused_with_its_path(tmp_path):
    rules = _copy(tmp_path)
    (rules / "shared.toml").write_text("[abbreviations\nskippable = ['of']\n", encoding="utf-8")
    with pytest.raises(RulesError, match=re.escape(f"{rules / 'shared.toml'}: not TOML")):
        RuleSet(rules, "edited")


def test_a_key_the_code_reads_and_the_file_lacks_is_named_with_its_file(tmp_path):
    from evals.scoring.checks import names

    rules = _copy(tmp_path)
    text = (rules / "en.toml").read_text(encoding="utf-8")
    (rules / "en.toml").write_text(re.sub(r"(?ms)^not_entity = \[.*?^\]\n", "", text), encoding="utf-8")
    with use(RuleSet(rules, "edited")), pytest.raises(RulesError) as caught:
        names("The user moved to Paris.")
    assert str(caught.value) == f"{rules / 'en.toml'}: checks.not_entity: missing (the code reads it)"


def test_the_matcher_reads_its_words_from_the_files(tmp_path):
    """A word taken out of a list in a copy of the files is no longer read, by the checks and by the text
    matcher's negation; the live files are untouched."""
    from evals.scoring.checks import polarity
    from evals.scoring.matcher import negated
    from evals.scoring.semantic import prepare_text

    rules = _copy(tmp_path)
    _edit(rules / "en.toml", "negation = ['not', 'no', 'never', ", "negation = ['not', 'no', ")
    _edit(rules / "en.toml", "negation = ['cannot', 'neither', 'never', ", "negation = ['cannot', 'neither', ")
    text = "The user never drinks coffee."
    assert polarity(text) == (1, 0) and negated(text)
    with use(RuleSet(rules, "edited")):
        assert polarity(text) == (0, 0) and not negated(text)
        assert prepare_text(text).qualifiers.polarity == (0, 0)
    assert polarity(text) == (1, 0) and prepare_text(text).qualifiers.polarity == (1, 0)


def test_a_table_in_the_files_is_what_quantities_reads(tmp_path):
    from evals.scoring.quantities import quantities

    rules = _copy(tmp_path)
    _edit(rules / "zh.toml", "\"斤\" = ['mass', 0.5]", "\"斤\" = ['mass', 0.6]")
    assert quantities("用户重一百斤。") == (("mass", 50.0),)
    with use(RuleSet(rules, "edited")):
        assert quantities("用户重一百斤。") == (("mass", 60.0),)


def test_semantic_v1_is_a_matcher_spec_wherever_one_is_accepted():
    from evals.cli.early_checks import matcher_problem
    from evals.scoring.choose_matcher import local_spec

    assert local_spec("semantic-v1") and matcher_problem("semantic-v1") is None
    assert not local_spec("semantic-v0") and "unknown spec 'semantic-v0'" in (matcher_problem("semantic-v0") or "")
    assert frozen("v1").directory.name == "v1"
    with pytest.raises(RulesError, match="no frozen rules 'v0'"):
        frozen("v0")


def test_the_code_finds_every_word_it_reads_in_the_frozen_files_as_in_the_live_ones():
    """v1 is read through today's code: every module's words and patterns build from its files, and its weights
    are a whole parameter file of today's features."""
    from evals.scoring import abbreviations, alignment, checks, lexicon, matcher, quantities, semantic

    for rules in (live(), frozen("v1")):
        with use(rules):
            for module in (alignment, checks, matcher, quantities, semantic):
                assert module._k() is not None
            assert abbreviations.skippable_words() and lexicon._generic()
    params = semantic.SemanticParams.model_validate_json((frozen("v1").directory / "params.json").read_text(encoding="utf-8"))
    assert params.features == list(semantic.FEATURES) and params.heldout is not None


def _pairs(step: int = 1):
    from evals.scoring.pairs import BUNDLED_PAIRS, load_pairs

    return load_pairs(BUNDLED_PAIRS, "all")[::step]


def test_the_live_rules_read_a_sixteenth_of_the_labelled_pairs_as_v1_does():
    """Without the models: each text's qualifiers, quantities, names, words and roles, and each pair's rule
    features and role checks, under the live files and under v1's."""
    import numpy as np

    from evals.scoring.semantic import _pair, prepare_text

    def read(rules: RuleSet) -> dict[str, tuple]:
        with use(rules):
            out = {}
            for p in _pairs(16):
                a, b = prepare_text(p.gold.text), prepare_text(p.pred.text)
                features, ruled_out = _pair(a, b, 0.9, {})
                out[p.id] = (a, b, np.round(features, 12).tolist(), ruled_out)
            return out

    now, v1 = read(live()), read(frozen("v1"))
    differing = sorted(k for k in now if now[k] != v1[k] and k not in LIVE_CHANGES and k not in LIVE_READINGS)
    assert not differing, differing[:10]


@pytest.fixture(scope="module")
def decisions() -> dict:
    return json.loads(DECISIONS.read_text(encoding="utf-8"))


def _decide(spec: str) -> dict[str, bool]:
    from evals.scoring.agreement import decide
    from evals.scoring.choose_matcher import make_matcher

    pairs = _pairs()
    said = decide(make_matcher(spec), pairs)
    return {p.id: bool(s) for p, s in zip(pairs, said, strict=True)}


@pytest.mark.slow
def test_semantic_v1_gives_the_recorded_decisions_on_every_labelled_pair(decisions):
    from evals.scoring.pairs import pairs_hash

    assert pairs_hash(_pairs()) == decisions["pairs_hash"], "pairs.jsonl changed: record the decisions again"
    said = _decide("semantic-v1")
    recorded = set(decisions["same"])
    differing = sorted(k for k, v in said.items() if v != (k in recorded))
    assert not differing, differing[:10]


@pytest.mark.slow
def test_the_live_matcher_decides_every_labelled_pair_as_v1_but_the_declared_changes(decisions):
    said = _decide("semantic")
    recorded = set(decisions["same"])
    differing = sorted(k for k, v in said.items() if v != (k in recorded) and k not in LIVE_CHANGES)
    assert not differing, differing[:10]


@pytest.mark.slow
def test_a_changed_rule_file_changes_a_verdict(tmp_path):
    """"never" taken out of the negation words: the matcher no longer tells a fact from its negation."""
    from evals.scoring.semantic import PARAMS_FILE, SemanticMatcher, SemanticParams

    rules = _copy(tmp_path)
    _edit(rules / "en.toml", "negation = ['not', 'no', 'never', ", "negation = ['not', 'no', ")
    _edit(rules / "en.toml", "negation = ['cannot', 'neither', 'never', ", "negation = ['cannot', 'neither', ")
    matcher = SemanticMatcher.load()
    params = SemanticParams.model_validate_json(PARAMS_FILE.read_text(encoding="utf-8"))
    edited = SemanticMatcher(params, matcher.embedder, rules=RuleSet(rules, "edited"))
    gold, pred = "The user never drinks coffee.", "The user drinks coffee."
    assert not matcher.same_fact(gold, "user", pred, "user")
    assert edited.same_fact(gold, "user", pred, "user")
    assert edited.fingerprint() != matcher.fingerprint()
