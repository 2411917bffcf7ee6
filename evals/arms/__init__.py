"""Stage 3, arms: the systems under test and what they talk to — the protocol a memory system is replayed,
checked and scored through, its implementations, the LM providers (with accounting), and the HTTP servers.

`hymem` is one implementation (in-process faults); `mem0` another (optional extra `mem0`, faults on the
wire). `--system hymem|mem0` picks one per arm; several give a side-by-side table. mem0 is imported lazily.
"""

from evals.arms.base import DEFAULT_SYSTEM, Arm, MemorySystem, WriteOutcome, arm_label
from evals.arms.registry import SYSTEMS, check_system, open_arm, site_kinds, validate_arm

__all__ = ["DEFAULT_SYSTEM", "SYSTEMS", "Arm", "MemorySystem", "WriteOutcome", "arm_label", "check_system",
           "open_arm", "site_kinds", "validate_arm"]
