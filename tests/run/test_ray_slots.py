"""Cluster-wide connection slots: a provider's limit and its 429 pause hold across Ray workers."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from evals.arms.slots import ConnectionSlots  # noqa: E402
from evals.run.executors.ray_executor import ClusterSlots, _Slots  # noqa: E402


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


@pytest.mark.ci_heavy  # the module's local Ray instance (run by `nox -s heavy`)
def test_one_connection_slot_is_shared_by_every_worker(cluster):
    actor = ray.remote(_Slots).options(max_concurrency=100).remote({"p": 1, "q": 2})
    hold = ray.remote(_hold)
    one = ray.get([hold.remote(actor, "p", 4, 0.05) for _ in range(2)])
    assert _overlaps(one[0] + one[1]) == 0  # limit 1: the two workers never call at once
    two = ray.get([hold.remote(actor, "q", 4, 0.2) for _ in range(2)])
    assert _overlaps(two[0] + two[1]) > 0  # limit 2: they do (the limit is the provider's, not a global lock)


@pytest.mark.ci_heavy  # the module's local Ray instance (run by `nox -s heavy`)
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


def _dies_holding_a_slot(actor, provider: str, marker: str) -> str:
    """Takes the provider's only slot; the first attempt is then killed, as kill -9 would, still holding it."""
    import os

    with ClusterSlots(actor, provider):
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(9)
    return "retried"


@pytest.mark.ci_heavy  # the module's local Ray instance (run by `nox -s heavy`)
def test_a_slot_held_by_a_killed_worker_is_free_for_the_retry(cluster, tmp_path):
    actor = ray.remote(_Slots).options(max_concurrency=100).remote({"p": 1})
    ref = ray.remote(_dies_holding_a_slot).options(max_retries=1).remote(actor, "p", str(tmp_path / "died"))
    assert ray.get(ref, timeout=60) == "retried"  # before: the retry waited forever for the dead attempt's slot
    assert ray.get(ray.remote(_hold).remote(actor, "p", 1, 0.0), timeout=30)  # and the slot came back


def _unit_that_dies_holding_a_slot(task, run_token, cases_ref, slots, relay=None):
    """run_unit's stand-in: the first unit dies for good holding the only slot; the next needs that slot."""
    import os

    from evals.run.executors import failed_unit

    with ClusterSlots(slots, "p"):
        if task.seed == 0:
            os._exit(9)
    return failed_unit(task, "took the slot")


@pytest.mark.ci_heavy  # the module's local Ray instance (run by `nox -s heavy`)
def test_a_unit_that_died_for_good_gives_its_slot_back(cluster, monkeypatch):
    import threading

    from evals.arms.providers import parse_lm_spec
    from evals.cases.dataset import load_cases
    from evals.run.executors import UnitTask, ray_executor

    case = load_cases([str(__import__("pathlib").Path(__file__).parents[2] / "datasets/working.jsonl")])[0]
    tasks = [UnitTask(case=case, dataset="working", label="p", system="hymem", provider=parse_lm_spec("offline"),
                      embedder="hash", plan="none", seed=seed) for seed in (0, 1)]
    monkeypatch.setattr(ray_executor, "run_unit", _unit_that_dies_holding_a_slot)
    runs: list = []
    thread = threading.Thread(target=lambda: runs.extend(ray_executor.run_ray(
        tasks, workers=1, address=None, limits={"p": 1}, cases=[case], run_token="t", max_retries=0)), daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the second unit waited forever for the slot of the first's dead worker"
    assert sorted(r.error.split(":")[0] for r in runs) == ["ray", "took the slot"]


@pytest.mark.ci_heavy  # the module's local Ray instance (run by `nox -s heavy`)
def test_the_slots_actor_comes_back_after_its_process_dies(cluster):
    """kill -9 of the ray::_Slots process: before, every later LM call of the run raised ActorDiedError, so
    every unit still to run became an infra error (and --resume keeps those)."""
    from evals.run.executors.ray_executor import slots_actor

    actor = slots_actor({"p": 1})
    assert ray.get(ray.remote(_hold).remote(actor, "p", 1, 0.0), timeout=30)
    ray.kill(actor, no_restart=False)  # the process dies as a crash would; Ray may restart it
    assert ray.get(ray.remote(_hold).remote(actor, "p", 2, 0.0), timeout=60)
