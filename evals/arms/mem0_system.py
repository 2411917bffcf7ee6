"""mem0 (PyPI `mem0ai`, the optional extra `mem0`) as a system under test: in-process, offline, faulted on the wire.

mem0 runs with a local qdrant store and its SQLite history database in the unit's store directory,
telemetry off, and its LLM and embedder talking HTTP (openai client, no retries, explicit timeout) to the
run's endpoint: the local offline server (`mem0_offline`) with `--lm offline`, else the provider's
OpenAI-compatible URL. Faults are injected on the wire by `evals.arms.proxy`: the call a fault targets is sent
through a fault proxy (one per endpoint and kind, started when first needed), every other call goes direct.

Fault sites (`SITES`), in the order an `add` reaches them: `embed.query` (the new messages, embedded to
search existing memories), `lm.extract` (the one extraction call), `embed.facts` (occurrence n: the n-th
extracted fact; the fault hits every request that carries it, mem0's per-fact re-requests included, as a
provider rejecting that input would), `embed.entities` (entity linking; needs spaCy) and, for seeds written
with `infer=False`, `embed.memory` (occurrence n: the n-th seed). Kinds are the proxy's (`KINDS`); each must
make the write fail and store nothing, as in hymem's failure table, except `latency` (a slow, correct reply).

mem0 has no result codes: success = `add` returned, failure = it raised (the exception is kept as `raised`).
Its memories are plain text with `attributed_to`: the owner is "agent" for `attributed_to: assistant`, else
"user"; the subject is the harness's reading of a memory stored without one (`evals.core.subject_reading`): the
assistant's for an agent memory ("Suggested chamomile tea"), else the one the text names ("The user ...",
"John ..."), else the user's ("Works at Stripe"). mem0 keeps no profile (`keeps_profile = False`: the profile
metrics are not measured for it) and takes no request id (it is stored as metadata only).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sqlite3
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from evals.arms.accounting import cost, price_table
from evals.arms.base import WriteOutcome
from evals.arms.mem0_wire import Calls, Endpoint, Wire
from evals.arms.proxy import KINDS, start_proxy
from evals.core.store_state import StoreState
from evals.core.subject_reading import unlabelled_memory_subject as memory_subject
from evals.faults.plan import MEM0_EXTRACT, Expected, Fault, FaultPlan
from evals.record import OpRecord
from hymem.embedder import HashEmbedder, MiniLMEmbedder

EXTRA_ERROR = "mem0 needs the extra: pip install 'hymem[mem0]'"
SITES = ("embed.query", "lm.extract", "embed.facts", "embed.entities", "embed.memory")
LATENCY_SECONDS = 0.05  # what a `latency` fault adds: slow, well inside the client timeout
COLLECTION = "mem0"
_TABLES = {COLLECTION: "memories", f"{COLLECTION}_entities": "entities"}


class Mem0Missing(ImportError):
    """mem0ai is not installed."""


def mem0_available() -> bool:
    return importlib.util.find_spec("mem0") is not None


def import_mem0() -> Any:
    """`mem0.Memory`, imported with telemetry off and its home (~/.mem0) in a temporary directory."""
    if not mem0_available():
        raise Mem0Missing(EXTRA_ERROR)
    os.environ["MEM0_TELEMETRY"] = "False"  # read once, at import
    os.environ.setdefault("MEM0_DIR", os.path.join(tempfile.gettempdir(), "hymem-mem0-home"))
    logging.getLogger("mem0").setLevel(logging.CRITICAL)  # injected faults are logged by design
    from mem0 import Memory

    _never_download_models()
    return Memory


def _never_download_models() -> None:
    """mem0 downloads spaCy's en_core_web_sm when spaCy is installed and the model is not
    (`mem0.utils.spacy_models._ensure_model_available`); nothing may be downloaded at run time, so here a
    missing model is a failed load, which mem0 already handles by linking no entities."""
    try:
        from mem0.utils import spacy_models
    except ImportError:  # a mem0 without the shared loader downloads nothing there
        return

    def model_installed() -> None:
        if not entity_linking_available():
            raise RuntimeError("en_core_web_sm is not installed and hymem never downloads a model at run time")

    if hasattr(spacy_models, "_ensure_model_available"):
        spacy_models._ensure_model_available = model_installed


def entity_linking_available() -> bool:
    """mem0 links entities (and so calls `embed.entities`) only with spaCy and its en_core_web_sm model installed."""
    return importlib.util.find_spec("spacy") is not None and importlib.util.find_spec("en_core_web_sm") is not None


def applicable_sites(paths: set[str] | None = None) -> list[str]:
    """The sites a sweep can reach, given the write paths its units took (None: every site): `embed.memory` only
    with seeds (written with infer=False), the others only with a conversation, `embed.entities` only where mem0
    can link entities. As hymem's path-bound sites: a site no write could call is not a coverage gap."""
    if paths is None:
        return list(SITES)
    seeds, talk = "extracted" in paths, bool(paths - {"extracted"})
    applies = {"embed.memory": seeds, "embed.entities": talk and entity_linking_available()}
    return [site for site in SITES if applies.get(site, talk)]


