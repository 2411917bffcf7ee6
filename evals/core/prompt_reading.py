"""The prompt as the model saw it, read back by the harness's own reader (the checks are `evals.check.prompt_contract`).

Why a reader of its own: a renderer bug that its own parser shares (a tool name as a speaker, a dropped
name line, an unescaped line a model would read as a new speaker) is invisible to that parser. This
module reads the case's raw messages and the prompt text independently of `hymem.render` and checks the
multi-speaker spec (shared/spec/multi-speaker.md):

- one header per message: ``[user]`` (even when named), ``[Name]`` for a named human on role=assistant,
  ``[assistant]`` for the AI, ``[system]`` / ``[tool]`` (a tool's name is never a speaker label);
- the user's name line (``The user's name is Tim`` / ``用户名叫Tim``) exactly once, first, in the
  conversation's language, iff a role=user message has a name;
- no content line that a reader splitting lines as ``str.splitlines()`` does would take for a header or
  a name line.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

NAME_LINE = {"en": "The user's name is ", "zh": "用户名叫"}  # the spec's name lines, by language
NAME_STARTS = tuple(prefix.rstrip() for prefix in NAME_LINE.values())
_HEADER = re.compile(r"\[([^\]\n]{1,64})\]: ")
_FIELD = re.compile(r"\[\[ ## (conversation|trajectory) ## \]\]\n")
_TAILS = ("\n\nRespond with a JSON object", "\n\nRespond with the corresponding output fields")
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system", "tool": "tool",
          "function": "tool"}
_PLACEHOLDERS = {"image_url": "[image]", "image": "[image]", "input_image": "[image]", "input_audio": "[audio]",
                 "audio": "[audio]", "file": "[file]", "input_file": "[file]", "document": "[file]"}
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+")


class Said(BaseModel):
    """One message as the case gave it, read by the harness: role, speaker or tool name, text."""

    role: str  # user | assistant | system | tool
    name: str | None = None
    content: str = ""


# ---- the case's messages --------------------------------------------------------------------------------


def read_messages(raw_messages: list[dict[str, Any]]) -> list[Said]:
    """OpenAI/Anthropic-style messages as the spec describes them (tool results split out, calls as text)."""
    calls: dict[str, str] = {}
    out: list[Said] = []
    for raw in raw_messages:
        role = _ROLES.get(str(raw.get("role")), "user")
        if role == "tool":
            name = _clean(raw.get("name")) or calls.get(str(raw.get("tool_call_id")))
            out.append(Said(role="tool", name=name, content=_plain(raw.get("content"))))
            continue
        name = _clean(raw.get("name"))
        if name is not None and name.lower() == role:
            name = None
        pieces: list[str] = []
        content = raw.get("content")
        for part in [content] if isinstance(content, str) else content or []:
            if isinstance(part, str):
                pieces.append(part)
                continue
            kind = part.get("type")
            if kind in ("text", "input_text", "output_text"):
                pieces.append(part.get("text") or "")
            elif kind == "refusal":
                pieces.append(part.get("refusal") or "")
            elif kind in ("thinking", "redacted_thinking"):
                continue
            elif kind == "tool_use":
                calls[str(part.get("id"))] = str(part.get("name"))
                pieces.append(_call(part.get("name"), part.get("input")))
            elif kind == "tool_result":
                _flush(out, pieces, role, name)
                text = _plain(part.get("content"))
                if part.get("is_error"):
                    text = f"error: {text}" if text else "error"
                out.append(Said(role="tool", name=calls.get(str(part.get("tool_use_id"))), content=text))
            else:
                pieces.append(_PLACEHOLDERS.get(kind, f"[{kind}]"))
        for call in raw.get("tool_calls") or []:
            spec = call.get("function") or call.get("custom") or {}
            calls[str(call.get("id"))] = str(spec.get("name"))
            pieces.append(_call(spec.get("name"), spec.get("arguments") if "function" in call else None,
                                verbatim=spec.get("input") if "custom" in call else None))
        if raw.get("function_call"):
            pieces.append(_call(raw["function_call"].get("name"), raw["function_call"].get("arguments")))
        _flush(out, pieces, role, name)
    return out


def _clean(name: Any) -> str | None:
    return name.strip() or None if isinstance(name, str) else None


def _plain(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = [p if isinstance(p, str) else p.get("text") or _PLACEHOLDERS.get(p.get("type"), f"[{p.get('type')}]")
             for p in content]
    return "\n".join(p for p in parts if p)


def _call(name: Any, arguments: Any, verbatim: Any = None) -> str:
    if verbatim is not None:
        return f"called {name}({verbatim})"
    if arguments in (None, ""):
        return f"called {name}()"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return f"called {name}({arguments})"
    return f"called {name}({json.dumps(arguments, ensure_ascii=False, default=str)})"


def _flush(out: list[Said], pieces: list[str], role: str, name: str | None) -> None:
    text = "\n".join(p for p in pieces if p)
    if text.strip():
        out.append(Said(role=role, name=name, content=text))
    pieces.clear()


def label_of(message: Said) -> str:
    """The spec's speaker label: the role, except a named human (role=assistant with a name)."""
    if message.role == "assistant" and message.name and message.name.lower() != "assistant":
        return message.name
    return message.role


def user_name(messages: list[Said]) -> str | None:
    return next((m.name for m in messages if m.role == "user" and m.name), None)


def languages(messages: list[Said]) -> set[str]:
    """The name line languages the spec allows: the clear majority script of what people said, or both."""
    spoken = "\n".join(m.content for m in messages if m.role in ("user", "assistant")) or \
        "\n".join(m.content for m in messages)
    han, latin = len(_HAN.findall(spoken)), len(_LATIN_WORD.findall(spoken))
    if han > 2 * latin:
        return {"zh"}
    if latin > 2 * han:
        return {"en"}
    return {"zh", "en"}


# ---- the prompt ------------------------------------------------------------------------------------------


def conversation_of(prompt: str) -> str | None:
    """The rendered conversation (or trajectory) input field of an extraction prompt, else None."""
    head = _FIELD.search(prompt)
    if head is None:
        return None
    body = prompt[head.end():]
    cuts = [body.rfind(tail) for tail in _TAILS if body.rfind(tail) >= 0]
    return body[: min(cuts)] if cuts else body


def structure(text: str) -> list[tuple[str, str, int, str]]:
    """(kind, value, line number, line) for every line a str.splitlines() reader takes for a header or name line."""
    found = []
    for number, line in enumerate(text.splitlines()):
        if line.startswith(NAME_STARTS):
            found.append(("name", line, number, line))
        elif match := _HEADER.match(line):
            found.append(("header", match.group(1), number, line))
    return found


def section_json(text: str, name: str, until: str) -> Any:
    """The JSON of a DSPy prompt's `[[ ## name ## ]]` section (up to `until`), or None when absent or not JSON."""
    head = f"[[ ## {name} ## ]]\n"
    start = text.find(head)
    if start < 0:
        return None
    body = text[start + len(head):]
    end = body.find(until)
    try:
        return json.loads(body[:end] if end >= 0 else body)
    except ValueError:
        return None


__all__ = ["NAME_LINE", "Said", "conversation_of", "label_of", "languages", "read_messages", "section_json",
           "user_name"]
