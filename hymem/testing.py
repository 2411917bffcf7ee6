"""Test doubles shipped with the package, so users can drive every failure path too.

`ScriptedLM` is a real `dspy.LM` whose engine replays a script: the engine's
adapter and parsing code run on each scripted reply exactly as on a provider's.
"""

from __future__ import annotations

import threading
from typing import Any

import dspy
from dspy import lm15

from hymem.llm import empty_body_error, text_response


class ScriptExhausted(AssertionError):
    """The scripted model was called more times than it has replies: a test bug, never a provider fault."""


class _EmptyBody:
    def __repr__(self) -> str:
        return "ScriptedLM.EMPTY_BODY"


class _ScriptEngine:
    def __init__(self, replies: list[Any]):
        self._replies = list(replies)
        self._lock = threading.Lock()
        self.requests: list[Any] = []

    def complete(self, request: Any) -> lm15.Response:
        with self._lock:
            self.requests.append(request)
            if not self._replies:
                raise ScriptExhausted(f"ScriptedLM ran out of replies after {len(self.requests) - 1} call(s)")
            reply = self._replies.pop(0)
        if reply is ScriptedLM.EMPTY_BODY:
            raise empty_body_error()
        if isinstance(reply, BaseException):
            raise reply
        if reply is None:
            return text_response("")
        return text_response(str(reply))


class ScriptedLM(dspy.LM):
    """A `dspy.LM` that consumes one scripted reply per model attempt, in order.

    A reply is the reply text, an exception instance to raise as the provider's error,
    `ScriptedLM.EMPTY_BODY` (HTTP 200 with an empty body), or None (200 with null content).
    Caching and retries are off, so each attempt consumes exactly one reply.
    """

    EMPTY_BODY = _EmptyBody()

    def __init__(self, replies: list[Any], model: str = "scripted/test"):
        engine = _ScriptEngine(replies)
        super().__init__(model, engine=engine, cache=False, num_retries=0)
        self._script = engine

    @property
    def calls(self) -> int:
        """How many model attempts were made."""
        return len(self._script.requests)

    @property
    def remaining(self) -> int:
        return len(self._script._replies)

    def prompts(self) -> list[str]:
        """The text of the last user message of each attempt, oldest first."""
        out = []
        for request in self._script.requests:
            texts = [m.text or "" for m in request.messages if m.role == "user"]
            out.append(texts[-1] if texts else "")
        return out

    # Provider errors as DSPy's default engine raises them.
    @staticmethod
    def server_error(status: int = 500) -> Exception:
        return lm15.ServerError(f"HTTP {status}: upstream error", status=status)

    @staticmethod
    def rate_limit(retry_after: float = 1.0) -> Exception:
        return lm15.RateLimitError("HTTP 429: rate limited", status=429, retry_after=retry_after)

    @staticmethod
    def timeout() -> Exception:
        return lm15.TimeoutError("read timed out")

    @staticmethod
    def connection_refused() -> Exception:
        return lm15.TransportError("connection refused")
