"""Structured outputs: whether each call asks the server to constrain its reply to the signature's JSON schema.

DSPy's JSONAdapter sends `response_format` only when `'response_format' in lm.supported_params`, which it reads
from its model catalogue: True for `openai/gpt-4o-mini`, False for any name it does not know at a custom
`api_base` (a local llama.cpp, vLLM or Ollama server), so such a server is never asked to constrain decoding.
A provider's `structured` setting states it instead:

- `json_schema`: `{"type": "json_schema", "json_schema": {"name": ..., "schema": <the signature's output schema,
  strict-mode shaped>, "strict": true}}` — OpenAI, vLLM, Ollama and llama.cpp's llama-server take it (and
  `serve-local`'s server, which reads it as llama-cpp-python's `{"type": "json_object", "schema": ...}`).
- `json_object`: `{"type": "json_object"}` — JSON mode: any JSON object, no schema (DSPy's HTTP client sends
  no other key with it; servers that accept only JSON mode).
- `off`: no `response_format`.
- unset: what DSPy decides from the model name.

The reply is parsed by the same strict parser either way: a constrained reply that is cut off or lacks a field is
still a parse failure.
"""

from __future__ import annotations

from typing import Any, Literal

import dspy

Structured = Literal["json_schema", "json_object", "off"]


class StructuredLM(dspy.LM):
    """A `dspy.LM` whose response_format capability is stated (`structured`) rather than looked up by name."""

    def __init__(self, model: str, structured: Structured | None = None, **kwargs: Any):
        super().__init__(model, **kwargs)
        self.structured = structured

    @property
    def supported_params(self) -> set[str]:
        params = set(super().supported_params)
        if self.structured == "off":
            params.discard("response_format")
        elif self.structured is not None:
            params.add("response_format")
        return params

    @property
    def supports_response_schema(self) -> bool:
        if self.structured is None:
            return bool(super().supports_response_schema)
        return self.structured == "json_schema"


def effective_structured(lm: dspy.BaseLM) -> Structured:
    """What an LM's calls send: its stated setting, else what DSPy's catalogue implies for its model name."""
    stated = getattr(lm, "structured", None)
    if stated is not None:
        return stated
    if "response_format" not in lm.supported_params:
        return "off"
    return "json_schema" if lm.supports_response_schema else "json_object"
