"""Case by case against a reproducible baseline: with a deterministic model, any case that got worse is a regression.

Why: a drop rule fails only when the paired CI of the mean change lies past its tolerance, which is right for a
sampled model (one case's flip is noise) but lets a real regression of one case through. The offline reference
model and the oracle are deterministic: on the same cases, seed, embedder and matcher, each case's values repeat
exactly, so a case that got worse was made worse by the code under test (a planted bug that misfiles one fact,
merges one pair or drops one update), never by sampling. This is the golden-file check of the bundled baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evals.arms.base import DEFAULT_SYSTEM
from evals.record.catalogue import REPEAT_METRICS, Direction, Kind, find, format_value
from evals.report.compare import Run

_TOL = 1e-9  # per-case values are num/den of whole counts: anything beyond float noise is a change
_SHOWN = 5  # cases named per (dataset, metric)


def deterministic_model(model: str) -> bool:
    """The offline reference model and the oracle (exact, or noisy with errors drawn from the run's seed)."""
    return model in ("offline", "oracle") or model.startswith("oracle:")


def _model(run: Run, label: str) -> str | None:
    """The model an arm ran on; None for an arm whose repeatability is not established (another engine)."""
    system, _, provider = label.rpartition("/")
    if system and system != DEFAULT_SYSTEM:
        return None  # mem0 and others: their own ids, clocks and threads are not shown to repeat
    manifest = run.manifest
    if manifest is None:
        return None
    return str(manifest.provider_specs.get(provider, {}).get("model", provider))


def why_not_comparable(baseline: Run, current: Run, b_label: str, c_label: str, plans_differ: bool) -> str | None:
    """None when the two arms must repeat case by case; else why they need not (said in the gate's notes)."""
    b_model, c_model = _model(baseline, b_label), _model(current, c_label)
    if b_model is None or c_model is None or not (deterministic_model(b_model) and deterministic_model(c_model)):
        return "a sampled model (or another engine than hymem) on either side"
    if b_model != c_model:
        return f"different models ({b_model} and {c_model})"
    if plans_differ:
        return "different fault plans"
    b, c = baseline.manifest, current.manifest
    assert b is not None and c is not None  # _model returned a model
    for what, x, y in (("seeds", b.seed, c.seed), ("embedders", b.embedder, c.embedder),
                       ("matchers", b.matcher_spec, c.matcher_spec), ("tuned programs", b.program, c.program),
                       ("temperatures", b.temperature, c.temperature)):
        if x != y:
            return f"different {what} ({x} and {y})"
    return None


@dataclass(frozen=True)
class Worse:
    """One (dataset, metric) whose value got worse in some cases."""

    dataset: str
    metric: str
    cases: list[tuple[str, float, float]]  # (case id, baseline value, current value)
    baseline: float  # mean over the worse cases
    current: float

    def detail(self) -> str:
        named = ", ".join(f"{case} {format_value(self.metric, b)} → {format_value(self.metric, c)}"
                          for case, b, c in self.cases[:_SHOWN])
        more = f" and {len(self.cases) - _SHOWN} more" if len(self.cases) > _SHOWN else ""
        return (f"{self.metric}: {len(self.cases)} case(s) worse with a deterministic model (same inputs, seed, "
                f"embedder and matcher): {named}{more}")


def _scored(metric: str) -> Direction | None:
    """The direction of a per-case rate the gate compares: a share with a better side (not the epochs' own)."""
    declared = find(metric)
    if declared is None or declared.kind is not Kind.RATE or metric in REPEAT_METRICS:
        return None
    return declared.direction if declared.direction is not Direction.NONE else None


def compare_cases(baseline: Run, current: Run, b_label: str, c_label: str) -> tuple[list[Worse], int, int]:
    """Every per-case rate of one arm pair: the (dataset, metric)s with cases that got worse, the number of
    (case, metric) values compared, and how many got better (a better case means the baseline is due a re-record)."""
    worse: list[Worse] = []
    compared = better = 0
    for (provider, metric), b_cases in sorted(baseline.case_index.items()):
        direction = _scored(metric) if provider == b_label else None
        c_cases = current.case_index.get((c_label, metric), {})
        if direction is None or not c_cases:
            continue
        found: dict[str, list[tuple[str, float, float]]] = {}
        for (dataset, case_id), b in sorted(b_cases.items()):
            c = c_cases.get((dataset, case_id))
            if c is None or math.isnan(b) or math.isnan(c):
                continue
            compared += 1
            change = (c - b) if direction is Direction.HIGHER else (b - c)  # > 0: better
            if change < -_TOL:
                found.setdefault(dataset, []).append((case_id, b, c))
            elif change > _TOL:
                better += 1
        for dataset, cases in found.items():
            worse.append(Worse(dataset=dataset, metric=metric, cases=cases,
                               baseline=sum(b for _, b, _ in cases) / len(cases),
                               current=sum(c for _, _, c in cases) / len(cases)))
    # A `_with_errors` twin worse in exactly the same cases as its metric says nothing new.
    same = {(w.dataset, w.metric, tuple(w.cases)) for w in worse}
    worse = [w for w in worse if not (w.metric.endswith("_with_errors") and
                                      (w.dataset, w.metric.removesuffix("_with_errors"), tuple(w.cases)) in same)]
    return worse, compared, better


__all__ = ["Worse", "compare_cases", "deterministic_model", "why_not_comparable"]
