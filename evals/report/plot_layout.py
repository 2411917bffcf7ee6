"""A fixed layout for the report's plots: each figure is sized from its own labels, measured once as strings.

Why not matplotlib's constrained layout: it measures every artist of a figure (every tick label, every cell's
text) on a dry draw before the real one, and that was most of the time a run spent writing its plots (issue 35).
The plots know which texts sit in their margins (tick labels, titles, colorbar labels), so they measure those
strings alone, place their axes in inches, and the figure is drawn once.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

DPI = 110
PAD = 0.1  # inches kept clear at every edge of a figure
TICK = 0.1  # a tick (3.5 pt) and its label's pad (3.5 pt), in inches
LABEL_PAD = 0.06  # an axis label's pad (4 pt)
TITLE_PAD = 0.09  # an axes title's pad (6 pt)
LINE = 1.2  # matplotlib's line spacing, over the font size
PNG_COMPRESSION = 3  # zlib level: two thirds of level 6's encoding time, files about 6% larger


@functools.cache
def _renderer() -> Any:
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(8, 8, DPI)  # the figures' dpi: hinting rounds glyph advances to its pixels


@functools.lru_cache(maxsize=8192)
def _line_width(line: str, size: float) -> float:
    from matplotlib.font_manager import FontProperties

    width, _, _ = _renderer().get_text_width_height_descent(line, FontProperties(size=size), ismath=False)
    return float(width) / DPI


def text_size(text: str, size: float) -> tuple[float, float]:
    """Width and height in inches of `text` (lines stacked) at `size` points, as Agg draws it."""
    lines = text.split("\n")
    return max(_line_width(line, size) for line in lines), line_height(size) * len(lines)


def line_height(size: float, lines: int = 1) -> float:
    return lines * size * LINE / 72


def rotated_size(text: str, size: float, degrees: float) -> tuple[float, float]:
    """The width and height in inches of the box around `text` turned by `degrees`."""
    width, height = text_size(text, size)
    turn = math.radians(degrees)
    return (width * math.cos(turn) + height * math.sin(turn), width * math.sin(turn) + height * math.cos(turn))


def wrap(text: str, width: float, size: float) -> str:
    """`text` broken into lines no wider than `width` inches: after a space, comma, colon or slash where it can,
    inside a long name where it must, so a long provider or run name stays inside its figure."""
    if text_size(text, size)[0] <= width:
        return text
    out: list[str] = []
    line = ""
    for piece in re.split(r"(?<=[ ,:;/·])", text):
        while piece:
            if text_size(line + piece, size)[0] <= width:
                line, piece = line + piece, ""
            elif line:
                out.append(line.rstrip())
                line = ""
            else:  # a piece wider than a line alone: as many of its characters as fit
                fit = next((n for n in range(len(piece) - 1, 0, -1) if text_size(piece[:n], size)[0] <= width), 1)
                out.append(piece[:fit])
                piece = piece[fit:]
    return "\n".join([*out, line.rstrip()] if line.strip() else out)


def lines(text: str) -> int:
    return text.count("\n") + 1


class Sheet:
    """A Figure of a known size whose pieces are placed in inches from its top-left corner; drawn once by Agg."""

    def __init__(self, width: float, height: float) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.width, self.height = width, height
        self.figure = Figure(figsize=(width, height), dpi=DPI, layout=None)
        FigureCanvasAgg(self.figure)

    def point(self, x: float, top: float) -> tuple[float, float]:
        """Figure coordinates of the point `x` inches from the left and `top` inches from the top."""
        return x / self.width, 1 - top / self.height

    def axes(self, left: float, top: float, width: float, height: float, **kwargs: Any) -> Any:
        x, y = self.point(left, top + height)
        return self.figure.add_axes((x, y, width / self.width, height / self.height), **kwargs)

    def text(self, x: float, top: float, text: str, **kwargs: Any) -> Any:
        return self.figure.text(*self.point(x, top), text, va="top", **kwargs)


__all__ = ["DPI", "LABEL_PAD", "PAD", "PNG_COMPRESSION", "Sheet", "TICK", "TITLE_PAD", "line_height", "lines",
           "rotated_size", "text_size", "wrap"]
