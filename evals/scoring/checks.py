"""Explicit checks for the near-misses that flip a fact while keeping its words.

An embedding rates "lives in Berlin" and "wants to live in Berlin", or "每天早上跑步" and "每天晚上跑步",
as near-duplicates. Each check below reads one kind of qualifier off a sentence, in English and
Chinese, and the semantic matcher compares the two sides: polarity (negation, a negative verb),
modality (desire, plan, past/ceased), time (time of day, weekday, month, season, relative time,
frequency), numbers (digits, English and Chinese number words), names (capitalised words and Latin
tokens, in Chinese the proper nouns of jieba's dictionary; an abbreviation counts as its expansion) and
relations ("sister" vs "cousin"). The word
lists are closed classes (function words, calendar words, kin terms); they are not a list of
synonyms for content words.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from types import SimpleNamespace

from evals.scoring.abbreviations import abbreviates, name_abbreviates, skippable_words, zh_abbreviates
from evals.scoring.quantities import _zh_value, frequencies  # one reading of Chinese numerals for both
from evals.scoring.rulebook import RuleSet, compiled
from hymem.subjects import _EN_RELATIONS, _KIN, _ZH_RELATIONS, RELATION_FOLD

_CJK = "\u3400-\u9fff\uf900-\ufaff"
_IS_CJK = re.compile(f"[{_CJK}]")


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("’", "'").replace("‘", "'")
    return re.sub(r"(?i)\b(can)'t\b", r"\1 not", re.sub(r"(?i)n't\b", " not", re.sub(r"(?i)\bwon't\b", "will not", text)))


def is_chinese(text: str) -> bool:
    return bool(_IS_CJK.search(text))


def _build(r: RuleSet) -> SimpleNamespace:
    """This module's words and patterns, from the rule files (`evals.scoring.rulebook`)."""
    en_numbers = r.table("en", "checks.numbers")
    modality = {k: (re.compile(rf"(?i)\b(?:{r.alternatives('en', f'checks.modality_{k}')})\b"),
                    re.compile(r.alternatives("zh", f"checks.modality_{k}"))) for k in ("desire", "plan", "past")}
    return SimpleNamespace(
        EN_CEASED=re.compile(rf"(?i)\b(?:{r.alternatives('en', 'checks.ceased')})\b"),
        EN_NEG=re.compile(rf"(?i)\b(?:{r.alternatives('en', 'checks.negation')})\b"),
        EN_NEG_VERB=re.compile(rf"(?i)\b(?:{r.alternatives('en', 'checks.negative_verbs')})\b"),
        ZH_CEASED=re.compile(r.alternatives("zh", "checks.ceased")),
        ZH_NEG=re.compile(f"[{''.join(r.words('zh', 'checks.negation'))}]"),
        ZH_NOT_NEG=re.compile(r.alternatives("zh", "checks.not_negation")),
        ZH_NEG_VERB=re.compile(r.alternatives("zh", "checks.negative_verbs")),
        PREFIXES=r.words("en", "checks.negating_prefixes"),
        MODALITY_RE=modality,
        TIME_EN_RE={k: re.compile(rf"(?i)\b(?:{v})\b") for k, v in r.table("en", "checks.time").items()},
        TIME_ZH_RE={k: re.compile(v) for k, v in r.table("zh", "checks.time").items()},
        EN_NUMBERS=en_numbers,
        EN_NUMBER_RE=re.compile(r"(?i)\b(" + "|".join(sorted(en_numbers, key=len, reverse=True)) +
                                rf")(?:[\s-]+({r.alternatives('en', 'checks.number_ones')}))?\b"),
        ZH_NOT_NUMBER=re.compile(r.alternatives("zh", "checks.not_number")),
        NOT_ENTITY=frozenset(r.words("en", "checks.not_entity")),
        ZH_NAME_TAGS=frozenset(r.words("zh", "checks.name_tags")),
        ZH_NOT_NAME=frozenset(r.words("zh", "checks.not_name")),
        SKIPPABLE=skippable_words(),
        ORDINAL_NOUNS=r.alternatives("en", "checks.ordinal_nouns"),
        EN_RELATION_RE=re.compile(
            rf"(?i)(?:(?:'s|s'|\b(?:{r.alternatives('en', 'checks.possessives')})|\b(?:has|have|had)\s+(?:a|an|one|two|three|"
            rf"four|\d+))\s+(?:(?!ex-|former\b)[\w-]+\s+){{0,2}}?|^\W*)(?P<ex>ex-|former\s+)?(?P<rel>{_EN_RELATIONS})\b|"
            rf"\b(?P<ex2>ex-|former\s+)?(?P<rel2>{_EN_RELATIONS})\s+of\s+(?:the\s+)?(?:user|assistant|(?-i:[A-Z]\w+))\b"),
        ZH_RELATION_RE=re.compile(rf"(?:(?:{r.alternatives('zh', 'checks.possessors')}|{_ZH_RELATIONS})的?|有(?:[一两二三四五六七八九]|\d+)?[个位名]?|^\W*)"
                                  rf"(?:大|小|亲|好|老)?(前)?({_ZH_RELATIONS})"),
    )


