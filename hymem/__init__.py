"""hymem: a minimal in-process memory engine whose writes are all-or-nothing.

Public names are re-exported here; implementation lives in the submodules.
"""

from hymem.client import HyMemoryClient
from hymem.embedder import EmbeddingError, HashEmbedder, make_embedder
from hymem.messages import MessageValidationError, normalize_messages
from hymem.models import AppliedOp, ChatMessage, ErrorCode, Memory, WriteResult
from hymem.program import MemoryProgram

__version__ = "0.1.0"

__all__ = [
    "AppliedOp",
    "ChatMessage",
    "EmbeddingError",
    "ErrorCode",
    "HashEmbedder",
    "HyMemoryClient",
    "Memory",
    "MemoryProgram",
    "MessageValidationError",
    "WriteResult",
    "__version__",
    "make_embedder",
    "normalize_messages",
]
