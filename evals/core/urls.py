"""What an endpoint URL must be before any call is sent to it: one check for every place a user gives one."""

from __future__ import annotations

from urllib.parse import urlparse

from evals.core.redact import redact_url


def url_problem(value: str) -> str | None:
    """Why `value` is not an http(s) URL with a host and a valid port, in one line (credentials redacted); None
    when it is one. `--lm`, a providers file's `api_base`, `--embedder openai@URL` and `proxy --upstream`."""
    try:
        url = urlparse(value)
        port = url.port  # raises for a port out of range or not a number
    except ValueError as exc:  # e.g. "Invalid IPv6 URL", "Port out of range 0-65535"
        return f"not an http(s) URL: {redact_url(value)!r} ({exc})"
    if url.scheme not in ("http", "https") or not url.hostname:
        return f"not an http(s) URL: {redact_url(value)!r}"
    if port == 0:
        return f"not an http(s) URL: {redact_url(value)!r} (port 0)"
    return None
