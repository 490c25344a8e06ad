"""false_premise: the question presupposes an event that never happened — a lab, drug, procedure,
diagnosis or vital asked about in an admission (or ICU stay) where it was never recorded, though the
same patient had it in another one. The agent should point out the premise is false, not answer
from the other admission."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.registry import register
from pipeline.noise.sqltools import guard, relax
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.noise.verify import is_abstention, usable_answer
from pipeline.sql.schema import DIALECT, parse

# The event named by the question, and the admission or stay it is asked about.
EVENT_SLOTS = ("lab", "drug", "medication", "procedure", "diagnosis", "vital")
CONTAINERS = {"hadm_id": ("admissions", "admittime"), "stay_id": ("icustays", "intime")}
ABSTAIN = Outcome.abstain("invalid_premise")
_NAMED = re.compile(r"[A-Za-z]{2,}")



def _is_empty(ehr: EHR, sql: str) -> bool:
    try:
        return ehr.sql(sql).is_empty()
    except Exception:  # an evidence query that does not run proves nothing
        return False



@register
class FalsePremise(NoiseOperator):
    name = "false_premise"
    level = "query"
    recoverable = False
    description = ("Asks about a lab, drug, procedure or vital in an admission where it never happened (only in "
                   "another); reject the premise.")
    # Counts and yes/no questions ("how many", "was X given") do not presuppose the event: 0 or "no" is a
    # fair answer there. Only value questions, and the yes/no questions listed here, do.
    defaults = {"answer_types": ["number", "string", "datetime", "list"],
                "presupposing_templates": ["labs.patient.latest_above_upper_limit"],
                "max_candidates": 8}
    example_templates = ("labs.patient.last_value_in_admission", "medications.patient.initial_dose_of_drug",
                         "cost.patient.diagnosis_cost_in_admission")

    def _slots(self, task: Task) -> tuple[str, str] | None:
        container = next((c for c in CONTAINERS if c in task.slots), None)
        event = next((s for s in EVENT_SLOTS if s in task.slots and str(task.slots[s]) in task.question), None)
        if container is None or event is None or "subject_id" not in task.slots:
            return None
        return event, container

    def applicable(self, task: Task, ehr: EHR) -> bool:
        return (task.scope == "patient" and self._slots(task) is not None
                and (task.spec.type in self.params["answer_types"]
                     or task.template.id in self.params["presupposing_templates"]))

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        if not self.applicable(task, ehr):
            raise NotApplicable("needs a patient-level value question about an event in an admission or ICU stay")
        event, container = self._slots(task)  # type: ignore[misc]
        subject, here = task.slots["subject_id"], task.slots[container]
        # Every (admission, event) of this patient the template could ask about.
        try:
            rows = ehr.sql(exp.select(container, event).distinct()
                           .from_(parse(task.template.slot_sql).subquery("s"))
                           .where(f"s.subject_id = {int(subject)}").sql(dialect=DIALECT))
        except Exception as err:  # a table the template needs is missing from this source
            raise NotApplicable(f"cannot list the patient's {event}s: {err}") from err
        seen_here = set(rows.filter(rows[container] == here)[event].to_list())
        elsewhere: dict[str, list[Any]] = {}
        for where, term in rows.filter(rows[container] != here).iter_rows():
            if term not in seen_here:
                elsewhere.setdefault(term, []).append(where)
        terms = sorted(t for t in elsewhere if _NAMED.search(str(t)))  # not the one-letter serum indices H, I, L
        if not terms:
            raise NotApplicable(f"the patient has no {event} recorded in another {container} but not in this one")
        order = [terms[int(i)] for i in rng.permutation(len(terms))][: int(self.params["max_candidates"])]
        for term in order:
            evidence = task.evidence_sql_with(**{event: term}).sql(dialect=DIALECT)
            if not _is_empty(ehr, evidence):
                continue  # recorded here after all (in a form the slot query leaves out)
            gold = task.gold_with(**{event: term})
            guarded = not is_abstention(task, ehr, gold.sql(dialect=DIALECT))
            if guarded:  # e.g. a sum of no charges reads 0: it holds only if the event happened
                gold = guard(gold, f"EXISTS ({evidence})")
            trap, trap_kind = relax(task.gold_with(**{event: term}), {container}), f"{container}_filter_dropped"
            if usable_answer(task, ehr, trap.sql(dialect=DIALECT)) is None:
                # the careless agent reports the value from the other admission/stay where it found the event
                other = self._nearest(ehr, container, here, elsewhere[term])
                trap, trap_kind = task.gold_with(**{event: term, container: other}), f"other_{container}"
                if usable_answer(task, ehr, trap.sql(dialect=DIALECT)) is None:
                    continue
            return NoisyItem(question=task.question_with(**{event: term}), patch=Patch(),
                             gold_sql=gold.sql(dialect=DIALECT), expected=ABSTAIN,
                             trap_sql=trap.sql(dialect=DIALECT),
                             params={"slot": event, "asked": term, "original": task.slots[event], container: here,
                                     "occurs_in": sorted(elsewhere[term]), "guarded": guarded, "trap": trap_kind})
        raise NotApplicable(f"no {event} of another {container} makes a false premise with a plausible careless answer")

    @staticmethod
    def _nearest(ehr: EHR, container: str, here: int, others: list[int]) -> int:
        """The other admission/stay closest in time to the one asked about."""
        table, start = CONTAINERS[container]
        ids = ", ".join(str(int(i)) for i in {here, *others})
        times = dict(ehr.sql(f"SELECT {container}, {start} FROM {table} WHERE {container} IN ({ids})").iter_rows())
        if here not in times:
            return min(others)
        return min(others, key=lambda o: (abs((times.get(o, times[here]) - times[here]).total_seconds()), o))
