"""Sample slot values, execute gold SQL in Polars, and keep the tasks whose answers are usable.

Within each intent x scope cell the templates take turns (round robin), each walking its own
seeded permutation of slot candidates, so a cell is balanced across its templates and a template
that runs out of candidates leaves its share to the others.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import numpy as np
import polars as pl

from pipeline import jsonvalues
from pipeline.ehr.access import EHR
from pipeline.sql.complexity import sql_components
from pipeline.sql.dialects import export
from pipeline.sql.schema import DIALECT
from pipeline.tasks.answers import Rejection, extract_answer
from pipeline.tasks.engine import render, run_polars
from pipeline.tasks.template import INTENTS, SCOPES, Template

TASK_SCHEMA = {
    "task_id": pl.String, "template_id": pl.String, "intent": pl.String, "scope": pl.String,
    "question": pl.String, "phrasing": pl.Int64, "slots": pl.String, "subject_ids": pl.List(pl.Int64),
    "gold_sql": pl.String,
    "gold_sql_dialects": pl.String, "answer": pl.String, "answer_spec": pl.String, "evidence": pl.String,
    "sql_components": pl.String,
}
REJECTED_SCHEMA = {"template_id": pl.String, "intent": pl.String, "scope": pl.String, "slots": pl.String,
                   "reason": pl.String, "detail": pl.String}


@dataclass
class SamplingConfig:
    per_cell: int = 500
    seed: int = 0
    attempts_per_task: int = 4  # a template gives up after this many tries per task it still owes
    evidence_rows_cap: int = 200


@dataclass
class SamplingResult:
    tasks: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # template id -> reason
    seconds: float = 0.0


def stable_seed(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest(), "big")


def format_slot(value: Any) -> str:
    """How a slot value reads inside a question."""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d") if value.time() == datetime.min.time() else value.strftime(
            "%Y-%m-%d %H:%M:%S")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def candidates(ehr: EHR, template: Template) -> pl.DataFrame:
    """Distinct, complete slot rows in a fixed order (so sampling depends only on the seed)."""
    frame = ehr.sql(template.slot_sql).drop_nulls().unique()
    return frame.sort(frame.columns)


def instantiate(ehr: EHR, template: Template, slots: dict[str, Any], phrasing: int,
                evidence_cap: int) -> dict[str, Any]:
    """One task from one slot row; raises Rejection when the answer is unusable."""
    gold = render(template.gold_tree or template.gold_sql, slots)
    answer, unit = extract_answer(run_polars(ehr, gold), template.answer)
    evidence_sql = render(template.evidence.sql, slots)
    rows = run_polars(ehr, evidence_sql).select(list(template.evidence.keys)).unique().sort(
        list(template.evidence.keys))
    if rows.height == 0:
        raise Rejection("no_evidence", f"no {template.evidence.table} rows support the answer")
    question = template.questions[phrasing].format(**{k: format_slot(v) for k, v in slots.items()})
    slots_json = jsonvalues.dumps(slots)
    subject = slots.get("subject_id")
    return {
        "task_id": f"{template.id}:{hashlib.blake2b(slots_json.encode(), digest_size=5).hexdigest()}",
        "template_id": template.id, "intent": template.intent, "scope": template.scope,
        "question": question, "phrasing": phrasing, "slots": slots_json,
        "subject_ids": [int(subject)] if subject is not None else [],
        "gold_sql": gold.sql(dialect=DIALECT), "gold_sql_dialects": jsonvalues.dumps(export(gold)),
        "answer": jsonvalues.dumps({"value": answer, "unit": unit}),
        "answer_spec": jsonvalues.dumps(template.answer.to_dict()),
        "evidence": jsonvalues.dumps({**template.evidence.to_dict(), "sql": evidence_sql.sql(dialect=DIALECT),
                             "n_rows": rows.height, "rows": rows.head(evidence_cap).to_dicts()}),
        "sql_components": jsonvalues.dumps(sql_components(gold)),
    }


class TemplateCursor:
    """A template's seeded walk through its slot candidates."""

    def __init__(self, ehr: EHR, template: Template, seed: int):
        self.template = template
        self.frame = candidates(ehr, template)
        rng = np.random.default_rng(stable_seed(seed, template.id))
        self.order = rng.permutation(self.frame.height)
        self.phrasings = rng.integers(0, len(template.questions), size=self.frame.height)
        self.position = 0
        self.accepted = 0
        self.attempts = 0

    def next(self) -> tuple[dict[str, Any], int] | None:
        if self.position >= self.frame.height:
            return None
        i = int(self.order[self.position])
        self.position += 1
        self.attempts += 1
        return self.frame.row(i, named=True), int(self.phrasings[self.position - 1])


