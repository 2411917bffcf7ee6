"""Secrets never leave the process: one redaction function for every string the harness writes.

A provider's error can echo its key (`401 Incorrect API key provided: sk-…`), and the harness records
errors verbatim in units.jsonl, the Parquet tables, summary.md, the manifest, the cache, the proxy log
and the terminal. Each of those writes passes its payload through `redact`, which replaces every
configured key value (registered with `register_secret` when a provider reads its key) and the common
secret shapes (`sk-…`, `Bearer …`, `api_key=…`, `Authorization: …`) with `[REDACTED]`.
"""

from __future__ import annotations

import io
import re
import threading
from typing import Any

REDACTED = "[REDACTED]"
_MIN_SECRET = 6  # shorter values would redact ordinary words; no real key is this short

_SHAPES = re.compile(
    r"""\bsk-[A-Za-z0-9_\-]{6,}"""  # OpenAI / Anthropic style keys (sk-…, sk-proj-…, sk-ant-…)
    r"""|(?i:\bbearer)\s+[A-Za-z0-9._~+/=\-]{12,}"""  # an Authorization header's token
    r"""|(?i:\b(?:api[_-]?key|x-api-key|access[_-]?token|auth[_-]?token|secret[_-]?key|password)"""
    r"""["']?\s*[:=]\s*["']?)[^\s"'&,;}]{6,}""",  # key=value, "api_key": "value", api-key: value
)
_KEY_PREFIX = re.compile(r"""^(?i:[a-z_\-]+["']?\s*[:=]\s*["']?)""")

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None


def register_secret(value: str | None) -> None:
    """Redact this exact value (a configured key) from everything written from now on."""
    global _pattern
    if not value or len(value) < _MIN_SECRET:
        return
    with _lock:
        if value in _secrets:
            return
        _secrets.add(value)
        ordered = sorted(_secrets, key=len, reverse=True)  # a longer key first when one contains another
        _pattern = re.compile("|".join(re.escape(s) for s in ordered))


def _shape(match: re.Match[str]) -> str:
    text = match.group(0)
    if text.lower().startswith("bearer"):
        return "Bearer " + REDACTED
    prefix = _KEY_PREFIX.match(text)
    return (prefix.group(0) if prefix and not text.startswith("sk-") else "") + REDACTED


def redact_text(text: str) -> str:
    """`text` with every registered key value and every common secret shape replaced by [REDACTED]."""
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    return _SHAPES.sub(_shape, text)


def redact(value: Any) -> Any:
    """Redact a string, or every string inside dicts, lists and tuples (keys included); other values as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact(k): redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact(v) for v in value)
    return value


def redact_frame(frame: Any) -> Any:
    """A pandas DataFrame with every string (also inside list cells) redacted; numeric columns untouched."""
    from pandas.api.types import is_string_dtype

    out = frame.copy()
    for column in out.columns:
        values = out[column]
        if (values.dtype == object or is_string_dtype(values.dtype)) and values.notna().any():
            out[column] = values.map(redact, na_action="ignore")
    return out


class RedactingStream(io.TextIOBase):
    """A text stream (the terminal) that redacts what is written through it."""

    def __init__(self, inner: Any):
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(redact_text(text))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        try:
            return self.inner.isatty()
        except ValueError:  # the stream it wraps is closed (e.g. checked at interpreter exit)
            return False

    @property
    def closed(self) -> bool:
        return getattr(self.inner, "closed", False)

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIO declares it a plain attribute
        return getattr(self.inner, "encoding", "utf-8")


__all__ = ["REDACTED", "RedactingStream", "redact", "redact_frame", "redact_text", "register_secret"]
