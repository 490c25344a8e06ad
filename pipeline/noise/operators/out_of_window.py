"""out_of_window: the question asks about a period the records do not cover — a decade, a run of years
or a year in which the database holds no rows of the kind asked about, or a date range or day on which
the patient has none. The agent should report that there is no evidence rather than answer from
another period."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import numpy as np
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.registry import register
from pipeline.noise.sqltools import guard
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.noise.verify import is_abstention, usable_answer
from pipeline.sql.schema import DIALECT, parse
from pipeline.tasks.engine import render
from pipeline.tasks.sample import format_slot

# The window slots a template may have, in the groups that move together.
WINDOWS: tuple[tuple[str, ...], ...] = (("start_year", "end_year"), ("decade",), ("year",),
                                        ("start_date", "end_date"), ("chart_date",))
PREDICATES = (exp.Between, exp.GTE, exp.GT, exp.LTE, exp.LT, exp.EQ)
ABSTAIN = Outcome.abstain("missing_evidence")


def window_of(task: Task) -> tuple[str, ...] | None:
    return next((w for w in WINDOWS if all(s in task.slots and format_slot(task.slots[s]) in task.question
                                           for s in w)), None)


def _predicates(tree: exp.Expression, slots: set[str]) -> list[exp.Expression]:
    """The smallest comparisons that mention a window placeholder."""
    out = []
    for ph in tree.find_all(exp.Placeholder):
        if ph.name in slots:
            node = ph.parent
            while node is not None and not isinstance(node, PREDICATES):
                node = node.parent
            if node is not None and all(node is not o for o in out):
                out.append(node)
    return out


def drop_window(tree: exp.Expression, slots: set[str]) -> exp.Expression:
    """The query without its window: every comparison on a window slot becomes TRUE (what a careless agent
    runs when the asked period returns nothing: the same question over all time)."""
    tree = tree.copy()
    for node in _predicates(tree, slots):
        node.replace(exp.true())
    while True:
        pruned = tree.transform(_prune_true)
        if pruned == tree:
            return pruned
        tree = pruned


def _prune_true(node: exp.Expression) -> exp.Expression | None:
    """`x AND TRUE` -> `x`; `WHERE TRUE` -> no WHERE."""
    if isinstance(node, exp.And):
        left, right = node.this, node.expression
        if isinstance(right, exp.Boolean) and right.this is True:
            return left
        if isinstance(left, exp.Boolean) and left.this is True:
            return right
    if isinstance(node, exp.Where) and isinstance(node.this, exp.Boolean) and node.this.this is True:
        return None
    return node


def _conjuncts(where: exp.Expression | None) -> list[exp.Expression]:
    return list(where.this.flatten()) if isinstance(where, exp.Where) and isinstance(where.this, exp.And) else (
        [where.this] if isinstance(where, exp.Where) else [])


def window_probes(tree: exp.Expression, slots: set[str], keep: set[str]) -> list[exp.Expression]:
    """For each SELECT that filters on the window: its sources (FROM, JOINs, the query's CTEs) with only
    the window conditions (and conditions on the `keep` slots, e.g. the patient) — the rows of that kind
    in the period, whatever else the question asks."""
    probes = []
    ctes = list(tree.ctes) if isinstance(tree, exp.Query) else []
    selects = {id(s): s for s in (p.find_ancestor(exp.Select) for p in _predicates(tree, slots)) if s is not None}
    for select in selects.values():
        source = select.args.get("from_", select.args.get("from"))
        if source is None:
            continue
        kept = [c for c in _conjuncts(select.args.get("where"))
                if any(ph.name in slots | keep for ph in c.find_all(exp.Placeholder))]
        if not kept:  # the window sits in a JOIN condition or a HAVING: keep the sources only
            kept = [exp.true()]
        probe = exp.select(exp.alias_(exp.Literal.number(1), "hit")).from_(source.this.copy())
        for join in select.args.get("joins") or []:
            probe = probe.join(join.copy())
        probe = probe.where(exp.and_(*[c.copy() for c in kept])).limit(1)
        for cte in ctes:
            probe = probe.with_(cte.alias, as_=cte.this.copy())
        probes.append(probe)
    return probes




def probes_source(task: Task) -> exp.Expression:
    """The template's gold SQL with its placeholders (a fresh tree)."""
    tree = task.template.gold_tree
    return tree.copy() if tree is not None else parse(task.template.gold_sql)


def shifted(values: dict[str, Any], window: tuple[str, ...], k: int) -> dict[str, Any]:
    """The window moved by k of its own lengths (a decade by ten years, a 3-day range by three days)."""
    first, last = values[window[0]], values[window[-1]]
    if window == ("decade",):
        return {"decade": first + 10 * k}
    if isinstance(first, datetime | date):
        days = (last - first).days + 1
        return {s: values[s] + timedelta(days=days * k) for s in window}
    return {s: values[s] + (last - first + 1) * k for s in window}


def _has_rows(ehr: EHR, probe: exp.Expression, slots: dict[str, Any]) -> bool:
    try:
        return not ehr.sql(render(probe, slots).sql(dialect=DIALECT)).is_empty()
    except Exception as err:  # a probe cut out of a correlated subquery may not run on its own
        raise NotApplicable(f"cannot probe the window on its own: {err}") from err


@register
class OutOfWindow(NoiseOperator):
    name = "out_of_window"
    level = "query"
    recoverable = False
    description = "Asks about a period (decade, years, dates) with no records; the agent should abstain."
    defaults = {"max_steps": 12}
    example_templates = ("labs.population.distinct_patients_tested_in_decade",
                         "demographics.population.avg_los_by_admission_type", "cost.patient.cost_between_dates")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        return window_of(task) is not None

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        window = window_of(task)
        if window is None:
            raise NotApplicable("the question has no date or period")
        probes = self._probes(task, window)
        if not probes:
            raise NotApplicable("the gold SQL does not filter on the window")
        now = ehr.now
        signs = [-1, 1] if rng.random() < 0.5 else [1, -1]
        for k in range(1, int(self.params["max_steps"]) + 1):
            for sign in signs:
                new = shifted(task.slots, window, sign * k)
                start = new[window[0]]
                if (start > now.date()) if isinstance(start, date) else (start > now.year):
                    continue  # asking about the future is another kind of question
                if any(_has_rows(ehr, p, {**task.slots, **new}) for p in probes):
                    continue
                return self._item(task, ehr, window, new, probes)
        raise NotApplicable(f"no period within {self.params['max_steps']} windows of the asked one lacks records")

    @staticmethod
    def _probes(task: Task, window: tuple[str, ...]) -> list[exp.Expression]:
        return window_probes(probes_source(task), set(window), {"subject_id"} if task.scope == "patient" else set())

    def _item(self, task: Task, ehr: EHR, window: tuple[str, ...], new: dict[str, Any],
              probes: list[exp.Expression]) -> NoisyItem:
        gold = task.gold_with(**new)
        guarded = not is_abstention(task, ehr, gold.sql(dialect=DIALECT))
        if guarded:  # "0 patients" in a period with no records at all is not an answer
            merged = {**task.slots, **new}
            gold = guard(gold, " AND ".join(f"EXISTS ({render(p, merged).sql(dialect=DIALECT)})" for p in probes))
        trap, trap_kind = render(drop_window(probes_source(task), set(window)), task.slots), "window_dropped"
        if usable_answer(task, ehr, trap.sql(dialect=DIALECT)) is None:
            # the all-time query is empty or tied: the careless agent falls back to the nearest period with data
            trap, trap_kind = task.gold_with(), "nearest_window_with_records"
        return NoisyItem(question=task.question_with(**new), patch=Patch(), gold_sql=gold.sql(dialect=DIALECT),
                         expected=ABSTAIN, trap_sql=trap.sql(dialect=DIALECT),
                         params={"window": list(window), "asked": {s: format_slot(task.slots[s]) for s in window},
                                 "shifted_to": {s: format_slot(v) for s, v in new.items()}, "guarded": guarded,
                                 "trap": trap_kind})
