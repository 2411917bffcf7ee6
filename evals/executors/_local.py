"""The local executor: units on a thread pool in this process (the default)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any


def run_local(units: Sequence[Any], run_one: Callable[[Any], Any], concurrency: int) -> Iterator[Any]:
    """Yield `run_one(unit)` for every unit as it finishes; an interrupt cancels the units not started."""
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="hymem-unit")
    try:
        futures = {pool.submit(run_one, unit) for unit in units}
        while futures:
            finished, futures = wait(futures, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                yield future.result()
    except BaseException:  # KeyboardInterrupt, or the consumer closing the generator
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


__all__ = ["run_local"]
