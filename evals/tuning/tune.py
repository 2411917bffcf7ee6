"""`hymem-eval tune`: compile the engine's DSPy program against the harness's own scorer.

Cases are split by id (no case in both sets), turned into one example per case, and the
chosen optimiser tunes the extractor or reconciler predictors of a `MemoryProgram`. The
result is saved in DSPy's format with a manifest; the dev set is scored before and after,
on the saved program as loaded back, and every failed prediction is counted, not zeroed.
"""

from __future__ import annotations

import contextvars
import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import DSPyError
from pydantic import BaseModel, ConfigDict, Field

from evals.cases.dataset import Case, canonical_json, dataset_hash, load_cases
from evals.core.redact import write_text
from evals.record import write_table
from evals.run.provenance import git_state, package_versions
from evals.scoring.agreement import judge_failures
from evals.scoring.choose_matcher import make_matcher
from evals.tuning.budget import BudgetMeter
from evals.tuning.examples import ProgramKind, eligible, make_examples, predictor_names, split_cases
from evals.tuning.metric import CaseMetric, ErrorLog
from evals.tuning.models import TuneModels
from evals.tuning.optimizers import compile_program, effective_settings
from evals.tuning.saved import MANIFEST_FILE, PROGRAM_FILE, DevScore, TuneManifest, load_program
from evals.tuning.students import apply_to_program, make_student
from hymem import __version__
from hymem.program import MemoryProgram

REPO_ROOT = Path(__file__).resolve().parents[2]


class TuneError(ValueError):
    """Bad input: tuning refuses to start (exit code 2)."""


class TuneFailed(RuntimeError):
    """The optimiser stopped on a model failure it does not absorb (exit code 1, one line)."""


