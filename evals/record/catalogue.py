"""The metric catalogue: every metric the harness reports, declared once.

Each entry says what the metric is (kind: rate, count, duration, tokens or cost), which way is
better, its unit, its place in the headline, what it means in one line and what its `n` counts.
The report's headline, `show`, `compare`, the gate's tolerances, the plots' panels and the README's
metric table all read this module; nothing guesses a metric's kind or direction from its name.
A run that writes a metric missing here fails a test (tests/record/test_catalogue.py).

    python -m evals.record.catalogue              # the README's metric table, as markdown
    python -m evals.record.catalogue --write README.md   # refresh it between the README's markers
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path


class Kind(StrEnum):
    """What sort of number a metric is; rates share an axis, the others do not."""

    RATE = "rate"  # a share in [0, 1], with a bootstrap CI over cases
    COUNT = "count"  # a whole number of things
    DURATION = "duration"  # seconds
    TOKENS = "tokens"
    COST = "cost"  # USD


class Direction(StrEnum):
    HIGHER = "higher"  # higher is better
    LOWER = "lower"  # lower is better
    NONE = "none"  # neither: a size or a tally (coverage, calls, flagged labels)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Kind
    direction: Direction
    unit: str  # share | units | cases | labels | calls | s | tokens | USD
    meaning: str  # one line
    n: str  # what the metrics.parquet `n` counts
    headline: int | None = None  # position in the headline tables (None: metrics.parquet only)
    proposed: bool = False  # also reported as proposed_<name>: the extractor's proposals, before reconcile
    with_errors: bool = False  # also reported as <name>_with_errors: infra-error cases counted as wrong

    @property
    def lower_is_better(self) -> bool:
        return self.direction is Direction.LOWER

    @property
    def is_rate(self) -> bool:
        return self.kind is Kind.RATE

    @property
    def right_value(self) -> float:
        """A case's per-case value when it is fully right: 0 for a share of mistakes, else 1."""
        return 0.0 if self.lower_is_better else 1.0


R, C, D, T, USD = Kind.RATE, Kind.COUNT, Kind.DURATION, Kind.TOKENS, Kind.COST
HI, LO, NO = Direction.HIGHER, Direction.LOWER, Direction.NONE
_UNITS = "fired faulted units (95% CI resamples cases)"

_WRITES = "fault-free writes (95% CI resamples cases)"
# Why a fault-free write failed (evals.check.natural): the model's causes, then the engine's own.
FAILURE_CAUSES: dict[str, str] = {
    "parse": "the model's reply was not one strict JSON object (prose, a schema echo, truncated JSON)",
    "empty": "the model's reply was empty or null",
    "schema": "the model's JSON broke the output contract (a field missing, null or mistyped; an op naming a "
              "memory or fact the prompt did not offer)",
    "refused": "the model declined in prose",
    "unavailable": "the provider kept failing (5xx, 429, timeout, dropped connection) after its retries",
    "engine": "the engine failed with every reply valid (CONTROL_WRITE_FAILED)",
}

