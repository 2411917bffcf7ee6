"""The Ray executor: each unit is a Ray task, on a local Ray instance or an existing cluster.

Why Ray and not a home-made pool of processes: scheduling, worker restarts (`max_retries`), object
transfer and joining a cluster are Ray's job. What stays ours:
- a task carries its case's content (`UnitTask`); the run's full case list (which a noisy oracle plans
  its errors over) goes to the object store once and is read by a worker only when it needs it;
- a worker process keeps what is costly to build (the embedding model, providers, the response cache,
  an engine's local server) across the tasks it runs;
- one `ProviderSlots` actor holds every provider's connection limit and its rate-limit pause for the
  whole cluster, so `max_connections` and a 429's Retry-After hold across all workers;
- a task lost with its worker is retried by Ray; if it still fails, the unit is an infra error with the
  reason, never silently missing;
- a worker sends each finished write's journal line back, and the driver appends it to the run directory's
  journal, as a local unit does itself (`_ray_journal`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Generator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from evals.arms.accounting import ResponseCache
from evals.arms.embedders import resolve_embedder
from evals.arms.providers import Provider
from evals.arms.registry import open_arm
from evals.faults.plan import FaultPlan
from evals.run.executors._ray_journal import JournalIntake, Progress, RelayedJournal, relay_actor, unit_key
from evals.run.executors._unit import UnitTask, failed_unit
from evals.run.replay import CaseReplayer, UnitModels
from evals.run.scratch import drain as drain_scratch

MAX_RETRIES = 2  # Ray re-runs a task whose worker died this many times before it is an infra error


class RayUnavailable(RuntimeError):
    """`--executor ray` without the extra installed."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable("--executor ray needs Ray: pip install 'hymem[ray]'") from exc
    return ray


class _Slots:
    """The actor behind cluster-wide connection slots (an async actor: waiting callers cost no thread).

    Each slot handed out is a lease held by a (task, worker). A worker killed while it holds a slot never
    releases it, so a lease outlives its holder in two ways, both freed here: Ray retries the task on
    another worker (its first `acquire` frees the dead attempt's leases), or the task ends for good (the
    driver calls `release_task`). Without this, every kill -9 mid-call cost the provider a slot for the
    rest of the run, and with one connection the run waited forever.
    """

    def __init__(self, limits: dict[str, int]):
        self._limits = limits
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._resume_at: dict[str, float] = {}
        self._leases: dict[str, list[tuple[str, str]]] = {}  # provider -> (task, worker) of each slot held

    def _semaphore(self, provider: str) -> asyncio.Semaphore:
        if provider not in self._semaphores:
            self._semaphores[provider] = asyncio.Semaphore(self._limits.get(provider, 1))
        return self._semaphores[provider]

    def _free(self, stale: Any) -> None:
        for provider, leases in self._leases.items():
            for lease in [lease for lease in leases if stale(lease)]:
                leases.remove(lease)
                self._semaphore(provider).release()

    async def acquire(self, provider: str, task: str = "", worker: str = "") -> None:
        if task:  # a task runs on one worker at a time: its leases held on another worker are a dead attempt's
            self._free(lambda lease: lease[0] == task and lease[1] != worker)
        await self._semaphore(provider).acquire()
        self._leases.setdefault(provider, []).append((task, worker))
        wait = self._resume_at.get(provider, 0.0) - time.time()
        if wait > 0:
            await asyncio.sleep(wait)

    async def release(self, provider: str, task: str = "", worker: str = "") -> None:
        leases = self._leases.get(provider, [])
        if (task, worker) in leases:  # already freed by release_task: releasing again would raise the limit
            leases.remove((task, worker))
            self._semaphore(provider).release()

    async def release_task(self, task: str) -> None:
        """The task finished (or died for good): any slot it still holds is free."""
        self._free(lambda lease: lease[0] == task)

    async def pause(self, provider: str, seconds: float) -> None:
        self._resume_at[provider] = max(self._resume_at.get(provider, 0.0), time.time() + max(0.0, seconds))


class ClusterSlots:
    """`ConnectionSlots` for a worker: the limit and the pause live in the run's `_Slots` actor."""

    def __init__(self, actor: Any, provider: str):
        self.actor, self.provider = actor, provider

    def pause(self, seconds: float) -> None:
        """Waits until the actor has the pause, so every slot handed out after this call honours it."""
        _ray().get(self.actor.pause.remote(self.provider, seconds))

    def _holder(self) -> tuple[str, str]:
        context = _ray().get_runtime_context()
        return context.get_task_id() or "", context.get_worker_id()

    def __enter__(self) -> ClusterSlots:
        _ray().get(self.actor.acquire.remote(self.provider, *self._holder()))
        return self

    def __exit__(self, *exc: object) -> None:
        self.actor.release.remote(self.provider, *self._holder())


