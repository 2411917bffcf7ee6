"""The conversation text format: render ChatMessages for the model and parse L1 history back.

One format serves the extraction prompt and L1_RAW, so it must be unambiguous both ways:

- every message is ``[label]: content``; labels are ``[user]`` (the current user, even when named),
  ``[Name]`` (a named human on role=assistant), ``[assistant]`` (the AI), ``[system]`` and ``[tool]``;
- a tool message with a tool name renders as ``[tool]: (search) content`` -- the tool name is context,
  never a speaker label;
- when a role=user message carries a name, one name line opens the block (``The user's name is Tim`` or
  ``用户名叫Tim``, chosen by :func:`detect_language`);
- continuation lines belong to the message above them. Lines are split on ``"\\n"`` only.

Escaping (so content can never forge a message or a name line): a content line is prefixed with one
backslash when it starts with a backslash, starts with ``The user's name is`` or ``用户名叫``, or matches
``^\\[[^\\]\\n]{1,64}\\]: ``; the first line of a tool message is also escaped when it starts with ``(``.
Parsing strips one leading backslash from every content line that has one, so any content round-trips.
"""

from __future__ import annotations

import re
from typing import Literal

from hymem.models import ChatMessage

MAX_NAME_CHARS = 64  # longest speaker or tool name the label syntax carries
RESERVED_LABELS = frozenset({"user", "assistant", "system", "tool"})  # labels that are roles, not names
NAME_LINES = {"en": "The user's name is ", "zh": "用户名叫"}  # language -> name-line prefix

_LABEL_RE = re.compile(r"\[([^\]\n]{1,64})\]: ")
_TOOL_NAME_RE = re.compile(r"\(([^()\n]{1,64})\) ")
_NAME_LINE_STARTS = tuple(prefix.rstrip() for prefix in NAME_LINES.values())
_ESCAPE = "\\"
_HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
_LATIN_WORD_RE = re.compile(r"[A-Za-z\u00c0-\u024f]+")


class HistoryParseError(ValueError):
    """L1 history text that no renderer wrote: text before the first speaker label."""

    def __init__(self, line: int, problem: str) -> None:
        self.line = line  # 1-based line number in the raw history
        super().__init__(f"history line {line}: {problem}")


def detect_language(text: str) -> Literal["zh", "en"]:
    """Return "zh" when Han characters outnumber Latin words, else "en".

    A Han character carries about a word, so counting Latin *letters* would call
    "我在 Stripe 工作。" English; words against characters gets it right.
    """
    han = len(_HAN_RE.findall(text))
    return "zh" if han > len(_LATIN_WORD_RE.findall(text)) else "en"


def conversation_language(messages: list[ChatMessage]) -> Literal["zh", "en"]:
    """The language of what the people said; system prompts and tool JSON count only when nothing else exists."""
    spoken = [m.content for m in messages if m.role in ("user", "assistant")]
    return detect_language("\n".join(spoken or [m.content for m in messages]))


def name_problem(role: str, name: str) -> str | None:
    """Why `name` cannot be rendered for `role` (None if it can); shared with input validation."""
    if len(name) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    if len(name.splitlines()) > 1:
        return "contains a line break"
    if role == "tool":
        if "(" in name or ")" in name:
            return "a tool name cannot contain parentheses"
        return None
    if "]" in name:
        return "contains ']'"
    if role == "assistant" and name.lower() in RESERVED_LABELS - {"assistant"}:
        return f"{name!r} is a reserved speaker label"
    return None


def user_name_line(name: str, language: Literal["zh", "en"]) -> str:
    """The block's opening line naming the current user."""
    return NAME_LINES[language] + name


def render_conversation(messages: list[ChatMessage]) -> str:
    """Render messages in the spec's speaker format (see the module docstring)."""
    lines: list[str] = []
    user_names = list(dict.fromkeys(m.name.strip() for m in messages if m.role == "user" and m.name and m.name.strip()))
    if len(user_names) > 1:
        raise ValueError(f"cannot render two current-user names in one conversation: {user_names}")
    user_name = user_names[0] if user_names else None
    if user_name is not None:
        _require_renderable("user", user_name)
        lines.append(user_name_line(user_name, conversation_language(messages)))
    lines.extend(_render_message(message) for message in messages)
    return "\n".join(lines)


