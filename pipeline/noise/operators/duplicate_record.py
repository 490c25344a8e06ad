"""duplicate_record: some evidence rows are loaded twice (exact copies, ids included); de-duplicate and answer."""

from __future__ import annotations

import numpy as np
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch, RowEdit
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.evidence import evidence_rows, plain
from pipeline.noise.registry import register
from pipeline.noise.sqltools import distinct_source
from pipeline.noise.types import NoisyItem, Task
from pipeline.sql.schema import DIALECT, parse, referenced_tables
from pipeline.tasks.answers import Rejection, extract_answer, same_answer
from pipeline.tasks.engine import run_polars


def multiplicity_sensitive(task: Task) -> bool:
    """Does the gold SQL count rows (COUNT without DISTINCT, SUM, AVG) or list them with repeats?"""
    tree = task.template.gold_tree
    if tree is None:
        return False
    if task.spec.type == "list" and not tree.args.get("distinct"):
        return True
    return any(not (isinstance(n, exp.Count) and isinstance(n.this, exp.Distinct))
               for n in tree.find_all(exp.Count, exp.Sum, exp.Avg))


def careless_answer_changes(task: Task, noisy: EHR, sql: str) -> bool:
    """Does `sql` on the noisy EHR give something other than the clean answer (a tie or NULL counts)?"""
    try:
        got, _ = extract_answer(run_polars(noisy, parse(sql)), task.spec)
    except Rejection:
        return True
    return not same_answer(got, task.value, task.spec)


@register
class DuplicateRecord(NoiseOperator):
    name = "duplicate_record"
    level = "record"
    recoverable = True
    description = ("A few evidence rows are stored twice (exact copies, ids included); counts, sums and means "
                   "must de-duplicate to give the clean answer.")
    defaults = {"max_rows": 3, "max_copies": 2, "tries": 4}
    example_templates = ("labs.patient.count_tests_in_admission", "cost.patient.total_admission_cost",
                         "medications.patient.total_prescriptions")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        tree = task.template.gold_tree
        return (tree is not None and task.evidence["table"] in referenced_tables(tree)
                and task.evidence["table"] in ehr and bool(task.evidence["rows"]) and multiplicity_sensitive(task))

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        if not self.applicable(task, ehr):
            raise NotApplicable("needs a question whose gold SQL counts, sums or averages the evidence table")
        table, rows = task.evidence["table"], task.evidence["rows"]
        clean = task.gold_sql
        for _ in range(int(self.params["tries"])):
            # Duplicate at most half of the evidence (at least one row): copying every row leaves means
            # and shares unchanged, which would test nothing.
            n = int(rng.integers(1, max(1, min(int(self.params["max_rows"]), len(rows) // 2)) + 1))
            chosen = [rows[i] for i in sorted(rng.choice(len(rows), size=n, replace=False))]
            full = evidence_rows(ehr, task, chosen)
            if full.height == 0:
                raise NotApplicable("the evidence rows are not in this EHR")
            copies = [int(rng.integers(1, int(self.params["max_copies"]) + 1)) for _ in range(full.height)]
            patch = Patch(tuple(RowEdit("insert", table, values=row)
                                for row, k in zip(full.to_dicts(), copies, strict=True) for _ in range(k)))
            if careless_answer_changes(task, ehr.with_patch(patch), clean):
                break
        else:
            raise NotApplicable("duplicating evidence rows does not change the careless answer")
        gold = distinct_source(clean, table)  # exact duplicates count once
        return NoisyItem(question=task.question, patch=patch, gold_sql=gold.sql(dialect=DIALECT),
                         expected=task.outcome,
                         trap_sql=clean,  # the clean query over-counts the copies
                         params={"table": table, "rows_duplicated": full.height, "copies_inserted": len(patch.edits),
                                 "keys": [plain({k: r[k] for k in task.evidence["keys"]}) for r in full.to_dicts()]})
