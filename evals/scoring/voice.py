"""Whether two sentences tell one event in the two voices, each person in the same role: "The user was raised by
their grandmother" / "User's grandmother raised them", "用户被奶奶带大" / "用户的奶奶把用户带大了".

Such a pair names two different subjects (the passive's patient, the active's agent), so a reading that compares
the subjects ("The user's mother is a nurse" is not "The user is a nurse") or takes a voice flip under one subject
for a swap of roles ("mentors juniors" / "is mentored by a senior") would rule out a paraphrase. The reading here
is what tells the two apart: the passive's agent (after "by" / 被 / 由) is the person the active sentence opens
with, and the passive's subject is the one the active's verb acts on (after the verb, or after 把 in Chinese). A
real swap ("The user taught their uncle" / "The user was taught by their uncle") fails it: the active sentence
opens with the passive's patient. Who is who is read with the scorer's own subject reader
(`evals.core.subject_reading`), never the engine's; the closed word classes (auxiliaries, pronouns, markers) are
in the rule files' `[voice]` tables.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

from evals.core.subject_reading import read_subject, same_person
from evals.scoring.lexicon import installed_in_process, same_verb
from evals.scoring.rulebook import RulesError, RuleSet, compiled


def _build(r: RuleSet) -> SimpleNamespace | None:
    """The `[voice]` tables of the active rules; None for a rule set written before them (a frozen baseline),
    which then reads no voice pair, as it did."""
    try:
        possessive = r.alternatives("en", "voice.possessive_pronouns")
        return SimpleNamespace(
            EN_PASSIVE=re.compile(
                rf"^(?P<subject>.+?)\s+(?:{r.alternatives('en', 'voice.passive_auxiliaries')})\s+(?:\w+ly\s+)?"
                rf"(?P<verb>[a-z]+)\b.*?\bby\s+(?P<agent>(?:(?:{possessive}|the\s+user's|[A-Z][\w'-]*'s)\s+)?"
                r"(?:[\w'-]+\s+){0,2}?[\w'-]+)(?=\s*(?:[,.;!]|$|\s+(?:"
                rf"{r.alternatives('en', 'voice.agent_followers')})\b))", re.IGNORECASE),
            EN_POSSESSIVE=re.compile(rf"^(?:{possessive})\s+", re.IGNORECASE),
            EN_NOT_ACTIVE=frozenset(r.words("en", "voice.passive_auxiliaries")),
            EN_OBJECT_PRONOUNS=re.compile(rf"^(?:{r.alternatives('en', 'voice.object_pronouns')})\b", re.IGNORECASE),
            ZH_PASSIVE=re.compile(rf"(?:{r.alternatives('zh', 'voice.passive_markers')})"),
            ZH_DISPOSAL=r.alternatives("zh", "voice.disposal_markers"),
            ZH_PRONOUNS=r.alternatives("zh", "voice.pronouns"),
            seen={},  # (a, b) -> converse, per rule set
        )
    except RulesError:
        return None


_k = compiled(_build)
_CACHE_SIZE = 65_536


def converse(a: str, b: str) -> bool:
    """One of the two sentences is passive with an agent, the other active, and the agent and the patient are
    the same two people on both sides: one event told from its two ends, not a swap of roles."""
    k = _k()
    if k is None:
        return False
    hit = k.seen.get((a, b))
    if hit is None:
        if len(k.seen) >= _CACHE_SIZE:
            k.seen.clear()
        hit = k.seen[(a, b)] = _converse(k, a, b) or _converse(k, b, a)
    return hit


def _converse(k: SimpleNamespace, passive: str, active: str) -> bool:
    if re.search(r"[\u4e00-\u9fff]", passive + active):
        return _zh_converse(k, passive, active)
    return _en_converse(k, passive, active)


def _read_person(phrase: str) -> str | None:
    """Who a noun phrase names ("the user's grandmother", "Mateo", "the assistant"), read as the subject of a
    sentence it opens."""
    return read_subject(f"{phrase.strip()} did it.")


def _en_converse(k: SimpleNamespace, passive: str, active: str) -> bool:
    text = passive.strip().lstrip("-*• ").strip()
    m = k.EN_PASSIVE.match(text)
    patient = read_subject(passive)
    if m is None or patient is None:
        return False
    agent_phrase = m.group("agent")
    if k.EN_POSSESSIVE.match(agent_phrase):  # "by their uncle": the passive's subject's uncle
        if not same_person(patient, "user"):
            return False
        agent_phrase = k.EN_POSSESSIVE.sub("the user's ", agent_phrase, count=1)
    agent = _read_person(agent_phrase)
    opener = read_subject(active)
    if agent is None or opener is None or not same_person(agent, opener) or same_person(agent, patient):
        return False
    verb = m.group("verb").casefold()
    tokens = re.findall(r"[A-Za-z][\w'-]*", active)
    for i, token in enumerate(tokens):
        if i == 0 or tokens[i - 1].casefold() in k.EN_NOT_ACTIVE or not _same_verb(token.casefold(), verb):
            continue
        after = " ".join(tokens[i + 1:])
        if k.EN_OBJECT_PRONOUNS.match(after):  # "User's grandmother raised them": the grandmother's user
            acted_on = "user" if re.match(r"(?i)^(?:the\s+)?user's\s", opener.strip()) else None
        else:  # "The user drove their sister to school": the opener's sister
            phrase = " ".join(tokens[i + 1:i + 4])
            if k.EN_POSSESSIVE.match(phrase) and same_person(opener, "user"):
                phrase = k.EN_POSSESSIVE.sub("the user's ", phrase, count=1)
            acted_on = _read_person(phrase)
        return acted_on is not None and same_person(acted_on, patient)
    return False


def _same_verb(a: str, b: str) -> bool:
    """The two words are forms of one verb: the same word, or (with the thesaurus) a shared WordNet verb
    sense ("wrote" / "written")."""
    return a == b or (installed_in_process() and same_verb(a, b))


def _zh_forms(person: str, k: SimpleNamespace) -> list[str]:
    """How a Chinese sentence writes a person after a verb or a marker: "用户的奶奶" also as 奶奶, 她奶奶, 自己的奶奶."""
    if person == "user":
        return ["用户", k.ZH_PRONOUNS]
    if kin := re.fullmatch(r"用户的(.+)", person):
        return [rf"用户的?{kin.group(1)}", rf"(?:{k.ZH_PRONOUNS})?的?{kin.group(1)}"]
    return [re.escape(person)]


def _zh_converse(k: SimpleNamespace, passive: str, active: str) -> bool:
    m = k.ZH_PASSIVE.search(passive)
    patient, opener = read_subject(passive), read_subject(active)
    if m is None or patient is None or opener is None or same_person(patient, opener):
        return False
    if not any(re.match(form, passive[m.end():]) for form in _zh_forms(opener, k)):
        return False  # the passive's agent is not who the active sentence opens with
    opening = next((o for form in _zh_forms(opener, k) if (o := re.match(rf"\s*(?:{form})", active))), None)
    if opening is None:
        return False
    acted_on = "|".join(_zh_forms(patient, k))
    rest = active[opening.end():]
    # the patient after 把 / 将, or right after the verb ("奶奶带大了用户")
    return bool(re.match(rf"\s*(?:{k.ZH_DISPOSAL})(?:{acted_on})", rest)
                or re.match(rf"\s*[\u4e00-\u9fff]{{1,3}}?[了过着]?(?:{acted_on})", rest))


__all__ = ["converse"]
