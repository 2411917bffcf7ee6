"""What tuning cost: model calls (failed ones too) and tokens, per model.

A DSPy callback counts every `LM.__call__`; a usage tracker sums the tokens providers report.
Both live in `dspy.context`, which DSPy propagates to the worker threads of `Evaluate`,
`Parallel` and GEPA, so calls made by an optimiser's threads are counted as well. DSPy's
parallel executor deep-copies the usage tracker into each thread (to tell examples apart), so
the tracker here is one shared object that a deep copy returns as itself.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from dspy.utils.usage_tracker import UsageTracker
from pydantic import BaseModel, Field


class ModelBudget(BaseModel):
    """One model's share of the budget."""

    calls: int = 0  # LM calls started
    failed_calls: int = 0  # of which raised (after the LM's own retries)
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class Budget(BaseModel):
    """Everything tuning spent, by model name."""

    calls: int = 0
    failed_calls: int = 0
    total_tokens: int = 0
    seconds: float = 0.0
    by_model: dict[str, ModelBudget] = Field(default_factory=dict)


class _SharedTracker(UsageTracker):
    """A usage tracker every thread of a phase adds to (a deep copy is the tracker itself)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        with self._lock:
            super().add_usage(lm, usage_entry)

    def __deepcopy__(self, memo: dict) -> _SharedTracker:
        return self


class _CallCounter(BaseCallback):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.pending: dict[str, str] = {}

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        model = str(getattr(instance, "model", type(instance).__name__))
        with self.lock:
            self.calls[model] += 1
            self.pending[call_id] = model

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        with self.lock:
            model = self.pending.pop(call_id, None)
            if exception is not None and model is not None:
                self.failed[model] += 1


def _tokens(usage: dict[str, Any]) -> tuple[int, int, int]:
    def num(*keys: str) -> int:
        return int(next((usage[k] for k in keys if isinstance(usage.get(k), int | float)), 0))

    tokens_in, tokens_out = num("input_tokens", "prompt_tokens"), num("output_tokens", "completion_tokens")
    return tokens_in, tokens_out, num("total_tokens") or tokens_in + tokens_out


class BudgetMeter:
    """`with meter.measure(): ...` counts everything the block spends; `meter.budget()` reads it."""

    def __init__(self) -> None:
        self._counter = _CallCounter()
        self._usage: dict[str, list[dict[str, Any]]] = {}
        self._seconds = 0.0

    @contextmanager
    def measure(self) -> Iterator[None]:
        import time

        start = time.perf_counter()
        callbacks = [*(dspy.settings.get("callbacks") or []), self._counter]
        tracker = _SharedTracker()
        with dspy.context(callbacks=callbacks, usage_tracker=tracker):
            try:
                yield
            finally:
                for model, entries in tracker.usage_data.items():
                    self._usage.setdefault(model, []).extend(entries)
                self._seconds += time.perf_counter() - start

    def budget(self) -> Budget:
        by_model: dict[str, ModelBudget] = {}
        with self._counter.lock:
            calls, failed = dict(self._counter.calls), dict(self._counter.failed)
        for model in sorted(set(calls) | set(self._usage)):
            entry = ModelBudget(calls=calls.get(model, 0), failed_calls=failed.get(model, 0))
            for usage in self._usage.get(model, []):
                tokens_in, tokens_out, total = _tokens(usage)
                entry.input_tokens += tokens_in
                entry.output_tokens += tokens_out
                entry.total_tokens += total
            by_model[model] = entry
        return Budget(calls=sum(m.calls for m in by_model.values()),
                      failed_calls=sum(m.failed_calls for m in by_model.values()),
                      total_tokens=sum(m.total_tokens for m in by_model.values()), seconds=round(self._seconds, 3),
                      by_model=by_model)


__all__ = ["Budget", "BudgetMeter", "ModelBudget"]
