"""Eval harness for hymem: datasets, runs, scoring and reports."""

__all__: list[str] = []
