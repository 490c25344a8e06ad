"""Template loading: the shipped templates are complete, and bad templates fail with file and id."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from pipeline.tasks.loader import load_file, load_templates
from pipeline.tasks.template import INTENTS, SCOPES, TemplateError

ROOT = Path(__file__).resolve().parents[1]

GOOD = {
    "id": "labs.patient.max_in_admission",
    "intent": "labs",
    "scope": "patient",
    "questions": ["Highest {lab} of patient {subject_id} in admission {hadm_id}?",
                  "What was the maximum {lab} for patient {subject_id} during stay {hadm_id}?"],
    "slots": "SELECT DISTINCT l.subject_id AS subject_id, l.hadm_id AS hadm_id, d.label AS lab "
             "FROM labevents AS l JOIN d_labitems AS d ON l.itemid = d.itemid",
    "gold_sql": "SELECT MAX(l.valuenum) AS answer FROM labevents AS l JOIN d_labitems AS d ON l.itemid = d.itemid "
                "WHERE l.subject_id = :subject_id AND l.hadm_id = :hadm_id AND d.label = :lab",
    "answer": {"type": "number", "tolerance": 0.001},
    "evidence": {"table": "labevents", "keys": ["labevent_id"],
                 "sql": "SELECT l.labevent_id AS labevent_id FROM labevents AS l JOIN d_labitems AS d "
                        "ON l.itemid = d.itemid WHERE l.subject_id = :subject_id AND d.label = :lab"},
}


def test_shipped_templates_cover_every_cell() -> None:
    templates = load_templates(ROOT / "templates")
    cells = Counter((t.intent, t.scope) for t in templates.values())
    assert len(templates) >= 96
    for intent in INTENTS:
        for scope in SCOPES:
            assert cells[(intent, scope)] >= 8, f"{intent}/{scope} has {cells[(intent, scope)]} templates"
    assert all(len(t.questions) >= 2 for t in templates.values())


def _load(tmp_path: Path, **changes: object) -> None:
    block = {**GOOD, **changes}
    path = tmp_path / "labs.yaml"
    path.write_text(yaml.safe_dump([block]))
    load_file(path)


def test_a_good_template_loads(tmp_path: Path) -> None:
    _load(tmp_path)


@pytest.mark.parametrize(("changes", "message"), [
    ({"gold_sql": GOOD["gold_sql"].replace("FROM labevents", "FROM labevent")},
     r"gold SQL unknown table\(s\) \['labevent'\]"),
    ({"gold_sql": GOOD["gold_sql"].replace("MAX(l.valuenum)", "MAX(l.value_num)")},
     r"gold SQL unknown or ambiguous column.*value_num"),
    ({"questions": ["Highest {test} of {subject_id}?", "Max {test} for {subject_id}?"]},
     r"question 1 uses unknown slot\(s\) \['test'\]"),
    ({"gold_sql": GOOD["gold_sql"] + " AND l.itemid = :item"}, r"gold SQL uses unknown slot\(s\) \['item'\]"),
    ({"gold_sql": "SELECT MAX(l.valuenum) AS answer FROM labevents AS l WHERE"}, r"gold SQL does not parse"),
    ({"gold_sql": GOOD["gold_sql"].replace(" AS answer", "")}, r"gold SQL output 'MAX\(l.valuenum\)' has no alias"),
    ({"questions": ["Only one phrasing for {lab} {subject_id} {hadm_id}"]}, r"needs at least two question phrasings"),
    ({"intent": "radiology"}, r"intent 'radiology' is not one of"),
    ({"evidence": {**GOOD["evidence"], "keys": ["row_id"]}},
     r"evidence SQL does not return the evidence key column\(s\) \[.row_id.\]"),
])
def test_bad_templates_name_file_and_id(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(TemplateError, match=rf"labs\.yaml: template 'labs\.patient\.max_in_admission': {message}"):
        _load(tmp_path, **changes)


def test_duplicate_ids_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "labs.yaml").write_text(yaml.safe_dump([GOOD, GOOD]))
    with pytest.raises(TemplateError, match="duplicate id"):
        load_templates(tmp_path)


def test_the_stage_reports_a_bad_template_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = {**GOOD, "gold_sql": GOOD["gold_sql"].replace("FROM labevents", "FROM labevent")}
    (tmp_path / "labs.yaml").write_text(yaml.safe_dump([bad]))
    proc = subprocess.run([sys.executable, "-m", "pipeline.tasks", f"tasks.templates_dir={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "labs.yaml: template 'labs.patient.max_in_admission': gold SQL unknown table(s) ['labevent']" in proc.stderr
