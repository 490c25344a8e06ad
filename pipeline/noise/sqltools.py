"""sqlglot rewrites shared by operators: relax a filter, guard a query, de-duplicate a source table."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from pipeline.sql.schema import parse


def _as_tree(sql: str | exp.Expression) -> exp.Expression:
    return parse(sql) if isinstance(sql, str) else sql.copy()


def relax(sql: str | exp.Expression, columns: set[str]) -> exp.Expression:
    """Drop equality filters `<column> = <literal>` on the given columns (what a careless agent does
    when its exact query finds nothing: widen to the patient, the item, any time)."""
    tree = _as_tree(sql)
    for eq in list(tree.find_all(exp.EQ)):
        sides = (eq.this, eq.expression)
        if any(isinstance(s, exp.Column) and s.name in columns for s in sides) and any(
                isinstance(s, exp.Literal | exp.Cast) for s in sides):
            eq.replace(exp.true())
    return drop_true_conjuncts(tree)


def drop_true_conjuncts(tree: exp.Expression) -> exp.Expression:
    """`a AND TRUE` -> `a`, so a relaxed query reads like one a person would write."""
    def simplify(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.And):
            left, right = node.this, node.expression
            if left == exp.true():
                return right
            if right == exp.true():
                return left
        return node

    return tree.transform(simplify)


def guard(sql: str | exp.Expression, condition: str) -> exp.Expression:
    """`SELECT * FROM (<query>) AS guarded WHERE <condition>`: empty when the condition fails."""
    inner = _as_tree(sql)
    return exp.select("*").from_(exp.Subquery(this=inner, alias=exp.TableAlias(
        this=exp.to_identifier("guarded")))).where(parse(f"SELECT 1 WHERE {condition}").args["where"].this)


def literal_sql(value: Any) -> str:
    return exp.convert(value).sql(dialect="duckdb")


def distinct_source(sql: str | exp.Expression, table: str) -> exp.Expression:
    """Read `table` through `SELECT DISTINCT *`: exact duplicate rows count once."""
    tree = _as_tree(sql)
    for node in list(tree.find_all(exp.Table)):
        if node.name == table and not isinstance(node.parent, exp.Subquery):
            alias = node.alias or table
            sub = exp.Subquery(this=exp.select("*").distinct().from_(table),
                               alias=exp.TableAlias(this=exp.to_identifier(alias)))
            node.replace(sub)
    return tree
