"""shift_record_time: the records the question's time window asks about are timestamped outside it."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch, RowEdit
from pipeline.ehr.schema import TABLES
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.evidence import evidence_rows, plain
from pipeline.noise.registry import register
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.sql.schema import DIALECT, parse

PREDICATES = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)
# An empty window gives a count of 0 or a "no": legitimate answers, not missing evidence.
ANSWER_TYPES = ("number", "string", "datetime", "list")


def _sources(select: exp.Select) -> dict[str, str]:
    """alias -> base table for the tables in this SELECT's own FROM and JOINs."""
    from_ = select.args.get("from_")
    nodes = ([from_.this] if from_ is not None else []) + [j.this for j in select.args.get("joins") or []]
    return {t.alias_or_name: t.name for t in nodes if isinstance(t, exp.Table)}


def window_predicates(tree: exp.Expression, table: str) -> list[exp.Expression]:
    """Comparisons that bound a time column of `table` (the time window of the question): in WHERE or
    JOIN ... ON of a SELECT that reads `table`, not comparing with a subquery (`= (SELECT MAX(...))`)."""
    times = set(TABLES[table].time_columns)
    found: list[exp.Expression] = []
    for select in tree.find_all(exp.Select):
        sources = _sources(select)
        aliases = {a for a, t in sources.items() if t == table}
        if not aliases:
            continue
        conditions = [select.args.get("where"), *(j.args.get("on") for j in select.args.get("joins") or [])]
        for condition in (c for c in conditions if c is not None):
            for pred in condition.find_all(*PREDICATES):
                if pred.find_ancestor(exp.Select) is not select or pred.find(exp.Select):
                    continue
                if any(isinstance(a, PREDICATES) for a in _ancestors(pred, condition)):
                    continue  # only the outermost comparison
                if any(c.name in times and (c.table in aliases or (not c.table and len(sources) == 1))
                       for c in pred.find_all(exp.Column)):
                    found.append(pred)
    return found


def _ancestors(node: exp.Expression, stop: exp.Expression) -> list[exp.Expression]:
    out, parent = [], node.parent
    while parent is not None and parent is not stop.parent:
        out.append(parent)
        parent = parent.parent
    return out


def without_window(sql: str | exp.Expression, table: str) -> exp.Expression:
    """The query with its time window dropped: what a careless agent runs (any time will do)."""
    tree = parse(sql) if isinstance(sql, str) else sql.copy()
    for pred in window_predicates(tree, table):
        parent = pred.parent
        if isinstance(parent, exp.And):  # `a AND <window>` -> `a`
            parent.replace(parent.expression if parent.this is pred else parent.this)
        elif isinstance(parent, exp.Where):  # the window was the whole WHERE
            parent.pop()
        else:
            pred.replace(exp.true())
    return tree


@lru_cache(maxsize=512)
def _template_windows(gold_sql: str, evidence_sql: str, table: str) -> tuple[bool, tuple[str, ...]]:
    """(do the evidence and gold queries bound the table's time?, date slots the gold window compares for
    equality, as in `CAST(charttime AS DATE) = :chart_date`)."""
    evidence = bool(window_predicates(parse(evidence_sql), table))
    point_slots = []
    for pred in window_predicates(parse(gold_sql), table):
        if isinstance(pred, exp.EQ) and pred.find(exp.Cast) is not None:
            point_slots += [p.name for p in pred.find_all(exp.Placeholder)]
    return evidence and bool(window_predicates(parse(gold_sql), table)), tuple(point_slots)


def _shifted(value: Any, delta: timedelta) -> Any:
    if isinstance(value, datetime):
        return value + delta
    if isinstance(value, date):  # a date column moves by whole days, at least one
        days = round(delta / timedelta(days=1)) or (1 if delta > timedelta(0) else -1)
        return value + timedelta(days=days)
    return value


