"""Fault injection at the engine's boundaries: the dspy.LM engine, the embedder, the store.

One `Injector` per write switches faults on; the wrappers ask it at every call
whether to misbehave. In observe mode (no fault armed) it only counts the call
sites a write reached, which is how a sweep knows where to inject.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Any

import dspy
import numpy as np
from dspy import lm15

from evals.core.structured import StructuredLM
from evals.faults.adversarial import ADVERSARIAL_KINDS, adversarial_reply
from evals.faults.plan import Fault, kinds_for, opportunity_key
from hymem import failpoints
from hymem.llm import empty_body_error, text_response
from hymem.sites import current_call_site

_STORE_POINTS = {"store.before_commit": "store.commit", "store.faiss_update": "store.faiss"}


class InjectedFault(RuntimeError):
    """Raised by an injected embedding or store fault."""


class Injector:
    """Counts call sites per write and fires the one armed fault at its occurrence."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.fault: Fault | None = None
        self.reached: Counter[str] = Counter()
        self.fired: list[Fault] = []
        self.injected: dict[str, Any] = {}  # what an adversarial reply changed (evals.faults.adversarial)

    def arm(self, fault: Fault | None) -> None:
        with self._lock:
            self.fault, self.reached, self.fired, self.injected = fault, Counter(), [], {}

    def note_opportunity(self, site: str, kind: str) -> None:
        """The call just counted at `site` could take the adversarial `kind` (recorded in observe mode)."""
        with self._lock:
            self.reached[opportunity_key(site, kind, self.reached[site] - 1)] = 1

    def unfire(self) -> None:
        """The armed fault was not injected after all (an adversarial reply found nothing to change)."""
        with self._lock:
            self.fired = self.fired[:-1]

    def hit(self, site: str) -> str | None:
        """Record one call at `site`; return the fault kind to inject there, if any."""
        with self._lock:
            occurrence = self.reached[site]
            self.reached[site] += 1
            fault = self.fault
            if fault is not None and fault.site == site and fault.occurrence == occurrence:
                self.fired.append(fault)
                return fault.kind
            return None

    @contextmanager
    def store_hook(self):
        """Route the store's failpoints through this injector for the current thread."""

        def hook(name: str) -> None:
            site = _STORE_POINTS.get(name)
            if site is not None and self.hit(site):
                raise InjectedFault(f"injected store_error at {site}")

        token = failpoints.set_hook(hook)
        try:
            yield
        finally:
            failpoints.reset_hook(token)


def call_site() -> str:
    """The call site of the model call being made: the engine names it (`hymem.current_call_site()`)."""
    site = current_call_site()
    if site is None:
        raise RuntimeError("a model call outside any engine call site: the fault injector cannot place it")
    return site


# `null_facts` / `null_ops`: the site's list field null, every other field well-formed.
_NULL_LIST = {
    "lm.extract": {"facts": None, "profile": {}},
    "lm.extract_working": {"experiences": [], "facts": None},
    "lm.reconcile": {"ops": None},
}

_WRONG_SCHEMA = {
    "lm.extract": {"facts": [{"text": "The user said something.", "subject": "user", "owner": "somebody"}],
                   "profile": {}},
    "lm.extract_working": {"lessons": ["Something was learned."]},
    "lm.reconcile": {"ops": [{"op": "MERGE", "fact": 0}]},
}


class FaultyEngine:
    """A dspy.LM engine that delegates to the real one unless the injector says otherwise."""

    def __init__(self, inner: Any, injector: Injector):
        self.inner = inner
        self.injector = injector

    def complete(self, request: Any) -> lm15.Response:
        site = call_site()
        kind = self.injector.hit(site)
        if kind is None:
            response = self.inner.complete(request)
            if self.injector.fault is None and any(k in ADVERSARIAL_KINDS for k in kinds_for(site)):
                prompt, reply = _prompt_text(request), _reply_text(response)
                for adversarial in (k for k in kinds_for(site) if k in ADVERSARIAL_KINDS):
                    if adversarial_reply(adversarial, prompt, reply) is not None:
                        self.injector.note_opportunity(site, adversarial)
            return response
        if kind in ADVERSARIAL_KINDS:
            response = self.inner.complete(request)
            changed = adversarial_reply(kind, _prompt_text(request), _reply_text(response))
            if changed is None:
                self.injector.unfire()
                return response
            self.injector.injected = changed[1]
            return text_response(changed[0])
        if kind == "unavailable":
            raise lm15.ServerError("HTTP 503: service unavailable (injected)", status=503)
        if kind == "rate_limit":
            raise lm15.RateLimitError("HTTP 429: rate limited (injected)", status=429, retry_after=0.0)
        if kind == "timeout":
            raise lm15.TimeoutError("read timed out (injected, raised in-process)")
        if kind == "empty_body":
            raise empty_body_error()
        if kind == "non_json_200":
            raise non_json_body_error()
        if kind == "empty_content":
            return text_response("")
        if kind == "garbage":
            return text_response("I'm sorry, I can't help with that request.")
        if kind == "truncated_json":
            text = _reply_text(self.inner.complete(request))
            return text_response(truncate_json(text))
        if kind == "wrong_schema":
            return text_response(json.dumps(_WRONG_SCHEMA[site]))
        if kind in ("null_ops", "null_facts"):
            return text_response(json.dumps(_NULL_LIST[site]))
        if kind == "unknown_id":
            return text_response(json.dumps({"ops": [{"op": "UPDATE", "fact": 0, "id": 987654321}]}))
        raise ValueError(f"fault {kind!r} cannot be injected at {site}")


