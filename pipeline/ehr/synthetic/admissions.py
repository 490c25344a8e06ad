"""Hospital admissions: non-overlapping stays per patient, death, ED visits, coding era.

Each patient gets 1-8 admissions laid end to end with gaps, starting in their anchor year. A
patient fated to die in hospital dies at the discharge of the last admission (deathtime =
dischtime, dod = that day); others may die within a year of their last discharge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.catalog import probabilities
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.patients import Patients, year_of, year_start
from pipeline.ehr.synthetic.sampling import (
    DAY,
    HOUR,
    MINUTE,
    between,
    choice,
    datetimes,
    days,
    expand,
    floor_to,
    mask,
    take,
    text_where,
)

ICD10_START = 2015.75  # US hospitals switched to ICD-10 on 2015-10-01
YEAR = 365.25 * DAY


@dataclass
class Admissions:
    """Per-admission arrays of one chunk, in subject then time order."""

    hadm_id: np.ndarray
    pat: np.ndarray  # index into the chunk's Patients
    subject_id: np.ndarray
    admit: np.ndarray  # epoch seconds
    disch: np.ndarray
    adm_type: np.ndarray  # index into catalog admission_types
    observation: np.ndarray
    service: np.ndarray  # index into catalog services
    has_icu: np.ndarray
    icd10: np.ndarray
    died: np.ndarray
    age: np.ndarray  # age at admission

    @property
    def n(self) -> int:
        return int(self.hadm_id.size)

    @property
    def los_days(self) -> np.ndarray:
        return (self.disch - self.admit) / DAY


def draw_admissions(chunk: Chunk, pats: Patients) -> tuple[Admissions, np.ndarray]:
    """Admissions of the chunk's patients, and each patient's dod in epoch seconds (-1 if alive)."""
    rng, cat = chunk.rng, chunk.cat
    counts = np.minimum(rng.geometric(0.55, pats.n), 8)
    pat, nth = expand(counts)
    n = pat.size
    last = nth == counts[pat] - 1

    types = cat.admission_types
    adm_type = choice(rng, probabilities(types["weight"]), n)
    observation = mask(types["admission_type"].str.contains("OBSERVATION"))[adm_type]
    los = np.where(observation, rng.lognormal(np.log(1.0), 0.6, n).clip(0.1, 5),
                   rng.lognormal(np.log(4.0), 0.75, n).clip(0.15, 45))
    los_s = np.maximum(days(los), 2 * HOUR)
    gap = np.where(nth == 0, rng.random(n) * 3 * YEAR, DAY + rng.exponential(300 * DAY, n)).astype(np.int64)
    step = gap + np.where(nth == 0, 0, np.roll(los_s, 1))  # previous admission's length, then the gap
    cum = np.cumsum(step)
    first_of = np.flatnonzero(nth == 0)
    before = np.repeat(cum[first_of] - step[first_of], counts)
    admit = floor_to(year_start(pats.anchor_year)[pat] + cum - before + rng.integers(0, DAY, n), MINUTE)
    disch = floor_to(admit + los_s, MINUTE)

    died = last & (pats.fate[pat] == 1)
    has_icu = rng.random(n) < np.where(died, 0.75, np.where(observation, 0.05, 0.28))
    service = choice(rng, probabilities(cat.services["weight"]), n)
    real_year = pats.real_anchor_year[pat] + (admit - year_start(pats.anchor_year)[pat]) / YEAR
    adm = Admissions(
        hadm_id=chunk.ids.take("hadm_id", n), pat=pat, subject_id=pats.subject_id[pat], admit=admit,
        disch=disch, adm_type=adm_type, observation=observation, service=service, has_icu=has_icu,
        icd10=real_year >= ICD10_START, died=died,
        age=pats.anchor_age[pat] + year_of(admit) - pats.anchor_year[pat],
    )
    last_disch = disch[last]  # one per patient, in patient order
    dod = np.full(pats.n, -1, dtype=np.int64)
    dod = np.where(pats.fate == 1, last_disch, dod)
    dod = np.where(pats.fate == 2, last_disch + days(rng.integers(1, 366, pats.n)), dod)
    return adm, dod


def _field(chunk: Chunk, name: str, size: int, exclude: tuple[str, ...] = ()) -> pl.Series:
    table = chunk.cat.field(name).filter(~pl.col("value").is_in(exclude) | pl.col("value").is_null())
    return take(table["value"], choice(chunk.rng, probabilities(table["weight"]), size), name)


def admissions_table(chunk: Chunk, pats: Patients, adm: Admissions) -> pl.DataFrame:
    rng, cat = chunk.rng, chunk.cat
    n = adm.n
    ed_rate = cat.admission_types["ed_rate"].to_numpy()[adm.adm_type]
    has_ed = rng.random(n) < ed_rate
    edreg = floor_to(adm.admit - between(rng, np.full(n, HOUR), np.full(n, 10 * HOUR)), MINUTE)
    edout = np.minimum(floor_to(adm.admit + between(rng, np.full(n, -HOUR), np.full(n, 2 * HOUR)), MINUTE),
                       adm.disch)
    edout = np.maximum(edout, edreg + 30 * MINUTE)
    # Per-patient traits, repeated on each of their admissions.
    per_patient = {name: _field(chunk, name, pats.n).gather(adm.pat)
                   for name in ("insurance", "language", "marital_status", "race")}
    location = _field(chunk, "admission_location", n, exclude=("EMERGENCY ROOM",))
    discharge = _field(chunk, "discharge_location", n)
    return pl.DataFrame({
        "subject_id": adm.subject_id,
        "hadm_id": adm.hadm_id,
        "admittime": datetimes(adm.admit),
        "dischtime": datetimes(adm.disch),
        "deathtime": datetimes(adm.disch, null=~adm.died),
        "admission_type": take(cat.admission_types["admission_type"], adm.adm_type),
        "admit_provider_id": chunk.providers(n, share=0.97),
        "admission_location": text_where(has_ed, "EMERGENCY ROOM").fill_null(location),
        "discharge_location": text_where(adm.died, "DIED").fill_null(discharge),
        **per_patient,
        "edregtime": datetimes(edreg, null=~has_ed),
        "edouttime": datetimes(edout, null=~has_ed),
        "hospital_expire_flag": adm.died.astype(np.int64),
    })
