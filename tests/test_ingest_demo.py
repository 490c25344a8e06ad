"""Ingest of the real MIMIC-IV demo: every present table arrives complete, typed and sorted."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from pipeline import config
from pipeline.ehr import EHR, MIMIC_TABLES, TABLES
from pipeline.ehr.build import build_ehr
from pipeline.ehr.ingest import MissingTableWarning


@pytest.fixture(scope="module")
def demo_ehr(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> EHR:
    out = tmp_path_factory.mktemp("demo") / "ehr"
    cfg = config.compose(["ehr=mimic_iv", f"ehr.path={demo_dir}", f"ehr.out_dir={out}", "ehr.version=2.2",
                          "ehr.row_group_size=5000"])
    with pytest.warns(MissingTableWarning, match="icu/chartevents"):
        build_ehr(cfg.ehr, progress=False)
    return EHR(out)


def _source_rows(path: Path) -> int:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
        return sum(1 for _ in csv.reader(fh)) - 1


def test_every_present_table_has_the_source_row_count(demo_ehr: EHR, demo_dir: Path) -> None:
    present = [t for t in MIMIC_TABLES if t != "chartevents"]
    assert len(present) == 30
    for name in present:
        source = demo_dir / f"{TABLES[name].source_name}.csv.gz"
        assert demo_ehr.manifest["tables"][name]["rows"] == _source_rows(source), name
        assert demo_ehr[name].select(pl.len()).collect().item() == _source_rows(source), name


def test_dtypes_and_lower_case_columns_match_the_schema(demo_ehr: EHR) -> None:
    for name in demo_ehr:
        assert dict(demo_ehr[name].collect_schema()) == TABLES[name].columns, name
    assert "originalamount" in demo_ehr["procedureevents"].collect_schema()


def test_chartevents_is_reported_missing(demo_ehr: EHR) -> None:
    assert demo_ehr.missing_tables == ("chartevents",)
    assert "chartevents" not in demo_ehr
    with pytest.raises(KeyError, match="missing from the source"):
        demo_ehr["chartevents"]


def test_manifest_records_source_version_hashes_and_now(demo_ehr: EHR, demo_dir: Path) -> None:
    m = demo_ehr.manifest
    assert (m["source"], m["variant"], m["version"], m["credentialed"]) == ("mimic_iv", "demo", "2.2", False)
    official = dict(reversed(line.split(maxsplit=1)) for line in
                    (demo_dir / "SHA256SUMS.txt").read_text().splitlines() if line.strip())
    for name, info in m["source_files"].items():
        assert official[info["path"]] == info["sha256"], name
    last = demo_ehr.sql("SELECT MAX(dischtime) AS last FROM admissions").item()
    assert last < demo_ehr.now
    assert json.loads((demo_ehr.root / "manifest.json").read_text())["total_rows"] == sum(
        t["rows"] for t in m["tables"].values())


def test_cost_is_derived_for_every_billable_event_type(demo_ehr: EHR) -> None:
    cost = demo_ehr["cost"].collect()
    assert set(cost["event_type"]) == {"diagnoses_icd", "procedures_icd", "labevents", "prescriptions"}
    n_dx = demo_ehr["diagnoses_icd"].select(pl.len()).collect().item()
    assert cost.filter(pl.col("event_type") == "diagnoses_icd").height == n_dx
    assert cost["cost"].min() > 0 and cost["cost"].null_count() == 0
    assert cost.select("event_type", "event_id").is_unique().all()
    orphan = demo_ehr.sql("SELECT COUNT(*) AS n FROM cost c LEFT JOIN admissions a ON c.hadm_id = a.hadm_id "
                          "WHERE a.hadm_id IS NULL").item()
    assert orphan == 0
    # the same code costs the same everywhere: one price per lab item
    per_item = demo_ehr.sql(
        "SELECT l.itemid, COUNT(DISTINCT c.cost) AS prices FROM cost c JOIN labevents l "
        "ON c.event_type = 'labevents' AND c.event_id = l.labevent_id GROUP BY l.itemid")
    assert per_item["prices"].max() == 1


def test_tables_are_sorted_by_subject_then_time(demo_ehr: EHR) -> None:
    for name in demo_ehr:
        keys = list(TABLES[name].sort_by)
        frame = demo_ehr[name].select(keys).collect()
        assert frame.equals(frame.sort(keys, nulls_last=True, maintain_order=True)), name


def test_subject_filter_skips_most_row_groups(demo_ehr: EHR) -> None:
    meta = pq.ParquetFile(demo_ehr.root / "labevents.parquet").metadata
    assert meta.num_row_groups >= 10
    col = meta.schema.names.index("subject_id")
    subject = demo_ehr.sql("SELECT MIN(subject_id) AS s FROM patients").item()
    hits = sum(1 for i in range(meta.num_row_groups)
               if meta.row_group(i).column(col).statistics.min <= subject
               <= meta.row_group(i).column(col).statistics.max)
    assert hits <= 2


def test_sql_runs_over_the_ingested_tables(demo_ehr: EHR) -> None:
    assert demo_ehr.sql("SELECT COUNT(*) AS n FROM patients").item() == 100
    top = demo_ehr.sql("SELECT d.label AS label, COUNT(*) AS n FROM labevents l JOIN d_labitems d "
                       "ON l.itemid = d.itemid GROUP BY d.label ORDER BY n DESC LIMIT 1")
    assert top.height == 1 and top["n"][0] > 1000
