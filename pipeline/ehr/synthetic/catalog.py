"""The generator's lookup tables: the small CSVs in `catalog/`, typed and loaded once.

They are derived from the MIMIC-IV demo by `build_catalog.py` (see `catalog/README.md`); reading
every column as text first and casting only the numeric ones keeps codes such as ICD "0090", DRG
"054" and NDC "00002751001" intact.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

CATALOG_DIR = Path(__file__).with_name("catalog")

_I, _F = pl.Int64, pl.Float64
# Non-text columns per catalog file; every other column stays a string.
_NUMERIC: dict[str, dict[str, pl.DataType]] = {
    "lab_items": {"itemid": _I(), "ref_range_lower": _F(), "ref_range_upper": _F(), "p5": _F(), "p50": _F(),
                  "p95": _F(), "decimals": _I(), "low_share": _F(), "weight": _F()},
    "drugs": {"dose_val_num": _F(), "doses_per_24_hrs": _F(), "weight": _F()},
    "icd_diagnoses": {"icd_version": _I(), "weight": _F()},
    "icd_procedures": {"icd_version": _I(), "weight": _F()},
    "hcpcs": {"category": _I(), "weight": _F()},
    "drg": {"weight": _F()},
    "micro_tests": {"spec_itemid": _I(), "test_itemid": _I(), "weight": _F(), "positive_rate": _F()},
    "micro_organisms": {"test_itemid": _I(), "org_itemid": _I(), "weight": _F()},
    "micro_susceptibility": {"org_itemid": _I(), "ab_itemid": _I(), "resistant_rate": _F(),
                             "intermediate_rate": _F()},
    "d_items": {"itemid": _I(), "lownormalvalue": _F(), "highnormalvalue": _F()},
    "vitals": {"itemid": _I(), "mean": _F(), "sd_between": _F(), "sd_within": _F(), "min": _F(), "max": _F(),
               "decimals": _I()},
    "gcs": {"itemid": _I(), "valuenum": _I()},
    "icu_datetime": {"itemid": _I(), "weight": _F()},
    "icu_inputs": {"itemid": _I(), "weight": _F(), "amount_p50": _F(), "rate_p50": _F(), "rate_share": _F(),
                   "minutes_p50": _F(), "ingredient_itemid": _I(), "ingredient_ratio": _F()},
    "icu_outputs": {"itemid": _I(), "weight": _F(), "p5": _F(), "p50": _F(), "p95": _F()},
    "icu_procedures": {"itemid": _I(), "weight": _F(), "value_p50": _F(), "location_share": _F()},
    "admission_types": {"weight": _F(), "ed_rate": _F()},
    "admission_fields": {"weight": _F()},
    "careunits": {"weight": _F()},
    "services": {"weight": _F()},
    "poe_orders": {"weight": _F()},
    "poe_fields": {"weight": _F()},
    "event_fields": {"weight": _F()},
}


@dataclass(frozen=True)
class Catalog:
    """Every catalog CSV as a typed DataFrame, in the file's (sorted, deterministic) row order."""

    lab_items: pl.DataFrame
    drugs: pl.DataFrame
    icd_diagnoses: pl.DataFrame
    icd_procedures: pl.DataFrame
    hcpcs: pl.DataFrame
    drg: pl.DataFrame
    micro_tests: pl.DataFrame
    micro_organisms: pl.DataFrame
    micro_susceptibility: pl.DataFrame
    d_items: pl.DataFrame
    vitals: pl.DataFrame
    gcs: pl.DataFrame
    icu_datetime: pl.DataFrame
    icu_inputs: pl.DataFrame
    icu_outputs: pl.DataFrame
    icu_procedures: pl.DataFrame
    admission_types: pl.DataFrame
    admission_fields: pl.DataFrame
    careunits: pl.DataFrame
    services: pl.DataFrame
    poe_orders: pl.DataFrame
    poe_fields: pl.DataFrame
    event_fields: pl.DataFrame

    def field(self, name: str) -> pl.DataFrame:
        """Frequency table (value, weight) of one admissions column, e.g. "insurance"."""
        return self.admission_fields.filter(pl.col("field") == name).select("value", "weight")

    def event_field(self, table: str, name: str) -> pl.DataFrame:
        """Frequency table (value, weight) of one categorical event column, e.g. emar.event_txt."""
        return self.event_fields.filter((pl.col("table") == table) & (pl.col("field") == name)).select(
            "value", "weight")

    def vital(self, group: str) -> dict[str, Any]:
        """Parameters of one hand-written ICU charting item, by group name ("hr", "spo2", ...)."""
        row = self.vitals.filter(pl.col("group") == group)
        if row.height != 1:
            raise KeyError(f"vitals catalog has no single row for group {group!r}")
        return row.row(0, named=True)


def probabilities(weights: pl.Series | np.ndarray) -> np.ndarray:
    """Normalised sampling probabilities from a frequency column."""
    w = np.asarray(weights, dtype=np.float64)
    if w.size == 0 or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError("catalog weights must be finite, non-negative and not all zero")
    return w / w.sum()


def _read(path: Path, numeric: dict[str, pl.DataType]) -> pl.DataFrame:
    df = pl.read_csv(path, infer_schema=False)
    unknown = set(numeric) - set(df.columns)
    if unknown:
        raise ValueError(f"{path.name}: expected columns {sorted(unknown)} are missing")
    return df.with_columns([pl.col(c).cast(t) for c, t in numeric.items()])


@functools.cache
def load_catalog(folder: Path = CATALOG_DIR) -> Catalog:
    """Load all catalog CSVs from `folder` (cached: the files are read-only package data)."""
    missing = [f.name for f in fields(Catalog) if not (folder / f"{f.name}.csv").is_file()]
    if missing:
        raise FileNotFoundError(f"catalog folder {folder} lacks {missing}; rebuild it with "
                                "python -m pipeline.ehr.synthetic.build_catalog --demo <mimic-iv-demo>")
    return Catalog(**{f.name: _read(folder / f"{f.name}.csv", _NUMERIC[f.name]) for f in fields(Catalog)})
