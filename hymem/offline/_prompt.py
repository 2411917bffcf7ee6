"""Prompt in, reply out: read the adapter-formatted user message and answer it in the adapter's format.

Why apart: the rules in the other modules never see DSPy's prompt syntax; this module alone knows the
`[[ ## field ## ]]` sections, JSONAdapter's and ChatAdapter's closing instructions, and which signature a prompt is for.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hymem.offline._chat import extract_facts
from hymem.offline._reconcile import reconcile_facts
from hymem.offline._working import extract_working

_HEADER = re.compile(r"^\[\[ ## (\w+) ## \]\]\n?")
_JSON_TAIL = re.compile(r"\n*Respond with a JSON object in the following order of fields:[^\n]*\Z")
_CHAT_TAIL = re.compile(r"\n*Respond with the corresponding output fields, starting with the field[^\n]*\Z")
_EXISTING = re.compile(r"\n\[\[ ## existing ## \]\]\n?")


def _prompt_fields(text: str) -> tuple[dict[str, str], bool]:
    """The input fields of one adapter-formatted user message, and whether it asks for ChatAdapter's format."""
    chat = False
    if tail := _JSON_TAIL.search(text):
        text = text[: tail.start()]
    elif tail := _CHAT_TAIL.search(text):
        text, chat = text[: tail.start()], True
    head = _HEADER.match(text)
    if head is None:
        raise ValueError("offline model: the last user message has no [[ ## field ## ]] section")
    name, body = head.group(1), text[head.end() :]
    if name in ("conversation", "trajectory"):
        return {name: body.strip("\n")}, chat
    if name == "new_facts" and (split := _EXISTING.search(body)):
        return {"new_facts": body[: split.start()].strip(), "existing": body[split.end() :].strip()}, chat
    raise ValueError(f"offline model: unknown task (first input field {name!r})")


def _format_reply(values: dict[str, Any], chat: bool) -> str:
    if not chat:
        return json.dumps(values, ensure_ascii=False, indent=2)
    parts = [f"[[ ## {k} ## ]]\n{json.dumps(v, ensure_ascii=False)}" for k, v in values.items()]
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


def answer(text: str) -> str:
    """The reply to one adapter-formatted user message (the whole model, minus the DSPy plumbing)."""
    fields, chat = _prompt_fields(text)
    if "conversation" in fields:
        values = extract_facts(fields["conversation"])
    elif "trajectory" in fields:
        values = extract_working(fields["trajectory"])
    else:
        values = reconcile_facts(fields["new_facts"], fields["existing"])
    return _format_reply(values, chat)
