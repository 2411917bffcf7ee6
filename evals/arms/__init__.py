"""Stage 3, arms: the systems under test and what they talk to — the protocol a memory system is replayed,
checked and scored through, its implementations, the LM providers (with accounting), and the HTTP servers.

`hymem` is one implementation (in-process faults); `mem0` another (optional extra `mem0`, faults on the
wire). `--system hymem|mem0` picks one per arm; several give a side-by-side table. mem0 is imported lazily.

Nothing is imported here: `evals.arms.serve` is imported by the command line's parser, and must not load the store
or the engine.
"""
