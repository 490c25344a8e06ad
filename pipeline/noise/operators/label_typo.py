"""label_typo: the asked lab, chart item or drug is misspelled in the data; match it fuzzily and answer.

A data-entry slip in a name as it is stored. Lab tests and chart items: in a patient question the
patient's results (of the asked admission or stay) point to a duplicate dictionary entry with the
misspelled label (d_labitems / d_items, as a local interface mapping creates them), so other patients
are untouched; in a population question the dictionary label itself is misspelled. Drugs: the
free-text name of orders (prescriptions.drug, pharmacy.medication, emar.medication) is misspelled:
the patient's orders, or a few patients' orders in a population question. The question still uses the
correct name, so an exact match finds nothing, or too little. The noisy gold SQL matches both
spellings, as a fuzzy search would.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import polars as pl
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch, RowEdit
from pipeline.ehr.schema import TABLES
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.clinical import evidence_frame
from pipeline.noise.registry import register
from pipeline.noise.terms import misspell
from pipeline.noise.types import NoisyItem, Task
from pipeline.sql.schema import DIALECT, parse, referenced_tables
from pipeline.tasks.template import placeholders

# slot -> dictionary table whose `label` names the item (every result of the item refers to it)
DICTIONARY_SLOTS = {"lab": "d_labitems", "vital": "d_items"}
# slot -> tables whose rows carry the name as free text (the first one the gold reads is used)
ROW_SLOTS = {"drug": ("prescriptions",), "drug_a": ("prescriptions",), "drug_b": ("prescriptions",),
             "medication": ("emar", "pharmacy")}
# dictionary -> the event table whose rows point to it, and the key of those rows
EVENT_TABLES = {"d_labitems": ("labevents", ("labevent_id",)),
                "d_items": ("chartevents", ("stay_id", "charttime", "itemid"))}
NAME_COLUMN = {"prescriptions": "drug", "pharmacy": "medication", "emar": "medication"}
ROW_KEYS = {"prescriptions": ("pharmacy_id", "drug_type", "drug"), "pharmacy": ("pharmacy_id",), "emar": ("emar_id",)}
_WORD = re.compile(r"[A-Za-z]{5,}")


@lru_cache(maxsize=512)
def _gold_reads(gold_sql: str) -> tuple[frozenset[str], frozenset[str]]:
    tree = parse(gold_sql)
    return frozenset(placeholders(tree)), frozenset(referenced_tables(tree))


def either(sql: str, term: str, typo: str) -> exp.Expression:
    """The query with `<column> = 'term'` widened to `<column> IN ('term', 'typo')` (both spellings)."""
    tree = parse(sql)
    for node in list(tree.find_all(exp.EQ, exp.In)):
        if isinstance(node, exp.EQ):
            col, lit = (node.this, node.expression) if isinstance(node.this, exp.Column) else \
                (node.expression, node.this)
            if isinstance(col, exp.Column) and isinstance(lit, exp.Literal) and lit.is_string and lit.this == term:
                node.replace(exp.In(this=col.copy(), expressions=[exp.Literal.string(term), exp.Literal.string(typo)]))
        elif any(isinstance(e, exp.Literal) and e.is_string and e.this == term for e in node.expressions):
            node.append("expressions", exp.Literal.string(typo))
    return tree


@register
class LabelTypo(NoiseOperator):
    name = "label_typo"
    level = "value"
    recoverable = True
    description = ("The asked lab, chart item or drug is misspelled in the data (dictionary label or order "
                   "text); find it by fuzzy matching and answer.")
    defaults = {"max_rows": 200, "max_population_rows": 50}
    example_templates = ("labs.patient.last_value_in_admission", "labs.population.distinct_patients_tested_in_decade",
                         "medications.patient.count_emar_administrations",
                         "medications.population.count_patients_drug_in_decade",
                         "medications.patient.hours_to_first_dose")

    def _slots(self, task: Task, ehr: EHR) -> list[tuple[str, str]]:
        """(slot, table holding the name) for every name slot of the task that can be misspelled."""
        used, tables = _gold_reads(task.template.gold_sql)
        out = []
        for slot, value in sorted(task.slots.items()):
            if slot not in used or not isinstance(value, str) or not _WORD.search(value):
                continue
            if slot in DICTIONARY_SLOTS and DICTIONARY_SLOTS[slot] in tables:
                out.append((slot, DICTIONARY_SLOTS[slot]))
            elif slot in ROW_SLOTS:
                table = next((t for t in ROW_SLOTS[slot] if t in tables and t in ehr), None)
                if table is not None:
                    out.append((slot, table))
        return out

    def applicable(self, task: Task, ehr: EHR) -> bool:
        return bool(self._slots(task, ehr))

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        slots = self._slots(task, ehr)
        if not slots:
            raise NotApplicable("no lab, chart item or drug name to misspell")
        slot, table = slots[int(rng.integers(0, len(slots)))]
        term = task.slots[slot]
        typo = misspell(term, rng)
        column = "label" if table in DICTIONARY_SLOTS.values() else NAME_COLUMN[table]
        if typo == term or ehr[table].filter(pl.col(column) == typo).head(1).collect().height:
            raise NotApplicable("the misspelling is no slip (unchanged, or another name in the data)")
        if table in DICTIONARY_SLOTS.values() and task.scope == "patient":
            edits, where = self._patient_item(task, ehr, table, term, typo)
        elif table in DICTIONARY_SLOTS.values():
            ids = ehr[table].filter(pl.col("label") == term).select("itemid").unique().collect()["itemid"].to_list()
            edits = [RowEdit("update", table, where={"itemid": i}, values={"label": typo}) for i in sorted(ids)]
            where = f"{len(ids)} dictionary row(s)"
        else:
            rows = self._rows(task, ehr, slot, table, column, rng)
            keys = list(ROW_KEYS[table])
            edits = [RowEdit("update", table, where={k: r[k] for k in keys}, values={column: typo})
                     for r in rows.select(keys).to_dicts()]
            where = f"{rows.height} {table} row(s) of {rows['subject_id'].n_unique()} patient(s)"
        if not edits:
            raise NotApplicable("no row carries the name (the answer is a no)")
        return NoisyItem(question=task.question, patch=Patch(tuple(edits)),
                         gold_sql=either(task.gold_sql, term, typo).sql(dialect=DIALECT), expected=task.outcome,
                         trap_sql=task.gold_sql,
                         params={"slot": slot, "table": table, "column": column, "term": term, "misspelled": typo,
                                 "rows": where})

    def _patient_item(self, task: Task, ehr: EHR, dictionary: str, term: str,
                      typo: str) -> tuple[list[RowEdit], str]:
        """The patient's results (in the asked admission or stay) point to a duplicate dictionary entry
        whose label is misspelled, as a local interface mapping would; other patients are untouched."""
        event, keys = EVENT_TABLES[dictionary]
        items = ehr[dictionary].filter(pl.col("label") == term).collect().sort("itemid")
        frame = ehr[event].filter(pl.col("subject_id").is_in(list(task.subject_ids))
                                  & pl.col("itemid").is_in(items["itemid"].to_list()))
        for slot in ("hadm_id", "stay_id"):
            if isinstance(task.slots.get(slot), int) and slot in TABLES[event].columns:
                frame = frame.filter(pl.col(slot) == task.slots[slot])
        rows = frame.select(list(dict.fromkeys([*keys, "itemid"]))).collect().sort(list(keys))
        if rows.height > self.params["max_rows"]:
            raise NotApplicable(f"more than {self.params['max_rows']} results would be renamed")
        first_free = int(ehr[dictionary].select(pl.col("itemid").max()).collect().item()) + 1
        used = sorted(set(rows["itemid"].to_list()))
        new_id = {old: first_free + k for k, old in enumerate(used)}
        edits = [RowEdit("insert", dictionary, values={**item, "itemid": new_id[item["itemid"]], "label": typo})
                 for item in items.filter(pl.col("itemid").is_in(used)).to_dicts()]
        edits += [RowEdit("update", event, where={k: r[k] for k in keys}, values={"itemid": new_id[r["itemid"]]})
                  for r in rows.to_dicts()]
        return edits, f"{rows.height} result(s) moved to new {dictionary} item(s) {sorted(new_id.values())}"

    def _rows(self, task: Task, ehr: EHR, slot: str, table: str, column: str,
              rng: np.random.Generator) -> pl.DataFrame:
        """The orders whose name is misspelled: the patient's (in the asked admission, if one is asked),
        or, in a population question, all orders of a few patients."""
        term = task.slots[slot]
        wanted = [*ROW_KEYS[table], "subject_id"]
        if task.scope == "patient":
            frame = ehr[table].filter(pl.col("subject_id").is_in(list(task.subject_ids)) & (pl.col(column) == term))
            if isinstance(task.slots.get("hadm_id"), int):
                frame = frame.filter(pl.col("hadm_id") == task.slots["hadm_id"])
            rows = frame.select(wanted).collect().sort(list(ROW_KEYS[table]))
            if rows.height > self.params["max_rows"]:
                raise NotApplicable(f"more than {self.params['max_rows']} orders would be misspelled")
            return rows
        if task.evidence["table"] == table:
            rows = evidence_frame(task, ehr, [column, "subject_id"]).filter(pl.col(column) == term)
        else:
            rows = ehr[table].filter(pl.col(column) == term).select(list(dict.fromkeys([*wanted, column]))).collect()
            rows = rows.sort(list(ROW_KEYS[table]))
        subjects = rows["subject_id"].unique().sort().to_list()
        picked: list[pl.DataFrame] = []
        total = 0
        for i in rng.permutation(len(subjects)):
            mine = rows.filter(pl.col("subject_id") == subjects[int(i)])
            if picked and total + mine.height > self.params["max_population_rows"]:
                continue
            picked.append(mine.head(self.params["max_population_rows"]))
            total += picked[-1].height
            if total >= self.params["max_population_rows"] or len(picked) * 4 >= len(subjects):
                break
        return pl.concat(picked).select(wanted) if picked else rows.select(wanted)
