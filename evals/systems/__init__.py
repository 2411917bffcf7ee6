"""Systems under test: the protocol the harness replays, checks and scores an engine through.

`hymem` is one implementation (in-process faults); `mem0` another (optional extra `mem0`, faults on the
wire). `--system hymem|mem0` picks one per arm; several give a side-by-side table. mem0 is imported lazily.
"""

from evals.systems.arms import SYSTEMS, check_system, open_arm, site_kinds, validate_arm
from evals.systems.base import DEFAULT_SYSTEM, Arm, MemorySystem, WriteOutcome, arm_label

__all__ = ["DEFAULT_SYSTEM", "SYSTEMS", "Arm", "MemorySystem", "WriteOutcome", "arm_label", "check_system",
           "open_arm", "site_kinds", "validate_arm"]
