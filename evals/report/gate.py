"""The regression gate: rules over a baseline run and a current run, for CI.

A floor, ceiling or exact value (`min`, `max`, `equals`) is checked on the current run's
value. A drop rule (`max_drop`) fails only when the whole paired 95% CI of current − baseline
lies below −tolerance, so noise alone does not fail a build; `max_rise` is its mirror for
error rates; `max_increase` fails on any rise of the value itself beyond the tolerance (for
infra errors, which are never noise to be averaged away). A rule applies pooled ("all") and
per dataset unless it names one. A rule whose metric neither run measured is skipped; one the
baseline measured and the current run did not fails. A metric the catalogue does not declare, or a
dataset or provider neither run has, is a rules-file error (a typo must not skip a rule). Beyond the
rules, every metric the baseline measured must be measured again, with an n no smaller (cases must
not drop out).

Runs are paired provider by provider: by name, by `--pair BASELINE=CURRENT`, or automatically
when each run has one provider. Runs of different inputs (datasets, fault plans) are refused
unless the caller allows it; then only the shared cases are gated. `evaluate_rules` is pure;
`run_gate` does the files.
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypedDict
from xml.etree import ElementTree as ET

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evals.core.redact import write_text
from evals.core.stats import paired_bootstrap_delta
from evals.record.catalogue import METRICS, REPEAT_METRICS, Direction, Kind, find, format_value
from evals.report.compare import (
    Run,
    RunInputError,
    case_values,
    embedder_note,
    judge_note,
    load_run,
    matcher_note,
    matcher_version_note,
    metric_row,
    rescored_dirs,
)
from evals.report.gate_inputs import InputDiff, compare_inputs, restrict
from evals.report.gate_reference import compare_cases, why_not_comparable
from evals.report.run_report import markdown_table
from evals.scoring.matcher_resolution import MATCHED_METRICS, annotate_checks, error_rates, rates_sentence

Status = Literal["pass", "fail", "skipped"]
CONSTRAINTS = ("min", "max", "equals", "max_drop", "max_rise", "max_increase")
_SYMBOL = {"min": ">=", "max": "<=", "equals": "==", "max_drop": "may drop at most", "max_rise": "may rise at most",
           "max_increase": "may increase at most"}
_SHIFTS = ("max_drop", "max_rise", "max_increase")  # rules that compare with the baseline
# The direction each shift constraint assumes: a drop is a regression only where higher is better.
_DIRECTION = {"max_drop": Direction.HIGHER, "max_rise": Direction.LOWER, "max_increase": Direction.LOWER}
ALL = "all"  # the dataset label of pooled rows in metrics.parquet
_EQUAL_TOL = 1e-9


class GateInputError(ValueError):
    """A rules file or run that cannot be gated (exit code 2)."""


class Rule(BaseModel):
    """One `[[rule]]` of a rules file: a metric and exactly one constraint on it."""

    # strict, finite: a `min = nan` bound compares false with every value, so the rule could never fail
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    metric: str  # a metric name as in metrics.parquet
    min: float | None = None  # floor on the current value
    max: float | None = None  # ceiling on the current value
    equals: float | None = None  # exact current value (counts, must-be-zero rates)
    max_drop: float | None = Field(default=None, ge=0)  # tolerance on current − baseline (paired CI)
    max_rise: float | None = Field(default=None, ge=0)  # the same for metrics where lower is better
    max_increase: float | None = Field(default=None, ge=0)  # tolerance on current − baseline values, no CI
    provider: str | None = None  # default: every provider pair; else pairs with this name on either side
    dataset: str | None = None  # default: pooled and each dataset; "all": pooled only; else that dataset
    name: str | None = None  # the JUnit testcase name; default: derived from the rule

    @field_validator("metric")
    @classmethod
    def _declared(cls, metric: str) -> str:
        """A misspelt metric would be measured in neither run and skipped: the gate would pass unseen."""
        if find(metric) is None:
            close = difflib.get_close_matches(metric, METRICS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{metric!r} is not a metric of the catalogue (evals/record/catalogue.py){hint}")
        return metric

    @model_validator(mode="after")
    def _one_constraint(self) -> Rule:
        given = [c for c in CONSTRAINTS if getattr(self, c) is not None]
        if len(given) != 1:
            raise ValueError(f"rule for {self.metric!r} needs exactly one of {', '.join(CONSTRAINTS)}; got "
                             f"{given or 'none'}")
        declared = find(self.metric)  # the catalogue says which way is better; a rule must agree
        want = _DIRECTION.get(given[0])
        if declared is not None and want is not None and declared.direction is not want:
            raise ValueError(f"rule for {self.metric!r}: {given[0]} assumes {want.value} is better, but the metric "
                             f"catalogue declares {declared.direction.value}")
        return self

    @property
    def kind(self) -> str:
        return next(c for c in CONSTRAINTS if getattr(self, c) is not None)

    @property
    def threshold(self) -> float:
        return float(getattr(self, self.kind))

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        scope = "" if self.dataset in (None, ALL) else f" on {self.dataset}"
        scope += f" for {self.provider}" if self.provider else ""
        return f"{self.metric} {_SYMBOL[self.kind]} {self.threshold:g}{scope}"


class RuleSet(BaseModel):
    """A rules file: top-level settings and a list of `[[rule]]` tables."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    confidence: float = Field(default=0.95, gt=0, lt=1)  # of the paired bootstrap CI of drop rules
    require_baseline_metrics: bool = True  # every metric the baseline measured is measured by the current run
    require_baseline_n: bool = True  # and its n is no smaller (no case silently dropped out of it)
    # With a deterministic model (offline, oracle) on both sides and the same seed, embedder and matcher, no case
    # may get worse on any per-case rate (evals.report.gate_reference): nothing is sampled, so no change is noise.
    compare_cases_when_deterministic: bool = True
    rule: list[Rule] = Field(min_length=1)


