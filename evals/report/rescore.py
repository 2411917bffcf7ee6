"""Re-score a finished run with another matcher, for `compare --matcher` and `gate --matcher`.

Two runs scored by different matchers cannot be compared metric by metric; re-scoring both with
one matcher makes them comparable. The run's units (`units.jsonl`) are scored again against its
cases, reloaded from the manifest's dataset specs and checked against its dataset hash, into
`RUN/rescored/<matcher>/` — a full report directory that `compare` and `gate` read as a run.
"""

from __future__ import annotations

import re
from pathlib import Path

from evals.core.errors import UsageError
from evals.core.redact import redact_text
from evals.record import Manifest, RunDirError, read_manifest, read_units, write_manifest
from evals.report.score_run import report_run
from evals.scoring.matchers import open_matcher


class RescoreError(ValueError):
    """A run that cannot be re-scored (no units, cases that cannot be reloaded identically)."""


def _cases_of(manifest: Manifest, ids: set[str]) -> list:
    from evals.cases.adapters import load_spec
    from evals.cases.dataset import dataset_hash

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


def _same_version(manifest: Manifest, spec: str) -> bool:
    """Whether the run was scored by the matcher `spec` names today (its recorded fingerprint is this one's); a
    run that recorded none is taken as scored so."""
    from evals.scoring.matchers import MatcherSpecError, make_matcher

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
        runs = read_units(run_dir)
    except (RunDirError, OSError) as exc:  # a bad record is one line naming it, not a crash in the scorers
        raise RescoreError(f"{run_dir}: {exc}") from exc
    out = run_dir / "rescored" / re.sub(r"[^A-Za-z0-9._-]+", "_", redact_text(spec))  # no key in a path either
    out.mkdir(parents=True, exist_ok=True)
    manifest = manifest.model_copy(update={"matcher_spec": spec, "matcher": None})
    cases = _cases_of(manifest, {r.case_id for r in runs})
    try:
        matcher = open_matcher(manifest, out)
    except UsageError as exc:
        raise RescoreError(str(exc)) from exc
    manifest.verdict = report_run(out, manifest, cases, runs, matcher)
    write_manifest(out, manifest)
    return out


__all__ = ["RescoreError", "rescore"]
