"""Arms: one (system, provider) column of a run, and what a system needs started before its units run.

Why apart from the systems: validation must happen before any work (a missing extra, a provider an engine
cannot talk to), and what an engine needs (mem0: a local OpenAI-compatible server) lives for the whole run.
"""

from __future__ import annotations

import os
from typing import Any

import hymem.embedder as hymem_embedder  # called through the module, as evals.arms.embedders does
from evals.arms.base import DEFAULT_SYSTEM, Arm, arm_label
from evals.arms.providers import api_key
from evals.faults.plan import SITES, kinds_for
from hymem.embedder import embedder_dim
from hymem.offline import MODEL as OFFLINE_MODEL

SYSTEMS = ("hymem", "mem0")
_DEFAULT_URLS = {"openai": "https://api.openai.com/v1"}
OFFLINE_TIMEOUT = 10.0  # seconds per request to the local server: a hang fails fast, a reply takes milliseconds


def check_system(name: str) -> None:
    """ValueError for an unknown system; `Mem0Missing` (one line naming the extra) when mem0ai is absent."""
    if name not in SYSTEMS:
        raise ValueError(f"--system {name!r}: use one of {', '.join(SYSTEMS)}")
    if name == "mem0":
        # lazy: hymem-only runs never load mem0's arm
        from evals.arms.mem0_system import EXTRA_ERROR, Mem0Missing, mem0_available

        if not mem0_available():
            raise Mem0Missing(EXTRA_ERROR)


def site_kinds(system: str, paths: set[str] | None = None) -> list[tuple[str, str]]:
    """Every (fault site, kind) pair of a system, for the coverage table; for mem0, given `paths` (the write paths
    its units took), only the sites those writes could reach."""
    if system == "mem0":
        from evals.arms.mem0_system import applicable_sites  # lazy: hymem-only runs never load mem0's arm
        from evals.arms.mem0_system import kinds_for as mem0_kinds  # lazy: as above

        return [(site, kind) for site in applicable_sites(paths) for kind in mem0_kinds(site)]

    return [(site, kind) for site in SITES for kind in kinds_for(site)]


def _llm_endpoint(config: Any) -> tuple[str, str, str]:
    """(url, wire model, key) of an HTTP provider for an OpenAI-compatible client."""
    prefix, _, model = config.model.partition("/")
    url = config.api_base or _DEFAULT_URLS.get(prefix)
    if url is None:
        raise ValueError(f"--system mem0 --lm {config.name}: mem0 talks to an OpenAI-compatible endpoint; give one "
                         "as MODEL@URL or use an openai/ model")
    return url, model, api_key(config) or "none"


def validate_arm(system: str, config: Any) -> None:
    """Refuse, before any work, a provider the system cannot run with."""
    if system == DEFAULT_SYSTEM:
        return
    if config.model == "offline":
        return
    if not config.is_http:
        raise ValueError(f"--system {system} --lm {config.name}: {system} runs with offline or an HTTP model "
                         "(its own prompt is not one the oracle can answer)")
    _llm_endpoint(config)


def _embed_endpoint(spec: str) -> tuple[Any, int]:
    """(endpoint, dim) for an `--embedder openai[/MODEL][@URL]` (hash and minilm are the local server's)."""
    from evals.arms.mem0_wire import Endpoint  # lazy: hymem-only runs never load mem0's arm

    if spec == "openai" or spec.startswith(("openai/", "openai@")):
        model, _, url = spec[len("openai"):].lstrip("/").partition("@")
        key = os.environ.get("OPENAI_API_KEY") or ("hymem-local" if url.startswith("http://127.") else "")
        if not key:
            raise ValueError("--embedder openai: set OPENAI_API_KEY in the environment")
        endpoint = Endpoint(url or _DEFAULT_URLS["openai"], model or "text-embedding-3-small", key)
        return endpoint, embedder_dim(hymem_embedder.make_embedder(spec))
    raise ValueError(f"--system mem0 --embedder {spec}: use hash, minilm or openai[/MODEL][@URL]")


def open_arm(system: str, provider: Any, embedder_spec: str) -> Arm:
    """Start what the system needs for the run; `provider` is an `evals.arms.providers.Provider`.

    hymem needs nothing (its units are built by the replayer). mem0 gets the local offline server
    when the model is `offline` or the embedder is hash/minilm, and endpoints for its two clients.
    """
    label = arm_label(system, provider.name)
    if system == DEFAULT_SYSTEM:
        return Arm(system=system, provider=provider.name, label=label, make=None)
    # lazy: hymem-only runs never load mem0's arm
    from evals.arms.mem0_system import Endpoint, Mem0System, local_endpoints
    from evals.arms.serve import start_server  # lazy: the offline server starts only for a mem0 arm

    config = provider.config
    validate_arm(system, config)
    local_embedder = embedder_spec in ("hash", "minilm")
    server = start_server(embedder=embedder_spec if local_embedder else "hash") \
        if config.model == "offline" or local_embedder else None
    try:
        local = local_endpoints(server.url, embedder_spec if local_embedder else "hash") if server else None
        if config.model == "offline":
            assert local is not None  # the offline model runs behind a local server
            llm, timeout, model = local[0], OFFLINE_TIMEOUT, OFFLINE_MODEL
        else:
            url, wire_model, key = _llm_endpoint(config)
            llm, timeout, model = Endpoint(url, wire_model, key), float(config.timeout), config.model
        if local_embedder:
            assert local is not None  # so do the local embedders
            _, embed, dim = local
        else:
            embed, dim = _embed_endpoint(embedder_spec)
    except Exception:
        if server is not None:
            server.close()
        raise

    prices = (config.input_price, config.output_price)

    def make(case: Any, log: Any, *, seed: int | None = None, temperature: float | None = None) -> Mem0System:
        """One unit's mem0; `seed` and `temperature`: the epoch's sampling, as hymem's requests carry it."""
        sampling = {k: v for k, v in (("temperature", temperature), ("seed", seed)) if v is not None}
        return Mem0System(llm, embed, dim, timeout=timeout, log=log, model=model, prices=prices,
                          connections=provider.connections,  # read per unit: a Ray worker swaps in cluster slots
                          sampling=sampling if config.is_http else {})  # the offline model takes neither

    return Arm(system=system, provider=provider.name, label=label, make=make,
               close=server.close if server is not None else (lambda: None))


__all__ = ["OFFLINE_TIMEOUT", "SYSTEMS", "check_system", "open_arm", "site_kinds", "validate_arm"]
