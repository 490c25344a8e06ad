"""conflicting_duplicate: the measurement the answer rests on is recorded twice, with contradicting values."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch, RowEdit
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.evidence import evidence_rows, plain
from pipeline.noise.registry import register
from pipeline.noise.sqltools import guard
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.sql.schema import DIALECT, parse, referenced_tables
from pipeline.tasks.answers import Rejection, extract_answer, same_answer
from pipeline.tasks.engine import run_polars


@dataclass(frozen=True)
class Measurement:
    """How a measurement table records one event: what identifies it, its value, its row id."""

    identity: tuple[str, ...]  # same identity = the same measurement
    value: str  # numeric value column
    text: str | None  # its text rendering, kept consistent
    row_id: str | None  # a unique id the copy needs a fresh value of


# OMR is left out on purpose: several readings on one day (seq_num 1, 2, …) are routine there.
MEASUREMENTS = {
    "labevents": Measurement(("subject_id", "itemid", "charttime"), "valuenum", "value", "labevent_id"),
    "chartevents": Measurement(("stay_id", "itemid", "charttime"), "valuenum", "value", None),
}
AGGREGATES = (exp.Avg, exp.Sum, exp.Count)  # a mean or count over readings is not a single reading

_MAX_IDS: dict[tuple[str, str, str], int] = {}


def _max_id(ehr: EHR, table: str, column: str) -> int:
    """The largest id in the table (cached per EHR build when unpatched): the copy takes the next one."""
    key = (str(ehr.root), table, str(ehr.manifest["tables"][table].get("sha256", "")))
    if ehr.patch is not None or key not in _MAX_IDS:
        value = int(ehr[table].select(pl.col(column).max()).collect().item() or 0)
        if ehr.patch is not None:
            return value
        _MAX_IDS[key] = value
    return _MAX_IDS[key]


def _decimals(value: float) -> int:
    """Digits after the decimal point as recorded (7.35 -> 2, 140.0 -> 0), at most 3."""
    text = repr(float(value))
    if "e" in text or "." not in text:
        return 3 if "e" in text else 0
    fraction = text.split(".")[1].rstrip("0")
    return min(len(fraction), 3)


def _alter(value: float, change: float) -> tuple[float, int]:
    """`value` changed by the relative `change`, rounded like the original (one more digit if needed)."""
    places = _decimals(value)
    for digits in range(places, places + 3):
        new = round(value * (1 + change), digits)
        if new > 0 and abs(new - value) >= abs(change) * abs(value) / 2:
            return (float(int(new)) if digits == 0 else new), digits
    return value * (1 + change), 6


_RANGES: dict[tuple[str, str, str, int], tuple[float, float]] = {}


def _observed_range(ehr: EHR, table: str, m: Measurement, itemid: int) -> tuple[float, float]:
    """The lowest and highest value this EHR holds for the item: a second reading inside it is one the
    hospital has really seen; outside it the value would be implausible (another operator's noise)."""
    key = (str(ehr.root), table, str(ehr.manifest["tables"][table].get("sha256", "")), itemid)
    if key not in _RANGES:
        stats = (ehr[table].filter(pl.col("itemid") == itemid)
                 .select(pl.col(m.value).min().alias("lo"), pl.col(m.value).max().alias("hi")).collect())
        _RANGES[key] = (float(stats["lo"][0]), float(stats["hi"][0]))
    return _RANGES[key]


def conflict_query(evidence_sql: str, table: str, m: Measurement) -> exp.Expression:
    """The evidence query turned into: the measurements recorded more than once with different values."""
    tree = parse(evidence_sql)
    if not isinstance(tree, exp.Select) or tree.args.get("with_") or tree.args.get("group"):
        raise NotApplicable("the evidence query is not a plain SELECT")
    sources = [tree.args["from_"].this, *(j.this for j in tree.args.get("joins") or [])]
    aliases = [t.alias_or_name for t in sources if isinstance(t, exp.Table) and t.name == table]
    if len(aliases) != 1:
        raise NotApplicable("the evidence query does not read the evidence table once")
    alias = aliases[0]
    out = tree.copy()
    out.set("expressions", [exp.Literal.number(1)])
    out.set("distinct", None)
    out = out.group_by(*(exp.column(c, table=alias) for c in m.identity))
    return out.having(parse(f"SELECT 1 HAVING COUNT(DISTINCT {alias}.{m.value}) > 1").args["having"].this)


@register
class ConflictingDuplicate(NoiseOperator):
    name = "conflicting_duplicate"
    level = "record"
    recoverable = False
    description = ("The measurement the answer rests on is recorded a second time, same time and item, with a "
                   "clinically different value; the agent should report the conflict and abstain.")
    defaults = {"min_change": 0.25, "max_change": 0.60, "max_candidates": 6}
    example_templates = ("labs.patient.last_value_in_admission", "labs.patient.max_value_in_admission",
                         "labs.patient.value_on_date", "vitals.patient.last_value_in_stay")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        table = task.evidence["table"]
        tree = task.template.gold_tree
        return (task.scope == "patient" and task.spec.type != "list" and table in MEASUREMENTS and table in ehr
                and tree is not None and table in referenced_tables(tree)
                and not any(True for _ in tree.find_all(*AGGREGATES))
                # LAG/LEAD over time: a same-time copy leaves the row order, and so the careless
                # answer, undefined from run to run
                and not any(True for _ in tree.find_all(exp.Window))
                and any(c.name == MEASUREMENTS[table].value for c in tree.find_all(exp.Column))
                and bool(task.evidence["rows"]))

    def _copy(self, row: dict[str, Any], m: Measurement, sign: int, rng: np.random.Generator,
              next_id: int | None, observed: tuple[float, float]) -> dict[str, Any] | None:
        """A copy of `row` whose value differs by `sign` x U(min_change, max_change); None when that value
        lies outside what the EHR has observed for the item (implausible values are another operator)."""
        change = sign * float(rng.uniform(float(self.params["min_change"]), float(self.params["max_change"])))
        new, digits = _alter(float(row[m.value]), change)
        if not observed[0] <= new <= observed[1]:
            return None
        copy = dict(row)
        copy[m.value] = new
        if m.text is not None:
            copy[m.text] = f"{new:.{digits}f}"
        if m.row_id is not None and next_id is not None:
            copy[m.row_id] = next_id
        lower, upper = row.get("ref_range_lower"), row.get("ref_range_upper")
        if "flag" in row and (lower is not None or upper is not None):  # keep the lab's own flag consistent
            outside = (lower is not None and new < lower) or (upper is not None and new > upper)
            copy["flag"] = "abnormal" if outside else None
        return copy

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        if not self.applicable(task, ehr):
            raise NotApplicable("needs a patient question about single recorded values (last, first, peak, …)")
        table = task.evidence["table"]
        m = MEASUREMENTS[table]
        rows = evidence_rows(ehr, task).filter(pl.col(m.value).is_not_null() & (pl.col(m.value) != 0))
        if rows.height == 0:
            raise NotApplicable("no non-zero recorded value among the evidence rows")
        guard_sql = conflict_query(task.evidence["sql"], table, m)
        next_id = None if m.row_id is None else _max_id(ehr, table, m.row_id) + 1
        # Rows that state the answer first (the last/first/peak reading), then the others.
        candidates = rows.to_dicts()
        order = list(rng.permutation(len(candidates)))
        if task.spec.type == "number" and isinstance(task.value, int | float):
            order.sort(key=lambda i: not math.isclose(candidates[i][m.value], task.value, rel_tol=1e-9,
                                                      abs_tol=task.spec.tolerance))
        plausible = False
        for i in order[: int(self.params["max_candidates"])]:
            row = candidates[i]
            first = 1 if rng.random() < 0.5 else -1
            for sign in (first, -first):  # a lower copy does not move a maximum: try the other direction
                copy = self._copy(row, m, sign, rng, next_id, _observed_range(ehr, table, m, row["itemid"]))
                if copy is None:
                    continue
                plausible = True
                patch = Patch((RowEdit("insert", table, values=copy),))
                outcome = self._careless(task, ehr.with_patch(patch))
                if outcome is not None:
                    break
            else:
                continue
            kind, _ = outcome
            trap = parse(task.gold_sql)
            if kind == "tie":  # two readings qualify: the careless agent keeps one of them (the inserted one)
                direction = "DESC" if copy[m.value] > row[m.value] else "ASC"
                trap = parse(f"SELECT * FROM ({task.gold_sql}) AS careless "
                             f"ORDER BY {task.spec.column} {direction} LIMIT 1")
            gold = guard(task.gold_sql, f"NOT EXISTS ({guard_sql.sql(dialect=DIALECT)})")
            return NoisyItem(question=task.question, patch=patch, gold_sql=gold.sql(dialect=DIALECT),
                             expected=Outcome.abstain("conflicting_evidence"), trap_sql=trap.sql(dialect=DIALECT),
                             params={"table": table, "original": plain({c: row[c] for c in (*m.identity, m.value)}),
                                     "conflicting_value": copy[m.value],
                                     "relative_change": round(copy[m.value] / row[m.value] - 1, 4),
                                     **({m.row_id: copy[m.row_id]} if m.row_id else {})})
        if not plausible:
            raise NotApplicable("a value changed by min_change..max_change would be implausible for this item")
        raise NotApplicable("no contradicting copy of a reading changes what the question asks for")

    @staticmethod
    def _careless(task: Task, noisy: EHR) -> tuple[str, Any] | None:
        """What the clean query does with the conflicting copy in place: a tie, another value, or nothing."""
        try:
            got, _ = extract_answer(run_polars(noisy, parse(task.gold_sql)), task.spec)
        except Rejection as rej:
            return ("tie", None) if rej.reason == "degenerate" else None
        return None if same_answer(got, task.value, task.spec) else ("changed", got)
