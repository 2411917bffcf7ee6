"""Benchmarks, reported as ratios measured in the same run (never a lone absolute time).

- sweep cost growth: time(sweep of a 2N-write case) / time(sweep of an N-write case); linear → 2.0.
- engine overhead per write: wall time of a write minus the time inside model and embedding calls,
  as a share of the write, and against an ideal write (the same rows and vectors stored directly).
- runner wall time / ideal against `serve` with a fixed latency L at concurrency C = 1, 4, 16 (C connections; as many
  units in flight unless --units-per-connection says more).
- minilm throughput: sentences/s of the numpy MiniLM over the torch one on the bundled data's sentences.
- write growth: time of a write into a store already holding N memories / into a fresh store (flat → 1.0).
- interleaved write growth (`--only growth-interleaved`): the same ratio with every store open in one process and
  written one write at a time in turn, so a change of load hits them alike; medians and means, and the share of
  writes that waited for the scheduler.
Run with `nox -s bench` or `python -m evals.bench.engine [--writes N] [--repeat R]`.
"""

# lazy imports: each benchmark imports only what it measures, inside the function that measures it.
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from evals.cases.dataset import Case
from evals.faults.plan import FaultPlan
from evals.run.replay import CaseReplayer, UnitModels
from hymem.embedder import HashEmbedder
from hymem.offline import offline_lm

_STATEMENTS = ["I live in {city}.", "I work at {company}.", "I like {food}.", "I have a {pet}.",
               "I am a {job}.", "I play {sport}."]
_VALUES = {"city": ["Berlin", "Paris", "Rome", "Oslo", "Lima", "Kyoto"],
           "company": ["Stripe", "Acme", "Globex", "Initech", "Umbrella", "Hooli"],
           "food": ["coffee", "tea", "sushi", "pasta", "tacos", "curry"],
           "pet": ["cat", "dog", "parrot", "hamster", "rabbit", "turtle"],
           "job": ["nurse", "teacher", "pilot", "chef", "lawyer", "farmer"],
           "sport": ["tennis", "chess", "golf", "soccer", "hockey", "rugby"]}


