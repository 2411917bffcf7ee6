"""Engine overhead per write, hymem vs mem0, measured side by side in one run the same way.

Both engines talk HTTP to the same local server (the offline model, which answers both engines' prompts,
and the hash embedder), and each write's overhead is its wall time minus the time inside its model and
embedding calls, timed at each engine's client boundary: hymem's `dspy.LM` call (a DSPy callback) and its
embedder's `embed`, mem0's openai `create` calls. The engines alternate per repeat on fresh stores, after
one warm-up write each. Run with `python -m evals.bench.overhead [--writes N] [--repeat R]`.
"""

# lazy imports: each benchmark imports only what it measures, inside the function that measures it.
from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

_CITIES = ["Berlin", "Paris", "Rome", "Oslo", "Lima", "Kyoto", "Quito", "Porto", "Riga", "Tunis", "Dakar", "Hanoi",
           "Bergen", "Cusco", "Malmo", "Perth", "Accra", "Split", "Delft", "Turin", "Graz", "Nantes", "Leeds", "Brno"]
_COMPANIES = ["Stripe", "Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Wonka", "Tyrell", "Cyberdyne",
              "Soylent", "Gringotts", "Monarch", "Stark", "Wayne", "Oscorp", "Aperture", "Dunder", "Pied", "Massive",
              "Virtucon", "Nakatomi", "Zorg", "Weyland"]


def two_fact_turns(writes: int) -> list[list[dict[str, str]]]:
    """`writes` chat turns of two first-person facts each, every fact new (the offline model extracts both)."""
    if writes > len(_CITIES):
        raise ValueError(f"at most {len(_CITIES)} writes of distinct facts")
    return [[{"role": "user", "content": f"I live in {_CITIES[i]}. I work at {_COMPANIES[i]}."}] for i in range(writes)]


def _lm_timer() -> Any:
    from dspy.utils.callback import BaseCallback

    class LMTimer(BaseCallback):
        """Adds up the time between each LM call's start and end."""

        def __init__(self) -> None:
            self.started: dict[str, float] = {}
            self.seconds = 0.0

        def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
            self.started[call_id] = time.perf_counter()

        def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
            self.seconds += time.perf_counter() - self.started.pop(call_id, time.perf_counter())

    return LMTimer()


def hymem_writes(url: str, turns: list, store: Path) -> list[tuple[float, float]]:
    """(wall, inside calls) seconds per write of hymem over HTTP."""
    import dspy

    from evals.bench.engine import TimedEmbedder
    from hymem.client import HyMemoryClient
    from hymem.embedder import make_embedder

    timer = _lm_timer()
    lm = dspy.LM("openai/offline", api_base=url, api_key="hymem-local", cache=False, num_retries=0, timeout=10,
                 callbacks=[timer])
    embedder = TimedEmbedder(make_embedder(f"openai/hash@{url}"))
    out = []
    with HyMemoryClient(path=store, lm=lm, embedder=embedder) as client:
        assert client.add(turns[0], user_id="warmup").success  # first-call costs are not a write's
        for i, turn in enumerate(turns[1:], start=1):  # turns[0] was the warm-up
            before = timer.seconds + embedder.seconds
            start = time.perf_counter()
            assert client.add(turn, user_id="tim", request_id=f"w{i}").success
            out.append((time.perf_counter() - start, timer.seconds + embedder.seconds - before))
    return out


def mem0_writes(url: str, turns: list, store: Path) -> list[tuple[float, float]]:
    """(wall, inside calls) seconds per write of mem0 over HTTP (its openai clients timed by the adapter)."""
    from evals.arms.mem0_system import Mem0System, local_endpoints

    llm, embed, dim = local_endpoints(url, "hash")
    system = Mem0System(llm, embed, dim)
    system.open(store)
    out = []
    try:
        system.memory.add(turns[0], user_id="warmup")
        for i, turn in enumerate(turns[1:], start=1):  # turns[0] was the warm-up
            system.calls.reset(None, infer=True)
            start = time.perf_counter()
            system.memory.add(turn, user_id="tim", metadata={"request_id": f"w{i}"})
            out.append((time.perf_counter() - start, system.calls.seconds))
    finally:
        system.shutdown()
    return out


def _summary(samples: list[tuple[float, float]]) -> dict[str, float]:
    overhead = [wall - calls for wall, calls in samples]
    wall = sum(w for w, _ in samples)
    return {"overhead_ms_median": 1000 * statistics.median(overhead),
            "overhead_ms_mean": 1000 * statistics.fmean(overhead),
            "overhead_share_of_wall": sum(overhead) / wall, "wall_ms_mean": 1000 * wall / len(samples)}


def engine_overhead(writes: int = 20, repeat: int = 3) -> dict[str, Any]:
    """Per-write overhead of each engine and the ratio hymem/mem0 (medians over all writes of all repeats)."""
    from evals.arms.serve import start_server

    turns = two_fact_turns(writes + 1)
    samples: dict[str, list[tuple[float, float]]] = {"hymem": [], "mem0": []}
    with start_server(embedder="hash") as server, tempfile.TemporaryDirectory(prefix="hymem-overhead-") as tmp:
        for r in range(repeat):
            samples["hymem"] += hymem_writes(server.url, turns, Path(tmp) / f"hymem-{r}")
            samples["mem0"] += mem0_writes(server.url, turns, Path(tmp) / f"mem0-{r}")
    summaries = {name: _summary(s) for name, s in samples.items()}
    out: dict[str, Any] = dict(summaries)
    out["ratio_hymem_over_mem0"] = summaries["hymem"]["overhead_ms_median"] / summaries["mem0"]["overhead_ms_median"]
    out["setup"] = {"writes": writes, "repeat": repeat, "facts_per_write": 2, "server": "offline model + hash over HTTP"}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench.overhead")
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    logging.getLogger("hymem.store").setLevel(logging.CRITICAL)
    result = engine_overhead(args.writes, args.repeat)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
