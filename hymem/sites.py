"""Which engine call a model or embedding request is, said by the engine itself.

Why: whoever serves or wraps a call (a fault injector, an accounting layer, the offline model, the
oracle) needs to know whether it is the extraction, the working-path extraction, the reconcile round
or an embedding, and reading that back out of the prompt text is a guess that breaks when prompts
change. The engine knows which call it is making, so it says so: around every model round and every
embedding call it sets the site in a context variable (`current_call_site()`), and each write's
`WriteResult.calls` lists the calls it made, in order.

A context variable travels with the call on its thread (and into `contextvars.copy_context()`), which
is every path an in-process model or embedder is called on. A model behind HTTP sees only the request:
the harness's own callers carry the site in the `X-Hymem-Call-Site` header (`SITE_HEADER`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import get_args

from hymem.models import CallSite, ModelCall

CALL_SITES: tuple[str, ...] = get_args(CallSite)
SITE_HEADER = "X-Hymem-Call-Site"  # how the site travels over HTTP, for a server that wants it

_site: ContextVar[str | None] = ContextVar("hymem_call_site", default=None)
_calls: ContextVar[list[ModelCall] | None] = ContextVar("hymem_write_calls", default=None)


def current_call_site() -> str | None:
    """The site of the model or embedding call being made on this context, or None outside one."""
    return _site.get()


def lm_site(stage: str) -> str:
    """The call site of a chain round's stage (`extract` → `lm.extract`)."""
    site = f"lm.{stage}"
    if site not in CALL_SITES:
        raise ValueError(f"unknown model call stage {stage!r}")
    return site


@contextmanager
def calling(site: str) -> Iterator[None]:
    """Mark the calls made inside as `site`, and list one call at `site` in the current write."""
    if site not in CALL_SITES:
        raise ValueError(f"unknown call site {site!r}; known: {CALL_SITES}")
    calls = _calls.get()
    if calls is not None:
        calls.append(ModelCall(site=site))  # type: ignore[arg-type]  # checked against CALL_SITES above
    token = _site.set(site)
    try:
        yield
    finally:
        _site.reset(token)


@contextmanager
def recording_calls() -> Iterator[list[ModelCall]]:
    """Collect the calls one write makes (the list is filled as they happen)."""
    calls: list[ModelCall] = []
    token = _calls.set(calls)
    try:
        yield calls
    finally:
        _calls.reset(token)


__all__ = ["CALL_SITES", "SITE_HEADER", "CallSite", "calling", "current_call_site", "lm_site", "recording_calls"]
