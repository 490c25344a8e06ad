"""The EHR schema as sqlglot sees it, and validation of a query against it."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl
import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.qualify import qualify

from pipeline.ehr.schema import TABLES

DIALECT = "duckdb"  # the canonical dialect of gold SQL: runs in Polars, checked against DuckDB

_SQL_TYPES = {pl.Int64(): "BIGINT", pl.Float64(): "DOUBLE", pl.String(): "VARCHAR",
              pl.Datetime("us"): "TIMESTAMP", pl.Date(): "DATE"}


class SQLValidationError(ValueError):
    """A query that does not parse or names a table or column the EHR does not have."""


def sqlglot_schema(tables: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    names = TABLES if tables is None else tables
    return {t: {c: _SQL_TYPES[d] for c, d in TABLES[t].columns.items()} for t in names}


def parse(sql: str) -> exp.Expression:
    """Parse exactly one statement in the canonical dialect."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except ParseError as err:
        raise SQLValidationError(f"does not parse: {err}") from err
    if len(statements) != 1:
        raise SQLValidationError(f"expected exactly one statement, found {len(statements)}")
    return statements[0]


def referenced_tables(tree: exp.Expression) -> set[str]:
    """Base tables a query reads (CTE names excluded)."""
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return {t.name for t in tree.find_all(exp.Table) if t.name and t.name not in ctes}


def validate(tree: exp.Expression) -> exp.Expression:
    """Check tables and columns against the EHR schema; return the qualified tree."""
    unknown = sorted(referenced_tables(tree) - set(TABLES))
    if unknown:
        raise SQLValidationError(f"unknown table(s) {unknown}; known tables: {', '.join(sorted(TABLES))}")
    try:
        return qualify(tree.copy(), schema=sqlglot_schema(), dialect=DIALECT, validate_qualify_columns=True,
                       quote_identifiers=False)
    except OptimizeError as err:
        raise SQLValidationError(f"unknown or ambiguous column: {err}") from err
