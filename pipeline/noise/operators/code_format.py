"""code_format: some ICD codes are stored in their dotted print format; normalise them and answer.

MIMIC-IV stores ICD codes without the decimal point ("4280", "I5030", procedure "3893"). Codes
that came through another interface keep the format they are printed in ("428.0", "I50.30",
"38.93"): the same code, but an exact join to d_icd_diagnoses / d_icd_procedures or an exact code
filter misses it. A few admissions' codes (a patient's: some of the asked admission's) are
affected. The noisy gold SQL reads the code tables through `REPLACE(icd_code, '.', '')`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import polars as pl
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch, RowEdit
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.clinical import replace_source
from pipeline.noise.registry import register
from pipeline.noise.types import NoisyItem, Task
from pipeline.sql.schema import DIALECT, parse, referenced_tables

CODE_TABLES = ("diagnoses_icd", "procedures_icd")
DICTIONARY = {"diagnoses_icd": "d_icd_diagnoses", "procedures_icd": "d_icd_procedures"}
TITLE_SLOTS = {"diagnosis": "diagnoses_icd", "comorbidity": "diagnoses_icd", "procedure": "procedures_icd"}


def dotted(code: str, version: int, table: str) -> str:
    """The printed form of an ICD code: ICD-9-CM "4280" -> "428.0", "E8490" -> "E849.0"; ICD-10-CM
    "I5030" -> "I50.30"; ICD-9 procedure "3893" -> "38.93". ICD-10-PCS codes have no dotted form."""
    code = code.strip()
    if table == "procedures_icd":
        cut = 2 if version == 9 else None
    elif version == 9:
        cut = 4 if code.startswith("E") else 3
    else:
        cut = 3
    if cut is None or len(code) <= cut or "." in code:
        return code
    return f"{code[:cut]}.{code[cut:]}"


@lru_cache(maxsize=512)
def _code_tables(gold_sql: str) -> frozenset[str]:
    """The code tables whose icd_code the gold reads (joins to the dictionary or filters on)."""
    tree = parse(gold_sql)
    tables = referenced_tables(tree) & set(CODE_TABLES)
    if not any(c.name == "icd_code" for c in tree.find_all(exp.Column)):
        return frozenset()
    return frozenset(tables)


@register
class CodeFormat(NoiseOperator):
    name = "code_format"
    level = "value"
    recoverable = True
    description = ("Some ICD codes are stored in dotted print format ('428.0', 'I50.30'); normalise the codes "
                   "before matching them and answer.")
    defaults = {"max_rows": 50, "max_admissions": 3, "share": 0.6}
    example_templates = ("diagnoses.patient.diagnoses_of_admission", "diagnoses.patient.primary_diagnosis",
                         "diagnoses.patient.procedures_of_admission",
                         "diagnoses.population.patients_with_diagnosis_in_decade",
                         "diagnoses.population.top3_comorbidities_of_diagnosis")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        return bool(_code_tables(task.template.gold_sql)) and bool(task.evidence["rows"])

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        tables = sorted(_code_tables(task.template.gold_sql))
        if not tables:
            raise NotApplicable("the question does not match ICD codes")
        rows = self._candidates(task, ehr, tables)
        rows = rows.with_columns(pl.struct("icd_code", "icd_version", "table").map_elements(
            lambda r: dotted(r["icd_code"], r["icd_version"], r["table"]), return_dtype=pl.String).alias("dotted"))
        rows = rows.filter(pl.col("dotted") != pl.col("icd_code"))
        if rows.is_empty():
            raise NotApplicable("no code with a dotted form among the evidence")
        chosen = self._choose(task, ehr, rows, rng)
        edits = tuple(RowEdit("update", r["table"], where={"hadm_id": r["hadm_id"], "seq_num": r["seq_num"],
                                                           "icd_code": r["icd_code"]},
                              values={"icd_code": r["dotted"]}) for r in chosen.to_dicts())
        gold = parse(task.gold_sql)
        for table in tables:
            gold = replace_source(gold, table, {"icd_code": "REPLACE(icd_code, '.', '')"})
        return NoisyItem(question=task.question, patch=Patch(edits), gold_sql=gold.sql(dialect=DIALECT),
                         expected=task.outcome, trap_sql=task.gold_sql,
                         params={"tables": sorted(set(chosen["table"])), "rows_reformatted": chosen.height,
                                 "admissions": chosen["hadm_id"].n_unique(),
                                 "examples": [f"{a} -> {b}" for a, b in
                                              chosen.select("icd_code", "dotted").head(3).rows()]})

    def _candidates(self, task: Task, ehr: EHR, tables: list[str]) -> pl.DataFrame:
        """Code rows behind the answer: the evidence rows (and, of the same admissions, the codes of a
        diagnosis the question names), the code rows of the evidence admissions, or the named code's rows."""
        evidence = task.evidence["table"]
        keys = pl.DataFrame(task.evidence["rows"])
        titled = [(t, task.slots[s]) for s, t in TITLE_SLOTS.items() if isinstance(task.slots.get(s), str)]
        lookups: list[tuple[str, pl.DataFrame]] = []
        if evidence in CODE_TABLES:
            lookups.append((evidence, keys.select("hadm_id", "seq_num")))
            lookups += [(t, keys.select("hadm_id").unique()) for t in {t for t, _ in titled} - {evidence}
                        if t in tables]
        elif "hadm_id" in keys.columns:
            lookups += [(t, keys.select("hadm_id").unique()) for t in tables]
        elif evidence == "cost":  # a billed code is event_id = hadm_id * 1000 + seq_num
            for table in tables:
                coded = keys.filter(pl.col("event_type") == table)
                lookups.append((table, coded.select((pl.col("event_id") // 1000).alias("hadm_id"),
                                                    (pl.col("event_id") % 1000).alias("seq_num"))))
        elif titled:
            return self._titled(ehr, titled)  # a cohort defined by a diagnosis: that diagnosis's codes
        else:
            raise NotApplicable("cannot tell which code rows support the answer")
        frames = []
        for table, lookup in lookups:
            frame = ehr[table]
            if task.scope == "patient":
                frame = frame.filter(pl.col("subject_id").is_in(list(task.subject_ids)))
            lookup = lookup.cast({c: pl.Int64 for c in lookup.columns})
            frames.append(frame.join(lookup.lazy(), on=lookup.columns, how="semi")
                          .select("subject_id", "hadm_id", "seq_num", "icd_code", "icd_version")
                          .with_columns(pl.lit(table).alias("table")).collect())
        return pl.concat(frames).sort("table", "hadm_id", "seq_num")

    @staticmethod
    def _titled(ehr: EHR, titled: list[tuple[str, str]]) -> pl.DataFrame:
        """Every code row of the named diagnoses/procedures."""
        frames = []
        for table, title in titled:
            codes = ehr[DICTIONARY[table]].filter(pl.col("long_title") == title).select("icd_code", "icd_version")
            frames.append(ehr[table].join(codes, on=["icd_code", "icd_version"], how="semi")
                          .select("subject_id", "hadm_id", "seq_num", "icd_code", "icd_version")
                          .with_columns(pl.lit(table).alias("table")).collect())
        return pl.concat(frames).sort("table", "hadm_id", "seq_num")

    def _relevant(self, task: Task, ehr: EHR, rows: pl.DataFrame) -> pl.Series | None:
        """Rows whose code is the one the question names (by title or by code); None if it names none."""
        mask, named = pl.Series([False] * rows.height), False
        for slot, table in TITLE_SLOTS.items():
            title = task.slots.get(slot)
            if isinstance(title, str):
                named = True
                codes = ehr[DICTIONARY[table]].filter(pl.col("long_title") == title).select(
                    "icd_code", "icd_version").collect()
                wanted = codes.to_struct().implode()
                hit = rows.select(pl.struct("icd_code", "icd_version").is_in(wanted).alias("hit"))["hit"]
                mask = mask | (hit & (rows["table"] == table))
        if isinstance(task.slots.get("icd_code"), str):
            named = True
            mask = mask | (rows["icd_code"] == task.slots["icd_code"])
        return mask if named else None

    def _choose(self, task: Task, ehr: EHR, rows: pl.DataFrame, rng: np.random.Generator) -> pl.DataFrame:
        """Which codes are reformatted: the named code's rows (if the question names one) and, of the
        same admissions, each other code with probability `share`; a population question touches a few
        admissions only. Without a named code a patient question keeps at least one code as stored, so
        a careless answer is incomplete rather than empty."""
        relevant = self._relevant(task, ehr, rows)
        if relevant is not None and not relevant.any():
            raise NotApplicable("the named code has no dotted form among the evidence")
        rows = rows.with_columns((relevant if relevant is not None else pl.lit(False)).alias("relevant"))
        if task.scope == "population":
            pool = rows.filter(pl.col("relevant")) if relevant is not None else rows
            admissions = pool["hadm_id"].unique().sort().to_list()
            n = int(rng.integers(1, min(self.params["max_admissions"], len(admissions)) + 1))
            picked = [admissions[int(i)] for i in rng.permutation(len(admissions))[:n]]
            rows = rows.filter(pl.col("hadm_id").is_in(picked))
        keep = rng.random(rows.height) < self.params["share"]
        if relevant is None:
            if not keep.any():
                keep[int(rng.integers(0, rows.height))] = True
            if task.scope == "patient" and keep.all() and rows.height > 1:
                keep[int(rng.integers(0, rows.height))] = False
        chosen = rows.filter(pl.Series(keep) | pl.col("relevant"))
        return chosen.head(self.params["max_rows"]).drop("relevant")
