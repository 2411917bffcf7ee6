"""The prompt contract: what the model was shown, read back by the harness's own reader.

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

import difflib
import json
import re
from typing import Any

from pydantic import BaseModel

from evals.record import AnomalyKind, Witnessed

NAME_LINE = {"en": "The user's name is ", "zh": "用户名叫"}  # the spec's name lines, by language
_NAME_STARTS = tuple(prefix.rstrip() for prefix in NAME_LINE.values())
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


def _structure(text: str) -> list[tuple[str, str, int, str]]:
    """(kind, value, line number, line) for every line a str.splitlines() reader takes for a header or name line."""
    found = []
    for number, line in enumerate(text.splitlines()):
        if line.startswith(_NAME_STARTS):
            found.append(("name", line, number, line))
        elif match := _HEADER.match(line):
            found.append(("header", match.group(1), number, line))
    return found


def check_conversation(messages: list[Said], text: str) -> list[Witnessed]:
    """(kind, witness) for every way `text` breaks the prompt contract for `messages`."""
    name = user_name(messages)
    langs = languages(messages)
    expected: list[tuple[str, str]] = [("header", label_of(m)) for m in messages]
    if name is not None:
        expected.insert(0, ("name", name))
    actual = _structure(text)
    content_lines = {line for m in messages for line in m.content.splitlines()}
    found: list[Witnessed] = []

    def key(item: tuple[str, str, int, str]) -> tuple[str, str]:
        kind, value, _, line = item
        return (kind, _name_in(line) if kind == "name" else value)

    def show(item: tuple[str, str]) -> str:
        return f"The user's name is {item[1]}" if item[0] == "name" else f"[{item[1]}]: …"

    def extra(item: tuple[str, str, int, str]) -> None:
        kind, _, number, line = item
        if line in content_lines or any(line in c for c in content_lines):
            found.append((AnomalyKind.FORGED_HEADER, f"line {number + 1} {line[:120]!r} is message content a reader takes "
                                           f"for a {'name line' if kind == 'name' else 'speaker header'}"))
        elif kind == "name":
            found.append((AnomalyKind.NAME_LINE_WRONG, f"expected {'no name line' if name is None else 'one name line'}, "
                                             f"actual extra line {number + 1}: {line[:120]!r}"))
        else:
            found.append((AnomalyKind.PROMPT_LABEL_WRONG, f"expected no header here, actual line {number + 1}: {line[:120]!r}"))

    def missing(item: tuple[str, str]) -> None:
        kind = AnomalyKind.NAME_LINE_WRONG if item[0] == "name" else AnomalyKind.PROMPT_LABEL_WRONG
        found.append((kind, f"expected {show(item)!r}, actual: no such line"))

    matcher = difflib.SequenceMatcher(a=expected, b=[key(a) for a in actual], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op == "replace":
            for want, got in zip(expected[i1:i2], actual[j1:j2], strict=False):
                if want[0] == "name" or got[0] == "name":
                    found.append((AnomalyKind.NAME_LINE_WRONG, f"expected {show(want)!r}, actual line {got[2] + 1}: "
                                                     f"{got[3][:120]!r}"))
                else:
                    found.append((AnomalyKind.PROMPT_LABEL_WRONG, f"expected '[{want[1]}]: …', actual line {got[2] + 1}: "
                                                        f"{got[3][:120]!r}"))
            for want in expected[i1 + (j2 - j1):i2]:
                missing(want)
            for got in actual[j1 + (i2 - i1):j2]:
                extra(got)
        elif op == "delete":
            for want in expected[i1:i2]:
                missing(want)
        else:
            for got in actual[j1:j2]:
                extra(got)
    names = [a for a in actual if a[0] == "name" and _name_in(a[3]) == name]
    if name is not None and names:
        line = names[0][3]
        if names[0][2] != 0:
            found.append((AnomalyKind.NAME_LINE_WRONG, f"expected the name line first, actual line {names[0][2] + 1}: "
                                             f"{line[:120]!r}"))
        lang = "zh" if line.startswith(_NAME_STARTS[1]) else "en"
        if lang not in langs or line != NAME_LINE[lang] + name:
            wanted = " or ".join(repr(NAME_LINE[x] + name) for x in sorted(langs))
            found.append((AnomalyKind.NAME_LINE_WRONG,
                          f"expected {wanted}, actual line {names[0][2] + 1}: {line[:120]!r}"))
    return found


def _name_in(line: str) -> str:
    start = next(s for s in _NAME_STARTS if line.startswith(s))
    return line[len(start):].strip()


def check_prompts(raw_messages: list[dict[str, Any]], prompts: list[dict[str, str]], where: str
                  ) -> list[Witnessed]:
    """Check every extraction prompt of one write against the write's messages; witnesses name the call."""
    messages = read_messages(raw_messages)
    found: list[Witnessed] = []
    for number, prompt in enumerate(prompts):
        text = conversation_of(prompt.get("text", ""))
        if text is None:
            continue
        for kind, witness in check_conversation(messages, text):
            found.append((kind, f"{where}, call {number + 1} ({prompt.get('site')}): {witness}"))
    return list(dict.fromkeys(found))


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


def check_candidates(prompts: list[dict[str, str]], proposed: list[dict[str, Any]], live: list[dict[str, Any]],
                     k: int, where: str) -> list[Witnessed]:
    """The reconcile prompt's existing memories are the retrieval the engine promises: for each kind among the
    new facts (n of them), between min(k, L) and min(n*k, L) of the user's L live memories of that kind, each one
    live and of a kind some new fact has. For a one-fact write that is exactly min(k, L), so a retrieval that
    drops or adds a candidate is seen whatever the memories say. `live` is the user's live memories before the
    write, `proposed` the write's proposed facts (their kinds), `k` the candidates per fact the harness set."""
    found: list[Witnessed] = []
    for number, prompt in enumerate(prompts):
        if prompt.get("site") != "lm.reconcile":
            continue
        text = prompt.get("text", "")
        facts = section_json(text, "new_facts", "\n\n[[ ## existing ## ]]")
        existing = section_json(text, "existing", "\n\nRespond with")
        if not isinstance(facts, list) or not isinstance(existing, list) or len(facts) != len(proposed):
            continue
        call = f"{where}, call {number + 1} (lm.reconcile)"
        kinds = [str(f.get("kind") or "fact") for f in proposed]
        by_id = {m.get("id"): str(m.get("kind") or "fact") for m in live}
        shown = [e.get("id") if isinstance(e, dict) else None for e in existing]
        strays = [i for i in shown if by_id.get(i) not in kinds]
        if strays:
            found.append((AnomalyKind.RECONCILE_CANDIDATES_WRONG, f"{call}: existing memories {strays} are not live "
                                                                  f"memories of the user of a new fact's kind"))
        for kind in sorted(set(kinds)):
            n, total = kinds.count(kind), sum(1 for v in by_id.values() if v == kind)
            count = sum(1 for i in shown if by_id.get(i) == kind)
            low, high = min(k, total), min(n * k, total)
            if not low <= count <= high:
                want = f"{low}" if low == high else f"{low} to {high}"
                found.append((AnomalyKind.RECONCILE_CANDIDATES_WRONG,
                              f"{call}: {count} existing {kind} memories shown for {n} new {kind}(s), expected {want} "
                              f"({total} live, {k} candidates per fact)"))
    return found


__all__ = ["NAME_LINE", "Said", "check_candidates", "check_conversation", "check_prompts", "conversation_of", "section_json",
           "label_of", "languages", "read_messages", "user_name"]
