"""Whether one form abbreviates another: the one definition that the word alignment and the name check share.

Models write an organisation, a degree or a place sometimes in full and sometimes short (GMAT / Graduate
Management Admission Test, MSc / Master of Science, DRC / Democratic Republic of the Congo, JS /
JavaScript, k8s / Kubernetes, Postgres / PostgreSQL, 北大 / 北京大学). Abbreviations are made by rules,
so they are checked by rules, not listed: the short form spelt out of the words' beginnings, in order,
a numeronym, or a long prefix of one word; in Chinese, the short form's characters in order inside the
long one. What no rule derives (NOLA, CERN) is left to the sentence model.
"""

from __future__ import annotations

import functools
import re

from evals.scoring.rulebook import RuleSet, active, compiled


def _build(r: RuleSet) -> frozenset[str]:
    """Words an abbreviation may skip (the "of" of "Master of Science", the "the" of "the Congo")."""
    return frozenset(r.words("shared", "abbreviations.skippable"))


skippable_words = compiled(_build)
_MAX_PIECE = 3  # letters one word may give (MSc: M + Sc; FedEx: Fed + Ex)


def _parts(words: list[str]) -> list[str]:
    """The words, hyphenated ones split (obsessive-compulsive -> obsessive, compulsive) and a single
    camel-case word split into its parts (JavaScript -> Java, Script)."""
    words = [p for w in words for p in w.split("-") if p]
    if len(words) == 1:
        camel = re.findall(r"[A-Z][a-z]*|[a-z]+|\d+", words[0])
        if len(camel) >= 2:
            return camel
    return words


def _spelt(short: str, words: tuple[str, ...]) -> bool:
    """`short` is spelt by the beginnings of `words` in order: every word that is not skippable gives
    1-3 of its first letters, a skippable word gives them or nothing."""
    return _spelt_with(skippable_words(), short, words)


@functools.lru_cache(maxsize=65536)
def _spelt_with(skippable: frozenset[str], short: str, words: tuple[str, ...]) -> bool:
    @functools.cache
    def go(i: int, j: int) -> bool:
        if j == len(words):
            return i == len(short)
        word = words[j]
        if word in skippable and go(i, j + 1):
            return True
        return any(short[i:i + n] == word[:n] and go(i + n, j + 1)
                   for n in range(1, min(_MAX_PIECE, len(word), len(short) - i) + 1))

    return go(0, 0)


def abbreviates(short: str, long_words: list[str]) -> bool:
    """`short` abbreviates the run of words `long_words`: their initials or first letters in order (NYC,
    ADHD, MBA, MSc, GMAT, DRC), camel-case initials (JS, TS), a numeronym (k8s) or a prefix of one long
    word with at least four letters (Postgres, maths)."""
    s = re.sub(r"[.\-\s]", "", short.casefold())
    if len(s) < 2 or not s.isalnum():
        return False
    parts = [p.casefold() for p in _parts([w for w in long_words if w])]
    if len(parts) >= 2 and sum(p not in skippable_words() for p in parts) >= 2 and _spelt(s, tuple(parts)):
        return True
    if len(long_words) == 1:
        w = long_words[0].casefold()
        if len(w) > 4 and s == f"{w[0]}{len(w) - 2}{w[-1]}":
            return True
        if len(s) >= 4 and len(w) >= len(s) + 2 and w.startswith(s.rstrip("s")):
            return True
    return False


_LATIN = re.compile(r"[A-Za-z]")
_CAMEL = re.compile(r"[A-Z][a-z]*|[a-z]+|\d+")


def abbreviated_runs(short: str, words: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """Every run `words[start:end]` of at most 12 Latin words (each opening with a letter) that `short`
    abbreviates, ordered by start, then end: what testing `abbreviates` on each such run would find, with
    the runs that cannot qualify skipped unasked. A run's first word must give `short` its first letter
    unless that word can be skipped, and each word that cannot be skipped gives it at least one letter."""
    return _abbreviated_runs(active().digest, short, words)


@functools.lru_cache(maxsize=65536)
def _abbreviated_runs(rules: str, short: str, words: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """`abbreviated_runs` under the rule set whose digest is `rules` (a cache key only)."""
    skippable = skippable_words()
    s = re.sub(r"[.\-\s]", "", short.casefold())
    if len(s) < 2 or not s.isalnum():
        return ()
    any_start = not s.rstrip("s")  # "ssss" is a prefix of every word: no first letter to require
    latin = [bool(_LATIN.match(w)) for w in words]
    letters = frozenset(s)
    # A word with a part that cannot be skipped and whose first letter `s` lacks spells no run of two or more
    # words: that part would have to give `s` at least its first letter (`_spelt`).
    blocks = [any(p[0] not in letters for p in (q.casefold() for q in w.split("-") if q) if p not in skippable)
              for w in words]
    found = []
    for start, word in enumerate(words):
        if not latin[start]:
            continue
        head = word.split("-")[0]
        camel = _CAMEL.findall(head)
        if (not any_start and word[0].casefold() != s[0] and head.casefold() not in skippable
                and not (camel and camel[0].casefold() in skippable)):
            continue
        unskippable = 0
        for end in range(start + 1, min(start + 12, len(words)) + 1):
            if not latin[end - 1]:
                break
            unskippable += sum(p.casefold() not in skippable for p in words[end - 1].split("-") if p)
            if end - start >= 2 and (unskippable > len(s) or blocks[start] or blocks[end - 1]):
                break  # more words to spell than letters to spell them with, or a word `s` cannot spell, however long
            if abbreviates(short, list(words[start:end])):
                found.append((start, end))
    return tuple(found)


def name_abbreviates(short: str, long: str) -> bool:
    """`abbreviates` between two names as written ("MSc", "Master of Science"; "JS", "JavaScript")."""
    return " " not in short.strip() and abbreviates(short, long.split())


def zh_abbreviates(short: str, long: str) -> bool:
    """北大 / 北京大学, 央视 / 中央电视台, 专八 / 英语专业八级: the short form's characters in order inside
    the long form."""
    it = iter(long)
    return len(short) < len(long) and all(c in it for c in short)


__all__ = ["abbreviated_runs", "abbreviates", "name_abbreviates", "skippable_words", "zh_abbreviates"]
