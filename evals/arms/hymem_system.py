"""hymem as a system under test: today's code paths (HyMemoryClient, in-process faults, read_state) behind the protocol.

Faults are injected in-process: at the `dspy.LM` engine, the embedder and the store's failpoints, so the
engine's real parsing and rollback code runs on every faulty reply.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from functools import partial
from pathlib import Path
from typing import Any

import dspy

from evals.arms.accounting import AccountingLM, price_table
from evals.arms.base import WriteOutcome, codes_of
from evals.arms.proxy import start_proxy
from evals.core.store_state import RowMemo, StoreState, read_state
from evals.core.threads import run_threads
from evals.faults.inject import FaultyEmbedder, Injector, PromptTap, faulty_lm
from evals.faults.plan import Expected, Fault, FaultPlan, expected_outcome, wire_kinds_for
from evals.record import OpRecord
from hymem.client import HyMemoryClient
from hymem.embedder import embed_checked
from hymem.models import WriteResult
from hymem.store import INDEX_FILE, LOCK_FILE, SIDECAR_FILE, Store, rebuilt_index
from hymem.store._schema import KINDS
from hymem.store._vectors import query_vector

_PRICES = price_table()
_NEW_STORES: dict[int, dict[str, bytes]] = {}  # dim -> the files of a new, empty store the engine made, once per process
_NEW_STORES_LOCK = threading.Lock()


def start_new_store(store: Path, dim: int) -> None:
    """Make `store` a copy of a new, empty store of `dim` that the engine itself created (once per process).

    Why: creating a store switches SQLite to WAL and runs the schema migrations, about eight fsyncs and 3 ms of
    CPU; every unit starts at least one. The closed store's files (not its lock file) are kept in memory and
    written out: the same store, byte for byte, with no fsync, for about a tenth of a copy's CPU (no stat, no
    permission or timestamp copy). The engine's creation path still runs (for the template), and every open of
    the copy is real.
    """
    with _NEW_STORES_LOCK:
        files = _NEW_STORES.get(dim)
        if files is None:
            with tempfile.TemporaryDirectory(prefix="hymem-new-store-") as root:
                template = Path(root) / "store"
                Store(template, dim=dim, synchronous="NORMAL").close()
                files = {p.name: p.read_bytes() for p in template.iterdir() if p.name != LOCK_FILE}
            _NEW_STORES[dim] = files
    os.makedirs(store)
    for name, data in files.items():
        fd = os.open(store / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:  # a regular file takes it whole; a short write (a signal) goes on where it stopped
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def do_write(client: HyMemoryClient, path: str, payload: Any, user_id: str, request_id: str) -> WriteResult:
    """One write of a case on its path: seeds (`add_extracted`), a working trajectory, or a chat turn.

    Run without DSPy's trace (`dspy.settings.trace`): DSPy appends every predictor call to one process-wide list
    (up to 10,000 calls, each holding the predictor, its inputs and its prediction), which an optimiser reads and
    nothing here does. Kept, it grew the heap by every write of every unit, and each full garbage collection
    walks the whole heap, so a unit cost more the later it ran."""
    with dspy.context(trace=None):
        if path == "extracted":
            return client.add_extracted(payload, user_id=user_id, request_id=request_id)
        if path == "working":
            return client.add_working(payload, user_id=user_id, request_id=request_id)
        return client.add(payload, user_id=user_id, request_id=request_id)


class HymemSystem:
    """hymem for one unit: a client per open store, faulted through one `Injector`.

    `lm_factory(case)` makes the unit's model once, on its first open (the offline, oracle and HTTP models keep
    no state between calls that a write reads); every open wraps it afresh (fault injection, accounting with its
    pending replies, the prompt tap). `accounting`, `cache` and `log` are the provider's attempt accounting, the
    response cache and the unit's attempt log.
    """

    name = "hymem"
    keeps_profile = True
    # Candidates per new fact the harness sets; the replayer checks each reconcile prompt shows that retrieval
    # (`evals.check.prompt_contract.check_candidates`).
    candidates_per_fact = 5

    def __init__(self, case: Any, lm_factory: Any, embedder: Any, plan: FaultPlan, program: Any = None, *,
                 accounting: Any = None, cache: Any = None, log: Any = None, epoch: int = 0):
        self.case, self.lm_factory, self.embedder, self.plan = case, lm_factory, embedder, plan
        self.epoch = epoch  # the repeat of the case (run --epochs): part of every response-cache key
        self.program = program
        self.accounting, self.cache, self.log = accounting, cache, log
        self.injector = Injector()
        self.client: HyMemoryClient | None = None
        self._lm: Any = None
        self._base_lm: Any = None  # lm_factory(case), made on the first open
        self._dim = 0
        # An HTTP provider under a fault plan is faulted on the wire: the targeted call goes through a fault
        # proxy (one per kind, started on first use); embedding and store faults stay in-process.
        self.wire = accounting is not None and accounting.config.is_http and plan.name != "none"
        self._proxies: dict[str, Any] = {}
        self._request_id = ""
        self._tags: list[tuple[Any, str]] = []
        self._prompts: list[dict[str, str]] = []  # what this write's model calls were shown (PromptTap)
        self._rows = RowMemo()  # the checker's per-row work, shared by every state read of this unit

    @property
    def transport(self) -> str:
        """Where LM faults are injected: `wire` (a fault proxy in front of an HTTP provider) or `in-process`."""
        return "wire" if self.wire else "in-process"

    @property
    def dim(self) -> int:
        return self._dim

    def open(self, store: Path) -> None:
        if self._base_lm is None:
            self._base_lm = self.lm_factory(self.case)
        base = self._base_lm
        lm = faulty_lm(base, self.injector) if self.plan.name != "none" and not self.wire else base
        if self.accounting is not None:
            lm = AccountingLM.wrap(lm, provider=self.accounting, log=self.log, injector=self.injector,
                                   cache=self.cache, retries=self.plan.name == "none", prices=_PRICES,
                                   wire=self._route if self.wire else None, epoch=self.epoch)
        self._lm = lm
        dim = getattr(self.embedder, "dim", None)
        if isinstance(dim, int) and dim > 0 and not store.exists():
            start_new_store(store, dim)
        self.client = HyMemoryClient(path=store, lm=PromptTap.wrap(lm, self._prompts),
                                     embedder=FaultyEmbedder(self.embedder, self.injector, self.log),
                                     reconcile_enabled=True, program=self.program,
                                     candidates_per_fact=self.candidates_per_fact,
                                     synchronous="NORMAL")  # scratch stores: a kill -9 still leaves all-or-nothing
        self._dim = self._client.dim

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    @property
    def _client(self) -> HyMemoryClient:
        """The open store's client; reading it before the first `open` is the harness's bug."""
        if self.client is None:
            raise RuntimeError("HymemSystem used before open()")
        return self.client

    def write(self, path: str, payload: Any, user_id: str, request_id: str, fault: Fault | None = None, *,
              control: bool = False) -> WriteOutcome:
        self.injector.arm(fault)
        self._request_id, self._tags = request_id, []
        self._prompts.clear()
        with self.injector.store_hook():
            result = do_write(self._client, path, payload, user_id, request_id)
        if control:
            self._cache_clean_success(result)
        return WriteOutcome(success=result.success, request_id=result.request_id, codes=codes_of(result),
                            ops=[OpRecord.model_validate(op, from_attributes=True) for op in result.ops],
                            proposed_facts=[f.model_dump() for f in result.proposed_facts],
                            proposed_ops=result.proposed_ops, message=result.message,
                            reached=dict(self.injector.reached), fired=bool(self.injector.fired),
                            wire_log=self._wire_log(), prompts=list(self._prompts),
                            duplicate=bool(getattr(result, "duplicate", False)), injected=dict(self.injector.injected))

    def _route(self, site: str) -> str | None:
        """Count the call; when the armed fault targets it, the fault proxy URL (tagged) to send it through."""
        kind = self.injector.hit(site)
        if kind is None:
            return None
        if kind not in self._proxies:
            upstream = self.accounting.config.api_base
            self._proxies[kind] = start_proxy(upstream, f"every:1:{kind}", fault_delay=0.05,
                                              timeout=self.accounting.config.timeout)
        tag = f"{self._request_id}|{site}|{len(self._tags)}"
        self._tags.append((self._proxies[kind], tag))
        return self._proxies[kind].url_for(tag)

    def _wire_log(self) -> list[dict[str, Any]]:
        """The fault proxies' own log lines for this write's routed calls (request id, kind, time)."""
        out = []
        for proxy, tag in self._tags:
            out += [entry for entry in proxy.faults() if entry.get("request_id") == tag]
        return out

    def _cache_clean_success(self, result: Any) -> None:
        """Cache this write's replies only when it succeeded with no fault injected."""
        pending = self._lm.take_pending() if isinstance(self._lm, AccountingLM) else []
        if self.cache is not None and result.success and not self.injector.fired:
            self.cache.put_many(pending)

    def memories(self, user_id: str) -> list[dict[str, Any]]:
        return [m.model_dump() for m in self._client.get_all(user_id)]

    def profile(self, user_id: str) -> dict[str, Any]:
        return self._client.profile(user_id)

    def snapshot(self, store: Path) -> StoreState:
        return read_state(store, self._rows)

    def snapshot_open(self, store: Path) -> StoreState:
        """The state of the open store, read from its files (SQLite in WAL mode serves a second, read-only
        connection): no close and reopen between a faulted write, its retry and its repeat. The index on disk
        is the one of the last close, so the FAISS part is the one SQLite implies, as on a rebuild; the index
        the engine holds is checked when the unit closes the store (`closed_store_anomalies`)."""
        return read_state(store, self._rows)

    # ---- what the write-contract checks read (evals.check.write_contract) ----
    def history(self, user_id: str) -> list[dict[str, Any]]:
        return [m.model_dump() for m in self._client.history(user_id)]

    @property
    def history_limit(self) -> int:
        return self._client.history_limit

    def search_probe(self, user_id: str) -> dict[str, list[tuple[int, float]]]:
        """The newest live memory's text searched on the open store with k = every live memory: query -> (id,
        score). One query suffices: with k that large, a memory missing from the index or a stale vector shows."""
        live = self._client.get_all(user_id)
        if not live:
            return {}
        query = max(live, key=lambda m: m.id).text
        return {query: self.search_as(user_id, query, len(live))}

    def search_as(self, user_id: str, query: str, k: int) -> list[tuple[int, float]]:
        """`user_id`'s search for `query` on the open store: (id, score) of up to k hits, as the engine answers."""
        return sorted((r.id, round(float(r.score or 0.0), 4)) for r in self._client.search(query, user_id, k=k))

    def search_ranked(self, user_id: str, query: str, k: int) -> list[tuple[int, float]]:
        """`user_id`'s search for `query` with this k, as the engine orders it (best first): (id, score)."""
        return [(r.id, float(r.score or 0.0)) for r in self._client.search(query, user_id, k=k)]

    def rebuilt_probe(self, store: Path, user_id: str, state: StoreState) -> dict[str, list[tuple[int, float]]]:
        """`search_probe` on the closed `store` with its index rebuilt from SQLite by the engine's own rebuild
        (`hymem.store.rebuilt_index`: what an open does when the index file is missing or refused), read-only.

        `state`: the closed store's state, just read from its files; its live memories give the probe's query (the
        newest one's text, embedded through the unit's embedder and logged as the client's search is) and k (all
        of them). The same index search as `Store.search`: the answers of opening a copy without its index files,
        without the copy, the open, the rebuilt file's persist and the close."""
        live = sorted((row["id"], row["text"]) for row in state.tables.get("memories", [])
                      if row["user_id"] == user_id and row["superseded_by"] is None and row["deleted_at"] is None)
        if not live:
            return {}
        index = rebuilt_index(store, self.dim)
        query = live[-1][1]
        vector = embed_checked(FaultyEmbedder(self.embedder, self.injector, self.log), [query], self.dim)[0]
        hits = index.search(user_id, query_vector(vector, self.dim), len(live), KINDS)
        return {query: sorted((mid, round(score, 4)) for mid, score in hits)}

    def without_index(self, store: Path, dest: Path, index_of: Path | None = None) -> Path:
        """A copy of a closed store without its FAISS files (opening it rebuilds the index from SQLite), or
        with those of `index_of`, an earlier copy: a stale index file, as a crash before persisting leaves."""
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(store, dest, ignore=shutil.ignore_patterns("*.lock", INDEX_FILE, SIDECAR_FILE))
        for name in (INDEX_FILE, SIDECAR_FILE):
            if index_of is not None and (index_of / name).exists():
                shutil.copy2(index_of / name, dest / name)
        return dest

    def write_concurrently(self, store: Path, calls: list[tuple[str, Any, str]], user_id: str
                           ) -> tuple[list[Any], list[dict[str, Any]], int]:
        """Send (path, payload, request_id) calls from one thread each, released together, on one open client.

        Returns the results (an exception in place of a result it raised), history and the episode counter."""
        self.injector.arm(None)
        self.open(store)
        try:
            client = self._client
            results = run_threads([partial(do_write, client, path, payload, user_id, rid) for path, payload, rid in calls])
            return results, self.history(user_id), client.store.episode(user_id)
        finally:
            self.close()

    def faults_for_write(self, plan: FaultPlan, reached: dict[str, int], seed: int, unit_key: str) -> list[Fault]:
        return plan.faults_for_write(reached, seed, unit_key, kinds=wire_kinds_for if self.wire else None)

    def expected_outcome(self, site: str, kind: str) -> Expected:
        return expected_outcome(site, kind)

    def shutdown(self) -> None:
        for proxy in self._proxies.values():
            proxy.close()
        self._proxies.clear()


__all__ = ["HymemSystem", "do_write"]
