"""Deciding whether a predicted memory states a gold fact, without the engine's embedder.

Memory sentences share a frame ("The user lives in …", "用户住在…"), so measures that count all
characters alike rate "lives in Paris" and "lives in Berlin" as near-duplicates — fatal for `updates`
and `absent`, which hinge on exactly that difference. On LABELLED_PAIRS, each at its best threshold
and with the same subject rule, rapidfuzz's token_set_ratio agrees 0.72 and char-3-gram Jaccard 0.73
(Chinese sentences are too short for 3-grams); this matcher agrees 0.95 (a test measures all three).
Those are in-sample figures (its threshold was chosen on the same pairs). On the held-out split of
`datasets/matcher/pairs.jsonl`, written the way real models phrase memories, it agrees far less
(BENCHMARKS.md, "Fact matching"): `semantic` is the default matcher and this one is `--matcher text`.
It compares weighted units: Latin words (lightly stemmed, a few memory predicates folded) and single
CJK characters, with frame words light and names and numbers heavier; one-sided negation, or a
name/number on each side that the other lacks (a substitution), halves the score. Text and subject
are judged apart: the assignment matches on text, so a fact filed under the wrong subject is counted
as an attribution error rather than as a missing fact plus an extra one.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
from scipy.optimize import linear_sum_assignment

from evals.core.subject_reading import names_person as names_subject
from evals.core.subject_reading import person_class as subject_class
from evals.core.subject_reading import read_subject as subject_of
from evals.core.subject_reading import same_person as same_subject
from evals.scoring.rulebook import RuleSet, compiled
from evals.scoring.voice import converse

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_UNIT = re.compile(rf"\d+(?:[.:]\d+)*|[{_CJK}]|(?:(?![{_CJK}])[^\W\d_])+")
_CONTRACTIONS = ((re.compile(r"(?i)\bcan't\b"), "can not"), (re.compile(r"(?i)\bwon't\b"), "will not"),
                 (re.compile(r"(?i)n't\b"), " not"), (re.compile(r"(?i)'(s|re|ve|d|ll|m)\b"), ""))



def _build(r: RuleSet) -> SimpleNamespace:
    """The text matcher's words, from the rule files (`evals.scoring.rulebook`): frame words (they recur in every
    memory sentence, so sharing them says little), negations, and predicates memory sentences say in several ways
    (folded, so a paraphrase is not a substitution)."""
    synonyms = [*r.table("en", "matcher.synonyms").items(), *r.table("zh", "matcher.synonyms").items()]
    return SimpleNamespace(
        EN_LIGHT=frozenset(r.words("en", "matcher.light")),
        ZH_LIGHT=frozenset(r.words("zh", "matcher.light")),
        EN_NEGATION=frozenset(r.words("en", "matcher.negation")),
        ZH_NEGATION=re.compile(f"[{''.join(r.words('zh', 'matcher.negation'))}]"),
        ZH_NOT_NEGATION=re.compile(r.alternatives("zh", "matcher.not_negation")),
        SYNONYMS=tuple((re.compile(pattern, re.IGNORECASE), repl) for repl, pattern in synonyms),
    )


_k = compiled(_build)


def light_words() -> tuple[frozenset[str], frozenset[str]]:
    """The frame words: English words, Chinese characters."""
    k = _k()
    return k.EN_LIGHT, k.ZH_LIGHT


_LIGHT, _NORMAL, _HEAVY = 0.2, 1.0, 1.5  # heavy > normal, but a shared city must not carry a pair
_PENALTY = 0.5


def _stem(word: str) -> str:
    """A few English suffixes, enough for lives/living/live and stopped/stop; not a real stemmer."""
    for suffix in ("ing", "ies", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
        word = word[:-1]  # stopp -> stop, runn -> run
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def _prepare(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("’", "'").replace("‘", "'")
    for pattern, repl in (*_CONTRACTIONS, *_k().SYNONYMS):
        text = pattern.sub(repl, text)
    return text


def units(text: str) -> dict[str, float]:
    """Unit -> weight: frame words light, names (capitalised past the first word) and numbers heavy."""
    out: dict[str, float] = {}
    en_light, zh_light = light_words()
    for position, match in enumerate(_UNIT.finditer(_prepare(text))):
        raw = match.group()
        if raw[0].isdigit():
            unit, weight = raw, _HEAVY
        elif re.match(rf"[{_CJK}]", raw):
            unit, weight = raw, (_LIGHT if raw in zh_light else _NORMAL)
        else:
            lower = raw.casefold()
            if lower in en_light:
                unit, weight = lower, _LIGHT
            else:
                unit, weight = _stem(lower), (_HEAVY if raw[0].isupper() and position else _NORMAL)
        out[unit] = max(weight, out.get(unit, 0.0))
    return out


def negated(text: str) -> bool:
    """Whether the sentence is negated ("does not", "no longer", "不", "没有")."""
    prepared, k = _prepare(text), _k()
    if any(m.group().casefold() in k.EN_NEGATION for m in _UNIT.finditer(prepared)):
        return True
    return bool(k.ZH_NEGATION.search(k.ZH_NOT_NEGATION.sub("", prepared)))


def _dice(ua: dict[str, float], ub: dict[str, float], neg_a: bool, neg_b: bool) -> float:
    weight = {u: max(ua.get(u, 0.0), ub.get(u, 0.0)) for u in ua.keys() | ub.keys()}
    # math.fsum: exact, so the same in any order (a set's order follows the process's string hashing)
    total = math.fsum(weight[u] for u in ua) + math.fsum(weight[u] for u in ub)
    if total == 0:
        return 0.0
    score = 2 * math.fsum(weight[u] for u in ua.keys() & ub.keys()) / total
    if neg_a != neg_b:
        score *= _PENALTY
    heavy_only = [{u for u in mine.keys() - theirs.keys() if mine[u] == _HEAVY} for mine, theirs in ((ua, ub), (ub, ua))]
    if all(heavy_only):
        score *= _PENALTY
    return score


def text_similarity(a: str, b: str) -> float:
    """Weighted Dice over units in [0, 1]; halved when exactly one side is negated, and halved when
    each side has a name or number the other lacks (Paris vs Berlin, 28 vs 32: a substitution)."""
    ua, ub = units(a), units(b)
    if not ua and not ub:
        return 1.0 if a.strip() == b.strip() else 0.0
    return _dice(ua, ub, negated(a), negated(b))


def subject_text_mismatch(text: str, subject: str | None, kind: str = "fact") -> bool:
    """The structured subject disagrees with the sentence: "user" on a sentence that does not name
    the user, a name the text never mentions. Experiences are the assistant's lessons and need no prefix."""
    if kind == "experience" and subject_class(subject) == "assistant":
        return False
    return not names_subject(text, subject)


