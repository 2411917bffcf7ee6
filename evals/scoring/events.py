"""Which kind of life event a fact is about: living somewhere, working there, moving, visiting, being born,
marrying, graduating, studying, interviewing, starting, leaving, coaching or playing.

Two facts that share their date, place or organisation and differ only in that event ("born in 1988" / "got
married in 1988", "lives in Oxford" / "works in Oxford", 搬到了厦门 / 去厦门旅游了, "interviewed at Amazon" / "works at
Amazon") read as near paraphrases to a sentence model, and the thesauri cannot pair the two verbs but do not say
they differ either. The other way round, two words for one event ("based in" / "lives in", 定居 / 住, 跳槽 /
换工作, "works at" / 员工) are paraphrases a thesaurus may not know. The event kinds are a closed class of
predicates, so they are data: the `[events]` table of each language's rule file, one pattern per kind. A rule set
written before them (a frozen baseline) has no such table and reads no event.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

from evals.scoring.rulebook import RulesError, RuleSet, compiled

_HAN = re.compile(r"[\u4e00-\u9fff]")


def _build(r: RuleSet) -> SimpleNamespace | None:
    try:
        en = {kind: re.compile(p) for kind, p in r.table("en", "events.kinds").items()}
        zh = {kind: re.compile(p) for kind, p in r.table("zh", "events.kinds").items()}
        directed = frozenset(r.words("zh", "events.directed") + r.words("en", "events.directed"))
        passive = re.compile(f"{r.alternatives('zh', 'events.passive_marks')}|{r.alternatives('en', 'events.passive_marks')}")
    except RulesError:
        return None
    return SimpleNamespace(en=en, zh=zh, directed=directed, passive=passive, cache={})


_k = compiled(_build)


def events(text: str) -> frozenset[str]:
    """The event kinds a predicate (or a word of one) states, in its own language's table."""
    return frozenset(_spans(text))


def same_event(a: str, b: str) -> bool:
    """Two words (or runs of characters) that name one event kind on their own (员工 / 工作)."""
    return bool(events(a) & events(b))


def _spans(text: str) -> dict[str, tuple[str, ...]]:
    """Each event kind the predicate states -> the stretches of it that state it (casefolded)."""
    k = _k()
    if k is None or not text:
        return {}
    key = ("spans", text)
    hit = k.cache.get(key)
    if hit is None:
        table, read = (k.zh, text) if _HAN.search(text) else (k.en, text[:1].lower() + text[1:])
        hit = {kind: tuple(m.group().casefold() for m in pattern.finditer(read)) for kind, pattern in table.items()}
        hit = {kind: found for kind, found in hit.items() if found}
        if len(k.cache) < 65_536:
            k.cache[key] = hit
    return hit


def _inside(word: str, stretches: tuple[str, ...]) -> bool:
    w = word.casefold()
    return any(w in s or (len(s) < len(w) and s in w) for s in stretches)


def told_as_one_event(unit: tuple[str, ...], others: list[tuple[str, ...]], mine: str, theirs: str) -> bool:
    """A changed unit of one predicate (`mine`) that states an event kind which a changed unit of the other
    (`theirs`) states too: the two words say one event two ways ("based in" / "lives in", 定居 / 住)."""
    sa, sb = _spans(mine), _spans(theirs)
    return any(any(_inside(x, sa[kind]) for x in unit) and any(_inside(y, sb[kind]) for other in others for y in other)
               for kind in sa.keys() & sb.keys())


def events_differ(a: str, b: str) -> bool:
    """Each predicate states an event kind the other does not: the fact is about another event ("started
    working at Deloitte" / "left Deloitte", 住在嘉兴 / 在嘉兴上班), whatever date, place or name they share. One
    side stating more ("moved to Berlin to work at Siemens" / "works at Siemens") is not this."""
    ea, eb = events(a), events(b)
    k = _k()
    if k is not None and (k.passive.search(a) or k.passive.search(b)):  # 被一对夫妇租下 is 租给一对夫妇 told from
        ea, eb = ea - k.directed, eb - k.directed  # its other end: a passive turns a direction round
    return bool(ea - eb) and bool(eb - ea)


__all__ = ["events", "events_differ", "same_event", "told_as_one_event"]
