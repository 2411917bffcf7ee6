"""Re-score a finished run with another matcher, for `compare --matcher` and `gate --matcher`.

Two runs scored by different matchers cannot be compared metric by metric; re-scoring both with
one matcher makes them comparable. The run's units (`units.jsonl`) are scored again against the
gold each one recorded (schema v5 on), into `RUN/rescored/<matcher>/` — a full report directory
that `compare` and `gate` read as a run. The dataset files are not read: they may have moved or
changed since. Units recorded before v5 carry no gold: for them, and only them, the cases are
reloaded from the manifest's dataset specs and checked against its dataset hash.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from evals.cases.adapters import load_spec
from evals.cases.dataset import dataset_hash
from evals.cases.gold import with_gold
from evals.core.errors import UsageError
from evals.core.redact import redact_text
from evals.record import CaseRun, Manifest, RunDirError, in_report_order, read_manifest, read_units, write_manifest
from evals.report.score_run import report_run
from evals.scoring.choose_matcher import MatcherSpecError, make_matcher, open_matcher


class RescoreError(ValueError):
    """A run that cannot be re-scored (no units, cases that cannot be reloaded identically)."""


def _cases_of(manifest: Manifest, ids: set[str]) -> list:
    for gold in ("all", "clean"):
        try:
            cases = [c for spec in manifest.datasets for c in load_spec(spec, gold=gold)]
        except (ValueError, OSError) as exc:
            raise RescoreError(f"cannot reload the run's datasets {manifest.datasets}: {exc}") from exc
        chosen = [c for c in cases if c.id in ids]
        if dataset_hash(chosen) == manifest.dataset_hash:
            return chosen
    raise RescoreError(f"the run's cases cannot be reloaded identically from {manifest.datasets} (the dataset "
                       "files changed since the run)")


def _with_dataset_gold(manifest: Manifest, runs: list[CaseRun], run_dir: Path) -> list[CaseRun]:
    """`runs`, those recorded without their gold (before schema v5) given it from the dataset files the manifest
    names, reloaded and checked against its hash; said on stderr, since it is the one path that reads them."""
    old = {r.case_id for r in runs if r.gold is None}
    if not old:
        return runs
    print(f"{run_dir}: {len(old)} case(s) were recorded without their gold (units.jsonl before schema v5); "
          f"re-scoring them against the dataset files {manifest.datasets}, checked against the run's dataset hash",
          file=sys.stderr)
    try:
        cases = _cases_of(manifest, {r.case_id for r in runs})
    except RescoreError as exc:
        raise RescoreError(f"{run_dir}: its units.jsonl predates schema v5 and carries no gold, so re-scoring it "
                           f"needs its dataset files: {exc}") from exc
    return with_gold(runs, cases)


def _same_version(manifest: Manifest, spec: str) -> bool:
    """Whether the run was scored by the matcher `spec` names today (its recorded fingerprint is this one's); a
    run that recorded none is taken as scored so."""
    recorded = (manifest.matcher or {}).get("fingerprint")
    if recorded is None:
        return True
    try:
        matcher = make_matcher(spec)
    except MatcherSpecError as exc:
        raise RescoreError(str(exc)) from exc
    try:
        return bool(matcher.fingerprint() == recorded)
    finally:
        if hasattr(matcher, "close"):
            matcher.close()


def rescore(run_dir: Path, spec: str) -> Path:
    """The run's report scored with matcher `spec`: the run itself when it was scored so, else a
    re-scored copy under RUN/rescored/<spec>/."""
    run_dir = Path(run_dir)
    try:
        manifest = read_manifest(run_dir)
    except RunDirError as exc:
        raise RescoreError(str(exc)) from exc
    if manifest.matcher_spec in (spec, redact_text(spec)) and _same_version(manifest, spec):  # as it was recorded
        return run_dir
    if not (run_dir / "units.jsonl").is_file():
        raise RescoreError(f"{run_dir}: no units.jsonl, so it cannot be re-scored with --matcher {spec}")
    try:
        runs = in_report_order(read_units(run_dir), manifest.providers)  # as the run scored them
    except (RunDirError, OSError) as exc:  # a bad record is one line naming it, not a crash in the scorers
        raise RescoreError(f"{run_dir}: {exc}") from exc
    out = run_dir / "rescored" / re.sub(r"[^A-Za-z0-9._-]+", "_", redact_text(spec))  # no key in a path either
    out.mkdir(parents=True, exist_ok=True)
    manifest = manifest.model_copy(update={"matcher_spec": spec, "matcher": None})
    runs = _with_dataset_gold(manifest, runs, run_dir)
    try:
        matcher = open_matcher(manifest, out)
    except UsageError as exc:
        raise RescoreError(str(exc)) from exc
    manifest.verdict = report_run(out, manifest, runs, matcher)
    write_manifest(out, manifest)
    return out


__all__ = ["RescoreError", "rescore"]