def kinds_for(site: str) -> tuple[str, ...]:
    if site not in SITES:
        raise ValueError(f"unknown mem0 call site {site!r}")
    return KINDS


def expected_outcome(site: str, kind: str) -> Expected:
    """Every wire fault must fail the write and store nothing; a slow reply must change nothing."""
    if kind not in kinds_for(site):
        raise ValueError(f"fault {kind!r} does not apply at {site!r}")
    return Expected(success=kind == "latency")


# ---------------------------------------------------------------------------------------------- projections

def subject_of(text: str, attributed_to: Any = None) -> str:
    """The subject of a plain memory: the harness's reading of a memory stored without one (`evals.core.subject_reading`), so a
    subjectless memory mem0 attributes to the assistant is the assistant's, not the user's."""
    return memory_subject(str(text), owner_of(attributed_to))


def owner_of(attributed_to: Any) -> str:
    return "agent" if attributed_to == "assistant" else "user"


def _messages(path: str, payload: Any) -> list[dict[str, Any]]:
    if path == "extracted":  # seeds: each stored as given (mem0's infer=False)
        return [{"role": "user", "content": m["text"]} for m in payload]
    out = []
    for message in payload:
        item = {"role": message.get("role"), "content": message.get("content")}
        if message.get("name"):
            item["name"] = message["name"]
        out.append(item)
    return out


# ---------------------------------------------------------------------------------------------- the system


