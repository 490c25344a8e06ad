"""Rendering slot values into SQL, and running it on Polars (the engine) or DuckDB (the reference)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.sql.schema import DIALECT, parse


def render(sql: str | exp.Expression, slots: Mapping[str, Any]) -> exp.Expression:
    """Replace `:slot` placeholders by sqlglot literals: quotes and keywords in values stay data."""
    tree = parse(sql) if isinstance(sql, str) else sql.copy()
    return exp.replace_placeholders(tree, **dict(slots))


def run_polars(ehr: EHR, tree: exp.Expression) -> pl.DataFrame:
    return ehr.sql(tree.sql(dialect=DIALECT))


class DuckDBReference:
    """DuckDB views over the same Parquet files: an independent engine to check Polars against."""

    def __init__(self, ehr_root: Path | str):
        import duckdb

        self.con = duckdb.connect()
        self.con.execute("SET TimeZone = 'UTC'")
        for path in sorted(Path(ehr_root).glob("*.parquet")):
            self.con.execute(f"CREATE VIEW {path.stem} AS SELECT * FROM read_parquet('{path.as_posix()}')")

    def run(self, sql: str) -> pl.DataFrame:
        return pl.from_arrow(self.con.sql(sql).to_arrow_table())  # type: ignore[return-value]

    def close(self) -> None:
        self.con.close()
