"""The cost of saving a long unit's finished writes (issue 35): a case of N one-message turns replayed without a
journal, with one (`evals.record.JournalWriter`: a flushed line per write, fsynced at most once a second) and with
one fsynced after every write, the three alternated in one process.

Why alternated: the machine is shared, so a lone time says little; the two ways back to back, repeated, give
medians and their ratio under the same load (reported with them). The time spent inside the journal's own
`write_done` is measured too (wall, and the thread's CPU), as a share of the per-write time: the journal's own
part, which the whole replay's ratio can hide under a shared machine's noise.

Run: `python -m evals.bench.journal_cost --turns 1000 --repeat 2`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from evals.bench.long_case import long_case
from evals.faults.plan import FaultPlan
from evals.record import JournalHead, JournalWriter, read_journal
from evals.record._journal import FSYNC_SECONDS
from evals.run.replay import CaseReplayer, UnitModels
from hymem.embedder import HashEmbedder
from hymem.offline import offline_lm

WAYS: dict[str, float | None] = {"without": None, "journal": FSYNC_SECONDS, "fsync_each_write": 0.0}


def replay(turns: int, fsync_seconds: float | None) -> dict[str, Any]:
    """Wall and process-CPU seconds per write of one replay, and the seconds inside the journal's writes
    (`fsync_seconds` None: no journal)."""
    journaled = fsync_seconds is not None
    case = long_case(turns)
    inside = [0.0, 0.0]  # wall, thread CPU
    with tempfile.TemporaryDirectory(prefix="hymem-journal-bench-", dir=os.environ.get("JOURNAL_BENCH_DIR")) as tmp:
        journal = JournalWriter(Path(tmp), JournalHead(provider="offline", case_id=case.id, epoch=0, dataset="long",
                                                       writes_total=turns),
                               fsync_seconds=fsync_seconds) if fsync_seconds is not None else None

        def timed(*args: Any) -> None:
            assert journal is not None
            start, cpu = time.perf_counter(), time.thread_time()
            journal.write_done(*args)
            inside[0] += time.perf_counter() - start
            inside[1] += time.thread_time() - cpu

        start, cpu = time.perf_counter(), time.process_time()
        run = CaseReplayer(case, "long", "offline",
                           UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()),
                           FaultPlan.parse("none"), 0, journal=timed if journaled else None).run()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        size = 0
        if journal is not None:
            journal.close()
            size = journal.path.stat().st_size
            assert read_journal(journal.path).done == turns
    if run.status != "ok":
        raise RuntimeError(run.error)
    return {"wall_per_write": wall / turns, "cpu_per_write": cpu / turns, "journal_per_write": inside[0] / turns,
            "journal_cpu_per_write": inside[1] / turns,
            "journal_bytes_per_write": size / turns}


def journal_ratio(turns: int, repeat: int) -> dict[str, Any]:
    replay(3, 0.0)  # first-call costs (imports, DSPy caches) belong to no way
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    load = [os.getloadavg()[0]]
    for _ in range(repeat):
        for way, fsync_seconds in WAYS.items():
            runs[way].append(replay(turns, fsync_seconds))
            load.append(os.getloadavg()[0])
    med = {way: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for way, rs in runs.items()}
    return {"turns": turns, "repeat": repeat, "load_1min": [round(x, 1) for x in load],
            "median_ms_per_write": {w: {k: round(v * 1000, 3) for k, v in m.items() if k != "journal_bytes_per_write"}
                                    for w, m in med.items()},
            "journal_bytes_per_write": round(med["journal"]["journal_bytes_per_write"]),
            "ratio_over_without": {way: {k: round(med[way][k] / med["without"][k], 3)
                                         for k in ("wall_per_write", "cpu_per_write")} for way in WAYS},
            "journal_share_of_write": {way: round(med[way]["journal_per_write"] / med[way]["wall_per_write"], 4)
                                       for way in WAYS},
            "journal_cpu_share_of_write": {way: round(med[way]["journal_cpu_per_write"] / med[way]["cpu_per_write"], 4)
                                           for way in WAYS}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    print(json.dumps(journal_ratio(args.turns, args.repeat), indent=1))


if __name__ == "__main__":
    main()
