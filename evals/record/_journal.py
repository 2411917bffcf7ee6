"""A unit's finished writes, saved while the unit runs: `RUN/journal/<unit>.jsonl` (issue 35).

units.jsonl holds a unit's record only once the unit ends, so a long unit that crashes or is interrupted at
write 9,000 of 10,000 would leave nothing. While it runs, each control write's part of the record (its
WriteRecord, the findings and the attempts its checks added) is appended to the unit's journal as one line,
after a first line naming the unit and its writes in all. Each line is flushed to the OS as it is written, so a
kill -9 or Ctrl-C leaves every finished write readable (at most the line in flight is torn, and skipped); it is
fsynced at most every FSYNC_SECONDS (a unit shorter than that never is: its record in units.jsonl is), so a
power loss or kernel crash loses at most that long's writes. Why not an fsync per line: on a 1,000-turn case it
kept each write 14 ms inside the journal, 12% of the write's wall, against 7 ms (5%) this way, under the same
load (BENCHMARKS.md, "A long unit's finished writes saved").

A journal is scaffolding, not the record: the unit's line in units.jsonl is. The runner removes a unit's
journal once that line is fsynced, and the directory once it is empty, so a finished run's directory is what
it was without journals. `--resume` re-runs an unfinished unit from its start (see `evals.run.runner`), which
truncates its journal; a journal of a unit units.jsonl already holds (a crash between the two) is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, Field, ValidationError
from pydantic_core import to_json

from evals.core.redact import holds_registered_secret, redact
from evals.record._records import Attempt, Finding, WriteRecord
from evals.record._version import SCHEMA_VERSION

JOURNAL_DIR = "journal"
FSYNC_SECONDS = 1.0  # a journal is fsynced at most this often (and at its close); every line is flushed at once
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})  # as units.jsonl


class JournalHead(BaseModel):
    """A journal's first line: whose writes follow, and how many the unit has in all."""

    schema_version: int = SCHEMA_VERSION
    provider: str
    case_id: str
    epoch: int
    dataset: str
    writes_total: int
    started: float = Field(default_factory=time.time)


class JournalWrite(BaseModel):
    """One finished control write: its record, and what its checks added to the unit's findings and attempts."""

    write: WriteRecord
    findings: list[Finding] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)


class UnitJournal(BaseModel):
    """A journal read back: the unit, its finished writes in order, and whether a torn last line was skipped."""

    path: Path
    head: JournalHead
    writes: list[JournalWrite]
    torn: bool = False

    @property
    def done(self) -> int:
        return len(self.writes)


def journal_path(run_dir: Path, provider: str, case_id: str, epoch: int) -> Path:
    """The unit's journal: a readable name (characters a file name may not hold replaced) and a digest of the
    exact unit, so two units whose names read alike never share a file."""
    key = f"{provider}\x00{case_id}\x00{epoch}"
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{provider}~{case_id}~e{epoch}")[:80]
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return Path(run_dir) / JOURNAL_DIR / f"{readable}-{digest}.jsonl"


def _line(model: BaseModel) -> str:
    return _json_line(model.model_dump(mode="json"))


def _json_line(value: object) -> str:
    return to_json(redact(value)).decode("utf-8").translate(_LINE_BREAKS) + "\n"


class JournalLines:
    """A unit's finished writes as journal lines: each write's record with only the findings and attempts the
    unit's lists gained since the write before.

    Apart from the writer so the lines can be made where the unit runs and appended where the run directory is
    (a Ray worker makes them; the driver appends them: `evals.run.executors._ray_journal`)."""

    def __init__(self) -> None:
        self._findings = self._attempts = 0

    def write_done(self, record: WriteRecord, findings: list[Finding], attempts: list[Attempt]) -> str:
        new_findings, new_attempts = findings[self._findings:], attempts[self._attempts:]
        self._findings, self._attempts = len(findings), len(attempts)
        return _line(JournalWrite(write=record, findings=new_findings, attempts=new_attempts))


