"""Secrets never leave the process: the one redaction point for every string the harness writes.

A provider's error can echo its key (`401 Incorrect API key provided: sk-…`), and the harness records
errors verbatim in units.jsonl, the Parquet tables, summary.md, the manifest, the cache, the proxy log
and the terminal. Each of those writes passes its payload through `redact` (files through `write_text`,
`write_parquet` and `evals.record`'s writers, the terminal through `RedactingStream`), which replaces
every registered secret and the common secret shapes (`sk-…`, `Bearer …`, `Basic …`, `api_key=…`,
`Authorization: …`, a URL's `user:password@` and `?key=…`) with `[REDACTED]`.

Secrets are registered from every place a run can see one: the environment's key-like variables and
endpoint URLs (`register_environment`, at the CLI's start and in `run`), a provider's key when it is read
(`evals.arms.providers.api_key`), a providers file's `api_key_env`, and the credentials inside any endpoint URL
(`register_url`: the `--lm`/`--embedder`/`--matcher llm:` specs and `api_base`).
"""

from __future__ import annotations

import base64
import io
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from evals.core.files import atomic_write

REDACTED = "[REDACTED]"
_MIN_SECRET = 6  # shorter values would redact ordinary words; no real key is this short

_SHAPES = re.compile(
    r"""\bsk-[A-Za-z0-9_\-]{6,}"""  # OpenAI / Anthropic style keys (sk-…, sk-proj-…, sk-ant-…)
    r"""|(?i:\bbearer)\s+[A-Za-z0-9._~+/=\-]{12,}"""  # an Authorization header's token
    r"""|(?i:\b(?:api[_-]?key|x-api-key|access[_-]?token|auth[_-]?token|secret[_-]?key|password)"""
    r"""["']?\s*[:=]\s*["']?)[^\s"'&,;}]{6,}"""  # key=value, "api_key": "value", api-key: value
    r"""|(?i:\bauthorization["']?\s*[:=]\s*["']?basic)\s+[A-Za-z0-9+/]{8,}={0,2}""",  # a Basic header's user:password
)
# A URL's credentials: `scheme://user:password@host` and secret-named query parameters (`?key=…&token=…`).
_URL_USERINFO = re.compile(r"""(?<=://)[^\s/?#@'"<>]+@""")
_SECRET_PARAM = r"(?:key|api[_-]?key|apikey|token|access[_-]?token|auth|secret|password|pass|pwd|sig|signature)"
_URL_QUERY_SECRET = re.compile(r"""(?i)([?&;]""" + _SECRET_PARAM + r"""=)[^&#\s"'<>]+""")
_SECRET_PARAM_NAME = re.compile(rf"(?i)^{_SECRET_PARAM}$")
# Environment variables whose value is a key (`OPENAI_API_KEY`, `HF_TOKEN`, `MY_SECRET`), or an endpoint URL
# that may carry credentials (`OPENAI_BASE_URL`, `ANTHROPIC_API_BASE`).
_KEY_VARIABLE = re.compile(r"(?i)(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$")
_URL_VARIABLE = re.compile(r"(?i)(?:API_BASE|BASE_URL|_URL|ENDPOINT)$")
_MIN_ENV_SECRET = 8  # a key from the environment is long; a short value (`true`, `1`, a word) is no key
_KEY_PREFIX = re.compile(r"""^(?i:[a-z_\-]+["']?\s*[:=]\s*["']?)""")

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
_json_pattern: re.Pattern[str] | None = None  # every registered secret as written or as a JSON string holds it
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                  "\t": "\\t"}


def register_secret(value: str | None) -> None:
    """Redact this exact value (a configured key) from everything written from now on."""
    global _pattern, _json_pattern
    if not value or len(value) < _MIN_SECRET:
        return
    with _lock:
        if value in _secrets:
            return
        _secrets.add(value)
        ordered = sorted(_secrets, key=len, reverse=True)  # a longer key first when one contains another
        _pattern = re.compile("|".join(re.escape(s) for s in ordered))
        _json_pattern = re.compile("|".join(_json_forms(s) for s in ordered))


def _json_forms(value: str) -> str:
    r"""A regex of `value` as written and in each form JSON writers give it inside a string: a character raw, as
    its short escape (`\"`, `\\`, `\/`, `\n`, ...) or, when it is not printable ASCII (or is a quote or a
    backslash), as `\uXXXX` in either case (two of them beyond U+FFFF). Writers differ in which they pick: pydantic
    and `json.dumps(ensure_ascii=False)` leave `é` raw, `ensure_ascii` writes `\u00e9`, and the harness's JSON
    lines escape U+0085, U+2028 and U+2029 alone."""
    out = []
    for char in value:
        forms = [re.escape(char)]
        if char in _SHORT_ESCAPES:
            forms.append(re.escape(_SHORT_ESCAPES[char]))
        if not " " <= char <= "~" or char in '"\\':
            units = char.encode("utf-16-be").hex()
            forms.append("".join(rf"\\u(?i:{units[i:i + 4]})" for i in range(0, len(units), 4)))
        out.append(forms[0] if len(forms) == 1 else f"(?:{'|'.join(forms)})")
    return "".join(out)