def sample_tasks(ehr: EHR, templates: dict[str, Template], cfg: SamplingConfig,
                 progress: bool = True) -> SamplingResult:
    """Sample `cfg.per_cell` tasks in each intent x scope cell (fewer where candidates run out)."""
    from tqdm.auto import tqdm

    start = time.perf_counter()
    result = SamplingResult()
    cells: dict[tuple[str, str], list[Template]] = defaultdict(list)
    for template in templates.values():
        missing = sorted(template.tables - set(ehr))
        if missing:
            result.skipped[template.id] = f"table(s) {missing} missing from source {ehr.manifest['source']}"
            continue
        cells[(template.intent, template.scope)].append(template)
    seen_questions: set[str] = set()
    bar = tqdm(total=cfg.per_cell * len(cells), desc="tasks", unit="task", disable=not progress)
    for cell in [(i, s) for i in INTENTS for s in SCOPES if (i, s) in cells]:
        cursors = [TemplateCursor(ehr, t, cfg.seed) for t in cells[cell]]
        accepted = 0
        quota = math.ceil(cfg.per_cell / len(cursors))
        active = list(cursors)
        while accepted < cfg.per_cell and active:
            for cursor in list(active):
                if accepted >= cfg.per_cell:
                    break
                if cursor.attempts - cursor.accepted >= quota * cfg.attempts_per_task:
                    active.remove(cursor)  # mostly rejected: stop spending time on it
                    continue
                drawn = cursor.next()
                if drawn is None:
                    active.remove(cursor)
                    continue
                slots, phrasing = drawn
                try:
                    task = instantiate(ehr, cursor.template, slots, phrasing, cfg.evidence_rows_cap)
                    key = " ".join(task["question"].lower().split())
                    if key in seen_questions:
                        raise Rejection("duplicate", "the same question was already sampled")
                    seen_questions.add(key)
                except Rejection as rej:
                    result.rejected.append({"template_id": cursor.template.id, "intent": cell[0],
                                            "scope": cell[1], "slots": jsonvalues.dumps(slots),
                                            "reason": rej.reason, "detail": rej.detail})
                    continue
                result.tasks.append(task)
                cursor.accepted += 1
                accepted += 1
                bar.update(1)
    bar.close()
    result.seconds = time.perf_counter() - start
    return result


def stats(result: SamplingResult, templates: dict[str, Template]) -> dict[str, Any]:
    """Counts per cell and template, rejection reasons, and the sql_components distribution."""
    per_template = Counter(t["template_id"] for t in result.tasks)
    rejected_by_reason = Counter(r["reason"] for r in result.rejected)
    components = [json.loads(t["sql_components"]) for t in result.tasks]
    totals = [c["total"] for c in components]
    cells: dict[str, dict[str, int]] = {}
    for intent in INTENTS:
        for scope in SCOPES:
            in_cell = [t for t in templates.values() if (t.intent, t.scope) == (intent, scope)]
            cells[f"{intent}/{scope}"] = {
                "templates": len(in_cell),
                "templates_skipped": sum(1 for t in in_cell if t.id in result.skipped),
                "tasks": sum(per_template[t.id] for t in in_cell)}
    template_components = {}
    for t in templates.values():
        if t.gold_tree is not None:
            template_components[t.id] = sql_components(t.gold_tree)["total"]
    return {
        "n_tasks": len(result.tasks), "n_rejected": len(result.rejected), "n_sampled": len(result.tasks) + len(
            result.rejected),
        "rejected_by_reason": dict(sorted(rejected_by_reason.items())),
        "cells": cells,
        "tasks_per_template": {t: per_template.get(t, 0) for t in templates},
        "skipped_templates": dict(sorted(result.skipped.items())),
        "sql_components": {
            "mean_total_per_task": round(float(np.mean(totals)), 3) if totals else None,
            "mean_total_per_template": round(float(np.mean(list(template_components.values()))), 3)
            if template_components else None,
            "distribution_total": dict(sorted(Counter(totals).items())),
            "mean_by_component": {k: round(float(np.mean([c[k] for c in components])), 3)
                                  for k in (components[0] if components else {})},
            "per_template": template_components,
        },
    }
