"""Reading a task's evidence rows back from the EHR, for operators that patch or inspect them."""

from __future__ import annotations

from datetime import date
from typing import Any

import polars as pl

from pipeline.ehr.access import EHR
from pipeline.ehr.schema import TABLES
from pipeline.noise.types import Task


def evidence_rows(ehr: EHR, task: Task, rows: list[dict[str, Any]] | None = None) -> pl.DataFrame:
    """The full rows of the evidence table that the task's evidence keys (or `rows`) address, sorted
    by key; a patient task's rows are looked up within its patients only (skips most row groups)."""
    table = task.evidence["table"]
    keys = list(task.evidence["keys"])
    wanted = task.evidence["rows"] if rows is None else rows
    schema = TABLES[table].polars_schema
    key_frame = pl.DataFrame([{k: r[k] for k in keys} for r in wanted], schema={k: schema[k] for k in keys},
                             orient="row").unique()
    frame = ehr[table]
    if task.scope == "patient" and task.subject_ids and "subject_id" in schema:
        frame = frame.filter(pl.col("subject_id").is_in(list(task.subject_ids)))
    return frame.join(key_frame.lazy(), on=keys, how="semi").collect().sort(keys)


def plain(row: dict[str, Any]) -> dict[str, Any]:
    """A row for `params` (plain JSON): dates and datetimes as ISO 8601 text."""
    return {k: v.isoformat() if isinstance(v, date) else v for k, v in row.items()}