class _WorkerState:
    """What one worker process keeps across the tasks it runs (built on first use)."""

    embedders: dict[str, Any] = {}
    providers: dict[tuple[str, str], Any] = {}
    caches: dict[tuple[str, str], Any] = {}
    arms: dict[tuple[str, str, str], Any] = {}


def _embedder(spec: str) -> Any:
    if spec not in _WorkerState.embedders:
        _WorkerState.embedders[spec] = resolve_embedder(spec)[1]
    return _WorkerState.embedders[spec]


def _provider(task: UnitTask, run_token: str, cases_ref: list, slots: Any) -> Any:
    key = (run_token, task.provider.model_dump_json())
    if key not in _WorkerState.providers:
        ray = _ray()
        cases = ray.get(cases_ref[0]) if task.provider.model.startswith("oracle") else [task.case]
        provider = Provider(task.provider, cases)
        if task.provider.is_http:
            provider.connections = ClusterSlots(slots, task.provider.name)
        _WorkerState.providers[key] = provider
    return _WorkerState.providers[key]


def _cache(path: str | None, prompt_hash: str = "") -> Any:
    if path is None:
        return None
    if (path, prompt_hash) not in _WorkerState.caches:
        from pathlib import Path


        _WorkerState.caches[(path, prompt_hash)] = ResponseCache(Path(path), prompt_hash=prompt_hash)
    return _WorkerState.caches[(path, prompt_hash)]


def _arm(task: UnitTask, provider: Any) -> Any:
    key = (task.system, task.provider.model_dump_json(), task.embedder)
    if key not in _WorkerState.arms:
        _WorkerState.arms[key] = open_arm(task.system, provider, task.embedder)
    return _WorkerState.arms[key]


def run_unit(task: UnitTask, run_token: str, cases_ref: list, slots: Any, relay: Any = None) -> Any:
    """A worker runs one unit exactly as the local executor would, and returns its `CaseRun`; with a `relay`, each
    finished write's journal line goes to it as the unit runs (all of them before the record is returned)."""
    logging.getLogger("hymem.store").setLevel(logging.CRITICAL)  # injected FAISS faults are logged by design
    provider = _provider(task, run_token, cases_ref, slots)
    arm = _arm(task, provider)
    cache = _cache(task.cache_path, task.prompt_hash) if task.provider.is_http else None
    lm = provider.sampling(task.sampling_seed, task.temperature)
    system = partial(arm.make, seed=task.sampling_seed, temperature=task.temperature) if arm.make is not None else None
    journal = RelayedJournal(relay, task) if relay is not None else None
    try:
        models = UnitModels(lm_factory=lm, embedder=_embedder(task.embedder), program=task.program,
                            accounting=provider, cache=cache)
        return CaseReplayer(task.case, task.dataset, task.label, models, FaultPlan.parse(task.plan), task.seed,
                            system=system, epoch=task.epoch,
                            journal=journal.write_done if journal is not None else None).run()
    finally:
        if journal is not None:
            journal.flush()
        drain_scratch()  # a worker may be stopped without running exit handlers: leave no scratch behind


def check_address(address: str) -> None:
    """Refuse an address Ray cannot use, in one line and at once: a malformed one made Ray raise a traceback,
    and an unreachable one made it retry for minutes (a GCS address) or time out as if the disk had failed
    (a `ray://` one). Raises ValueError naming the address."""
    import socket
    from urllib.parse import urlsplit

    if address == "auto":  # Ray finds the cluster (RAY_ADDRESS, or the one `ray start` made here)
        return
    client = address.startswith("ray://")
    try:
        url = urlsplit(address if client else f"//{address}")
        host, port = url.hostname, url.port
    except ValueError:
        host, port = None, None
    if not host or port is None or (url.path or url.query) or (not client and "://" in address):
        raise ValueError(f"--ray-address {address!r}: use HOST:PORT (the head's GCS, e.g. 10.0.0.1:6379), "
                         "ray://HOST:PORT (Ray Client, e.g. ray://head:10001) or auto")
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as exc:
        raise ValueError(f"--ray-address {address}: cannot reach {host}:{port} "
                         f"({exc.strerror or type(exc).__name__}); is the cluster's head running?") from None


