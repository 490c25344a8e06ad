"""Outpatient visits (OMR): blood pressure, weight, height and BMI on clinic days.

Visit days fall between the anchor year and a year after the last discharge (never after death);
values come from the patient's latent height and weight so BMI is their actual ratio. The visit
days are returned too: some of them get outpatient labs (labevents with no hadm_id).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.admissions import Admissions
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.patients import Patients, year_start
from pipeline.ehr.synthetic.sampling import DAY, between, dates, expand, floor_to, number_text

LBS_PER_KG = 2.20462
CM_PER_INCH = 2.54


@dataclass
class Visits:
    """Outpatient visit days of one chunk (distinct per patient, in patient then day order)."""

    pat: np.ndarray
    day: np.ndarray  # epoch seconds of the visit day's midnight


def draw_visits(chunk: Chunk, pats: Patients, adm: Admissions, dod: np.ndarray) -> Visits:
    rng = chunk.rng
    counts = np.minimum(rng.poisson(2.5, pats.n), 10)
    last_disch = np.zeros(pats.n, dtype=np.int64)
    np.maximum.at(last_disch, adm.pat, adm.disch)
    hi = np.where(dod >= 0, dod, last_disch + 365 * DAY)
    pat, _ = expand(counts)
    day = floor_to(between(rng, year_start(pats.anchor_year)[pat], hi[pat]), DAY)
    visits = pl.DataFrame({"pat": pat, "day": day}).unique(maintain_order=True).sort("pat", "day")
    return Visits(pat=visits["pat"].to_numpy(), day=visits["day"].to_numpy())


def omr_table(chunk: Chunk, pats: Patients, visits: Visits) -> pl.DataFrame:
    rng = chunk.rng
    n = visits.pat.size
    weight = pats.weight_kg[visits.pat] * (1 + 0.03 * rng.standard_normal(n))
    height_in = np.round(pats.height_cm[visits.pat] / CM_PER_INCH * 2) / 2
    lbs = np.round(weight * LBS_PER_KG, 1)
    bmi = np.round(weight / (pats.height_cm[visits.pat] / 100) ** 2, 1)
    sys_bp = np.clip(np.rint(rng.normal(126, 16, n)), 80, 210).astype(np.int64)
    dia_bp = np.clip(np.rint(sys_bp * rng.uniform(0.52, 0.7, n)), 40, 130).astype(np.int64)
    has_weight = rng.random(n) < 0.8
    results = {
        "Blood Pressure": (rng.random(n) < 0.85, pl.DataFrame({"s": sys_bp, "d": dia_bp}).select(
            pl.format("{}/{}", "s", "d")).to_series()),
        "Weight (Lbs)": (has_weight, number_text(lbs, np.where(rng.random(n) < 0.6, 0, 1))),
        "BMI (kg/m2)": (has_weight & (rng.random(n) < 0.85), number_text(bmi, 1)),
        "Height (Inches)": (rng.random(n) < 0.3,
                            number_text(height_in, (height_in % 1 != 0).astype(np.int64))),
    }
    parts = []
    for name, (mask, values) in results.items():
        idx = np.flatnonzero(mask)
        parts.append(pl.DataFrame({
            "subject_id": pats.subject_id[visits.pat[idx]], "chartdate": dates(visits.day[idx]),
            "seq_num": np.ones(idx.size, dtype=np.int64), "result_name": np.full(idx.size, name),
            "result_value": values.gather(idx),
        }))
    return pl.concat(parts)
