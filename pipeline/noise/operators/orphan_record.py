"""orphan_record: the events the question reads point at an admission (or ICU stay) that does not exist."""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch, RowEdit
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.registry import register
from pipeline.noise.sqltools import guard, literal_sql
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.sql.schema import DIALECT, referenced_tables
from pipeline.tasks.template import placeholders

# slot -> the table whose row the events hang from (deleted, so the events become orphans)
PARENTS = {"hadm_id": "admissions", "stay_id": "icustays"}


def _parent_slots(task: Task, ehr: EHR) -> list[str]:
    """Parent slots the gold SQL filters on without reading the parent table itself (else the
    careless query would come back empty too)."""
    tree = task.template.gold_tree
    if tree is None:
        return []
    read = referenced_tables(tree)
    used = placeholders(tree)
    return [slot for slot, table in PARENTS.items()
            if slot in task.slots and slot in used and table not in read and table in ehr]


@register
class OrphanRecord(NoiseOperator):
    name = "orphan_record"
    level = "record"
    recoverable = False
    description = ("The admission (or ICU stay) the question names is gone while its events remain; "
                   "the agent should flag the orphaned records and abstain.")
    defaults = {"parents": ["hadm_id", "stay_id"]}
    example_templates = ("labs.patient.last_value_in_admission", "cost.patient.total_admission_cost",
                         "medications.patient.total_prescriptions")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        return task.scope == "patient" and any(s in self.params["parents"] for s in _parent_slots(task, ehr))

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        slots = [s for s in _parent_slots(task, ehr) if s in self.params["parents"]]
        if task.scope != "patient" or not slots:
            raise NotApplicable("needs a patient question naming an admission or ICU stay whose gold SQL "
                                "does not read that table")
        slot = slots[int(rng.integers(0, len(slots)))]
        table, key = PARENTS[slot], task.slots[slot]
        parent = ehr[table].filter(pl.col(slot) == key).select(slot, "subject_id").collect()
        if parent.height == 0:
            raise NotApplicable(f"{table} row {slot}={key} is already missing in the clean EHR")
        if set(parent["subject_id"].to_list()) - set(task.subject_ids):
            raise NotApplicable(f"{table} row {slot}={key} belongs to another patient")
        patch = Patch((RowEdit("delete", table, where={slot: key}),))
        # The robust reading: answer only about an admission that exists.
        gold = guard(task.gold_sql, f"EXISTS (SELECT 1 FROM {table} WHERE {slot} = {literal_sql(key)})")
        return NoisyItem(question=task.question, patch=patch, gold_sql=gold.sql(dialect=DIALECT),
                         expected=Outcome.abstain("conflicting_evidence"),
                         trap_sql=task.gold_sql,  # reads the events by id and never notices the parent is gone
                         params={"table": table, "key": slot, "value": key})
