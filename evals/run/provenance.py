"""Filling in a run manifest: the package versions and git state a run was made with.

The `Manifest` record itself is declared in `evals.record` (re-exported here).
"""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

from evals.record import SCHEMA_VERSION, Manifest

__all__ = ["SCHEMA_VERSION", "Manifest", "git_state", "package_versions"]

_PACKAGES = ("hymem", "dspy", "pydantic", "numpy", "faiss-cpu", "pandas", "pyarrow", "sentence-transformers", "mem0ai")


def package_versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_state(root: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout the harness runs from, or (None, None) outside git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=5)
        return commit.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return None, None