_k = compiled(_build)


# ---------------------------------------------------------------- polarity
_WORD = re.compile(r"[a-z]+(?:-[a-z]+)?")


def antonym_prefix(a: str, b: str) -> bool:
    """A word on one side is the other's with a negating prefix (agrees / disagrees, comfortable /
    uncomfortable, 满意 / 不满意 is caught by the negation count)."""
    k = _k()
    wa, wb = ({w for w in _WORD.findall(t.casefold()) if not k.EN_NEG_VERB.fullmatch(w)} for t in (a, b))
    return any(p + w in other for mine, other in ((wa - wb, wb - wa), (wb - wa, wa - wb)) for w in mine
               for p in k.PREFIXES if len(w) >= 4)


def negative_verb(word: str) -> bool:
    """Whether a word is one of the negative verbs `polarity` counts ("dislikes", "broken", 讨厌)."""
    k = _k()
    return bool(k.EN_NEG_VERB.fullmatch(word) or k.ZH_NEG_VERB.search(word))


def _zh_words(text: str) -> list[str]:
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    return list(jieba.cut(text))


def polarity(text: str) -> tuple[int, int]:
    """(negations outside "no longer"-style cessation, negative verbs), each counted mod 2."""
    t, k = _norm(text), _k()
    if is_chinese(t):
        # a negative verb that holds a negator ("受不了") counts once, as the negative verb
        stripped = k.ZH_CEASED.sub("", k.ZH_NOT_NEG.sub("", k.ZH_NEG_VERB.sub("", t)))
        if "别" in stripped:  # 别 is "don't" only as a word of its own, not inside 特别, 区别, 分别
            stripped = "".join(w if w == "别" else w.replace("别", "") for w in _zh_words(stripped))
        return len(k.ZH_NEG.findall(stripped)) % 2, len(k.ZH_NEG_VERB.findall(t)) % 2
    stripped = k.EN_CEASED.sub(" ", t)
    return len(k.EN_NEG.findall(stripped)) % 2, len(k.EN_NEG_VERB.findall(t)) % 2


# ---------------------------------------------------------------- modality
def modality(text: str) -> frozenset[str]:
    t = _norm(text)
    zh = is_chinese(t)
    return frozenset(k for k, (en, zh_re) in _k().MODALITY_RE.items() if (zh_re if zh else en).search(t))


# ---------------------------------------------------------------- time
def time_words(text: str) -> frozenset[str]:
    t, k = _norm(text), _k()
    table = k.TIME_ZH_RE if is_chinese(t) else k.TIME_EN_RE
    found = {k for k, pattern in table.items() if pattern.search(t)}
    if is_chinese(t):  # "10月" is 十月
        found |= {f"month{int(m)}" for m in re.findall(r"(?<![\d.])(\d{1,2})月", t) if 1 <= int(m) <= 12}
    if is_chinese(t):  # English words inside Chinese text too
        found |= {name for name, pattern in k.TIME_EN_RE.items() if pattern.search(t) and name != "may_month"}
    # "last summer" / "next spring": a season, weekday or month with its deictic modifier
    for m in re.finditer(r"(?i)\b(last|next)\s+([a-z]+)", t):
        rel = m.group(1).casefold()
        found |= {f"{rel}:{name}" for name, pattern in k.TIME_EN_RE.items() if pattern.fullmatch(m.group(2))}
    # how often, as a rate: "twice a week" / "2x weekly" / 每周两次 / 一周2次 are one frequency
    found |= {f"every:{rate:g}" for rate in frequencies(t)}
    return frozenset(found)