def synthetic_case(writes: int, case_id: str = "bench") -> Case:
    """A chat case of `writes` turns, each one first-person statement (some supersede earlier ones)."""
    turns = []
    for i in range(writes):
        template = _STATEMENTS[i % len(_STATEMENTS)]
        key = template[template.index("{") + 1: template.index("}")]
        value = _VALUES[key][(i // len(_STATEMENTS)) % len(_VALUES[key])]
        turns.append([{"role": "user", "name": "Tim", "content": template.format(**{key: value})}])
    return Case(id=case_id, lang="en", user_id="tim", turns=turns)


def _sweep_seconds(writes: int) -> tuple[float, float, int]:
    """(wall seconds, process CPU seconds, faulted units) of one case's sweep."""
    case = synthetic_case(writes)
    start, cpu = time.perf_counter(), time.process_time()
    run = CaseReplayer(case, "bench", "offline", UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()),
                       FaultPlan.parse("sweep"), 0).run()
    if run.status != "ok":
        raise RuntimeError(run.error)
    return time.perf_counter() - start, time.process_time() - cpu, len(run.faults)


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def sweep_growth(n: int, repeat: int) -> dict[str, Any]:
    """time(2N)/time(N) over `repeat` pairs run back to back (wall and CPU), and the faulted-unit ratio.

    The CPU ratio is the one a shared machine's load moves least; the load average is reported with it.
    """
    _sweep_seconds(2)  # first-call costs (imports, DSPy caches) belong to neither size
    walls, cpus, unit_ratios = [], [], []
    load = [os.getloadavg()[0]]
    for _ in range(repeat):
        w1, c1, u1 = _sweep_seconds(n)
        w2, c2, u2 = _sweep_seconds(2 * n)
        walls.append(w2 / w1)
        cpus.append(c2 / c1)
        unit_ratios.append(u2 / u1)
        load.append(os.getloadavg()[0])
    return {"writes": n, "repeats": repeat, "ideal": 2.0, "goal": 2.1,
            "time_ratio_2n_over_n": statistics.median(walls), "wall_ratio": _spread(walls),
            "cpu_ratio": _spread(cpus), "faulted_units_ratio": statistics.median(unit_ratios),
            "load_average_1min": _spread(load)}


class _TimedEngine:
    """Wraps the offline engine and adds up the wall and thread CPU time spent inside model calls."""

    def __init__(self, inner: Any):
        self.inner, self.seconds, self.cpu = inner, 0.0, 0.0

    def complete(self, request: Any) -> Any:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return self.inner.complete(request)
        finally:
            self.seconds += time.perf_counter() - start
            self.cpu += time.thread_time() - cpu


class TimedEmbedder:
    """Wraps an embedder and adds up the time spent inside `embed` (also used by `evals.bench.overhead`)."""

    def __init__(self, inner: Any):
        self.inner, self.seconds, self.cpu = inner, 0.0, 0.0
        self.dim, self.name = getattr(inner, "dim", None), getattr(inner, "name", "embedder")

    def embed(self, texts: list[str]) -> Any:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - start
            self.cpu += time.thread_time() - cpu


def engine_overhead(writes: int, synchronous: str = "FULL") -> dict[str, Any]:
    """Per-write engine overhead with the offline model and hash embedder, as ratios and per-write figures.

    Overhead is the write's wall time minus the time inside the model engine and the embedder; its CPU
    share is the calling thread's CPU time minus theirs (the fsync of a FULL commit is wall, not CPU).
    """
    import dspy

    from hymem.client import HyMemoryClient

    case = synthetic_case(writes)
    base = offline_lm()
    engine = _TimedEngine(base.engine)
    lm = dspy.LM(base.model, engine=engine, cache=False, num_retries=0)
    embedder = TimedEmbedder(HashEmbedder())
    with tempfile.TemporaryDirectory() as tmp:
        client = HyMemoryClient(path=Path(tmp) / "s", lm=lm, embedder=embedder, synchronous=synchronous)
        client.add(case.turns[0], user_id="warmup")  # first-call costs (imports, caches) are not a write's
        engine.seconds = embedder.seconds = engine.cpu = embedder.cpu = 0.0
        start, cpu_start = time.perf_counter(), time.thread_time()
        for i, turn in enumerate(case.turns):
            assert client.add(turn, user_id="tim", request_id=f"w{i}").success
        wall, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
        rows = client.get_all("tim")
        client.close()
    ideal = _ideal_write_seconds(rows, writes)
    overhead = wall - engine.seconds - embedder.seconds
    return {"writes": writes, "synchronous": synchronous, "overhead_share_of_write": overhead / wall,
            "model_and_embedding_share": (engine.seconds + embedder.seconds) / wall,
            "overhead_over_ideal_store": overhead / ideal if ideal > 0 else None,
            "overhead_ms_per_write": 1000 * overhead / writes,
            "overhead_cpu_ms_per_write": 1000 * (cpu - engine.cpu - embedder.cpu) / writes}


def _ideal_write_seconds(rows: list, writes: int) -> float:
    """The same rows and vectors stored directly in one SQLite transaction + FAISS add per write."""
    from hymem.store import Store

    embedder = HashEmbedder()
    vectors = embedder.embed([r.text for r in rows]) if rows else np.zeros((0, embedder.dim), np.float32)
    per_write = max(1, len(rows) // max(1, writes))
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "ideal", dim=embedder.dim)
        start = time.perf_counter()
        for w in range(writes):
            with store.write() as tx:
                for j in range(w * per_write, min(len(rows), (w + 1) * per_write)):
                    tx.add_memory("tim", rows[j].text, rows[j].subject, rows[j].owner, "fact", vectors[j], f"w{w}")
        seconds = time.perf_counter() - start
        store.close()
    return seconds


def embed_seconds(models: dict[str, Any], texts: list[str], repeat: int) -> list[dict[str, float]]:
    """Seconds each embedder takes for all `texts`, the embedders alternated within every repeat (so a
    change in the machine's load hits them alike): one {name: seconds} per repeat."""
    rounds = []
    for _ in range(repeat):
        seconds = {}
        for name, model in models.items():
            started = time.perf_counter()
            model.embed(texts)
            seconds[name] = time.perf_counter() - started
        rounds.append(seconds)
    return rounds


def _seed_store(path: Path, memories: int, users: int, dim: int) -> None:
    """A store holding `memories` live memories spread evenly over `users` users (user u0 is the writer)."""
    from hymem.store import Store

    rng = np.random.default_rng(0)
    with Store(path, dim=dim) as store:
        for start in range(0, memories, 5000):
            count = min(5000, memories - start)
            vectors = rng.standard_normal((count, dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            with store.write() as tx:
                for i in range(count):
                    n = start + i
                    tx.add_memory(f"u{n % users}", f"Seeded memory number {n}.", "user", "user", "fact",
                                  vectors[i], f"seed{start}")


def _write_seconds(store_dir: Path, writes: int, synchronous: str = "NORMAL") -> tuple[list[float], list[float]]:
    """(wall, thread CPU) seconds of each of `writes` chat writes by user u0 (offline model, hash embedder)."""
    from hymem.client import HyMemoryClient

    case = synthetic_case(writes)
    with HyMemoryClient(path=store_dir, lm="offline", embedder="hash", synchronous=synchronous) as client:
        client.add(case.turns[0], user_id="warmup")
        seconds, cpu = [], []
        for i, turn in enumerate(case.turns):
            start, cpu_start = time.perf_counter(), time.thread_time()
            assert client.add(turn, user_id="u0", request_id=f"g{i}").success
            seconds.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - cpu_start)
    return seconds, cpu


def write_growth(sizes: list[int], writes: int, repeat: int, synchronous: str = "NORMAL") -> list[dict[str, Any]]:
    """Median write time (wall, and the writing thread's CPU) into a store of N memories over a fresh store's,
    measured alternately in one run, with the load average.

    Two layouts per N: spread over 100 users (the writer holds N/100), and all N the writer's own (the
    worst case: its candidates are searched among all N). Each repeat writes into a fresh copy.
    """
    import shutil

    dim = HashEmbedder().dim
    layouts = [(n, users) for n in sizes for users in (100, 1)]
    ratios: dict[tuple[int, int], list[float]] = {key: [] for key in layouts}
    cpu_ratios: dict[tuple[int, int], list[float]] = {key: [] for key in layouts}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        seeded = {}
        for n, users in layouts:
            seeded[(n, users)] = Path(tmp) / f"seed-{n}-{users}"
            _seed_store(seeded[(n, users)], n, users, dim)
        for r in range(repeat):
            fresh, fresh_cpu = map(statistics.median, _write_seconds(Path(tmp) / f"fresh-{r}", writes, synchronous))
            for key in layouts:
                copy = Path(tmp) / f"run-{key[0]}-{key[1]}-{r}"
                shutil.copytree(seeded[key], copy)
                wall, cpu = map(statistics.median, _write_seconds(copy, writes, synchronous))
                ratios[key].append(wall / fresh)
                cpu_ratios[key].append(cpu / fresh_cpu)
                shutil.rmtree(copy)
            again, again_cpu = map(statistics.median, _write_seconds(Path(tmp) / f"fresh-b{r}", writes, synchronous))
            for key in layouts:  # the fresh write of the pair is the mean of the two around the seeded ones
                ratios[key][-1] *= fresh / ((fresh + again) / 2)
                cpu_ratios[key][-1] *= fresh_cpu / ((fresh_cpu + again_cpu) / 2)
            load.append(os.getloadavg()[0])
    return [{"memories": n, "users": users, "writer_memories": n // users, "writes": writes, "repeats": repeat,
             "synchronous": synchronous,
             "write_over_fresh_min": min(ratios[(n, users)]), "write_over_fresh_max": max(ratios[(n, users)]),
             "write_over_fresh_median": statistics.median(ratios[(n, users)]),
             "cpu_over_fresh": _spread(cpu_ratios[(n, users)]), "goal_at_10000": 1.2,
             "load_average_1min": _spread(load)}
            for n, users in layouts]


def interleaved_growth(sizes: list[int], writes: int, synchronous: str = "NORMAL") -> dict[str, Any]:
    """A fresh store and one-user stores of N memories open in one process, written one write at a time in turn
    (the order reversed every other turn): the ratios of their writes' wall and thread CPU, medians and means.

    Why: on a loaded 2-core machine about half of all 2-5 ms writes wait a whole scheduler tick, so a block of
    writes' median wall lands on either side of a tick by chance (issue 35); alternating single writes exposes
    every store to the same load, and the means count the rare costs (the index file's rewrites) too."""
    from hymem.client import HyMemoryClient

    dim = HashEmbedder().dim
    tags: list[str] = ["fresh"] + [str(n) for n in sizes]
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {"fresh": Path(tmp) / "fresh"}
        for n in sizes:
            dirs[str(n)] = Path(tmp) / f"seed-{n}"
            _seed_store(dirs[str(n)], n, 1, dim)
        os.sync()  # the seeded files' writeback is not a write's cost
        load = [os.getloadavg()[0]]
        case = synthetic_case(writes)
        wall: dict[str, list[float]] = {t: [] for t in tags}
        cpu: dict[str, list[float]] = {t: [] for t in tags}
        with contextlib.ExitStack() as stack:
            clients = {t: stack.enter_context(HyMemoryClient(path=dirs[t], lm="offline", embedder="hash",
                                                             synchronous=synchronous)) for t in tags}
            for client in clients.values():
                client.add(case.turns[0], user_id="warmup")
            for i, turn in enumerate(case.turns):
                for t in tags if i % 2 == 0 else tags[::-1]:
                    start, cpu_start = time.perf_counter(), time.thread_time()
                    assert clients[t].add(turn, user_id="u0", request_id=f"g{i}").success
                    wall[t].append(time.perf_counter() - start)
                    cpu[t].append(time.thread_time() - cpu_start)
        load.append(os.getloadavg()[0])

    def waited(t: str) -> float:
        return sum(w - c > 0.001 for w, c in zip(wall[t], cpu[t], strict=True)) / len(wall[t])

    med = {t: (statistics.median(wall[t]), statistics.median(cpu[t])) for t in tags}
    mean = {t: (statistics.mean(wall[t]), statistics.mean(cpu[t])) for t in tags}
    return {"writes": writes, "synchronous": synchronous, "load_average_1min": _spread(load),
            "fresh_share_waited_over_1ms": waited("fresh"), "goal_at_10000": 1.2,
            "stores": [{"writer_memories": n, "share_waited_over_1ms": waited(str(n)),
                        "wall_median_over_fresh": med[str(n)][0] / med["fresh"][0],
                        "cpu_median_over_fresh": med[str(n)][1] / med["fresh"][1],
                        "wall_mean_over_fresh": mean[str(n)][0] / mean["fresh"][0],
                        "cpu_mean_over_fresh": mean[str(n)][1] / mean["fresh"][1]} for n in sizes]}


def minilm_throughput(repeat: int) -> dict[str, Any]:
    """Sentences per second of `minilm` (numpy) over `minilm-torch`, alternating, on the bundled datasets' texts;
    plus each one's load time (import + weights) in a fresh process, as a ratio."""
    from hymem.embedder import make_embedder

    texts = []
    for name in ("chat_en.jsonl", "chat_zh.jsonl", "working.jsonl"):
        for line in (Path(__file__).resolve().parents[2] / "datasets" / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                case = json.loads(line)
                texts += [m["content"] for turn in case.get("turns", []) for m in turn if isinstance(m.get("content"), str)]
    loads = {}
    for spec in ("minilm", "minilm-torch"):
        code = (f"import time; t = time.perf_counter(); from hymem.embedder import make_embedder; "
                f"make_embedder({spec!r}).embed(['warm up']); print(time.perf_counter() - t)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        loads[spec] = float(done.stdout.strip().splitlines()[-1])
    models = {spec: make_embedder(spec) for spec in ("minilm", "minilm-torch")}
    ratios = [seconds["minilm-torch"] / seconds["minilm"] for seconds in embed_seconds(models, texts, repeat)]
    return {"sentences": len(texts), "repeats": repeat, "throughput_numpy_over_torch_min": min(ratios),
            "throughput_numpy_over_torch_max": max(ratios), "load_seconds_numpy_over_torch": loads["minilm"] / loads["minilm-torch"]}


@contextlib.contextmanager
def _server_process(latency: float):
    """`hymem-eval serve` in its own process, as a provider would be (its CPU never holds our GIL); yields its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "evals.cli.main", "serve", "--port", "0", "--latency", str(latency)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None  # stdout=PIPE
    try:
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:\d+/v1", line)
        if match is None:
            raise RuntimeError(f"serve did not print its URL: {line!r}")
        yield match.group(0)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def runner_vs_ideal(latency: float, concurrency: int, cases_per_slot: int = 20,
                    model: str = "offline", units: int | None = None) -> dict[str, Any]:
    """Runner wall time against `serve` with fixed latency, over the ideal schedule.

    ideal = max(total LM calls × L / C, the longest case's chain of calls × L), over
    `cases_per_slot` × C one-write cases (each write: extract, then reconcile). C is `--concurrency` (the
    connections to `serve`); `units` (`--units-in-flight`) defaults to the runner's own default for C.
    """
    import pandas as pd

    from evals.pipeline import run_eval
    from evals.run.runner import RunConfig

    n = cases_per_slot * concurrency
    with tempfile.TemporaryDirectory() as tmp, _server_process(latency) as url:
        data = Path(tmp) / "cases.jsonl"
        data.write_text("\n".join(synthetic_case(1, f"b{i}").model_copy(update={"user_id": f"u{i}"})
                                   .model_dump_json(exclude={"source", "line"}) for i in range(n)) + "\n")
        outcome = run_eval(RunConfig(datasets=[str(data)], providers=[f"openai/{model}@{url}"],
                                     embedder="hash", faults="none", concurrency=concurrency, units=units,
                                     cache=False, out=Path(tmp) / "run", progress=False))
        attempts = pd.read_parquet(outcome.run_dir / "attempts.parquet")
    lm = attempts[attempts["site"] != "embed"]
    chain = int(lm.groupby("case_id").size().max())
    ideal = max(len(lm) * latency / concurrency, chain * latency)
    return {"model": model, "latency_s": latency, "concurrency": concurrency,
            "units_in_flight": outcome.manifest.units_in_flight, "cases": n, "lm_calls": int(len(lm)),
            "lm_latency_s_median": float(lm["latency_s"].median()),
            "wall_over_ideal": outcome.units_seconds / ideal, "target": 1.10, "load_average_1min": os.getloadavg()[0]}


def runner_repeated(latency: float, concurrency: int, repeat: int, model: str = "offline",
                    units_per_connection: float | None = None) -> dict[str, Any]:
    """`runner_vs_ideal` `repeat` times: the range of wall / ideal, with the machine's load average.
    `units_per_connection` X: ceil(C × X) units in flight; None: the runner's default."""
    units = None if units_per_connection is None else max(1, math.ceil(concurrency * units_per_connection))
    runs = [runner_vs_ideal(latency, concurrency, model=model, units=units) for _ in range(repeat)]
    return {**{k: v for k, v in runs[0].items() if k not in ("wall_over_ideal", "load_average_1min",
                                                                     "lm_latency_s_median")},
            "repeats": repeat, "wall_over_ideal": _spread([r["wall_over_ideal"] for r in runs]),
            "lm_latency_s_median": _spread([r["lm_latency_s_median"] for r in runs]),
            "load_average_1min": _spread([r["load_average_1min"] for r in runs])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench.engine")
    parser.add_argument("--writes", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--latency", type=float, default=0.25, help="serve's fixed latency L for runner_vs_ideal")
    parser.add_argument("--concurrency", type=int, action="append", default=None,
                        help="C for runner_vs_ideal (repeatable; default 1, 4, 16)")
    parser.add_argument("--growth-sizes", type=int, nargs="*", default=[10_000, 100_000],
                        help="store sizes N for write_growth (memories already stored); none skips it")
    parser.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL",
                        help="write_growth: the stores' SQLite synchronous level (the engine's default: NORMAL)")
    parser.add_argument("--only", choices=["sweep", "overhead", "runner", "growth", "growth-interleaved", "minilm"], action="append", default=None,
                        help="run only these benchmarks (repeatable)")
    parser.add_argument("--units-per-connection", type=float, default=None, metavar="X",
                        help="runner_vs_ideal: units in flight (--units-in-flight) = ceil(C × X), over C connections "
                        "(--concurrency C); default: the runner's, C + ceil(C/4); 1: as many units as connections")
    parser.add_argument("--model", default="offline",
                        help="the model name the runner asks `serve` for (it answers any name); DSPy scans its "
                        "metadata table for a name it does not know, e.g. offline, on every call")
    args = parser.parse_args(argv)
    logging.getLogger("hymem.store").setLevel(logging.CRITICAL)
    only = set(args.only or ["sweep", "overhead", "runner", "growth", "minilm"])
    results: dict[str, Any] = {}
    if "sweep" in only:
        results["sweep_growth"] = sweep_growth(args.writes, args.repeat)
    if "overhead" in only:
        results["engine_overhead"] = [engine_overhead(4 * args.writes, sync) for sync in ("FULL", "NORMAL")]
    if "runner" in only:
        results["runner_vs_ideal"] = [runner_repeated(args.latency, c, args.repeat, model=args.model,
                                                      units_per_connection=args.units_per_connection)
                                      for c in args.concurrency or [1, 4, 16]]
    if "minilm" in only:
        from hymem.embedder import minilm_available

        if minilm_available() and minilm_available(torch=True):
            results["minilm_throughput"] = minilm_throughput(args.repeat)
        else:  # `nox -s bench` installs neither model: say so rather than fail the other benchmarks
            results["minilm_throughput"] = "skipped: needs the minilm and minilm-torch extras"
    if "growth" in only and args.growth_sizes:
        results["write_growth"] = write_growth(args.growth_sizes, 4 * args.writes, args.repeat, args.synchronous)
    if "growth-interleaved" in only and args.growth_sizes:
        results["interleaved_growth"] = interleaved_growth(args.growth_sizes, 32 * args.writes, args.synchronous)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
