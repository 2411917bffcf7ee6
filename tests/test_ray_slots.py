"""Cluster-wide connection slots: a provider's limit and its 429 pause hold across Ray workers."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from evals.executors.ray_executor import ClusterSlots, _Slots  # noqa: E402
from evals.slots import ConnectionSlots  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    import sys

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not importable on a worker
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def _hold(slots_actor, provider: str, calls: int, seconds: float) -> list[tuple[float, float]]:
    slots = ClusterSlots(slots_actor, provider)
    spans = []
    for _ in range(calls):
        with slots:
            start = time.time()
            time.sleep(seconds)
            spans.append((start, time.time()))
    return spans


def _overlaps(spans: list[tuple[float, float]]) -> int:
    spans = sorted(spans)
    return sum(1 for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1] - 1e-3)


def test_one_connection_slot_is_shared_by_every_worker(cluster):
    actor = ray.remote(_Slots).options(max_concurrency=100).remote({"p": 1, "q": 2})
    hold = ray.remote(_hold)
    one = ray.get([hold.remote(actor, "p", 4, 0.05) for _ in range(2)])
    assert _overlaps(one[0] + one[1]) == 0  # limit 1: the two workers never call at once
    two = ray.get([hold.remote(actor, "q", 4, 0.2) for _ in range(2)])
    assert _overlaps(two[0] + two[1]) > 0  # limit 2: they do (the limit is the provider's, not a global lock)


def test_a_429_pause_told_to_one_worker_holds_the_others(cluster):
    actor = ray.remote(_Slots).options(max_concurrency=100).remote({"p": 4})
    told = time.time()
    ClusterSlots(actor, "p").pause(1.0)
    spans = ray.get(ray.remote(_hold).remote(actor, "p", 1, 0.0))
    assert spans[0][0] - told >= 0.9


def test_local_slots_share_the_pause_across_threads():
    import threading

    slots = ConnectionSlots(2)
    slots.pause(0.5)
    told, starts = time.monotonic(), []

    def call():
        with slots:
            starts.append(time.monotonic())

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert min(starts) - told >= 0.45
