"""implausible_value: a physiologically impossible result sits in the evidence; the agent should abstain.

One result the answer depends on gets a digit or decimal-point slip (heart rate 85 -> 850 bpm,
potassium 4.1 -> 41 mEq/L, SpO2 97 -> 970 %, sodium 138 -> 13.8 mEq/L), the kind of entry error an
interface or a hurried keyboard makes. The true value is unknowable, so a robust agent flags the
result instead of reporting it (or a peak, mean or trend skewed by it). The noisy gold SQL is the
clean one guarded by a plausibility check over the evidence rows (limits in pipeline.noise.clinical).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch, RowEdit
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.clinical import (
    LIMITS,
    VALUE_TABLES,
    Limits,
    decimals_of,
    evidence_frame,
    format_number,
    gold_shape,
    limits_for,
)
from pipeline.noise.registry import register
from pipeline.noise.sqltools import guard, literal_sql
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.sql.schema import DIALECT

TABLES_WITH_LIMITS = ("labevents", "chartevents")
ANSWERS = ("number", "list", "datetime")
ITEM_SLOTS = ("lab", "vital")



def slip(value: float, decimals: int, limits: Limits, direction: str, max_power: int,
         margin: float) -> tuple[float, int] | None:
    """A digit or decimal-point slip that puts `value` clearly outside `limits` (value, decimals)."""
    if value <= 0:
        return None
    for k in range(1, max_power + 1):
        if direction == "high" and limits.hi is not None:
            new, dec = value * 10 ** k, max(decimals - k, 0)
            if new > limits.hi * margin:
                return round(new, dec), dec
        if direction == "low" and limits.lo is not None and limits.lo > 0:
            new, dec = value / 10 ** k, decimals + k
            if new < limits.lo / margin:
                return round(new, dec), dec
    return None


@register
class ImplausibleValue(NoiseOperator):
    name = "implausible_value"
    level = "value"
    recoverable = False
    description = ("A result the answer depends on is physiologically impossible (a digit slip: heart rate 850, "
                   "potassium 41); flag it and abstain.")
    defaults = {"max_rows": 200, "max_power": 3, "margin": 1.5}
    example_templates = ("labs.patient.last_value_in_admission", "labs.patient.max_value_in_admission",
                         "labs.patient.mean_value_in_admission", "vitals.patient.max_in_stay",
                         "vitals.patient.last_value_in_stay")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        table = task.evidence["table"]
        if (table not in TABLES_WITH_LIMITS or task.scope != "patient" or task.spec.type not in ANSWERS
                or not 0 < task.evidence["n_rows"] == len(task.evidence["rows"]) <= self.params["max_rows"]):
            return False
        spec = VALUE_TABLES[table]
        reads, _, _, literals = gold_shape(task.template.gold_sql, spec.value, spec.time)
        named = {v for k, v in task.slots.items() if k in ITEM_SLOTS} | set(literals)
        return reads and any(n in LIMITS for n in named)

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        if not self.applicable(task, ehr):
            raise NotApplicable("needs a patient-level question answered from results with plausibility limits")
        table = task.evidence["table"]
        spec = VALUE_TABLES[table]
        keys = list(task.evidence["keys"])
        columns = [spec.time, spec.value, spec.unit, "itemid", "label", spec.text or spec.value]
        if table == "labevents":
            columns += ["ref_range_lower", "ref_range_upper", "flag"]
        rows = evidence_frame(task, ehr, columns).drop_nulls(spec.value)
        limits = [limits_for(r["label"], r[spec.unit]) for r in rows.select("label", spec.unit).to_dicts()]
        rows = rows.with_columns(pl.Series("checked", [lim is not None for lim in limits]))
        if any(lim is not None and not lim.contains(v) for lim, v in zip(limits, rows[spec.value], strict=True)):
            raise NotApplicable("the clean evidence already holds an implausible value")
        asked = next((task.slots[k] for k in ITEM_SLOTS if isinstance(task.slots.get(k), str)), None)
        candidates = rows.filter(pl.col("checked"))
        if asked is not None:
            candidates = candidates.filter(pl.col("label") == asked)
        if candidates.is_empty():
            raise NotApplicable("no result of the asked item has plausibility limits")
        target, direction = self._target(task, candidates, spec.value, spec.time, rng)
        limit = limits_for(target["label"], target[spec.unit])
        assert limit is not None  # candidates are checked rows
        decimals = decimals_of(target.get(spec.text or ""), 1)
        slipped = (slip(float(target[spec.value]), decimals, limit, direction, self.params["max_power"],
                        self.params["margin"])
                   or slip(float(target[spec.value]), decimals, limit, "high", self.params["max_power"],
                           self.params["margin"]))
        if slipped is None:
            raise NotApplicable("no digit slip makes this result implausible")
        value, dec = slipped
        values: dict[str, Any] = {spec.value: value}
        if spec.text is not None:
            values[spec.text] = format_number(value, dec)
        if table == "labevents":
            lo, hi = target.get("ref_range_lower"), target.get("ref_range_upper")
            if (hi is not None and value > hi) or (lo is not None and value < lo):
                values["flag"] = "abnormal"
        patch = Patch((RowEdit("update", table, where={k: target[k] for k in keys}, values=values),))
        gold = guard(task.gold_sql, f"({self._implausible_count(task, rows, spec)}) = 0")
        return NoisyItem(question=task.question, patch=patch, gold_sql=gold.sql(dialect=DIALECT),
                         expected=Outcome.abstain("implausible_value"), trap_sql=task.gold_sql,
                         params={"table": table, "item": target["label"], "unit": target[spec.unit],
                                 "time": str(target[spec.time]), "clean_value": target[spec.value],
                                 "implausible_value": value, "limits": [limit.lo, limit.hi], "slip": direction})

    def _target(self, task: Task, candidates: pl.DataFrame, value: str, time: str,
                rng: np.random.Generator) -> tuple[dict[str, Any], str]:
        """The result to corrupt, and whether the slip goes high or low."""
        _, ends, peaks, _ = gold_shape(task.template.gold_sql, value, time)
        direction = "low" if peaks == {"min"} else "high"
        rows = candidates.sort([time, *task.evidence["keys"]]).to_dicts()
        answer_rows = rows
        if task.spec.type == "number":  # the answer is read from these results
            answer_rows = [r for r in rows if math.isclose(float(r[value]), float(task.value), abs_tol=1e-9)] or rows
        elif task.spec.type == "datetime":  # a result at another time becomes the (impossible) peak
            answer_rows = [r for r in rows if not str(r[time]).startswith(str(task.value))] or rows
        if ends:  # the last (first) result: the careless query reports the impossible value
            end = sorted(ends)[int(rng.integers(0, len(ends)))]
            return (answer_rows[-1] if end == "max" else answer_rows[0]), direction
        if peaks:  # the peak (nadir) itself
            pick = max if direction == "high" else min
            return pick(rows, key=lambda r: float(r[value])), direction
        return answer_rows[int(rng.integers(0, len(answer_rows)))], direction

    @staticmethod
    def _implausible_count(task: Task, rows: pl.DataFrame, spec: Any) -> str:
        """COUNT(*) of evidence rows outside their plausibility limits (the evidence SQL, re-projected)."""
        tree = task.evidence_sql_with()
        if not isinstance(tree, exp.Select):
            raise NotApplicable("the evidence SQL is not a simple query")
        table = task.evidence["table"]
        source = next((t for t in tree.find_all(exp.Table) if t.name == table), None)
        if source is None:
            raise NotApplicable("the evidence SQL does not read its table by name")
        alias = source.alias_or_name
        checks = []
        for (label, unit), group in rows.filter(pl.col("checked")).group_by(["label", spec.unit],
                                                                            maintain_order=True):
            limit = limits_for(label, unit)
            ids = ", ".join(str(i) for i in sorted(set(group["itemid"].to_list())))
            unit_check = f" AND {alias}.{spec.unit} = {literal_sql(unit)}" if unit is not None else ""
            checks.append(f"({alias}.itemid IN ({ids}){unit_check} AND {limit.outside_sql(f'{alias}.{spec.value}')})")
        tree = tree.select(exp.Count(this=exp.Star()).as_("n_implausible"), append=False)
        tree = tree.where(" OR ".join(checks), dialect=DIALECT)
        tree.set("distinct", None)
        return tree.sql(dialect=DIALECT)
