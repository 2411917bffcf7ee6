"""Executors: where the (provider × case) units of a run execute.

Why apart from the runner: the runner owns validation, the run directory, `units.jsonl`, resume and the
report; an executor only turns units into finished `CaseRun`s, in any order, as they finish. `local`
runs them on a thread pool in this process; `ray` runs each unit as a Ray task, on a local Ray
instance or an existing cluster. Either way the driver alone writes `units.jsonl`.
"""

from __future__ import annotations

from evals.run.executors._local import run_local
from evals.run.executors._unit import UnitTask, failed_unit

EXECUTORS = ("local", "ray")

__all__ = ["EXECUTORS", "UnitTask", "failed_unit", "run_local"]
