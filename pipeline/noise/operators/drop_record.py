"""drop_record: the rows that record the asked measurement or event are gone; related rows remain."""

from __future__ import annotations

import numpy as np

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch, RowEdit
from pipeline.ehr.schema import TABLES
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.registry import register
from pipeline.noise.sqltools import relax
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.sql.schema import DIALECT

# Answers that a deletion turns into another legitimate answer (a count of 0, "no") are not asked.
VALUE_ANSWERS = ("number", "string", "datetime", "list")
WIDENING_SLOTS = {"hadm_id", "stay_id"}


@register
class DropRecord(NoiseOperator):
    name = "drop_record"
    level = "record"
    recoverable = False
    description = "The rows recording the asked measurement/event are deleted; the agent should abstain."
    defaults = {"max_rows": 50}
    example_templates = ("labs.patient.last_value_in_admission", "labs.patient.max_value_in_admission")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        return (task.scope == "patient" and task.spec.type in VALUE_ANSWERS
                and "subject_id" in TABLES[task.evidence["table"]].columns
                and bool(WIDENING_SLOTS & set(task.slots))
                and 0 < task.evidence["n_rows"] <= min(self.params["max_rows"], len(task.evidence["rows"])))

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        if not self.applicable(task, ehr):
            raise NotApplicable("needs a patient-level value question with a few evidence rows and an admission slot")
        table = task.evidence["table"]
        patch = Patch(tuple(RowEdit("delete", table, where=dict(row)) for row in task.evidence["rows"]))
        trap = relax(task.gold_sql, WIDENING_SLOTS)  # the same question answered from another stay
        return NoisyItem(question=task.question, patch=patch, gold_sql=task.gold_sql,
                         expected=Outcome.abstain("missing_evidence"), trap_sql=trap.sql(dialect=DIALECT),
                         params={"table": table, "rows_deleted": len(task.evidence["rows"])})
