"""Argument checks that run before any model call, and the one error type they raise.

A bad argument must never reach the model or the store: it would come back as a model error
(`LLM_ERROR`), a store error, or a crash deep in the chain, naming nothing the caller can fix. So every
public method checks its arguments first and raises `InputValidationError`, which names the argument,
and for a list the element's index and field.
"""

from __future__ import annotations

import re
from typing import Any, overload

DEFAULT_MAX_MESSAGE_CHARS = 32_000  # one message's (or extracted memory's, or query's) text, in characters
DEFAULT_MAX_WRITE_CHARS = 128_000  # all the text of one write, in characters
MAX_ID_CHARS = 256  # user_id and request_id

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


class InputValidationError(ValueError):
    """An argument the engine refuses; nothing was stored and no model was called.

    `argument` is the parameter's name (`messages`, `memories`, `user_id`, `request_id`, `query`, ...);
    `index` and `field` point into a list argument (e.g. messages[2].content) when that is where it is wrong.
    """

    def __init__(self, argument: str, problem: str, *, index: int | None = None, field: str | None = None) -> None:
        self.argument = argument
        self.index = index  # position in the list argument; None when the argument as a whole is wrong
        self.field = field  # e.g. "content", "content[2].text", "subject"; None when the whole element is wrong
        self.problem = problem
        where = argument + ("" if index is None else f"[{index}]") + (f".{field}" if field else "")
        super().__init__(f"{where}: {problem}")


def text_problem(value: Any, *, max_chars: int | None = None, limit: str = "", allow_blank: bool = False) -> str | None:
    """Why `value` is not acceptable text (None when it is): not a string, blank, too long, or not valid Unicode.

    `limit` names the setting behind `max_chars` in the message (e.g. "max_message_chars").
    """
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if not allow_blank and not value.strip():
        return "must not be empty or blank"
    if max_chars is not None and len(value) > max_chars:
        return size_problem(len(value), max_chars, limit)
    return surrogate_problem(value)


def size_problem(size: int, max_chars: int, limit: str = "") -> str:
    return f"has {size} characters, more than the limit of {max_chars}" + (f" ({limit})" if limit else "")


def surrogate_problem(value: str) -> str | None:
    """A lone surrogate (e.g. from a bad decode) cannot be encoded as UTF-8 for the model or the store."""
    match = _SURROGATE_RE.search(value)
    if match is None:
        return None
    return (f"contains a lone surrogate U+{ord(match.group()):04X} at character {match.start()}"
            " (not valid Unicode; it cannot be encoded as UTF-8)")


def check_user_id(user_id: Any) -> str:
    problem = text_problem(user_id, max_chars=MAX_ID_CHARS)
    if problem is not None:
        raise InputValidationError("user_id", problem)
    return user_id


def check_request_id(request_id: Any) -> str | None:
    """None (the engine makes one) or a non-blank string."""
    if request_id is None:
        return None
    problem = text_problem(request_id, max_chars=MAX_ID_CHARS)
    if problem is not None:
        raise InputValidationError("request_id", problem + " (pass None to have one generated)")
    return request_id


@overload
def check_positive_int(argument: str, value: Any) -> int: ...
@overload
def check_positive_int(argument: str, value: Any, *, allow_none: bool) -> int | None: ...
def check_positive_int(argument: str, value: Any, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputValidationError(argument, f"must be a positive integer{' or None' if allow_none else ''},"
                                             f" got {value!r}")
    return value
