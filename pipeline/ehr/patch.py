"""Patches: declarative row edits (delete / update / insert, addressed by key) overlaid lazily on an EHR.

A noisy item differs from its clean twin only by a patch. Applying one never copies or writes a
table: the touched tables get a LazyFrame that filters, rewrites or extends the base scan, and
every other table keeps the very same frame object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pipeline import jsonvalues
from pipeline.ehr.schema import TABLES

OPS = ("delete", "update", "insert")


class PatchError(ValueError):
    """A patch that names an unknown table or column or is otherwise malformed."""


@dataclass(frozen=True)
class RowEdit:
    """One edit: `where` selects rows by column equality (delete/update); `values` sets or inserts."""

    op: str
    table: str
    where: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise PatchError(f"edit op {self.op!r} is not one of {OPS}")
        if self.table not in TABLES:
            raise PatchError(f"edit on unknown table {self.table!r}")
        columns = TABLES[self.table].columns
        unknown = [c for c in (*self.where, *self.values) if c not in columns]
        if unknown:
            raise PatchError(f"edit on {self.table!r} names unknown column(s) {unknown}")
        if self.op in ("delete", "update") and not self.where:
            raise PatchError(f"{self.op} on {self.table!r} needs a non-empty `where` (refusing to touch every row)")
        if self.op in ("update", "insert") and not self.values:
            raise PatchError(f"{self.op} on {self.table!r} needs `values`")

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "table": self.table, "where": dict(self.where), "values": dict(self.values)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RowEdit:
        return cls(op=d["op"], table=d["table"], where=dict(d.get("where", {})), values=dict(d.get("values", {})))


@dataclass(frozen=True)
class Patch:
    """An ordered set of row edits; applied table by table in order (deletes, then updates, then inserts)."""

    edits: tuple[RowEdit, ...] = ()

    @property
    def tables(self) -> frozenset[str]:
        return frozenset(e.table for e in self.edits)

    def to_json(self) -> str:
        return jsonvalues.dumps([e.to_dict() for e in self.edits])

    @classmethod
    def from_json(cls, text: str) -> Patch:
        return cls(tuple(RowEdit.from_dict(d) for d in jsonvalues.loads(text)))

    def apply(self, frames: dict[str, pl.LazyFrame]) -> dict[str, pl.LazyFrame]:
        """New frame mapping; only touched tables get new (lazy) frames."""
        out = dict(frames)
        for table in sorted(self.tables):
            if table not in frames:
                raise PatchError(f"patch edits table {table!r}, which this EHR does not have")
            out[table] = overlay(frames[table], table, [e for e in self.edits if e.table == table])
        return out


def _match(where: dict[str, Any], schema: pl.Schema) -> pl.Expr:
    return pl.all_horizontal([pl.col(c) == pl.lit(v, dtype=schema[c]) for c, v in where.items()])


def overlay(frame: pl.LazyFrame, table: str, edits: list[RowEdit]) -> pl.LazyFrame:
    """The table with `edits` applied, still lazy."""
    schema = pl.Schema(TABLES[table].columns)
    deletes = [e for e in edits if e.op == "delete"]
    if deletes:
        frame = frame.filter(~pl.any_horizontal([_match(e.where, schema) for e in deletes]))
    for edit in (e for e in edits if e.op == "update"):
        hit = _match(edit.where, schema)
        frame = frame.with_columns([pl.when(hit).then(pl.lit(v, dtype=schema[c])).otherwise(pl.col(c)).alias(c)
                                    for c, v in edit.values.items()])
    inserts = [e.values for e in edits if e.op == "insert"]
    if inserts:
        rows = pl.DataFrame([{c: r.get(c) for c in schema} for r in inserts], schema=schema, orient="row")
        frame = pl.concat([frame, rows.lazy()], how="vertical")
    return frame
