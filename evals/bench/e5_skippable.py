"""How many of the predicates the semantic matcher encodes with e5 a sound bound could leave unencoded (issue 35,
point 1: a LoCoMo run's CPU is the engine's embedding plus e5's, so only encoding fewer texts with e5 lowers it).

A finished run is scored again with a fresh matcher that records every (gold, pred) pair it is asked to score. For each
pair, the regression's logit is bounded from everything but the cosine (`semantic._bound_without_cosine`, then the
alignment's floor, then every feature but the thesaurus's: the three steps `scores` already takes), with the cosine's
two terms at the most they can add (the cosine of two unit vectors is in [-1, 1]; 1 + 1e-5 for float32 rounding). A
pair whose bound is below the threshold's logit, or that a role check rules out (its probability is then 0), is "not
the same" whatever e5 says. A predicate needs its e5 vector only if one of its pairs is left undecided. Also reported:
the cosine each undecided pair would need to reach the threshold, beside the cosine e5 gives it.

Run with `python -m evals.bench.e5_skippable RUN_DIR [RUN_DIR ...]` (a `hymem-eval run --out` directory).
"""

# lazy imports: each measurement imports only what it measures, inside the function that measures it.
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

STEPS = ("cheap", "floor", "aligned", "role", "undecided")
COSINE_TOP = 1.0 + 1e-5  # a float32 product of two unit vectors can pass 1 in its last bits


def _quantiles(values: Sequence[float]) -> list[float]:
    return [round(float(q), 3) for q in np.quantile(values, [0.05, 0.25, 0.5, 0.75, 0.95])] if len(values) else []


def decided_at(matcher: Any, gold: str, pred: str) -> tuple[int, float | None, tuple[str, str]]:
    """The first of `STEPS` that decides a pair of texts the (prepared) semantic matcher compares, whatever its cosine;
    for an undecided pair, the cosine it would need to reach the threshold; and the two predicates it is compared on
    (both whole when one side names the other's subject in place, as `scores` compares it). The steps are the
    matcher's own (`SemanticMatcher._bound_step`), asked with the cosine at the end of its range that adds most."""
    from evals.scoring import semantic as s

    w, limit = matcher._weights, matcher._logit_limit
    a, b = matcher._texts[gold], matcher._texts[pred]
    if s.named_in_place(a, b) or s.named_in_place(b, a):
        a, b = matcher._whole(gold), matcher._whole(pred)
    key = (gold, pred)
    # the steps afresh (a scoring pass may have stopped early at the real cosine), from the first, which gives `zh`
    steps = matcher._bounded[key] = s._Bounds(*s._bound_without_cosine(a, b, w, matcher.params.intercept))
    matcher._pairs.pop(key, None)
    slope = float(w[s._COSINE] + steps.zh * w[s._ZH_COSINE])  # the cosine's two terms are slope * cosine
    step, _ = matcher._bound_step(key, a, b, COSINE_TOP if slope > 0 else -1.0)
    predicates = (a.predicate, b.predicate)
    if step < 3:
        return step, None, predicates
    if matcher.params.role_checks and matcher._pairs[key][1]:
        return 3, None, predicates
    return 4, (limit - steps.aligned) / slope, predicates


def skippable(run_dir: Path) -> dict[str, Any]:
    """The counts for one run directory (see the module's docstring)."""
    from evals.record import read_units
    from evals.report.score_run import gold_pairs
    from evals.scoring import score_pairs
    from evals.scoring import semantic as s

    asked: set[tuple[str, str]] = set()

    class Recording(s.SemanticMatcher):
        def scores(self, gold: Sequence[str], pred: Sequence[str]) -> np.ndarray:
            asked.update((g, p) for g in gold for p in pred)
            return super().scores(gold, pred)

    runs = read_units(run_dir)
    matcher = Recording._load(s.PARAMS_FILE, None)
    score_pairs(gold_pairs(runs), matcher)
    vectors = matcher._vectors
    step_of: dict[str, int] = {}  # predicate -> the latest step that decides all its pairs (len(STEPS) - 1: undecided)
    counts = dict.fromkeys(STEPS, 0)
    needed, actual = [], []
    for g, p in asked:
        step, need, (a, b) = decided_at(matcher, g, p)
        counts[STEPS[step]] += 1
        if need is not None:
            needed.append(need)
            actual.append(float(vectors[a] @ vectors[b]))
        for predicate in (a, b):
            step_of[predicate] = max(step_of.get(predicate, 0), step)
    encoded = set(vectors)
    never_paired = encoded - set(step_of)
    out: dict[str, Any] = {"run": str(run_dir), "units": len(runs), "pairs": len(asked), "pairs_decided_at": counts,
                           "predicates_encoded": len(encoded), "predicates_never_paired": len(never_paired)}
    chars = sum(map(len, encoded)) or 1
    for k, name in enumerate(STEPS[:-1]):
        skip = never_paired | {t for t, at in step_of.items() if at <= k}
        out[f"skippable_through_{name}"] = {"predicates": len(skip), "share": round(len(skip) / max(len(encoded), 1), 3),
                                            "chars_share": round(sum(map(len, skip)) / chars, 3)}
    out["undecided_cosine_needed"] = _quantiles(needed)
    out["undecided_cosine_actual"] = _quantiles(actual)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench.e5_skippable")
    parser.add_argument("runs", type=Path, nargs="+", help="run directories (`hymem-eval run --out`)")
    args = parser.parse_args(argv)
    results = [skippable(run) for run in args.runs]
    print(json.dumps(results, indent=1))
    empty = [r["run"] for r in results if not r["pairs"]]
    if empty:  # nothing compared, nothing measured: not a share of 0
        print(f"no (gold, predicted) pair was scored in: {', '.join(empty)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
