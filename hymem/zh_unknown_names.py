"""A Chinese name that jieba's dictionary does not hold, read with jieba's own character model.

Why: jieba's dictionary path cuts a name it does not know into words it does (温|立新, 甘美|玲, 祁|海峰) and tags
those words, so an unknown third party's name was read as no one. jieba also ships the character-level model
(an HMM over begin/middle/end/single states joined with parts of speech, trained on tagged news text) that it
uses for words outside its dictionary. That model knows which characters begin and end a person's name
(`nr`) without any surname list. A span is read as a name when it is no dictionary word, the dictionary's
segmentation has a word boundary at its end (it cuts no word such as 高峰期 or 东方明珠 in two), and the model
reads the span alone as one person's name, or nearly: the best reading is at most `margin` nats more likely
than the reading "this span is one name".
What it trades: a rare surname the model has seldom seen begin a name (时, 全) needs the wider margin that only a
relation word before it earns ("用户的表弟时立新"); a span that is no dictionary word but that the model
reads as a name (a brand or a nickname coined from characters that often start names) is read as a name.
"""

from __future__ import annotations

import functools
import re

_HAN = re.compile(r"^[\u3400-\u9fff]+$")
_IMPOSSIBLE = -3.14e100  # jieba's own floor for a transition or emission its model never saw


@functools.lru_cache(maxsize=8192)
def name_margin(span: str) -> float:
    """How many nats jieba's character model prefers its best reading of `span` over reading it as one person's
    name (0.0: the model itself reads it as a name)."""
    from jieba.posseg import char_state_tab_P, emit_P, start_P, trans_P
    from jieba.posseg.viterbi import viterbi

    best, _ = viterbi(span, char_state_tab_P, start_P, trans_P, emit_P)
    states = [("B", "nr")] + [("M", "nr")] * (len(span) - 2) + [("E", "nr")]
    forced = start_P.get(states[0], _IMPOSSIBLE) + emit_P[states[0]].get(span[0], _IMPOSSIBLE)
    for before, state, char in zip(states, states[1:], span[1:], strict=False):
        forced += trans_P[before].get(state, _IMPOSSIBLE) + emit_P[state].get(char, _IMPOSSIBLE)
    return max(0.0, float(best) - forced)


@functools.lru_cache(maxsize=8192)
def model_first_word(clause: str) -> tuple[str, str]:
    """The first word of a clause and its tag as jieba's character model alone reads it (no dictionary): a second
    opinion on a dictionary word the dictionary tags as a name (华为 is 华|为 to the model; 高峰 is a name to both)."""
    from jieba.posseg import char_state_tab_P, emit_P, start_P, trans_P
    from jieba.posseg.viterbi import viterbi

    if not clause:
        return "", ""
    _, path = viterbi(clause, char_state_tab_P, start_P, trans_P, emit_P)
    for end, (position, tag) in enumerate(path):
        if position in ("E", "S"):
            return clause[:end + 1], str(tag)
    return clause, str(path[-1][1])


def _dictionary_words(clause: str) -> list[tuple[str, str]]:
    """The clause cut and tagged by jieba's dictionary alone (no new words from its model: 甘美|玲|在, not 甘美|玲在)."""
    import jieba.posseg

    return [(w.word, w.flag) for w in jieba.posseg.cut(clause, HMM=False)]


# A name does not begin with a conjunction, a particle or a measure word (和|老公), nor end with a one-character
# verb, adverb or preposition (台词|挺, 小李|教, 卜凡|会): those are the clause's grammar around a name. A given name
# may be a dictionary verb (齐|远航) and a surname a dictionary numeral (左|宏伟).
_NOT_FIRST = ("c", "u", "q")
_NOT_LAST_CHARACTER = ("v", "d", "p", "c", "u")


# A span that opens with a common word of two characters or more is that word (高中|时在学校…), not a surname and a
# given name: "common" is this many occurrences in the corpus jieba's dictionary was counted on (高中 4,732; the
# words unknown names were cut into: 甘美 38, 危立 2).
COMMON_WORD_COUNT = 200


def unknown_name(clause: str, margin: float) -> str | None:
    """The 2- or 3-character name a clause opens with that jieba's dictionary does not hold, as its character
    model reads it (see the module's docstring); the nearer reading when both lengths fit; None when neither does."""
    import jieba
    import jieba.posseg

    known = jieba.posseg.dt.word_tag_tab
    words = _dictionary_words(clause)
    if not words or words[0][1].startswith(_NOT_FIRST) or \
            (len(words[0][0]) >= 2 and jieba.dt.FREQ.get(words[0][0], 0) >= COMMON_WORD_COUNT):
        return None
    last_word = {}  # the dictionary word that ends at each boundary
    at = 0
    for word, flag in words:
        at += len(word)
        last_word[at] = (word, flag)
    fits = []
    for length in (3, 2):
        span = clause[:length]
        if len(clause) <= length or not _HAN.match(span) or span in known or length not in last_word:
            continue  # a span that cuts a dictionary word is not read (高峰|期, 马可|领养; also 喻晓|光是, a miss)
        word, flag = last_word[length]
        if len(word) == 1 and flag.startswith(_NOT_LAST_CHARACTER):
            continue
        if (gap := name_margin(span)) <= margin:
            fits.append((gap, -length, span))
    return min(fits)[2] if fits else None


__all__ = ["model_first_word", "name_margin", "unknown_name"]
