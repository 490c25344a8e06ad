"""The synthetic EHR generator: schema, keys, links, time ordering, determinism, chunking."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipeline.ehr import schema
from pipeline.ehr.storage import sha256_file
from pipeline.ehr.synthetic import generate

N_PATIENTS, CHUNK_SIZE, SEED = 150, 40, 7

# Event tables whose main time column must lie inside the admission.
ADMISSION_TIMES = {
    "labevents": "charttime", "emar": "charttime", "pharmacy": "starttime", "prescriptions": "starttime",
    "poe": "ordertime", "transfers": "intime", "services": "transfertime", "icustays": "intime",
    "microbiologyevents": "charttime",
}
ADMISSION_DATES = {"procedures_icd": "chartdate", "hcpcsevents": "chartdate",
                   "microbiologyevents": "chartdate"}
# ICU tables: main time column (and end column) inside the ICU stay.
STAY_TIMES = {
    "chartevents": ("charttime", None), "datetimeevents": ("charttime", None),
    "outputevents": ("charttime", None), "inputevents": ("starttime", "endtime"),
    "ingredientevents": ("starttime", "endtime"), "procedureevents": ("starttime", "endtime"),
}
STORED = {"labevents": "charttime", "chartevents": "charttime", "datetimeevents": "charttime",
          "outputevents": "charttime", "emar": "charttime", "microbiologyevents": "charttime",
          "inputevents": "starttime", "procedureevents": "endtime"}
ENDS = {"prescriptions": ("starttime", "stoptime"), "pharmacy": ("starttime", "stoptime"),
        "transfers": ("intime", "outtime"), "icustays": ("intime", "outtime"),
        "inputevents": ("starttime", "endtime"), "ingredientevents": ("starttime", "endtime"),
        "procedureevents": ("starttime", "endtime")}
# Foreign keys beyond the schema's links: (table, columns) -> (target table, columns).
COMPOSITE_LINKS = [
    ("diagnoses_icd", ("icd_code", "icd_version"), "d_icd_diagnoses", ("icd_code", "icd_version")),
    ("procedures_icd", ("icd_code", "icd_version"), "d_icd_procedures", ("icd_code", "icd_version")),
    ("labevents", ("itemid",), "d_labitems", ("itemid",)),
    ("emar_detail", ("emar_id", "subject_id"), "emar", ("emar_id", "subject_id")),
    ("prescriptions", ("pharmacy_id", "hadm_id"), "pharmacy", ("pharmacy_id", "hadm_id")),
    ("emar", ("poe_id", "hadm_id"), "poe", ("poe_id", "hadm_id")),
    ("pharmacy", ("poe_id", "hadm_id"), "poe", ("poe_id", "hadm_id")),
    ("poe", ("discontinue_of_poe_id",), "poe", ("poe_id",)),
    ("poe", ("discontinued_by_poe_id",), "poe", ("poe_id",)),
    ("poe_detail", ("poe_id", "subject_id", "poe_seq"), "poe", ("poe_id", "subject_id", "poe_seq")),
    ("ingredientevents", ("orderid", "stay_id"), "inputevents", ("orderid", "stay_id")),
]


def build(path: Path, n_patients: int = N_PATIENTS, seed: int = SEED, chunk_size: int = CHUNK_SIZE
          ) -> tuple[dict[str, int], dict[str, pl.DataFrame]]:
    path.mkdir(parents=True, exist_ok=True)
    rows = generate(path, n_patients=n_patients, seed=seed, chunk_size=chunk_size, row_group_size=500,
                    progress=False)
    return rows, {name: pl.read_parquet(path / f"{name}.parquet") for name in schema.MIMIC_TABLES}


@pytest.fixture(scope="module")
def ehr(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int], dict[str, pl.DataFrame]]:
    path = tmp_path_factory.mktemp("synthetic")
    rows, tables = build(path)
    return path, rows, tables


def missing_keys(child: pl.DataFrame, cols: tuple[str, ...], parent: pl.DataFrame,
                 parent_cols: tuple[str, ...]) -> pl.DataFrame:
    keys = child.select(cols).drop_nulls().unique()
    target = parent.select([pl.col(p).alias(c) for c, p in zip(cols, parent_cols, strict=True)]).unique()
    return keys.join(target, on=list(cols), how="anti")


def check_integrity(tables: dict[str, pl.DataFrame]) -> None:
    """Keys unique, links resolve, files sorted: the invariants every generated EHR must keep."""
    for name, df in tables.items():
        t = schema.table(name)
        assert df.select(t.primary_key).is_duplicated().sum() == 0, f"{name}: duplicate {t.primary_key}"
        resorted = df.sort(list(t.sort_by), maintain_order=True, nulls_last=True)
        assert df.equals(resorted), f"{name} is not sorted by {t.sort_by}"
        for col, target in t.links.items():
            if col == "itemid" and name == "labevents":
                target = "d_labitems.itemid"
            ref_table, ref_col = target.split(".")
            bad = missing_keys(df, (col,), tables[ref_table], (ref_col,))
            assert bad.is_empty(), f"{name}.{col} has values missing from {target}: {bad.head(3)}"
    for name in schema.MIMIC_TABLES:  # hadm_id belongs to the same subject, stay_id to the same hadm
        cols = tables[name].columns
        if "hadm_id" in cols and name != "admissions":
            assert missing_keys(tables[name], ("hadm_id", "subject_id"), tables["admissions"],
                                ("hadm_id", "subject_id")).is_empty(), f"{name}: hadm_id of another subject"
        if "stay_id" in cols and name != "icustays":
            assert missing_keys(tables[name], ("stay_id", "hadm_id"), tables["icustays"],
                                ("stay_id", "hadm_id")).is_empty(), f"{name}: stay_id of another admission"
    for child, cols, parent, parent_cols in COMPOSITE_LINKS:
        bad = missing_keys(tables[child], cols, tables[parent], parent_cols)
        assert bad.is_empty(), f"{child}{cols} not in {parent}: {bad.head(3)}"


def check_times(tables: dict[str, pl.DataFrame]) -> None:
    """Events inside their admission/stay, ends after starts, results stored after charting."""
    adm = tables["admissions"].select("hadm_id", "admittime", "dischtime")
    for name, col in ADMISSION_TIMES.items():
        df = tables[name].filter(pl.col(col).is_not_null()).join(adm, on="hadm_id")
        bad = df.filter((pl.col(col) < pl.col("admittime")) | (pl.col(col) > pl.col("dischtime")))
        assert bad.is_empty(), f"{name}.{col} outside its admission: {bad.head(3)}"
    for name, col in ADMISSION_DATES.items():
        df = tables[name].join(adm, on="hadm_id").with_columns(d=pl.col(col).cast(pl.Date))
        bad = df.filter((pl.col("d") < pl.col("admittime").dt.date())
                        | (pl.col("d") > pl.col("dischtime").dt.date()))
        assert bad.is_empty(), f"{name}.{col} outside its admission dates"
    stays = tables["icustays"].select("stay_id", "intime", "outtime", "hadm_id").join(adm, on="hadm_id")
    assert stays.filter((pl.col("intime") < pl.col("admittime"))
                        | (pl.col("outtime") > pl.col("dischtime"))).is_empty()
    for name, (start, end) in STAY_TIMES.items():
        df = tables[name].join(stays.select("stay_id", st_in="intime", st_out="outtime"), on="stay_id")
        cols = [start] + ([end] if end else [])
        for c in cols:
            bad = df.filter((pl.col(c) < pl.col("st_in")) | (pl.col(c) > pl.col("st_out")))
            assert bad.is_empty(), f"{name}.{c} outside its ICU stay: {bad.head(3)}"
    for name, (start, end) in ENDS.items():
        assert tables[name].filter(pl.col(end) < pl.col(start)).is_empty(), f"{name}: {end} before {start}"
    for name, col in STORED.items():
        early = tables[name].filter(pl.col("storetime") < pl.col(col))
        assert early.is_empty(), f"{name}: stored before {col}"
    a = tables["admissions"].sort("subject_id", "admittime")
    assert a.filter(pl.col("dischtime") <= pl.col("admittime")).is_empty()
    overlap = a.filter(pl.col("admittime") < pl.col("dischtime").shift(1).over("subject_id"))
    assert overlap.is_empty(), "admissions of one patient overlap"


def test_all_tables_written_with_schema_dtypes(ehr: tuple) -> None:
    path, rows, tables = ehr
    assert set(rows) == set(schema.MIMIC_TABLES) and "cost" not in rows
    assert sorted(p.stem for p in path.glob("*.parquet")) == sorted(schema.MIMIC_TABLES)
    for name in schema.MIMIC_TABLES:
        assert pl.read_parquet_schema(path / f"{name}.parquet") == dict(schema.table(name).columns), name
        assert tables[name].height == rows[name] > 0, f"{name} is empty"


def test_keys_links_and_order(ehr: tuple) -> None:
    check_integrity(ehr[2])


def test_event_times(ehr: tuple) -> None:
    check_times(ehr[2])


def test_patients_and_deaths(ehr: tuple) -> None:
    t = ehr[2]
    p, a = t["patients"], t["admissions"]
    assert p.height == N_PATIENTS and p["subject_id"].is_sorted()
    assert p["anchor_age"].min() >= 18 and p["anchor_age"].max() <= 91
    years = pl.concat([a["admittime"].dt.year(), a["dischtime"].dt.year(), p["dod"].drop_nulls().dt.year(),
                       p["anchor_year"].cast(pl.Int32)])
    assert years.min() >= 2110 and years.max() <= 2210
    a = a.join(p, on="subject_id").with_columns(
        age=pl.col("anchor_age") + pl.col("admittime").dt.year() - pl.col("anchor_year"))
    assert a["age"].min() >= 18 and (a["admittime"].dt.year() >= a["anchor_year"]).all()
    died = a.filter(pl.col("hospital_expire_flag") == 1)
    assert died.height > 0 and (died["deathtime"] == died["dischtime"]).all()
    assert a.filter(pl.col("hospital_expire_flag") == 0)["deathtime"].null_count() == a.height - died.height
    last = a.group_by("subject_id").agg(pl.col("dischtime").max().alias("last"), pl.col("dod").first())
    assert last.filter(pl.col("dod") < pl.col("last").dt.date()).is_empty()
    assert died.join(last, on="subject_id").filter(
        (pl.col("dischtime") != pl.col("last")) | (pl.col("dod") != pl.col("dischtime").dt.date())).is_empty()
    assert a["edregtime"].null_count() > 0 and a["edregtime"].null_count() < a.height


def test_clinical_content(ehr: tuple) -> None:
    t = ehr[2]
    labs = t["labevents"]
    flagged = labs["flag"].is_not_null().mean()
    assert 0.05 < flagged < 0.3, f"abnormal share {flagged:.2f}"
    outside = labs.filter((pl.col("valuenum") < pl.col("ref_range_lower"))
                          | (pl.col("valuenum") > pl.col("ref_range_upper")))
    assert outside.height == labs["flag"].is_not_null().sum()
    assert (labs["value"].cast(pl.Float64) == labs["valuenum"]).all()
    per_specimen = labs.group_by("specimen_id").agg(pl.len(), pl.col("charttime", "hadm_id").n_unique())
    assert per_specimen["charttime"].max() == 1 and per_specimen["hadm_id"].max() == 1
    assert labs.group_by("specimen_id").len()["len"].max() > 5  # panels, not single tests
    assert labs["hadm_id"].null_count() > 0  # outpatient labs exist, as in MIMIC-IV
    chart = t["chartevents"]
    assert (chart["warning"] == 0).all() and chart["valuenum"].null_count() == 0
    hr = chart.filter(pl.col("itemid") == 220045).sort("stay_id", "charttime")
    gaps = hr.with_columns(gap=pl.col("charttime").diff().over("stay_id")).drop_nulls("gap")
    assert gaps["gap"].dt.total_hours().is_in([1, 2, 3, 4, 5, 6]).all()
    bp = chart.filter(pl.col("itemid").is_in([220179, 220180])).pivot(
        "itemid", index=["stay_id", "charttime"], values="valuenum")
    assert (bp["220180"] < bp["220179"]).all()
    dx = t["diagnoses_icd"]
    assert dx.group_by("hadm_id").agg(pl.col("icd_version").n_unique())["icd_version"].max() == 1
    assert set(dx["icd_version"].unique()) == {9, 10}
    seq = dx.group_by("hadm_id").agg(pl.col("seq_num").min().alias("lo"), pl.col("seq_num").max().alias("hi"),
                                     pl.len())
    assert (seq["lo"] == 1).all() and (seq["hi"] == seq["len"]).all()
    micro = t["microbiologyevents"]
    assert micro["org_name"].null_count() < micro.height
    assert micro["interpretation"].drop_nulls().n_unique() >= 2
    omr = t["omr"]
    assert set(omr["result_name"]) == {"Blood Pressure", "Weight (Lbs)", "Height (Inches)", "BMI (kg/m2)"}
    bp_text = omr.filter(pl.col("result_name") == "Blood Pressure")["result_value"]
    assert bp_text.str.contains(r"^\d+/\d+$").all()


def test_transfers_follow_the_stays(ehr: tuple) -> None:
    t = ehr[2]
    tr = t["transfers"].sort("hadm_id", "intime", "eventtype")
    ends = tr.group_by("hadm_id", maintain_order=True).agg(
        first=pl.col("eventtype").first(), last=pl.col("eventtype").last(),
        n=(pl.col("eventtype") == "discharge").sum())
    assert (ends["first"] == "admit").all() and (ends["last"] == "discharge").all() and (ends["n"] == 1).all()
    assert set(tr["eventtype"]) == {"admit", "transfer", "discharge"}
    stays = t["icustays"]
    for col in ("first_careunit", "last_careunit"):
        seen = stays.join(tr, left_on=["hadm_id", col], right_on=["hadm_id", "careunit"], how="semi")
        assert seen.height == stays.height, f"icustays.{col} missing from transfers"


def test_same_seed_same_bytes_other_seed_other_data(ehr: tuple, tmp_path: Path) -> None:
    path = ehr[0]
    build(tmp_path / "again")
    for name in schema.MIMIC_TABLES:
        again = tmp_path / "again" / f"{name}.parquet"
        assert sha256_file(path / f"{name}.parquet") == sha256_file(again), name
    build(tmp_path / "other", seed=SEED + 1)
    changed = [n for n in schema.MIMIC_TABLES
               if sha256_file(path / f"{n}.parquet") != sha256_file(tmp_path / "other" / f"{n}.parquet")]
    assert {"admissions", "labevents", "chartevents", "provider"} <= set(changed)


@pytest.mark.parametrize("chunk_size", [7, 1000])
def test_chunk_sizes_give_valid_data(tmp_path: Path, chunk_size: int) -> None:
    rows, tables = build(tmp_path / "ehr", n_patients=60, chunk_size=chunk_size, seed=3)
    assert all(n > 0 for n in rows.values())
    assert tables["patients"]["subject_id"].n_unique() == 60
    check_integrity(tables)
    check_times(tables)


def test_tiny_population(tmp_path: Path) -> None:
    rows, tables = build(tmp_path / "tiny", n_patients=5, chunk_size=2, seed=11)
    assert rows["patients"] == 5
    check_integrity(tables)
    check_times(tables)
