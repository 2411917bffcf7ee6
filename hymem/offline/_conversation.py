"""The rendered conversation as the offline model reads it: the name line, speakers, turns and sentences.

Why apart: every rule (English, Chinese, working, reconcile) shares these speakers and the sentence finisher,
so a fact reads the same whichever rule produced it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME_LINE = re.compile(r"^(?:The user's name is\s+(?P<en>.+?)\.?|用户名叫\s*(?P<zh>.+?)[。.]?)\s*$")
_LABEL_LINE = re.compile(r"^\[(?P<label>[^\[\]\n]{1,80})\]:[ \t]?(?P<text>.*)$")
_CONTEXT_LABELS = {"system", "tool", "developer", "function"}


@dataclass(frozen=True)
class Speaker:
    """Who a first-person sentence is about, and how to name them in a fact."""

    subject: str  # "user", "assistant" or the person's name
    en: str  # "the user", "John"
    zh: str  # "用户", "John"
    en_poss: str  # "the user's", "John's"
    zh_poss: str  # "用户的", "John的"


def _person(name: str) -> Speaker:
    return Speaker(name, name, name, f"{name}'s", f"{name}的")


USER = Speaker("user", "the user", "用户", "the user's", "用户的")
AI = Speaker("assistant", "the assistant", "助手", "the assistant's", "助手的")


@dataclass(frozen=True)
class Turn:
    speaker: Speaker | None  # None for system/tool context
    text: str


def parse_rendered(text: str) -> tuple[str | None, list[Turn]]:
    """Name line and turns of a rendered conversation (hymem.render's format, parsed leniently here).

    Unlabelled lines continue the message above; a leading backslash escapes a content line (or a message's
    first line, after its label).
    """
    text = text.replace("\u2019", "'")
    name: str | None = None
    turns: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if m := _NAME_LINE.match(line.rstrip()):  # content lines that look like this arrive escaped
            name = (m.group("en") or m.group("zh")).strip()
        elif m := _LABEL_LINE.match(line):
            turns.append((m.group("label").strip(), [_unescaped(m.group("text"))]))
        elif turns:
            turns[-1][1].append(_unescaped(line))
    out = []
    for label, lines in turns:
        low = label.casefold()
        speaker = USER if low == "user" else AI if low == "assistant" else None
        if speaker is None and low not in _CONTEXT_LABELS:
            speaker = _person(label)
        out.append(Turn(speaker, "\n".join(lines)))
    return name, out


def _unescaped(line: str) -> str:
    return line[1:] if line.startswith("\\") else line


_SENT_SPLIT = re.compile(r"(?<=[。！？；])|(?<=[.!?;])(?=\s)|\n")  # "user?.name" and "3.11" stay whole
CJK = re.compile(r"[\u4e00-\u9fff]")


_BULLET = re.compile(r"^(?:[-*•]|\d+[.)])\s+")


def sentences(text: str) -> list[str]:
    """Sentences of a message; a list item's bullet is dropped."""
    return [_BULLET.sub("", s.strip()) for s in _SENT_SPLIT.split(text) if s and s.strip()]


def finish(text: str, zh: bool = False) -> str:
    text = re.sub(r"\s+", " ", text).strip().rstrip(",;:，；： ")
    text = re.sub(r"[.!。！]+$", "", text)
    if zh:
        text = re.sub(r"(?<=[\u4e00-\u9fff，])\s+|\s+(?=[\u4e00-\u9fff，])", "", text)
        return text + "。"
    return text[:1].upper() + text[1:] + "."