def render_working(messages: list[ChatMessage]) -> str:
    """Render a working/coding trajectory; the same format keeps one parser for all of L1."""
    return render_conversation(messages)


def parse_history(raw: str, history_limit: int = 2000) -> list[ChatMessage]:
    """Parse rendered conversations (joined with "\\n") back into messages, oldest first.

    Name lines are not messages: the name goes onto the role=user messages after it (until the next
    name line). Every message except role=user is cut to `history_limit` characters plus "…": the
    user's own words are the evidence, everyone else's are context.
    """
    if history_limit < 1:
        raise ValueError(f"history_limit must be at least 1, got {history_limit}")
    out: list[ChatMessage] = []
    user_name: str | None = None
    current: tuple[str, list[str]] | None = None  # (label, raw body lines)
    for number, line in enumerate(raw.split("\n"), start=1):
        label_match = None if line.startswith(_ESCAPE) else _LABEL_RE.match(line)
        if not line.startswith(_ESCAPE) and line.startswith(_NAME_LINE_STARTS):
            if current is not None:
                out.append(_finish(current, user_name, history_limit))
                current = None
            user_name = _name_from_line(line)
        elif label_match is not None:
            if current is not None:
                out.append(_finish(current, user_name, history_limit))
            current = (label_match.group(1), [line[label_match.end() :]])
        elif current is not None:
            current[1].append(line)
        elif line.strip():
            raise HistoryParseError(number, "text before the first speaker label")
    if current is not None:
        out.append(_finish(current, user_name, history_limit))
    return out


def _require_renderable(role: str, name: str) -> None:
    problem = name_problem(role, name)
    if problem is not None:
        raise ValueError(f"cannot render {role} name {name!r}: {problem}")


def _label(message: ChatMessage) -> str:
    if message.role != "assistant":
        return message.role
    name = (message.name or "").strip()
    if not name or name.lower() == "assistant":
        return "assistant"
    _require_renderable("assistant", name)
    return name


def _escape(line: str) -> str:
    needs = line.startswith(_ESCAPE) or line.startswith(_NAME_LINE_STARTS) or _LABEL_RE.match(line)
    return _ESCAPE + line if needs else line


def _unescape(line: str) -> str:
    return line[1:] if line.startswith(_ESCAPE) else line


def _render_message(message: ChatMessage) -> str:
    body = [_escape(line) for line in message.content.split("\n")]
    if message.role == "tool":
        if body[0].startswith("("):
            body[0] = _ESCAPE + body[0]
        tool_name = (message.name or "").strip()
        if tool_name:
            _require_renderable("tool", tool_name)
            body[0] = f"({tool_name}) {body[0]}"
    return f"[{_label(message)}]: " + "\n".join(body)


def _name_from_line(line: str) -> str | None:
    prefix = next(start for start in _NAME_LINE_STARTS if line.startswith(start))
    return line[len(prefix) :].strip() or None


def _finish(current: tuple[str, list[str]], user_name: str | None, history_limit: int) -> ChatMessage:
    label, body = current
    role = label.lower() if label.lower() in RESERVED_LABELS else "assistant"
    name: str | None = None
    if role == "user":
        name = user_name
    elif role == "assistant" and label.lower() != "assistant":
        name = label
    elif role == "tool":
        tool_match = _TOOL_NAME_RE.match(body[0])
        if tool_match is not None:
            name = tool_match.group(1)
            body = [body[0][tool_match.end() :], *body[1:]]
    content = "\n".join(_unescape(line) for line in body)
    if role != "user" and len(content) > history_limit:
        content = content[:history_limit] + "…"
    return ChatMessage(role=role, name=name, content=content)
