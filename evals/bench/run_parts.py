"""Where a LoCoMo run's CPU goes, part by part (issue 35, point 1; BENCHMARKS.md, "LoCoMo, nineteenth session").

The issue compares a run's CPU, every thread, with minilm's alone on the cases' texts; a profiler sees one thread and
inflates Python. This runs the bench's LoCoMo run (`evals.bench.matcher.locomo_ratio`'s: `--sample N --seed 1 --faults
none`, minilm, the semantic matcher, caches cold) with each part's *thread* CPU taken around it (`time.thread_time`):
e5's and MiniLM's `embed` (MiniLM split by caller: the matcher's word vectors or the engine), the encode-ahead thread,
`score_pairs`, `report_run`, the plots, the HTML view, reading the cases and opening the matcher. What the units'
threads do besides embedding is the process's CPU less the rest. Each thread's CPU is also read whole
(`evals.bench.thread_cpu`: Python threads by name; threads Python did not start, such as OpenMP's and OpenBLAS's
workers, as `native`), and the garbage collector's CPU by generation: a spinning runtime shows as `native` CPU.

    python -m evals.bench.run_parts --locomo 60
"""

# lazy imports: the run's modules are imported, and patched, inside `run_parts` only.
from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evals.bench.matcher import LOCOMO
from evals.bench.thread_cpu import GcCPU, ThreadCPU


@contextmanager
def _patched(owner: Any, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, wrap(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def run_parts(sample: int, seed: int = 1, path: Path = LOCOMO) -> dict[str, Any]:
    """Thread CPU seconds per part of one LoCoMo run, the process's CPU and wall, and how many texts each model got."""
    from contextlib import ExitStack

    import evals.pipeline as pipeline
    import evals.report.score_run as score_run
    import evals.scoring.ahead as ahead
    import evals.scoring.semantic as semantic
    from evals.run.runner import RunConfig
    from hymem.embedder import E5Embedder, MiniLMEmbedder

    cpu: dict[str, float] = defaultdict(float)
    texts: dict[str, int] = defaultdict(int)
    local = threading.local()

    def timed(part: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            def inner(*args: Any, **kwargs: Any) -> Any:
                started = time.thread_time()
                try:
                    return fn(*args, **kwargs)
                finally:
                    cpu[part] += time.thread_time() - started
            return inner
        return wrap

    def model(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            def inner(self: Any, batch: list[str]) -> Any:
                part = kind if kind == "e5" else ("minilm: matcher's word vectors" if getattr(local, "matcher", False)
                                                  else "minilm: engine")
                started = time.thread_time()
                try:
                    return fn(self, batch)
                finally:
                    cpu[part] += time.thread_time() - started
                    texts[part] += len(batch)
            return inner
        return wrap

    def matcher_side(fn: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any, **kwargs: Any) -> Any:
            local.matcher = True
            try:
                return fn(*args, **kwargs)
            finally:
                local.matcher = False
        return inner

    with tempfile.TemporaryDirectory() as tmp, ExitStack() as patches:
        patches.enter_context(_patched(E5Embedder, "embed", model("e5")))
        patches.enter_context(_patched(MiniLMEmbedder, "embed", model("minilm")))
        patches.enter_context(_patched(semantic, "_unit", matcher_side))
        patches.enter_context(_patched(ahead.EncodeAhead, "_work", timed("encode-ahead thread (e5 included)")))
        patches.enter_context(_patched(score_run, "score_pairs", timed("score_pairs (word vectors included)")))
        for name, part in (("report_run", "report_run (score_pairs included)"), ("write_plots", "write_plots"),
                           ("write_view", "write_view"), ("prepare", "prepare (cases, the engine's model)"),
                           ("open_matcher", "open_matcher"), ("run_units", "run_units, main thread")):
            patches.enter_context(_patched(pipeline, name, timed(part)))
        threads, collector = patches.enter_context(ThreadCPU()), patches.enter_context(GcCPU())
        started, started_cpu = time.perf_counter(), time.process_time()
        pipeline.run_eval(RunConfig(datasets=[f"locomo:{path}"], sample=sample, seed=seed, faults="none",
                                    out=Path(tmp) / "run", progress=False, matcher="semantic", embedder="minilm",
                                    cache_dir=Path(tmp) / "cache" / "responses.sqlite"))
        wall, process = time.perf_counter() - started, time.process_time() - started_cpu
    parts = dict(cpu)
    nested = {"e5", "minilm: matcher's word vectors", "score_pairs (word vectors included)"}  # inside another part
    accounted = sum(v for k, v in parts.items() if k not in nested)
    return {"cases": sample, "wall_s": round(wall, 1), "process_cpu_s": round(process, 1),
            "cpu_s": {k: round(v, 2) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])},
            "units' other work (by difference)": round(process - accounted, 2), "texts": dict(texts),
            "threads_cpu_s": threads.by_thread(), "gc": collector.summary()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench.run_parts")
    parser.add_argument("--locomo", type=int, metavar="N", default=15, help="sampled LoCoMo cases (default 15)")
    args = parser.parse_args(argv)
    print(json.dumps(run_parts(args.locomo), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
