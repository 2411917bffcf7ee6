"""Shared, below every stage: redaction, strict JSON limits, statistics, the harness's own subject and prompt readings, the store's file view. Imports nothing else of the harness."""
