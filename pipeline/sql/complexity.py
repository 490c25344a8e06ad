"""`sql_components`: how much SQL machinery a query uses, counted on its sqlglot tree."""

from __future__ import annotations

from sqlglot import exp

COMPONENTS = ("joins", "ctes", "subqueries", "window_functions", "aggregates", "predicates", "case",
              "set_operations", "group_by", "having", "order_by", "limit", "distinct", "date_functions")

_PREDICATES = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between, exp.Like, exp.ILike,
               exp.Is, exp.Exists)
_DATE_FUNCTIONS = (exp.Extract, exp.DateTrunc, exp.TimestampTrunc, exp.DateAdd, exp.DateSub, exp.DateDiff,
                   exp.CurrentDate, exp.CurrentTimestamp, exp.Interval, exp.Year, exp.Month, exp.Day)


def sql_components(tree: exp.Expression) -> dict[str, int]:
    """Counts per component, plus `total` (their sum): a rough, reproducible difficulty measure."""
    counts = {
        "joins": len(list(tree.find_all(exp.Join))),
        "ctes": len(list(tree.find_all(exp.CTE))),
        "subqueries": sum(1 for s in tree.find_all(exp.Subquery)) + sum(
            1 for q in tree.find_all(exp.Select) if q is not tree and isinstance(q.parent, exp.In | exp.Exists)),
        "window_functions": len(list(tree.find_all(exp.Window))),
        "aggregates": sum(1 for a in tree.find_all(exp.AggFunc) if not isinstance(a.parent, exp.Window)),
        "predicates": len(list(tree.find_all(*_PREDICATES))),
        "case": len(list(tree.find_all(exp.Case))) + sum(
            1 for n in tree.find_all(exp.If) if not isinstance(n.parent, exp.Case)),
        "set_operations": len(list(tree.find_all(exp.Union, exp.Intersect, exp.Except))),
        "group_by": len(list(tree.find_all(exp.Group))),
        "having": len(list(tree.find_all(exp.Having))),
        "order_by": sum(1 for o in tree.find_all(exp.Order) if not isinstance(o.parent, exp.Window)),
        "limit": len(list(tree.find_all(exp.Limit))),
        "distinct": len(list(tree.find_all(exp.Distinct))),
        "date_functions": len(list(tree.find_all(*_DATE_FUNCTIONS))),
    }
    counts["total"] = sum(counts.values())
    return counts