class JournalWriter:
    """Appends one unit's finished writes to its journal, each line flushed before the next write (fsynced at
    most every `fsync_seconds`).

    One writer per unit, used by one thread at a time (the run directory's lock keeps other processes out).
    Opening truncates: a unit replayed again (a resumed run, sweep:fast's faulted pass, a Ray task retried)
    starts afresh."""

    def __init__(self, run_dir: Path, head: JournalHead, fsync_seconds: float = FSYNC_SECONDS):
        self.path = journal_path(run_dir, head.provider, head.case_id, head.epoch)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = self.path.open("w", encoding="utf-8")
        self._lines = JournalLines()
        self._error: OSError | None = None
        self._fsync_seconds, self._synced = fsync_seconds, time.monotonic()  # a short unit: no fsync
        self._append(_line(head))
        if self._error is not None:
            self.close()

    def write_done(self, record: WriteRecord, findings: list[Finding], attempts: list[Attempt]) -> None:
        """Save `record`, with the findings and attempts added to the unit's lists since the last write saved."""
        self._append(self._lines.write_done(record, findings, attempts))

    def append_line(self, line: str) -> None:
        """Save a write whose line `JournalLines` made elsewhere (a Ray worker's), redacted with this process's
        secrets too: the worker redacted it with the shapes and its own secrets, and the driver's (its environment's
        keys, the run's endpoint URLs) are what every other file of the run is redacted with. A line in which none
        of them occurs is saved as it came (a search of its text, for each secret as written and as JSON escapes it:
        redacting the whole line again cost as much as making it); one in which one does is parsed, redacted and
        written anew, so no JSON escape is cut in two."""
        if holds_registered_secret(line):
            line = _json_line(json.loads(line))
        self._append(line)

    def _append(self, line: str) -> None:
        """A failed write (disk full) stops the journal and is raised by `close`: the run's I/O failure, not
        the unit's (inside the replay it would be recorded as the unit's infra error)."""
        if self._error is not None:
            return
        try:
            self._file.write(line)
            self._file.flush()
            if (now := time.monotonic()) - self._synced >= self._fsync_seconds:
                os.fsync(self._file.fileno())
                self._synced = now
        except OSError as exc:
            self._error = exc

    def close(self) -> None:
        try:
            self._file.close()  # no fsync: the unit's record, fsynced in units.jsonl, is what outlives it
        except OSError as exc:
            self._error = self._error or exc
        if self._error is not None:
            raise self._error


def read_journal(path: Path) -> UnitJournal:
    """A journal as saved; a torn last line (the write in flight when the process died) is skipped. ValueError
    when its head or a whole line is not a journal's."""
    lines = Path(path).read_bytes().decode("utf-8", errors="replace").split("\n")
    torn = bool(lines and lines[-1])  # every whole line ends with "\n": a last piece without one was cut short
    whole = [line for line in lines[:-1] if line.strip()]
    if not whole:
        raise ValueError(f"{path}: no journal head")
    head = JournalHead.model_validate_json(whole[0])
    writes = []
    for lineno, line in enumerate(whole[1:], 2):
        try:
            writes.append(JournalWrite.model_validate_json(line))
        except ValidationError as exc:
            raise ValueError(f"{path}:{lineno}: not a journal line ({exc.error_count()} errors)") from None
    return UnitJournal(path=Path(path), head=head, writes=writes, torn=torn)


def unit_journals(run_dir: Path) -> list[Path]:
    """The journals a run directory holds: its units that began and whose record units.jsonl may not hold."""
    directory = Path(run_dir) / JOURNAL_DIR
    return sorted(directory.glob("*.jsonl")) if directory.is_dir() else []


def journaled_writes(run_dir: Path) -> list[int]:
    """The finished writes each journal holds (its whole lines after the head), without parsing them: what an
    interrupted run tells its user at once."""
    counts = []
    for path in unit_journals(run_dir):
        try:
            counts.append(max(0, path.read_bytes().count(b"\n") - 1))
        except OSError:  # removed in between: its unit was saved
            continue
    return counts


def remove_journal(run_dir: Path, provider: str, case_id: str, epoch: int) -> None:
    """Drop a unit's journal once its record is saved in units.jsonl (nothing to do when it kept none)."""
    journal_path(run_dir, provider, case_id, epoch).unlink(missing_ok=True)


def remove_journal_dir(run_dir: Path) -> None:
    """The journal directory, once no journal is left in it (a finished run's directory is as before)."""
    directory = Path(run_dir) / JOURNAL_DIR
    try:
        directory.rmdir()
    except OSError:  # absent, or a journal is still there (an unfinished unit's)
        pass


def incomplete_units(run_dir: Path, saved: set[tuple[str, str, int]]) -> list[str]:
    """One line per unit that began and whose record is not saved (`saved`: units.jsonl's units), e.g.
    `offline · long · epoch 0: INCOMPLETE, 120 of 400 writes saved in journal/offline_long_e0-….jsonl`."""
    out = []
    for path in unit_journals(run_dir):
        try:
            journal = read_journal(path)
        except (OSError, ValueError) as exc:
            out.append(f"{path.name}: an unreadable journal ({str(exc).splitlines()[0]})")
            continue
        head = journal.head
        if (head.provider, head.case_id, head.epoch) in saved:
            continue  # finished: the run stopped between saving its record and removing its journal
        out.append(f"{head.provider} · {head.case_id} · epoch {head.epoch}: INCOMPLETE, {journal.done} of "
                   f"{head.writes_total} writes saved in {JOURNAL_DIR}/{path.name}")
    return out


__all__ = ["JOURNAL_DIR", "JournalHead", "JournalLines", "JournalWrite", "JournalWriter", "UnitJournal", "incomplete_units",
           "journal_path", "journaled_writes", "read_journal", "remove_journal", "remove_journal_dir", "unit_journals"]
