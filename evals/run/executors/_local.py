"""The local executor: units on a thread pool in this process (the default)."""

from __future__ import annotations

import queue
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


def run_local(units: Sequence[Any], run_one: Callable[[Any], Any], concurrency: int) -> Generator[Any, None, None]:
    """Yield `run_one(unit)` for every unit as it finishes; an interrupt cancels the units not started.

    Each finished future hands itself to the consumer through a queue: O(1) per unit, where waiting on the
    set of pending futures again after every unit installs and removes a waiter on each of them (O(units²)).
    """
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="hymem-unit")
    done: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()
    try:
        for unit in units:
            pool.submit(run_one, unit).add_done_callback(done.put)
        for _ in range(len(units)):
            while True:
                try:  # a timeout keeps Ctrl-C prompt on every platform
                    future = done.get(timeout=0.5)
                    break
                except queue.Empty:
                    continue
            yield future.result()
    except BaseException:  # KeyboardInterrupt, or the consumer closing the generator
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


__all__ = ["run_local"]
