"""A Ray unit's finished writes, saved in the run directory's journal while the unit runs (issue 35).

A local unit appends each finished control write to `RUN/journal/<unit>.jsonl` itself (`evals.record._journal`).
A Ray worker may run on another machine, with no path to the run directory, so it sends its journal lines back
and the driver appends them to the same files, in the same format: `show`, `--resume` and an interrupted run's
message then read a Ray run's journals as a local run's. How the lines travel:

- the worker makes each line where the unit runs (`JournalLines`: the record's serialisation and redaction are
  the worker's CPU, not the driver's) and hands the lines to the run's `_Relay` actor, at most every
  SEND_SECONDS, in a call it does not wait for; before the task returns it sends the rest and waits once until
  the relay has them all (calls from one caller run in order). Why batched: an actor call costs about as much
  CPU as making the line (0.46 ms in the relay's process a call, BENCHMARKS.md), and a unit's writes come
  every few ms to tens of ms;
- the driver takes what the relay holds every time it waits for finished units (at most every 0.5 s), appends
  it, and takes once more before it saves a finished unit, so the unit's journal is whole when the runner
  removes it. A Ray Client driver (`ray://`) is not on the cluster, which is why the driver pulls from an actor
  rather than the actor writing files: streaming generators would also stream back, but Ray Client refuses them.
- a task Ray retries (its worker died) begins again with a new head: its journal starts afresh, as a resumed
  unit's does, and a line still arriving from the dead attempt is dropped.

What it costs: BENCHMARKS.md, "A long unit's finished writes saved". The journal never fails a unit: a relay that
cannot be reached (its process died) stops the journals, and the units go on.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evals.record import Attempt, Finding, JournalHead, JournalLines, JournalWriter, WriteRecord
from evals.run.executors._unit import UnitTask
from evals.run.replay import case_writes

SEND_SECONDS = 0.2  # a worker sends its finished writes' lines at most this often (and all of them at its unit's end)
UnitKey = tuple[str, str, int]  # (provider label, case id, epoch): a journal's unit
Progress = Callable[[UnitTask], Callable[[int, int], None] | None]  # a unit -> its `write i/N` callback, if any


def unit_key(task: UnitTask) -> UnitKey:
    return (task.label, task.case.id, task.epoch)


class _Relay:
    """The actor between the workers and the driver: the journal events the workers sent, in arrival order,
    until the driver takes them. A sync actor, so one caller's calls run in the order it made them."""

    def __init__(self) -> None:
        self._events: list[tuple[Any, ...]] = []
        self._attempt: dict[UnitKey, str] = {}  # the unit's latest attempt: an older one's lines are dropped

    def begin(self, unit: UnitKey, attempt: str, head: JournalHead) -> None:
        self._attempt[unit] = attempt
        self._events.append((unit, head))

    def lines(self, unit: UnitKey, attempt: str, lines: list[str]) -> None:
        if self._attempt.get(unit) == attempt:
            self._events.append((unit, lines))

    def flush(self) -> None:
        """Returns once every call this caller made before is done: the worker's lines are all here."""

    def take(self) -> list[tuple[Any, ...]]:
        events, self._events = self._events, []
        return events


def relay_actor() -> Any:
    """The run's relay (no CPU of its own: it must not hold back a unit's task)."""
    import ray  # the optional extra; this module is loaded only with --executor ray

    return ray.remote(_Relay).options(num_cpus=0, max_concurrency=1).remote()


class RelayedJournal:
    """The worker's side: sends the unit's head when it starts, then its finished writes' lines, at most every
    `send_seconds`."""

    def __init__(self, relay: Any, task: UnitTask, send_seconds: float = SEND_SECONDS):
        self._relay, self._unit, self._attempt = relay, unit_key(task), uuid.uuid4().hex
        self._lines = JournalLines()
        self._unsent: list[str] = []
        self._send_seconds, self._sent = send_seconds, time.monotonic()
        head = JournalHead(provider=task.label, case_id=task.case.id, epoch=task.epoch, dataset=task.dataset,
                           writes_total=len(case_writes(task.case)))
        self._relay.begin.remote(self._unit, self._attempt, head)

    def write_done(self, record: WriteRecord, findings: list[Finding], attempts: list[Attempt]) -> None:
        self._unsent.append(self._lines.write_done(record, findings, attempts))
        if time.monotonic() - self._sent >= self._send_seconds:
            self._send()

    def _send(self) -> None:
        if self._unsent:
            self._relay.lines.remote(self._unit, self._attempt, self._unsent)
            self._unsent = []
        self._sent = time.monotonic()

    def flush(self) -> None:
        """Send the rest and wait until the relay holds every line (so the driver has them before the unit's
        record); a relay that died loses them, never the unit."""
        import ray

        try:
            self._send()
            ray.get(self._relay.flush.remote(), timeout=120)
        except Exception:  # ActorDiedError, GetTimeoutError: the journal is the driver's to give up
            pass


class JournalIntake:
    """The driver's side: appends what the relay holds to each unit's journal in the run directory, and shows a
    long unit's `write i/N` on the progress bar as its lines arrive."""

    def __init__(self, run_dir: Path, relay: Any, progress: Progress | None = None):
        self.run_dir, self._relay, self._progress = Path(run_dir), relay, progress
        self._tasks: dict[UnitKey, UnitTask] = {}
        self._open: dict[UnitKey, tuple[JournalWriter, int, int, Callable[[int, int], None] | None]] = {}

    def expect(self, task: UnitTask) -> None:
        """A unit submitted: its journal opens when its worker begins it."""
        self._tasks[unit_key(task)] = task

    def take(self, timeout: float | None = None) -> None:
        """Append every event the relay holds. A relay that cannot be reached stops the journals (the units go
        on; their records still reach units.jsonl)."""
        if self._relay is None:
            return
        import ray

        try:
            events = ray.get(self._relay.take.remote(), timeout=timeout)
        except Exception:  # the relay's process died, or an interrupt's last take timed out
            self._relay = None
            return
        for unit, event in events:
            if isinstance(event, JournalHead):
                self._begin(unit, event)
            elif unit in self._open:
                writer, done, total, show = self._open[unit]
                for line in event:
                    writer.append_line(line)
                self._open[unit] = (writer, done + len(event), total, show)
                if show is not None:
                    show(done + len(event), total)

    def _begin(self, unit: UnitKey, head: JournalHead) -> None:
        task = self._tasks.get(unit)
        if task is None:  # a head that came late (its worker's wait for the relay timed out): the unit is saved
            return
        if unit in self._open:  # a retried task begins again: its journal starts afresh
            self._open.pop(unit)[0].close()
        show = self._progress(task) if self._progress is not None else None
        self._open[unit] = (JournalWriter(self.run_dir, head), 0, head.writes_total, show)

    def end(self, unit: UnitKey) -> None:
        """The unit finished (or failed for good): close its journal; the runner removes it once the unit's
        record is saved. A failed write (disk full) is raised: the run's I/O failure, as with a local unit."""
        self._tasks.pop(unit, None)  # nothing of it is appended after this
        if unit in self._open:
            self._open.pop(unit)[0].close()

    def close(self) -> None:
        """An interrupted run: close every journal still open, keeping what it holds (for show and --resume)."""
        for unit in list(self._open):
            try:
                self.end(unit)
            except OSError:
                pass  # the interrupt is what is being reported


__all__ = ["JournalIntake", "RelayedJournal", "UnitKey", "relay_actor", "unit_key"]
