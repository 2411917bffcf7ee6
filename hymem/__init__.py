"""hymem: a minimal in-process memory engine whose writes are all-or-nothing.

Public names are re-exported here; implementation lives in the submodules. They are
resolved lazily (PEP 562) so that `import hymem.store` or `import hymem.failpoints`
does not pay for importing dspy through the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hymem.client import HyMemoryClient
    from hymem.embedder import EmbeddingError, HashEmbedder, make_embedder
    from hymem.messages import MessageValidationError, normalize_messages
    from hymem.models import AppliedOp, ChatMessage, ErrorCode, Memory, ModelCall, ProposedFact, WriteResult
    from hymem.program import MemoryProgram
    from hymem.sites import SITE_HEADER, current_call_site
    from hymem.validation import InputValidationError

__version__ = "0.1.0"

__all__ = [
    "AppliedOp",
    "ChatMessage",
    "EmbeddingError",
    "ErrorCode",
    "HashEmbedder",
    "HyMemoryClient",
    "InputValidationError",
    "Memory",
    "MemoryProgram",
    "MessageValidationError",
    "ModelCall",
    "ProposedFact",
    "SITE_HEADER",
    "WriteResult",
    "__version__",
    "current_call_site",
    "make_embedder",
    "normalize_messages",
]

_SOURCES = {  # public name -> the submodule that defines it
    "HyMemoryClient": "hymem.client",
    "EmbeddingError": "hymem.embedder",
    "HashEmbedder": "hymem.embedder",
    "make_embedder": "hymem.embedder",
    "MessageValidationError": "hymem.messages",
    "normalize_messages": "hymem.messages",
    "AppliedOp": "hymem.models",
    "ChatMessage": "hymem.models",
    "ErrorCode": "hymem.models",
    "Memory": "hymem.models",
    "WriteResult": "hymem.models",
    "ModelCall": "hymem.models",
    "ProposedFact": "hymem.models",
    "current_call_site": "hymem.sites",
    "SITE_HEADER": "hymem.sites",
    "MemoryProgram": "hymem.program",
    "InputValidationError": "hymem.validation",
}


def __getattr__(name: str) -> Any:
    """Import a public name's submodule on first use, then cache the name in this module."""
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
