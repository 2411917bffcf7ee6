"""The run manifest: what was run, with what, so a result can be reproduced, resumed or compared.

`manifest_hash` covers exactly what changes results (datasets, engine version, prompts, fault plan,
seed, providers with each one's model, endpoint and prices, embedder, epochs and sampling temperature);
`--resume` refuses a run whose hash differs.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from pydantic import BaseModel, Field

from evals.record._version import SCHEMA_VERSION


class Manifest(BaseModel):
    """Written first as `manifest.json` in the run directory, completed when the run ends."""

    schema_version: int = SCHEMA_VERSION
    run_id: str  # directory name of the run
    created: float = Field(default_factory=time.time)  # unix time the run started
    finished: float | None = None  # unix time the report was written; None while running
    datasets: list[str]  # dataset specs as given
    dataset_hash: str  # sha256 over the cases' canonical JSON
    case_hashes: dict[str, str] = Field(default_factory=dict)  # "dataset/case_id" -> its content hash (the gate)
    n_cases: int
    providers: list[str]  # provider specs as given (never keys)
    provider_specs: dict[str, dict[str, Any]] = Field(default_factory=dict)  # name -> ProviderConfig.spec() (never keys)
    embedder: str
    faults: str  # fault plan
    seed: int
    epochs: int = 1  # every unit ran this many times (run --epochs), epoch e with sampling seed epoch_seed(seed, e)
    temperature: float | None = None  # the sampling temperature passed to providers that take one (run --temperature)
    concurrency: int  # run --concurrency: requests to each provider at once, unless max_connections says otherwise
    units_in_flight: int | None = None  # units the local executor kept in flight (None: Ray, or runs before it was kept)
    max_connections: dict[str, int] = Field(default_factory=dict)  # provider -> its connection limit in this run
    engine_version: str
    prompt_hash: str  # fingerprint of every instruction and demo the engine sends
    program: str | None = None  # tuned program directory (run --program); None: the built-in prompts
    matcher_spec: str = "text"  # --matcher: semantic | text | llm:MODEL_SPEC (runs before it existed: text)
    matcher: dict[str, Any] | None = None  # the matcher's card: spec, fingerprint, held-out agreement with 95% CI
    git_commit: str | None = None
    git_dirty: bool | None = None
    packages: dict[str, str] = Field(default_factory=dict)
    verdict: str | None = None  # valid | invalid | unknown, once finished
    manifest_hash: str = ""

    def compute_hash(self) -> str:
        keys = {"datasets": self.dataset_hash, "engine": self.engine_version, "prompts": self.prompt_hash,
                "faults": self.faults, "seed": self.seed, "providers": self.providers, "embedder": self.embedder}
        if self.epochs != 1:  # one epoch keeps the hash runs had before epochs existed (--resume, baselines)
            keys["epochs"] = self.epochs
        if self.temperature is not None:
            keys["temperature"] = self.temperature
        # A provider its name fully describes (offline, oracle:...) adds nothing, so such runs keep the hash they
        # had before specs were recorded; a named one's model, endpoint and prices are part of the run.
        specs = {name: spec for name, spec in self.provider_specs.items() if spec != {"model": name}}
        if specs:
            keys["provider_specs"] = specs
        return hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]


def epoch_seed(seed: int, epoch: int) -> int:
    """The sampling seed of one epoch: epoch 0 keeps the run's seed, later epochs get distinct derived ones."""
    if epoch == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"{seed}:epoch:{epoch}".encode()).digest()[:4], "big") & 0x7FFFFFFF
