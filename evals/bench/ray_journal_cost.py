"""The cost of a Ray unit's journal (issue 35): the same long units run by the Ray executor without a journal and
with one (each worker sends its finished writes' lines to the run's relay actor; the driver appends them to
RUN/journal/), the two alternated on one local Ray instance in one process.

Why alternated on one instance: the machine is shared, so a lone time says little, and a Ray instance's start-up
(seconds) would swamp the difference; back to back, repeated, the two give medians and their ratio under the same
load (reported with them). Measured per run: the run's wall (`run_ray`, from the first task submitted to the last
unit returned), the units' own wall (their `CaseRun.seconds`, inside the workers: where a line is made and sent),
and the driver's CPU (where lines are taken and appended). Then the journal's own part, which the whole runs'
ratios can hide under a shared machine's noise: one journaled unit's writes fed again, in this process, through a
worker's `RelayedJournal` to a relay (a line made and sent; the wait for the relay at the unit's end apart; the
relay process's own CPU), the driver's `append_line` of those lines (redacted again, written and flushed), and
through a local unit's `JournalWriter` (a line made, written and flushed), wall and thread CPU per write.

Run: `python -m evals.bench.ray_journal_cost --turns 500 --units 2 --repeat 3`.
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

from evals.arms.providers import parse_lm_spec
from evals.bench.long_case import long_case
from evals.record import (
    Attempt,
    Finding,
    JournalHead,
    JournalLines,
    JournalWriter,
    UnitJournal,
    read_journal,
    unit_journals,
)
from evals.run.executors import UnitTask
from evals.run.executors._ray_journal import RelayedJournal, relay_actor
from evals.run.executors.ray_executor import connect, run_ray
from evals.run.replay import case_writes

WORKERS = 2


def _tasks(turns: int, units: int) -> list[UnitTask]:
    return [UnitTask(case=long_case(turns, f"long{i}"), dataset="long", label="offline", system="hymem",
                     provider=parse_lm_spec("offline"), embedder="hash", plan="none", seed=0) for i in range(units)]


def run(tasks: list[UnitTask], journal: bool, kept: list[UnitJournal] | None = None) -> dict[str, Any]:
    """One run of the units: wall, the units' summed wall, the driver's CPU, and the journal's bytes (its journals
    appended to `kept`)."""
    writes = sum(len(case_writes(t.case)) for t in tasks)
    with tempfile.TemporaryDirectory(prefix="hymem-ray-journal-bench-") as tmp:
        start, cpu = time.perf_counter(), time.process_time()
        runs = list(run_ray(tasks, workers=WORKERS, address=None, limits={"offline": 1}, cases=[t.case for t in tasks],
                            run_token="bench", run_dir=Path(tmp) if journal else None))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        size = 0
        if journal:
            journals = [read_journal(p) for p in unit_journals(Path(tmp))]
            assert sorted(j.done for j in journals) == sorted(len(case_writes(t.case)) for t in tasks), "a journal is short"
            if kept is not None:
                kept.extend(journals)
            size = sum(p.stat().st_size for p in unit_journals(Path(tmp)))
    bad = [r.error for r in runs if r.status != "ok"]
    if bad:
        raise RuntimeError(bad[0])
    return {"wall": wall, "units_wall": sum(r.seconds for r in runs), "driver_cpu": cpu,
            "journal_bytes_per_write": size / writes}


def inside(journal: UnitJournal, task: UnitTask) -> dict[str, float]:
    """Wall and thread-CPU ms per write inside the journal: a Ray worker's (make the line, send it to a relay) and
    a local unit's (make the line, append and flush it), on the same writes; and the relay wait at a unit's end."""
    import ray

    relay = relay_actor()
    relayed = RelayedJournal(relay, task)
    relayed.flush()  # the relay is up: its start-up is the run's, not a write's
    stat = Path(f"/proc/{ray.get(relay.__ray_call__.remote(lambda _: os.getpid()))}/stat")

    def relay_cpu() -> float:  # the relay process's user + system CPU seconds (Linux)
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    relay_start = relay_cpu()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="hymem-ray-journal-bench-") as tmp:
        head = JournalHead(provider=task.label, case_id=task.case.id, epoch=0, dataset=task.dataset,
                           writes_total=journal.done)
        local, driver = JournalWriter(Path(tmp) / "local", head), JournalWriter(Path(tmp) / "driver", head)
        made, lines, all_findings, all_attempts = JournalLines(), [], [], []
        for saved in journal.writes:  # the lines a worker sends, for the driver's way
            all_findings += saved.findings
            all_attempts += saved.attempts
            lines.append(made.write_done(saved.write, all_findings, all_attempts))
        pending = iter(lines)
        ways = (("ray", relayed.write_done), ("driver", lambda *_: driver.append_line(next(pending))),
                ("local", local.write_done))
        for way, write_done in ways:
            findings: list[Finding] = []
            attempts: list[Attempt] = []
            wall = cpu = 0.0
            for saved in journal.writes:
                findings += saved.findings
                attempts += saved.attempts
                start, thread = time.perf_counter(), time.thread_time()
                write_done(saved.write, findings, attempts)
                wall += time.perf_counter() - start
                cpu += time.thread_time() - thread
            out[f"{way}_wall_ms"], out[f"{way}_cpu_ms"] = wall / journal.done * 1000, cpu / journal.done * 1000
            if way == "ray":
                start = time.perf_counter()
                relayed.flush()
                out["ray_end_of_unit_wait_ms"] = (time.perf_counter() - start) * 1000
                out["relay_process_cpu_ms"] = (relay_cpu() - relay_start) / journal.done * 1000
        local.close()
        driver.close()
    return {k: round(v, 3) for k, v in out.items()}


def ray_journal_ratio(turns: int, units: int, repeat: int) -> dict[str, Any]:
    import ray  # the optional extra

    started = time.perf_counter()
    connect(None, WORKERS)  # one local instance for both ways: its start-up belongs to neither
    startup = time.perf_counter() - started
    tasks = _tasks(turns, units)
    ways: dict[str, list[dict[str, Any]]] = {"without": [], "journal": []}
    kept: list[UnitJournal] = []
    load = [os.getloadavg()[0]]
    try:
        run(_tasks(3, WORKERS), True)  # warm the workers (imports, the offline model) and the relay's code
        for i in range(repeat):
            order = ["without", "journal"] if i % 2 == 0 else ["journal", "without"]  # neither always goes first
            for way in order:
                ways[way].append(run(tasks, way == "journal", kept))
                load.append(os.getloadavg()[0])
        own = [inside(kept[-1], tasks[0]) for _ in range(2)][-1]  # the second: the first warms the relay's code
        load.append(os.getloadavg()[0])
    finally:
        ray.shutdown()
    med = {way: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for way, rs in ways.items()}
    writes = turns * units
    return {"turns": turns, "units": units, "workers": WORKERS, "repeat": repeat, "ray_startup_s": round(startup, 1),
            "load_1min": [round(x, 1) for x in load],
            "median_s": {way: {k: round(v, 3) for k, v in m.items() if k != "journal_bytes_per_write"}
                         for way, m in med.items()},
            "ms_per_write": {way: {k: round(m[k] / writes * 1000, 3) for k in ("wall", "units_wall", "driver_cpu")}
                             for way, m in med.items()},
            "journal_bytes_per_write": round(med["journal"]["journal_bytes_per_write"]),
            "inside_the_journal_per_write": own,
            "inside_share_of_a_units_write_wall": round(own["ray_wall_ms"] / (med["journal"]["units_wall"]
                                                                              / writes * 1000), 4),
            "ratio_journal_over_without": {k: round(med["journal"][k] / med["without"][k], 3)
                                           for k in ("wall", "units_wall", "driver_cpu")},
            "ratios_per_repeat": {k: [round(j[k] / w[k], 3) for j, w in zip(ways["journal"], ways["without"],
                                                                              strict=True)]
                                  for k in ("wall", "units_wall")}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--units", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(ray_journal_ratio(args.turns, args.units, args.repeat), indent=1))


if __name__ == "__main__":
    main()
