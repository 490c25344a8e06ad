"""The guard in front of `execute_sql`: only one read-only query over the EHR's tables gets through.

Polars SQL can read files (`read_csv('/etc/passwd')`, `read_parquet(...)`) and run statements
(`CREATE TABLE`, `SHOW TABLES` ...), so agent SQL is parsed with sqlglot (the canonical DuckDB
dialect) and refused unless it is exactly one SELECT-like query whose every source is a known
table, a CTE of the query, a subquery, VALUES or UNNEST. A refusal is a `SQLRefused` whose message
is written for the agent: it says what is not allowed and what to do instead.

The guard is the first line of defence; the executor also checks the scans of the Polars plan
(`pipeline.gym.sqlexec`), so a difference between the two SQL parsers cannot open a file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterator
from contextlib import contextmanager

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from pipeline.sql.schema import DIALECT

MAX_QUERY_CHARS = 20_000  # longer text is refused before parsing (a pathological parse is not a timeout)

_QUERY_ROOTS = (exp.Select, exp.Union, exp.Intersect, exp.Except)

# Statements and clauses that write, configure or reach outside the EHR, wherever they occur.
_FORBIDDEN_NODE_NAMES = (
    "Insert", "Update", "Delete", "Merge", "Create", "Drop", "Alter", "TruncateTable", "Command", "Pragma",
    "Set", "Use", "Copy", "Attach", "Detach", "Transaction", "Commit", "Rollback", "Install", "LoadData",
    "Describe", "Show", "Summarize", "Into", "Cache", "Uncache", "Refresh", "Grant", "Revoke", "Analyze",
    "Comment", "Export", "Kill", "UserDefinedFunction",
)
_FORBIDDEN_NODES: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, n) for n in _FORBIDDEN_NODE_NAMES if isinstance(getattr(exp, n, None), type))

# Functions that read files or the environment, run commands or nested SQL (DuckDB and Polars names).
_DENIED_FUNCTIONS = frozenset({
    "glob", "getenv", "current_setting", "system", "shell", "query", "query_table", "load_extension",
    "sniff_csv", "range", "generate_series", "read_csv", "read_csv_auto", "read_parquet", "read_json",
    "read_json_auto", "read_ndjson", "read_ndjson_auto", "read_json_objects", "read_text", "read_blob",
    "read_ipc", "read_xlsx", "parquet_scan", "parquet_metadata", "parquet_schema", "parquet_file_metadata",
    "parquet_kv_metadata", "iceberg_scan", "delta_scan", "sqlite_scan", "postgres_scan", "mysql_scan",
    "which_secret", "pg_read_file", "pg_ls_dir", "lo_import", "load_file",
})
_DENIED_PREFIXES = ("read_", "scan_", "parquet_", "duckdb_", "pragma_", "iceberg_", "delta_", "sqlite_",
                    "postgres_", "mysql_", "http", "s3_", "file_", "pg_")
_DENIED_SUFFIXES = ("_scan",)

_PATH_LIKE = re.compile(r"[/\\*?:~]|\.[a-z0-9]{2,8}$", re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class SQLRefused(ValueError):
    """Agent SQL that the environment will not run; `reason` is the agent-readable explanation."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@contextmanager
def _quiet_sqlglot() -> Iterator[None]:
    """sqlglot logs a warning when it falls back to a Command (`LOAD x`, `EXPLAIN ...`): we refuse those anyway."""
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _statement_kind(tree: exp.Expression) -> str:
    if isinstance(tree, exp.Command):
        return str(tree.this).upper()
    if isinstance(tree, (*_FORBIDDEN_NODES, exp.Values)):
        return tree.key.upper()
    return "not a query"


def _function_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower()


def _denied_function(name: str) -> bool:
    return name in _DENIED_FUNCTIONS or name.startswith(_DENIED_PREFIXES) or name.endswith(_DENIED_SUFFIXES)


