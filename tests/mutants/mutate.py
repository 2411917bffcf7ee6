"""Mutation check: plant each engine bug of tests/mutants/*.toml in a copy of the repo, one at a time, run
the default sweep and the gate on it, and report whether the harness caught it.

A mutant is caught when the gate fails (exit 1) or the run lists anomalies. Each mutant is a few
search/replace patches; a search text that is not in the file exactly once fails loudly, so a mutant the
engine has outgrown is never silently "caught" by a run of the unmutated engine. The unmutated copy runs
first and must pass: it is the baseline the mutants are gated against (or `--baseline DIR`).

    python tests/mutants/mutate.py                      # every mutant, bundled suites, default sweep
    python tests/mutants/mutate.py --only tool-name-as-speaker --cases en-011-tool-weather --faults none
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
COPIED = ("hymem", "evals", "datasets", "pyproject.toml")


@dataclass
class Mutant:
    name: str
    description: str
    patches: list[dict[str, str]]
    expect: str = ""  # the anomaly or gate rule expected to catch it (informational)


@dataclass
class Outcome:
    name: str
    caught: bool
    gate_exit: int
    verdict: str
    anomalies: dict[str, int]
    seconds: float
    failed_rules: list[str] = field(default_factory=list)  # the gate's failed rules (gate.xml testcases)


class MutantError(RuntimeError):
    """A mutant that no longer applies to the engine: fix its search text."""


def load_mutants(directory: Path = HERE) -> list[Mutant]:
    mutants = []
    for path in sorted(directory.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        mutants.append(Mutant(name=data.get("name", path.stem), description=data["description"],
                              patches=data["patch"], expect=data.get("expect", "")))
    return mutants


def apply(mutant: Mutant, root: Path) -> None:
    """Apply every patch of `mutant` under `root`; each search text must occur exactly once."""
    for patch in mutant.patches:
        path = root / patch["file"]
        text = path.read_text(encoding="utf-8")
        count = text.count(patch["search"])
        if count != 1:
            raise MutantError(f"{mutant.name}: {patch['file']}: the search text occurs {count} times, not once:\n"
                              f"{patch['search']}")
        path.write_text(text.replace(patch["search"], patch["replace"]), encoding="utf-8")


def copy_repo(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, dest / name)
    return dest


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1"}


def run_sweep(root: Path, out: Path, datasets: list[str], faults: str, embedder: str | None) -> None:
    cmd = [sys.executable, "-m", "evals.cli.main", "run", "--out", str(out), "--faults", faults, "--no-progress"]
    for dataset in datasets:
        cmd += ["--dataset", dataset]
    if embedder:
        cmd += ["--embedder", embedder]
    done = subprocess.run(cmd, cwd=root, env=_env(root), capture_output=True, text=True)
    if done.returncode != 0 or not (out / "metrics.parquet").exists():
        raise RuntimeError(f"the run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")


def gate(root: Path, baseline: Path, current: Path) -> int:
    cmd = [sys.executable, "-m", "evals.cli.main", "gate", "--baseline", str(baseline), "--current", str(current)]
    return subprocess.run(cmd, cwd=root, env=_env(root), capture_output=True, text=True).returncode


def failed_rules(run: Path) -> list[str]:
    """The names of the gate's failed rules, from the JUnit file it wrote into the run."""
    from xml.etree import ElementTree

    junit = run / "gate.xml"
    if not junit.is_file():
        return []
    return [case.get("name", "") for case in ElementTree.parse(junit).getroot().iter("testcase")
            if case.find("failure") is not None]


def findings(run: Path) -> tuple[str, dict[str, int]]:
    import pandas as pd

    manifest = json.loads((run / "manifest.json").read_text())
    anomalies = pd.read_parquet(run / "anomalies.parquet")
    counted = anomalies[anomalies["outcome"] != "indeterminate"]
    return manifest.get("verdict") or "", {str(k): int(v) for k, v in counted["kind"].value_counts().items()}


