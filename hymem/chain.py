"""One model round of the write chain: call a predictor strictly, classify any failure.

Every LM call of a write goes through `run_round`, so each call site has the
same parse rules, the same error codes and the same record of what the model
said (a chain round), whatever the path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import dspy
import numpy as np

from hymem.llm import FailureKind, StrictJSONAdapter, classify_failure, raise_if_programming_error
from hymem.sites import calling, lm_site


class ChainError(RuntimeError):
    """A model round failed; `stage` is the call site and `kind` the failure class."""

    def __init__(self, stage: str, kind: FailureKind, message: str):
        super().__init__(f"{stage}: {kind}: {message}")
        self.stage = stage
        self.kind = kind


@dataclass
class Round:
    """What one model call returned, kept for the chain_rounds table and the harness."""

    stage: str
    outputs: dict[str, Any]
    seconds: float
    usage: dict[str, Any] = field(default_factory=dict)


def run_round(stage: str, predictor: dspy.Predict, lm: dspy.BaseLM, **inputs: Any) -> Round:
    """Call `predictor` once with the strict adapter, as call site `lm.<stage>`; raise ChainError on any failure."""
    start = time.perf_counter()
    try:
        with calling(lm_site(stage)), dspy.context(lm=lm, adapter=StrictJSONAdapter()):
            prediction = predictor(**inputs)
    except Exception as exc:  # every failure is classified; none becomes "no changes"
        raise_if_programming_error(exc)
        raise ChainError(stage, classify_failure(exc), f"{type(exc).__name__}: {_short(exc)}") from exc
    outputs = {name: getattr(prediction, name) for name in predictor.signature.output_fields}
    usage: dict[str, Any] = {}
    try:
        usage = dict(prediction.get_lm_usage() or {})
    except Exception:  # usage tracking is optional in DSPy
        usage = {}
    return Round(stage=stage, outputs=outputs, seconds=time.perf_counter() - start, usage=usage)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def jsonable(value: Any) -> Any:
    """Plain JSON data from model outputs and demos: pydantic models dumped, tuples as lists, arrays as lists."""
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump())
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value
