"""One unit of work (an arm × a case) as data, so it can be shipped to another process or machine."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from evals.arms.providers import ProviderConfig
from evals.cases.dataset import Case
from evals.cases.gold import case_gold
from evals.record import CaseRun


class UnitTask(BaseModel):
    """Everything a worker needs to replay one case for one arm: the case's content travels with it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    case: Case  # the case itself, read by the driver (workers never read datasets by path)
    dataset: str  # the dataset name the report groups by
    label: str  # the arm label: provider name, prefixed `SYSTEM/` for an engine other than hymem
    system: str  # hymem | mem0
    provider: ProviderConfig  # how to reach the model (keys are read from the worker's environment)
    embedder: str  # the embedder spec (hash, minilm, openai...)
    plan: str  # the fault plan, as `--faults` spells it
    seed: int
    epoch: int = 0  # the repeat of the case (run --epochs)
    sampling_seed: int | None = None  # the epoch's sampling seed for the provider; None with one epoch
    temperature: float | None = None  # run --temperature
    cache_path: str | None = None  # the response cache file for HTTP providers, None: no cache
    prompt_hash: str = ""  # the run's prompt hash: part of every response-cache key
    program: Any = None  # a tuned MemoryProgram, or None for the built-in prompts


def failed_unit(task: UnitTask, reason: str) -> CaseRun:
    """The record of a unit that never finished (its worker died for good): an infra error, never missing."""
    return CaseRun(case_id=task.case.id, dataset=task.dataset, provider=task.label, system=task.system,
                   epoch=task.epoch, lang=task.case.lang, tags=list(task.case.tags), gold=case_gold(task.case),
                   status="infra_error", error=reason)


__all__ = ["UnitTask", "failed_unit"]
