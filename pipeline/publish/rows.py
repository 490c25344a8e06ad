"""The rows of the published configs: `pairs` (one per pair), `clean` and `noise` (one per question).

`clean` and `noise` share one schema — what an agent is asked (question, scope, intent), the EHR it
is asked over (`patch`: the edits to apply to the base EHR, empty for clean questions) and what a
grader needs (`answer`, `expected_status`, and `grading`: the verifier's `Expected` as JSON). Complex
values are JSON text (datetimes tagged `{"$datetime": ...}`, see `pipeline.jsonvalues`), so every
Parquet reader can open the shards.

`sql_only` content drops every row value of the source EHR (answers, patches, evidence rows, trap
results, operator parameters) and keeps questions, SQL, operators and outcome kinds: what may leave
a credentialed MIMIC-IV environment.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from pipeline import jsonvalues
from pipeline.noise.clinical import conversions_for
from pipeline.noise.operators.unknown_entity import RECORD  # the table of record of each entity id
from pipeline.noise.types import Outcome
from pipeline.tasks.template import AnswerSpec
from pipeline.verifier import Expected, UnitConversion

# Reading a dictionary table is part of checking an event table's evidence (is the item there at all?).
DICTIONARIES = {"labevents": ("d_labitems",), "chartevents": ("d_items",), "inputevents": ("d_items",),
                "outputevents": ("d_items",), "procedureevents": ("d_items",), "datetimeevents": ("d_items",),
                "diagnoses_icd": ("d_icd_diagnoses",), "procedures_icd": ("d_icd_procedures",)}
VALUE_COLUMNS = ("answer", "patch", "noise_params", "evidence", "trap", "slots")  # dropped by sql_only


def grading(row: dict[str, Any], outcome: Outcome, recoverable: bool, params: dict[str, Any] | None = None) -> str:
    """The verifier's Expected for one question of a pair row, as JSON text."""
    spec = AnswerSpec(**json.loads(row["answer_spec"]))
    slots = jsonvalues.loads(row["slots"])
    evidence = json.loads(row["evidence"])
    entities = {k: slots[k] for k in RECORD if isinstance(slots.get(k), int)}
    tables = [evidence["table"], *DICTIONARIES.get(evidence["table"], ())]
    params = params or {}
    if params.get("slot") in RECORD and "unknown_id" in params:  # unknown_entity: the question names another id
        entities[params["slot"]] = int(params["unknown_id"])
        tables.append(RECORD[params["slot"]])
    if params.get("key") in RECORD:  # orphan_record: the parent the record points at
        tables.append(RECORD[params["key"]])
    conversions = tuple(UnitConversion(c.unit, c.to, c.scale, c.offset, c.decimals)
                        for label in slots.values() if isinstance(label, str)
                        for c in conversions_for(label, outcome.unit))
    expected = Expected(outcome=outcome, spec=spec, recoverable=recoverable, conversions=conversions,
                        evidence_tables=tuple(dict.fromkeys(tables)), entity_ids=tuple(sorted(entities.values())))
    return jsonvalues.dumps(expected.to_dict())


def _status(outcome: Outcome) -> str:
    return "answered" if outcome.kind == "answer" else "abstained"


def question_row(row: dict[str, Any], variant: str) -> dict[str, Any]:
    """The clean or noisy question of a pair row, as the `clean` / `noise` configs store it."""
    answer = json.loads(row["answer"])
    clean = Outcome.answer(answer["value"], answer["unit"])
    spec = json.loads(row["answer_spec"])
    common = {"split": row["split"], "variant": variant, "intent": row["intent"], "scope": row["scope"],
              "template_id": row["template_id"], "task_id": row["task_id"], "subject_ids": row["subject_ids"],
              "answer_type": spec["type"]}
    if variant == "clean":
        return {"id": row["task_id"], **common, "question": row["question"], "gold_sql": row["gold_sql"],
                "answer": jsonvalues.dumps(clean.value), "unit": clean.unit, "expected_status": "answered",
                "abstain_reason": None, "patch": "[]", "noise_level": None, "noise_op": None, "noise_params": "{}",
                "recoverable": True, "trap_sql": None, "grading": grading(row, clean, True)}
    outcome = Outcome.from_dict(jsonvalues.loads(row["expected"]))
    params = jsonvalues.loads(row["noise_params"])
    return {"id": row["pair_id"], **common, "question": row["noisy_question"], "gold_sql": row["noisy_gold_sql"],
            "answer": jsonvalues.dumps(outcome.value), "unit": outcome.unit, "expected_status": _status(outcome),
            "abstain_reason": outcome.reason, "patch": row["patch"], "noise_level": row["noise_level"],
            "noise_op": row["noise_op"], "noise_params": row["noise_params"], "recoverable": row["recoverable"],
            "trap_sql": row["trap_sql"], "grading": grading(row, outcome, row["recoverable"], params)}


def config_rows(pairs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """config name -> rows: `pairs` as stored plus both gradings, `clean` once per task, `noise` per pair."""
    pair_ids: dict[str, list[str]] = defaultdict(list)
    for row in pairs:
        pair_ids[row["task_id"]].append(row["pair_id"])
    clean: dict[str, dict[str, Any]] = {}
    noise, full = [], []
    for row in pairs:
        c, n = question_row(row, "clean"), question_row(row, "noise")
        clean.setdefault(row["task_id"], {**c, "pair_ids": pair_ids[row["task_id"]]})
        noise.append({**n, "pair_ids": [row["pair_id"]]})
        full.append({**row, "grading_clean": c["grading"], "grading_noise": n["grading"]})
    return {"pairs": full, "clean": list(clean.values()), "noise": noise}


def scrub(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`sql_only`: the same rows without any value read from the EHR (see the module docstring)."""
    out = []
    for row in rows:
        row = {k: (None if k in VALUE_COLUMNS else v) for k, v in row.items()}
        for key in ("grading", "grading_clean", "grading_noise", "expected"):
            if row.get(key) is not None:
                row[key] = _scrub_outcome(row[key])
        if "unit" in row and row.get("unit") is not None:
            row["unit"] = None
        out.append(row)
    return out


def _scrub_outcome(text: str) -> str:
    data = jsonvalues.loads(text)
    outcome = data.get("outcome", data)
    outcome["value"] = None
    outcome["unit"] = None
    data.pop("conversions", None)
    return jsonvalues.dumps(data)
