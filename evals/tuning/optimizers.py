"""The three DSPy optimisers behind one call, with defaults that fit a small curated suite.

Only the train set is given to an optimiser (MIPROv2 carves its own validation share out of
it, GEPA tracks its Pareto front on it), so the dev set stays unseen until the before/after
score. Settings are validated against each optimiser's real arguments, and the effective
settings are returned for the tuning manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args

import dspy
from pydantic import Field, TypeAdapter, ValidationError

OptimizerName = Literal["bootstrap", "mipro", "gepa"]
OPTIMIZERS: tuple[str, ...] = get_args(OptimizerName)

# Defaults; every key may be overridden with --setting KEY=VALUE.
DEFAULTS: dict[str, dict[str, Any]] = {
    "bootstrap": {
        "max_bootstrapped_demos": 4,
        "max_labeled_demos": 0,  # a case-level example carries no predictor fields: it would never reach a prompt
        "max_rounds": 1,
        "metric_threshold": 1.0,  # only traces the scorer calls fully right become demos
        "max_errors": None,  # None: dspy.settings.max_errors
    },
    "mipro": {
        "auto": "light",
        "num_candidates": None,
        "num_trials": None,
        "max_bootstrapped_demos": 2,
        "max_labeled_demos": 0,
        "metric_threshold": 1.0,
        "num_threads": 4,
        "max_errors": None,
        "init_temperature": 1.0,
        "minibatch": None,  # None: only when the validation share exceeds minibatch_size
        "minibatch_size": 35,
        "minibatch_full_eval_steps": 5,
        "program_aware_proposer": True,
        "data_aware_proposer": True,
        "view_data_batch_size": 10,
        "tip_aware_proposer": True,
        "fewshot_aware_proposer": True,
    },
    "gepa": {
        "auto": "light",
        "max_metric_calls": None,
        "max_full_evals": None,
        "reflection_minibatch_size": 3,
        "candidate_selection_strategy": "pareto",
        "skip_perfect_score": True,
        "use_merge": True,
        "max_merge_invocations": 5,
        "num_threads": 4,
    },
}
# What each setting takes: a wrong type or a count below its floor is refused before any work, not met as a
# traceback inside the optimiser (or, for a negative count, silently as "no demos").
_Count = Annotated[int, Field(strict=True, ge=0)]
_Positive = Annotated[int, Field(strict=True, ge=1)]
_Flag = Annotated[bool, Field(strict=True)]
_Threshold = Annotated[float, Field(ge=0, le=1)] | None  # the metric's scores lie in [0, 1]
_Auto = Literal["light", "medium", "heavy"] | None
_TYPES: dict[str, Any] = {
    "max_bootstrapped_demos": _Count, "max_labeled_demos": _Count, "max_rounds": _Positive,
    "metric_threshold": _Threshold, "max_errors": _Count | None, "auto": _Auto, "num_candidates": _Positive | None,
    "num_trials": _Positive | None, "num_threads": _Positive, "init_temperature": Annotated[float, Field(ge=0)],
    "minibatch": _Flag | None, "minibatch_size": _Positive, "minibatch_full_eval_steps": _Positive,
    "program_aware_proposer": _Flag, "data_aware_proposer": _Flag, "view_data_batch_size": _Positive,
    "tip_aware_proposer": _Flag, "fewshot_aware_proposer": _Flag, "max_metric_calls": _Positive | None,
    "max_full_evals": _Positive | None, "reflection_minibatch_size": _Positive,
    "candidate_selection_strategy": Literal["pareto", "current_best"], "skip_perfect_score": _Flag,
    "use_merge": _Flag, "max_merge_invocations": _Count,
}
_MIPRO_COMPILE = ("num_trials", "minibatch", "minibatch_size", "minibatch_full_eval_steps", "program_aware_proposer",
                  "data_aware_proposer", "view_data_batch_size", "tip_aware_proposer", "fewshot_aware_proposer")
_BUDGETS = {"mipro": ("auto", "num_candidates"), "gepa": ("auto", "max_metric_calls", "max_full_evals")}


def effective_settings(optimizer: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """Defaults with `overrides` applied; naming a budget (e.g. max_metric_calls) turns `auto` off."""
    if optimizer not in DEFAULTS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    unknown = sorted(set(overrides) - set(DEFAULTS[optimizer]))
    if unknown:
        raise ValueError(f"{optimizer}: unknown setting(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(DEFAULTS[optimizer]))}")
    for key, value in overrides.items():
        try:
            TypeAdapter(_TYPES[key]).validate_python(value)
        except ValidationError as exc:
            problem = "; ".join(e["msg"] for e in exc.errors())
            raise ValueError(f"{optimizer}: setting {key}={value!r}: {problem}") from None
    settings = {**DEFAULTS[optimizer], **overrides}
    budget_keys = _BUDGETS.get(optimizer, ())
    if "auto" not in overrides and any(overrides.get(k) is not None for k in budget_keys if k != "auto"):
        settings["auto"] = None
    if optimizer == "gepa" and sum(settings[k] is not None for k in budget_keys) != 1:
        raise ValueError("gepa: set exactly one of auto, max_metric_calls, max_full_evals")
    if optimizer == "mipro" and settings["auto"] is None and (settings["num_candidates"] is None
                                                               or settings["num_trials"] is None):
        raise ValueError("mipro: without auto, set both num_candidates and num_trials")
    return settings


def compile_program(optimizer: str, student: dspy.Module, trainset: list[dspy.Example],
                    metric: Callable[..., Any], *, settings: dict[str, Any], seed: int, teacher_lm: dspy.BaseLM | None,
                    prompt_lm: dspy.BaseLM | None) -> dspy.Module:
    """Compile `student` with the named optimiser; the task model is `dspy.settings.lm` (set by the caller)."""
    s = dict(settings)
    teacher = {"lm": teacher_lm} if teacher_lm is not None else None
    if optimizer == "bootstrap":
        tp = dspy.BootstrapFewShot(metric=metric, teacher_settings=teacher, **s)
        return tp.compile(student, trainset=trainset)
    if optimizer == "mipro":
        compile_kw = {k: s.pop(k) for k in _MIPRO_COMPILE}
        if compile_kw["minibatch"] is None:
            valset_size = max(1, int(len(trainset) * 0.8))  # MIPROv2's own share when no valset is given
            compile_kw["minibatch"] = valset_size > compile_kw["minibatch_size"]
        if s["auto"] is not None:
            s.pop("num_candidates")
            compile_kw.pop("num_trials")
        tp = dspy.MIPROv2(metric=metric, prompt_model=prompt_lm, task_model=dspy.settings.lm, teacher_settings=teacher,
                          seed=seed, verbose=False, track_stats=False, **s)
        return tp.compile(student, trainset=trainset, seed=seed, **compile_kw)
    if optimizer == "gepa":
        if teacher_lm is not None:
            raise ValueError("gepa takes no teacher model; its reflection model is the prompt model")
        tp = dspy.GEPA(metric=metric, reflection_lm=prompt_lm, seed=seed, track_stats=False, **s)
        return tp.compile(student, trainset=trainset)
    raise ValueError(f"unknown optimizer {optimizer!r}")


__all__ = ["DEFAULTS", "OPTIMIZERS", "OptimizerName", "compile_program", "effective_settings"]
