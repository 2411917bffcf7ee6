"""The house's rules that import-linter cannot see (ARCHITECTURE.md): an import of the project's own modules inside a
function is for start-up time only, and says so.

import-linter (`nox -s lint`, contracts in pyproject.toml) already counts in-function imports as arrows, so none can
dodge a layer or hide a circle; this test keeps the remaining ones honest: each carries `# lazy: <why>` on its line
(or the line above), or its module declares once, near the top, `# lazy imports: <why>` (the command line, whose
every subcommand loads only what it runs; the benchmarks, each loading only what it measures)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("evals", "hymem")


def _lazy_project_imports(path: Path) -> list[int]:
    """Line numbers of imports of the project's modules that sit inside a function (TYPE_CHECKING blocks aside)."""
    found: list[int] = []

    class Visitor(ast.NodeVisitor):
        depth = 0

        def visit_FunctionDef(self, node: ast.AST) -> None:
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_If(self, node: ast.If) -> None:
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            if self.depth and any(a.name.split(".")[0] in PROJECT for a in node.names):
                found.append(node.lineno)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if self.depth and node.level == 0 and (node.module or "").split(".")[0] in PROJECT:
                found.append(node.lineno)

    Visitor().visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _unexplained(path: Path, root: Path = ROOT) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if any(line.startswith("# lazy imports: ") for line in lines[:60]):
        return []
    return [f"{path.relative_to(root)}:{n}: {lines[n - 1].strip()}" for n in _lazy_project_imports(path)
            if "# lazy: " not in lines[n - 1] and "# lazy: " not in lines[n - 2]]


@pytest.mark.parametrize("package", PROJECT)
def test_every_in_function_import_of_the_project_says_why(package):
    problems = [p for path in sorted((ROOT / package).rglob("*.py")) for p in _unexplained(path)]
    assert problems == [], "in-function imports without `# lazy: <why>`:\n" + "\n".join(problems)


def test_the_rule_finds_an_unexplained_lazy_import_and_accepts_a_reason(tmp_path):
    """The check itself can fail: one unexplained, one explained in-function import, one at module level."""
    probe = tmp_path / "evals" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("from evals.core import files\n\n\ndef a():\n    from evals.core import stats\n\n\n"
                     "def b():\n    from evals.core import redact  # lazy: the probe's reason\n", encoding="utf-8")
    assert _lazy_project_imports(probe) == [5, 9]
    assert _unexplained(probe, tmp_path) == ["evals/probe.py:5: from evals.core import stats"]
    probe.write_text("# lazy imports: every subcommand loads only what it runs\n" + probe.read_text(), encoding="utf-8")
    assert _unexplained(probe, tmp_path) == []
