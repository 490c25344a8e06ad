"""unknown_entity: the question names a patient, admission or ICU stay that does not exist (an id one
keystroke away from a real one); the agent should say so rather than answer for the look-alike."""

from __future__ import annotations

import numpy as np

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.registry import register
from pipeline.noise.sqltools import guard, relax
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.noise.verify import is_abstention
from pipeline.sql.schema import DIALECT

# The table of record of each entity id: an id absent there does not exist.
RECORD = {"subject_id": "patients", "hadm_id": "admissions", "stay_id": "icustays"}
ABSTAIN = Outcome.abstain("unknown_entity")


def lookalike_ids(real: int, rng: np.random.Generator, tail: int) -> list[int]:
    """Ids one keystroke from `real` (a digit changed or two neighbours swapped) in its last `tail`
    digits, so they keep its digit count and leading digits; in random order."""
    digits = str(real)
    start = max(1, len(digits) - tail)
    out = set()
    for i in range(start, len(digits)):
        for d in "0123456789":
            if d != digits[i]:
                out.add(digits[:i] + d + digits[i + 1:])
        if i + 1 < len(digits) and digits[i] != digits[i + 1]:
            out.add(digits[:i] + digits[i + 1] + digits[i] + digits[i + 2:])
    ids = sorted(int(s) for s in out)
    return [ids[int(i)] for i in rng.permutation(len(ids))]



@register
class UnknownEntity(NoiseOperator):
    name = "unknown_entity"
    level = "query"
    recoverable = False
    description = "The patient, admission or ICU stay id asked about does not exist; the agent should abstain."
    defaults = {"entities": ["subject_id", "hadm_id", "stay_id"], "tail_digits": 4}
    example_templates = ("labs.patient.last_value_in_admission", "demographics.patient.gender",
                         "demographics.patient.number_of_admissions")

    def _entities(self, task: Task) -> list[str]:
        return [s for s in self.params["entities"] if s in RECORD and isinstance(task.slots.get(s), int)
                and str(task.slots[s]) in task.question]

    def applicable(self, task: Task, ehr: EHR) -> bool:
        return task.scope == "patient" and bool(self._entities(task))

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        entities = [s for s in self._entities(task) if RECORD[s] in ehr] if task.scope == "patient" else []
        if not entities:
            raise NotApplicable("needs a patient-level question naming a subject, admission or ICU stay id")
        slot = entities[int(rng.integers(0, len(entities)))]
        real = int(task.slots[slot])
        candidates = lookalike_ids(real, rng, int(self.params["tail_digits"]))
        table = RECORD[slot]
        taken = set(ehr.sql(f"SELECT {slot} FROM {table} WHERE {slot} IN ({', '.join(map(str, candidates))})")[slot])
        fake = next((c for c in candidates if c not in taken), None)
        if fake is None:
            raise NotApplicable(f"every id one keystroke from {slot} {real} exists")
        question = task.question_with(**{slot: fake})
        gold = task.gold_with(**{slot: fake})
        guarded = False
        if not is_abstention(task, ehr, gold.sql(dialect=DIALECT)):
            # the query answers for nobody (a count of 0, "no"): it holds only if the entity exists
            gold = guard(gold, f"EXISTS (SELECT 1 FROM {table} WHERE {slot} = {fake})")
            guarded = True
        others = [s for s in ("hadm_id", "stay_id") if s in task.slots and s != slot]
        if slot == "subject_id" and others:
            # the careless agent drops the patient filter and answers from the admission/stay alone
            trap, trap_kind = relax(task.gold_with(subject_id=fake), {"subject_id"}), "patient_filter_dropped"
        else:
            # the careless agent takes the unknown id for the real one it resembles
            trap, trap_kind = task.gold_with(**{slot: real}), "lookalike_id"
        return NoisyItem(question=question, patch=Patch(), gold_sql=gold.sql(dialect=DIALECT), expected=ABSTAIN,
                         trap_sql=trap.sql(dialect=DIALECT),
                         params={"slot": slot, "real_id": real, "unknown_id": fake, "guarded": guarded,
                                 "trap": trap_kind})
