"""Calls released together on threads of their own: how the concurrency checks make two writes really race."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def run_threads(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run every call on its own thread, released together; an exception is kept as the result (None)."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def one(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:  # an engine that raises under concurrency: reported by the caller
            errors[i] = exc

    threads = [threading.Thread(target=one, args=(i,), name=f"hymem-concurrency-{i}") for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r if e is None else e for r, e in zip(results, errors, strict=True)]
