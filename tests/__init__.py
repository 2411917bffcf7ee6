"""The tests, one folder per stage of `evals/` (core ... cli), `engine/` for `hymem/`, `e2e/` for whole runs.

Every folder is a package, so pytest imports a test file as `tests.<folder>.test_<name>`: two folders may hold
files of the same name, and shared helpers are imported by their full name (`from tests.conftest import ...`).
"""
