"""Stage 4, check: the write contract read off a store's files: the checker, the contract checks, natural failures, the op walk."""
