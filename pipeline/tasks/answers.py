"""Turn a gold SQL result into a JSON-ready answer, or say why it cannot be one."""

from __future__ import annotations

import math
from datetime import date, datetime
from typing import Any

import polars as pl

from pipeline.tasks.template import AnswerSpec


class Rejection(ValueError):
    """A sampled task that is not a usable question; `reason` is a short stable code."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def normalise(value: Any, kind: str) -> Any:
    """One scalar in its answer type: Decimal -> float, datetimes -> ISO 8601, numpy -> Python."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if kind == "number":
        # Decimal too (Polars reads 1.0/3 as Decimal(38,7)). Snapping to 12 significant digits removes
        # the last-bit noise of multithreaded float sums, so a mean is the same number on every run.
        return float(f"{float(value):.12g}")
    if kind == "integer":
        as_float = float(value)
        if not as_float.is_integer():
            raise Rejection("type_mismatch", f"integer answer expected, got {value!r}")
        return int(as_float)
    if kind == "boolean":
        if isinstance(value, str):
            return value.strip().lower() in ("true", "t", "yes", "1")
        return bool(value)
    if kind == "datetime":
        if isinstance(value, datetime):
            return value.isoformat(sep=" ")
        if isinstance(value, date):
            return value.isoformat()
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def extract_answer(result: pl.DataFrame, spec: AnswerSpec) -> tuple[Any, str | None]:
    """The answer and its unit; raises Rejection for empty, NULL, tied or wrong-sized results."""
    if result.height == 0:
        raise Rejection("empty", "gold SQL returned no rows")
    values = result[spec.column].to_list()
    unit = spec.unit
    if spec.unit_column is not None:
        units = {u for u in result[spec.unit_column].to_list() if u is not None}
        if len(units) > 1:
            raise Rejection("mixed_units", f"units {sorted(units)}")
        unit = units.pop() if units else spec.unit
    if spec.type == "list":
        items = [normalise(v, spec.item_type) for v in values]
        if any(v is None for v in items):
            raise Rejection("null", "a list item is NULL")
        if not spec.ordered:
            items = sorted(items, key=lambda v: (str(type(v)), v))
        if spec.size is not None and len(items) != spec.size:
            raise Rejection("degenerate", f"expected {spec.size} items, got {len(items)} (a tie at the cut-off)")
        if len(set(map(str, items))) != len(items):
            raise Rejection("degenerate", "duplicate list items")
        return items, unit
    distinct = {repr(normalise(v, spec.type)) for v in values}
    if len(distinct) > 1:
        raise Rejection("degenerate", f"{len(distinct)} different values qualify (a tie)")
    answer = normalise(values[0], spec.type)
    if answer is None:
        raise Rejection("null", "gold SQL returned NULL")
    if spec.type == "number":
        answer = round(answer, 6)
    return answer, unit


def same_answer(a: Any, b: Any, spec: AnswerSpec) -> bool:
    """Engine-to-engine agreement of two normalised answers (tolerance for numbers, bags for lists)."""
    if spec.type == "list":
        if len(a) != len(b):
            return False
        pairs = zip(a, b, strict=True) if spec.ordered else zip(sorted(map(str, a)), sorted(map(str, b)), strict=True)
        item = AnswerSpec(type=spec.item_type, tolerance=spec.tolerance)
        return all(same_answer(x, y, item) for x, y in pairs)
    if spec.type == "number" or (spec.type == "integer" and spec.tolerance):
        tol = max(spec.tolerance, 1e-6 * max(abs(float(a)), abs(float(b)), 1.0))
        return abs(float(a) - float(b)) <= tol
    return a == b