class Check(BaseModel):
    """A rule applied to one provider pair on one dataset (or pooled)."""

    provider: str  # the provider, or "baseline → current" for a pair of different names
    dataset: str = ALL
    metric: str | None = None  # the metric a built-in check found at fault (a rule's is the rule's)
    status: Status
    baseline: float | None = None  # the baseline's value on this dataset (or pooled), when measured
    current: float | None = None  # the current run's value, when measured
    delta: float | None = None  # paired mean of current − baseline (drop rules)
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None  # cases paired (drop rules) or n of the current value
    detail: str


class RuleResult(BaseModel):
    label: str  # the rule's name, or what a built-in check checks
    metric: str  # the rule's metric; "*" for the built-in checks over every metric
    status: Status  # fail if any check fails, skipped if every check skipped, else pass
    checks: list[Check]
    rule: Rule | None = None  # None for a built-in check


class ProviderPair(BaseModel):
    """A baseline provider gated against a current provider."""

    baseline: str
    current: str

    @property
    def label(self) -> str:
        return self.current if self.baseline == self.current else f"{self.baseline} → {self.current}"


def _rules_name(path: Path | None) -> str:
    return "evals/report/gates.toml" if path is None else str(path)


def _field(loc: tuple[int | str, ...]) -> str:
    """Where in a rules file: `[[rule]] 2, metric` (counted from 1, as a reader counts) or a top-level key."""
    if len(loc) >= 2 and loc[0] == "rule" and isinstance(loc[1], int):
        return f"[[rule]] {loc[1] + 1}" + (f", {'.'.join(map(str, loc[2:]))}" if loc[2:] else "")
    return ".".join(map(str, loc))