class TuneConfig(BaseModel):
    """What `hymem-eval tune` was asked to do. Models are specs or `dspy.BaseLM` objects (tests)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    program: ProgramKind
    optimizer: str  # bootstrap | mipro | gepa
    train: list[str]  # dataset specs (.jsonl files or directories)
    dev: list[str] | None = None  # None: a seeded split of train
    lm: Any = "offline"  # task model
    teacher_lm: Any = None  # runs the program to make demos (bootstrap, mipro); default: lm
    prompt_lm: Any = None  # proposes (mipro) / reflects (gepa); default: teacher_lm, else lm
    out: Path
    seed: int = 0
    dev_fraction: float = 0.3
    settings: dict[str, Any] = Field(default_factory=dict)  # optimiser settings over the defaults
    num_threads: int = 4  # dev-set evaluation threads
    matcher: str | None = None  # --matcher SPEC of the metric (default: semantic, as `run`)
    providers_file: Path | None = None  # --providers TOML: names usable as --lm / --teacher-lm / --prompt-lm
    force: bool = False  # --force: overwrite a tuned program already in `out`


class TuneOutcome(BaseModel):
    out: Path
    manifest: TuneManifest


def tune(config: TuneConfig) -> TuneOutcome:
    """Split, compile, save, and score the dev set before and after. Raises TuneError on bad input."""
    try:
        settings = effective_settings(config.optimizer, config.settings)
        train_cases, dev_cases, skipped = _load(config)
        split = split_cases(train_cases, dev_cases, seed=config.seed, dev_fraction=config.dev_fraction)
    except ValueError as exc:
        raise TuneError(str(exc)) from exc
    train, train_skip = make_examples(config.program, split.train)
    random.Random(config.seed).shuffle(train)  # file order would give one language all the demos (and MIPRO's val share)
    dev, dev_skip = make_examples(config.program, split.dev)
    skipped.update(train_skip | dev_skip)
    if not train or not dev:
        example = "; e.g. {}: {}".format(*next(iter(skipped.items()))) if skipped else ""
        raise TuneError(f"the {'train' if not train else 'dev'} set has no case a {config.program} can learn from "
                        f"({len(skipped)} skipped{example})")
    if (config.out / MANIFEST_FILE).exists() and not config.force:
        raise TuneError(f"{config.out} already holds a tuned program; choose another --out, or pass --force")
    models = TuneModels(config.providers_file)
    task_lm, teacher_lm, prompt_lm = _models(config, models)
    try:
        matcher = make_matcher(config.matcher, providers_file=config.providers_file)
    except ValueError as exc:
        raise TuneError(str(exc)) from exc
    try:  # before any model call: an --out that cannot hold the result must not cost a whole compile
        config.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TuneError(f"--out {config.out}: cannot create the directory ({exc.strerror or exc})") from exc
    cases = {c.id: c for c in [*split.train, *split.dev]}
    baseline = MemoryProgram()
    names = predictor_names(config.program, train)

    meters = {"compile": BudgetMeter(), "dev_eval": BudgetMeter()}
    train_log = ErrorLog()
    with dspy.context(lm=task_lm):
        with meters["dev_eval"].measure():
            before = evaluate(config.program, baseline, dev, cases, config.num_threads, matcher)
        metric = CaseMetric(config.program, cases, train_log, feedback=config.optimizer == "gepa", matcher=matcher)
        student = make_student(config.program, baseline.deepcopy(), names)
        with meters["compile"].measure():
            try:
                compiled = compile_program(config.optimizer, student, train, metric, settings=settings,
                                           seed=config.seed, teacher_lm=teacher_lm, prompt_lm=prompt_lm)
            except DSPyError as exc:  # a call the optimiser makes itself (proposing, reflecting) failed for good
                write_table(config.out, "attempts", _attempts(models, matcher))
                first = (str(exc).splitlines() or [""])[0][:300]
                raise TuneFailed(f"{config.optimizer}: a model call of the optimiser failed, nothing was saved: "
                                 f"{type(exc).__name__}: {first} (every attempt: "
                                 f"{config.out / 'attempts.parquet'})") from exc
            except ValueError as exc:  # settings the optimiser itself refuses
                raise TuneError(f"{config.optimizer}: {exc}") from exc
        tuned = baseline.deepcopy()
        dropped = apply_to_program(compiled, tuned)
        tuned.save(str(config.out / PROGRAM_FILE))
        write_text(config.out / PROGRAM_FILE, (config.out / PROGRAM_FILE).read_text(encoding="utf-8"))  # redacted
        saved = load_program(config.out)
        with meters["dev_eval"].measure():
            after = evaluate(config.program, saved, dev, cases, config.num_threads, matcher)


    commit, dirty = git_state(REPO_ROOT)
    manifest = TuneManifest(
        program=config.program, predictors=names, optimizer=config.optimizer, settings=settings, seed=config.seed,
        lm=_model_label(config.lm), teacher_lm=_label(config.teacher_lm), prompt_lm=_prompt_label(config),
        train=list(config.train), dev=list(config.dev) if config.dev else None,
        dev_fraction=config.dev_fraction if split.seeded else None,
        train_hash=dataset_hash(split.train), dev_hash=dataset_hash(split.dev),
        train_ids=[str(ex.case_id) for ex in train], dev_ids=[str(ex.case_id) for ex in dev],
        overlap_removed=split.overlap_removed, skipped=skipped,
        prompt_fingerprint_before=baseline.prompt_fingerprint(), prompt_fingerprint_after=saved.prompt_fingerprint(),
        demos={name: len(p.demos) for name, p in saved.named_predictors() if name in names},
        instructions_changed=[name for (name, a), (_, b) in zip(baseline.named_predictors(), saved.named_predictors(),
                                                                strict=True)
                              if a.signature.instructions != b.signature.instructions],
        demos_dropped=dropped, train_errors=train_log.summary(),
        budget={phase: meter.budget() for phase, meter in meters.items()}, dev_before=before, dev_after=after,
        matcher={"spec": matcher.spec, "fingerprint": matcher.fingerprint(),
                 **(matcher.health() if hasattr(matcher, "health") else {})},
        engine_version=__version__, git_commit=commit, git_dirty=dirty, packages=package_versions())
    write_text(config.out / MANIFEST_FILE, manifest.model_dump_json(indent=2))  # redacted: errors may echo a key
    write_table(config.out, "attempts", _attempts(models, matcher))
    for name, group in (("train", split.train), ("dev", split.dev)):
        write_text(config.out / f"{name}.jsonl", "".join(canonical_json(c) + "\n" for c in group))
    return TuneOutcome(out=config.out, manifest=manifest)


def _attempts(models: TuneModels, matcher: Any) -> Any:
    """The HTTP attempts of the tuning models, and of an LLM judge matcher (site `judge`), as `run` keeps them."""
    import pandas as pd

    frames = [models.attempts_frame()]
    judge = getattr(matcher, "attempts_frame", None)
    if judge is not None:
        frames.append(judge())
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else models.attempts_frame()


def evaluate(kind: ProgramKind, program: MemoryProgram, examples: list[dspy.Example], cases: dict[str, Case],
             num_threads: int = 4, matcher: Any = None) -> DevScore:
    """Score `program` on `examples` with the tuning metric; failures are counted apart."""
    log = ErrorLog()
    metric = CaseMetric(kind, cases, log, matcher=matcher)
    student = make_student(kind, program, predictor_names(kind, examples))

    def one(example: dspy.Example) -> tuple[str, float | None]:
        prediction = student(**example.inputs())
        score = metric(example, prediction)
        return str(example.case_id), (None if prediction.error is not None else float(score))

    with ThreadPoolExecutor(max_workers=max(1, num_threads)) as pool:
        futures = [pool.submit(contextvars.copy_context().run, one, ex) for ex in examples]
        per_case = dict(f.result() for f in futures)
    scored = [s for s in per_case.values() if s is not None]
    return DevScore(n=len(examples), scored=len(scored), score=sum(scored) / len(scored) if scored else None,
                    score_with_errors=sum(scored) / len(examples) if examples else None, errors=log.summary(),
                    per_case=per_case)


def parse_settings(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings as a settings dict; VALUE is read as JSON (numbers, true, null), else kept as text."""
    settings: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise TuneError(f"--setting {item!r}: expected KEY=VALUE")
        try:
            settings[key.strip()] = json.loads(raw)
        except ValueError:
            settings[key.strip()] = raw
    return settings


