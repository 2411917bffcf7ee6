"""Which thread of this process burnt the CPU, and how much went to the garbage collector (issue 35, point 1).

A run's CPU over its wall says the run used more than one core, not on what: useful work on a second core (e5
encoding ahead while the replay runs) and a runtime's worker spinning at a barrier (OpenMP, OpenBLAS) look the same
in `time.process_time`. Here every thread's CPU is read from `/proc/self/task/<tid>/stat` (Linux) while a block runs,
polled so that threads which end inside it are counted too (what a thread burnt after its last poll is the
process's CPU less the threads', reported apart).
Python threads are named by their `threading` name; threads Python did not start (OpenMP's and OpenBLAS's workers,
SQLite's, tokenizers') are summed as `native`: if that sum is not small, something outside Python is spinning.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

_TASKS = Path("/proc/self/task")
_UNSEEN = "after a thread's last poll"
_NUMBERED = re.compile(r"_\d+$")  # pool threads `hymem-unit_0`, `hymem-unit_1`... are summed as `hymem-unit_*`


def _task_cpu(tid: int) -> float | None:
    """utime + stime of one thread of this process, in seconds; None once it has ended."""
    try:
        stat = (_TASKS / str(tid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and brackets
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ThreadCPU:
    """Context manager: the CPU seconds each thread spent inside the block, by thread name.

    `by_thread()` after the block: Python threads by name (numbered pool threads summed under `name_*`), every
    thread Python did not start under `native`, this monitor's own poller under `thread-cpu poller`, and what no
    poll saw (a thread that ended between two polls, an ended thread's last interval) by difference with the
    process's CPU. A Python thread is named as it starts (`threading.setprofile`) or when a poll finds it alive."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self._start: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._names: dict[int, str] = {}
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._process = 0.0
        self._hook: Any = None

    def _name_new_thread(self, frame: Any, event: str, arg: Any) -> None:
        """`threading.setprofile`'s hook, run once as each thread started inside the block begins: a Python thread
        that ends before a poll finds it alive, but is still listed by the kernel, is not taken for a native one."""
        self._names[threading.get_native_id()] = threading.current_thread().name
        sys.setprofile(None)

    def available(self) -> bool:
        return _TASKS.is_dir()

    def _poll(self) -> None:
        for thread in threading.enumerate():
            if thread.native_id is not None:
                self._names[thread.native_id] = thread.name
        for entry in _TASKS.iterdir() if self.available() else ():
            tid = int(entry.name)
            cpu = _task_cpu(tid)
            if cpu is not None:
                self._start.setdefault(tid, 0.0 if self._poller is not None else cpu)  # born inside: from zero
                self._last[tid] = cpu

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._poll()

    def __enter__(self) -> ThreadCPU:
        self._hook = threading.getprofile()
        threading.setprofile(self._name_new_thread)
        self._process = time.process_time()
        self._poll()
        self._poller = threading.Thread(target=self._run, name="thread-cpu poller", daemon=True)
        self._poller.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        threading.setprofile(self._hook)
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
        self._poll()
        self._process = time.process_time() - self._process

    def by_thread(self) -> dict[str, float]:
        """CPU seconds per thread name inside the block, largest first; `after a thread's last poll` is the process's
        CPU less the threads' (threads that ended between two polls, each ended thread's last interval)."""
        out: dict[str, float] = {}
        for tid, last in self._last.items():
            name = self._names.get(tid)
            key = "native" if name is None else _NUMBERED.sub("_*", name)
            out[key] = out.get(key, 0.0) + last - self._start.get(tid, last)
        out[_UNSEEN] = max(0.0, self._process - sum(out.values()))
        return dict(sorted(((k, round(v, 2)) for k, v in out.items()), key=lambda kv: -kv[1]))


class GcCPU:
    """Context manager: the thread CPU each generation's collections took inside the block (`gc.callbacks`)."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._local = threading.local()

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._local.started = time.thread_time()
            return
        started = getattr(self._local, "started", None)
        if started is not None:
            generation = int(info["generation"])
            self.collections[generation] += 1
            self.seconds[generation] += time.thread_time() - started
            self._local.started = None

    def __enter__(self) -> GcCPU:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        return {f"generation {g}": {"collections": n, "cpu_s": round(s, 2)}
                for g, (n, s) in enumerate(zip(self.collections, self.seconds, strict=True))}


__all__ = ["GcCPU", "ThreadCPU"]