# ---------------------------------------------------------------- numbers
_DIGITS = re.compile(r"\d+(?:[.,]\d+)?")
_CLOCK = re.compile(r"\b(\d{1,2})[:：](\d{2})\b")
_ZH_NUMBER_RE = re.compile(r"[零〇一二两俩三四五六七八九十百千万]+|半")
def numbers(text: str) -> tuple[float, ...]:
    """Every number the sentence states, sorted: digits, English number words, Chinese numerals."""
    t, k = _norm(text), _k()
    found: list[float] = []
    for m in _CLOCK.finditer(t):
        found.append(int(m.group(1)) + int(m.group(2)) / 60)
    t = _CLOCK.sub(" ", t)
    for m in _DIGITS.finditer(t):
        try:
            found.append(float(m.group().replace(",", "")))
        except ValueError:
            continue
    if is_chinese(t):
        cleaned = k.ZH_NOT_NUMBER.sub(" ", t)
        found += [_zh_value(m.group()) for m in _ZH_NUMBER_RE.finditer(cleaned)]
    prev_end = None
    for m in k.EN_NUMBER_RE.finditer(t):
        word = m.group(1).casefold()
        if word in ("second", "first") and not re.search(rf"(?i)\b{word}\s+(?:{k.ORDINAL_NOUNS})", t):
            continue
        value = k.EN_NUMBERS[word] + (k.EN_NUMBERS[m.group(2).casefold()] if m.group(2) else 0)
        if word in ("hundred", "thousand") and found and prev_end is not None and t[prev_end:m.start()].strip() == "":
            found[-1] *= value  # "ten thousand", "two hundred"
        else:
            found.append(float(value))
        prev_end = m.end()
    return tuple(sorted(found))


# ---------------------------------------------------------------- names
_NAME = re.compile(r"[A-Z][A-Za-z0-9+#.&'-]*(?:\s+(?:(?:of|and|for|de|the)\s+){0,2}[A-Z][A-Za-z0-9+#.&'-]*)*|"
                   r"[A-Za-z]+[0-9][A-Za-z0-9.]*")
_LATIN_IN_ZH = re.compile(r"[A-Za-z][A-Za-z0-9+#.&'-]*(?:\s+[A-Za-z][A-Za-z0-9+#.&'-]*)*")
def names(text: str) -> dict[str, str]:
    """Capitalised words past the sentence's first (and Latin tokens in Chinese): folded → as written."""
    t, not_entity = _norm(text), _k().NOT_ENTITY
    pattern = _LATIN_IN_ZH if is_chinese(t) else _NAME
    out: dict[str, str] = {}
    for m in pattern.finditer(t):
        if m.start() == 0 and not is_chinese(t):
            continue
        words = [w.strip(".'-") for w in m.group().split()]
        words = [w for w in words if w and w.casefold() not in not_entity]
        if words:
            out[" ".join(words).casefold()] = " ".join(words)
    return out


def _written(word: str, folded: str) -> bool:
    """The (casefolded) word or name stands in the casefolded text as a whole word."""
    return re.search(rf"(?<![a-z0-9]){re.escape(word)}(?![a-z0-9])", folded) is not None


def _covered(name: str, raw_name: str, other_names: dict[str, str], other_text: str) -> bool:
    """A name the other side also states: the same name, its abbreviation or expansion (NYC / New
    York City, JS / JavaScript, k8s / Kubernetes) or a longer form of it (Postgres / PostgreSQL)."""
    folded = other_text.casefold()
    if _written(name, folded):
        return True
    compact = name.replace(" ", "")
    for other, raw_other in other_names.items():
        o_compact = other.replace(" ", "")
        short, long = sorted((compact, o_compact), key=len)
        if len(short) >= 5 and long.startswith(short) and len(long) - len(short) >= 2:
            return True
        if name_abbreviates(raw_name, raw_other) or name_abbreviates(raw_other, raw_name):
            return True
    return False




def zh_names(text: str) -> dict[str, str]:
    """The Chinese counterpart of capitalised words: proper nouns by the tags of jieba's bundled
    dictionary (people, places, organisations, other names), plus Latin tokens."""
    import logging

    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    out, k = names(text), _k()
    for token in jieba.posseg.cut(_norm(text)):
        if token.flag in k.ZH_NAME_TAGS and is_chinese(token.word) and token.word not in k.ZH_NOT_NAME:
            out[token.word] = token.word
    return out


