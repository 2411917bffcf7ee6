"""The offline reference model answering mem0's own extraction prompt, and a local server that offers it.

Why: `--system mem0 --lm offline` must run with no key, over real HTTP. mem0 (2.x) makes one LLM call per
`add`: the system prompt `ADDITIVE_EXTRACTION_PROMPT` ("You are a Memory Extractor ...") and a user prompt
of `## Section` blocks built by `generate_additive_extraction_prompt`; its `## New Messages` block is
`role: content` lines (`mem0.memory.utils.parse_messages`), so a speaker's `name` never reaches the model.
The reply it parses is `{"memory": [{"id": "0", "text": ..., "attributed_to": "user" | "assistant"}]}`.

Here that block is rendered as hymem's `[role]: content` conversation (without names, as mem0 sends it)
and answered by the same offline model (`hymem.offline.answer`) every other provider row uses; facts
already among `## Existing Memories` are skipped, as the prompt asks. Any other prompt (hymem's own
signatures) goes to the plain offline engine, so one server serves both engines side by side.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from evals.faults.plan import MEM0_EXTRACT
from hymem.offline import OfflineEngine, answer

MARKER = "You are a Memory Extractor"  # first line of mem0's ADDITIVE_EXTRACTION_PROMPT role section
_SECTION = re.compile(r"(?m)^## (Summary|Last k Messages|Recently Extracted Memories|Existing Memories|New Messages|"
                      r"Observation Date|Current Date|Custom Instructions|Language Requirement)\n")
_ROLE_LINE = re.compile(r"^(user|assistant|system): ?(.*)$")
_JSON_TAIL = "\n\nRespond with a JSON object in the following order of fields: `facts`, then `profile`."




def is_mem0_prompt(system: str | None) -> bool:
    """True for mem0's extraction system prompt."""
    return system is not None and MARKER in system


def prompt_sections(user_prompt: str) -> dict[str, str]:
    """The `## Section` blocks of mem0's user prompt, by title (the `# Output:` tail dropped)."""
    parts = _SECTION.split(user_prompt)
    out: dict[str, str] = {}
    for title, body in zip(parts[1::2], parts[2::2], strict=True):
        out[title] = body.split("\n# Output:", 1)[0].strip("\n")
    return out


def render_new_messages(block: str) -> str:
    """mem0's `role: content` lines as hymem's `[role]: content` conversation; other lines continue a message."""
    lines = []
    for line in block.splitlines():
        match = _ROLE_LINE.match(line)
        if match:
            lines.append(f"[{match.group(1)}]: {match.group(2)}")
        elif lines:
            lines.append(line)
    return "\n".join(lines)


def _norm(text: str) -> str:
    return " ".join(str(text).split()).casefold().rstrip(".。")


def answer_mem0(user_prompt: str) -> str:
    """mem0's extraction reply (`{"memory": [...]}`) to one user prompt, from the offline model."""
    sections = prompt_sections(user_prompt)
    rendered = render_new_messages(sections.get("New Messages", ""))
    if not rendered:
        return json.dumps({"memory": []})
    facts = json.loads(answer(f"[[ ## conversation ## ]]\n{rendered}{_JSON_TAIL}"))["facts"]
    try:
        existing = {_norm(m.get("text", "")) for m in json.loads(sections.get("Existing Memories") or "[]")}
    except (ValueError, AttributeError):
        existing = set()
    kept = [f for f in facts if _norm(f["text"]) not in existing]
    return json.dumps({"memory": [{"id": str(i), "text": f["text"],
                                   "attributed_to": "assistant" if f["owner"] == "agent" else "user"}
                                  for i, f in enumerate(kept)]}, ensure_ascii=False)


class Mem0AwareEngine:
    """The offline engine (`complete(lm15.Request, site)`), which also answers mem0's extraction prompt.

    The task is the call site the caller names (`MEM0_EXTRACT`, or one of hymem's); a caller that names
    none (mem0 pointed at `hymem-eval serve` by hand) leaves the model to read its prompt.
    """

    def __init__(self) -> None:
        self.inner = OfflineEngine()

    def complete(self, request: Any, site: str | None = None) -> Any:
        from dspy import lm15

        system = request.system if isinstance(request.system, str) else "".join(
            getattr(p, "text", "") or "" for p in request.system or [])
        if site != MEM0_EXTRACT and (site is not None or not is_mem0_prompt(system)):
            return self.inner.complete(request, site)
        users = [m.text or "" for m in request.messages if m.role == "user"]
        reply = answer_mem0(users[-1] if users else "")
        tokens_in = math.ceil((len(system) + sum(len(u) for u in users)) / 4)
        tokens_out = math.ceil(len(reply) / 4)
        return lm15.Response(id=None, model="offline/reference", message=lm15.Message.assistant([lm15.TextPart(reply)]),
                             finish_reason="stop", usage=lm15.Usage(input_tokens=tokens_in, output_tokens=tokens_out,
                                                                    total_tokens=tokens_in + tokens_out))


__all__ = ["MARKER", "Mem0AwareEngine", "answer_mem0", "is_mem0_prompt", "prompt_sections", "render_new_messages"]
