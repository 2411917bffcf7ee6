"""How much of a difference between two runs the matcher's own measured error could explain.

Why: fact recall, precision and F1 count yes/no decisions of the matcher, which is wrong on some pairs: the
matcher card (`evals.scoring.agreement.card_of`, in every run's manifest) records its held-out agreement on
paraphrases (group `same`: 1 − that is the share of true matches it misses) and on near-misses (group
`different`: 1 − that is the share of wrong facts it accepts). A gap of 0.02 between two providers is no win
when the matcher's error alone could have made it.

The bound, for a metric that is a share of matched facts, with `miss` and `accept` those two error rates (the
worse of the runs' cards): the higher value `hi` could be inflated by near-misses accepted among the facts it
did not truly match, at most accept·(1 − hi)/(1 − accept); the lower value `lo` could be deflated by
paraphrases missed among its true matches, at most miss·lo/(1 − miss). Their sum is the largest gap the
matcher could make between two providers that are in truth equal, if its errors fell on one side each (a
worst case: its error rates differ with a provider's phrasing). F1 lies between precision and recall, so the
same bound is used for it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

# Metrics that are shares of facts the matcher decided one by one.
MATCHED_METRICS = ("fact_recall", "fact_precision", "fact_f1")


def error_rates(cards: Iterable[dict[str, Any] | None]) -> tuple[float, float] | None:
    """(share of paraphrases missed, share of near-misses accepted) on the held-out pairs, the worse of the
    cards; None when a card has no per-group agreement (a matcher never measured)."""
    miss = accept = None
    for card in cards:
        groups = (card or {}).get("groups") or {}
        same, different = groups.get("group:same"), groups.get("group:different")  # agreement.GROUPS
        if same is None or different is None:
            return None
        miss = max(miss or 0.0, 1.0 - float(same))
        accept = max(accept or 0.0, 1.0 - float(different))
    return None if miss is None or accept is None else (miss, accept)


def explainable_gap(metric: str, a_value: float | None, b_value: float | None,
                    rates: tuple[float, float] | None) -> float | None:
    """The largest difference between the two values the matcher's error alone could make (module doc);
    None for a metric the matcher does not decide, or without both values or measured error rates."""
    if metric not in MATCHED_METRICS or rates is None or a_value is None or b_value is None:
        return None
    if math.isnan(a_value) or math.isnan(b_value):
        return None
    miss, accept = (min(r, 0.999) for r in rates)
    hi, lo = max(a_value, b_value), min(a_value, b_value)
    return accept * (1.0 - hi) / (1.0 - accept) + miss * lo / (1.0 - miss)


def within(delta: float | None, gap: float | None) -> bool:
    """Whether a difference is no larger than what the matcher could explain."""
    return gap is not None and delta is not None and not math.isnan(delta) and abs(delta) <= gap


def rates_sentence(rates: tuple[float, float] | None) -> str:
    """One sentence on what the bound is made of, for compare.md and the gate's summary."""
    if rates is None:
        return ("The matcher has no measured agreement per label group, so how much of a difference in "
                f"{', '.join(MATCHED_METRICS)} its error could explain is unknown.")
    miss, accept = rates
    return (f"The matcher misses {miss:.1%} of paraphrases and accepts {accept:.1%} of near-misses on its held-out "
            f"pairs: it cannot resolve a gap in {', '.join(MATCHED_METRICS)} below the bound shown (the largest "
            "difference its error alone could make between the two values), so a Δ within it is not a win.")


def annotate_checks(results: list[Any], rates: tuple[float, float] | None) -> None:
    """Add to each gate check of a matched metric with both values how much of its difference the matcher could
    explain (in its detail, so the summary table and the JUnit message say it)."""
    for result in results:
        for check in result.checks:
            metric = check.metric or result.metric
            gap = explainable_gap(metric, check.baseline, check.current, rates)
            if gap is None:
                continue
            delta = check.delta if check.delta is not None else check.current - check.baseline
            verdict = "within it: not resolved" if within(delta, gap) else "beyond it"
            check.detail += f"; the matcher's error could explain a gap up to {gap:.3f} ({verdict})"


__all__ = ["MATCHED_METRICS", "annotate_checks", "error_rates", "explainable_gap", "rates_sentence", "within"]
