"""The offline reference model: a deterministic heuristic behind a DSPy engine.

Why: the harness needs a default provider with no network and no randomness that still *reads* what it
is sent, so it can serve as a baseline row on unseen conversations. It answers hymem's three signatures
(ExtractFacts, ExtractWorking, ReconcileFacts) in the reply format of DSPy's JSONAdapter (ChatAdapter's
too), telling the task apart by the input fields of the last user message; demos before it are ignored.

The rules are regular expressions over English and Chinese sentences. Chat: a human's first-person
statements are rewritten about their speaker ("I'm a nurse" -> "John is a nurse."), people they name
become their own subjects, the AI's advice becomes the assistant's (owner "agent"), and the profile is
read from the current user's own facts. Working: lessons said outright, plus episodes read off the
trajectory (a tool error, what the AI said and ran, a tool output reporting success); project facts and
rules the user sets. Reconcile: memories of the same subject only, compared by slot (location, employer,
occupation, age, likes, and the negation of a claim).

Modules: `_prompt` (adapter text in and out), `_conversation` (speakers, turns, sentences), `_english` and
`_chinese` (the language rules), `_occupations`, `_chat` (ExtractFacts), `_working` (ExtractWorking),
`_reconcile` (ReconcileFacts), `_engine` (the DSPy engine).
"""

from __future__ import annotations

from hymem.offline._engine import MODEL, AsyncOfflineEngine, OfflineEngine, offline_lm
from hymem.offline._prompt import answer

# DSPy saves a custom engine by `module:QualName` and imports it back on load: keep the public path
# (`hymem.offline:OfflineEngine`), so saved programs do not name a private module and older saves still load.
OfflineEngine.__module__ = __name__
AsyncOfflineEngine.__module__ = __name__

__all__ = ["MODEL", "AsyncOfflineEngine", "OfflineEngine", "answer", "offline_lm"]
