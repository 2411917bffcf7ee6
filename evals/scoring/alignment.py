"""Where two predicates differ: word alignment, abbreviations, the differing slot, and voice.

The semantic matcher's sentence cosine says how close two predicates are overall; these features say
*where* they differ, which is what separates a paraphrase from a near-miss that keeps all but one word:

- content words of one side with no counterpart on the other (after light stemming, and after
  abbreviations are explained by the words they abbreviate: NYC / New York City, ML / machine
  learning, JS / JavaScript, k8s / Kubernetes, Postgres / PostgreSQL, 北大 / 北京大学, 央视 / 中央电视台);
  their closeness to the other side's words is measured with the same MiniLM model, word by word;
- the differing slot: the two predicates with their common start and end removed (word level in
  English, character level in Chinese). One short slot on each side inside shared context is how a
  substitution looks ("allergic to peanuts / almonds", "绿茶 / 红茶"), while a paraphrase usually
  rewrites more;
- direction: an argument both sides share, reached "to" it on one side and "from" it on the other
  ("lent money to John" / "borrowed money from John", "gave John a bike" / "received a bike from
  John", 借给 / 向…借);
- voice: the same verb active on one side and passive on the other, the subject kept ("mentors
  junior developers" / "is mentored by a senior developer", "hired a plumber" / "was hired as a
  plumber"): the subject's role flipped.

Word lists here are closed classes (function words, auxiliaries); nothing is keyed to content words.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from types import SimpleNamespace

from evals.scoring.abbreviations import abbreviated_runs, zh_abbreviates
from evals.scoring.lexicon import installed_in_process, person
from evals.scoring.matcher import _stem, light_words
from evals.scoring.rulebook import RulesError, RuleSet, compiled
from hymem.subjects import _EN_RELATION_WORDS, _ZH_RELATIONS

_CJK = "\u3400-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[A-Za-z0-9][A-Za-z0-9+#'-]*")


def _build(r: RuleSet) -> SimpleNamespace:
    """This module's words and patterns, from the rule files (`evals.scoring.rulebook`)."""
    en_light, _ = light_words()
    return SimpleNamespace(
        EN_FUNCTION=en_light | frozenset(r.words("en", "alignment.function")),
        ZH_FUNCTION=frozenset(r.words("zh", "alignment.function")),
        PASSIVE=re.compile(rf"^(?:{r.alternatives('en', 'alignment.passive_auxiliaries')})\s+(?:\w+ly\s+)?"
                           r"([a-z]+(?:ed|en|wn|ght|ung|id|t))\b", re.IGNORECASE),
        # Numbers and units are compared by `evals.scoring.quantities`, not as words: "28" / "二十八", "kg" / "公斤".
        NUMBERISH=re.compile(rf"^(?:{r.alternatives('shared', 'alignment.numberish')})s?$"),
        SOURCE=frozenset(r.words("shared", "alignment.source")),
        GOAL=frozenset(r.words("shared", "alignment.goal")),
        ZH_PASSIVE=re.compile(rf"^(?:[^被让]{{0,3}})(?:{r.alternatives('zh', 'alignment.passive_markers')})"),
        DETERMINERS=frozenset(r.words("en", "alignment.determiners")) | _optional(r, "zh", "alignment.determiners"),
        PARTICIPANT_KINDS=_optional(r, "en", "alignment.participant_kinds"),
        PRESENT=frozenset(r.words("en", "alignment.present")),
        PAST=frozenset(r.words("en", "alignment.past")),
    )


def _optional(r: RuleSet, file: str, key: str) -> frozenset[str]:
    """A list added after a frozen baseline's files were written (the Chinese determiners between a marker and
    its person, 租给了一个大学生; the participant kinds): empty for such a rule set, which reads as in its day."""
    try:
        return frozenset(r.words(file, key))
    except RulesError:
        return frozenset()


_k = compiled(_build)


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("’", "'")


def _key(word: str) -> str:
    """Matching key of an English word: casefolded, lightly stemmed, possessive dropped."""
    w = word.casefold()
    w = w[:-2] if w.endswith("'s") else w.rstrip("'")
    return _stem(w) if w.isalpha() else w


@dataclass(frozen=True)
class Words:
    """The tokens of one predicate: in order (for the slot), and its content words (for alignment)."""

    zh: bool
    tokens: tuple[str, ...]  # matching keys in order; CJK as single characters
    raw: tuple[str, ...]  # the tokens as written (for abbreviations)
    content: tuple[int, ...]  # indices of content tokens
    passive: str | None  # the key of the verb when the predicate opens in the passive voice


