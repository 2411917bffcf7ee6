"""Prompt tuning of the engine's DSPy program against the harness's own scorer.

`evals.tuning.tune.tune` drives it; these modules hold one job each: examples and the split, the
students the optimisers compile, the metric (with GEPA feedback), the budget meter, the
optimiser wiring, and the saved program with its manifest.
"""

from evals.tuning.budget import Budget, BudgetMeter, ModelBudget
from evals.tuning.examples import (
    PROGRAM_KINDS,
    ProgramKind,
    Split,
    eligible,
    extractor_turns,
    make_examples,
    predictor_names,
    reconcile_inputs,
    split_cases,
)
from evals.tuning.metric import CaseMetric, ErrorLog, ErrorSummary, Judgement, judge_extraction, judge_reconcile
from evals.tuning.optimizers import DEFAULTS, OPTIMIZERS, compile_program, effective_settings
from evals.tuning.saved import DevScore, TuneManifest, load_manifest, load_program, program_path
from evals.tuning.students import ExtractorStudent, ReconcilerStudent, apply_to_program, make_student

__all__ = [
    "DEFAULTS",
    "OPTIMIZERS",
    "PROGRAM_KINDS",
    "Budget",
    "BudgetMeter",
    "CaseMetric",
    "DevScore",
    "ErrorLog",
    "ErrorSummary",
    "ExtractorStudent",
    "Judgement",
    "ModelBudget",
    "ProgramKind",
    "ReconcilerStudent",
    "Split",
    "TuneManifest",
    "apply_to_program",
    "compile_program",
    "effective_settings",
    "eligible",
    "extractor_turns",
    "judge_extraction",
    "judge_reconcile",
    "load_manifest",
    "load_program",
    "make_examples",
    "make_student",
    "predictor_names",
    "program_path",
    "reconcile_inputs",
    "split_cases",
]
