"""Patients: demographics, MIMIC-style date shifting, and latent traits later tables reuse.

MIMIC-IV shifts each patient's dates into 2110-2210 and publishes `anchor_year` (a shifted year),
`anchor_age` (age in that year, >= 89 reported as 91) and `anchor_year_group` (the real 3-year
window of the anchor year). The real year decides ICD-9 vs ICD-10 coding, so it is kept here.
Height and weight are per-patient latents so ICU charting, OMR and infusion weights agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.sampling import dates

YEAR_GROUPS = ("2008 - 2010", "2011 - 2013", "2014 - 2016", "2017 - 2019")
FIRST_ANCHOR_YEAR, LAST_ANCHOR_YEAR = 2110, 2185
SUBJECT_ID_BASE = 10_000_000
P_DEATH_IN_HOSPITAL = 0.06
P_DEATH_AFTER = 0.18  # dod is recorded for deaths within a year of the last discharge


def year_start(year: np.ndarray) -> np.ndarray:
    """Epoch seconds of January 1st of each (shifted) year."""
    return (np.asarray(year) - 1970).astype("datetime64[Y]").astype("datetime64[s]").astype(np.int64)


def year_of(seconds: np.ndarray) -> np.ndarray:
    return np.asarray(seconds).astype("datetime64[s]").astype("datetime64[Y]").astype(np.int64) + 1970


@dataclass
class Patients:
    """Per-patient arrays of one chunk (index i is the i-th subject of the chunk)."""

    subject_id: np.ndarray
    male: np.ndarray
    anchor_age: np.ndarray
    anchor_year: np.ndarray
    year_group: np.ndarray  # index into YEAR_GROUPS
    real_anchor_year: np.ndarray  # the unshifted calendar year of anchor_year
    height_cm: np.ndarray
    weight_kg: np.ndarray
    fate: np.ndarray  # 0 alive, 1 dies in hospital on the last admission, 2 dies after discharge

    @property
    def n(self) -> int:
        return int(self.subject_id.size)


def draw_patients(chunk: Chunk, first_index: int, n: int) -> Patients:
    rng = chunk.rng
    male = rng.random(n) < 0.52
    age = np.clip(np.rint(rng.normal(60, 17, n)), 18, 91).astype(np.int64)
    age = np.where(age >= 89, 91, age)
    group = rng.integers(0, len(YEAR_GROUPS), n)
    height = np.where(male, rng.normal(176, 7.5, n), rng.normal(162, 7, n)).clip(140, 205)
    bmi = np.clip(rng.lognormal(np.log(27.5), 0.2, n), 15, 60)
    u = rng.random(n)
    fate = np.where(u < P_DEATH_IN_HOSPITAL, 1, np.where(u < P_DEATH_IN_HOSPITAL + P_DEATH_AFTER, 2, 0))
    return Patients(
        subject_id=SUBJECT_ID_BASE + first_index + np.arange(n, dtype=np.int64),
        male=male,
        anchor_age=age,
        anchor_year=rng.integers(FIRST_ANCHOR_YEAR, LAST_ANCHOR_YEAR + 1, n),
        year_group=group,
        real_anchor_year=2008 + 3 * group + rng.integers(0, 3, n),
        height_cm=np.round(height, 1),
        weight_kg=np.round(bmi * (height / 100) ** 2, 1),
        fate=fate,
    )


def patients_table(p: Patients, dod: np.ndarray) -> pl.DataFrame:
    """`dod` is epoch seconds of death, or -1 for patients with no recorded death."""
    return pl.DataFrame({
        "subject_id": p.subject_id,
        "gender": np.where(p.male, "M", "F"),
        "anchor_age": p.anchor_age,
        "anchor_year": p.anchor_year,
        "anchor_year_group": np.asarray(YEAR_GROUPS)[p.year_group],
    }).with_columns(dates(np.maximum(dod, 0), "dod").scatter(np.flatnonzero(dod < 0), None)
                    if (dod < 0).any() else dates(dod, "dod"))
