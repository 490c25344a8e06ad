"""Patches overlay an EHR lazily: only the patched view changes, untouched tables are shared."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from pipeline.ehr import EHR
from pipeline.ehr.patch import Patch, PatchError, RowEdit


def test_delete_update_insert_touch_only_the_view(synthetic_ehr: EHR) -> None:
    first = synthetic_ehr.sql("SELECT labevent_id, subject_id, hadm_id FROM labevents "
                              "WHERE hadm_id IS NOT NULL ORDER BY labevent_id LIMIT 2").rows()
    (gone, subject, hadm), (changed, _, _) = first
    patch = Patch((
        RowEdit("delete", "labevents", where={"labevent_id": gone}),
        RowEdit("update", "labevents", where={"labevent_id": changed}, values={"valuenum": 900.0, "value": "900"}),
        RowEdit("insert", "admissions", values={"subject_id": subject, "hadm_id": 99999999,
                                                "admittime": datetime(2150, 1, 1, 8),
                                                "dischtime": datetime(2150, 1, 3)}),
    ))
    view = synthetic_ehr.with_patch(patch)
    assert view["patients"] is synthetic_ehr["patients"]  # untouched tables are the same frames
    assert view.sql(f"SELECT COUNT(*) AS n FROM labevents WHERE labevent_id = {gone}").item() == 0
    assert view.sql(f"SELECT valuenum AS v FROM labevents WHERE labevent_id = {changed}").item() == 900.0
    assert view.sql("SELECT COUNT(*) AS n FROM admissions WHERE hadm_id = 99999999").item() == 1
    # the base EHR (and so every other pair) is unchanged
    assert synthetic_ehr.sql(f"SELECT COUNT(*) AS n FROM labevents WHERE labevent_id = {gone}").item() == 1
    assert synthetic_ehr.sql(f"SELECT valuenum AS v FROM labevents WHERE labevent_id = {changed}").item() != 900.0
    assert synthetic_ehr.sql("SELECT COUNT(*) AS n FROM admissions WHERE hadm_id = 99999999").item() == 0
    other = synthetic_ehr.with_patch(Patch((RowEdit("delete", "labevents", where={"hadm_id": hadm}),)))
    assert other.sql(f"SELECT COUNT(*) AS n FROM labevents WHERE labevent_id = {changed}").item() == 0
    assert view.sql(f"SELECT COUNT(*) AS n FROM labevents WHERE labevent_id = {changed}").item() == 1
    assert view["labevents"].collect_schema() == synthetic_ehr["labevents"].collect_schema()


def test_patch_round_trips_through_json() -> None:
    patch = Patch((RowEdit("update", "admissions", where={"hadm_id": 1}, values={"dischtime": datetime(2150, 1, 2)}),
                   RowEdit("delete", "labevents", where={"labevent_id": 7})))
    assert Patch.from_json(patch.to_json()) == patch


@pytest.mark.parametrize(("edit", "message"), [
    (lambda: RowEdit("delete", "lab_events", where={"x": 1}), "unknown table 'lab_events'"),
    (lambda: RowEdit("update", "labevents", where={"labevent_id": 1}, values={"val": 1}),
     r"unknown column\(s\) \['val'\]"),
    (lambda: RowEdit("delete", "labevents"), "needs a non-empty `where`"),
    (lambda: RowEdit("truncate", "labevents", where={"labevent_id": 1}), "not one of"),
])
def test_malformed_edits_are_refused(edit, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        edit()


def test_patching_a_missing_table_is_an_error(demo_ehr: EHR) -> None:
    with pytest.raises(PatchError, match="chartevents"):
        demo_ehr.with_patch(Patch((RowEdit("delete", "chartevents", where={"stay_id": 1}),)))
    assert isinstance(demo_ehr["patients"], pl.LazyFrame)