def _shape(match: re.Match[str]) -> str:
    text = match.group(0)
    if text.lower().startswith("bearer"):
        return "Bearer " + REDACTED
    if text.lower().startswith("authorization"):
        return text[:text.lower().index("basic") + 5] + " " + REDACTED
    prefix = _KEY_PREFIX.match(text)
    return (prefix.group(0) if prefix and not text.startswith("sk-") else "") + REDACTED


def redact_text(text: str) -> str:
    """`text` with every registered key value and every common secret shape replaced by [REDACTED]."""
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    return redact_url(_SHAPES.sub(_shape, text))


def holds_registered_secret(text: str) -> bool:
    r"""Whether a registered secret's value occurs in `text`, a JSON text: as written, or inside one of its strings
    in any form JSON writers escape it to (a quote in a key is `\"` there, a newline `\n`, an `é` `é` or `\u00e9`).
    The shapes are left out: every process redacts them alike, so a text another process redacted (a Ray worker's
    journal line) differs from this one's redaction only by the secrets this process registered and it did not."""
    pattern = _json_pattern
    return pattern is not None and pattern.search(text) is not None


def redact_url(text: str) -> str:
    """`text` with the credentials of every URL in it (`user:password@`, `?key=…`) replaced by [REDACTED]: how
    an endpoint is named in reports (`http://[REDACTED]@host/v1`), the same every time it is named."""
    if "://" in text:
        text = _URL_USERINFO.sub(REDACTED + "@", text)
    if "=" in text:
        text = _URL_QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def register_url(url: str | None) -> None:
    """Redact the credentials of an endpoint URL wherever they appear later: its password (as written,
    percent-decoded, and as the `Basic` header a client makes of it) and its secret-named query values."""
    if not url or "://" not in url:
        return
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return
    user, password = parts.username, parts.password
    if password:
        for value in {password, unquote(password)}:
            register_secret(value)
        raw = f"{unquote(user or '')}:{unquote(password)}".encode()
        register_secret(base64.b64encode(raw).decode())
    elif user and len(user) >= _MIN_ENV_SECRET:  # `http://TOKEN@host`: the user part is the key
        register_secret(unquote(user))
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if _SECRET_PARAM_NAME.match(name):
            register_secret(value)


def register_urls_in(texts: Iterable[str | None]) -> None:
    """Register the credentials of every URL inside these strings (CLI arguments, `MODEL@URL` specs)."""
    for text in texts:
        for match in re.finditer(r"""https?://[^\s'"<>]+""", text or ""):
            register_url(match.group(0))


def register_environment(environ: Mapping[str, str] | None = None) -> None:
    """Register every key-like environment variable's value (`*_API_KEY`, `*_TOKEN`, `*_SECRET`, ...) and the
    credentials of every endpoint URL the environment sets: a run can send any of them to a provider (LiteLLM
    and the openai client read them by themselves), so any of them can come back in an error."""
    environ = os.environ if environ is None else environ
    for name, value in list(environ.items()):
        if _URL_VARIABLE.search(name):
            register_url(value)
        elif _KEY_VARIABLE.search(name) and _looks_like_a_key(value):
            register_secret(value)


def _looks_like_a_key(value: str) -> bool:
    """A key is one long token: not a path, a word list or a flag (`SSH_KEY_DIR=/home/x` is no secret)."""
    value = value.strip()
    return (len(value) >= _MIN_ENV_SECRET and not any(c.isspace() for c in value)
            and not value.startswith(("/", "~", ".")) and value.lower() not in ("true", "false", "none"))


def register_run_secrets(specs: Iterable[str | None] = ()) -> None:
    """Everything a run can see: the environment (`register_environment`) and the URLs inside `specs`."""
    register_environment()
    register_urls_in(specs)


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


def write_text(path: str | Path, text: str, *, append: bool = False) -> None:
    """Write (or append) `text`, redacted; a whole file is written whole-or-not (temporary file, rename)."""
    text = redact_text(text)
    if append:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
        return
    atomic_write(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_parquet(data: Any, path: str | Path, schema: Any = None) -> None:
    """Write a DataFrame (or a list of row dicts, with `schema`) as Parquet, every string redacted, whole-or-not."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(data, pd.DataFrame):
        table = pa.Table.from_pandas(redact_frame(data), schema=schema, preserve_index=False)
    else:
        rows = [redact(row) for row in data]
        table = pa.Table.from_pylist(rows, schema=schema) if rows or schema is None else schema.empty_table()
    atomic_write(Path(path), lambda tmp: pq.write_table(table, tmp))


def install_excepthook() -> None:
    """An uncaught exception's traceback is printed redacted too (it is printed after the CLI's streams are
    restored, and its message may be a provider's reply)."""
    import sys
    import traceback

    if getattr(sys.excepthook, "_hymem_redacting", False):
        return
    previous = sys.excepthook

    def hook(kind: Any, value: Any, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
            return
        sys.stderr.write(redact_text("".join(traceback.format_exception(kind, value, tb))))

    hook._hymem_redacting = True  # type: ignore[attr-defined]
    sys.excepthook = hook


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


__all__ = ["REDACTED", "RedactingStream", "install_excepthook", "redact", "redact_frame", "redact_text", "redact_url",
           "register_environment", "register_run_secrets", "register_secret", "register_url", "register_urls_in",
           "write_parquet", "write_text"]
