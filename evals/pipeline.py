"""The pipeline of one `hymem-eval run`: cases → run (arms, faults, checks) → scoring → record → report.

Why a module of its own above the stages: each stage imports only those below it, so the one place that calls them
in order, and turns what goes wrong into the command line's three answers (bad input, an interrupt, a failed
write), is above them all (ARCHITECTURE.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evals.cases.dataset import Case
from evals.cases.gold import with_gold
from evals.core.errors import UsageError
from evals.record import UNITS_FILE, Manifest, write_manifest
from evals.report.plots import write_plots
from evals.report.run_report import run_verdict
from evals.report.score_run import report_run
from evals.report.view import write_view
from evals.run.executors.ray_executor import RayUnavailable
from evals.run.runner import RunConfig, prepare, release_run_dir, run_units
from evals.scoring.ahead import EncodeAhead
from evals.scoring.choose_matcher import make_matcher_spec, open_matcher
from evals.tuning.saved import fitted_cases, load_program


class RunOutcome(BaseModel):
    run_dir: Path
    verdict: str
    units: int
    manifest: Manifest
    units_seconds: float = 0.0  # wall time of the unit phase (replay + checks), without loading and reporting
    reasons: list[str] = Field(default_factory=list)  # why the verdict is what it is
    infra_error_units: int = 0  # (provider, case) units that failed with an infra error
    infra_error_faults: int = 0  # faulted runs that failed with an infra error


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: how many finished units are saved in `run_dir` (0: nothing to resume)."""

    def __init__(self, run_dir: Path, saved: int):
        super().__init__(f"{saved} finished units saved in {run_dir}")
        self.run_dir, self.saved = run_dir, saved


class RunIOError(RuntimeError):
    """Writing the run record or report failed mid-run (disk full, directory gone): one line, exit 1."""


def load_tuned_program(path: Path | None, cases: Sequence[Case] = ()) -> Any:
    """The MemoryProgram saved by `hymem-eval tune` in `path`, or None for the built-in prompts. Refused when
    any of `cases` is one it was tuned on: its demos may hold that very conversation, so the scores would be
    fitted on the data they report on."""
    if path is None:
        return None
    try:
        program = load_program(path)
        fitted = fitted_cases(path, cases)
    except ValueError as exc:
        raise UsageError(f"--program: {exc}") from exc
    if fitted:
        raise UsageError(f"--program {path}: {len(fitted)} case(s) of the dataset were in its train set "
                         f"({', '.join(fitted[:3])}{', ...' if len(fitted) > 3 else ''}): scores on them would be "
                         "fitted; run it on held-out cases (e.g. its dev.jsonl)")
    return program


def run_eval(config: RunConfig) -> RunOutcome:
    """Run (or resume) an eval and write its report.

    Ctrl-C raises `RunInterrupted` (saying how many units are saved); an I/O failure while writing raises
    `RunIOError`; bad input raises `UsageError` before any work.
    """
    try:
        matcher_spec = make_matcher_spec(config.matcher)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    prepared = prepare(config, matcher_spec=matcher_spec, load_program=load_tuned_program)
    run_dir, manifest = prepared.run_dir, prepared.manifest
    state = {"saved": 0}
    try:
        matcher = open_matcher(manifest, run_dir, config.cache_dir and config.cache_dir.parent, config.providers_file,
                               prepared.embedder if prepared.embedder_name == "minilm" else None,  # one model load
                               use_cache=config.cache)
        ahead = EncodeAhead(matcher)  # finished units' texts encoded while the others replay
        try:
            units = run_units(config, prepared, state, on_unit=ahead.submit)
        except BaseException:
            ahead.close(cancel=True)
            raise
        ahead.close()
        runs = with_gold(units.runs, prepared.cases)  # units a resumed pre-v5 run recorded without their gold
        verdict = report_run(run_dir, manifest, runs, matcher)
        write_plots(run_dir)
        manifest.finished = time.time()
        manifest.verdict = verdict
        write_manifest(run_dir, manifest)
        write_view([run_dir])  # report.html: the run in a browser, from the record just written
        return RunOutcome(run_dir=run_dir, verdict=verdict, units=len(runs), manifest=manifest,
                          units_seconds=units.seconds, reasons=run_verdict(runs, manifest)[1],
                          infra_error_units=sum(r.status == "infra_error" for r in runs),
                          infra_error_faults=sum(f.outcome == "infra_error" for r in runs for f in r.faults))
    except KeyboardInterrupt:  # a unit's line may be on disk before its count: Ctrl-C can land inside the fsync
        raise RunInterrupted(run_dir, max(state["saved"], _records_on_disk(run_dir))) from None
    except RayUnavailable as exc:  # Ray did not join the cluster given (bad input) or start here (the machine)
        error = UsageError if config.ray_address else RunIOError
        raise error(f"{exc}; {state['saved']} finished units are saved in {run_dir / UNITS_FILE}") from None
    except OSError as exc:
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        raise RunIOError(f"cannot write the run{where}: {exc.strerror or exc}; {state['saved']} finished units "
                         f"are saved in {run_dir / 'units.jsonl'} (continue with --resume once fixed)") from None
    finally:
        release_run_dir(run_dir)  # the run directory is free for a --resume or a reader


def _records_on_disk(run_dir: Path) -> int:
    """Complete lines of units.jsonl: the finished units a --resume would keep."""
    try:
        return (run_dir / UNITS_FILE).read_bytes().count(b"\n")
    except OSError:
        return 0


__all__ = ["RunConfig", "RunIOError", "RunInterrupted", "RunOutcome", "UsageError", "load_tuned_program", "run_eval"]
