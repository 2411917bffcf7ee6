"""A tuned program on disk: DSPy's own state file plus a manifest saying how it was made.

`DIR/program.json` is `MemoryProgram.save` output (instructions and demos of every predictor),
so `MemoryProgram().load(DIR / "program.json")` restores it; `DIR/tune_manifest.json` records
the data, optimiser, settings, seed, models (specs, never keys), budget, errors and scores.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evals.cases.dataset import Case, load_cases
from evals.tuning.budget import Budget
from evals.tuning.examples import turn_keys
from evals.tuning.metric import ErrorSummary
from hymem.program import MemoryProgram

SCHEMA_VERSION = 1
PROGRAM_FILE = "program.json"
MANIFEST_FILE = "tune_manifest.json"


class DevScore(BaseModel):
    """The metric over the dev cases; failed predictions are counted apart, not averaged in as zeros."""

    n: int  # dev examples
    scored: int  # examples whose prediction did not fail
    score: float | None  # mean metric over scored examples; None when none scored
    score_with_errors: float | None  # the same with each failure counted as 0
    errors: ErrorSummary
    per_case: dict[str, float | None] = Field(default_factory=dict)  # case id -> score (None: failed)


class TuneManifest(BaseModel):
    """Written next to program.json; everything needed to reproduce or judge the tuned program."""

    schema_version: int = SCHEMA_VERSION
    created: float = Field(default_factory=time.time)  # unix time tuning finished
    program: str  # extractor | reconciler
    predictors: list[str]  # MemoryProgram predictors that were tuned
    optimizer: str  # bootstrap | mipro | gepa
    settings: dict[str, Any]  # the optimiser's effective settings
    seed: int
    lm: str  # task model spec (never a key)
    teacher_lm: str | None = None  # model that ran the program for demos (bootstrap, mipro)
    prompt_lm: str | None = None  # proposing (mipro) / reflecting (gepa) model
    train: list[str]  # dataset specs as given
    dev: list[str] | None = None  # dataset specs as given; None: a seeded split of train
    dev_fraction: float | None = None  # share of train drawn as dev when dev is None
    train_hash: str  # sha256 over the train cases' canonical JSON (evals.cases.dataset.dataset_hash)
    dev_hash: str
    train_ids: list[str]
    dev_ids: list[str]
    overlap_removed: list[str] = Field(default_factory=list)  # train ids given in dev too, or sharing a turn with a dev case: dev only
    skipped: dict[str, str] = Field(default_factory=dict)  # case id -> why it could not be used
    prompt_fingerprint_before: str  # MemoryProgram.prompt_fingerprint() of the starting program
    prompt_fingerprint_after: str  # ... of the saved program as loaded back from disk
    demos: dict[str, int] = Field(default_factory=dict)  # predictor -> demos saved
    instructions_changed: list[str] = Field(default_factory=list)  # predictors whose instructions changed
    demos_dropped: int = 0  # labelled demos with no predictor fields, never saved
    train_errors: ErrorSummary  # failed predictions while the optimiser ran
    budget: dict[str, Budget] = Field(default_factory=dict)  # phase (compile, dev_eval) -> spend
    dev_before: DevScore
    dev_after: DevScore
    # the metric's matcher: spec and fingerprint (spec and parameters); an LLM judge's calls and failed calls
    matcher: dict[str, Any] | None = None
    engine_version: str
    git_commit: str | None = None
    git_dirty: bool | None = None
    packages: dict[str, str] = Field(default_factory=dict)


def program_path(path: str | Path) -> Path:
    """The program.json a `--program` argument names: the file itself or the directory holding it."""
    path = Path(path)
    return path / PROGRAM_FILE if path.is_dir() else path


def load_program(path: str | Path) -> MemoryProgram:
    """A MemoryProgram with the saved state of `path` (a tuned directory or its program.json)."""
    file = program_path(path)
    if not file.is_file():
        raise ValueError(f"{path}: no {PROGRAM_FILE} here (expected the --out directory of `hymem-eval tune`)")
    program = MemoryProgram()
    try:
        _check_state(json.loads(file.read_text(encoding="utf-8")), program)
        program.load(file)
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"{file}: not a saved MemoryProgram ({type(exc).__name__}: {exc})") from exc
    return program


class _SavedField(BaseModel):
    prefix: str
    description: str


class _SavedSignature(BaseModel):
    instructions: str
    fields: list[_SavedField]


class _SavedPredictor(BaseModel):
    model_config = ConfigDict(extra="allow")

    demos: list[dict[str, Any]]
    signature: _SavedSignature


def _check_state(state: Any, program: MemoryProgram) -> None:
    """Each predictor's saved state has the shape DSPy's load expects: a wrong one would otherwise load
    silently (a string of demos reaches no prompt, yet changes the prompt hash) or fail with a traceback."""
    if not isinstance(state, dict):
        raise ValueError(f"expected a JSON object, got {type(state).__name__}")
    for name, predictor in program.named_predictors():
        if name not in state:
            raise ValueError(f"{name}: missing")
        try:
            saved = _SavedPredictor.model_validate(state[name])
        except ValidationError as exc:
            first = exc.errors()[0]
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
            raise ValueError(f"{name}{where}: {first['msg']}") from None
        if len(saved.signature.fields) != len(predictor.signature.fields):
            raise ValueError(f"{name}.signature.fields: {len(saved.signature.fields)} fields, the engine's "
                             f"signature has {len(predictor.signature.fields)}")
        for i, demo in enumerate(saved.demos):
            if not set(demo) & set(predictor.signature.fields):  # it would reach no prompt
                raise ValueError(f"{name}.demos[{i}]: fields {sorted(demo)} are not {name}'s "
                                 f"({', '.join(predictor.signature.fields)})")


def fitted_cases(path: str | Path, cases: Sequence[Case]) -> list[str]:
    """Ids of `cases` the tuned program in `path` was fitted on: those sharing a turn with its train.jsonl
    (by id when only the manifest is there). Empty for a program saved without tune's files."""
    folder = program_path(path).parent
    if (folder / "train.jsonl").is_file():
        seen = {key for case in load_cases([folder / "train.jsonl"]) for key in turn_keys(case)}
        return [c.id for c in cases if not turn_keys(c).isdisjoint(seen)]
    if (folder / MANIFEST_FILE).is_file():
        train = set(load_manifest(folder).train_ids)
        return [c.id for c in cases if c.id in train]
    return []


def load_manifest(path: str | Path) -> TuneManifest:
    path = Path(path)
    file = path / MANIFEST_FILE if path.is_dir() else path.with_name(MANIFEST_FILE)
    return TuneManifest.model_validate_json(file.read_text(encoding="utf-8"))


__all__ = ["MANIFEST_FILE", "PROGRAM_FILE", "DevScore", "TuneManifest", "fitted_cases", "load_manifest",
           "load_program", "program_path"]