def subject_rule(a_text: str, a_subject: str | None, b_text: str, b_subject: str | None) -> bool:
    """Same subject, by label; a None label means "whoever the sentence names", as the scorer reads it
    (`evals.core.subject_reading`, not the engine's rule under test)."""
    a_subject = a_subject if a_subject is not None else subject_of(a_text)
    b_subject = b_subject if b_subject is not None else subject_of(b_text)
    if a_subject is None or b_subject is None:
        return a_subject is None and b_subject is None
    return same_subject(a_subject, b_subject)


def texts_name_same_subject(a: str, b: str) -> bool:
    """False when both sentences name a subject and they differ ("The user's mother is a nurse" is
    not "The user is a nurse", whatever the labels say), unless one tells the other's event in the other voice
    with each person in the same role ("The user was raised by their grandmother" / "User's grandmother raised
    them": `evals.scoring.voice.converse`)."""
    sa, sb = subject_of(a), subject_of(b)
    return sa is None or sb is None or same_subject(sa, sb) or converse(a, b)


class Matcher:
    """Does a predicted memory state a gold fact? Text and subject are judged apart: `scores` says
    whether the statements match (>= `threshold`), `same_fact` adds the subject rule, and `assign`
    pairs gold with predictions one-to-one on text, so a fact filed under the wrong subject is an
    attribution error rather than a missing fact plus an extra one.

    `prepare` takes every text of a case once, so a matcher does its per-text work (tokens, vectors,
    judge calls) once per distinct text and never per pair."""

    spec: str = "?"
    threshold: float = 0.5
    subject_bonus: float = 0.1  # added to a pair's weight in the assignment when the subjects agree

    def prepare(self, gold: Sequence[str], pred: Sequence[str]) -> None:
        """Per-text work for a case's gold-side and prediction-side texts, batched."""

    def prepare_pairs(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Per-text work for labelled (gold, pred) pairs, batched: by default every text of them at once."""
        self.prepare(list(dict.fromkeys(g for g, _ in pairs)), list(dict.fromkeys(p for _, p in pairs)))

    def scores(self, gold: Sequence[str], pred: Sequence[str]) -> np.ndarray:
        """[len(gold), len(pred)] text-match scores in [0, 1]."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """Changes whenever the matcher's decisions may change (spec, parameters)."""
        return self.spec

    def undecided(self, gold: str, pred: str) -> bool:
        """Whether the pair was left "not the same" only because the matcher could not decide it (a failed
        judge call)."""
        return False

    def similarity(self, a: str, b: str) -> float:
        return float(self.scores([a], [b])[0, 0])

    def matches(self, a: str, b: str) -> bool:
        return self.similarity(a, b) >= self.threshold

    def same_fact(self, a_text: str, a_subject: str | None, b_text: str, b_subject: str | None) -> bool:
        """Same statement about the same subject; `a` is the gold side (a gold fact, an absent
        statement, a seeded memory), `b` the prediction side."""
        return self.subjects_agree(a_text, a_subject, b_text, b_subject) and self.matches(a_text, b_text)

    @staticmethod
    def subjects_agree(a_text: str, a_subject: str | None, b_text: str, b_subject: str | None) -> bool:
        """The subject half of `same_fact`, decided in code for every matcher."""
        return subject_rule(a_text, a_subject, b_text, b_subject) and texts_name_same_subject(a_text, b_text)

    def assign(self, gold: Sequence[tuple[str, str | None]], pred: Sequence[tuple[str, str | None]]
               ) -> list[tuple[int, int, float]]:
        """One-to-one (gold index, pred index, score) maximising total score over pairs above the
        threshold; a subject bonus makes "John likes coffee." pair with its own gold."""
        if not gold or not pred:
            return []
        sim = self.scores([g for g, _ in gold], [p for p, _ in pred])
        bonus = np.array([[self.subject_bonus * same_subject(gs, ps) for _, ps in pred] for _, gs in gold])
        weight = np.where(sim >= self.threshold, sim + bonus, 0.0)
        rows, cols = linear_sum_assignment(weight, maximize=True)
        return [(int(r), int(c), float(sim[r, c])) for r, c in zip(rows, cols, strict=True)
                if sim[r, c] >= self.threshold]


class TextMatcher(Matcher):
    """Weighted-unit text similarity with one threshold: fast, no model (`--matcher text`)."""

    spec = "text"

    def __init__(self, threshold: float = 0.67, subject_bonus: float = 0.1, cache_size: int = 50_000):
        self.threshold = threshold  # calibrate(LABELLED_PAIRS)[0]; a test keeps the two equal
        self.subject_bonus = subject_bonus
        self._cache: dict[str, tuple[dict[str, float], bool]] = {}
        self._cache_size = cache_size

    def _prepared(self, text: str) -> tuple[dict[str, float], bool]:
        hit = self._cache.get(text)
        if hit is None:
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            hit = self._cache[text] = (units(text), negated(text))
        return hit

    def fingerprint(self) -> str:
        return f"text:threshold={self.threshold}"

    def scores(self, gold: Sequence[str], pred: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(gold), len(pred)))
        right = [self._prepared(p) for p in pred]
        for i, g in enumerate(gold):
            ug, ng = self._prepared(g)
            for j, (up, np_) in enumerate(right):
                if not ug and not up:
                    out[i, j] = 1.0 if g.strip() == pred[j].strip() else 0.0
                else:
                    out[i, j] = _dice(ug, up, ng, np_)
        return out


