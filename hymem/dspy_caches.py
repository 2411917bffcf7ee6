"""Memoise what DSPy 3.4 rebuilds on every call but never changes: TypeAdapters, model metadata, adapter choice.

Per predictor call DSPy builds a `pydantic.TypeAdapter` for every input it formats and every output it
parses (a schema build each time), and, for a model name its metadata table does not hold (`offline`, a
local vLLM or Ollama model), scans the whole table about three times (capabilities and cost). Both depend
only on their arguments, so they are cached here, keyed by those arguments:

- `dspy.adapters.utils.TypeAdapter` becomes a cached factory (same type → the same adapter; a type that
  cannot be hashed gets a fresh one, as before);
- `model_info(provider, model, namespaces)` is memoised where DSPy's cost and capability code call it, and
  each caller gets its own deep copy, as DSPy's own function returns;
- the HTTP transport's proxy lookup (`getproxies`) is answered from a memo while `os.environ` is unchanged,
  checked on every call (see `_memoised_getproxies`);
- `resolve_adapter` (called by every `Predict`) remembers, per signature, that a predictor with no decision
  fields gets the adapter it passed in (see `_memoised_resolve_adapter`).

`install()` runs once when `hymem.llm` is imported; it checks that DSPy still has the names it replaces and
leaves DSPy untouched otherwise.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
from typing import Any

import pydantic

_log = logging.getLogger("hymem.llm")
_installed = False


@functools.lru_cache(maxsize=1024)
def _type_adapter(annotation: Any) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(annotation)


def cached_type_adapter(annotation: Any, *args: Any, **kwargs: Any) -> pydantic.TypeAdapter:
    """`pydantic.TypeAdapter(annotation)`, built once per annotation (with no extra arguments)."""
    if args or kwargs:
        return pydantic.TypeAdapter(annotation, *args, **kwargs)
    try:
        return _type_adapter(annotation)
    except TypeError:  # unhashable (e.g. Annotated with a dict): build it as DSPy would
        return pydantic.TypeAdapter(annotation)


def _memoised_model_info(original: Any) -> Any:
    @functools.lru_cache(maxsize=1024)
    def lookup(provider: Any, model: Any, namespaces: tuple | None) -> dict:
        return original(provider, model, namespaces=namespaces)

    @functools.wraps(original)
    def model_info(provider: Any, model: Any, *, namespaces: Any = None) -> dict:
        key = tuple(namespaces) if namespaces is not None else None
        try:
            return copy.deepcopy(lookup(provider, model, key))
        except TypeError:  # unhashable arguments: no memo
            return original(provider, model, namespaces=namespaces)

    marked: Any = model_info  # a function object takes the marker attribute install() looks for
    marked.__wrapped_by_hymem__ = True
    return marked


def _memoised_resolve_adapter(original: Any) -> Any:
    """`resolve_adapter` answering "the adapter itself" from a memo for a predictor with no decision fields.

    With no per-field decision settings, DSPy's answer depends only on the signature (its output types), the
    declared signature and whether the LM takes decision requests: either the adapter it was given, or a
    DecisionAdapter wrapping it. Only "the adapter itself" is remembered, and only for a signature with no
    decision type nested in an output (for which DSPy warns on every call): anything else calls DSPy.
    """
    from dspy.adapters.types.decision import Choice, Noul, Score

    sentinel = object()

    @functools.lru_cache(maxsize=1024)
    def plain(signature: Any, declared: Any, system_one: bool) -> bool:
        nested = any(kind.extract_custom_type_from_annotation(field.rebuild_annotation())
                     for field in signature.output_fields.values() for kind in (Noul, Choice, Score))
        return not nested and original(_DecisionLM(system_one), sentinel, signature, {}, declared) is sentinel

    @functools.wraps(original)
    def resolve_adapter(lm: Any, adapter: Any, signature: Any, fields: Any, declared_signature: Any = None) -> Any:
        if isinstance(fields, dict) and not fields:
            system_one = getattr(lm, "supports_decision_requests", False) is True
            try:
                if plain(signature, declared_signature, system_one):
                    return adapter
            except TypeError:  # an unhashable signature: no memo
                pass
        return original(lm, adapter, signature, fields, declared_signature)

    marked: Any = resolve_adapter
    marked.__wrapped_by_hymem__ = True
    return marked


def _memoised_getproxies(original: Any) -> Any:
    """`urllib.request.getproxies` (the environment's `*_proxy` variables) answered from a memo while the
    environment is unchanged.

    DSPy's HTTP transport asks on every request, and the answer, a function of `os.environ` alone, costs a
    walk over the whole environment decoding every name and value (~0.2 ms). Here every call still compares
    the environment as it is now with the one the memo was made from (one C-level dict comparison of its raw
    bytes); any change, in any variable, recomputes. Each caller gets its own dict, as from urllib.
    """
    raw = os.environ._data  # type: ignore[attr-defined]  # the bytes mapping os.environ wraps (POSIX CPython)
    memo: list[tuple[dict, dict]] = []

    @functools.wraps(original)
    def getproxies() -> dict:
        held = memo[-1] if memo else None
        if held is not None and held[0] == raw:
            return dict(held[1])
        before = dict(raw)
        proxies = original()
        if raw == before:  # the environment did not change while it was read
            memo[:] = [(before, dict(proxies))]
        return proxies

    marked: Any = getproxies
    marked.__wrapped_by_hymem__ = True
    return marked


class _DecisionLM:
    """Stands for an LM in `resolve_adapter`, which reads only its `supports_decision_requests`."""

    def __init__(self, system_one: bool):
        self.supports_decision_requests = system_one


def install() -> bool:
    """Install the memos into DSPy (idempotent); False when DSPy's layout is not the one expected."""
    global _installed
    if _installed:
        return True
    try:
        from dspy.adapters import utils as adapter_utils
        from dspy.clients import capabilities, costs, model_metadata
    except ImportError:
        _log.warning("DSPy's layout changed: its per-call rebuilds are not cached")
        return False
    if adapter_utils.TypeAdapter is pydantic.TypeAdapter:
        adapter_utils.TypeAdapter = cached_type_adapter
    original = model_metadata.model_info
    if not getattr(original, "__wrapped_by_hymem__", False):
        memo = _memoised_model_info(original)
        for module in (costs, capabilities):
            if getattr(module, "model_info", None) is original:
                module.model_info = memo
    try:
        from dspy.predict import predict as predict_module
    except ImportError:  # pragma: no cover - layout of a future dspy
        predict_module = None
    resolver = getattr(predict_module, "resolve_adapter", None)
    if resolver is not None and not getattr(resolver, "__wrapped_by_hymem__", False):
        predict_module.resolve_adapter = _memoised_resolve_adapter(resolver)
    _install_proxy_memo()
    _installed = True
    return True


def _install_proxy_memo() -> None:
    """Where urllib's `getproxies` is the environment reader (POSIX but macOS, whose answer also reads the system
    configuration) and DSPy's transport calls it, memoise it there (see `_memoised_getproxies`)."""
    import urllib.request

    try:
        from dspy._vendor.lm15.transports import _proxy
    except ImportError:  # pragma: no cover - layout of a future dspy
        return
    if not isinstance(getattr(os.environ, "_data", None), dict):
        return
    if urllib.request.getproxies is not urllib.request.getproxies_environment:
        return
    if getattr(_proxy, "getproxies", None) is urllib.request.getproxies_environment:
        _proxy.getproxies = _memoised_getproxies(urllib.request.getproxies_environment)
