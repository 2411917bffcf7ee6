"""Labelled fact pairs (`datasets/matcher/pairs.jsonl`): loading, checking and the fixed split.

One JSON object a line: `{"id", "lang": "en"|"zh", "category", "gold": {"text", "subject"},
"pred": {"text", "subject"}, "same": true|false}`. A bad line is reported as `file:line: field:
problem`. The split is a fixed hash of the id, so no parameter is ever fitted on `heldout`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from evals.core import json_limits

BUNDLED_PAIRS = Path(__file__).resolve().parents[2] / "datasets" / "matcher" / "pairs.jsonl"
SPLITS = ("heldout", "calibration", "all")


class PairsError(ValueError):
    """A pairs file that cannot be used; the message is `file:line: field: problem` lines."""


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Text = Annotated[str, AfterValidator(_non_blank)]


def _not_reserved(value: str) -> str:
    """`all` and `group:…` name the totals and label groups of `matcher eval`: a category so named would
    replace them."""
    if value.strip() == "all" or value.strip().startswith("group:"):
        raise ValueError(f"{value!r} is reserved for the totals of matcher eval; name the category otherwise")
    return value


Category = Annotated[str, AfterValidator(_non_blank), AfterValidator(_not_reserved)]


class PairSide(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: Text  # the fact sentence
    subject: Text  # "user", "assistant" or a person's name


class Pair(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: Text  # unique in the file; its hash decides the split
    lang: Literal["en", "zh"]
    category: Category  # what the pair exercises (paraphrase_synonym, modality, …)
    gold: PairSide  # the gold fact
    pred: PairSide  # a predicted memory
    same: bool  # does the prediction state the gold fact about the same subject?

    @property
    def split(self) -> str:
        return split_of(self.id)


def split_of(pair_id: str) -> str:
    """`heldout` for about 40% of ids, `calibration` for the rest; a fixed function of the id."""
    return "heldout" if int(hashlib.sha256(pair_id.encode()).hexdigest(), 16) % 10 < 4 else "calibration"


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors():
        field = ".".join(str(p) for p in error["loc"]) or "(line)"
        out.append(f"{field}: {error['msg']}")
    return out


def load_pairs(path: Path | str = BUNDLED_PAIRS, split: str = "all") -> list[Pair]:
    """Every pair of the file (or of one split); all bad lines are reported at once."""
    path = Path(path)
    if split not in SPLITS:
        raise PairsError(f"--split: must be one of {', '.join(SPLITS)}, got {split!r}")
    try:
        lines = path.read_text(encoding="utf-8-sig").split("\n")  # not splitlines(): U+2028 is text, not a line end
    except (OSError, UnicodeDecodeError) as exc:
        raise PairsError(f"{path}: cannot read: {exc}") from exc
    pairs: list[Pair] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json_limits.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{lineno}: (line): not JSON: {exc.msg}")
            continue
        except json_limits.TooDeep as exc:
            problems.append(f"{path}:{lineno}: {exc}")
            continue
        if not isinstance(data, dict):
            problems.append(f"{path}:{lineno}: (line): a JSON object is required")
            continue
        if "same" in data and data["same"] is None:  # a `matcher sample` line nobody has labelled yet
            problems.append(f"{path}:{lineno}: same: not labelled yet (set it to true or false)")
            continue
        try:
            pair = Pair.model_validate(data)
        except ValidationError as exc:
            problems += [f"{path}:{lineno}: {p}" for p in _problems(exc)]
            continue
        if pair.id in seen:
            problems.append(f"{path}:{lineno}: id: {pair.id!r} is also on line {seen[pair.id]}")
            continue
        seen[pair.id] = lineno
        pairs.append(pair)
    if problems:
        raise PairsError("\n".join(problems))
    if not pairs:
        raise PairsError(f"{path}: no pairs")
    return [p for p in pairs if split == "all" or p.split == split]


def pairs_hash(pairs: list[Pair]) -> str:
    blob = json.dumps([p.model_dump() for p in pairs], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


__all__ = ["BUNDLED_PAIRS", "SPLITS", "Pair", "PairSide", "PairsError", "load_pairs", "pairs_hash", "split_of"]
