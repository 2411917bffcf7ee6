"""Per-attempt accounting, retries that honour Retry-After, and the response cache.

Every LM and embedding attempt (retries included) becomes one row, so an injected fault can
never be absorbed silently by a retry: retries are counted and reported. Successful replies of
HTTP providers are cached, but only once the write they served has succeeded with no fault.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import LMRateLimitError
from pydantic import BaseModel

from evals.arms.providers import endpoint
from evals.core.redact import redact
from evals.core.structured import StructuredLM
from evals.faults.inject import Injector, call_site
from evals.record import Attempt

_PRICES_FILE = Path(__file__).with_name("prices.toml")


class AttemptLog:
    """Collects attempts for one case; the replayer sets the context (write, unit) before each write."""

    def __init__(self, provider: str, case_id: str):
        self.provider, self.case_id = provider, case_id
        self.context: dict[str, Any] = {"write": None, "unit": "control"}
        self.rows: list[Attempt] = []
        self._lock = threading.Lock()

    def add(self, **fields: Any) -> None:
        with self._lock:
            self.rows.append(Attempt(provider=self.provider, case_id=self.case_id, **self.context, **fields))


def price_table() -> dict[str, tuple[float, float]]:
    """model → (USD per 1M input tokens, per 1M output tokens), from the shipped local table."""
    data = tomllib.loads(_PRICES_FILE.read_text(encoding="utf-8")) if _PRICES_FILE.exists() else {}
    return {name: (float(p["input"]), float(p["output"])) for name, p in data.get("model", {}).items()}


def cost(model: str, prompt: int | None, completion: int | None, prices: dict, override: tuple | None) -> float | None:
    price = override if override and None not in override else prices.get(model) or prices.get(model.split("/")[-1])
    if price is None or prompt is None or completion is None:
        return None
    return (prompt * price[0] + completion * price[1]) / 1_000_000


# Request settings that do not shape a reply: left out of the cache key (the key never holds a secret either).
_TRANSPORT_ONLY = frozenset({"api_key", "cache", "num_retries", "timeout", "api_base", "base_url", "headers",
                             "extra_headers"})


class CacheKey(BaseModel):
    """Everything that shapes a reply. A reply is reused only when all of it is the same."""

    api_base: str | None  # the endpoint: another server's replies are never credited to this one
    model: str
    params: dict[str, Any]  # every request parameter (temperature, max_tokens, response_format, ...)
    messages: Any  # the request itself
    prompt_hash: str  # the program's instructions and demos (manifest.prompt_hash)
    epoch: int = 0  # the repeat of a case, once runs have epochs: each epoch asks the model afresh

    def digest(self) -> str:
        blob = json.dumps(self.model_dump(), sort_keys=True, default=str, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """SQLite cache of successful LM replies, keyed by `CacheKey` (endpoint, model, parameters, request,
    prompt hash, epoch). Values pass through `redact` before they are stored."""

    def __init__(self, path: Path, prompt_hash: str = ""):
        self.prompt_hash = prompt_hash
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, outputs TEXT NOT NULL)")
        self._lock = threading.Lock()

    def key(self, *, api_base: str | None, model: str, params: dict, messages: Any, epoch: int = 0) -> str:
        params = {k: v for k, v in params.items() if k not in _TRANSPORT_ONLY}
        return CacheKey(api_base=api_base, model=model, params=params, messages=messages,
                        prompt_hash=self.prompt_hash, epoch=epoch).digest()

    def get(self, key: str) -> list | None:
        with self._lock:
            row = self._db.execute("SELECT outputs FROM replies WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put_many(self, items: list[tuple[str, list]]) -> None:
        if not items:
            return
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO replies (key, outputs) VALUES (?, ?)",
                                 [(k, json.dumps(redact(v), ensure_ascii=False)) for k, v in items])

    def close(self) -> None:
        with self._lock:
            self._db.close()


class AccountingLM(StructuredLM):
    """The provider's LM with every attempt recorded, a connection limit, retries and the cache.

    Retries (up to `max_attempts`, waiting Retry-After on a 429) run only when no fault is being
    injected; in a fault sweep each call is one attempt, so the fault reaches the engine.
    """

    @classmethod
    def wrap(cls, lm: dspy.LM, *, provider: Any, log: AttemptLog, injector: Injector | None,
             cache: ResponseCache | None, retries: bool, prices: dict,
             wire: Callable[[str], str | None] | None = None, epoch: int = 0) -> AccountingLM:
        """`wire(site)`: for an HTTP provider under a fault plan, the fault proxy URL to send this call to
        (the call the armed fault targets), else None; it also counts the call site. `epoch`: the repeat
        of the case (part of the cache key)."""
        wrapped = cls(lm.model, engine=lm.engine, async_engine=lm._async_engine_spec, cache=False, num_retries=0,
                      model_type=lm.model_type, **lm.kwargs)
        wrapped.structured = getattr(lm, "structured", None)  # the provider's response_format setting
        wrapped._acct = {"provider": provider, "log": log, "injector": injector, "cache": cache,
                         "retries": retries, "prices": prices, "pending": [], "wire": wire, "epoch": epoch}
        return wrapped

    def _via(self, url: str) -> dspy.LM:
        """This model at another base URL (a fault proxy), for one call."""
        return dspy.LM(self.model, cache=False, num_retries=0, model_type=self.model_type,
                       **{**self.kwargs, "api_base": url})

    def take_pending(self) -> list[tuple[str, list]]:
        """Replies of this client's calls not yet cached; the replayer caches them after a clean success."""
        pending, self._acct["pending"] = self._acct["pending"], []
        return pending

    def __call__(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        acct = self._acct
        provider, log, injector = acct["provider"], acct["log"], acct["injector"]
        site = call_site()
        # Ask the fault plan first: it counts the call site, and a call a fault targets goes to the fault
        # proxy, never to the cache (the fault sits in front of the cache, as it sits in front of the model).
        fired_before = len(injector.fired) if injector else 0
        proxy_url = acct["wire"](site) if acct["wire"] is not None else None
        target = self._via(proxy_url) if proxy_url else None
        key = None
        if acct["cache"] is not None and target is None:
            # the endpoint the call goes to, an environment variable's included: never another server's reply
            base = endpoint(self.model, self.kwargs.get("api_base") or self.kwargs.get("base_url"))
            key = acct["cache"].key(api_base=base, model=self.model,
                                    params={**self.kwargs, **kwargs}, messages=messages or prompt,
                                    epoch=acct["epoch"])
            hit = acct["cache"].get(key)
            if hit is not None:
                log.add(model=self.model, site=site, cache_hit=True)
                return hit
        attempts = provider.config.max_attempts if acct["retries"] else 1
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                fired_before = len(injector.fired) if injector else 0
            start = time.perf_counter()
            try:
                with provider.connections:
                    # timed from here: the model's time, not a wait for a connection held by another unit
                    start = time.perf_counter()
                    if target is not None:
                        outputs = dspy.LM.__call__(target, prompt=prompt, messages=messages, **kwargs)
                    else:
                        outputs = super().__call__(prompt=prompt, messages=messages, **kwargs)
            except Exception as exc:
                injected = _injected(injector, fired_before)
                log.add(model=self.model, site=site, attempt=attempt, status=type(exc).__name__,
                        error=(str(exc).splitlines() or [""])[0][:300], latency_s=time.perf_counter() - start,
                        injected=injected)
                wait = _retry_wait(exc, attempt)
                if wait is not None and isinstance(exc, LMRateLimitError) and hasattr(provider.connections, "pause"):
                    provider.connections.pause(wait)  # every caller of this provider waits, not only this one
                if attempt < attempts and wait is not None:
                    time.sleep(wait)
                    continue
                raise
            history = (target or self).history
            usage = (history[-1].get("usage") or {}) if history else {}
            prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
            override = (provider.config.input_price, provider.config.output_price)
            injected = _injected(injector, fired_before)
            empty = not any((o.get("text") if isinstance(o, dict) else o) for o in outputs or [])
            log.add(model=self.model, site=site, attempt=attempt, latency_s=time.perf_counter() - start,
                    status="empty_content" if empty else "ok", prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, injected=injected,
                    cost_usd=cost(self.model, prompt_tokens, completion_tokens, acct["prices"], override))
            if key is not None and injected is None and not empty:
                acct["pending"].append((key, outputs))
            return outputs
        raise AssertionError("unreachable")


def _injected(injector: Injector | None, fired_before: int) -> str | None:
    """The fault kind the injector fired during this attempt, if it fired one."""
    return injector.fired[-1].kind if injector and len(injector.fired) > fired_before else None


def _retry_wait(exc: Exception, attempt: int, cap: float = 30.0) -> float | None:
    """Seconds to wait before retrying, or None when the error is not worth a retry."""
    from dspy.utils.exceptions import LMServerError, LMTimeoutError, LMTransportError

    if isinstance(exc, LMRateLimitError):
        after = getattr(exc, "retry_after", None)
        return min(cap, float(after)) if after is not None else min(cap, 0.5 * 2 ** (attempt - 1))
    if isinstance(exc, (LMServerError, LMTimeoutError, LMTransportError)):
        return min(cap, 0.5 * 2 ** (attempt - 1))
    return None