DEFAULT_MATCHER = TextMatcher()

# (text_a, subject_a, text_b, subject_b, same fact?) — paraphrases vs different facts, en + zh.
LABELLED_PAIRS: tuple[tuple[str, str, str, str, bool], ...] = (
    ("The user lives in Berlin.", "user", "The user lives in Berlin, Germany.", "user", True),
    ("The user is a teacher.", "user", "The user works as a teacher.", "user", True),
    ("The user works at Stripe.", "user", "The user works at Stripe now.", "user", True),
    ("John is a nurse in Berlin.", "John", "John works as a nurse in Berlin.", "John", True),
    ("The user has a cat named Luna.", "user", "The user has a cat called Luna.", "user", True),
    ("The user does not eat meat.", "user", "The user doesn't eat meat.", "user", True),
    ("The assistant suggested that the user stop drinking coffee after 2 pm.", "assistant",
     "The assistant suggested the user stop drinking coffee after 2pm.", "assistant", True),
    ("Jack, the user's friend, is a chef.", "Jack", "The user's friend Jack is a chef.", "Jack", True),
    ("The user is 34 years old.", "user", "The user is 34.", "user", True),
    ("The user's project uses Python 3.11.", "user", "The user's project is using Python 3.11.", "user", True),
    ("The user plays the violin.", "user", "The user plays violin.", "user", True),
    ("The user is learning Spanish.", "user", "The user is currently learning Spanish.", "user", True),
    ("The user no longer has a dog.", "user", "The user does not have a dog anymore.", "user", True),
    ("The user lives in Berlin.", "user", "The user has moved to Berlin.", "user", True),
    ("The user likes coffee.", "user", "John likes coffee.", "John", False),
    ("The user lives in Berlin.", "user", "The user lives in Paris.", "user", False),
    ("The user eats meat.", "user", "The user does not eat meat.", "user", False),
    ("The user works at Google.", "user", "The user works at Microsoft.", "user", False),
    ("The user stopped drinking coffee after 2 pm.", "user",
     "The assistant suggested that the user stop drinking coffee after 2 pm.", "assistant", False),
    ("The user is learning Go.", "user", "The assistant suggested that the user learn Go.", "assistant", False),
    ("The user is a teacher.", "user", "The user lives in Chicago.", "user", False),
    ("The user's project uses Python 3.11.", "user", "The user's project targets Python 3.9.", "user", False),
    ("The user has a dog.", "user", "The user no longer has a dog.", "user", False),
    ("The user is considering moving to London next year.", "user", "The user lives in London.", "user", False),
    ("Sara works at IBM.", "Sara", "The user works at IBM.", "user", False),
    ("The user likes coffee.", "user", "The user likes tea.", "user", False),
    ("The user has two daughters.", "user", "The user has two sons.", "user", False),
    ("John lives in Austin.", "John", "John works as a firefighter.", "John", False),
    ("The user lives in Berlin.", "user", "The user is a nurse in Berlin.", "user", False),
    ("The user works at Stripe.", "user", "The user is employed at Stripe.", "user", True),
    ("John works as a firefighter.", "John", "John is a firefighter.", "John", True),
    ("The user is allergic to peanuts.", "user", "The user has a peanut allergy.", "user", True),
    ("Ana, the user's sister, lives in Rome.", "Ana", "Ana, the user's sister, is a lawyer.", "Ana", False),
    ("The user's project uses Python 3.11.", "user", "The user's project uses pytest.", "user", False),
    ("The user works at Toyota.", "user", "山田太郎 works at Toyota.", "山田太郎", False),
    ("The user runs three times a week.", "user", "The user goes running three times a week.", "user", True),
    ("Lena is a dentist.", "Lena", "Lena works as a dentist.", "Lena", True),
    ("用户住在深圳。", "user", "用户现在住在深圳。", "user", True),
    ("用户是一名医生。", "user", "用户是医生。", "user", True),
    ("用户在腾讯工作。", "user", "用户在腾讯上班。", "user", True),
    ("王芳是住在北京的护士。", "王芳", "王芳是护士，住在北京。", "王芳", True),
    ("用户不吃辣。", "user", "用户不能吃辣的东西。", "user", True),
    ("用户的姐姐小丽是律师。", "小丽", "小丽是用户的姐姐，是一名律师。", "小丽", True),
    ("助手建议用户睡前一小时不要看手机。", "assistant", "助手建议用户睡觉前一小时别看手机。", "assistant", True),
    ("用户今年28岁。", "user", "用户28岁。", "user", True),
    ("用户养了一只猫。", "user", "用户有一只猫。", "user", True),
    ("用户的朋友Jack是厨师。", "Jack", "Jack是用户的朋友，是一名厨师。", "Jack", True),
    ("用户每天听三十分钟英语播客。", "user", "用户每天会听30分钟的英语播客。", "user", True),
    ("用户住在厦门。", "user", "用户搬到了厦门。", "user", True),
    ("用户喜欢喝咖啡。", "user", "张伟喜欢喝咖啡。", "张伟", False),
    ("用户住在深圳。", "user", "用户在深圳工作。", "user", False),
    ("用户的姐姐小丽住在广州。", "小丽", "用户的姐姐小丽是律师。", "小丽", False),
    ("用户住在北京。", "user", "用户住在深圳。", "user", False),
    ("用户吃辣。", "user", "用户不吃辣。", "user", False),
    ("用户在阿里巴巴工作。", "user", "用户在字节跳动工作。", "user", False),
    ("用户睡前一小时不看手机。", "user", "助手建议用户睡前一小时不要看手机。", "assistant", False),
    ("用户是建筑师。", "user", "用户住在天津。", "user", False),
    ("用户养了一只猫。", "user", "用户不再养猫。", "user", False),
    ("用户今年28岁。", "user", "用户今年32岁。", "user", False),
    ("用户喜欢喝咖啡。", "user", "用户喜欢喝茶。", "user", False),
)