def connect(address: str | None, workers: int) -> bool:
    """Join the cluster at `address`, or start a local Ray instance with `workers` CPUs.
    Returns True when this call started Ray (so the run shuts it down again).

    Without an address the instance is always a new local one (`address="local"`): Ray would otherwise join
    the cluster RAY_ADDRESS or an earlier `ray start` names, and then refuse `num_cpus` with a traceback."""
    ray = _ray()
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                               "logging_level": logging.ERROR, "configure_logging": True}
    if address and not address.startswith("ray://"):  # one GCS connect (about 40 s), not Ray's 20 (13 minutes)
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "1")  # on a port that is not a GCS; yours wins
    try:
        if address:
            ray.init(address=address, **options)
        else:
            ray.init(address="local", num_cpus=workers, **options)
    except Exception as exc:  # ConnectionError, TimeoutError, ValueError, RuntimeError: Ray's own, one line
        where = f"--ray-address {address}" if address else "a local Ray instance"
        raise RayUnavailable(f"{where}: Ray did not start or join: {_last_line(exc)}") from None
    return True


def slots_actor(limits: dict[str, int]) -> Any:
    """The run's `_Slots` actor. Ray restarts it if its process dies (kill -9, OOM) and re-sends the calls it was
    running: before, every unit still to call a provider became an infra error (ActorDiedError), and --resume
    keeps infra errors. A restarted actor starts with every slot free and no pause; the slots its old self had
    handed out are given back as no-ops, so the limit is exceeded at most by the calls then in flight."""
    return _ray().remote(_Slots).options(max_concurrency=10_000, max_restarts=-1, max_task_retries=-1).remote(limits)


def run_ray(tasks: Sequence[UnitTask], *, workers: int, address: str | None, limits: dict[str, int],
            cases: Sequence[Any], run_token: str, max_retries: int = MAX_RETRIES, run_dir: Path | None = None,
            progress: Progress | None = None) -> Generator[Any, None, None]:
    """Yield each unit's `CaseRun` as it finishes, in any order. At most `workers` tasks are in flight.

    With `run_dir`, each unit's finished writes are appended to its journal there while it runs (and, with
    `progress`, shown as `write i/N`); a unit's journal is closed before its `CaseRun` is yielded.
    An interrupt (or the consumer closing the generator) cancels every task still running; what was
    yielded before is the caller's to keep, so the run can be resumed.
    """
    ray = _ray()
    started = connect(address, workers)
    try:
        slots = slots_actor(limits)
        relay = relay_actor() if run_dir is not None else None
        journals = JournalIntake(run_dir, relay, progress) if run_dir is not None else None
        remote = ray.remote(run_unit).options(num_cpus=1, max_retries=max_retries)
        cases_ref = [ray.put(list(cases))]  # nested in a list: a worker resolves it only when it needs it
        queue = list(reversed(tasks))
        pending: dict[Any, UnitTask] = {}
        try:
            while queue or pending:
                while queue and len(pending) < workers:
                    task = queue.pop()
                    if journals is not None:
                        journals.expect(task)
                    pending[remote.remote(task, run_token, cases_ref, slots, relay)] = task
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                if journals is not None:
                    journals.take()  # after the wait: a finished unit's worker had sent its lines before it returned
                for ref in ready:
                    task = pending.pop(ref)
                    slots.release_task.remote(ref.task_id().hex())  # a slot its dead worker held is free again
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # the worker died max_retries + 1 times, or the task raised
                        result = failed_unit(task, f"ray: {type(exc).__name__}: {_last_line(exc)}")
                    if journals is not None:
                        journals.end(unit_key(task))
                    yield result
        except BaseException:
            if journals is not None:  # keep the lines the relay still holds: the finished writes of the units stopped
                journals.take(timeout=5)
                journals.close()
            if not started:  # a cluster's tasks outlive this driver: cancel them; a local instance we
                # started is shut down below, which stops its workers. (Cancelling there too races a
                # task's reply in Ray's own task manager, which then aborts the driver: seen under load.)
                for ref in pending:
                    ray.cancel(ref, force=True)
            raise
    finally:
        if started:
            ray.shutdown()


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1][:300] if text else type(exc).__name__


__all__ = ["MAX_RETRIES", "ClusterSlots", "RayUnavailable", "check_address", "connect", "slots_actor", "run_ray", "run_unit"]