class Mem0System:
    """mem0 for one unit. One `Memory` for the unit; each `open` points it at that store's qdrant and history DB."""

    name = "mem0"
    keeps_profile = False  # mem0 has no profile: its profile metrics are not measured (never a 0 or a vacuous pass)
    transport = "wire"  # its LLM and embedder are faulted through a proxy in front of the local server

    def __init__(self, llm: Endpoint, embed: Endpoint, dim: int, *, timeout: float = 10.0, log: Any = None,
                 model: str | None = None, prices: tuple[float | None, float | None] | None = None,
                 connections: Any = None, sampling: dict[str, Any] | None = None):
        self.llm_endpoint, self.embed_endpoint, self._dim = llm, embed, dim
        self.timeout, self.log = timeout, log
        # the provider's model as hymem's attempts name and price it (`offline/reference`, `openai/gpt-4o-mini`),
        # and its providers-file prices: the same model costs the same whichever engine called it
        self.model, self.prices = model or llm.model, prices
        self.connections = connections  # the provider's slots (evals.arms.slots), shared with hymem's calls; None: no limit
        self.sampling = dict(sampling or {})  # temperature and seed of this epoch, over mem0's own (temperature 0.1)
        self._price_table = price_table()
        self.calls = Calls()
        self.memory: Any = None
        self._proxies: dict[tuple[str, str], Any] = {}
        self._proxy_lock = threading.Lock()
        self._open = False

    @property
    def dim(self) -> int:
        return self._dim

    # ------------------------------------------------------------------ store lifecycle
    def _config(self, store: Path) -> dict[str, Any]:
        return {
            "vector_store": {"provider": "qdrant", "config": {
                "collection_name": COLLECTION, "embedding_model_dims": self._dim, "path": str(store / "qdrant"),
                "on_disk": True}},
            "llm": {"provider": "openai", "config": {"model": self.llm_endpoint.model, "api_key": "unused",
                                                     "openai_base_url": self.llm_endpoint.url}},
            "embedder": {"provider": "openai", "config": {"model": self.embed_endpoint.model, "api_key": "unused",
                                                          "openai_base_url": self.embed_endpoint.url,
                                                          "embedding_dims": self._dim}},
            "history_db_path": str(store / "history.db"),
        }

    def open(self, store: Path) -> None:
        """Point mem0 at `store` (created on first use); the LLM and embedder clients are kept across opens."""
        self.close()
        store = Path(store)
        store.mkdir(parents=True, exist_ok=True)
        if self.memory is None:
            memory_class = import_mem0()
            self.memory = memory_class.from_config(self._config(store))
            self.memory.llm.client = Wire(self, self.llm_endpoint, self.timeout)
            self.memory.embedding_model.client = Wire(self, self.embed_endpoint, self.timeout)
        else:  # mem0's own store classes on this store's files; the local qdrant engine without its client wrapper
            from mem0.memory.storage import SQLiteManager
            from mem0.vector_stores.qdrant import Qdrant
            from qdrant_client.local.qdrant_local import QdrantLocal

            config = self.memory.config
            config.vector_store.config.path = str(store / "qdrant")
            config.history_db_path = str(store / "history.db")
            with warnings.catch_warnings():  # "payload indexes have no effect in the local Qdrant"
                warnings.simplefilter("ignore", UserWarning)
                vector_store = Qdrant(collection_name=COLLECTION, embedding_model_dims=self._dim, on_disk=True,
                                      client=QdrantLocal(location=config.vector_store.config.path))
            vector_store.is_local = True  # as mem0 sets it for a `path` store
            self.memory.vector_store = vector_store
            self.memory.db = SQLiteManager(config.history_db_path)
            self.memory._entity_store = None  # rebuilt on first use, on this store's qdrant client
        self._open = True

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        if self.memory.db is not None:
            self.memory.db.close()
            self.memory.db = None
        self.memory.vector_store.client.close()  # releases the local qdrant lock and persists its points

    def shutdown(self) -> None:
        self.close()
        for proxy in self._proxies.values():
            proxy.close()
        self._proxies.clear()

    def proxy(self, upstream: str, kind: str) -> Any:
        """The fault proxy that gives every request through it `kind` (started on first use)."""
        with self._proxy_lock:
            key = (upstream, kind)
            if key not in self._proxies:
                self._proxies[key] = start_proxy(upstream, f"every:1:{kind}", fault_delay=LATENCY_SECONDS,
                                                 timeout=self.timeout)
            return self._proxies[key]

    def attempt(self, model: str, kind_of_call: str, start: float, injected: str | None, **fields: Any) -> None:
        if self.log is None:
            return
        if kind_of_call != "embed":
            model = self.model
            if fields.get("prompt_tokens") is not None:
                fields["cost_usd"] = cost(model, fields["prompt_tokens"], fields.get("completion_tokens"),
                                          self._price_table, self.prices)
        self.log.add(model=model, site="embed" if kind_of_call == "embed" else "lm.extract",
                     latency_s=time.perf_counter() - start, injected=injected, **fields)

    # ------------------------------------------------------------------ writes and reads
    def write(self, path: str, payload: Any, user_id: str, request_id: str, fault: Fault | None = None, *,
              control: bool = False) -> WriteOutcome:
        infer = path != "extracted"
        self.calls.reset(fault, infer)
        raised = None
        try:
            result = self.memory.add(_messages(path, payload), user_id=user_id, metadata={"request_id": request_id},
                                     infer=infer)
            items = result.get("results", []) if isinstance(result, dict) else list(result or [])
        except Exception as exc:  # mem0's way of failing a write
            raised, items = f"{type(exc).__name__}: {exc}", []
        proposed = self._parse_reply(self.calls.reply) if infer else []
        attributed = {f["text"]: f for f in proposed}
        ops = [OpRecord(op=item.get("event", "ADD"), memory_id=item.get("id"), target_id=None, text=item.get("memory"),
                        subject=attributed[text]["subject"] if text in attributed else subject_of(text),
                        owner=attributed[text]["owner"] if text in attributed else "user", kind="fact", refused=None)
               for item in items for text in [item.get("memory", "")]]
        codes: dict[str, Any] = {"success": raised is None, "error_code": None, "agent_error_code": None,
                 "reconcile_error_code": None, "retry_safe": True}
        if raised is not None:
            codes["raised"] = raised.split(":", 1)[0]
        fired = any(any(r.get("request_id") == tag and r.get("applied", True) for r in proxy.faults())
                    for proxy, tag in self.calls.tags)
        return WriteOutcome(success=raised is None, request_id=request_id, codes=codes, ops=ops,
                            proposed_facts=proposed, proposed_ops=[],  # add-only: mem0 proposes no ops
                            message=raised or f"{len(ops)} memory(ies) added", reached=self.calls.reached,
                            fired=fired, call_seconds=self.calls.seconds,
                            replies=[{"site": MEM0_EXTRACT, "reply": self.calls.reply}]
                            if infer and self.calls.reply is not None else [])

    @staticmethod
    def _parse_reply(reply: str | None) -> list[dict[str, Any]]:
        """The facts the extraction reply proposed, as the scorers read them (empty when it did not parse)."""
        try:
            facts = json.loads(reply or "").get("memory", [])
            return [{"text": f["text"], "subject": subject_of(f["text"], f.get("attributed_to")),
                     "owner": owner_of(f.get("attributed_to")),
                     "kind": "fact"} for f in facts if isinstance(f, dict) and isinstance(f.get("text"), str)]
        except (ValueError, AttributeError, TypeError):
            return []

    def memories(self, user_id: str) -> list[dict[str, Any]]:
        rows = self.memory.get_all(filters={"user_id": user_id}, top_k=10_000)["results"]
        return [{"id": r["id"], "user_id": r.get("user_id", user_id), "text": r.get("memory", ""),
                 "subject": subject_of(r.get("memory", ""), r.get("attributed_to")), "owner": owner_of(r.get("attributed_to")),
                 "kind": "fact", "request_id": (r.get("metadata") or {}).get("request_id"),
                 "created_at": r.get("created_at"), "updated_at": r.get("updated_at")}
                for r in sorted(rows, key=lambda r: (r.get("created_at") or "", r.get("memory", "")))]

    def profile(self, user_id: str) -> dict[str, Any]:
        return {}  # mem0 keeps no profile

    # ------------------------------------------------------------------ checking
    def snapshot(self, store: Path) -> StoreState:
        return read_mem0_state(store)

    def faults_for_write(self, plan: FaultPlan, reached: dict[str, int], seed: int, unit_key: str) -> list[Fault]:
        return plan.faults_for_write(reached, seed, unit_key, sites=SITES, kinds=kinds_for)

    def expected_outcome(self, site: str, kind: str) -> Expected:
        return expected_outcome(site, kind)


