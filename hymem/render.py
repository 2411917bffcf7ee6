"""The conversation text format: render ChatMessages for the model and parse L1 history back.

One format serves the extraction prompt and L1_RAW, so it must be unambiguous both ways:

- every message is ``[label]: content``; labels are ``[user]`` (the current user, even when named),
  ``[Name]`` (a named human on role=assistant), ``[assistant]`` (the AI), ``[system]`` and ``[tool]``;
- a tool message with a tool name renders as ``[tool]: (search) content`` -- the tool name is context,
  never a speaker label;
- when a role=user message carries a name, one name line opens the block (``The user's name is Tim`` or
  ``用户名叫Tim``, chosen by :func:`detect_language`);
- continuation lines belong to the message above them. The renderer joins lines with ``"\\n"``; the
  parser splits on ``"\\n"`` only.

Escaping, so that content can forge neither a message nor a name line -- for this parser and for any
lenient reader (a model, or code that splits like ``str.splitlines()`` and reads ``[John]:text`` as a
label): content is cut into segments at every line boundary ``str.splitlines()`` knows (``\\n``, ``\\r``,
``\\r\\n``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, U+0085, U+2028, U+2029), and a segment gets one leading
backslash when it starts with a backslash or *reads like* a label or a name line: after Unicode
compatibility folding (NFKC: full-width brackets and colons), dropping invisible format characters and
leading whitespace, it starts with a bracketed label and a colon (space or not, ``【John】：`` too) or a role word and a
colon (``user:``), or
with a name-line variant (``The user’s name is``, ``user name``, ``The user is called``, ``用户名叫``,
``用户的名字是``, ``用戶名叫`` ...). The first segment of a tool message is also escaped when it starts
with ``(``. Parsing strips one leading backslash from every segment that has one, so any content
round-trips exactly.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal, cast

from hymem.models import ChatMessage, Role
from hymem.subjects import canonical_subject

MAX_NAME_CHARS = 64  # longest speaker or tool name the label syntax carries
RESERVED_LABELS = frozenset({"user", "assistant", "system", "tool"})  # labels that are roles, not names
NAME_LINES = {"en": "The user's name is ", "zh": "用户名叫"}  # language -> name-line prefix

_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # every line boundary of str.splitlines()
_LABEL_RE = re.compile(f"\\[([^\\]{_BREAKS}]{{1,64}})\\]: ")
# Line boundaries of str.splitlines(), "\r\n" first so that it stays one boundary; a capture keeps them.
_BREAK_RE = re.compile(f"(\r\n|[{_BREAKS}])")
# Unicode's invisible format characters (category Cf: zero-width space, BOM, bidi controls, tags, ...).
_FORMAT_CHARS = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
                 "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
                 "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
_FORMAT_RE = re.compile(f"[{_FORMAT_CHARS}]")
# Where a stripped line can begin: not blank, not an invisible format character.
_VISIBLE_RE = re.compile(f"[^\\s{_FORMAT_CHARS}]")
_LOOKAHEAD = 200  # characters of a line enough to judge whether it reads as a label or a name line
# What a lenient reader takes for a label: any bracketed text, then a colon (space or not); or a role word
# and a colon without brackets ("user: ...").
_LOOKS_LIKE_LABEL = re.compile(r"[\[【〔〖][^\]】〕〗]{0,128}[\]】〕〗]\s*[:：]|(?:user|assistant|system|tool|用户|助手)\s*[:：]",
                               re.IGNORECASE)
_CLOSING_BRACKETS = "]】〕〗"
# ... and for a name line, on the folded text: "the user's name", "username", "the user is called", 用户名叫 ...
_LOOKS_LIKE_NAME_LINE_EN = re.compile(r"(?:the\s*)?(?:current\s*)?user[^.\n]{0,16}?(?:name|called)")
_LOOKS_LIKE_NAME_LINE_ZH = re.compile(r"(?:当前)?(?:用户|用戶|使用者)的?(?:名字|姓名|名称|名稱|名|叫|称呼|稱呼)")
_APOSTROPHES = str.maketrans(dict.fromkeys("\u2018\u2019\u201a\u201b\u02bc\u02bb\u0060\u00b4\u2032\uff07", "'"))
_TOOL_NAME_RE = re.compile(f"\\(([^(){_BREAKS}]{{1,64}})\\) ")
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
    view = reader_view(name).strip()
    if any(bracket in view for bracket in _CLOSING_BRACKETS):
        return "contains a closing bracket (']')"
    if role == "assistant" and view.casefold() in RESERVED_LABELS and name.lower() != "assistant":
        return f"{name!r} reads as the reserved speaker label [{view.casefold()}]"
    if role == "assistant" and name.lower() != "assistant" and (who := canonical_subject(view)) in ("user", "assistant"):
        # the subject rules would file this person's facts as the user's or the AI's, and let reconcile merge them
        return (f"{name!r} names {'the current user' if who == 'user' else 'the AI assistant'}, not another person"
                " (give the person's own name)")
    return None


def reader_view(text: str) -> str:
    """`text` as a lenient reader sees it: compatibility-folded (NFKC), invisible format characters dropped."""
    if text.isascii():
        return text
    return _FORMAT_RE.sub("", unicodedata.normalize("NFKC", text))


def _view_is_name_line(view: str) -> bool:
    low = view.casefold().translate(_APOSTROPHES)
    return bool(_LOOKS_LIKE_NAME_LINE_EN.match(low) or _LOOKS_LIKE_NAME_LINE_ZH.match(re.sub(r"\s+", "", low[:64])))


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


def _escape_content(content: str, tool: bool) -> str:
    """Escape every segment of `content` between line boundaries (see the module docstring).

    A segment is judged by the text from its start to the next "\\n", so a label or name line that spans
    a boundary ("[a\\rb]: x") is caught for a reader that splits on "\\n" only, too.
    """
    pieces = _BREAK_RE.split(content)  # segment, boundary, segment, ...: segments at even positions
    folded = reader_view(content).casefold()
    # No colon and no name word anywhere: no segment can read as a header (a cheap pass over long content).
    judge = any(mark in folded for mark in (":", "：", "name", "called", "用"))
    visible = _NextVisible(content)
    start = 0
    for i, piece in enumerate(pieces):
        if i % 2 == 0 and (piece.startswith(_ESCAPE) or (tool and i == 0 and piece.startswith("("))
                           or (judge and _reads_as_header(content, start, visible))):
            pieces[i] = _ESCAPE + piece
        start += len(piece)
    return "".join(pieces)


class _NextVisible:
    """Where a reader's stripped line can begin: the first visible character at or after a position, for
    positions asked in increasing order. One forward search per visible character found, so a content's
    segments cost one pass over it in all, not a list of every visible character's position (a 100,000-character
    message is 100,000 positions)."""

    def __init__(self, content: str) -> None:
        self.content = content
        self.found = -1  # the last answer: no visible character lies between the position asked then and it

    def at_or_after(self, start: int) -> int:
        """The first visible character's position at or after `start`; len(content) when there is none."""
        if self.found < start:
            match = _VISIBLE_RE.search(self.content, start)
            self.found = match.start() if match is not None else len(self.content)
        return self.found


