"""Prompt in, reply out: read the adapter-formatted user message and answer it in the adapter's format.

Why apart: the rules in the other modules never see DSPy's prompt syntax; this module alone knows the
`[[ ## field ## ]]` sections and JSONAdapter's and ChatAdapter's closing instructions.

Which task a prompt is (extract, extract working, reconcile) is the call site the engine names
(`hymem.current_call_site()` in process, the `X-Hymem-Call-Site` header over HTTP): the fields are then
read for that task, and a prompt that lacks them is refused. Only a caller that names no site (a DSPy
program sending to `hymem-eval serve`) leaves the model to tell the task from the prompt's first input
field, as any model reads its prompt.
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


_SITE_FIELD = {"lm.extract": "conversation", "lm.extract_working": "trajectory", "lm.reconcile": "new_facts"}


def _prompt_fields(text: str, site: str | None = None) -> tuple[dict[str, str], bool]:
    """The input fields of one adapter-formatted user message, and whether it asks for ChatAdapter's format.

    `site`: the call site the engine named; its task's first field must open the message.
    """
    if site is not None and site not in _SITE_FIELD:
        raise ValueError(f"offline model: no task for call site {site!r}")
    chat = False
    if tail := _JSON_TAIL.search(text):
        text = text[: tail.start()]
    elif tail := _CHAT_TAIL.search(text):
        text, chat = text[: tail.start()], True
    head = _HEADER.match(text)
    if head is None:
        raise ValueError("offline model: the last user message has no [[ ## field ## ]] section")
    name, body = head.group(1), text[head.end() :]
    if site is not None and name != _SITE_FIELD[site]:
        raise ValueError(f"offline model: a {site} prompt must open with {_SITE_FIELD[site]!r}, not {name!r}")
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


def answer(text: str, site: str | None = None) -> str:
    """The reply to one adapter-formatted user message (the whole model, minus the DSPy plumbing).

    `site`: the call site the engine named for this call (None: tell the task from the prompt).
    """
    fields, chat = _prompt_fields(text, site)
    if "conversation" in fields:
        values = extract_facts(fields["conversation"])
    elif "trajectory" in fields:
        values = extract_working(fields["trajectory"])
    else:
        values = reconcile_facts(fields["new_facts"], fields["existing"])
    return _format_reply(values, chat)