_DECLARED: tuple[Metric, ...] = (
    # -- writes: did the model's replies let the write through at all (a failed write stores nothing)
    Metric("write_failure_rate", R, LO, "share", "fault-free writes that failed: the model's reply or its provider "
           "broke them (natural failures, each checked against the write contract), or the engine did", _WRITES, -1),
    *(Metric(f"write_failure_{cause}_rate", R, LO, "share", f"fault-free writes that failed because {meaning}",
             _WRITES) for cause, meaning in FAILURE_CAUSES.items()),
    # -- attribution: were the right facts stored under the right subject and owner
    Metric("fact_f1", R, HI, "share", "F1 of stored facts against gold, matched one-to-one on text",
           "cases with a gold or stored fact", 0, proposed=True, with_errors=True),
    Metric("fact_precision", R, HI, "share", "stored facts that match a gold fact", "cases with a prediction", 1,
           proposed=True, with_errors=True),
    Metric("fact_recall", R, HI, "share", "gold facts found among the stored facts", "cases with gold facts", 2,
           proposed=True, with_errors=True),
    Metric("subject_accuracy", R, HI, "share", "matched facts filed under the gold subject", "cases with a match",
           3, proposed=True, with_errors=True),
    Metric("owner_accuracy", R, HI, "share", "matched facts with the gold owner (user or agent)",
           "cases with a match", 4, proposed=True, with_errors=True),
    Metric("third_party_to_user_rate", R, LO, "share", "a named person's facts filed under the user",
           "cases with a named person's matched fact", 5, proposed=True, with_errors=True),
    Metric("ai_to_user_rate", R, LO, "share", "the assistant's facts filed under the user",
           "cases with an assistant's matched fact", 6, proposed=True, with_errors=True),
    Metric("subject_text_mismatch_rate", R, LO, "share", "facts whose text names a subject other than the one filed",
           "cases with a prediction", 7, proposed=True, with_errors=True),
    Metric("profile_leak_rate", R, LO, "share", "profiles holding a value the case forbids (another's details)",
           "cases that forbid a profile value", 8, with_errors=True),
    Metric("profile_name_accuracy", R, HI, "share", "profiles whose name is the user's", "cases naming the user", 9,
           with_errors=True),
    Metric("profile_field_accuracy", R, HI, "share", "expected profile fields (age, gender, occupation, location) "
           "the final profile holds", "expected profile fields, in cases expecting one", 10, with_errors=True),
    Metric("cross_subject_merge_proposed_rate", R, LO, "share",
           "merges (UPDATE/SUPERSEDE/DELETE) the model proposed across subjects", "cases with a judged merge", 11,
           with_errors=True),
    Metric("cross_subject_merge_applied_rate", R, LO, "share", "merges the engine applied across subjects",
           "cases with a judged merge", 12, with_errors=True),
    Metric("separate_kept_rate", R, HI, "share", "pairs the case says must stay separate memories that did",
           "cases with expect.separate", 13, with_errors=True),
    Metric("same_subject_update_recall", R, HI, "share", "expected same-subject updates that replaced the old fact",
           "cases with expect.updates", 14, with_errors=True),
    Metric("absent_violation_rate", R, LO, "share", "statements the case says must not be stored that were",
           "cases with expect.absent", 15, with_errors=True),
    Metric("no_memory_accuracy", R, HI, "share", "cases expecting nothing stored that stored nothing",
           "cases expecting no memory", 16, with_errors=True),
    # -- rollback: did every faulted write leave the store as the failure table says
    Metric("rollback_correct_rate", R, HI, "share", "faulted writes whose store holds no partial state", _UNITS, 17),
    Metric("error_code_accuracy", R, HI, "share", "faulted writes that returned the failure table's codes",
           _UNITS, 18),
    Metric("retry_equivalence_rate", R, HI, "share", "faulted writes whose retry matched the fault-free run once",
           _UNITS, 19),
    Metric("infra_error_rate", R, LO, "share", "units (cases and faulted runs) lost to a harness error or a provider "
           "that could not be reached at all (a model's broken reply is a write failure, not an infra error)",
           "units: cases + faulted runs (95% CI resamples cases)", 20),
    Metric("degraded_success_count", C, LO, "units", "faulted writes that reported success under a fault that "
           "must fail", "cases", 21),
    Metric("anomaly_count", C, LO, "anomalies", "checker anomalies on fired faulted writes (FAULT_NOT_REACHED is "
           "counted in indeterminate_units) and write-contract findings of the control run (prompts, history, "
           "profile, replay, supersession, reopen, another user, concurrency)", "cases", 22),
    Metric("faulted_units", C, NO, "units", "faulted runs that fired and were checked", "cases", 23),
    Metric("indeterminate_units", C, LO, "units", "faulted runs whose fault did not fire (unknown, not a pass)",
           "cases", 24),
    # -- repeats (run --epochs K > 1): does the same case give the same answer twice
    Metric("flaky_case_rate", R, LO, "share", "cases right in some epochs and wrong in others on any metric "
           "(right: the metric's best value)", "cases scored in two or more epochs"),
    Metric("decision_flip_rate", R, LO, "share", "(case, gold fact) decisions — stored with the gold text, subject "
           "and owner — that differ between epochs", "cases with a gold fact scored in two or more epochs"),
    # -- usage: what the run cost
    Metric("latency_p50", D, LO, "s", "median seconds per LM attempt that reached the model",
           "LM attempts (cache hits excluded)", 25),
    Metric("latency_p95", D, LO, "s", "95th percentile seconds per LM attempt that reached the model",
           "LM attempts (cache hits excluded)", 26),
    Metric("tokens_total", T, LO, "tokens", "prompt + completion tokens over all LM attempts", "LM attempts", 27),
    Metric("cost_total", USD, LO, "USD", "USD over LM attempts with a known price (NaN when none is known)",
           "LM attempts with a known price", 28),
    Metric("lm_attempts", C, NO, "calls", "LM attempts that reached the model, retries included", "cases", 29),
    Metric("lm_retries", C, LO, "calls", "LM attempts after the first of a call", "cases", 30),
    Metric("lm_cache_hits", C, NO, "calls", "LM calls answered from the response cache", "cases"),
    Metric("embed_attempts", C, NO, "calls", "embedding calls, cache hits included", "cases"),
    # -- gold labels: how far the data can be trusted
    Metric("gold_labels_flagged", C, NO, "labels", "gold labels an adapter flagged, for any reason", "cases", 31),
    Metric("gold_labels_misattributed", C, NO, "labels", "gold labels whose evidence turn the other person spoke",
           "cases", 32),
    Metric("gold_labels_left_out", C, NO, "labels", "flagged gold labels --gold clean dropped", "cases", 33),
)

SUBJECT_CLASSES = ("user", "named", "assistant")  # gold and predicted subject classes of the confusion matrix
_CONFUSION = tuple(
    Metric(f"subject_confusion_{gold}_to_{pred}", R, HI if gold == pred else LO, "share",
           f"matched facts of gold class {gold} filed as {pred}", f"cases with a matched fact of gold class {gold}",
           proposed=True)
    for gold in SUBJECT_CLASSES for pred in SUBJECT_CLASSES)


