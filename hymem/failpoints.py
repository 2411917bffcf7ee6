"""Named failpoints: places where a test can kill or fail the process on purpose.

Crash-safety claims are only worth what the crash tests exercise, so the write
path calls `failpoint(name)` at each step where dying would leave a different
state on disk. The environment is read at call time, so a test sets it per
subprocess (kill) or per test (raise) without reloading anything.

- `HYMEM_FAILPOINT=name[,name...]`: the process SIGKILLs itself at that point,
  exactly like `kill -9` (no cleanup, no atexit, no flush).
- `HYMEM_FAILPOINT_RAISE=name[,name...]`: `FailpointError(name)` is raised
  there instead, for in-process tests of failure handling.

Points in the store (`hymem/store/`), in the order a write reaches them:

- `store.sketch_centre`: inside the SQLite transaction, after a group's new sketch centre was written
  (only in a write that makes a group large enough for one; see `hymem.store._ann`).
- `store.before_commit`: inside the SQLite transaction, after all its statements.
- `store.after_commit`: committed, FAISS not yet updated.
- `store.faiss_update`: inside the FAISS update, after stale vectors were removed
  and before new ones were added (a raise here exercises the rebuild path).
- `store.after_faiss`: FAISS updated, before any lazy persist.
- `store.persist`: while persisting FAISS, after the index file was replaced and
  before its sidecar (generation, checksum) was written.

A harness can also install a per-thread hook (`set_hook`) that is called with
each point's name and may raise there.

Points in the client: `client.after_extract`, `client.after_embed`,
`client.after_reconcile`.
"""

from __future__ import annotations

import contextvars
import os
import signal
from collections.abc import Callable

KILL_ENV = "HYMEM_FAILPOINT"
RAISE_ENV = "HYMEM_FAILPOINT_RAISE"


class FailpointError(RuntimeError):
    """Raised at a failpoint named in HYMEM_FAILPOINT_RAISE."""

    def __init__(self, name: str):
        super().__init__(f"failpoint {name!r} triggered")
        self.name = name


def _armed(env: str, name: str) -> bool:
    raw = os.environ.get(env)
    return raw is not None and name in {part.strip() for part in raw.split(",") if part.strip()}


_HOOK: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar("hymem_failpoint_hook",
                                                                                     default=None)


def set_hook(hook: Callable[[str], None] | None) -> contextvars.Token:
    """Call `hook(name)` at every failpoint in this context (thread); a harness raises from it to inject faults."""
    return _HOOK.set(hook)


def reset_hook(token: contextvars.Token) -> None:
    _HOOK.reset(token)


def failpoint(name: str) -> None:
    """Die (SIGKILL) or raise here if the environment names this point; otherwise do nothing."""
    hook = _HOOK.get()
    if hook is not None:
        hook(name)
    if _armed(RAISE_ENV, name):
        raise FailpointError(name)
    if _armed(KILL_ENV, name):
        os.kill(os.getpid(), signal.SIGKILL)
