"""Clinical reference data shared by the value-level noise operators, and the small data/SQL helpers they share.

- `CONVERSIONS`: the other unit a result is realistically reported in (creatinine mg/dL <-> µmol/L,
  glucose mg/dL <-> mmol/L, temperature °F <-> °C, weight kg <-> lb ...), keyed by the dictionary
  label (d_labitems / d_items) and the unit the EHR stores it in. `DOSE_CONVERSIONS` does the same
  for prescription dose units (mg <-> g <-> mcg).
- `LIMITS`: physiological plausibility limits per label and unit: a value outside them cannot
  belong to a living patient (heart rate 850 bpm, potassium 41 mEq/L, SpO2 970 %). The limits are
  deliberately wide (the extremes ever survived, not reference ranges) so no real result trips them.
- `VALUE_TABLES`: where a result's value, unit, text and time live in each event table.
- `evidence_frame`: a task's evidence rows with the columns an operator needs (read by key).
- `replace_source`: read a table through a normalising subquery in a query (the noisy gold SQL of
  a recoverable item: convert units back, strip dots from ICD codes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import polars as pl
import sqlglot
from sqlglot import exp

from pipeline.ehr.access import EHR
from pipeline.ehr.schema import TABLES
from pipeline.noise.evidence import evidence_rows
from pipeline.noise.types import Task
from pipeline.sql.schema import DIALECT, parse


@dataclass(frozen=True)
class Conversion:
    """`to_value = value * scale + offset`: the same quantity reported in unit `to`."""

    unit: str
    to: str
    scale: float
    offset: float = 0.0
    decimals: int = 1  # how results in `to` are usually reported

    def forward(self, value: float) -> float:
        return value * self.scale + self.offset

    def back(self, value: float) -> float:
        return (value - self.offset) / self.scale

    def back_sql(self, column: str) -> str:
        """SQL turning a value in `to` back into `unit`."""
        value = f"CAST({column} AS DOUBLE)"
        if self.offset:
            value = f"({value} {'-' if self.offset > 0 else '+'} {abs(self.offset)!r})"
        return f"{value} / {self.scale!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"from_unit": self.unit, "to_unit": self.to, "scale": self.scale, "offset": self.offset}


def _si(unit: str, to: str, scale: float, decimals: int) -> Conversion:
    return Conversion(unit, to, scale, 0.0, decimals)


# label -> conversions from the unit stored in MIMIC-IV to the unit other systems report.
CONVERSIONS: dict[str, tuple[Conversion, ...]] = {
    # labs (d_labitems.label)
    "Creatinine": (_si("mg/dL", "µmol/L", 88.42, 0),),
    "Glucose": (_si("mg/dL", "mmol/L", 1 / 18.016, 1),),
    "eAG": (_si("mg/dL", "mmol/L", 1 / 18.016, 1),),
    "Urea Nitrogen": (_si("mg/dL", "mmol/L", 0.357, 1),),
    "Hemoglobin": (_si("g/dL", "g/L", 10.0, 0), _si("g/dL", "mmol/L", 0.6206, 1)),
    "MCHC": (_si("g/dL", "g/L", 10.0, 0),),
    "Albumin": (_si("g/dL", "g/L", 10.0, 0),),
    "Protein, Total": (_si("g/dL", "g/L", 10.0, 0),),
    "Globulin": (_si("g/dL", "g/L", 10.0, 0),),
    "Calcium, Total": (_si("mg/dL", "mmol/L", 0.2495, 2),),
    "Magnesium": (_si("mg/dL", "mmol/L", 0.4114, 2),),
    "Phosphate": (_si("mg/dL", "mmol/L", 0.3229, 2),),
    "Bilirubin, Total": (_si("mg/dL", "µmol/L", 17.104, 0),),
    "Uric Acid": (_si("mg/dL", "µmol/L", 59.48, 0),),
    "Cholesterol, Total": (_si("mg/dL", "mmol/L", 0.02586, 2),),
    "Triglycerides": (_si("mg/dL", "mmol/L", 0.01129, 2),),
    "Fibrinogen, Functional": (_si("mg/dL", "g/L", 0.01, 2),),
    "Lactate": (_si("mmol/L", "mg/dL", 9.008, 0),),
    "Free Calcium": (_si("mmol/L", "mg/dL", 4.008, 1),),
    "pO2": (_si("mm Hg", "kPa", 0.133322, 1),),
    "pCO2": (_si("mm Hg", "kPa", 0.133322, 1),),
    "Hematocrit": (_si("%", "L/L", 0.01, 2),),
    "Troponin T": (_si("ng/mL", "ng/L", 1000.0, 0),),
    # chart items (d_items.label)
    "Temperature Fahrenheit": (Conversion("°F", "°C", 5 / 9, -160 / 9, 1),),
    "Temperature Celsius": (Conversion("°C", "°F", 9 / 5, 32.0, 1),),
    "Admission Weight (Kg)": (_si("kg", "lb", 2.20462, 1),),
    "Height (cm)": (_si("cm", "in", 0.393701, 1),),
    "Glucose finger stick (range 70-100)": (_si("mg/dL", "mmol/L", 1 / 18.016, 1),),
}


@dataclass(frozen=True)
class DoseConversion:
    """A prescription dose written in another unit, used only where the number stays readable."""

    unit: str
    to: str
    scale: float
    min_value: float = 0.0  # only doses >= min_value ...
    max_value: float = math.inf  # ... and < max_value are rewritten this way


DOSE_CONVERSIONS: dict[str, tuple[DoseConversion, ...]] = {
    "mg": (DoseConversion("mg", "g", 0.001, min_value=100), DoseConversion("mg", "mcg", 1000.0, max_value=1)),
    "g": (DoseConversion("g", "mg", 1000.0),),
    "gm": (DoseConversion("gm", "mg", 1000.0),),
    "mcg": (DoseConversion("mcg", "mg", 0.001, min_value=100),),
}


def conversions_for(label: str | None, unit: str | None) -> tuple[Conversion, ...]:
    return tuple(c for c in CONVERSIONS.get(label or "", ()) if c.unit == unit)


@dataclass(frozen=True)
class Limits:
    """Values outside [lo, hi] (in `unit`) are physiologically impossible; None = no bound that way."""

    unit: str | None
    lo: float | None
    hi: float | None

    def contains(self, value: float) -> bool:
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def outside_sql(self, column: str) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{column} < {self.lo!r}")
        if self.hi is not None:
            parts.append(f"{column} > {self.hi!r}")
        return "(" + " OR ".join(parts) + ")"


LIMITS: dict[str, Limits] = {
    # labs (d_labitems.label), blood
    "Potassium": Limits("mEq/L", 1.0, 15.0),
    "Potassium, Whole Blood": Limits("mEq/L", 1.0, 15.0),
    "Sodium": Limits("mEq/L", 90.0, 200.0),
    "Sodium, Whole Blood": Limits("mEq/L", 90.0, 200.0),
    "Chloride": Limits("mEq/L", 50.0, 160.0),
    "Bicarbonate": Limits("mEq/L", 2.0, 60.0),
    "Calculated Total CO2": Limits("mEq/L", 2.0, 60.0),
    "Anion Gap": Limits("mEq/L", None, 70.0),
    "Creatinine": Limits("mg/dL", 0.05, 40.0),
    "Urea Nitrogen": Limits("mg/dL", 0.5, 300.0),
    "Glucose": Limits("mg/dL", 10.0, 2500.0),
    "Hemoglobin": Limits("g/dL", 1.0, 25.0),
    "Hematocrit": Limits("%", 5.0, 75.0),
    "Platelet Count": Limits("K/uL", 0.5, 3000.0),
    "White Blood Cells": Limits("K/uL", 0.01, 1000.0),
    "Red Blood Cells": Limits("m/uL", 0.3, 10.0),
    "MCV": Limits("fL", 40.0, 160.0),
    "MCH": Limits("pg", 10.0, 60.0),
    "MCHC": Limits("g/dL", 15.0, 50.0),
    "RDW": Limits("%", 5.0, 50.0),
    "Magnesium": Limits("mg/dL", 0.3, 20.0),
    "Calcium, Total": Limits("mg/dL", 2.0, 25.0),
    "Phosphate": Limits("mg/dL", 0.2, 30.0),
    "Free Calcium": Limits("mmol/L", 0.2, 5.0),
    "Lactate": Limits("mmol/L", 0.1, 40.0),
    "pH": Limits("units", 6.5, 8.0),
    "pO2": Limits("mm Hg", 5.0, 800.0),
    "pCO2": Limits("mm Hg", 5.0, 250.0),
    "Albumin": Limits("g/dL", 0.5, 8.0),
    "Protein, Total": Limits("g/dL", 1.0, 20.0),
    "Bilirubin, Total": Limits("mg/dL", None, 100.0),
    "Uric Acid": Limits("mg/dL", 0.1, 40.0),
    "PT": Limits("sec", 5.0, 300.0),
    "PTT": Limits("sec", 10.0, 300.0),
    "Oxygen Saturation": Limits("%", 5.0, 100.0),
    # chart items (d_items.label)
    "Heart Rate": Limits("bpm", 10.0, 300.0),
    "Non Invasive Blood Pressure systolic": Limits("mmHg", 20.0, 320.0),
    "Non Invasive Blood Pressure diastolic": Limits("mmHg", 5.0, 220.0),
    "Non Invasive Blood Pressure mean": Limits("mmHg", 10.0, 250.0),
    "Arterial Blood Pressure systolic": Limits("mmHg", 20.0, 320.0),
    "Arterial Blood Pressure diastolic": Limits("mmHg", 5.0, 220.0),
    "Arterial Blood Pressure mean": Limits("mmHg", 10.0, 250.0),
    "Respiratory Rate": Limits("insp/min", 1.0, 90.0),
    "O2 saturation pulseoxymetry": Limits("%", 20.0, 100.0),
    "Temperature Fahrenheit": Limits("°F", 77.0, 113.0),
    "Temperature Celsius": Limits("°C", 25.0, 45.0),
    "Admission Weight (Kg)": Limits("kg", 25.0, 400.0),
    "Height (cm)": Limits("cm", 100.0, 250.0),
    "Glucose finger stick (range 70-100)": Limits("mg/dL", 10.0, 2500.0),
}


def limits_for(label: str | None, unit: str | None) -> Limits | None:
    lim = LIMITS.get(label or "")
    return lim if lim is not None and (lim.unit or None) == (unit or None) else None


@dataclass(frozen=True)
class ValueTable:
    """Where an event table keeps a result: value, unit, text, time, and how it is named."""

    value: str
    unit: str
    time: str
    text: str | None = None
    dictionary: str | None = None  # joined on itemid for the label
    name: str | None = None  # or a column of the table itself


VALUE_TABLES: dict[str, ValueTable] = {
    "labevents": ValueTable("valuenum", "valueuom", "charttime", text="value", dictionary="d_labitems"),
    "chartevents": ValueTable("valuenum", "valueuom", "charttime", text="value", dictionary="d_items"),
    "prescriptions": ValueTable("dose_val_rx", "dose_unit_rx", "starttime", name="drug"),
}


def decimals_of(text: Any, default: int = 1) -> int:
    """Decimals a result was reported with ("4.1" -> 1, "138" -> 0)."""
    if not isinstance(text, str):
        return default
    try:
        float(text)
    except ValueError:
        return default
    return len(text.split(".", 1)[1]) if "." in text else 0


def format_number(value: float, decimals: int) -> str:
    return f"{value:.{max(decimals, 0)}f}"


def evidence_frame(task: Task, ehr: EHR, columns: list[str] | tuple[str, ...] = ()) -> pl.DataFrame:
    """The task's evidence rows with its key columns plus `columns` (and `label` for event tables
    with a dictionary), sorted by key."""
    table = task.evidence["table"]
    keys = list(task.evidence["keys"])
    spec = VALUE_TABLES.get(table)
    wanted = list(dict.fromkeys([*keys, *(c for c in columns if c != "label")]))
    frame = evidence_rows(ehr, task).select(wanted)
    if "label" in columns and spec is not None and spec.dictionary is not None and frame.height:
        names = ehr[spec.dictionary].select("itemid", "label").unique(subset="itemid").collect()
        frame = frame.join(names, on="itemid", how="left").sort(keys)
    return frame


def _column(name: str) -> exp.Column:
    return exp.column(name, quoted=name != name.lower())


def replace_source(sql: str | exp.Expression, table: str, columns: dict[str, str]) -> exp.Expression:
    """Read `table` through `(SELECT ..., <expr> AS <column>, ... FROM table) AS <alias>` wherever the
    query reads it: every reference to those columns (joins, filters, outputs) sees the rewritten value."""
    tree = parse(sql) if isinstance(sql, str) else sql.copy()
    projections = [sqlglot.parse_one(columns[c], dialect=DIALECT).as_(c) if c in columns else _column(c)
                   for c in TABLES[table].columns]
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    for node in list(tree.find_all(exp.Table)):
        if node.name != table or table in ctes:
            continue
        source = exp.select(*[p.copy() for p in projections]).from_(table)
        node.replace(exp.Subquery(this=source, alias=exp.TableAlias(this=exp.to_identifier(node.alias or table))))
    return tree


@lru_cache(maxsize=512)
def gold_shape(gold_sql: str, value: str, time: str) -> tuple[bool, frozenset[str], frozenset[str], frozenset[str]]:
    """Does the gold read the value column; which end of time (last/first) and which extreme of the
    values (peak/nadir) it reads; the string literals it names."""
    tree = parse(gold_sql)
    reads = any(c.name == value for c in tree.find_all(exp.Column))

    def on_time(a: exp.Expression) -> bool:
        return isinstance(a.this, exp.Column) and a.this.name == time

    ends = frozenset(kind for agg, kind in ((exp.Max, "max"), (exp.Min, "min"))
                     if any(on_time(a) for a in tree.find_all(agg)))
    peaks = frozenset(kind for agg, kind in ((exp.Max, "max"), (exp.Min, "min"))
                      if any(not on_time(a) for a in tree.find_all(agg)))
    names = frozenset(lit.this for lit in tree.find_all(exp.Literal) if lit.is_string)
    return reads, ends, peaks, names