def _variants(base: Metric) -> list[Metric]:
    stages = [base]
    if base.proposed:
        stages.append(replace(base, name=f"proposed_{base.name}", headline=None,
                              meaning=f"as the extractor proposed them: {base.meaning}"))
    out = list(stages)
    if base.with_errors:
        out += [replace(m, name=f"{m.name}_with_errors", headline=None,
                        meaning=f"{m.meaning}; infra-error cases counted as wrong") for m in stages]
    return out


DECLARED: tuple[Metric, ...] = _DECLARED + _CONFUSION  # one entry per family, as written above
METRICS: dict[str, Metric] = {m.name: m for base in DECLARED for m in _variants(base)}  # every concrete name
HEADLINE: tuple[str, ...] = tuple(m.name for m in sorted((m for m in METRICS.values() if m.headline is not None),
                                                         key=lambda m: m.headline or 0))
# Measured only by a run with two or more epochs (run --epochs K): headlined then; a one-epoch run cannot have them.
REPEAT_METRICS: tuple[str, ...] = ("flaky_case_rate", "decision_flip_rate")


class UnknownMetricError(KeyError):
    """A metric name the catalogue does not declare."""


def metric(name: str) -> Metric:
    """The catalogue entry of a concrete metric name (e.g. `proposed_fact_f1_with_errors`)."""
    try:
        return METRICS[name]
    except KeyError:
        raise UnknownMetricError(f"metric {name!r} is not in evals/record/catalogue.py; declare it there") from None


def find(name: str) -> Metric | None:
    return METRICS.get(name)


def undeclared(names: list[str] | set[str]) -> list[str]:
    """The names the catalogue lacks, sorted."""
    return sorted(set(names) - set(METRICS))


def note(name: str) -> str:
    """The metrics.parquet `note` of a metric: what its n counts."""
    return f"n = {metric(name).n}"


def format_value(name: str, value: float | None, *, signed: bool = False) -> str:
    """A value as every report prints it (summary.md, compare.md, show, the gate, the HTML view, the plots), by the
    metric's kind: a rate to 3 places, a count whole (2 places for a mean over epochs), seconds as ms, tokens whole,
    cost in USD; a metric the catalogue lacks as a rate. `signed`: a difference (+0.012, +3 ms), and a nonzero
    difference of rates never prints as +0.000."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    m = find(name)
    kind = m.kind if m is not None else R
    sign = "+" if signed else ""
    if kind is D:
        return f"{value * 1000:{sign}.1f} ms"
    if kind is USD:
        return f"{'-' if value < 0 else sign}${abs(value):.4f}"
    if kind is C:
        return count_text(value, signed)
    if kind is T:
        return f"{value:{sign}.0f}"
    if signed and value and round(value, 3) == 0:
        return f"{value:+.1g}"
    return f"{value:{sign}.3f}"


def format_ci(name: str, value: float | None, low: float | None, high: float | None, n: int | None = None,
              *, signed: bool = False) -> str:
    """`value [low, high] n=N` for a rate (n left out when None); anything else is its value alone (its CI is the
    value: a count, a duration, tokens or a cost has no interval)."""
    m = find(name)
    if m is not None and not m.is_rate:
        return format_value(name, value, signed=signed)
    interval = f"{format_value(name, value, signed=signed)} [{format_value(name, low, signed=signed)}, " \
               f"{format_value(name, high, signed=signed)}]"
    return interval if n is None else f"{interval} n={n}"


def count_text(value: float, signed: bool = False) -> str:
    """A count: whole, unless it is a mean over epochs (1 anomaly in 3 epochs is 0.33, never a printed 0)."""
    sign = "+" if signed else ""
    return f"{value:{sign}.0f}" if float(value).is_integer() else f"{value:{sign}.2f}"


# ---- the README's metric table ----------------------------------------------------------------------------

README_START = "<!-- metrics:start -->"
README_END = "<!-- metrics:end -->"


def markdown_table() -> str:
    """The declared families, one row each; the variants a family has are named in its row."""
    arrow = {HI: "↑", LO: "↓", NO: "·"}
    lines = ["| metric | kind | better | unit | meaning | n counts |", "|---|---|---|---|---|---|"]
    for m in DECLARED:
        variants = [v for v, on in (("proposed_", m.proposed), ("_with_errors", m.with_errors)) if on]
        also = f" (also {', '.join(f'`{v}`' for v in variants)})" if variants else ""
        lines.append(f"| `{m.name}`{also} | {m.kind} | {arrow[m.direction]} | {m.unit} | {m.meaning} | {m.n} |")
    return "\n".join(lines)


def readme_block() -> str:
    return f"{README_START}\n{markdown_table()}\n{README_END}"


def refresh_readme(text: str) -> str:
    """`text` with the block between the markers replaced by the current table; ValueError without markers."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"no {README_START!r} ... {README_END!r} block")
    return text[:start] + readme_block() + text[end + len(README_END):]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--write"] and len(args) == 2:
        path = Path(args[1])
        path.write_text(refresh_readme(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    if args:
        print("usage: python -m evals.record.catalogue [--write README.md]", file=sys.stderr)
        return 2
    print(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