def load_rules(path: Path | None = None) -> RuleSet:
    """Parse a rules file (default: the gates.toml shipped with evals); GateInputError when malformed."""
    where = _rules_name(path)
    try:
        if path is None:
            text = resources.files("evals.report").joinpath("gates.toml").read_text(encoding="utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        return RuleSet.model_validate(tomllib.loads(text))
    except OSError as exc:
        raise GateInputError(f"rules file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise GateInputError(f"rules file {where}: not TOML ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise GateInputError(f"rules file {where}: not UTF-8 text (byte offset {exc.start})") from None
    except RecursionError:
        raise GateInputError(f"rules file {where}: nested too deeply to be a rules file") from None
    except ValidationError as exc:
        problems = "; ".join(f"{_field(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise GateInputError(f"rules file {where}: {problems}") from exc


def check_scopes(rules: RuleSet, baseline: Run, current: Run, where: str) -> None:
    """A rule's `dataset` or `provider` that names nothing in either run (a file name for a dataset, a typo)
    would leave the rule nothing to check and the gate passing: GateInputError naming the rule and the field."""
    datasets = {ALL} | set(baseline.metrics["dataset"]) | set(current.metrics["dataset"])
    providers = set(baseline.providers) | set(current.providers)
    for number, rule in enumerate(rules.rule, 1):
        for field, value, known in (("dataset", rule.dataset, datasets), ("provider", rule.provider, providers)):
            if value is not None and value not in known:
                raise GateInputError(f"rules file {where}: [[rule]] {number} ({rule.label}), {field}: {value!r} "
                                     f"is in neither run (they have {', '.join(sorted(known))})")


# ---- evaluation (pure) ------------------------------------------------------------------------------------


def _measured(row: dict[str, Any] | None) -> float | None:
    """The row's value, or None when the run has no such row or did not measure it (NaN)."""
    if row is None or row["value"] is None or math.isnan(float(row["value"])):
        return None
    return float(row["value"])


class _Measured(TypedDict):
    """What every check of one rule on one (pair, dataset) starts from."""

    provider: str
    dataset: str
    baseline: float | None
    current: float | None


def _bound(rule: Rule, base: _Measured, value: float, n: int) -> Check:
    kind, limit = rule.kind, rule.threshold
    ok = {"min": value >= limit, "max": value <= limit,
          "equals": math.isclose(value, limit, rel_tol=0, abs_tol=_EQUAL_TOL)}[kind]
    shown, bound = format_value(rule.metric, value), format_value(rule.metric, limit)  # one unit: the catalogue's
    return Check(**base, n=n, status="pass" if ok else "fail",
                 detail=f"{shown} {_SYMBOL[kind]} {bound}" if ok else f"{shown} violates {_SYMBOL[kind]} {bound}")


def _shift(rule: Rule, pair: ProviderPair, dataset: str, baseline: Run, current: Run, base: _Measured,
           values: tuple[float, float], seed: int, confidence: float) -> Check:
    tol = rule.threshold
    shown_tol = format_value(rule.metric, tol)  # in the unit the values print in (a duration in ms)
    delta = values[1] - values[0]  # current − baseline
    if rule.kind == "max_increase":
        failed = delta > tol + _EQUAL_TOL
        verdict = f"increases by more than {shown_tol}" if failed else f"within +{shown_tol}"
        return Check(**base, status="fail" if failed else "pass", delta=delta,
                     detail=f"Δ {format_value(rule.metric, delta, signed=True)} (current − baseline): {verdict}")
    va = case_values(baseline, pair.baseline, dataset, rule.metric)
    vb = case_values(current, pair.current, dataset, rule.metric)
    n: int | None = None
    if va or vb:
        delta, low, high, n = paired_bootstrap_delta(va, vb, seed=seed, confidence=confidence)
        if n == 0:
            return Check(**base, status="fail", n=0, detail="no case scored in both runs: cannot compare")
        how = (f"paired Δ {format_value(rule.metric, delta, signed=True)}, {confidence:.0%} CI "
               f"[{format_value(rule.metric, low, signed=True)}, {format_value(rule.metric, high, signed=True)}], "
               f"n={n} cases")
    else:  # no per-case values (a count): the two values themselves
        low = high = delta
        how = f"Δ {format_value(rule.metric, delta, signed=True)} (no per-case values)"
    if rule.kind == "max_drop":
        failed, verdict = high < -tol, f"drops by more than {shown_tol}" if high < -tol else f"within −{shown_tol}"
    else:
        failed, verdict = low > tol, f"rises by more than {shown_tol}" if low > tol else f"within +{shown_tol}"
    return Check(**base, status="fail" if failed else "pass", delta=delta, ci_low=low, ci_high=high, n=n,
                 detail=f"{how}: {verdict}")


def _check(rule: Rule, pair: ProviderPair, dataset: str, baseline: Run, current: Run, seed: int, confidence: float) -> Check:
    b_row = metric_row(baseline, pair.baseline, dataset, rule.metric)
    c_row = metric_row(current, pair.current, dataset, rule.metric)
    b_value, c_value = _measured(b_row), _measured(c_row)
    base = _Measured(provider=pair.label, dataset=dataset, baseline=b_value, current=c_value)
    if c_value is None or c_row is None:
        if b_value is None:
            return Check(**base, status="skipped", detail="measured in neither run")
        return Check(**base, status="fail", detail="measured in the baseline but not in the current run")
    if rule.kind in _SHIFTS:
        if b_value is None:
            return Check(**base, status="skipped", detail="not measured in the baseline: nothing to compare with")
        return _shift(rule, pair, dataset, baseline, current, base, (b_value, c_value), seed, confidence)
    return _bound(rule, base, c_value, int(c_row["n"]))


def datasets_of(baseline: Run, current: Run, pair: ProviderPair) -> list[str]:
    """The dataset scopes of a pair: pooled first, then every dataset either run reports on its own."""
    names = set()
    for run, provider in ((baseline, pair.baseline), (current, pair.current)):
        names |= set(run.metrics.loc[run.metrics["provider"] == provider, "dataset"])
    return [ALL, *sorted(names - {ALL})]


def _applies(rule: Rule, pair: ProviderPair) -> bool:
    return rule.provider is None or rule.provider in (pair.baseline, pair.current)


def _baseline_metrics(baseline: Run, current: Run, pair: ProviderPair) -> tuple[Check, list[Check], list[Check]]:
    """Every (dataset, metric) the baseline measured, against the current run: the ones that vanished and the
    ones whose n fell. n is compared for rates and counts (the catalogue's kinds; their n are cases or
    units), not for durations, tokens or costs, whose n are LM attempts that retries and the cache move.
    A metric the catalogue does not declare is compared when it has per-case values."""
    b = baseline.metrics[baseline.metrics["provider"] == pair.baseline]
    scored = {m for (p, m) in baseline.case_index if p == pair.baseline}
    one_epoch = epochs_of(current) < 2  # it cannot measure the repeat metrics: not a case that dropped out
    vanished, fell, measured = [], [], 0
    for row in b.to_dict("records"):
        if _measured(row) is None or (one_epoch and row["metric"] in REPEAT_METRICS):
            continue
        measured += 1
        dataset, metric = row["dataset"], row["metric"]
        c_row = metric_row(current, pair.current, dataset, metric)
        base = {"provider": pair.label, "dataset": dataset, "metric": metric, "baseline": float(row["value"])}
        if c_row is None or _measured(c_row) is None:
            vanished.append(Check(**base, status="fail", detail=f"{metric}: measured in the baseline (n={row['n']}) "
                                  "but not in the current run"))
        elif _counts_cases(metric, scored) and int(c_row["n"]) < int(row["n"]):
            fell.append(Check(**base, current=float(c_row["value"]), n=int(c_row["n"]), status="fail",
                              detail=f"{metric}: n {int(c_row['n'])} < baseline n {int(row['n'])}"))
    if not measured:
        return Check(provider=pair.label, status="skipped", detail="the baseline measured no metric"), [], []
    return (Check(provider=pair.label, status="pass", detail=f"{measured} (dataset, metric) values checked"),
            vanished, fell)


def epochs_of(run: Run) -> int:
    """The run's epochs per case (1 for a run without a manifest, or made before epochs existed)."""
    return run.manifest.epochs if run.manifest is not None else 1


def epochs_note(baseline: Run, current: Run) -> str:
    """What a gate across different epoch counts compares, and what it leaves out."""
    b, c = epochs_of(baseline), epochs_of(current)
    if b == c:
        return ""
    note = (f"The baseline ran {b} epoch(s) per case and the current run {c}: each case is paired on its values "
            "pooled over its epochs")
    repeats = " and ".join(REPEAT_METRICS)
    if c < 2:
        note += f"; {repeats} need two or more epochs and are not required of the current run"
    elif b >= 2:
        note += f"; {repeats} grow with the epoch count, so a rule on them compares unlike figures"
    return note + "."


def _counts_cases(metric: str, scored: set[str]) -> bool:
    declared = find(metric)
    return declared.kind in (Kind.RATE, Kind.COUNT) if declared is not None else metric in scored


def _result(label: str, metric: str, checks: list[Check], rule: Rule | None = None) -> RuleResult:
    statuses = {c.status for c in checks}
    status: Status = "fail" if "fail" in statuses else "pass" if "pass" in statuses else "skipped"
    return RuleResult(label=label, metric=metric, status=status, checks=checks, rule=rule)


def shared_providers(baseline: Run, current: Run) -> list[str]:
    return [p for p in current.providers if p in baseline.providers]


def _reference_result(baseline: Run, current: Run, pairs: list[ProviderPair], plans_differ: bool) -> RuleResult:
    """The built-in case-by-case check of deterministic arm pairs (evals.report.gate_reference)."""
    checks: list[Check] = []
    for pair in pairs:
        reason = why_not_comparable(baseline, current, pair.baseline, pair.current, plans_differ)
        if reason is not None:
            checks.append(Check(provider=pair.label, status="skipped", detail=f"not compared case by case: {reason}"))
            continue
        worse, compared, better = compare_cases(baseline, current, pair.baseline, pair.current)
        checks += [Check(provider=pair.label, dataset=w.dataset, metric=w.metric, status="fail", baseline=w.baseline,
                         current=w.current, n=len(w.cases), detail=w.detail()) for w in worse]
        if not worse:
            due = f"; {better} better (re-record the baseline to keep them)" if better else ""
            checks.append(Check(provider=pair.label, status="pass" if compared else "skipped", n=compared,
                                detail=f"{compared} (case, metric) values compared, none worse{due}"))
    return _result("no case worse with a deterministic model", "*", checks)


def evaluate_rules(rules: RuleSet, baseline: Run, current: Run, *, seed: int = 0,
                   pairs: list[ProviderPair] | None = None, plans_differ: bool = False) -> list[RuleResult]:
    """Pure: every rule against every provider pair it covers, pooled and per dataset, then the built-in
    checks that no metric of the baseline vanished or lost cases, and that no case got worse where the model is
    deterministic. `pairs` default to the shared providers."""
    if pairs is None:
        pairs = [ProviderPair(baseline=p, current=p) for p in shared_providers(baseline, current)]
    scopes = {pair.label: datasets_of(baseline, current, pair) for pair in pairs}
    results = []
    for rule in rules.rule:
        checks = [_check(rule, pair, dataset, baseline, current, seed, rules.confidence)
                  for pair in pairs if _applies(rule, pair)
                  for dataset in ([rule.dataset] if rule.dataset else scopes[pair.label])]
        if not checks:
            checks = [Check(provider="-", status="skipped", detail="no provider pair to gate")]
        results.append(_result(rule.label, rule.metric, checks, rule))
    if rules.require_baseline_metrics or rules.require_baseline_n:
        found = [_baseline_metrics(baseline, current, pair) for pair in pairs]
        if rules.require_baseline_metrics:
            checks = [c for summary, vanished, _ in found for c in (vanished or [summary])]
            results.append(_result("every metric the baseline measured is measured", "*", checks))
        if rules.require_baseline_n:
            checks = [c for summary, _, fell in found for c in (fell or [summary])]
            results.append(_result("no metric's n falls below the baseline's", "*", checks))
    if rules.compare_cases_when_deterministic and pairs:
        results.append(_reference_result(baseline, current, pairs, plans_differ))
    return results


def _arms_kept(baseline: Run, chosen: list[ProviderPair]) -> list[RuleResult]:
    """Paired by name, every provider (engine arm) of the baseline is in the current run: one that is gone
    took all its metrics with it (a run without `--system mem0`, a provider left out), which no rule would see.
    Explicit `--pair`s say which are gated, so this check is for name pairing only."""
    gated = {p.baseline for p in chosen}
    checks = [Check(provider=p, status="fail", detail="in the baseline, absent from the current run")
              for p in baseline.providers if p not in gated]
    if not checks:
        checks = [Check(provider="-", status="pass", detail=f"{len(gated)} provider(s) of the baseline gated")]
    return [_result("every provider of the baseline is in the current run", "*", checks)]


def _measured_something(baseline: Run, current: Run, chosen: list[ProviderPair]) -> list[RuleResult]:
    """Each gated provider measured something in both runs: one whose every unit was an infra error has no value
    a rule could fail on (its rates are n/a, skipped), so two dead runs would pass every rule."""
    checks = []
    for pair in chosen:
        for side, run, provider in (("baseline", baseline, pair.baseline), ("current", current, pair.current)):
            rate = _measured(metric_row(run, provider, ALL, "infra_error_rate"))
            if rate is not None and rate >= 1.0:
                checks.append(Check(provider=pair.label, status="fail", detail=f"every unit of the {side} run was an "
                                    "infra error: nothing was measured (see its summary.md, 'Infra errors')"))
    if not checks:
        checks = [Check(provider="-", status="pass", detail="both runs measured every gated provider")]
    return [_result("both runs measured something (not every unit an infra error)", "*", checks)]


def passed(results: list[RuleResult]) -> bool:
    return all(r.status != "fail" for r in results)


# ---- outputs ----------------------------------------------------------------------------------------------


def _where(check: Check) -> str:
    return check.provider if check.dataset == ALL else f"{check.provider} on {check.dataset}"


def junit_xml(results: list[RuleResult], *, baseline: str, current: str) -> str:
    """One testcase per rule; a failed rule carries <failure>, a skipped one <skipped>."""
    counts = {s: sum(r.status == s for r in results) for s in ("fail", "skipped")}
    suites = ET.Element("testsuites", name="hymem-eval gate", tests=str(len(results)),
                        failures=str(counts["fail"]), errors="0", skipped=str(counts["skipped"]))
    suite = ET.SubElement(suites, "testsuite", name="hymem-eval gate", tests=str(len(results)),
                          failures=str(counts["fail"]), errors="0", skipped=str(counts["skipped"]))
    props = ET.SubElement(suite, "properties")
    for key, value in (("baseline", baseline), ("current", current)):
        ET.SubElement(props, "property", name=key, value=value)
    for result in results:
        case = ET.SubElement(suite, "testcase", classname=f"gate.{result.metric}", name=result.label, time="0")
        lines = "\n".join(f"{_where(c)}: {c.status}: {c.detail}" for c in result.checks)
        if result.status == "fail":
            failing = "; ".join(f"{_where(c)}: {c.detail}" for c in result.checks if c.status == "fail")
            ET.SubElement(case, "failure", message=failing, type="regression").text = lines
        elif result.status == "skipped":
            ET.SubElement(case, "skipped", message="; ".join(dict.fromkeys(c.detail for c in result.checks)))
        else:
            ET.SubElement(case, "system-out").text = lines
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _value(x: float | None, metric: str) -> str:
    return "—" if x is None else format_value(metric, x)  # absent or not measured


_ICON = {"pass": "✅ pass", "fail": "❌ fail", "skipped": "⏭ skipped"}


def summary_markdown(results: list[RuleResult], *, baseline: str, current: str, notes: list[str] | None = None) -> str:
    """A CI job summary: the outcome, what was compared with what, then one line per rule, pair and dataset."""
    failed = sum(r.status == "fail" for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    head = "FAIL" if failed else "PASS"
    out = [f"## Regression gate: {head}", ""]
    out += [line for note in notes or [] for line in (note, "")]
    out += [f"{len(results)} rules: {len(results) - failed - skipped} passed, {failed} failed, {skipped} skipped. "
            f"Baseline `{baseline}`, current `{current}`. Each rule is checked pooled (`all`) and per dataset.", ""]

    rows = []
    for result in results:
        for c in result.checks:
            metric = c.metric or result.metric
            rows.append([_ICON[c.status], result.label, c.provider, c.dataset, _value(c.baseline, metric),
                         _value(c.current, metric), c.detail])
    out += [markdown_table(["status", "rule", "provider", "dataset", "baseline", "current", "detail"], rows), ""]
    return "\n".join(out) + "\n"


class GateOutcome(BaseModel):
    results: list[RuleResult]
    passed: bool
    markdown: str
    junit_path: Path
    summary_path: Path


def resolve_pairs(baseline: Run, current: Run, pairs: list[str] | None = None) -> tuple[list[ProviderPair], list[str]]:
    """Which baseline provider is gated against which current provider, and what the report says about it.

    `--pair B=C` (repeatable) decides; without it, providers pair by name, and when no name is shared
    and each run has exactly one provider, those two pair automatically."""
    notes: list[str] = []
    if pairs:
        chosen = []
        for text in pairs:
            b, sep, c = text.partition("=")
            b, c = b.strip(), c.strip()
            if not sep or not b or not c:
                raise GateInputError(f"--pair {text!r}: use BASELINE_PROVIDER=CURRENT_PROVIDER")
            for name, run, side in ((b, baseline, "baseline"), (c, current, "current run")):
                if name not in run.providers:
                    raise GateInputError(f"--pair {text!r}: the {side} has no provider {name!r} (it has "
                                         f"{', '.join(run.providers)})")
            chosen.append(ProviderPair(baseline=b, current=c))
        notes.append("Paired as asked: " + ", ".join(f"`{p.baseline}` (baseline) with `{p.current}` (current)"
                                                     for p in chosen) + ".")
    else:
        chosen = [ProviderPair(baseline=p, current=p) for p in shared_providers(baseline, current)]
        if not chosen:
            if len(baseline.providers) == 1 and len(current.providers) == 1:
                chosen = [ProviderPair(baseline=baseline.providers[0], current=current.providers[0])]
                notes.append(f"Paired automatically (each run has one provider): `{chosen[0].baseline}` (baseline) "
                             f"with `{chosen[0].current}` (current).")
            else:
                raise GateInputError(f"baseline providers {baseline.providers} and current providers "
                                     f"{current.providers} share none: pair them with --pair BASELINE=CURRENT")
    gated_b, gated_c = {p.baseline for p in chosen}, {p.current for p in chosen}
    left_out = [f"{p} (baseline)" for p in baseline.providers if p not in gated_b]
    left_out += [f"{p} (current)" for p in current.providers if p not in gated_c]
    if left_out:
        notes.append(f"Providers not gated: {', '.join(left_out)}.")
    return chosen, notes


def check_inputs(baseline: Run, current: Run, allow_different: bool) -> tuple[Run, Run, list[str]]:
    """Refuse runs of different inputs unless allowed; then cut both down to their shared cases."""
    diff: InputDiff = compare_inputs(baseline, current)
    if not diff.differ:
        return baseline, current, []
    if not allow_different:
        raise GateInputError(f"{diff.describe()}: a gate compares runs of the same inputs; pass "
                             f"--allow-different-inputs to gate only the {len(diff.shared)} shared cases")
    if not diff.shared:
        raise GateInputError(f"{diff.describe()}: no case is in both runs, nothing to gate")
    note = f"**Different inputs: {diff.describe()}. Only the {len(diff.shared)} cases in both runs are gated**"
    if diff.datasets_differ:
        note += ("; every value below is recomputed over those cases (rates as pooled num/den, n = cases scoring "
                 "the metric; usage figures and the epochs' flaky_case_rate and decision_flip_rate are left out)")
        baseline, current = restrict(baseline, diff.shared), restrict(current, diff.shared)
    return baseline, current, [note + "."]


def run_gate(baseline: Path, current: Path, *, rules: Path | None = None, junit: Path | None = None,
             summary: Path | None = None, pairs: list[str] | None = None,
             allow_different_inputs: bool = False, matcher: str | None = None) -> GateOutcome:
    """Gate `current` against `baseline`; write JUnit XML and markdown (default: into the current run
    directory) and append the markdown to $GITHUB_STEP_SUMMARY when it is set."""
    rule_set = load_rules(rules)
    junit_path = Path(junit) if junit is not None else Path(current) / "gate.xml"
    summary_path = Path(summary) if summary is not None else Path(current) / "gate.md"
    for flag, path in (("--junit", junit_path), ("--summary", summary_path)):  # before the work, not after it
        if path.is_dir():
            raise GateInputError(f"{flag} {path}: a directory; give the file to write")
        if next((p for p in path.parents if p.exists()), Path(".")).is_file():
            raise GateInputError(f"{flag} {path}: a parent of it is a file")
    matcher_notes: list[str] = []
    try:
        names = {"baseline": load_run(baseline).label, "current": load_run(current).label}
        base_dir, cur_dir = rescored_dirs([baseline, current], matcher)
        base_run, cur_run = load_run(base_dir), load_run(cur_dir)
        if matcher is None and matcher_note([base_run, cur_run]) and (Path(current) / "units.jsonl").is_file():
            # Like with like: the current run is re-scored with the baseline's matcher (a committed
            # baseline keeps no units.jsonl to re-score the other way).
            spec = base_run.manifest.matcher_spec if base_run.manifest is not None else "text"
            cur_run = load_run(rescored_dirs([current], spec)[0])
            matcher_notes.append(f"The current run was scored by another matcher than the baseline; it was re-scored "
                                 f"with the baseline's (`{spec}`) for this gate.")
    except RunInputError as exc:
        raise GateInputError(str(exc)) from exc
    if different_epochs := epochs_note(base_run, cur_run):
        matcher_notes.append(different_epochs)
    for different in (matcher_note([base_run, cur_run]), matcher_version_note([base_run, cur_run]),
                      embedder_note([base_run, cur_run]), judge_note([base_run, cur_run])):
        if different:
            matcher_notes.append(f"**{different}**")  # said, not failed: a model switch may be meant
    check_scopes(rule_set, base_run, cur_run, _rules_name(rules))
    chosen, pair_notes = resolve_pairs(base_run, cur_run, pairs)
    plans_differ = compare_inputs(base_run, cur_run).plans_differ
    base_run, cur_run, input_notes = check_inputs(base_run, cur_run, allow_different_inputs)
    seed = cur_run.manifest.seed if cur_run.manifest is not None else 0
    results = evaluate_rules(rule_set, base_run, cur_run, seed=seed, pairs=chosen, plans_differ=plans_differ)
    if not pairs and rule_set.require_baseline_metrics:
        results += _arms_kept(base_run, chosen)
    results += _measured_something(base_run, cur_run, chosen)
    rates = error_rates(r.manifest.matcher for r in (base_run, cur_run) if r.manifest is not None)
    annotate_checks(results, rates)
    if any(r.metric in MATCHED_METRICS or any(c.metric in MATCHED_METRICS for c in r.checks) for r in results):
        matcher_notes.append(rates_sentence(rates))
    markdown = summary_markdown(results, notes=input_notes + pair_notes + matcher_notes, **names)
    for path, text in ((junit_path, junit_xml(results, **names)), (summary_path, markdown)):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, text)  # evals.core.redact: no key or URL credential in what is written
        except OSError as exc:
            raise GateInputError(f"cannot write {path}: {exc.strerror or exc}") from None
    if step_summary := os.environ.get("GITHUB_STEP_SUMMARY"):
        write_text(step_summary, markdown, append=True)
    return GateOutcome(results=results, passed=passed(results), markdown=markdown, junit_path=junit_path,
                       summary_path=summary_path)


__all__ = ["Check", "GateInputError", "GateOutcome", "ProviderPair", "Rule", "RuleResult", "RuleSet", "check_scopes",
           "evaluate_rules",
           "junit_xml", "load_rules", "passed", "resolve_pairs", "run_gate", "summary_markdown"]
