"""No subcommand overwrites a file it did not create, unless told to with `--force`.

Why: `matcher sample --out FILE` once replaced a 3,242-line labelled pairs file with 5 unlabelled lines. Every
output path a user names (`--out`, `--junit`, `--summary`) is checked before any work: a file already there is
refused (exit 2) unless `--force`; a directory where a file goes, or a file where a directory goes, is refused
even with `--force` (nothing is ever deleted to make room). Files a command derives inside a run directory by
default (gate.md, compare.md, plots/) are the run's own and are rewritten from its records.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


class OverwriteRefused(ValueError):
    """An output path that would overwrite a file, or that is the wrong kind of thing (exit 2)."""


def check_file_targets(paths: Iterable[Path | None], flag: str, force: bool) -> None:
    """Each path is a file this command will write: refused when it is a directory, or exists and not `force`."""
    for path in paths:
        if path is None:
            continue
        path = Path(path)
        if path.is_dir():
            raise OverwriteRefused(f"{flag} {path}: is a directory; give a file path")
        if (path.exists() or path.is_symlink()) and not force:
            raise OverwriteRefused(f"{flag} {path}: the file already exists; pass --force to overwrite it, or give "
                                   "another path")


def check_dir_targets(directory: Path | None, names: Iterable[str], flag: str, force: bool) -> None:
    """`directory` will receive the files `names`: refused when it is a file, or when one of them exists and
    not `force` (other files in it are left alone)."""
    if directory is None:
        return
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise OverwriteRefused(f"{flag} {directory}: cannot create the directory: a file of that name is in the way")
    existing = [name for name in names if (directory / name).exists() or (directory / name).is_symlink()]
    if existing and not force:
        raise OverwriteRefused(f"{flag} {directory}: already holds {', '.join(existing)}; pass --force to overwrite, "
                               "or give another directory")
    for name in existing:
        if (directory / name).is_dir():
            raise OverwriteRefused(f"{flag} {directory / name}: is a directory; cannot write a file there")


__all__ = ["OverwriteRefused", "check_dir_targets", "check_file_targets"]