def summary_text(outcome: TuneOutcome) -> str:
    """What `tune` prints: dev score before/after, errors, budget, where it saved."""
    m = outcome.manifest

    def score(d: DevScore) -> str:
        value = "n/a" if d.score is None else f"{d.score:.3f}"
        # failures are left out of the headline mean, so it is never read without what they cost
        costed = f"; {d.score_with_errors:.3f} with each error as 0" if d.errors.errors and d.score_with_errors \
            is not None else ""
        return f"{value} ({d.scored}/{d.n} scored, {d.errors.errors} error(s){costed})"

    lines = [f"tuned {m.program} ({', '.join(m.predictors)}) with {m.optimizer}, seed {m.seed}: "
             f"{len(m.train_ids)} train / {len(m.dev_ids)} dev cases, {len(m.skipped)} skipped",
             f"dev score before: {score(m.dev_before)}",
             f"dev score after:  {score(m.dev_after)}",
             f"errors while tuning: {m.train_errors.errors} of {m.train_errors.runs} predictions"
             + (f" {json.dumps(m.train_errors.by_kind)}" if m.train_errors.errors else "")]
    for phase, b in m.budget.items():
        models = ", ".join(f"{name}: {mb.calls} calls, {mb.total_tokens} tokens" for name, mb in b.by_model.items())
        lines.append(f"budget {phase}: {b.calls} calls ({b.failed_calls} failed), {b.total_tokens} tokens, "
                     f"{b.seconds:.1f}s" + (f" [{models}]" if models else ""))
    if m.matcher is not None:
        failed = judge_failures(m.matcher).replace("**", "")
        lines.append(f"facts matched by: {m.matcher['spec']}" + (f". {failed}" if failed else ""))
    lines.append(f"demos: {json.dumps(m.demos)}; instructions changed: {', '.join(m.instructions_changed) or 'none'}")
    lines.append(f"prompt fingerprint: {m.prompt_fingerprint_before} -> {m.prompt_fingerprint_after}")
    lines.append(f"saved: {outcome.out / PROGRAM_FILE} (+ {MANIFEST_FILE}, train.jsonl, dev.jsonl, attempts.parquet)")
    return "\n".join(lines) + "\n"


def _load(config: TuneConfig) -> tuple[list[Case], list[Case] | None, dict[str, str]]:
    """Eligible train and dev cases, and {case id: why it was left out}."""
    skipped: dict[str, str] = {}

    def usable(cases: list[Case]) -> list[Case]:
        out = []
        for case in cases:
            why = eligible(config.program, case)
            if why is None:
                out.append(case)
            else:
                skipped[case.id] = why
        return out

    train = usable(load_cases(config.train))
    dev = usable(load_cases(config.dev)) if config.dev else None
    return train, dev, skipped


def _models(config: TuneConfig, models: TuneModels) -> tuple[dspy.BaseLM, dspy.BaseLM | None, dspy.BaseLM | None]:
    try:
        task = models.lm(config.lm, "--lm")
        teacher = models.lm(config.teacher_lm, "--teacher-lm") if config.teacher_lm is not None else None
        prompt = models.lm(config.prompt_lm, "--prompt-lm") if config.prompt_lm is not None else None
    except ValueError as exc:
        raise TuneError(str(exc)) from exc
    if config.optimizer in ("mipro", "gepa"):
        prompt = prompt or teacher or task
        if getattr(prompt, "model", None) == "offline/reference":
            raise TuneError(f"{config.optimizer} needs a model that can propose instructions (--prompt-lm); the "
                            "offline reference model answers only the engine's own signatures")
    return task, teacher, prompt


def _prompt_label(config: TuneConfig) -> str | None:
    if config.optimizer not in ("mipro", "gepa"):
        return None
    return _label(next(lm for lm in (config.prompt_lm, config.teacher_lm, config.lm) if lm is not None))


def _label(lm: Any) -> str | None:
    """A model as the manifest records it: the spec, or class and model name (never a key)."""
    if lm is None:
        return None
    return _model_label(lm)


def _model_label(lm: Any) -> str:
    if isinstance(lm, str):
        return lm
    return f"{type(lm).__name__}:{getattr(lm, 'model', '?')}"


__all__ = ["TuneConfig", "TuneError", "TuneFailed", "TuneOutcome", "evaluate", "parse_settings", "summary_text",
           "tune"]
