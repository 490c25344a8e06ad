"""Bad MIMIC-IV input: a clear error naming file, line and column, and no half-written output."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import pytest

from pipeline import config
from pipeline.ehr.build import build_ehr
from pipeline.ehr.ingest import IngestError, MissingTableWarning

PATIENTS = ("subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod\n"
            "10000001,F,54,2150,2014 - 2016,\n"
            "10000002,M,71,2160,2017 - 2019,2163-04-02\n")
ADMISSIONS_HEADER = ("subject_id,hadm_id,admittime,dischtime,deathtime,admission_type,admit_provider_id,"
                     "admission_location,discharge_location,insurance,language,marital_status,race,"
                     "edregtime,edouttime,hospital_expire_flag\n")
ADMISSIONS = (ADMISSIONS_HEADER
              + "10000001,20000001,2150-01-02 10:00:00,2150-01-05 12:30:00,,URGENT,P0001,"
                "EMERGENCY ROOM,HOME,Medicare,ENGLISH,MARRIED,WHITE,,,0\n"
              + "10000002,20000002,2160-03-01 08:00:00,2160-03-09 09:15:00,,ELECTIVE,P0002,"
                "PHYSICIAN REFERRAL,HOME,Other,ENGLISH,\"SINGLE, NEVER\nMARRIED\",ASIAN,,,0\n")


def _write(root: Path, rel: str, text: str) -> Path:
    path = root / f"{rel}.csv.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(text)
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A minimal valid release: the two required tables only."""
    src = tmp_path / "mimiciv" / "3.1"
    _write(src, "hosp/patients", PATIENTS)
    _write(src, "hosp/admissions", ADMISSIONS)
    return src


def _build(src: Path, out: Path) -> dict:
    cfg = config.compose(["ehr=mimic_iv", f"ehr.path={src}", f"ehr.out_dir={out}"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingTableWarning)
        return build_ehr(cfg.ehr, progress=False)


def _assert_nothing_left(out: Path) -> None:
    assert not out.exists()
    assert [p.name for p in out.parent.iterdir()] == [], "staging folders left behind"


def test_minimal_release_builds_and_lists_missing_optional_tables(source: Path, tmp_path: Path) -> None:
    manifest = _build(source, tmp_path / "out" / "ehr")
    assert manifest["version"] == "3.1" and manifest["variant"] == "full" and manifest["credentialed"]
    assert manifest["tables"]["admissions"]["rows"] == 2  # the quoted newline is one record
    assert "labevents" in manifest["missing_tables"] and len(manifest["missing_tables"]) == 29


def test_missing_required_table_is_named(source: Path, tmp_path: Path) -> None:
    (source / "hosp" / "admissions.csv.gz").unlink()
    out = tmp_path / "out" / "ehr"
    with pytest.raises(IngestError, match=r"required table hosp/admissions"):
        _build(source, out)
    _assert_nothing_left(out)


def test_truncated_gzip_names_file_and_line(source: Path, tmp_path: Path) -> None:
    body = "".join(f"{i},10000001,20000001,1,50912,,2150-01-03 06:00:00,2150-01-03 07:00:00,1.1,1.1,mg/dL,"
                   f"0.5,1.2,,ROUTINE,\n" for i in range(1, 5000))
    path = _write(source, "hosp/labevents",
                  "labevent_id,subject_id,hadm_id,specimen_id,itemid,order_provider_id,charttime,storetime,"
                  "value,valuenum,valueuom,ref_range_lower,ref_range_upper,flag,priority,comments\n" + body)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out" / "ehr"
    with pytest.raises(IngestError, match=r"labevents\.csv\.gz: line \d+: truncated or corrupt gzip"):
        _build(source, out)
    _assert_nothing_left(out)


def test_truncated_plain_csv_is_detected(source: Path, tmp_path: Path) -> None:
    plain = source / "hosp" / "patients.csv"
    plain.write_text(PATIENTS[:-8])  # cut inside the last line
    (source / "hosp" / "patients.csv.gz").unlink()
    out = tmp_path / "out" / "ehr"
    with pytest.raises(IngestError, match=r"patients\.csv: line 3: the file ends mid-line"):
        _build(source, out)
    _assert_nothing_left(out)


def test_wrong_header_names_file_line_and_column(source: Path, tmp_path: Path) -> None:
    _write(source, "hosp/admissions", ADMISSIONS.replace("admittime", "admit_time", 1))
    out = tmp_path / "out" / "ehr"
    with pytest.raises(IngestError, match=r"admissions\.csv\.gz: line 1: .*missing column\(s\) \['admittime'\]"
                                          r".*unexpected column\(s\) \['admit_time'\]"):
        _build(source, out)
    _assert_nothing_left(out)


def test_unparseable_number_names_file_line_and_column(source: Path, tmp_path: Path) -> None:
    _write(source, "hosp/patients", PATIENTS.replace(",71,", ",seventy-one,"))
    out = tmp_path / "out" / "ehr"
    with pytest.raises(IngestError, match=r"patients\.csv\.gz: line 3, column 'anchor_age': cannot parse "
                                          r"'seventy-one' as Int64"):
        _build(source, out)
    _assert_nothing_left(out)


def test_unparseable_time_after_a_multiline_record_reports_the_right_line(source: Path, tmp_path: Path) -> None:
    extra = ("10000002,20000003,2160-13-40 08:00:00,2160-03-09 09:15:00,,ELECTIVE,P0002,"
             "PHYSICIAN REFERRAL,HOME,Other,ENGLISH,SINGLE,ASIAN,,,0\n")
    _write(source, "hosp/admissions", ADMISSIONS + extra)  # record 3 starts on line 5 (record 2 spans 2)
    out = tmp_path / "out" / "ehr"
    with pytest.raises(IngestError, match=r"admissions\.csv\.gz: line 5, column 'admittime'"):
        _build(source, out)
    _assert_nothing_left(out)


def test_ragged_row_names_its_line(source: Path, tmp_path: Path) -> None:
    _write(source, "hosp/patients", PATIENTS + "10000003,F,33,2150,2014 - 2016,,EXTRA\n")
    out = tmp_path / "out" / "ehr"
    with pytest.raises(IngestError, match=r"patients\.csv\.gz: line 4: expected 6 fields, found 7"):
        _build(source, out)
    _assert_nothing_left(out)


def test_failed_rebuild_keeps_the_previous_output(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "ehr"
    _build(source, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _write(source, "hosp/patients", PATIENTS.replace(",71,", ",x,"))
    with pytest.raises(IngestError):
        _build(source, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in out.parent.iterdir()] == ["ehr"]


def test_missing_source_folder_and_path_are_clear(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="MIMIC-IV directory not found"):
        _build(tmp_path / "nowhere", tmp_path / "out" / "ehr")
    cfg = config.compose(["ehr=mimic_iv", f"ehr.out_dir={tmp_path / 'o'}"])
    with pytest.raises(config.ConfigError, match="ehr.path is required"):
        build_ehr(cfg.ehr, progress=False)
