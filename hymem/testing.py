"""Test doubles shipped with the package, so users can drive every failure path too.

`ScriptedLM` is a real `dspy.LM` whose engine replays a script: the engine's
adapter and parsing code run on each scripted reply exactly as on a provider's.
"""

from __future__ import annotations

import threading
from typing import Any

import dspy
from dspy import lm15

_HttpResponse: Any
try:  # the vendored lm15 HTTP response builds the same ProviderError a real empty body gets
    from dspy._vendor.lm15.providers.base import HttpResponse as _HttpResponse
except ImportError:  # pragma: no cover - layout of a future dspy
    _HttpResponse = None


class ScriptExhausted(AssertionError):
    """The scripted model was called more times than it has replies: a test bug, never a provider fault."""


class _EmptyBody:
    def __repr__(self) -> str:
        return "ScriptedLM.EMPTY_BODY"


def empty_body_error() -> Exception:
    """The exception the default engine raises for an HTTP 200 with an empty body."""
    if _HttpResponse is not None:
        try:
            _HttpResponse(status=200, reason="OK", headers=[("content-type", "application/json")], body=b"").json()
        except lm15.ProviderError as exc:
            return exc
    return lm15.ProviderError(
        "the reply (HTTP 200, application/json, 0 bytes) is not JSON: Expecting value", status=200
    )


def text_response(text: str, model: str = "scripted") -> lm15.Response:
    """A provider reply carrying `text` as the assistant content."""
    return lm15.Response(
        id=None,
        model=model,
        message=lm15.Message.assistant([lm15.TextPart(text)]),
        finish_reason="stop",
        usage=lm15.Usage(input_tokens=0, output_tokens=max(1, len(text) // 4), total_tokens=max(1, len(text) // 4)),
    )


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