def _reads_as_header(content: str, start: int, visible: _NextVisible) -> bool:
    """Whether the line a reader sees from `start` (to the next "\\n", leading blanks skipped) reads as a
    label or a name line."""
    end = content.find("\n", start)
    end = len(content) if end < 0 else end
    first = visible.at_or_after(start)
    if first >= end:
        return False
    view = reader_view(content[first : min(end, first + _LOOKAHEAD)]).lstrip()
    return _LOOKS_LIKE_LABEL.match(view) is not None or _view_is_name_line(view)


def _unescape_content(content: str) -> str:
    pieces = _BREAK_RE.split(content)
    for i in range(0, len(pieces), 2):
        if pieces[i].startswith(_ESCAPE):
            pieces[i] = pieces[i][1:]
    return "".join(pieces)


def _render_message(message: ChatMessage) -> str:
    body = _escape_content(message.content, tool=message.role == "tool")
    if message.role == "tool":
        tool_name = (message.name or "").strip()
        if tool_name:
            _require_renderable("tool", tool_name)
            body = f"({tool_name}) {body}"
    return f"[{_label(message)}]: " + body


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
    content = _unescape_content("\n".join(body))
    if role != "user" and len(content) > history_limit:
        content = content[:history_limit] + "…"
    return ChatMessage(role=cast(Role, role), name=name, content=content)  # a reserved label or "assistant"
