"""unit_mismatch: some results of the asked item are stored in another unit; convert them back and answer.

A run of results (the admission's first or last few, one patient's results in a cohort) arrives
from a system that reports in another unit: creatinine in µmol/L, glucose in mmol/L, temperature in
°C under the Fahrenheit item, weight in lb, a dose in g instead of mg. Value, text, reference range
and unit column change together, as an interface would write them. The answer is still derivable:
the noisy gold SQL reads the table through a subquery that converts those rows back (CASE on item
and unit). A careless query mixes the units or reports the converted number.
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
    CONVERSIONS,
    DOSE_CONVERSIONS,
    VALUE_TABLES,
    Conversion,
    conversions_for,
    evidence_frame,
    format_number,
    gold_shape,
    replace_source,
)
from pipeline.noise.registry import register
from pipeline.noise.sqltools import literal_sql
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.sql.schema import DIALECT, parse

ITEM_SLOTS = ("lab", "vital", "drug")
REF_RANGES = ("ref_range_lower", "ref_range_upper")



def unit_blind(sql: str, unit_columns: set[str], listing: bool = False) -> exp.Expression:
    """The careless aggregate: the same query without grouping by unit (one number over mixed units);
    a listing reports every value under one unit."""
    tree = parse(sql)
    if listing and isinstance(tree, exp.Select) and tree.args.get("group") is None:
        for projection in tree.expressions:
            inner = projection.this if isinstance(projection, exp.Alias) else projection
            if isinstance(inner, exp.Column) and inner.name in unit_columns:
                inner.replace(exp.Window(this=exp.Min(this=inner.copy()), partition_by=[]))
    for select in tree.find_all(exp.Select):
        group = select.args.get("group")
        if group is None:
            continue
        keep = [g for g in group.expressions if not (isinstance(g, exp.Column) and g.name in unit_columns)]
        if len(keep) == len(group.expressions):
            continue
        if keep:
            group.set("expressions", keep)
        else:
            select.set("group", None)
        for projection in select.expressions:
            inner = projection.this if isinstance(projection, exp.Alias) else projection
            if isinstance(inner, exp.Column) and inner.name in unit_columns:
                inner.replace(exp.Min(this=inner.copy()))
    return tree


def _decimals(conv_scale: float, reported: int, tolerance: float) -> int:
    """Decimals for converted values so that converting back stays well within the answer tolerance."""
    needed = math.ceil(math.log10(5.0 / (abs(conv_scale) * max(tolerance, 1e-4))))
    return int(min(max(reported, needed, 0), 6))


def _as_float(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


@register
class UnitMismatch(NoiseOperator):
    name = "unit_mismatch"
    level = "value"
    recoverable = True
    description = ("Some results of the asked item are stored in another unit (value rescaled, unit changed); "
                   "convert them back and answer in the usual unit.")
    defaults = {"max_rows": 50}
    example_templates = ("labs.patient.max_value_in_admission", "labs.patient.last_value_in_admission",
                         "labs.population.mean_value_by_cohort", "vitals.patient.max_temperature_celsius",
                         "medications.patient.first_total_daily_dose")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        table = task.evidence["table"]
        spec = VALUE_TABLES.get(table)
        answer = task.spec
        if (spec is None or answer.type not in ("number", "list") or not (answer.unit or answer.unit_column)
                or (answer.type == "list" and answer.item_type != "number") or not task.evidence["rows"]):
            return False
        reads, _, _, literals = gold_shape(task.template.gold_sql, spec.value, spec.time)
        if not reads:
            return False
        if table == "prescriptions":
            return isinstance(task.slots.get("drug"), str)
        named = {v for k, v in task.slots.items() if k in ITEM_SLOTS} | set(literals)
        return any(n in CONVERSIONS for n in named)

    # -- choosing what to convert

    def _candidates(self, task: Task, rows: pl.DataFrame, table: str) -> list[tuple[str, Conversion, pl.DataFrame]]:
        """(item name, conversion, its rows) for every convertible item of the evidence."""
        spec = VALUE_TABLES[table]
        name_col = spec.name or "label"
        asked = next((task.slots[k] for k in ITEM_SLOTS if isinstance(task.slots.get(k), str)), None)
        out = []
        for (name, unit), group in rows.group_by([name_col, spec.unit], maintain_order=True):
            if asked is not None and name != asked:
                continue
            if table == "prescriptions":
                doses = [_as_float(v) for v in group[spec.value].to_list()]
                for dose in DOSE_CONVERSIONS.get(unit or "", ()):
                    ok = [d is not None and d > 0 and dose.min_value <= d < dose.max_value for d in doses]
                    if any(ok):
                        conv = Conversion(dose.unit, dose.to, dose.scale, 0.0, 0)
                        out.append((name, conv, group.filter(pl.Series(ok))))
            else:
                for conv in conversions_for(name, unit):
                    out.append((name, conv, group.drop_nulls(spec.value)))
        return [c for c in out if c[2].height]

    def _block(self, task: Task, group: pl.DataFrame, table: str, rng: np.random.Generator) -> tuple[pl.DataFrame, str]:
        """The run of results reported in the other unit."""
        spec = VALUE_TABLES[table]
        group = group.sort([spec.time, *task.evidence["keys"]], nulls_last=True)
        n = group.height
        if task.scope == "population":
            unit = "hadm_id" if "hadm_id" in group.columns and group["hadm_id"].null_count() < n else "subject_id"
            ids = group[unit].drop_nulls().unique(maintain_order=True).to_list()
            chosen = ids[int(rng.integers(0, len(ids)))]
            block = group.filter(pl.col(unit) == chosen).head(self.params["max_rows"])
            return block, f"{unit} {chosen}"
        values = [_as_float(v) for v in group[spec.value].to_list()]
        finite = [i for i, v in enumerate(values) if v is not None]
        required: set[int] = set()
        _, ends, peaks, _ = gold_shape(task.template.gold_sql, spec.value, spec.time)
        if ends:  # the last (first) result is read: it changes unit
            end = sorted(ends)[int(rng.integers(0, len(ends)))]
            required.add(n - 1 if end == "max" else 0)
        for peak in peaks:  # the peak (nadir) result itself changes unit
            if finite:
                pick = max if peak == "max" else min
                required.add(pick(finite, key=lambda i: values[i]))
        if not required and task.spec.type == "number" and table != "prescriptions":
            required = {i for i in finite if abs(values[i] - float(task.value)) < 1e-9}
        if required:
            options = [(s, n) for s in range(min(required) + 1)] + [(0, e + 1) for e in range(max(required), n - 1)]
        elif n == 1:
            options = [(0, 1)]
        else:
            options = [(s, n) for s in range(1, n)] + [(0, e) for e in range(1, n)]
        options = [(a, b) for a, b in options if b - a <= self.params["max_rows"]]
        if not options:
            raise NotApplicable(f"more than {self.params['max_rows']} results would change unit")
        start, stop = options[int(rng.integers(0, len(options)))]
        where = "all" if (start, stop) == (0, n) else f"first {stop}" if start == 0 else f"last {n - start}"
        return group.slice(start, stop - start), f"{where} of {n} results"

    # -- the item

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        if not self.applicable(task, ehr):
            raise NotApplicable("needs a numeric answer with a unit, read from values that have another unit")
        table = task.evidence["table"]
        spec = VALUE_TABLES[table]
        keys = list(task.evidence["keys"])
        columns = ["subject_id", "hadm_id", spec.time, spec.value, spec.unit]
        if table == "prescriptions":
            columns.append(spec.name or "drug")
        else:
            columns += ["itemid", "label", spec.text or spec.value]
            if table == "labevents":
                columns += list(REF_RANGES)
        rows = evidence_frame(task, ehr, columns)
        candidates = self._candidates(task, rows, table)
        if not candidates:
            raise NotApplicable("no result of the asked item has a unit with a known conversion")
        name, conv, group = candidates[int(rng.integers(0, len(candidates)))]
        block, where = self._block(task, group, table, rng)
        edits, scope_filter, ids = self._edits(task, table, keys, conv, block)
        self._check_unit_is_new(ehr, task, table, conv, name, ids, scope_filter)
        gold = replace_source(task.gold_sql, table, self._back(table, conv, name, ids))
        trap = unit_blind(task.gold_sql, {spec.unit, "unit", "u"}, listing=task.spec.type == "list")
        return NoisyItem(question=task.question, patch=Patch(tuple(edits)), gold_sql=gold.sql(dialect=DIALECT),
                         expected=Outcome.answer(task.value, task.unit), trap_sql=trap.sql(dialect=DIALECT),
                         params={"table": table, "item": name, **conv.to_dict(), "rows_converted": block.height,
                                 "rows": where})

    def _edits(self, task: Task, table: str, keys: list[str], conv: Conversion,
               block: pl.DataFrame) -> tuple[list[RowEdit], pl.Expr | None, list[int]]:
        spec = VALUE_TABLES[table]
        tolerance = task.spec.tolerance or 1e-3
        edits = []
        for row in block.to_dicts():
            where = {k: row[k] for k in keys}
            if table == "prescriptions":
                dose = _as_float(row[spec.value])
                if dose is None:
                    raise NotApplicable("a dose that is not a number")
                text = format_number(conv.forward(dose), 6).rstrip("0").rstrip(".")  # 1000 mg -> "1" g
                edits.append(RowEdit("update", table, where=where, values={spec.value: text, spec.unit: conv.to}))
                continue
            decimals = _decimals(conv.scale, conv.decimals, tolerance)
            value = round(conv.forward(float(row[spec.value])), decimals)
            values: dict[str, Any] = {spec.value: value, spec.unit: conv.to}
            if spec.text is not None:  # "5.71200" -> "5.712", but keep the decimals the unit is reported with
                text = format_number(value, decimals)
                while "." in text and text.endswith("0") and len(text.split(".")[1]) > conv.decimals:
                    text = text[:-1]
                values[spec.text] = text.rstrip(".")
            for ref in REF_RANGES:
                if row.get(ref) is not None:
                    values[ref] = round(conv.forward(float(row[ref])), decimals)
            edits.append(RowEdit("update", table, where=where, values=values))
        if table == "prescriptions":
            return edits, None, []
        ids = sorted({int(i) for i in block["itemid"].to_list()})
        return edits, pl.col("itemid").is_in(ids), ids

    def _check_unit_is_new(self, ehr: EHR, task: Task, table: str, conv: Conversion, name: str, ids: list[int],
                           scope_filter: pl.Expr | None) -> None:
        """Converting back keys on (item, unit): the clean data must not already use the other unit."""
        spec = VALUE_TABLES[table]
        frame = ehr[table]
        if task.scope == "patient":
            frame = frame.filter(pl.col("subject_id").is_in(list(task.subject_ids)))
        item = pl.col(spec.name) == name if spec.name else scope_filter
        if frame.filter(item & (pl.col(spec.unit) == conv.to)).head(1).collect().height:
            raise NotApplicable(f"the clean data already reports {name} in {conv.to}")

    @staticmethod
    def _back(table: str, conv: Conversion, name: str, ids: list[int]) -> dict[str, str]:
        """Column rewrites that convert the noisy rows back (the noisy gold's normalising subquery)."""
        spec = VALUE_TABLES[table]
        if table == "prescriptions":
            cond = f"{spec.name} = {literal_sql(name)} AND {spec.unit} = {literal_sql(conv.to)}"
            value = f"CAST(TRY_CAST({spec.value} AS DOUBLE) / {conv.scale!r} AS VARCHAR)"
            return {spec.value: f"CASE WHEN {cond} THEN {value} ELSE {spec.value} END",
                    spec.unit: f"CASE WHEN {cond} THEN {literal_sql(conv.unit)} ELSE {spec.unit} END"}
        cond = f"itemid IN ({', '.join(map(str, ids))}) AND {spec.unit} = {literal_sql(conv.to)}"
        out = {spec.value: f"CASE WHEN {cond} THEN {conv.back_sql(spec.value)} ELSE {spec.value} END",
               spec.unit: f"CASE WHEN {cond} THEN {literal_sql(conv.unit)} ELSE {spec.unit} END"}
        if table == "labevents":
            for ref in REF_RANGES:
                out[ref] = f"CASE WHEN {cond} THEN {conv.back_sql(ref)} ELSE {ref} END"
        return out