def words_of(predicate: str) -> Words:
    text, k = _fold(predicate), _k()
    zh = bool(re.search(f"[{_CJK}]", text))
    raw = tuple(m.group() for m in _TOKEN.finditer(text))
    tokens = tuple(t if re.match(f"[{_CJK}]", t) else _key(t) for t in raw)
    content = tuple(i for i, (r, t) in enumerate(zip(raw, tokens, strict=True))
                    if not k.NUMBERISH.match(r.casefold())
                    and (t not in k.ZH_FUNCTION if re.match(f"[{_CJK}]", r) else t not in k.EN_FUNCTION and
                         r.casefold() not in k.EN_FUNCTION))
    passive = None
    if m := k.PASSIVE.match(text.strip()):
        passive = _key(m.group(1))
    elif k.ZH_PASSIVE.match(text.strip()):
        passive = "被"
    return Words(zh, tokens, raw, content, passive)


def chinese_words(predicate: str) -> tuple[str, ...]:
    """The Chinese content words of a predicate, as jieba's bundled dictionary segments them."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    function = _k().ZH_FUNCTION
    return tuple(w for w in jieba.cut(_fold(predicate)) if re.search(f"[{_CJK}]", w)
                 and not all(c in function for c in w))


# ------------------------------------------------------------------ abbreviations

def _explained(a: Words, b: Words, unmatched_a: set[int], unmatched_b: set[int]) -> tuple[set[int], set[int]]:
    """Remove from the unmatched tokens each abbreviation of one side and the words it abbreviates on
    the other (English; Latin tokens inside Chinese too). Of the runs of Latin words an abbreviation could
    stand for, the first (by start, then length) that still holds an unmatched word is taken."""
    ua, ub = set(unmatched_a), set(unmatched_b)
    for (x, ux), (y, uy) in (((a, ua), (b, ub)), ((b, ub), (a, ua))):
        for i in sorted(ux):
            short = x.raw[i]
            if not re.match(r"[A-Za-z0-9]", short):
                continue
            for start, end in abbreviated_runs(short, y.raw):
                if any(j in uy for j in range(start, end)):
                    ux.discard(i)
                    uy.difference_update(range(start, end))
                    break
    return ua, ub


# ------------------------------------------------------------------ the features of a pair

def _slot(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    s = 0
    while s < min(len(a), len(b)) - p and a[-1 - s] == b[-1 - s]:
        s += 1
    return a[p:len(a) - s], b[p:len(b) - s], p + s


@dataclass(frozen=True)
class Difference:
    """Where two predicates differ; `unmatched_*` are the content words (as written) with no
    counterpart, which the matcher compares with MiniLM word vectors."""

    unmatched_a: tuple[str, ...]
    unmatched_b: tuple[str, ...]
    shared: float  # share of the longer side's tokens outside the differing slot
    substitution: float  # 1.0: a short slot on each side inside shared context
    slot_abbrev: float  # 1.0: Chinese slot where one side's characters abbreviate the other's
    voice: float  # 1.0: the same verb active on one side, passive on the other, subject kept
    tense: float  # 1.0: "is a teacher" / "was a teacher": the copula's tense differs
    direction: float  # 1.0: a shared argument is a source ("from") on one side and not on the other


_EN_PARTICIPANTS = frozenset(_EN_RELATION_WORDS) | {"user", "assistant", "users"}
# The scorer's own cue that a Chinese token starts a person (the engine reads names with jieba, `hymem.names`):
# a common surname or a nickname prefix and one or two characters. A cue for alignment, not a subject reading.
_ZH_SURNAMES = ("王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈"
                "姚卢姜崔钟谭陆汪范金石廖贾夏韦付傅方白邹孟熊秦邱江尹薛闫阎段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
                "常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕单季裴"
                "霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶解牟艾尤阳时穆农司卓古吉缪简车项连芦麦褚娄窦戚岑"
                "景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明佘池查麻苑迟邝"
                "诸上欧司端皇慕令东西南北")
# A Chinese name: a surname or a nickname prefix and one or two characters (not 以前, 的职业).
_ZH_PERSON = rf"[{_ZH_SURNAMES}小老阿大][\u4e00-\u9fff]{{1,2}}?"
_ZH_PARTICIPANT = re.compile(rf"(?:{_ZH_RELATIONS}|{_ZH_PERSON}|用户|助手)")


def _participant(w: Words, i: int) -> bool:
    """Token i starts a person: a name (capitalised past the first word), a relation, the user, the
    assistant or a noun WordNet files as a kind of person (student, tenant); in Chinese a relation, a name
    opening with a surname or 小/老/阿/大, 用户 or 助手."""
    raw = w.raw[i]
    if re.match(f"[{_CJK}]", raw):
        return bool(_ZH_PARTICIPANT.match("".join(w.raw[i:i + 4])))
    return ((i > 0 and raw[:1].isupper()) or raw.casefold().removesuffix("'s") in _EN_PARTICIPANTS
            or (raw.islower() and "person" in _k().PARTICIPANT_KINDS and installed_in_process() and person(raw)))


def _marks(w: Words) -> dict[str, str]:
    """Participant token -> the directional word right before it ("to", "from", 给, 从, 向), if any:
    "lent money to John" / "borrowed money from John", not "suffers from migraines" / "a migraine sufferer"."""
    out: dict[str, str] = {}
    k = _k()
    for i in w.content:
        if not _participant(w, i):
            continue
        j = i - 1
        while j >= 0 and w.raw[j].casefold() in k.DETERMINERS:  # "to a colleague", "from their neighbour"
            j -= 1
        before = w.tokens[j] if j >= 0 else ""
        mark = "source" if before in k.SOURCE else "goal" if before in k.GOAL else ""
        out[w.tokens[i]] = out.get(w.tokens[i]) or mark
    return out


def _direction(a: Words, b: Words) -> float:
    ma, mb = _marks(a), _marks(b)
    return float(any(ma[k] != mb[k] and "source" in (ma[k], mb[k])
                     for k in ma.keys() & mb.keys()))


def difference(a: Words, b: Words) -> Difference:
    keys_a, keys_b = set(a.tokens), set(b.tokens)
    ua = {i for i in a.content if a.tokens[i] not in keys_b}
    ub = {i for i in b.content if b.tokens[i] not in keys_a}
    ua, ub = _explained(a, b, ua, ub)
    slot_a, slot_b, shared = _slot(a.tokens, b.tokens)
    longest = max(len(a.tokens), len(b.tokens), 1)
    limit = 6 if (a.zh or b.zh) else 3
    substitution = float(bool(slot_a) and bool(slot_b) and shared >= 1 and len(slot_a) <= limit
                         and len(slot_b) <= limit and bool(ua) and bool(ub))
    slot_abbrev = 0.0
    if (a.zh or b.zh) and slot_a and slot_b:
        sa, sb = "".join(slot_a), "".join(slot_b)
        short, long = sorted((sa, sb), key=len)
        # characters, not digits: 28 inside 128 is another number, 北大 inside 北京大学 the same place
        slot_abbrev = float(bool(re.search(f"[{_CJK}]", short)) and zh_abbreviates(short, long))
    voice = 0.0
    for x, y in ((a, b), (b, a)):
        if x.passive and not y.passive and y.tokens:
            if x.passive == "被":
                voice = max(voice, float(not y.zh or "被" not in y.tokens))
                voice = voice if set(x.tokens[1:4]) & set(y.tokens[:3]) else 0.0
            else:
                voice = max(voice, float(any(t[:4] == x.passive[:4] for t in y.tokens[:2])))
    return Difference(tuple(a.raw[i] for i in sorted(ua)), tuple(b.raw[i] for i in sorted(ub)),
                      shared / longest, substitution, slot_abbrev, voice, _tense(a, b), _direction(a, b))


def _tense(a: Words, b: Words) -> float:
    """The first auxiliary of each side, one present and one past ("is in July" / "was in July").
    "was born" is no tense: a birth is only ever told in the past ("was born in Lagos" / "birthplace is")."""
    k = _k()

    def auxiliary(w: Words) -> str:
        raw = [t.casefold() for t in w.raw]
        return next((t for i, t in enumerate(raw) if t in k.PRESENT | k.PAST
                     and not (t in k.PAST and raw[i + 1:i + 2] == ["born"])), "")

    first = {auxiliary(w) for w in (a, b)}
    return float(len(first) == 2 and bool(first & k.PRESENT) and bool(first & k.PAST))


__all__ = ["Difference", "Words", "chinese_words", "difference", "words_of"]
