"""The model boundary: a strict JSON adapter, LM construction and failure classification.

DSPy's JSONAdapter repairs broken JSON (a truncated list parses as a shorter
one, "Sorry… {" as `{}`), which would turn a broken reply into a confident
"no changes". The engine parses strictly and classifies every failure into the
spec's codes from DSPy 3.4's real exception types.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any, Literal

# DSPy and LiteLLM download a model price list on first use unless told not to: the engine never
# reaches for the network by itself (set before dspy is imported).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy import lm15  # noqa: E402
from dspy.utils.exceptions import AdapterParseError, LMError, LMProviderError, LMUnexpectedError  # noqa: E402

from hymem import dspy_caches  # noqa: E402
from hymem.offline import offline_lm

dspy_caches.install()  # TypeAdapters and model metadata, which DSPy rebuilds on every call

_HttpResponse: Any = None
try:  # the vendored lm15 HTTP response builds the same ProviderError a real empty body gets
    from dspy._vendor.lm15.providers.base import HttpResponse

    _HttpResponse = HttpResponse
except ImportError:  # pragma: no cover - layout of a future dspy
    pass

FailureKind = Literal["unavailable", "empty", "parse", "other"]

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)


class StrictJSONAdapter(dspy.JSONAdapter):
    """JSONAdapter that refuses any reply needing repair, and never calls the LM twice.

    Accepted: one JSON object (optionally inside a single ``` fence) that holds every
    output field. Everything else is an AdapterParseError, before DSPy's lenient parse runs.
    """

    def format_field_structure(self, signature: type[dspy.Signature]) -> str:
        """Cached: the fields' JSON schemas never change, and rebuilding them cost ~1/5 of an offline-model write."""
        return _field_structure(self, signature)

    def format_system_message(self, signature: type[dspy.Signature]) -> str:
        """Cached per signature: field descriptions, structure and instructions depend on nothing else."""
        try:
            return _system_message_cached(signature)  # type: ignore[arg-type]  # mypy takes type[Any] for unhashable
        except TypeError:  # an unhashable signature: format it every time
            return super().format_system_message(signature)

    # Pure functions of the signature that DSPy recomputes on every call: memoised per signature class.
    def user_message_output_requirements(self, signature: type[dspy.Signature]) -> str:
        return _per_signature(_output_requirements_cached, signature,
                              lambda: dspy.JSONAdapter.user_message_output_requirements(self, signature))

    def _get_history_field_name(self, signature: type[dspy.Signature]) -> str | None:
        return _per_signature(_history_field_cached, signature,
                              lambda: dspy.JSONAdapter._get_history_field_name(self, signature))

    def _get_tool_call_input_field_name(self, signature: type[dspy.Signature]) -> str | None:
        return _per_signature(_tool_input_field_cached, signature,
                              lambda: dspy.JSONAdapter._get_tool_call_input_field_name(self, signature))

    def _get_tool_call_output_field_name(self, signature: type[dspy.Signature]) -> str | None:
        return _per_signature(_tool_output_field_cached, signature,
                              lambda: dspy.JSONAdapter._get_tool_call_output_field_name(self, signature))

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        text = completion.strip()
        fenced = _FENCE.match(text)
        if fenced:
            text = fenced.group(1)
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise AdapterParseError(
                adapter_name="StrictJSONAdapter",
                signature=signature,
                lm_response=completion,
                message=f"reply is not strict JSON ({exc})",
            ) from None
        if not isinstance(value, dict):
            raise AdapterParseError(
                adapter_name="StrictJSONAdapter",
                signature=signature,
                lm_response=completion,
                message=f"reply is a JSON {type(value).__name__}, not an object",
            )
        missing = [name for name in signature.output_fields if name not in value]
        if missing:
            raise AdapterParseError(
                adapter_name="StrictJSONAdapter",
                signature=signature,
                lm_response=completion,
                message=f"reply lacks output field(s) {missing}",
            )
        return super().parse(signature, text)


@functools.lru_cache(maxsize=256)
def _structure_cached(signature: type[dspy.Signature]) -> str:
    return dspy.JSONAdapter.format_field_structure(_PLAIN, signature)


@functools.lru_cache(maxsize=256)
def _system_message_cached(signature: type[dspy.Signature]) -> str:
    return dspy.JSONAdapter.format_system_message(_STRICT, signature)


@functools.lru_cache(maxsize=256)
def _output_requirements_cached(signature: type[dspy.Signature]) -> str:
    return dspy.JSONAdapter.user_message_output_requirements(_PLAIN, signature)


@functools.lru_cache(maxsize=256)
def _history_field_cached(signature: type[dspy.Signature]) -> str | None:
    return dspy.JSONAdapter._get_history_field_name(_PLAIN, signature)


@functools.lru_cache(maxsize=256)
def _tool_input_field_cached(signature: type[dspy.Signature]) -> str | None:
    return dspy.JSONAdapter._get_tool_call_input_field_name(_PLAIN, signature)


@functools.lru_cache(maxsize=256)
def _tool_output_field_cached(signature: type[dspy.Signature]) -> str | None:
    return dspy.JSONAdapter._get_tool_call_output_field_name(_PLAIN, signature)


def _per_signature(cached: Any, signature: type[dspy.Signature], uncached: Any) -> Any:
    """`cached(signature)`, or `uncached()` for a signature that cannot be hashed."""
    try:
        return cached(signature)
    except TypeError:
        return uncached()


def _field_structure(adapter: dspy.JSONAdapter, signature: type[dspy.Signature]) -> str:
    try:
        return _structure_cached(signature)  # type: ignore[arg-type]  # mypy takes type[Any] for unhashable
    except TypeError:  # an unhashable signature: format it every time
        return dspy.JSONAdapter.format_field_structure(adapter, signature)


_PLAIN = dspy.JSONAdapter()
_STRICT = StrictJSONAdapter()


def classify_failure(exc: BaseException) -> FailureKind:
    """Map an exception raised by a Predict call to the kind the error table needs.

    - unavailable: the provider could not be reached or refused (5xx, 429, timeout, transport)
    - empty: HTTP 200 with an empty body, or empty/null content
    - parse: unparseable, truncated or wrong-schema reply (incl. a non-JSON HTTP body)
    - other: anything else
    """
    if isinstance(exc, AdapterParseError):
        return "empty" if "empty or null response" in str(exc) else "parse"
    if isinstance(exc, LMProviderError) and getattr(exc, "status", None) == 200:
        # lm15 reports "(HTTP 200, <type>, N bytes) is not JSON"; 0 bytes is an empty body.
        return "empty" if re.search(r"\b0 bytes\)", str(exc)) else "parse"
    if isinstance(exc, LMUnexpectedError):
        # A custom engine raised a non-DSPy error: only OS-level network errors mean "unreachable".
        return "unavailable" if isinstance(exc.__cause__, (OSError, TimeoutError)) else "other"
    if isinstance(exc, LMError):
        return "unavailable"
    return "other"


def raise_if_programming_error(exc: BaseException) -> None:
    """AssertionErrors (e.g. a scripted test model running out of replies) are bugs, not provider faults."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AssertionError):
            raise seen
        seen = seen.__cause__ or seen.__context__


def empty_body_error() -> Exception:
    """The exception the default engine raises for an HTTP 200 with an empty body (for engines that play one)."""
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


def make_lm(spec: Any, **kwargs: Any) -> dspy.LM:
    """A `dspy.LM` from an instance, `"offline"`, or any DSPy model string."""
    if isinstance(spec, dspy.BaseLM):
        return spec
    if not isinstance(spec, str) or not spec:
        raise TypeError(f"lm must be a dspy.LM or a model string, got {spec!r}")
    if spec == "offline":
        return offline_lm()
    kwargs.setdefault("cache", False)
    return dspy.LM(spec, **kwargs)
