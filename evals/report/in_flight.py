"""What an unfinished run holds: its units saved in units.jsonl and those it left half done (issue 35).

A run stopped mid-unit (kill -9, Ctrl-C, a crash) has no tables yet, only `units.jsonl` and the journals of
the units that were running (`evals.record._journal`). `show` prints these lines for it, so a unit that was
at write 9,000 of 10,000 is named INCOMPLETE with its writes saved, never counted among the finished ones.
"""

from __future__ import annotations

from pathlib import Path

from evals.record import UNITS_FILE, Manifest, RunDirError, incomplete_units, read_units


def unfinished_lines(run_dir: Path, manifest: Manifest) -> list[str]:
    """`N of M units finished and saved` (when the directory keeps units.jsonl), then one line per unit that
    began and did not finish."""
    run_dir = Path(run_dir)
    if not (run_dir / UNITS_FILE).is_file():  # a directory that keeps only tables: no unit count to give
        return incomplete_units(run_dir, set())
    try:
        saved = {(r.provider, r.case_id, r.epoch) for r in read_units(run_dir)}
    except (RunDirError, OSError) as exc:
        return [f"{UNITS_FILE}: unreadable ({str(exc).splitlines()[0]})"]
    planned = len(manifest.providers) * manifest.n_cases * manifest.epochs
    return [f"{len(saved)} of {planned} units finished and saved in {UNITS_FILE} (--resume redoes the others, "
            "each from its start)", *incomplete_units(run_dir, saved)]


def unfinished_text(run_dir: Path, manifest: Manifest) -> str:
    """`show` of a run stopped before it wrote any table: what it saved, unit by unit."""
    first = (f"run {manifest.run_id or Path(run_dir).name}: UNFINISHED, no verdict (stopped mid-run, or still running: no "
             "tables yet): continue it with --resume")
    return "\n".join([first, *unfinished_lines(run_dir, manifest)]) + "\n"


__all__ = ["unfinished_lines", "unfinished_text"]
