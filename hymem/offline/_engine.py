"""The DSPy engine: `complete(request)` answers the last user message with `answer`, counting rough tokens.

Why an engine and not a `BaseLM` subclass: DSPy 3.4 saves a custom engine by class path and state
(`dump_state` / `load_state`), and warns on every call of a subclassed `forward()`.
"""

from __future__ import annotations

import math
from typing import Any

import dspy
from dspy import lm15

from hymem.offline._prompt import answer
from hymem.sites import current_call_site

MODEL = "offline/reference"


def _request_text(request: lm15.Request) -> tuple[str, int]:
    """The last user message (the one to answer) and the character count of the whole prompt."""
    system = request.system
    system_text = system if isinstance(system, str) else "".join(getattr(p, "text", "") or "" for p in system or [])
    texts = [(m.role, m.text or "") for m in request.messages]
    users = [text for role, text in texts if role == "user"]
    if not users:
        raise ValueError("offline model: the request has no user message")
    return users[-1], len(system_text) + sum(len(text) for _, text in texts)


class OfflineEngine:
    """A DSPy custom engine: `complete(request)` answers hymem's signatures with `answer`.

    The task is the call site the engine named for this call (`hymem.current_call_site()`); `site`
    overrides it for a caller that carries the site another way (the HTTP server's header).
    """

    def complete(self, request: lm15.Request, site: str | None = None) -> lm15.Response:
        text, prompt_chars = _request_text(request)
        reply = answer(text, site or current_call_site())
        tokens_in, tokens_out = math.ceil(prompt_chars / 4), math.ceil(len(reply) / 4)
        return lm15.Response(
            id=None,
            model=MODEL,
            message=lm15.Message.assistant([lm15.TextPart(reply)]),
            finish_reason="stop",
            usage=lm15.Usage(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out),
        )

    def dump_state(self) -> dict[str, Any]:
        return {"version": 1}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> OfflineEngine:
        return cls()


class AsyncOfflineEngine:
    """The async twin DSPy uses for `acall`; the work is pure CPU, so it just calls the sync engine."""

    def __init__(self) -> None:
        self._sync = OfflineEngine()

    async def complete(self, request: lm15.Request) -> lm15.Response:
        return self._sync.complete(request)

    def dump_state(self) -> dict[str, Any]:
        return {"version": 1}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> AsyncOfflineEngine:
        return cls()


def offline_lm(**kw: Any) -> dspy.LM:
    """The offline reference model as a `dspy.LM` (no cache, no retries unless `kw` says otherwise)."""
    kw.setdefault("cache", False)
    kw.setdefault("num_retries", 0)
    return dspy.LM(MODEL, engine=OfflineEngine(), async_engine=AsyncOfflineEngine(), **kw)