def check(mutant: Mutant | None, work: Path, baseline: Path | None, datasets: list[str], faults: str,
          embedder: str | None) -> tuple[Outcome, Path]:
    """Run the (mutated) copy and gate it; `mutant=None` is the unmutated control."""
    start = time.perf_counter()
    name = mutant.name if mutant else "control"
    root = copy_repo(work / name / "repo")
    if mutant is not None:
        apply(mutant, root)
    out = work / name / "run"
    run_sweep(root, out, datasets, faults, embedder)
    code = gate(root, baseline, out) if baseline is not None else 0
    verdict, kinds = findings(out)
    caught = code == 1 or bool(kinds)
    return Outcome(name, caught, code, verdict, kinds, time.perf_counter() - start, failed_rules(out)), out


def suite_file(case_ids: list[str], dest: Path) -> str:
    """A JSONL of the bundled cases with these ids (a small suite for the fast check)."""
    lines = []
    for path in sorted((REPO / "datasets").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and json.loads(line)["id"] in case_ids:
                lines.append(line)
    missing = set(case_ids) - {json.loads(line)["id"] for line in lines}
    if missing:
        raise MutantError(f"no bundled case with id {sorted(missing)}")
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(dest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run only this mutant (repeatable)")
    parser.add_argument("--cases", default="", help="comma-separated bundled case ids (default: every bundled case)")
    parser.add_argument("--faults", default="sweep")
    parser.add_argument("--embedder", default=None, help="default: the run's default (minilm when installed)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="gate against this run (default: the unmutated copy, run first)")
    parser.add_argument("--report", type=Path, default=None, help="write the markdown table here too")
    parser.add_argument("--mutants", type=Path, default=HERE,
                        help="the directory of *.toml mutants (default: tests/mutants), e.g. your own set")
    args = parser.parse_args(argv)
    known = load_mutants(args.mutants)
    mutants = [m for m in known if not args.only or m.name in args.only]
    if args.only and len(mutants) != len(set(args.only)):
        raise MutantError(f"unknown mutant in {args.only}; known: {[m.name for m in known]}")
    with tempfile.TemporaryDirectory(prefix="hymem-mutants-") as tmp:
        work = Path(tmp)
        datasets = [suite_file(args.cases.split(","), work / "suite.jsonl")] if args.cases else []
        control, control_run = check(None, work, args.baseline, datasets, args.faults, args.embedder)
        print(f"control: gate exit {control.gate_exit}, verdict {control.verdict}, anomalies {control.anomalies} "
              f"({control.seconds:.0f} s)", flush=True)
        if control.caught:
            print("the unmutated engine fails the check: fix that (or re-record the baseline) first", file=sys.stderr)
            return 2
        baseline = args.baseline or control_run
        outcomes = []
        for mutant in mutants:
            outcome, _ = check(mutant, work, baseline, datasets, args.faults, args.embedder)
            outcomes.append(outcome)
            kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(outcome.anomalies.items())) or "none"
            print(f"{mutant.name}: {'CAUGHT' if outcome.caught else 'MISSED'} (gate exit {outcome.gate_exit}, "
                  f"anomalies {kinds}, failed rules {outcome.failed_rules or 'none'}, {outcome.seconds:.0f} s)",
                  flush=True)
    caught = sum(o.caught for o in outcomes)
    rows = ["| mutant | caught | gate exit | anomalies | failed gate rules |", "|---|---|---|---|---|"]
    rows += [f"| {o.name} | {'yes' if o.caught else '**no**'} | {o.gate_exit} | "
             f"{', '.join(f'{k} ×{n}' for k, n in sorted(o.anomalies.items())) or '—'} | "
             f"{'; '.join(o.failed_rules) or '—'} |" for o in outcomes]
    table = "\n".join(rows) + f"\n\ncaught {caught} of {len(outcomes)}\n"
    print(table)
    if args.report:
        args.report.write_text(table, encoding="utf-8")
    return 0 if caught == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