def read_mem0_state(store: Path) -> StoreState:
    """A closed mem0 store's logical state: qdrant points (payload + vector) and every history DB table."""
    from qdrant_client.local.qdrant_local import QdrantLocal  # the local engine: QdrantClient's setup costs ~25 ms

    store = Path(store)
    tables: dict[str, list[dict[str, Any]]] = {}
    vectors: dict[Any, tuple[float, ...]] = {}
    client = QdrantLocal(location=str(store / "qdrant"))
    try:
        for collection in sorted(c.name for c in client.get_collections().collections):
            table = _TABLES.get(collection, f"qdrant:{collection}")
            points, offset = [], None
            while True:
                batch, offset = client.scroll(collection, limit=1000, offset=offset, with_payload=True,
                                              with_vectors=True)
                points += batch
                if offset is None:
                    break
            rows = []
            for point in points:
                vector = point.vector if not isinstance(point.vector, dict) else point.vector.get("", None)
                blob = np.asarray(vector if vector is not None else [], dtype=np.float32).tobytes()
                payload = dict(point.payload or {})
                rows.append({"id": str(point.id), **payload, "vector": blob})
                if table == "memories":
                    vectors[str(point.id)] = tuple(float(x) for x in np.frombuffer(blob, dtype=np.float32))
            tables[table] = rows
    finally:
        client.close()
    db_path = store / "history.db"
    if db_path.exists():
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        try:
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
            for name in names:
                if not name.startswith("sqlite_"):
                    tables[name] = [dict(r) for r in db.execute(f'SELECT * FROM "{name}"')]
        finally:
            db.close()
    return StoreState(tables=tables, faiss=vectors)


# ---------------------------------------------------------------------------------------------- the arm


def local_endpoints(url: str, embedder: str) -> tuple[Endpoint, Endpoint, int]:
    """The LLM and embedding endpoints of the local offline server, and its vector size.

    The size is the embedder class's, so the minilm model (loaded by the server) is not loaded a second time here.
    """
    if embedder not in ("hash", "minilm"):
        raise ValueError(f"embedder {embedder!r}: the local server offers hash or minilm")
    dim = MiniLMEmbedder.dim if embedder == "minilm" else HashEmbedder().dim
    return Endpoint(url, "offline", "hymem-local"), Endpoint(url, embedder, "hymem-local"), int(dim)


__all__ = ["COLLECTION", "EXTRA_ERROR", "KINDS", "SITES", "Endpoint", "Mem0Missing", "Mem0System", "applicable_sites",
           "entity_linking_available", "expected_outcome",
           "import_mem0", "kinds_for", "local_endpoints", "mem0_available", "owner_of", "read_mem0_state",
           "subject_of"]
