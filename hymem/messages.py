"""Turn OpenAI- or Anthropic-style chat messages into ChatMessage records.

The renderer and L1 history only understand ChatMessage, so every input style is mapped here once.
Bad input fails loudly, naming the message index and field, so a caller can fix the exact element.

Mapping rules (multi-speaker.md section 1):

- roles: user, assistant, system, tool; ``function`` -> tool and ``developer`` -> system;
- names of user/assistant/system are speaker names, kept exactly (whitespace stripped; empty -> None;
  a name equal to its own role, e.g. AutoGen's ``name="assistant"`` on the AI, -> None);
- a role=tool (or function) ``name`` is the tool name; when absent it is looked up by ``tool_call_id``
  / ``tool_use_id`` among the calls seen earlier in the list;
- tool calls (OpenAI ``tool_calls`` / ``function_call``, Anthropic ``tool_use``) become text lines
  ``called NAME({json})``; images, audio and files become ``[image]``, ``[audio]``, ``[file]``
  placeholders; thinking blocks are skipped; unknown block types become ``[type]``;
- Anthropic ``tool_result`` blocks become role=tool messages, split out in order from the text around
  them (a message of only tool results is only tool messages); ``is_error`` results read ``error: ...``;
- tool messages may have empty content (a tool can return nothing); every other message needs text or
  a tool call;
- role=user is one person, the current user: two different role=user names in one list are refused;
- text must be valid Unicode (a lone surrogate is refused), and sizes may be capped (`max_message_chars`,
  `max_write_chars`). Every refusal is a `MessageValidationError` (an `InputValidationError`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Literal, cast, overload

from pydantic import BaseModel

from hymem.models import ChatMessage, Role
from hymem.render import name_problem
from hymem.validation import InputValidationError, size_problem, surrogate_problem

_ROLES = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
}
_TEXT_TYPES = frozenset({"text", "input_text", "output_text"})
_SKIPPED_TYPES = frozenset({"thinking", "redacted_thinking"})
_PLACEHOLDERS = {
    "image_url": "[image]",
    "image": "[image]",
    "input_image": "[image]",
    "input_audio": "[audio]",
    "audio": "[audio]",
    "file": "[file]",
    "input_file": "[file]",
    "document": "[file]",
}
_MESSAGE_ATTRS = ("role", "content", "name", "tool_calls", "tool_call_id", "function_call")


class MessageValidationError(InputValidationError):
    """Messages the engine cannot read; `index` and `field` point at the offending element (argument "messages")."""

    def __init__(self, index: int | None, field: str | None, problem: str) -> None:
        # index: position in the messages list, None when the list itself is wrong;
        # field: e.g. "role", "content[2].text", None when the whole element is wrong
        super().__init__("messages", problem, index=index, field=field)


def normalize_messages(messages: list, *, max_message_chars: int | None = None,
                       max_write_chars: int | None = None) -> list[ChatMessage]:
    """Map a list of OpenAI/Anthropic-style messages (dicts, models or objects) to ChatMessages, in order.

    A message's size is the characters of the text it maps to (tool results and calls included); over
    `max_message_chars`, or all messages over `max_write_chars`, the list is refused (None: no limit).
    """
    if not isinstance(messages, list):
        raise MessageValidationError(None, None, f"expected a list of messages, got {type(messages).__name__}")
    if not messages:
        raise MessageValidationError(None, None, "empty list: there is nothing to remember")
    tool_names: dict[str, str] = {}  # tool call id -> tool name, filled as calls are seen
    out: list[ChatMessage] = []
    user_name: tuple[int, str] | None = None  # (index, name) of the first named role=user message
    total = 0
    for index, raw in enumerate(messages):
        produced = _normalize_one(index, _message_dict(index, raw), tool_names)
        size = sum(len(m.content) for m in produced)
        if max_message_chars is not None and size > max_message_chars:
            raise MessageValidationError(index, "content", size_problem(size, max_message_chars, "max_message_chars"))
        total += size
        if max_write_chars is not None and total > max_write_chars:
            raise MessageValidationError(None, None, f"{size_problem(total, max_write_chars, 'max_write_chars')}"
                                                     f" by messages[{index}]")
        for message in produced:
            _check_unicode(index, message)
            if message.role == "user" and message.name is not None:
                if user_name is None:
                    user_name = (index, message.name)
                elif message.name != user_name[1]:
                    raise MessageValidationError(index, "name", (
                        f"role=user is the one current user, named {user_name[1]!r} at messages[{user_name[0]}];"
                        f" another user name {message.name!r} is ambiguous (send another speaker as"
                        " role=assistant with a name)"))
            out.append(message)
    return out


def _check_unicode(index: int, message: ChatMessage) -> None:
    """The last net under the field-precise checks: nothing that is not valid Unicode reaches the model."""
    for field, text in (("name", message.name), ("content", message.content)):
        problem = surrogate_problem(text) if text else None
        if problem is not None:
            raise MessageValidationError(index, field, problem)


def _text(index: int, field: str, text: str) -> str:
    problem = surrogate_problem(text)
    if problem is not None:
        raise MessageValidationError(index, field, problem)
    return text


def _message_dict(index: int, raw: Any) -> dict[str, Any]:
    as_dict = _as_dict(raw)
    if as_dict is not None:
        return as_dict
    if hasattr(raw, "role") and hasattr(raw, "content"):
        return {attr: getattr(raw, attr) for attr in _MESSAGE_ATTRS if hasattr(raw, attr)}
    raise MessageValidationError(index, None, f"expected a message dict, got {type(raw).__name__}")


def _as_dict(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, BaseModel):
        return raw.model_dump()
    if dataclasses.is_dataclass(raw) and not isinstance(raw, type):
        return dataclasses.asdict(raw)
    return None


def _part_dict(index: int, field: str, raw: Any) -> dict[str, Any]:
    if raw is None:
        raise MessageValidationError(index, field, "missing")
    as_dict = _as_dict(raw)
    if as_dict is None:
        raise MessageValidationError(index, field, f"expected a dict, got {type(raw).__name__}")
    return as_dict


def _normalize_one(index: int, msg: dict[str, Any], tool_names: dict[str, str]) -> list[ChatMessage]:
    raw_role = msg.get("role")
    if raw_role is None:
        raise MessageValidationError(index, "role", "missing")
    if not isinstance(raw_role, str):
        raise MessageValidationError(index, "role", f"must be a string, got {type(raw_role).__name__}")
    if raw_role not in _ROLES:
        raise MessageValidationError(index, "role", f"unknown role {raw_role!r}")
    role = _ROLES[raw_role]
    if role == "tool":
        return [_tool_message(index, msg, tool_names)]
    name = _speaker_name(index, role, msg.get("name"))
    calls = _call_lines(index, msg, tool_names)
    content = msg.get("content")
    if content is None and not calls:
        raise MessageValidationError(index, "content", "missing (and no tool calls)")
    items: list[str | ChatMessage]
    if content is None:
        items = []
    elif isinstance(content, str):
        items = [_text(index, "content", content)]
    elif isinstance(content, list):
        items = _content_items(index, "content", content, tool_names)
    else:
        raise MessageValidationError(
            index, "content", f"must be a string or a list of content parts, got {type(content).__name__}"
        )
    out: list[ChatMessage] = []
    pieces: list[str] = []
    for item in [*items, *calls]:
        if isinstance(item, ChatMessage):
            _flush(out, pieces, role, name)
            out.append(item)
        else:
            pieces.append(item)
    _flush(out, pieces, role, name)
    if not out:
        raise MessageValidationError(index, "content", "empty: no text, tool call or tool result")
    return out


def _flush(out: list[ChatMessage], pieces: list[str], role: str, name: str | None) -> None:
    text = "\n".join(piece for piece in pieces if piece)
    if text.strip():
        out.append(ChatMessage(role=cast(Role, role), name=name, content=text))  # callers pass a checked role
    pieces.clear()


def _speaker_name(index: int, role: str, raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise MessageValidationError(index, "name", f"must be a string, got {type(raw).__name__}")
    name = _text(index, "name", raw).strip()
    if not name or name.lower() == role:
        return None
    problem = name_problem(role, name)
    if problem is not None:
        raise MessageValidationError(index, "name", problem)
    return name


@overload
def _tool_name(index: int, field: str, raw: Any, required: Literal[True]) -> str: ...
@overload
def _tool_name(index: int, field: str, raw: Any, required: bool) -> str | None: ...
def _tool_name(index: int, field: str, raw: Any, required: bool) -> str | None:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        if required:
            raise MessageValidationError(index, field, "missing tool name")
        return None
    if not isinstance(raw, str):
        raise MessageValidationError(index, field, f"must be a string, got {type(raw).__name__}")
    name = _text(index, field, raw).strip()
    problem = name_problem("tool", name)
    if problem is not None:
        raise MessageValidationError(index, field, problem)
    return name


def _call_id(index: int, field: str, raw: Any) -> str | None:
    if raw is not None and not isinstance(raw, str):
        raise MessageValidationError(index, field, f"must be a string, got {type(raw).__name__}")
    return raw


def _call_text(name: str, arguments: Any) -> str:
    """`called search({"q": "x"})`: JSON arguments re-serialised, anything unparseable kept verbatim."""
    if arguments is None or arguments == "":
        return f"called {name}()"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return f"called {name}({arguments})"
    return f"called {name}({json.dumps(arguments, ensure_ascii=False, default=str)})"


def _call_lines(index: int, msg: dict[str, Any], tool_names: dict[str, str]) -> list[str]:
    lines: list[str] = []
    tool_calls = msg.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            raise MessageValidationError(index, "tool_calls", f"must be a list, got {type(tool_calls).__name__}")
        for k, raw_call in enumerate(tool_calls):
            call = _part_dict(index, f"tool_calls[{k}]", raw_call)
            kind = "custom" if call.get("custom") is not None else "function"
            spec = _part_dict(index, f"tool_calls[{k}].{kind}", call.get(kind))
            name = _tool_name(index, f"tool_calls[{k}].{kind}.name", spec.get("name"), required=True)
            call_id = _call_id(index, f"tool_calls[{k}].id", call.get("id"))
            if call_id is not None:
                tool_names[call_id] = name
            if kind == "custom":  # free-text input, not JSON: keep it verbatim
                line = f"called {name}({spec.get('input') or ''})"
            else:
                line = _call_text(name, spec.get("arguments"))
            lines.append(_text(index, f"tool_calls[{k}].{kind}", line))
    function_call = msg.get("function_call")
    if function_call is not None:
        spec = _part_dict(index, "function_call", function_call)
        name = _tool_name(index, "function_call.name", spec.get("name"), required=True)
        lines.append(_text(index, "function_call", _call_text(name, spec.get("arguments"))))
    return lines


def _content_items(index: int, field: str, parts: list, tool_names: dict[str, str]) -> list[str | ChatMessage]:
    """Text pieces in order, with each tool_result turned into its own tool ChatMessage."""
    items: list[str | ChatMessage] = []
    for j, raw_part in enumerate(parts):
        where = f"{field}[{j}]"
        if isinstance(raw_part, str):
            items.append(_text(index, where, raw_part))
            continue
        part = _part_dict(index, where, raw_part)
        kind = part.get("type")
        if not isinstance(kind, str):
            problem = "missing" if kind is None else f"must be a string, got {type(kind).__name__}"
            raise MessageValidationError(index, f"{where}.type", problem)
        if kind in _TEXT_TYPES or kind == "refusal":
            key = "refusal" if kind == "refusal" else "text"
            text = part.get(key)
            if not isinstance(text, str):
                raise MessageValidationError(index, f"{where}.{key}", f"must be a string, got {type(text).__name__}")
            items.append(_text(index, f"{where}.{key}", text))
        elif kind in _SKIPPED_TYPES:
            continue
        elif kind == "tool_use":
            name = _tool_name(index, f"{where}.name", part.get("name"), required=True)
            call_id = _call_id(index, f"{where}.id", part.get("id"))
            if call_id is not None:
                tool_names[call_id] = name
            items.append(_text(index, f"{where}.input", _call_text(name, part.get("input"))))
        elif kind == "tool_result":
            items.append(_tool_result(index, where, part, tool_names))
        else:
            items.append(_PLACEHOLDERS.get(kind, f"[{kind}]"))
    return items


def _tool_result(index: int, where: str, part: dict[str, Any], tool_names: dict[str, str]) -> ChatMessage:
    call_id = _call_id(index, f"{where}.tool_use_id", part.get("tool_use_id"))
    text = _plain_text(index, f"{where}.content", part.get("content"), tool_names, allow_none=True)
    if part.get("is_error"):
        text = f"error: {text}" if text else "error"
    return ChatMessage(role="tool", name=tool_names.get(call_id) if call_id else None, content=text)


def _plain_text(index: int, field: str, content: Any, tool_names: dict[str, str], allow_none: bool) -> str:
    """Content that must be text only (tool output): a string or a list of text/placeholder parts."""
    if content is None:
        if allow_none:
            return ""
        raise MessageValidationError(index, field, "missing")
    if isinstance(content, str):
        return _text(index, field, content)
    if not isinstance(content, list):
        raise MessageValidationError(
            index, field, f"must be a string or a list of content parts, got {type(content).__name__}"
        )
    items = _content_items(index, field, content, tool_names)
    if any(isinstance(item, ChatMessage) for item in items):
        raise MessageValidationError(index, field, "a tool result cannot be nested in tool output")
    return "\n".join(item for item in items if isinstance(item, str) and item)


def _tool_message(index: int, msg: dict[str, Any], tool_names: dict[str, str]) -> ChatMessage:
    call_id = _call_id(index, "tool_call_id", msg.get("tool_call_id"))
    name = _tool_name(index, "name", msg.get("name"), required=False)
    if name is None and call_id is not None:
        name = tool_names.get(call_id)
    content = _plain_text(index, "content", msg.get("content"), tool_names, allow_none=False)
    return ChatMessage(role="tool", name=name, content=content)
