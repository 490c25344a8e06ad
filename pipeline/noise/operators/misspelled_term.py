"""misspelled_term: the question misspells a clinical term; the answer is still derivable."""

from __future__ import annotations

import numpy as np

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.registry import register
from pipeline.noise.terms import misspell, term_slots
from pipeline.noise.types import NoisyItem, Task
from pipeline.sql.schema import DIALECT


@register
class MisspelledTerm(NoiseOperator):
    name = "misspelled_term"
    level = "query"
    recoverable = True
    description = "A drug, test or diagnosis name in the question is misspelled; match it fuzzily and answer."
    example_templates = ("labs.patient.last_value_in_admission", "medications.population.count_patients_drug_in_decade")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        return bool(term_slots(task))

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        slots = term_slots(task)
        if not slots:
            raise NotApplicable("no clinical term in the question")
        slot = slots[int(rng.integers(0, len(slots)))]
        typo = misspell(task.slots[slot], rng)
        if typo == task.slots[slot]:
            raise NotApplicable("the term could not be misspelled")
        trap = task.gold_with(**{slot: typo})  # the literal, misspelled term matches nothing
        return NoisyItem(question=task.question_with(**{slot: typo}), patch=Patch(), gold_sql=task.gold_sql,
                         expected=task.outcome, trap_sql=trap.sql(dialect=DIALECT),
                         params={"slot": slot, "term": task.slots[slot], "misspelled": typo})