def name_table(text: str) -> dict[str, str]:
    """The names a sentence states (folded → as written), read once per text."""
    return zh_names(text) if is_chinese(text) else names(text)


def _zh_covered(name: str, other_names: dict[str, str]) -> bool:
    return is_chinese(name) and any(zh_abbreviates(o, name) or zh_abbreviates(name, o) for o in other_names)


_LATIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9+#&'-]*")
_SHORT_FORM = re.compile(r"[A-Za-z0-9&]*[A-Z][A-Za-z0-9&]*[A-Z0-9][A-Za-z0-9&]*$")  # two capitals or a digit: UCLA, JPL, MSc


def _spelt_out(text: str, other_names: dict[str, str]) -> tuple[set[str], set[str]]:
    """The names of the other side that `text` explains word by word (each word written in `text` as it is,
    a small word, or a short form spelt by a run of `text`'s words), and the words of `text` those short forms
    spell. The runs cross the commas and small words that split `names`: "University of California, Los
    Angeles" / UCLA, "the National Society for the Prevention of Cruelty to Children" / NSPCC, "NASA's Jet
    Propulsion Laboratory" / "NASA JPL". A name with one unexplained word explains nothing ("VS Code" /
    "Visual Studio")."""
    words = [w.removesuffix("'s") for w in _LATIN_WORD.findall(text)]
    folded, skippable = text.casefold(), _k().SKIPPABLE
    explained: set[str] = set()
    spelt: set[str] = set()
    for key, raw in other_names.items():
        marks: set[str] = set()
        for token in (t.removesuffix("'s") for t in raw.split()):
            if token.casefold() in skippable or _written(token.casefold(), folded):
                continue
            runs = [words[i:j] for i in range(len(words)) for j in range(i + 2, min(i + 12, len(words)) + 1)
                    if abbreviates(token, words[i:j])] if _SHORT_FORM.match(token) else []
            if not runs:
                break
            marks.update(w.casefold() for run in runs for w in run)
        else:
            explained.add(key)
            spelt |= marks
    return explained, spelt


def _all_spelt(raw_name: str, spelt: set[str], other: str) -> bool:
    folded, skippable = other.casefold(), _k().SKIPPABLE
    return all(w in spelt or w in skippable or _written(w, folded)
               for w in (t.removesuffix("'s").casefold() for t in raw_name.split()))


def names_substituted(na: dict[str, str], a: str, nb: dict[str, str], b: str) -> bool:
    """Each side states a name the other lacks (Berlin vs Paris, 武汉 vs 长沙); an abbreviation or a
    longer form of a name on the other side covers it (NYC, Postgres, 北大, UCLA)."""
    a, b = _norm(a), _norm(b)
    only_a = [n for n, raw in na.items() if not _covered(n, raw, nb, b) and not _zh_covered(n, nb)]
    only_b = [n for n, raw in nb.items() if not _covered(n, raw, na, a) and not _zh_covered(n, na)]
    if only_a and only_b:  # a short form may spell a run that `names` split at a comma or a small word
        explained_b, spelt_a = _spelt_out(a, {n: nb[n] for n in only_b})
        explained_a, spelt_b = _spelt_out(b, {n: na[n] for n in only_a})
        only_a = [n for n in only_a if n not in explained_a and not _all_spelt(na[n], spelt_a, b)]
        only_b = [n for n in only_b if n not in explained_b and not _all_spelt(nb[n], spelt_b, a)]
    return bool(only_a) and bool(only_b)


def name_substitution(a: str, b: str) -> bool:
    """`names_substituted` of two sentences."""
    return names_substituted(name_table(a), a, name_table(b), b)


# ---------------------------------------------------------------- relations
# A relation word counts where it names someone's relative or acquaintance: after a possessive ("the user's
# mother", "their boss", 用户的妈妈, 朋友的妈妈), after "has a" (用户有个哥哥), or opening the sentence ("Mother is a
# nurse", 母亲是护士); not "the manager of a hotel", "works as a manager" or 面包店的老板.
_EN_KIN_PAIR = re.compile(rf"(?i)\b({_EN_RELATIONS})'s\s+({_EN_RELATIONS})\b")
_ZH_KIN_PAIR = re.compile(rf"({_ZH_RELATIONS})的?({_ZH_RELATIONS})")


