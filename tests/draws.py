"""Property tests as a default/heavy twin: a few hypothesis draws in the default run (which stays under about 5
minutes on 2 cores), many more in its `ci_heavy` twin, which CI runs right after it (`nox -s heavy`).

    @twin(default=3, heavy=40)
    def test_x(tmp_path_factory, draws):
        check_drawn(draws, lambda ops: replay(tmp_path_factory, ops), ops=WRITES)

collects `test_x[3-draws]` (default run) and `test_x[40-draws]` (marked ci_heavy): one body, so the two can never
drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.strategies import SearchStrategy


def twin(default: int, heavy: int) -> pytest.MarkDecorator:
    """Parametrize a test by `draws`: `default` examples in the default run, `heavy` in its ci_heavy twin."""
    if not 0 < default <= heavy:
        raise ValueError(f"the heavy twin draws at least as many as the default run: default={default}, heavy={heavy}")
    return pytest.mark.parametrize("draws", [pytest.param(default, id=f"{default}-draws"),
                                             pytest.param(heavy, id=f"{heavy}-draws", marks=pytest.mark.ci_heavy)])


def check_drawn(draws: int, check: Callable[..., Any], *, suppress: tuple[HealthCheck, ...] = (),
                **strategies: SearchStrategy[Any]) -> None:
    """Run `check` on `draws` examples of `strategies` (keyword arguments), with no deadline: these examples take
    up to seconds each, and their time depends on the machine's load, not on the code under test."""
    settings(max_examples=draws, deadline=None, suppress_health_check=suppress)(given(**strategies)(check))()
