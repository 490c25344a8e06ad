"""Every registered noise operator, walked through its example templates on synthetic data and the demo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.ehr import EHR
from pipeline.noise.base import NotApplicable
from pipeline.noise.registry import OPERATORS, load_builtin_operators, operator, register
from pipeline.noise.types import LEVELS, Task
from pipeline.noise.verify import expected_holds, verify
from pipeline.sql.schema import parse
from pipeline.tasks.answers import Rejection
from pipeline.tasks.engine import run_polars
from pipeline.tasks.loader import load_templates
from pipeline.tasks.sample import TemplateCursor, instantiate

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = load_templates(ROOT / "templates")
load_builtin_operators()
TRIES = 40  # candidate tasks per example template


def _tasks(ehr: EHR, template_id: str, n: int = TRIES) -> list[Task]:
    cursor = TemplateCursor(ehr, TEMPLATES[template_id], seed=1)
    tasks = []
    while len(tasks) < n and (drawn := cursor.next()) is not None and cursor.attempts < 3 * n:
        try:
            row = instantiate(ehr, cursor.template, drawn[0], drawn[1], evidence_cap=200)
        except Rejection:
            continue
        tasks.append(Task.from_row(row, TEMPLATES))
    return tasks


def _exercise(ehr: EHR, name: str) -> int:
    """Apply and verify the operator on its example templates; check each verified item fully."""
    op = operator(name)
    usable = [t for t in op.example_templates if not TEMPLATES[t].tables - set(ehr)]
    if not usable:
        pytest.skip(f"{name}: no example template runs on {ehr.manifest['variant']}")
    bystanders = _tasks(ehr, "demographics.patient.number_of_admissions", 10)
    verified = 0
    for template_id in usable:
        for task in _tasks(ehr, template_id):
            if not op.applicable(task, ehr):
                continue
            try:
                item = op.apply(task, ehr, np.random.default_rng(0))
                trap = verify(task, item, ehr)
            except (NotApplicable, Rejection):
                continue
            verified += 1
            noisy = ehr.with_patch(item.patch)
            assert expected_holds(task, item.expected, run_polars(noisy, parse(item.gold_sql)))
            if item.expected.kind == "abstain":
                assert trap["value"] is not None  # the careless path returns a plausible answer
            assert item.question.strip() and (item.patch.edits or item.question != task.question)
            # the base EHR, and other patients' answers on the noisy view, are untouched
            assert expected_holds(task, task.outcome, run_polars(ehr, parse(task.gold_sql)))
            for other in bystanders:
                if set(other.subject_ids) & set(task.subject_ids):
                    continue
                assert expected_holds(other, other.outcome, run_polars(noisy, parse(other.gold_sql))), other.task_id
            if verified >= 3:
                return verified
    return verified


def test_registry_has_at_least_fifteen_operators_four_per_level() -> None:
    assert len(OPERATORS) >= 15
    for level in LEVELS:
        assert sum(1 for c in OPERATORS.values() if c.level == level) >= 4, level
    assert sum(1 for c in OPERATORS.values() if c.recoverable) >= 4


def test_name_collision_is_an_error() -> None:
    with pytest.raises(ValueError, match="name collision: 'drop_record'"):
        register(type("Again", (OPERATORS["drop_record"],), {}))


def test_unknown_parameter_is_an_error() -> None:
    with pytest.raises(ValueError, match="has no parameter"):
        operator("drop_record", nonsense=1)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operator_on_synthetic(synthetic_ehr: EHR, name: str) -> None:
    assert OPERATORS[name].example_templates, f"{name} names no example templates"
    assert _exercise(synthetic_ehr, name) >= 1, f"{name} made no verified item on the synthetic EHR"


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operator_on_demo(demo_ehr: EHR, name: str) -> None:
    assert _exercise(demo_ehr, name) >= 1, f"{name} made no verified item on the MIMIC-IV demo"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.noise", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_cli_lists_operators() -> None:
    proc = _cli("--list")
    assert proc.returncode == 0
    for name in OPERATORS:
        assert name in proc.stdout


def test_cli_unknown_operator_lists_the_valid_ones() -> None:
    proc = _cli("--op", "no_such_op")
    assert proc.returncode != 0 and "drop_record" in proc.stderr and "misspelled_term" in proc.stderr


def test_cli_shows_drop_record_with_its_patch(synthetic_ehr: EHR, tmp_path: Path) -> None:
    proc = _cli("--op", "drop_record", "--ehr", str(synthetic_ehr.root), "--tasks", str(tmp_path / "none.parquet"))
    assert proc.returncode == 0, proc.stderr
    assert "patch          : delete" in proc.stdout and "expected       : abstain (missing_evidence)" in proc.stdout
    assert "and answers" in proc.stdout