def _composed(m: re.Match[str]) -> str:
    """"mother's mother" -> "grandmother", 妈妈的妈妈 -> 外婆 (`hymem.subjects`' kinship table), else as written."""
    first, second = (RELATION_FOLD.get(g.casefold(), g.casefold()) for g in m.groups())
    return _KIN.get((first, second), m.group())


def _kin_composed(text: str) -> str:
    return _ZH_KIN_PAIR.sub(_composed, _EN_KIN_PAIR.sub(_composed, _norm(text)))


def relations(text: str) -> frozenset[str]:
    """The relations a sentence names someone by (folded, kin composed)."""
    t = _kin_composed(text)
    found = [("ex-" if m.group("ex") or m.group("ex2") else "") + RELATION_FOLD.get(r := (m.group("rel") or m.group("rel2")).casefold(), r)
             for m in _k().EN_RELATION_RE.finditer(t)]
    return frozenset(found + [former + RELATION_FOLD.get(r, r) for former, r in _k().ZH_RELATION_RE.findall(t)])


def mentioned_relations(text: str) -> frozenset[str]:
    """Every relation word in a sentence, in whatever frame (邻居 in 用户修好了邻居的自行车)."""
    t = _kin_composed(text)
    found = [m.casefold() for m in _EN_ANY_RELATION_RE.findall(t)] + _ZH_ANY_RELATION_RE.findall(t)
    return frozenset(RELATION_FOLD.get(r, r) for r in found)


_EN_ANY_RELATION_RE = re.compile(rf"(?i)\b({_EN_RELATIONS})\b")
_ZH_ANY_RELATION_RE = re.compile(_ZH_RELATIONS)


# A quoted span: double quotes, curly quotes, backticks, 「」『』, or single quotes that are not apostrophes
_QUOTED = re.compile(r'"[^"\n]+"|“[^”\n]+”|`[^`\n]+`|「[^」\n]+」|『[^』\n]+』|(?<![\w\'])\'[^\'\n]+\'(?![\w\'])')


def unquoted(text: str) -> str:
    """The text without its quoted spans: an error message, a command or code a fact cites ("fails with
    'no such table'", `pip install pyyaml`) is a literal, and its negations and numbers do not qualify the
    fact's own claim. Two memories of one lesson quote the same message in different lengths. A text that
    is one quotation ('"The user drinks matcha."') is the claim itself."""
    if _QUOTED.fullmatch(text.strip(" -•.,;:。，；：")):
        return text
    return _QUOTED.sub(" ", text)


@dataclass(frozen=True)
class Qualifiers:
    """What a sentence says besides its predicate's words, read once per text."""

    polarity: tuple[int, int]
    modality: frozenset[str]
    time: frozenset[str]
    numbers: tuple[float, ...]
    relations: frozenset[str]  # the relations it names someone by
    mentioned: frozenset[str]  # every relation word in it

    @classmethod
    def of(cls, text: str) -> Qualifiers:
        return cls(polarity(text), modality(text), time_words(text), numbers(text), relations(text),
                   mentioned_relations(text))


def mismatches(a: Qualifiers, b: Qualifiers, text_a: str, text_b: str) -> dict[str, float]:
    """1.0 where the two sides differ on a qualifier."""
    neg_a, neg_b = a.polarity, b.polarity
    flipped = (neg_a[0] + neg_a[1]) % 2 != (neg_b[0] + neg_b[1]) % 2
    return {
        "polarity": float(flipped != antonym_prefix(text_a, text_b)),
        "modality": float(a.modality != b.modality),
        "time": float(a.time != b.time),
        "number": float(set(a.numbers) != set(b.numbers)),
        # a relation one side names someone by and the other does not mention at all
        "relation": float(bool((a.relations - b.mentioned) | (b.relations - a.mentioned))),
    }


__all__ = ["Qualifiers", "antonym_prefix", "unquoted", "is_chinese", "mismatches", "modality", "name_substitution", "negative_verb", "name_table", "names", "names_substituted", "numbers", "polarity",
           "mentioned_relations", "relations", "time_words"]
