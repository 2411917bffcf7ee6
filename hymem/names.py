"""Person names at the start of a memory sentence: the conversation's names first, a tokenizer second.

Why not a surname list and a list of words a name may be followed by: an ordinary name followed by an
adverb (赵敏很…, 李娜非常…), a compound surname (欧阳娜娜) or a title ("Dr. Smith") slipped through them. The
names the conversation gives (the named speakers, the user's own name) are the strongest signal: a fact
that opens with one of them is that person's, whatever follows. Without one, Chinese is segmented by jieba
(its dictionary and HMM tag person names `nr`), and an English name is a run of capitalised words, a title
before it ("Dr.", "Mrs.") and a surname particle inside it (da, van, Ó, Ní) included.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

from hymem.zh_unknown_names import model_first_word, name_margin, unknown_name

# Two-character surnames, which jieba reads as a place or a word (欧阳 ns) or joins to the next word: a
# closed class of a few dozen, unlike the open class of single-character surnames jieba's model already knows.
COMPOUND_SURNAMES = ("欧阳", "司马", "诸葛", "上官", "司徒", "东方", "皇甫", "尉迟", "公孙", "慕容", "长孙", "宇文", "夏侯",
                     "轩辕", "令狐", "端木", "独孤", "南宫", "西门", "钟离", "百里", "呼延", "澹台", "万俟", "闻人", "濮阳",
                     "申屠", "太史", "公羊", "赫连", "拓跋", "第五", "司空", "歐陽", "司馬", "諸葛")
# A nickname is a prefix and one character of the name (小陈, 老赵, 阿杰); 老师 and 小孩 are common words.
_NICKNAME_PREFIXES = ("小", "老", "阿")
_PERSON_TAGS = ("nr", "nrfg", "nrt")
_COMMON_WORD_TAGS = ("n", "v", "vn", "a", "ad", "an", "d", "r", "m", "q", "p", "c", "u", "f", "s", "ns", "nt", "nz")
_HAN = re.compile(r"[\u3400-\u9fff]")

# Titles and honorifics that belong to the name they precede ("Dr. Smith", "Mrs Patel", "Sir Patrick Moore").
# Kinship words that also work as titles (Father, Sister, Aunt) are left to the relation rules.
TITLES = ("Dr", "Doctor", "Mr", "Mrs", "Ms", "Mx", "Miss", "Mme", "Mlle", "Prof", "Professor", "Sir", "Dame", "Lady",
          "Lord", "Rev", "Revd", "Reverend", "Fr", "Capt", "Captain", "Col", "Lt", "Sgt", "Det", "Judge", "Rabbi",
          "Imam", "Pastor", "Coach", "Officer", "Herr", "Frau", "Señor", "Señora", "Sr", "Sra", "Madame", "Monsieur")
TITLE = r"(?:" + "|".join(sorted(TITLES, key=len, reverse=True)) + r")\.?"
# A capitalised Latin word of a name: an accented capital (Éamon, Ó), an Irish or Italian elided prefix
# (O'Brien, D'Angelo), hyphenated parts (Jean-Luc, Jones-Smith, Al-Farsi).
_UPPER = "A-Z\u00c0-\u00d6\u00d8-\u00de\u0100-\u017f"
_LETTER = r"[^\W\d_\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]"  # a letter of an alphabet: not Chinese, Japanese, Korean
LATIN_WORD = rf"(?:[OD]')?[{_UPPER}]{_LETTER}*(?:-{_LETTER}+)*"
# Lower-case particles inside a surname ("Maria da Silva", "Vincent van Gogh", "Ahmed bin Zayed").
PARTICLE = r"(?:van|von|der|den|de|da|das|dos|do|di|del|della|du|le|la|ter|ten|bin|ibn|al|el|y)"
EN_PERSON = rf"(?:{TITLE}\s+)?{LATIN_WORD}(?:\s+(?:{PARTICLE}\s+)?{LATIN_WORD})*"
_TITLE_WORD = re.compile(rf"^{TITLE}$")


def fold(name: str | None) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", name or "").replace("’", "'").strip()).casefold()


def name_words(name: str) -> list[str]:
    """The words of a name without its title, folded: "Dr. Amelia Hart" → ["amelia", "hart"]."""
    words = fold(name).split()
    return [w for w in words if not _TITLE_WORD.match(w.capitalize())] or words


def opening_participant(text: str, names: Iterable[str]) -> tuple[str, str] | None:
    """(the conversation's name the text opens with, the rest): the whole name, longest first, followed by
    anything but a longer word ("Jo" is not the start of "John"; a one-character Chinese name 张 is not the
    start of 张伟). Chinese runs on after a name ("赵敏很喜欢…"), so a Chinese name of two characters or more is
    whole whatever follows."""
    folded = unicodedata.normalize("NFKC", text).replace("’", "'")
    for name in sorted({n.strip() for n in names if n and n.strip()}, key=len, reverse=True):
        probe = unicodedata.normalize("NFKC", name).replace("’", "'")
        if not folded.casefold().startswith(probe.casefold()):
            continue
        rest = folded[len(probe):]
        if _HAN.match(probe[-1]):
            if len(probe) == 1 and rest and _HAN.match(rest[0]):
                continue
        elif rest and re.match(r"[\w'-]", rest) and not re.match(r"'s\b", rest):
            continue
        return name.strip(), rest
    return None


def participant_named(read: str | None, names: Iterable[str]) -> str | None:
    """The one conversation name a name read from the text stands for: the same name, or part of it with
    or without its title ("Siobhán" for "Siobhán O'Brien", "Smith" for "Dr. Smith"); None when none or
    several fit."""
    if not read:
        return None
    words = name_words(read)
    if not words:
        return None
    fits = {n for n in names if n and n.strip() and set(words) <= set(name_words(n))}
    return fits.pop() if len(fits) == 1 else None


# Terms of address that follow a surname and belong to the name, as "Dr." precedes one (王阿姨, 柴师傅, 滕叔).
ZH_ADDRESS_TERMS = ("阿姨", "叔叔", "叔", "伯伯", "伯", "大爷", "大妈", "大娘", "大叔", "大姐", "大哥", "奶奶", "爷爷", "婆婆",
                    "阿婆", "姐", "哥", "嫂", "姨", "师傅", "老师", "医生", "大夫", "总", "经理", "先生", "女士", "小姐", "教授")
_PREDICATE_TAGS = ("v", "a", "d", "p", "t", "m", "r", "f", "c", "l", "i")


@functools.lru_cache(maxsize=1)
def _quiet_jieba() -> None:
    """jieba announces building its dictionary on stderr; the engine's callers did not ask for that."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)


def _tag(word: str) -> str:
    """The part of speech jieba's dictionary gives a word on its own ("" for a word it does not hold)."""
    import jieba.posseg

    return str(jieba.posseg.dt.word_tag_tab.get(word, ""))


@functools.lru_cache(maxsize=4096)
def zh_leading_name(text: str) -> str | None:
    """The person's name a Chinese sentence opens with, as jieba segments and tags it, when a predicate
    follows it: a compound surname and the given name after it (欧阳娜娜), a word tagged as a person's name
    (赵敏 in 赵敏很喜欢…), a surname with a term of address (王阿姨), or a nickname (小陈, 老周) that is not a
    common word (老师, 小孩); None when the first word is no name ("爱喝酸梅汤": no predicate after 爱喝)."""
    if not text or not _HAN.match(text[0]):
        return None
    import jieba.posseg

    _quiet_jieba()
    clause = re.split(r"[，,。.！!？?；;：:（(\s]", text, maxsplit=1)[0]
    name = _zh_name(clause, [(w.word, w.flag) for w in jieba.posseg.cut(clause)])
    if _tag(clause[:1]) != "p" and (name is None or len(name) == 2):  # 向小刘借了…: a preposition, not a surname
        unknown = unknown_name(clause, UNKNOWN_NAME_MARGIN)
        if name is None or (unknown is not None and len(unknown) > len(name) and unknown.startswith(name)):
            name = unknown  # 花蕾|蕾, 喻晓|光: the dictionary's (or jieba's) word was only part of the name
    return name if name is not None and _predicate_follows(clause, name) else None


def _predicate_opens(text: str) -> bool:
    """Whether a text opens with a verb, an adverb, a preposition or a time word, as a predicate does."""
    import jieba.posseg

    first = next(iter(jieba.posseg.cut(text)), None) if text else None
    return first is not None and first.flag.startswith(("v", "d", "p", "t", "f"))


def _predicate_follows(clause: str, name: str) -> bool:
    """Whether what follows a name in its clause holds a predicate (or 的): "爱喝|酸梅汤" has none."""
    import jieba.posseg

    rest = [w.flag for w in jieba.posseg.cut(clause[len(name):])] if len(clause) > len(name) else []
    return not rest or any(flag.startswith(_PREDICATE_TAGS) or flag == "uj" for flag in rest)


# How far jieba's character model may prefer another reading of an unknown span over "one person's name" (nats,
# `hymem.zh_unknown_names`): at a sentence's start, and right after a relation word, where a name is expected.
UNKNOWN_NAME_MARGIN = 2.0
UNKNOWN_NAME_MARGIN_AFTER_RELATION = 4.0


def _zh_name(clause: str, words: list[tuple[str, str]]) -> str | None:
    """The name the clause's first words make, before the predicate check (see `zh_leading_name`)."""
    import jieba.posseg

    if not words:
        return None
    first, flag = words[0]
    following = words[1] if len(words) > 1 else ("", "")
    for surname in COMPOUND_SURNAMES:
        if clause.startswith(surname):
            if flag in _PERSON_TAGS and first.startswith(surname) and 3 <= len(first) <= 4:
                return first  # 上官婉儿, as jieba tags it
            given = next(iter(jieba.posseg.cut(clause[len(surname):])), None)
            if given is None or not _HAN.match(given.word):
                return None
            # jieba may run the given name into the next word (诸葛明在 → 明在): one or two characters of it
            word = given.word if len(given.word) <= 2 and given.flag in _PERSON_TAGS + ("n", "nz", "a", "ns") else given.word[:1]
            two = clause[len(surname):len(surname) + 2]
            if len(word) == 1 and len(two) == 2 and _HAN.match(two[1]) and _predicate_opens(clause[len(surname) + 2:]) \
                    and (not _predicate_opens(clause[len(surname) + 1:])
                         or name_margin(surname + two) <= name_margin(surname + word)):
                word = two  # 慕容|立新|喜欢, 诸葛|文静|养了; not 司马|光|小时候, 司马婷|在读 (jieba's model: not a name)
            return surname + word
    if len(first) == 1 and flag in _PERSON_TAGS and following[0] in ZH_ADDRESS_TERMS:
        return first + following[0]  # 王 + 阿姨
    if (len(first) == 1 and flag in _PERSON_TAGS and following[1] in _PERSON_TAGS and 1 <= len(following[0]) <= 2
            and following[0] not in ZH_ADDRESS_TERMS):
        return first + following[0]  # 蔺 + 志强: a surname jieba knows, and a given name it tags
    if first in _NICKNAME_PREFIXES and len(following[0]) == 1 and following[1] in _PERSON_TAGS:
        return first + following[0]  # 小 + 陈
    if flag in _PERSON_TAGS and 2 <= len(first) <= 4 and all(_HAN.match(c) for c in first):
        if first in jieba.posseg.dt.word_tag_tab and model_first_word(clause)[1] not in ("nr", "nrfg"):
            # a dictionary word tagged as a name is one only when jieba's character model also reads a name starting
            # there: the dictionary tags 华为, 戴眼镜 and 阿里巴巴 as names; the model reads 华|为, 戴|眼镜, and a
            # transliteration (nrt) for the last
            return None
        if jieba.posseg.dt.word_tag_tab.get(first) is None:  # found by jieba's model, not in its dictionary
            if _tag(first[0]) == "p":
                return None  # 向小刘借了…: a preposition, not a surname
            tail = next(iter(jieba.posseg.cut(clause[len(first) - 1:], HMM=False)), None)
            if len(first) == 3 and tail is not None and tail.flag.startswith(("v", "d", "p", "c")) and tail.flag != "vg":
                first = first[:2]  # the model ran the name into its verb: 张伟爱 → 张伟 (爱喝酒)
        if len(first) == 2 and len(following[0]) == 1 and following[1] == "x" and _HAN.match(following[0]):
            return first + following[0]  # 黎曼 + 婷: a character jieba does not know ends the name
        return first
    if (len(first) == 2 and first[0] in _NICKNAME_PREFIXES and flag not in _COMMON_WORD_TAGS
            and _HAN.match(first[1])):
        return first  # 老周 (jieba: a time word), not 老师 or 小孩 (common nouns)
    return None


# What a given name read on its own may be tagged besides a name: jieba's dictionary holds many given names as a
# place (建国), an adjective (浩然) or a word (思琪), which is why it is read only where a name is expected.
_GIVEN_NAME_TAGS = _PERSON_TAGS + ("ns", "nz", "a", "x")


@functools.lru_cache(maxsize=4096)
def zh_name_after_relation(text: str) -> str | None:
    """The name right after a relation word ("用户的姐姐|小丽喜欢跳舞", "他的同事|王磊…", "用户的哥哥|建国是医生"),
    where Chinese puts a relative's name in apposition: a name `zh_leading_name` reads, else a given name of two
    or three characters with no surname that a predicate follows; None when a predicate, an adverb or a time word
    comes first ("用户的姐姐|很喜欢跳舞", "用户的奶奶|以前是裁缝")."""
    text = re.sub(r"^[,，]\s*", "", text)
    if (name := zh_leading_name(text)) is not None:
        return name
    if not text or not _HAN.match(text[0]):
        return None
    import jieba.posseg

    _quiet_jieba()
    clause = re.split(r"[，,。.！!？?；;：:（(\s]", text, maxsplit=1)[0]
    words = [(w.word, w.flag) for w in jieba.posseg.cut(clause)]
    if len(words) < 2:
        return None
    (first, flag), (_, after) = words[0], words[1]
    if 2 <= len(first) <= 3 and all(_HAN.match(c) for c in first) and flag in _GIVEN_NAME_TAGS \
            and after.startswith(_PREDICATE_TAGS) and not first.startswith(_NICKNAME_PREFIXES[:2]):
        return first
    name = unknown_name(clause, UNKNOWN_NAME_MARGIN_AFTER_RELATION)  # 用户的表弟|时立新很喜欢钓鱼
    return name if name is not None and _predicate_follows(clause, name) else None


__all__ = ["COMPOUND_SURNAMES", "EN_PERSON", "LATIN_WORD", "PARTICLE", "TITLE", "TITLES", "fold", "name_words",
           "opening_participant", "participant_named", "zh_leading_name", "zh_name_after_relation", "ZH_ADDRESS_TERMS"]
