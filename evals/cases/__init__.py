"""Stage 1, cases: datasets and their adapters (JSONL, LoCoMo, ...) into typed `Case`s, and the label audit."""