def calibrate(pairs: tuple[tuple[str, str, str, str, bool], ...] = LABELLED_PAIRS, step: float = 0.01,
              window: float = 0.03) -> tuple[float, float]:
    """(threshold, agreement): the grid threshold whose neighbourhood (±window) agrees best with the
    labels on average, so a lucky sliver between two scores is not chosen. Ties go to the higher
    threshold: a false match hides an absent-violation or a failed update, worse than a missed paraphrase."""
    scored = [(text_similarity(a, b), same_subject(sa, sb), label) for a, sa, b, sb, label in pairs]
    grid = np.round(np.arange(0.0, 1.0 + step / 2, step), 6)
    agree = np.array([sum(((s >= t) and ok) == label for s, ok, label in scored) / max(len(scored), 1)
                      for t in grid])
    half = int(round(window / step))
    smooth = np.array([agree[max(0, i - half): i + half + 1].mean() for i in range(len(grid))])
    best = int(np.flatnonzero(smooth == smooth.max())[-1])
    return float(grid[best]), float(agree[best])


def matcher_agreement(matcher: Matcher = DEFAULT_MATCHER,
                      pairs: tuple[tuple[str, str, str, str, bool], ...] = LABELLED_PAIRS) -> float:
    """Share of labelled pairs on which `matcher.same_fact` agrees with the label (in-sample: the
    default threshold was calibrated on these same pairs)."""
    if not pairs:
        return float("nan")
    agree = sum(matcher.same_fact(a, sa, b, sb) == label for a, sa, b, sb, label in pairs)
    return agree / len(pairs)


__all__ = [
    "DEFAULT_MATCHER",
    "LABELLED_PAIRS",
    "Matcher",
    "TextMatcher",
    "calibrate",
    "matcher_agreement",
    "negated",
    "same_subject",
    "subject_class",
    "subject_rule",
    "subject_text_mismatch",
    "texts_name_same_subject",
    "text_similarity",
    "units",
]
