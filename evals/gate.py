"""The regression gate: rules over a baseline run and a current run, for CI.

A floor, ceiling or exact value (`min`, `max`, `equals`) is checked on the current run's
pooled value. A drop rule (`max_drop`) fails only when the whole paired 95% CI of
current − baseline lies below −tolerance, so noise alone does not fail a build; `max_rise`
is its mirror for error rates. A metric absent from both runs is skipped; one the baseline
has and the current run lacks fails, since a metric that vanished is not a pass. An
unmeasured value (NaN) fails too. `evaluate_rules` is pure; `run_gate` does the files.
"""

from __future__ import annotations

import math
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from xml.etree import ElementTree as ET

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evals.compare import Run, RunInputError, case_values, fmt, is_count, load_run, metric_row
from evals.stats import paired_bootstrap_delta

Status = Literal["pass", "fail", "skipped"]
CONSTRAINTS = ("min", "max", "equals", "max_drop", "max_rise")
_SYMBOL = {"min": ">=", "max": "<=", "equals": "==", "max_drop": "may drop at most", "max_rise": "may rise at most"}
_EQUAL_TOL = 1e-9


class GateInputError(ValueError):
    """A rules file or run that cannot be gated (exit code 2)."""


class Rule(BaseModel):
    """One `[[rule]]` of a rules file: a metric and exactly one constraint on it."""

    model_config = ConfigDict(extra="forbid")

    metric: str  # a metric name as in metrics.parquet
    min: float | None = None  # floor on the current value
    max: float | None = None  # ceiling on the current value
    equals: float | None = None  # exact current value (counts, must-be-zero rates)
    max_drop: float | None = Field(default=None, ge=0)  # tolerance on current − baseline (paired CI)
    max_rise: float | None = Field(default=None, ge=0)  # the same for metrics where lower is better
    provider: str | None = None  # default: every provider present in both runs
    dataset: str = "all"  # a dataset name, or "all"
    name: str | None = None  # the JUnit testcase name; default: derived from the rule

    @model_validator(mode="after")
    def _one_constraint(self) -> Rule:
        given = [c for c in CONSTRAINTS if getattr(self, c) is not None]
        if len(given) != 1:
            raise ValueError(f"rule for {self.metric!r} needs exactly one of {', '.join(CONSTRAINTS)}; got "
                             f"{given or 'none'}")
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
        scope = "" if self.dataset == "all" else f" on {self.dataset}"
        scope += f" for {self.provider}" if self.provider else ""
        return f"{self.metric} {_SYMBOL[self.kind]} {self.threshold:g}{scope}"


class RuleSet(BaseModel):
    """A rules file: top-level settings and a list of `[[rule]]` tables."""

    model_config = ConfigDict(extra="forbid")

    confidence: float = Field(default=0.95, gt=0, lt=1)  # of the paired bootstrap CI of drop rules
    rule: list[Rule] = Field(min_length=1)


class Check(BaseModel):
    """A rule applied to one provider."""

    provider: str
    status: Status
    baseline: float | None = None  # pooled baseline value, when present
    current: float | None = None  # pooled current value, when present
    delta: float | None = None  # paired mean of current − baseline (drop rules)
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None  # cases paired (drop rules) or n of the current value
    detail: str


class RuleResult(BaseModel):
    rule: Rule
    status: Status  # fail if any check fails, skipped if every check skipped, else pass
    checks: list[Check]


