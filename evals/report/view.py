"""`hymem-eval view`: one self-contained HTML page of a run, or of runs side by side, read from the record alone.

Why a static file: it opens from `file://` with no server and no network (scripts, styles and plots inline),
so it can be attached to a pull request or a bug. Why per-case JSON rendered on click: a sweep or a LoCoMo
run has thousands of writes; the page lays out the headline at once and parses a case only when opened.
The layout is a Jinja2 template (`evals/report/templates/view.html.j2`); what it shows is `evals.report.view_data`.
"""

from __future__ import annotations

import base64
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from evals.core.redact import redact, redact_text
from evals.record import atomic_write
from evals.report.view_data import LoadedRun, PageData, load, page_data, plot_images

REPORT_FILE = "report.html"
TEMPLATES = Path(__file__).parent / "templates"


def _inline_markdown(text: str) -> Markup:
    """The summary's `**bold**` and `` `code` `` (the matcher card is written for markdown) as HTML, escaped."""
    html = str(escape(text))
    html = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html)
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", html))


def _environment() -> Any:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    # JSON inside <script type="application/json">: tojson escapes < > & ' so no text can close the tag; NaN is
    # refused (JSON.parse cannot read it: evals.report.view_data.plain turns it into null first).
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False}
    env.filters["md"] = _inline_markdown
    return env


def render(runs: list[LoadedRun]) -> str:
    """The page of one run, or of several side by side (the first is the reference), as HTML text.

    Every string from the runs is redacted as a value, before it is encoded: redacting the finished page as text
    (as other files are) could cut a JSON escape (`password: x\\"` loses its backslash) and break a case's data.
    """
    data = redacted(page_data(runs))
    plots = [{"run": header["label"], "images": [{"name": name, "src": "data:image/png;base64,"
                                                  + base64.b64encode(png).decode("ascii")}
                                                 for name, png in plot_images(loaded)]}
             for header, loaded in zip(data.runs, runs, strict=True)]
    summary = {"arms": [a.label for a in data.arms], "cases": data.cases,
               "kinds": list(data.anomaly_kinds), "compare": len(data.arms) > 1}
    env = _environment()
    return env.get_template("view.html.j2").render(
        data=data, plots=plots, summary=summary,
        css=(TEMPLATES / "view.css").read_text(encoding="utf-8"),
        js=Markup((TEMPLATES / "view.js").read_text(encoding="utf-8")))


def redacted(data: PageData) -> PageData:
    """The page's data with every string redacted (`evals.core.redact`): no key reaches the page."""
    return replace(data, runs=redact(data.runs), cases=redact(data.cases), units=redact(data.units),
                   comparison=redact(data.comparison), anomaly_kinds=redact(data.anomaly_kinds),
                   notes=redact(data.notes), arms=[replace(a, label=redact_text(a.label)) for a in data.arms])


def write_view(run_dirs: list[Path], out: Path | None = None) -> Path:
    """Write the page of `run_dirs` to `out` (default: the first run's report.html), whole-or-not; return its
    path. RunInputError when a run cannot be read."""
    runs = [load(Path(p)) for p in run_dirs]
    out = Path(out) if out is not None else Path(run_dirs[0]) / REPORT_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    html = render(runs)
    atomic_write(out, lambda tmp: tmp.write_text(html, encoding="utf-8"))
    return out


__all__ = ["REPORT_FILE", "render", "write_view"]