NON_JSON_BODY = b"<html><head><title>502 Bad Gateway</title></head><body>Bad gateway</body></html>"


def non_json_body_error() -> Exception:
    """The error DSPy's default engine raises for an HTTP 200 whose body is not JSON (a gateway's HTML error page),
    built by the vendored lm15 HTTP response itself, as `hymem.llm.empty_body_error` builds the empty one."""
    try:
        from dspy._vendor.lm15.providers.base import HttpResponse
    except ImportError:  # pragma: no cover - layout of a future dspy
        return lm15.ProviderError(f"the reply (HTTP 200, text/html, {len(NON_JSON_BODY)} bytes) is not JSON: "
                                  "Expecting value: line 1 column 1 (char 0)", status=200)
    try:
        HttpResponse(status=200, reason="OK", headers=[("content-type", "text/html")], body=NON_JSON_BODY).json()
    except lm15.ProviderError as exc:
        return exc
    raise AssertionError("lm15 parsed an HTML body as JSON")


def _prompt_text(request: Any) -> str:
    texts = [m.text or "" for m in request.messages if m.role == "user"]
    return texts[-1] if texts else ""


def _reply_text(response: lm15.Response) -> str:
    return "".join(getattr(part, "text", "") or "" for part in response.message.parts)


def truncate_json(text: str) -> str:
    """Cut a JSON reply so it no longer parses (what a max_tokens cut-off looks like)."""
    cut = max(1, int(len(text) * 0.6))
    while cut > 1:
        candidate = text[:cut]
        try:
            json.loads(candidate)
        except ValueError:
            return candidate
        cut -= 1
    return text[:1] if text[:1] != "" else "{"


class FaultyEmbedder:
    """Wraps an embedder; injects an error, a NaN or a wrong dimension when armed."""

    def __init__(self, inner: Any, injector: Injector, log: Any = None):
        self.inner = inner
        self.injector = injector
        self.log = log  # an evals.arms.accounting.AttemptLog: one row per embedding attempt
        self.dim = getattr(inner, "dim", None)
        self.name = getattr(inner, "name", type(inner).__name__)

    def embed(self, texts: list[str]) -> np.ndarray:
        kind = self.injector.hit("embed")
        start = time.perf_counter()
        try:
            if kind == "embed_error":
                raise InjectedFault("embedding service unavailable (injected)")
            hits_before = getattr(self.inner, "hits", 0)
            vectors = np.array(self.inner.embed(texts), dtype=np.float32, copy=True)
        except Exception as exc:
            self._record(start, kind, status=type(exc).__name__, error=str(exc)[:300])
            raise
        if kind == "embed_nan":
            vectors[-1, 0] = np.nan
        elif kind == "embed_wrong_dim":
            vectors = vectors[:, :-1]
        self._record(start, kind, cache_hit=getattr(self.inner, "hits", 0) > hits_before)
        return vectors

    def _record(self, start: float, kind: str | None, **fields: Any) -> None:
        if self.log is not None:
            self.log.add(model=str(self.name), site="embed", latency_s=time.perf_counter() - start, injected=kind,
                         **fields)


def faulty_lm(lm: dspy.LM, injector: Injector) -> dspy.LM:
    """The same model behind a fault-injecting engine; retries and caching off (faults must surface)."""
    engine = getattr(lm, "engine", None)
    if engine is None or isinstance(engine, str):
        raise ValueError(
            f"in-process fault injection needs a model with a custom engine (offline, oracle); {lm.model!r} "
            "talks HTTP: run it with --faults none, or put `hymem-eval proxy` in front of it")
    return dspy.LM(lm.model, engine=FaultyEngine(engine, injector), cache=False, num_retries=0)


class PromptTap(StructuredLM):
    """The same model, with the last user message of every call recorded: what each model call was shown (and,
    under "reply", the text it answered).

    Why at the `dspy.LM` boundary: every call of every path (in-process engine, HTTP, fault proxy) passes
    here, so the harness checks the prompt the model saw, not the engine's account of it.
    """

    @classmethod
    def wrap(cls, lm: dspy.LM, sink: list[dict[str, str]]) -> PromptTap:
        tap = cls(lm.model, engine=lm.engine, async_engine=lm._async_engine_spec, cache=False, num_retries=0,
                  model_type=lm.model_type, **lm.kwargs)
        tap._tap = (lm, sink)
        tap.structured = getattr(lm, "structured", None)  # the adapter asks the outermost LM for response_format
        return tap

    def __call__(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        inner, sink = self._tap
        texts = [m.get("content") for m in messages or [] if m.get("role") == "user"]
        last = texts[-1] if texts else prompt
        text = last if isinstance(last, str) else json.dumps(last, ensure_ascii=False)
        call = {"site": current_call_site() or "lm", "text": text or ""}
        sink.append(call)
        outputs = inner(prompt=prompt, messages=messages, **kwargs)
        first = outputs[0] if isinstance(outputs, list) and outputs else None
        reply = first.get("text") if isinstance(first, dict) else first
        if isinstance(reply, str):
            call["reply"] = reply  # what the model answered (evals.check.write_contract.profile_kept)
        return outputs
