"""mem0's side of the wire: what its openai clients see, so every call can be sited, faulted, timed and logged.

Why a stand-in client rather than a proxy for everything: a fault must hit exactly the request it names
(the n-th fact's embedding, mem0's own per-fact re-request included), which only the caller can tell apart;
the fault itself is still injected on the wire, by sending that request through `evals.arms.proxy`.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from evals.faults.plan import MEM0_EXTRACT, Fault
from hymem.sites import SITE_HEADER

_ids = itertools.count()


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible endpoint mem0 calls: base URL, model and key (never logged)."""

    url: str
    model: str
    key: str = field(repr=False)


class Calls:
    """One write's calls: which fault site each one is, whether the armed fault targets it, and their time."""

    def __init__(self) -> None:
        self.reset(None, infer=True)

    def reset(self, fault: Fault | None, infer: bool) -> None:
        self.fault, self.infer = fault, infer
        self.seen: dict[str, set] = {}
        self.chatted = False
        self.facts: list[str] | None = None
        self.entities: list[str] = []
        self.tags: list[tuple[Any, str]] = []  # (proxy, tag) of every call sent through a fault proxy
        self.seconds = 0.0
        self.reply: str | None = None

    def site(self, texts: list[str] | None) -> tuple[str, list[int]]:
        """(site, items) of one call: `texts` is None for a chat call, else the embedding inputs."""
        if texts is None:
            self.chatted = True
            return "lm.extract", [0]
        if not self.infer:
            return "embed.memory", [len(self.seen.get("embed.memory", ()))]
        if not self.chatted:
            return "embed.query", [0]
        if self.facts is None:
            self.facts = list(texts)
            return "embed.facts", list(range(len(texts)))
        if all(t in self.facts for t in texts):
            return "embed.facts", [self.facts.index(t) for t in texts]
        for t in texts:
            if t not in self.entities:
                self.entities.append(t)
        return "embed.entities", [self.entities.index(t) for t in texts]

    def mark(self, site: str, items: list[int]) -> str | None:
        """Record the call; the fault kind to inject into it, if the armed fault targets one of its items."""
        self.seen.setdefault(site, set()).update(items)
        fault = self.fault
        return fault.kind if fault is not None and fault.site == site and fault.occurrence in items else None

    @property
    def reached(self) -> dict[str, int]:
        return {site: len(items) for site, items in self.seen.items()}


class Wire:
    """What mem0 sees as its OpenAI client: each call goes direct or through a fault proxy, timed and logged."""

    def __init__(self, system: Any, endpoint: Endpoint, timeout: float):
        from openai import OpenAI

        self.system, self.endpoint = system, endpoint
        self.client = OpenAI(base_url=endpoint.url, api_key=endpoint.key, max_retries=0, timeout=timeout)
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._chat))
        self.embeddings = SimpleNamespace(create=self._embed)

    def _chat(self, **params: Any) -> Any:
        # mem0 makes one kind of chat call, its extraction: name it, so the server need not read the prompt
        headers = {**(params.pop("extra_headers", None) or {}), SITE_HEADER: MEM0_EXTRACT}
        params.update(self.system.sampling)  # the run's temperature and the epoch's seed, as hymem's calls get them
        response = self._call("lm.extract", None,
                              lambda c: c.chat.completions.create(**params, extra_headers=headers))
        try:  # kept for the proposals; reading it must never change what mem0 sees
            self.system.calls.reply = response.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            self.system.calls.reply = None
        return response

    def _embed(self, **params: Any) -> Any:
        texts = params.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        return self._call("embed", texts, lambda c: c.embeddings.create(**params))

    def _call(self, kind_of_call: str, texts: list[str] | None, send: Any) -> Any:
        calls = self.system.calls
        site, items = calls.site(texts)
        kind = calls.mark(site, items)
        client = self.client
        if kind is not None:
            proxy, tag = self.system.proxy(self.endpoint.url, kind), f"mem0-{next(_ids)}"
            calls.tags.append((proxy, tag))
            client = client.with_options(base_url=proxy.url_for(tag))
        slots = self.system.connections if texts is None else None  # a model call holds a provider's slot
        start = time.perf_counter()
        try:
            with slots if slots is not None else contextlib.nullcontext():
                start = time.perf_counter()  # the model's time, not a wait for a slot held by another unit
                response = send(client)
        except Exception as exc:
            calls.seconds += time.perf_counter() - start
            self.system.attempt(self.endpoint.model, kind_of_call, start, kind, status=type(exc).__name__,
                                error=(str(exc).splitlines() or [""])[0][:300])
            raise
        calls.seconds += time.perf_counter() - start
        usage = getattr(response, "usage", None)
        self.system.attempt(self.endpoint.model, kind_of_call, start, kind,
                            prompt_tokens=getattr(usage, "prompt_tokens", None) if texts is None else None,
                            completion_tokens=getattr(usage, "completion_tokens", None) if texts is None else None)
        return response


__all__ = ["Calls", "Endpoint", "Wire"]