@register
class ShiftRecordTime(NoiseOperator):
    name = "shift_record_time"
    level = "record"
    recoverable = False
    description = ("The records inside the asked time window are timestamped outside it (charted a day late, "
                   "after the first 24 h, in another year); the window holds nothing and the agent should abstain.")
    # Shifts are tried from the smallest that empties the window: a day and a bit, two, three days, a
    # week, a month, a year, a decade (plus up to `jitter_minutes`), later first, then earlier.
    defaults = {"shift_hours": [30, 54, 78, 174, 726, 8790, 87690], "jitter_minutes": 240,
                "directions": ["later", "earlier"], "max_rows": 60}
    example_templates = ("labs.patient.value_on_date", "cost.patient.cost_first_24_hours",
                         "labs.patient.abnormal_tests_first_day", "vitals.patient.mean_first_24h")

    def _windows(self, task: Task) -> tuple[bool, tuple[str, ...]]:
        t = task.template
        return _template_windows(t.gold_sql, t.evidence.sql, task.evidence["table"])

    def applicable(self, task: Task, ehr: EHR) -> bool:
        table, rows = task.evidence["table"], task.evidence["rows"]
        return (task.spec.type in ANSWER_TYPES and table in ehr and bool(TABLES[table].time_columns)
                and 0 < task.evidence["n_rows"] == len(rows) <= int(self.params["max_rows"])
                and self._windows(task)[0])

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        if not self.applicable(task, ehr):
            raise NotApplicable("needs a question with a time window holding a few evidence rows")
        table, keys = task.evidence["table"], tuple(task.evidence["keys"])
        times = list(TABLES[table].time_columns)
        anchor = ([c for c in _window_columns(task, table) if c in times] or times)[0]  # the time the window bounds
        rows = evidence_rows(ehr, task).sort([anchor, *keys], nulls_last=True).to_dicts()
        jitter = timedelta(minutes=int(rng.integers(0, int(self.params["jitter_minutes"]) + 1)))
        evidence = parse(task.evidence["sql"]).sql(dialect=DIALECT)
        old_keys = {_key(row, keys) for row in rows}
        timed_key = bool(set(keys) & set(times))

        def moved(row: dict[str, Any], delta: timedelta) -> dict[str, Any]:
            return {**row, **{c: _shifted(row[c], delta) for c in times if row[c] is not None}}

        def patch_for(shifts: dict[int, timedelta]) -> Patch:
            return Patch(tuple(RowEdit("update", table, where={k: rows[i][k] for k in keys},
                                       values={c: v for c, v in moved(rows[i], d).items() if c in times})
                               for i, d in sorted(shifts.items())))

        # Each record gets the smallest shift that takes it out of the window (a day late, the next
        # week, the previous year …), so the records sit just outside it rather than far away.
        shifts: dict[int, timedelta] = {}
        for hours in self.params["shift_hours"]:
            for direction in self.params["directions"]:
                remaining = [i for i in range(len(rows)) if i not in shifts]
                if not remaining:
                    break
                delta = (1 if direction == "later" else -1) * (timedelta(hours=float(hours)) + jitter)
                trial = {i: delta for i in remaining}
                if timed_key:  # the key holds the time (chartevents): a moved row must not take another's key
                    taken = old_keys | _existing(ehr, table, keys, [moved(rows[i], delta) for i in remaining])
                    trial = {i: d for i, d in trial.items() if _key(moved(rows[i], d), keys) not in taken}
                if not trial:
                    continue
                found = ehr.with_patch(patch_for({**shifts, **trial})).sql(evidence)
                inside = {_key(r, keys) for r in found.to_dicts()}
                shifts.update({i: d for i, d in trial.items() if _key(moved(rows[i], d), keys) not in inside})
        if len(shifts) < len(rows):
            raise NotApplicable("no shift in the configured range moves every record out of the window")
        patch = patch_for(shifts)
        if ehr.with_patch(patch).sql(evidence).height:
            raise NotApplicable("the shifted records still fall inside the window")
        return self._item(task, patch, [moved(rows[i], shifts[i]) for i in range(len(rows))], rows, anchor,
                          [shifts[i] for i in range(len(rows))])

    def _item(self, task: Task, patch: Patch, after: list[dict[str, Any]], before: list[dict[str, Any]],
              anchor: str, shifts: list[timedelta]) -> NoisyItem:
        table = task.evidence["table"]
        point_slots = [s for s in self._windows(task)[1] if isinstance(task.slots.get(s), date)
                       and not isinstance(task.slots.get(s), datetime)]
        days = {r[anchor].date() if isinstance(r[anchor], datetime) else r[anchor] for r in after
                if r[anchor] is not None}
        if point_slots and len(days) == 1:
            # "X on day D": the careless agent reports the result it finds on the nearest charted day.
            trap = task.gold_with(**{s: next(iter(days)) for s in point_slots})
            how = "the asked day replaced by the day the record now carries"
        else:
            trap = without_window(task.gold_sql, table)  # the window ignored: any time will do
            how = "the time window dropped"
        hours = sorted({round(d / timedelta(hours=1), 2) for d in shifts})
        return NoisyItem(question=task.question, patch=patch, gold_sql=task.gold_sql,  # the window holds nothing
                         expected=Outcome.abstain("missing_evidence"), trap_sql=trap.sql(dialect=DIALECT),
                         params={"table": table, "time_column": anchor, "rows_shifted": len(patch.edits),
                                 "shift_hours": hours, "trap": how,
                                 "moved": [plain({**{k: b[k] for k in task.evidence["keys"]}, "from": b[anchor],
                                                  "to": a[anchor]}) for b, a in zip(before, after, strict=True)]})


def _existing(ehr: EHR, table: str, keys: tuple[str, ...], rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """Which of these rows' keys the table already holds."""
    schema = TABLES[table].polars_schema
    wanted = pl.DataFrame([{k: r[k] for k in keys} for r in rows], schema={k: schema[k] for k in keys}, orient="row")
    found = ehr[table].select(keys).join(wanted.lazy(), on=list(keys), how="semi").collect()
    return {_key(r, keys) for r in found.to_dicts()}


def _key(row: dict[str, Any], keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(row[k] for k in keys)


def _window_columns(task: Task, table: str) -> list[str]:
    """Time columns of the evidence table that the gold SQL's window compares."""
    times = set(TABLES[table].time_columns)
    cols = []
    for pred in window_predicates(parse(task.template.gold_sql), table):
        cols += [c.name for c in pred.find_all(exp.Column) if c.name in times and c.name not in cols]
    return cols