def _parse_error_text(err: Exception) -> str:
    """sqlglot's first error, short and without ANSI codes: `Invalid expression ... at line 1, column 7 near '1'`."""
    details = getattr(err, "errors", None)
    if isinstance(err, ParseError) and details:
        first = details[0]
        near = _ANSI.sub("", f"{first.get('highlight') or ''}").strip()
        where = f" at line {first.get('line')}, column {first.get('col')}"
        return f"{first.get('description') or 'syntax error'}{where}" + (f" near {near[:40]!r}" if near else "")
    text = _ANSI.sub("", str(err)).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


def _known_list(tables: Collection[str], limit: int = 8) -> str:
    names = sorted(tables)
    more = f", ... ({len(names)} tables)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def guard_sql(query: str, tables: Collection[str]) -> exp.Expression:
    """The parsed tree of `query` if it is one read-only query over `tables` (or its CTEs), else `SQLRefused`."""
    if not isinstance(query, str) or not query.strip():
        raise SQLRefused("empty query: send one SELECT statement")
    if len(query) > MAX_QUERY_CHARS:
        raise SQLRefused(f"query is too long ({len(query):,} characters; the limit is {MAX_QUERY_CHARS:,})")
    try:
        with _quiet_sqlglot():
            statements = [s for s in sqlglot.parse(query, read=DIALECT) if s is not None]
    except Exception as err:  # ParseError, TokenError, RecursionError on absurd nesting ...
        raise SQLRefused(f"the query does not parse: {_parse_error_text(err)}") from None
    if not statements:
        raise SQLRefused("empty query: send one SELECT statement")
    if len(statements) > 1:
        raise SQLRefused(f"only one statement per call is allowed, found {len(statements)} separated by ';'")
    tree = statements[0]
    root = tree.this if isinstance(tree, exp.Subquery) else tree
    if not isinstance(root, _QUERY_ROOTS):
        raise SQLRefused(f"only read-only queries are allowed (SELECT / WITH ... SELECT / UNION / INTERSECT / "
                         f"EXCEPT); this statement is {_statement_kind(tree)}")

    known = {t.lower() for t in tables}
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for node in tree.walk():
        if isinstance(node, _FORBIDDEN_NODES):
            raise SQLRefused(f"{node.key.upper()} is not allowed: only read-only SELECT queries can run")
        if isinstance(node, exp.Func):
            name = _function_name(node)
            if _denied_function(name):
                raise SQLRefused(f"function {name}() is not allowed: queries can read only the EHR tables, "
                                 "not files, settings or the environment")
        if isinstance(node, exp.Lateral) and not isinstance(node.this, exp.Subquery):
            raise SQLRefused("LATERAL is allowed only with a subquery, not with a table function")
        if isinstance(node, exp.Table):
            _check_table(node, known, ctes, tables)
    return tree


def _check_table(node: exp.Table, known: set[str], ctes: set[str], tables: Collection[str]) -> None:
    """A FROM/JOIN source must name a known table or a CTE: no functions, files or other databases."""
    if not isinstance(node.this, exp.Identifier):
        what = node.this.sql(dialect=DIALECT)
        what = what if len(what) <= 60 else what[:57] + "..."
        raise SQLRefused(f"table functions are not allowed in FROM/JOIN ({what}): read the EHR tables by name "
                         f"(e.g. {_known_list(tables, 3)})")
    name = node.name
    if node.args.get("db") or node.args.get("catalog"):
        raise SQLRefused(f"qualified table names like {node.sql(dialect=DIALECT)!r} are not allowed: "
                         "use the bare table name")
    if name.lower() in ctes or name.lower() in known:
        return
    if _PATH_LIKE.search(name):
        raise SQLRefused(f"reading files is not allowed ({name!r}): query the EHR tables by name "
                         f"(e.g. {_known_list(tables, 3)})")
    raise SQLRefused(f"unknown table {name!r}; known tables: {_known_list(tables)}")
