"""Scoring of replayed cases: attribution of facts to subjects, and cross-subject merges.

Each metric is a ratio of per-case tallies with a bootstrap CI over cases; per-fact and per-op
frames let every number be traced back to its cases.
"""

from evals.scoring.attribution import (
    CaseScores,
    ScoredCase,
    attribution_metrics,
    case_rows,
    facts_frame,
    score_case,
    score_pairs,
)
from evals.scoring.matcher import DEFAULT_MATCHER, LABELLED_PAIRS, Matcher, TextMatcher, calibrate, matcher_agreement
from evals.scoring.merges import ops_frame

__all__ = [
    "DEFAULT_MATCHER",
    "LABELLED_PAIRS",
    "CaseScores",
    "Matcher",
    "ScoredCase",
    "TextMatcher",
    "attribution_metrics",
    "calibrate",
    "case_rows",
    "facts_frame",
    "matcher_agreement",
    "ops_frame",
    "score_case",
    "score_pairs",
]
