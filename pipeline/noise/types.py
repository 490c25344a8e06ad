"""The data a noise operator reads (a clean Task) and writes (a NoisyItem with its expected Outcome)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from pipeline import jsonvalues
from pipeline.ehr.patch import Patch
from pipeline.tasks.engine import render
from pipeline.tasks.sample import format_slot
from pipeline.tasks.template import AnswerSpec, Template

LEVELS = ("record", "value", "query")
ABSTAIN_REASONS = ("missing_evidence", "conflicting_evidence", "implausible_value", "invalid_premise",
                   "unknown_entity")


@dataclass(frozen=True)
class Outcome:
    """What a robust agent should return: the answer (with unit) or an abstention with its reason."""

    kind: str  # "answer" | "abstain"
    value: Any = None
    unit: str | None = None
    reason: str | None = None

    @classmethod
    def answer(cls, value: Any, unit: str | None = None) -> Outcome:
        return cls("answer", value=value, unit=unit)

    @classmethod
    def abstain(cls, reason: str) -> Outcome:
        if reason not in ABSTAIN_REASONS:
            raise ValueError(f"abstention reason {reason!r} is not one of {ABSTAIN_REASONS}")
        return cls("abstain", reason=reason)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "unit": self.unit, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Outcome:
        return cls(d["kind"], d.get("value"), d.get("unit"), d.get("reason"))


@dataclass(frozen=True)
class Task:
    """A clean task as the `tasks` stage wrote it, with its template at hand."""

    task_id: str
    template: Template
    question: str
    phrasing: int
    slots: dict[str, Any]
    subject_ids: tuple[int, ...]
    gold_sql: str
    value: Any
    unit: str | None
    evidence: dict[str, Any]

    @property
    def intent(self) -> str:
        return self.template.intent

    @property
    def scope(self) -> str:
        return self.template.scope

    @property
    def spec(self) -> AnswerSpec:
        return self.template.answer

    @property
    def outcome(self) -> Outcome:
        return Outcome.answer(self.value, self.unit)

    def question_with(self, **slots: Any) -> str:
        """This task's phrasing with some slot values changed (the noisy question)."""
        merged = {**self.slots, **slots}
        return self.template.questions[self.phrasing].format(**{k: format_slot(v) for k, v in merged.items()})

    def gold_with(self, **slots: Any) -> exp.Expression:
        """The template's gold SQL rendered with some slot values changed."""
        return render(self.template.gold_tree or self.template.gold_sql, {**self.slots, **slots})

    def evidence_sql_with(self, **slots: Any) -> exp.Expression:
        return render(self.template.evidence.sql, {**self.slots, **slots})

    @classmethod
    def from_row(cls, row: dict[str, Any], templates: dict[str, Template]) -> Task:
        answer = json.loads(row["answer"])
        return cls(task_id=row["task_id"], template=templates[row["template_id"]], question=row["question"],
                   phrasing=int(row["phrasing"]), slots=jsonvalues.loads(row["slots"]),
                   subject_ids=tuple(row["subject_ids"]), gold_sql=row["gold_sql"], value=answer["value"],
                   unit=answer["unit"], evidence=jsonvalues.loads(row["evidence"]))


@dataclass(frozen=True)
class NoisyItem:
    """The noisy half of a pair: question, patch, reference SQL, expected outcome and the trap."""

    question: str
    patch: Patch
    gold_sql: str  # runs on base + patch and yields the expected outcome (empty/NULL for abstentions)
    expected: Outcome
    trap_sql: str  # what a careless agent would run on the noisy item
    params: dict[str, Any] = field(default_factory=dict)
