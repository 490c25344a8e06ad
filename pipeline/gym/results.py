"""What a tool call returns: readable text for the model, structured rows for scripted agents.

The text is what goes into the chat transcript (a truncated table with the row count, or an
`ERROR: ...` line); `columns`/`rows` carry the same result, capped, for agents that read values
programmatically. An observation never exceeds `max_chars` characters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import polars as pl

ERROR_PREFIX = "ERROR"  # the verifier's evidence rule treats tool messages starting with it as failed calls


@dataclass
class ToolResult:
    ok: bool
    content: str  # what the model sees
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)  # JSON-ready, at most the row cap
    row_count: int | None = None  # rows in the full result (None: unknown, e.g. above the cap)
    truncated: bool = False
    seconds: float = 0.0

    @classmethod
    def error(cls, message: str, seconds: float = 0.0) -> ToolResult:
        return cls(ok=False, content=f"{ERROR_PREFIX}: {message}", seconds=seconds)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "content": self.content, "columns": self.columns, "rows": self.rows,
                "row_count": self.row_count, "truncated": self.truncated, "seconds": self.seconds}


def plain_value(value: Any) -> Any:
    """A cell as JSON-ready Python: datetimes as ISO text, Decimal as float, NaN as None."""
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return str(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list | tuple):
        return [plain_value(v) for v in value]
    return value


def render_table(frame: pl.DataFrame, row_count: int | None, show_rows: int = 20, max_chars: int = 4000) -> str:
    """`frame` as a pipe table of its first `show_rows` rows, with the row count and a truncation note."""
    head = frame.head(show_rows)
    cols = head.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in head.iter_rows():
        lines.append("| " + " | ".join("NULL" if v is None else str(plain_value(v)) for v in row) + " |")
    total = f"{row_count:,} rows" if row_count is not None else f"more than {frame.height:,} rows"
    shown = f" (showing the first {head.height})" if head.height < (row_count or frame.height + 1) else ""
    text = "\n".join(lines)
    if len(text) > max_chars:
        text = text[:max_chars] + "\n… (output truncated)"
    return f"{total}{shown}\n{text}"
