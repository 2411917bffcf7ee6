"""Memoise what DSPy 3.4 rebuilds on every call but never changes: pydantic TypeAdapters and model metadata.

Per predictor call DSPy builds a `pydantic.TypeAdapter` for every input it formats and every output it
parses (a schema build each time), and, for a model name its metadata table does not hold (`offline`, a
local vLLM or Ollama model), scans the whole table about three times (capabilities and cost). Both depend
only on their arguments, so they are cached here, keyed by those arguments:

- `dspy.adapters.utils.TypeAdapter` becomes a cached factory (same type → the same adapter; a type that
  cannot be hashed gets a fresh one, as before);
- `model_info(provider, model, namespaces)` is memoised where DSPy's cost and capability code call it, and
  each caller gets its own deep copy, as DSPy's own function returns.

`install()` runs once when `hymem.llm` is imported; it checks that DSPy still has the names it replaces and
leaves DSPy untouched otherwise.
"""

from __future__ import annotations

import copy
import functools
import logging
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


def install() -> bool:
    """Install both caches into DSPy (idempotent); False when DSPy's layout is not the one expected."""
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
    _installed = True
    return True
