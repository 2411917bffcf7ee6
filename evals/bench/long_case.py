"""Long cases linear (issue 35, point 3): the time per write of a case of N one-message turns, `--faults none`,
the hash embedder and the offline model, for a short and a long case alternated in one process.

Why alternated: the machine is shared, so a lone time says little; sizes run back to back, repeated, give
medians and their ratio under the same load (the load average is reported with them). Each turn states a new
fact, so the store grows by a live memory per write: the case whose per-write checks would grow with it. The
garbage collector's CPU per write is reported apart (all collections, and the full ones): the heap grows with the
case, so it is the part of the growth that the checks' own passes do not show.

Run: `python -m evals.bench.long_case --sizes 100 1000 --repeat 3` (`--short-repeat K`: the first size K times a round).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from typing import Any

from evals.bench.thread_cpu import GcCPU
from evals.cases.dataset import Case
from evals.faults.plan import FaultPlan
from evals.run.replay import CaseReplayer, UnitModels
from hymem.embedder import HashEmbedder
from hymem.offline import offline_lm

_TIMES = ("wall_per_write", "cpu_per_write", "gc_cpu_per_write", "gc_full_cpu_per_write", "gc_full_per_1000_writes",
          "tracked_at_last_write")
_CITIES = ["Berlin", "Paris", "Rome", "Oslo", "Lima", "Kyoto", "Quito", "Dakar", "Hanoi", "Perth"]


def long_case(turns: int, case_id: str = "long") -> Case:
    """A chat case of `turns` one-message turns, each a distinct first-person statement."""
    return Case.model_validate({
        "id": case_id, "lang": "en", "user_id": "ana", "tags": [], "memories": [],
        "turns": [[{"role": "user", "name": "Ana",
                    "content": f"I visited {_CITIES[i % len(_CITIES)]} in year {1000 + i}."}] for i in range(turns)],
        "expect": {"facts": [{"text": "The user visited Berlin.", "subject": "user", "owner": "user"}]}})


def replay_seconds(turns: int) -> dict[str, Any]:
    """(wall, process CPU, the collector's CPU) seconds of one case's replay, per write, with its findings count,
    its full collections per 1,000 writes and the objects the collector tracked at its last write (counted outside
    the times: the count's own wall and CPU are taken off)."""
    case = long_case(turns)
    tracked = {"n": 0, "wall": 0.0, "cpu": 0.0}

    def count_at_last(done: int, total: int) -> None:
        if done == total:
            wall0, cpu0 = time.perf_counter(), time.process_time()
            tracked["n"] = len(gc.get_objects())
            tracked["wall"], tracked["cpu"] = time.perf_counter() - wall0, time.process_time() - cpu0

    start, cpu = time.perf_counter(), time.process_time()
    with GcCPU() as collector:  # each collection's thread CPU, by generation
        run = CaseReplayer(case, "long", "offline",
                           UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()),
                           FaultPlan.parse("none"), 0, on_write=count_at_last).run()
    wall = time.perf_counter() - start - tracked["wall"]
    cpu = time.process_time() - cpu - tracked["cpu"]
    if run.status != "ok":
        raise RuntimeError(run.error)
    return {"turns": turns, "wall_per_write": wall / turns, "cpu_per_write": cpu / turns,
            "gc_cpu_per_write": sum(collector.seconds) / turns, "gc_full_cpu_per_write": collector.seconds[2] / turns,
            "gc_full_per_1000_writes": collector.collections[2] * 1000 / turns, "tracked_at_last_write": tracked["n"],
            "findings": len(run.findings),
            "memories": len(run.memories)}


def per_write_ratio(sizes: list[int], repeat: int, short_repeat: int = 1) -> dict[str, Any]:
    """Sizes alternated `repeat` times; medians of the per-write wall and CPU, and each size's over the first (and,
    round by round, each long case's CPU per write over its round's short runs: the spread between rounds).
    The first (short) size runs `short_repeat` times in each round: one short case's per-write time moved 17–23 ms
    between rounds on the same code at a quiet load, and it is every ratio's denominator; a long case is its own
    average over thousands of writes."""
    replay_seconds(3)  # first-call costs (imports, DSPy caches) belong to no size
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    load = [os.getloadavg()[0]]
    for _ in range(repeat):
        for n in sizes:
            for _ in range(short_repeat if n == sizes[0] else 1):
                runs[n].append(replay_seconds(n))
            load.append(os.getloadavg()[0])
    med = {n: {k: statistics.median(r[k] for r in runs[n]) for k in _TIMES}
           for n in sizes}
    base = sizes[0]
    shorts = [statistics.median(r["cpu_per_write"] for r in runs[base][i * short_repeat:(i + 1) * short_repeat])
              for i in range(repeat)]  # each round's short runs, in the order they ran
    times = _TIMES[:4]  # seconds, shown as ms; the counts as they are
    return {"sizes": sizes, "repeat": repeat, "short_repeat": short_repeat, "load_1min": [round(x, 1) for x in load],
            "median_ms_per_write": {n: {k: round(v * 1000, 2) for k, v in m.items() if k in times}
                                    for n, m in med.items()},
            "collector": {n: {k: round(v, 2) for k, v in m.items() if k not in times} for n, m in med.items()},
            "ratio_over_smallest": {n: {k: round(med[n][k] / med[base][k], 3) if med[base][k] else None for k in med[n]}
                                    for n in sizes},
            "cpu_ratio_by_round": {n: [round(runs[n][i]["cpu_per_write"] / short, 3) for i, short in enumerate(shorts)]
                                   for n in sizes[1:]},
            "findings": {n: [r["findings"] for r in runs[n]] for n in sizes},
            "memories": {n: runs[n][0]["memories"] for n in sizes}, "goal": 1.2}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--short-repeat", type=int, default=1, help="runs of the first size in each round")
    args = parser.parse_args(argv)
    print(json.dumps(per_write_ratio(args.sizes, args.repeat, args.short_repeat), indent=1))


if __name__ == "__main__":
    main()
