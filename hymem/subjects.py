"""Who a fact is about: the user, the assistant, or a named person, folded for comparison.

Kept apart from the reconciler (which imports dspy) so the harness's scorers can use the
engine's own rule without loading the model stack.
"""

from __future__ import annotations

import re

_USER = {"user", "the user", "current user", "用户", "当前用户"}
_ASSISTANT = {"assistant", "the assistant", "ai", "agent", "助手", "ai助手"}


def canonical_subject(subject: str | None) -> str:
    """`user`, `assistant`, or the person's name folded for comparison."""
    text = re.sub(r"\s+", " ", (subject or "").strip()).casefold()
    if text in _USER:
        return "user"
    if text in _ASSISTANT:
        return "assistant"
    return text


def same_subject(a: str | None, b: str | None) -> bool:
    return canonical_subject(a) == canonical_subject(b)
