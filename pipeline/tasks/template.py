"""The task template: what a YAML block under `templates/` declares, and its validation.

A template is a question about the EHR with `{slot}`s, a slot query that picks values that exist
in the data, a gold SQL program with `:slot` placeholders, the shape of its answer, and the
evidence rows that support it. Slot values enter SQL only through sqlglot literals.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from pipeline.sql.schema import SQLValidationError, parse, referenced_tables, validate

INTENTS = ("demographics", "vitals", "medications", "cost", "labs", "diagnoses")
SCOPES = ("patient", "population")
ANSWER_TYPES = ("number", "integer", "string", "boolean", "datetime", "list")


class TemplateError(ValueError):
    """A template that cannot be used; the message names the file and template id."""


@dataclass(frozen=True)
class AnswerSpec:
    """How the gold result becomes an answer and how a submission is compared with it."""

    type: str
    column: str = "answer"
    unit: str | None = None  # a fixed unit, or None
    unit_column: str | None = None  # or a gold output column holding the unit
    tolerance: float = 0.0  # absolute, for number answers
    ordered: bool = False  # lists: does order matter?
    item_type: str = "string"  # lists: type of each element
    size: int | None = None  # lists: exact length (top-k); a tie at the cut-off makes another length

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "column": self.column, "unit": self.unit, "unit_column": self.unit_column,
                "tolerance": self.tolerance, "ordered": self.ordered, "item_type": self.item_type,
                "size": self.size}


@dataclass(frozen=True)
class EvidenceSpec:
    """The rows of `table` that support the answer, found by `sql` (returns the `keys` columns)."""

    table: str
    keys: tuple[str, ...]
    sql: str

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "keys": list(self.keys), "sql": self.sql}


@dataclass(frozen=True)
class Template:
    id: str
    intent: str
    scope: str
    questions: tuple[str, ...]
    slot_sql: str
    gold_sql: str
    answer: AnswerSpec
    evidence: EvidenceSpec
    source_file: str
    tables: frozenset[str] = field(default_factory=frozenset)  # every table any of its SQL reads
    slots: tuple[str, ...] = ()
    gold_tree: exp.Expression | None = field(default=None, compare=False, repr=False)

    @property
    def where(self) -> str:
        return f"{self.source_file}: template {self.id!r}"


def question_slots(question: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(question) if name}


def placeholders(tree: exp.Expression) -> set[str]:
    return {p.name for p in tree.find_all(exp.Placeholder)}


def _require(block: dict[str, Any], key: str, where: str) -> Any:
    if key not in block or block[key] in (None, "", []):
        raise TemplateError(f"{where}: missing required field {key!r}")
    return block[key]


def _checked_sql(sql: str, what: str, where: str) -> exp.Expression:
    try:
        tree = parse(sql)
        validate(tree)
    except SQLValidationError as err:
        raise TemplateError(f"{where}: {what} {err}") from err
    if not isinstance(tree, exp.Query):
        raise TemplateError(f"{where}: {what} must be a SELECT query")
    return tree


def _output_columns(tree: exp.Query, what: str, where: str) -> list[str]:
    names = []
    for projection in tree.selects:
        if not isinstance(projection, exp.Alias) and not isinstance(projection, exp.Column):
            raise TemplateError(f"{where}: {what} output {projection.sql()!r} has no alias; alias every "
                                "output column (e.g. `... AS answer`)")
        names.append(projection.alias_or_name)
    return names


_ID = re.compile(r"^[a-z][a-z0-9_.]*$")


def parse_template(block: dict[str, Any], source_file: str) -> Template:
    """Validate one YAML block; every problem names the file and the template id."""
    tid = block.get("id")
    if not isinstance(tid, str) or not _ID.match(tid):
        raise TemplateError(f"{source_file}: template without a valid 'id' (lower-case, dots, underscores): "
                            f"{tid!r}")
    where = f"{source_file}: template {tid!r}"
    unknown_fields = set(block) - {"id", "intent", "scope", "questions", "slots", "gold_sql", "answer",
                                   "evidence", "description"}
    if unknown_fields:
        raise TemplateError(f"{where}: unknown field(s) {sorted(unknown_fields)}")
    intent = _require(block, "intent", where)
    if intent not in INTENTS:
        raise TemplateError(f"{where}: intent {intent!r} is not one of {INTENTS}")
    scope = _require(block, "scope", where)
    if scope not in SCOPES:
        raise TemplateError(f"{where}: scope {scope!r} is not one of {SCOPES}")
    questions = tuple(_require(block, "questions", where))
    if len(questions) < 2:
        raise TemplateError(f"{where}: needs at least two question phrasings")

    slot_sql = str(_require(block, "slots", where))
    slot_tree = _checked_sql(slot_sql, "slot SQL", where)
    if placeholders(slot_tree):
        raise TemplateError(f"{where}: slot SQL cannot use placeholders {sorted(placeholders(slot_tree))}")
    slots = tuple(_output_columns(slot_tree, "slot SQL", where))  # type: ignore[arg-type]

    gold_sql = str(_require(block, "gold_sql", where))
    gold_tree = _checked_sql(gold_sql, "gold SQL", where)
    gold_columns = _output_columns(gold_tree, "gold SQL", where)  # type: ignore[arg-type]

    for i, q in enumerate(questions):
        unknown = question_slots(q) - set(slots)
        if unknown:
            raise TemplateError(f"{where}: question {i + 1} uses unknown slot(s) {sorted(unknown)}; slots "
                                f"(the slot SQL's output columns) are {list(slots)}")
        if question_slots(q) != question_slots(questions[0]):
            raise TemplateError(f"{where}: question {i + 1} uses slots {sorted(question_slots(q))} but question "
                                f"1 uses {sorted(question_slots(questions[0]))}; phrasings must agree")
    unknown = placeholders(gold_tree) - set(slots)
    if unknown:
        raise TemplateError(f"{where}: gold SQL uses unknown slot(s) {sorted(unknown)}; slots are {list(slots)}")

    a = dict(_require(block, "answer", where))
    if a.get("type") not in ANSWER_TYPES:
        raise TemplateError(f"{where}: answer.type {a.get('type')!r} is not one of {ANSWER_TYPES}")
    answer = AnswerSpec(type=a["type"], column=a.get("column", "answer"), unit=a.get("unit"),
                        unit_column=a.get("unit_column"), tolerance=float(a.get("tolerance", 0.0)),
                        ordered=bool(a.get("ordered", False)), item_type=a.get("item_type", "string"),
                        size=a.get("size"))
    for col in (answer.column, answer.unit_column):
        if col is not None and col not in gold_columns:
            raise TemplateError(f"{where}: answer column {col!r} is not a gold SQL output column "
                                f"({gold_columns})")

    e = dict(_require(block, "evidence", where))
    ev_sql = str(_require(e, "sql", where))
    ev_tree = _checked_sql(ev_sql, "evidence SQL", where)
    ev = EvidenceSpec(table=str(_require(e, "table", where)), keys=tuple(_require(e, "keys", where)), sql=ev_sql)
    if ev.table not in referenced_tables(ev_tree):
        raise TemplateError(f"{where}: evidence.table {ev.table!r} is not read by the evidence SQL")
    missing = [k for k in ev.keys if k not in _output_columns(ev_tree, "evidence SQL", where)]  # type: ignore[arg-type]
    if missing:
        raise TemplateError(f"{where}: evidence SQL does not return the evidence key column(s) {missing}")
    unknown = placeholders(ev_tree) - set(slots)
    if unknown:
        raise TemplateError(f"{where}: evidence SQL uses unknown slot(s) {sorted(unknown)}")

    tables = frozenset(referenced_tables(slot_tree) | referenced_tables(gold_tree) | referenced_tables(ev_tree))
    return Template(id=tid, intent=intent, scope=scope, questions=questions, slot_sql=slot_sql, gold_sql=gold_sql,
                    answer=answer, evidence=ev, source_file=source_file, tables=tables, slots=slots,
                    gold_tree=gold_tree)
