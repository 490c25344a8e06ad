"""synonym_term: the question names a drug, test, vital, unit or diagnosis by its abbreviation or brand
name (Lasix, Hgb, BUN, HR, MICU, CHF); the answer is still derivable by mapping it to the stored label."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.registry import register
from pipeline.noise.synonyms import normalise, spelling, synonyms_for
from pipeline.noise.terms import term_slots
from pipeline.noise.types import NoisyItem, Task
from pipeline.sql.schema import DIALECT

# Where the labels a slot can name are stored: a synonym must name exactly one of them.
VOCABULARY: dict[str, tuple[tuple[str, str], ...]] = {
    "lab": (("d_labitems", "label"),),
    "drug": (("prescriptions", "drug"),),
    "drug_a": (("prescriptions", "drug"),),
    "drug_b": (("prescriptions", "drug"),),
    "medication": (("pharmacy", "medication"), ("emar", "medication")),
    "diagnosis": (("d_icd_diagnoses", "long_title"),),
    "comorbidity": (("d_icd_diagnoses", "long_title"),),
    "procedure": (("d_icd_procedures", "long_title"),),
    "vital": (("d_items", "label"),),
    "measure": (("omr", "result_name"),),
    "careunit": (("transfers", "careunit"), ("icustays", "first_careunit"), ("icustays", "last_careunit")),
}
_LABELS: dict[tuple[str, str, str], frozenset[str]] = {}
_VOCAB: dict[tuple[str, str, str], Counter[str]] = {}


def vocabulary(ehr: EHR, slot: str, key: Callable[[str], str] = normalise) -> Counter[str] | None:
    """How many distinct stored labels share each key (loose by default), over the slot's label columns."""
    sources = [(t, c) for t, c in VOCABULARY.get(slot, ()) if t in ehr]
    if not sources:
        return None
    cached = (str(ehr.root), slot, key.__name__)
    if cached not in _VOCAB:
        labels: set[str] = set()
        for table, column in sources:
            where = (str(ehr.root), table, column)
            if where not in _LABELS:
                values = ehr[table].select(column).unique().drop_nulls().collect()[column].to_list()
                _LABELS[where] = frozenset(str(v).strip() for v in values)
            labels |= _LABELS[where]
        _VOCAB[cached] = Counter(key(label) for label in labels)
    return _VOCAB[cached]


@register
class SynonymTerm(NoiseOperator):
    name = "synonym_term"
    level = "query"
    recoverable = True
    description = "A term is given as an abbreviation or brand name (Lasix, Hgb, CHF, MICU); map it and answer."
    example_templates = ("labs.patient.last_value_in_admission", "cost.patient.drug_cost_in_admission",
                         "medications.population.count_patients_drug_in_decade")

    def _slots(self, task: Task) -> list[str]:
        return [s for s in term_slots(task) if s in VOCABULARY and synonyms_for(task.slots[s])]

    def applicable(self, task: Task, ehr: EHR) -> bool:
        return bool(self._slots(task))

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        slots = self._slots(task)
        if not slots:
            raise NotApplicable("no clinical term with a known abbreviation or brand name in the question")
        reasons = []
        for i in rng.permutation(len(slots)):
            slot = slots[int(i)]
            term = task.slots[slot]
            vocab, spellings = vocabulary(ehr, slot), vocabulary(ehr, slot, spelling)
            if vocab is None or spellings is None:
                reasons.append(f"{slot}: label table missing")
                continue
            if spellings[spelling(term)] > 1:  # "Lorazepam" and "LORazepam": a brand name would name both
                reasons.append(f"{slot}: {term!r} has look-alike labels, a synonym would be ambiguous")
                continue
            usable = [s for s in synonyms_for(term) if vocab[normalise(s)] == 0 and s != term]
            if not usable:  # the synonym is itself a stored label ("WBC" is a urine test in MIMIC)
                reasons.append(f"{slot}: every synonym of {term!r} is itself a stored label")
                continue
            synonym = usable[int(rng.integers(0, len(usable)))]
            question = task.question_with(**{slot: synonym})
            if question[:1].islower():
                question = question[0].upper() + question[1:]
            trap = task.gold_with(**{slot: synonym})  # the synonym taken literally matches nothing
            return NoisyItem(question=question, patch=Patch(), gold_sql=task.gold_sql, expected=task.outcome,
                             trap_sql=trap.sql(dialect=DIALECT),
                             params={"slot": slot, "term": term, "synonym": synonym})
        raise NotApplicable("; ".join(reasons))
