"""null_value: the asked result is missing in the data (value NULL, text "___"); the agent should abstain.

The result a value question reads (the last or first lab/vital of a stay, the result on a given day,
the first ordered dose) keeps its row, time and item, but its value is gone, as MIMIC-IV stores a
de-identified or unreported result: `valuenum` NULL and `value` "___". A careless query filters
`valuenum IS NOT NULL` and silently answers from the previous (or next) result instead.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch, RowEdit
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.clinical import VALUE_TABLES, evidence_frame
from pipeline.noise.registry import register
from pipeline.noise.sqltools import relax
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.sql.schema import DIALECT, parse

VALUE_ANSWERS = ("number", "string")
WIDENING_SLOTS = {"hadm_id", "stay_id"}
ITEM_SLOTS = {"lab", "vital", "drug"}  # the question names the one item whose result is asked


def _not_null_filters(tree: exp.Expression, column: str) -> list[exp.Not]:
    """`<column> IS NOT NULL` predicates of a query."""
    return [n for n in tree.find_all(exp.Not) if isinstance(n.this, exp.Is)
            and isinstance(n.this.this, exp.Column) and n.this.this.name == column
            and isinstance(n.this.expression, exp.Null)]


def _time_extremes(tree: exp.Expression, column: str) -> set[str]:
    """Which end of time the query reads the answer from: {"max"} (last), {"min"} (first), both or none."""
    found = set()
    for agg, kind in ((exp.Max, "max"), (exp.Min, "min")):
        if any(isinstance(a.this, exp.Column) and a.this.name == column for a in tree.find_all(agg)):
            found.add(kind)
    return found


def _drop(predicate: exp.Expression) -> None:
    """Remove one conjunct of a WHERE/ON condition."""
    parent = predicate.parent
    if isinstance(parent, exp.And):
        parent.replace(parent.expression if parent.this is predicate else parent.this)
    else:
        predicate.replace(exp.true())


@lru_cache(maxsize=512)
def _shape(gold_sql: str, value: str, time: str) -> tuple[bool, frozenset[str]]:
    """Does the gold skip missing values, and which result does it read (last/first, or a day's)?"""
    tree = parse(gold_sql)
    extremes = frozenset(_time_extremes(tree, time)) or frozenset({"day"} if _date_equality(tree) else ())
    return bool(_not_null_filters(tree, value)), extremes


def _date_equality(tree: exp.Expression) -> tuple[exp.EQ, exp.Cast, exp.Expression] | None:
    """`CAST(<time column> AS DATE) = <date literal>` in a query, split into (predicate, column side, literal)."""
    for eq in tree.find_all(exp.EQ):
        for col, lit in ((eq.this, eq.expression), (eq.expression, eq.this)):
            if (isinstance(col, exp.Cast) and isinstance(col.this, exp.Column) and col.to.is_type("date")
                    and (isinstance(lit, exp.Literal | exp.Placeholder)
                         or (isinstance(lit, exp.Cast) and isinstance(lit.this, exp.Literal)))):
                return eq, col, lit
    return None


def carry_forward(sql: str) -> exp.Expression:
    """The careless "value on that day": when the day has no usable result, take the latest day before
    it that has one (last observation carried forward), or else the first day after it."""
    tree = parse(sql)
    found = _date_equality(tree)
    if found is None:
        return tree
    eq, col, lit = found
    select = eq.find_ancestor(exp.Select)

    def nearest(compare: type[exp.Binary], agg: type[exp.Func]) -> exp.Subquery:
        day = select.copy()
        for node in day.find_all(exp.EQ):
            if node == eq:
                node.replace(compare(this=col.copy(), expression=lit.copy()))
                break
        day.set("expressions", [agg(this=col.copy()).as_("day")])
        day.set("order", None)
        day.set("group", None)
        return exp.Subquery(this=day)

    eq.replace(exp.EQ(this=col.copy(), expression=exp.Coalesce(
        this=nearest(exp.LTE, exp.Max), expressions=[nearest(exp.GTE, exp.Min)])))
    return tree


@register
class NullValue(NoiseOperator):
    name = "null_value"
    level = "value"
    recoverable = False
    description = ("The asked result is missing in the data (value NULL, text '___'); abstain rather than "
                   "answer from another measurement.")
    defaults = {"max_rows": 200, "missing_text": "___"}
    example_templates = ("labs.patient.last_value_in_admission", "labs.patient.first_value_in_admission",
                         "labs.patient.value_on_date", "medications.patient.initial_dose_of_drug",
                         "vitals.patient.last_value_in_stay")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        spec = VALUE_TABLES.get(task.evidence["table"])
        if (spec is None or task.scope != "patient" or task.spec.type not in VALUE_ANSWERS
                or not 0 < task.evidence["n_rows"] == len(task.evidence["rows"]) <= self.params["max_rows"]):
            return False
        skips_missing, reads = _shape(task.template.gold_sql, spec.value, spec.time)
        return skips_missing and bool(reads) and bool(ITEM_SLOTS & set(task.slots))

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        if not self.applicable(task, ehr):
            raise NotApplicable("needs a patient-level value question whose gold SQL skips missing values")
        table = task.evidence["table"]
        spec = VALUE_TABLES[table]
        keys = list(task.evidence["keys"])
        rows = evidence_frame(task, ehr, [spec.time, spec.value]).drop_nulls(spec.time)
        if rows.is_empty():
            raise NotApplicable("no timed evidence row")
        extremes = sorted(_shape(task.template.gold_sql, spec.value, spec.time)[1])
        if extremes == ["day"]:
            if rows[spec.time].n_unique() != 1:
                raise NotApplicable("the day has more than one result")
            which, at = "only", rows[spec.time][0]
        else:
            which = extremes[int(rng.integers(0, len(extremes)))]
            at = rows[spec.time].max() if which == "max" else rows[spec.time].min()
            which = "last" if which == "max" else "first"
        target = rows.filter(rows[spec.time] == at)
        if target[spec.value].null_count():
            raise NotApplicable("the asked result is already missing in the clean data")
        missing = {spec.value: None}
        if spec.text is not None:
            missing[spec.text] = self.params["missing_text"]
        patch = Patch(tuple(RowEdit("update", table, where={k: row[k] for k in keys}, values=missing)
                            for row in target.select(keys).to_dicts()))
        gold = parse(task.gold_sql)
        for predicate in _not_null_filters(gold, spec.value):
            _drop(predicate)  # a missing result now surfaces as NULL instead of being skipped
        if which == "only":
            trap = carry_forward(task.gold_sql)  # the day's result is gone: take the last one before it
        elif target.height < rows.height:
            trap = parse(task.gold_sql)  # skips the missing result, answers from the one before/after it
        elif WIDENING_SLOTS & set(task.slots):
            trap = relax(task.gold_sql, WIDENING_SLOTS)  # no other result in the stay: answers from another
        else:
            raise NotApplicable("no other result a careless query could fall back to")
        return NoisyItem(question=task.question, patch=patch, gold_sql=gold.sql(dialect=DIALECT),
                         expected=Outcome.abstain("missing_evidence"), trap_sql=trap.sql(dialect=DIALECT),
                         params={"table": table, "column": spec.value, "result": which,
                                 "time": at.isoformat(sep=" ") if hasattr(at, "isoformat") else str(at),
                                 "rows_nulled": target.height})
