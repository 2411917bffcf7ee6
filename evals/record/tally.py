"""A case's contribution to one catalogue metric: what every scorer returns and `evals.scoring.aggregate` reduces.

Why here, below the stages: scorers live in several stages (the label audit in `cases`, the report's fault rates,
attribution, usage and repeats in `scoring`), and they all hand the one aggregator the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from evals.record._records import CaseMetricRow


@dataclass(frozen=True)
class CaseTally:
    """One (provider, dataset, case, epoch) and one catalogue metric: a numerator and a denominator, or samples.

    A case may hand in several tallies for one metric (one per epoch, or one per LM attempt); a tally whose
    denominator is 0 carries no units but still says the case was scored for the metric.
    """

    provider: str  # the arm label
    dataset: str
    case_id: str
    metric: str  # a concrete name in evals.record.catalogue
    num: float = 0.0  # a rate's numerator, or a count
    den: float = 1.0  # a rate's denominator (units); 0: nothing to judge in this case
    epoch: int = 0  # the repeat of the case (run --epochs)
    samples: tuple[float, ...] = ()  # raw values, for a metric that is a percentile or a sum of them (latency, cost)
    skipped: int = 0  # units the scorer could not judge and left out (said in the row's note)
    skip_reason: str = ""  # what `skipped` counts, e.g. "op(s) skipped: target subject unknown"

    def case_row(self) -> CaseMetricRow:
        """The case_metrics.parquet row of this tally (a rate's per-case numerator and denominator)."""
        return CaseMetricRow(provider=self.provider, dataset=self.dataset, case_id=self.case_id, metric=self.metric,
                             num=float(self.num), den=float(self.den), epoch=self.epoch)


__all__ = ["CaseTally"]
