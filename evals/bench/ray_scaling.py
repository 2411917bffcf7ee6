"""Benchmark: the Ray executor against the local one on a CPU-bound sweep, as ratios from one run.

- wall(ray, W) / wall(local, W) with the same worker count W (goal ≤ 1.1 at W = 2);
- the per-unit overhead Ray adds: (wall(ray, 1) − wall(local, 1)) / units;
- the speed-up from 1 to 2 Ray workers: wall(ray, 1) / wall(ray, 2) (goal ≥ 1.8);
- Ray's fixed cost of starting a local instance, apart from the units.
Each figure is the unit phase of `run_eval` (no loading, no report), the arms alternated in every repeat.
Run with `python -m evals.bench.ray_scaling [--dataset FILE] [--repeat R]`.
"""

# lazy imports: each benchmark imports only what it measures, inside the function that measures it.
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from evals.cases.dataset import bundled_dataset_dir


def _units_seconds(dataset: str, executor: str, workers: int) -> tuple[float, int]:
    from evals.pipeline import run_eval
    from evals.run.runner import RunConfig

    with tempfile.TemporaryDirectory() as tmp:
        extra: dict[str, Any] = {"executor": "ray", "workers": workers} if executor == "ray" else {}
        outcome = run_eval(RunConfig(datasets=[dataset], embedder="hash", faults="sweep", concurrency=workers,
                                     out=Path(tmp) / "run", progress=False, **extra))
        return outcome.units_seconds, outcome.units


def ray_scaling(dataset: str, repeat: int) -> dict[str, Any]:
    import ray

    from evals.run.executors.ray_executor import connect

    arms = [("local", 1), ("local", 2), ("ray", 1), ("ray", 2)]
    walls: dict[tuple[str, int], list[float]] = {arm: [] for arm in arms}
    start = time.perf_counter()
    connect(None, 2)  # one local instance for every ray arm: its start-up is reported apart
    startup = time.perf_counter() - start
    units = 0
    try:
        _units_seconds(dataset, "ray", 2)  # warm the worker processes (imports), as a long run would be
        for _ in range(repeat):
            for arm in arms:
                seconds, units = _units_seconds(dataset, *arm)
                walls[arm].append(seconds)
    finally:
        ray.shutdown()

    def ratios(a: tuple[str, int], b: tuple[str, int]) -> list[float]:
        return [x / y for x, y in zip(walls[a], walls[b], strict=True)]

    overhead = [(r - loc) / units * 1000 for r, loc in zip(walls[("ray", 1)], walls[("local", 1)], strict=True)]
    return {"dataset": dataset, "units": units, "repeat": repeat,
            "ray2_over_local2": _range(ratios(("ray", 2), ("local", 2))),
            "ray1_over_local1": _range(ratios(("ray", 1), ("local", 1))),
            "ray_speedup_1_to_2": _range(ratios(("ray", 1), ("ray", 2))),
            "local_speedup_1_to_2": _range(ratios(("local", 1), ("local", 2))),
            "ray_overhead_ms_per_unit": _range(overhead),
            "ray_startup_over_local2_units": startup / statistics.median(walls[("local", 2)])}


def _range(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench.ray_scaling")
    parser.add_argument("--dataset", default=str(bundled_dataset_dir() / "chat_en.jsonl"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(ray_scaling(args.dataset, args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