def load_rules(path: Path | None = None) -> RuleSet:
    """Parse a rules file (default: the gates.toml shipped with evals); GateInputError when malformed."""
    try:
        if path is None:
            text = resources.files("evals").joinpath("gates.toml").read_text(encoding="utf-8")
            where = "evals/gates.toml"
        else:
            text, where = Path(path).read_text(encoding="utf-8"), str(path)
        return RuleSet.model_validate(tomllib.loads(text))
    except OSError as exc:
        raise GateInputError(f"rules file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise GateInputError(f"rules file {where}: not TOML ({exc})") from exc
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise GateInputError(f"rules file {where}: {problems}") from exc


# ---- evaluation (pure) ------------------------------------------------------------------------------------


def _bound(rule: Rule, provider: str, current: dict[str, Any]) -> Check:
    value, kind, limit = float(current["value"]), rule.kind, rule.threshold
    base = {"provider": provider, "current": value, "n": int(current["n"])}
    if math.isnan(value):
        return Check(**base, status="fail", detail="not measured in the current run (NaN)")
    ok = {"min": value >= limit, "max": value <= limit,
          "equals": math.isclose(value, limit, rel_tol=0, abs_tol=_EQUAL_TOL)}[kind]
    shown = fmt(value, is_count(rule.metric))
    return Check(**base, status="pass" if ok else "fail", detail=f"{shown} {_SYMBOL[kind]} {limit:g}" if ok else
                 f"{shown} violates {_SYMBOL[kind]} {limit:g}")


def _shift(rule: Rule, provider: str, baseline: Run, current: Run, b_row: dict, c_row: dict, seed: int,
           confidence: float) -> Check:
    tol = rule.threshold
    base = {"provider": provider, "baseline": float(b_row["value"]), "current": float(c_row["value"])}
    va = case_values(baseline, provider, rule.dataset, rule.metric)
    vb = case_values(current, provider, rule.dataset, rule.metric)
    if va or vb:
        delta, low, high, n = paired_bootstrap_delta(va, vb, seed=seed, confidence=confidence)
        if n == 0:
            return Check(**base, status="fail", n=0, detail="no case scored in both runs: cannot compare")
        how = f"paired Δ {delta:+.3f}, {confidence:.0%} CI [{low:+.3f}, {high:+.3f}], n={n} cases"
    else:  # no per-case values (a count): the two values themselves
        delta = base["current"] - base["baseline"]
        low = high = delta
        n = None
        if math.isnan(delta):
            return Check(**base, status="fail", detail="not measured in one of the runs (NaN)")
        how = f"Δ {delta:+g} (no per-case values)"
    if rule.kind == "max_drop":
        failed, verdict = high < -tol, f"drops by more than {tol:g}" if high < -tol else f"within −{tol:g}"
    else:
        failed, verdict = low > tol, f"rises by more than {tol:g}" if low > tol else f"within +{tol:g}"
    return Check(**base, status="fail" if failed else "pass", delta=delta, ci_low=low, ci_high=high, n=n,
                 detail=f"{how}: {verdict}")


def _check(rule: Rule, provider: str, baseline: Run, current: Run, seed: int, confidence: float) -> Check:
    b_row = metric_row(baseline, provider, rule.dataset, rule.metric)
    c_row = metric_row(current, provider, rule.dataset, rule.metric)
    if c_row is None:
        if b_row is None:
            return Check(provider=provider, status="skipped", detail="absent from both runs")
        return Check(provider=provider, status="fail", baseline=float(b_row["value"]),
                     detail="in the baseline but absent from the current run")
    if rule.kind in ("max_drop", "max_rise"):
        if b_row is None:
            return Check(provider=provider, status="skipped", current=float(c_row["value"]),
                         detail="absent from the baseline: nothing to compare with")
        return _shift(rule, provider, baseline, current, b_row, c_row, seed, confidence)
    check = _bound(rule, provider, c_row)
    return check.model_copy(update={"baseline": None if b_row is None else float(b_row["value"])})


def shared_providers(baseline: Run, current: Run) -> list[str]:
    return [p for p in current.providers if p in baseline.providers]


def evaluate_rules(rules: RuleSet, baseline: Run, current: Run, *, seed: int = 0) -> list[RuleResult]:
    """Pure: every rule against every provider it covers (its own, or each present in both runs)."""
    shared = shared_providers(baseline, current)
    results = []
    for rule in rules.rule:
        providers = [rule.provider] if rule.provider else shared
        checks = [_check(rule, p, baseline, current, seed, rules.confidence) for p in providers]
        if not checks:
            checks = [Check(provider="-", status="skipped", detail="no provider in both runs")]
        statuses = {c.status for c in checks}
        status: Status = "fail" if "fail" in statuses else "pass" if "pass" in statuses else "skipped"
        results.append(RuleResult(rule=rule, status=status, checks=checks))
    return results


def passed(results: list[RuleResult]) -> bool:
    return all(r.status != "fail" for r in results)


# ---- outputs ----------------------------------------------------------------------------------------------


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
        case = ET.SubElement(suite, "testcase", classname=f"gate.{result.rule.metric}", name=result.rule.label,
                             time="0")
        lines = "\n".join(f"{c.provider}: {c.status}: {c.detail}" for c in result.checks)
        if result.status == "fail":
            failing = "; ".join(f"{c.provider}: {c.detail}" for c in result.checks if c.status == "fail")
            ET.SubElement(case, "failure", message=failing, type="regression").text = lines
        elif result.status == "skipped":
            ET.SubElement(case, "skipped", message="; ".join(c.detail for c in result.checks))
        else:
            ET.SubElement(case, "system-out").text = lines
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _value(x: float | None, count: bool) -> str:
    return "—" if x is None else fmt(x, count)  # absent, as against n/a for not measured


_ICON = {"pass": "✅ pass", "fail": "❌ fail", "skipped": "⏭ skipped"}


def summary_markdown(results: list[RuleResult], *, baseline: str, current: str, note: str = "") -> str:
    """A CI job summary: the outcome, then one line per rule and provider."""
    failed = sum(r.status == "fail" for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    head = "FAIL" if failed else "PASS"
    out = [f"## Regression gate: {head}", "",
           f"{len(results)} rules: {len(results) - failed - skipped} passed, {failed} failed, {skipped} skipped. "
           f"Baseline `{baseline}`, current `{current}`.", ""]
    if note:
        out += [note, ""]
    from evals.report import markdown_table

    rows = []
    for result in results:
        count = is_count(result.rule.metric)
        for c in result.checks:
            rows.append([_ICON[c.status], result.rule.label, c.provider, _value(c.baseline, count),
                         _value(c.current, count), c.detail])
    out += [markdown_table(["status", "rule", "provider", "baseline", "current", "detail"], rows), ""]
    return "\n".join(out) + "\n"


class GateOutcome(BaseModel):
    results: list[RuleResult]
    passed: bool
    markdown: str
    junit_path: Path
    summary_path: Path


def run_gate(baseline: Path, current: Path, *, rules: Path | None = None, junit: Path | None = None,
             summary: Path | None = None) -> GateOutcome:
    """Gate `current` against `baseline`; write JUnit XML and markdown (default: into the current run
    directory) and append the markdown to $GITHUB_STEP_SUMMARY when it is set."""
    rule_set = load_rules(rules)
    try:
        base_run, cur_run = load_run(baseline), load_run(current)
    except RunInputError as exc:
        raise GateInputError(str(exc)) from exc
    shared = shared_providers(base_run, cur_run)
    if not shared:
        raise GateInputError(f"baseline providers {base_run.providers} and current providers {cur_run.providers} "
                             "share none: nothing to gate")
    seed = cur_run.manifest.seed if cur_run.manifest is not None else 0
    results = evaluate_rules(rule_set, base_run, cur_run, seed=seed)
    left_out = [p for p in cur_run.providers + base_run.providers if p not in shared]
    note = f"Providers not in both runs, not gated: {', '.join(dict.fromkeys(left_out))}." if left_out else ""
    names = {"baseline": base_run.label, "current": cur_run.label}
    markdown = summary_markdown(results, note=note, **names)
    junit_path = Path(junit) if junit is not None else Path(current) / "gate.xml"
    summary_path = Path(summary) if summary is not None else Path(current) / "gate.md"
    for path, text in ((junit_path, junit_xml(results, **names)), (summary_path, markdown)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if step_summary := os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(markdown)
    return GateOutcome(results=results, passed=passed(results), markdown=markdown, junit_path=junit_path,
                       summary_path=summary_path)


__all__ = ["Check", "GateInputError", "GateOutcome", "Rule", "RuleResult", "RuleSet", "evaluate_rules", "junit_xml",
           "load_rules", "passed", "run_gate", "summary_markdown"]
