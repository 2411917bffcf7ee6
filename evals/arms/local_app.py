r"""`python -m evals.arms.local_app`: llama-cpp-python's OpenAI-compatible server, with two request rewrites.

Run by `evals.arms.local_server` in a subprocess; takes `python -m llama_cpp.server`'s flags plus `--max_tokens_cap`.

- **Token cap**: llama-cpp-python has no server-side limit on a reply, and a small model can generate until its
  context is full (minutes). Every chat/completion request's `max_tokens` is clamped to the cap (set when absent).
- **JSON schemas in OpenAI's form**: llama-cpp-python 0.3 takes a schema only as
  `{"type": "json_object", "schema": S}` and refuses OpenAI's `{"type": "json_schema", "json_schema": {"schema":
  S, ...}}` (422), which is the form OpenAI, vLLM, Ollama and llama.cpp's own llama-server take and the only one
  DSPy's HTTP client sends a schema in. The request is rewritten to the first form, so the schema still
  constrains decoding (a grammar) and the harness speaks one dialect to every server.

And one fix: llama-cpp-python 0.3's schema-to-grammar converter lets a raw control character (a newline, a tab)
into a JSON string (`char ::= [^"\\] | ...`), which is not JSON; SmolLM2 wrote one in about half of its constrained
extractions. `strict_json_strings` makes the rule llama.cpp's own (`[^"\\\x7F\x00-\x1F]`), so a constrained
reply is valid JSON. The harness's parser stays strict either way.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_REWRITTEN_PATHS = ("/v1/chat/completions", "/v1/completions")


def rewrite_request(body: dict[str, Any], max_tokens_cap: int | None) -> dict[str, Any]:
    """The request as llama-cpp-python takes it: OpenAI's json_schema as json_object + schema; max_tokens capped."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema") or {}
        body["response_format"] = {"type": "json_object", "schema": inner.get("schema", {})}
    if max_tokens_cap is not None:
        asked = body.get("max_tokens") or body.get("max_completion_tokens")
        body["max_tokens"] = min(int(asked), max_tokens_cap) if isinstance(asked, int) and asked > 0 \
            else max_tokens_cap
        body.pop("max_completion_tokens", None)
    return body


class RewriteRequests:
    """ASGI middleware applying `rewrite_request` to JSON POST bodies of the completion endpoints."""

    def __init__(self, app: ASGIApp, max_tokens_cap: int | None):
        self.app = app
        self.max_tokens_cap = max_tokens_cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in _REWRITTEN_PATHS:
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message]), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            data = json.loads(body)
            if isinstance(data, dict):
                body = json.dumps(rewrite_request(data, self.max_tokens_cap)).encode("utf-8")
        except ValueError:
            pass  # the server answers a malformed body itself
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode("ascii")))
        scope = {**scope, "headers": headers}
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


# llama.cpp's json-schema-to-grammar `char`: no raw control characters inside a string (JSON forbids them).
JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'


def strict_json_strings() -> None:
    """Grammars built from a JSON schema from now on keep control characters out of strings (see above)."""
    from llama_cpp import llama_grammar

    llama_grammar.PRIMITIVE_RULES["char"] = llama_grammar.BuiltinRule(JSON_CHAR, [])


def main(argv: list[str] | None = None) -> None:
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(description="llama-cpp-python's server with hymem's request rewrites")
    add_args_from_model(parser, Settings)
    parser.add_argument("--max_tokens_cap", type=int, default=None, help="cap on every reply's max_tokens")
    args = parser.parse_args(argv)
    server_settings = parse_model_from_args(ServerSettings, args)
    model_settings = [parse_model_from_args(ModelSettings, args)]
    strict_json_strings()
    app = create_app(server_settings=server_settings, model_settings=model_settings)
    print(f"hymem local server: max_tokens cap {args.max_tokens_cap}, json_schema -> json_object+schema",
          file=sys.stderr, flush=True)
    uvicorn.run(RewriteRequests(app, args.max_tokens_cap), host=server_settings.host, port=server_settings.port,
                log_level="warning")


if __name__ == "__main__":
    main()
