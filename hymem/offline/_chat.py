"""ExtractFacts, the chat path: facts of every human speaker, the AI's suggestions, the current user's profile.

Why apart from the language rules: this is where speakers meet (whom "you" and "she" mean, who owns a fact),
whatever language a sentence is in.
"""

from __future__ import annotations

import re
from typing import Any

from hymem.offline._chinese import ZH_QUESTION, zh_rest, zh_statement, zh_suggestion
from hymem.offline._conversation import AI, CJK, USER, Speaker, finish, parse_rendered, sentences
from hymem.offline._english import en_statement, en_suggestion, third_rest
from hymem.offline._reconcile import fact_slots, norm


def dedupe(facts: list[dict[str, str]]) -> list[dict[str, str]]:
    """Facts in order, a restatement about the same subject (same `norm` text) kept once."""
    seen, out = set(), []
    for fact in facts:
        key = (fact["subject"].casefold(), norm(fact["text"]))
        if key not in seen:
            seen.add(key)
            out.append(fact)
    return out


def fact_record(text: str, subject: str, owner: str) -> dict[str, str]:
    """One fact as the signatures' JSON output has it."""
    return {"text": text, "subject": subject, "owner": owner}


def extract_facts(conversation: str) -> dict[str, Any]:
    """ExtractFacts: facts of every human speaker and the AI's suggestions; a profile of the current user only."""
    name, turns = parse_rendered(conversation)
    facts: list[dict[str, str]] = []
    previous: Speaker = AI
    for turn in turns:
        who = turn.speaker
        if who is None:
            continue
        listener = previous if previous != who else (AI if who is USER else USER)  # whom "you" means
        mentioned: tuple[str, str, str] | None = None  # whom "she"/"he" means, within one message
        for sentence in sentences(turn.text):
            zh = bool(CJK.search(sentence))
            if who is AI:
                if text := zh_suggestion(sentence) if zh else en_suggestion(sentence):
                    facts.append(fact_record(text, "assistant", "agent"))
                continue
            found = _pronoun_statement(sentence, who, mentioned, zh) or (
                zh_statement(sentence, who, listener) if zh else en_statement(sentence, who, listener))
            if not found and who is not USER and (advice := zh_suggestion(sentence, who) if zh else
                                                 en_suggestion(sentence, who)):
                found = [(advice, who.subject)]
            facts.extend(fact_record(text, subject, "user") for text, subject in found)
            mentioned = next((_mention(text, subject) for text, subject in found if subject != who.subject), mentioned)
        previous = who
    facts = dedupe(facts)
    user_facts = [f["text"] for f in facts if f["subject"] == "user"]
    return {"facts": facts, "profile": _profile(name, user_facts)}


_PRONOUN_EN = re.compile(r"^(?:She|He)\s+(?P<rest>[a-z].*)$")
_PRONOUN_ZH = re.compile(r"^(?:她|他)(?!们)(?P<rest>.+)$")


def _mention(text: str, subject: str) -> tuple[str, str, str]:
    """(subject, English lead, Chinese lead) for "she"/"he" after a fact about `subject`.

    The lead keeps how the person was introduced: "Ana, the user's sister," / "小丽是用户的姐姐，".
    """
    en = re.match(rf"^{re.escape(subject)}, [^,]+,", text)
    zh = re.match(rf"^{re.escape(subject)}是[^，,。]+[，,]", text)
    return subject, en.group(0) if en else subject, zh.group(0) if zh else subject


def _pronoun_statement(sentence: str, who: Speaker, mentioned: tuple[str, str, str] | None,
                       zh: bool) -> list[tuple[str, str]]:
    """ "My sister Ana lives in Rome. She is a lawyer." -> "Ana, the user's sister, is a lawyer."."""
    s = sentence.strip()
    if mentioned is None or (ZH_QUESTION.search(s) if zh else s.endswith("?")):
        return []
    subject, lead_en, lead_zh = mentioned
    if zh and (m := _PRONOUN_ZH.match(s.rstrip("。！!"))):
        return [(finish(lead_zh + zh_rest(m.group("rest"), who), zh=True), subject)]
    if not zh and (m := _PRONOUN_EN.match(s)):
        return [(finish(f"{lead_en} {third_rest(m.group('rest'), who)}"), subject)]
    return []


_NAME_FACT = re.compile(r"^(?:The user's name is\s+(?P<en>[^,.;]+)|用户(?:叫|的名字是|的名字叫)(?P<zh>[^，,。；;]+))")


def _profile(name_line: str | None, user_facts: list[str]) -> dict[str, str | None]:
    """L0 profile from the name line and the current user's own facts; later statements win."""
    profile: dict[str, str | None] = dict.fromkeys(("name", "age", "gender", "occupation", "location"))
    said_name = origin = None
    for text in user_facts:
        if m := _NAME_FACT.match(text):
            said_name = (m.group("en") or m.group("zh")).strip()
        for kind, value in fact_slots(text, "user"):
            if kind in ("location", "occupation", "age"):
                profile[kind] = value
            elif kind == "origin":
                origin = value
    profile["location"] = profile["location"] or origin
    profile["name"] = name_line or said_name
    return profile
