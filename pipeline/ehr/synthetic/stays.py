"""Where a patient was during an admission: ICU stays, ward/unit transfers and services.

An admission's course is a fixed sequence of optional segments -- PACU, ward, first ICU unit,
second ICU unit, ward, discharge lounge -- each kept only if it starts after the previous kept
one. Transfers are the kept segments (first one `admit`, then `transfer`) plus a `discharge`
row at dischtime, so the ICU rows always carry the stay's first and last care unit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.admissions import Admissions
from pipeline.ehr.synthetic.catalog import probabilities
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.sampling import DAY, HOUR, MINUTE, choice, datetimes, ensure_any, nulls, take

SURGICAL_TYPES = ("ELECTIVE", "SURGICAL SAME DAY ADMISSION")


@dataclass
class Stays:
    """ICU stays of one chunk (at most one per admission)."""

    stay_id: np.ndarray
    adm: np.ndarray  # index into Admissions
    intime: np.ndarray
    outtime: np.ndarray
    first_unit: np.ndarray  # careunit names
    last_unit: np.ndarray

    @property
    def n(self) -> int:
        return int(self.stay_id.size)

    @property
    def los_hours(self) -> np.ndarray:
        return (self.outtime - self.intime) / HOUR


def draw_stays(chunk: Chunk, adm: Admissions) -> Stays:
    """One ICU stay per flagged admission; switches one admission's flag on if a chunk has none."""
    rng, cat = chunk.rng, chunk.cat
    span = adm.disch - adm.admit
    has_icu = ensure_any(adm.has_icu & (span >= 3 * HOUR), int(np.argmax(span)))
    adm.has_icu = has_icu
    idx = np.flatnonzero(has_icu)
    n = idx.size
    admit, disch = adm.admit[idx], adm.disch[idx]
    span = disch - admit
    at_admit = rng.random(n) < 0.35
    intime = admit + np.where(at_admit, 0, (rng.random(n) * 0.5 * span).astype(np.int64))
    intime = np.maximum(np.minimum(intime, disch - 2 * HOUR), admit)
    icu_len = (rng.lognormal(np.log(2.0), 0.8, n) * DAY).astype(np.int64)
    outtime = intime + np.maximum(icu_len, 2 * HOUR) - rng.integers(0, MINUTE, n)  # unit clocks keep seconds
    dies_in_icu = adm.died[idx] & (rng.random(n) < 0.7)
    # Leaving the ICU within the last hour of the admission (or dying there) ends the admission.
    outtime = np.where(dies_in_icu | (outtime >= disch - HOUR), disch, outtime)
    intime = intime + np.where(at_admit, 0, rng.integers(0, MINUTE, n))

    icu_units = cat.careunits.filter(pl.col("kind") == "icu")
    home = take(cat.services["icu_careunit"], adm.service[idx]).to_numpy()
    other = take(icu_units["careunit"], choice(rng, probabilities(icu_units["weight"]), n)).to_numpy()
    first = np.where(rng.random(n) < 0.8, home, other)
    second = take(icu_units["careunit"], choice(rng, probabilities(icu_units["weight"]), n)).to_numpy()
    last = np.where((rng.random(n) < 0.15) & (outtime - intime > 6 * HOUR), second, first)
    return Stays(stay_id=chunk.ids.take("stay_id", n), adm=idx, intime=intime, outtime=outtime,
                 first_unit=first.astype(object), last_unit=last.astype(object))


def icustays_table(adm: Admissions, st: Stays) -> pl.DataFrame:
    return pl.DataFrame({
        "subject_id": adm.subject_id[st.adm],
        "hadm_id": adm.hadm_id[st.adm],
        "stay_id": st.stay_id,
        "first_careunit": pl.Series(st.first_unit, dtype=pl.String),
        "last_careunit": pl.Series(st.last_unit, dtype=pl.String),
        "intime": datetimes(st.intime),
        "outtime": datetimes(st.outtime),
        "los": (st.outtime - st.intime) / DAY,
    })


def transfers_table(chunk: Chunk, adm: Admissions, st: Stays) -> pl.DataFrame:
    rng, cat = chunk.rng, chunk.cat
    n = adm.n
    types = take(cat.admission_types["admission_type"], adm.adm_type).to_numpy()
    ward = take(cat.services["ward_careunit"], adm.service).to_numpy().astype(object)
    wards = cat.careunits.filter(pl.col("kind") == "ward")
    other_ward = take(wards["careunit"], choice(rng, probabilities(wards["weight"]), n)).to_numpy()
    other_ward = other_ward.astype(object)
    icu_in = np.full(n, np.iinfo(np.int64).max)
    icu_out = np.full(n, np.iinfo(np.int64).max)
    icu_mid = np.full(n, np.iinfo(np.int64).max)
    first_unit = np.full(n, None, dtype=object)
    last_unit = np.full(n, None, dtype=object)
    icu_in[st.adm], icu_out[st.adm] = st.intime, st.outtime
    first_unit[st.adm], last_unit[st.adm] = st.first_unit, st.last_unit
    changed = np.zeros(n, dtype=bool)
    changed[st.adm] = st.first_unit != st.last_unit
    icu_mid[st.adm] = st.intime + ((st.outtime - st.intime) * rng.uniform(0.3, 0.7, st.n)).astype(np.int64)

    span = adm.disch - adm.admit
    pacu = np.isin(types, SURGICAL_TYPES) & (rng.random(n) < 0.6) & (span > 8 * HOUR)
    pacu_end = adm.admit + rng.integers(2 * HOUR, 6 * HOUR, n)
    ward2_at = adm.admit + (span * rng.uniform(0.3, 0.7, n)).astype(np.int64)
    lounge_at = adm.disch - rng.integers(HOUR, 4 * HOUR, n)
    # Candidate segments in course order: (start, unit, wanted).
    segments = [
        (adm.admit, np.full(n, "PACU", dtype=object), pacu),
        (np.where(pacu, pacu_end, adm.admit), ward, np.ones(n, dtype=bool)),
        (icu_in, first_unit, adm.has_icu),
        (icu_mid, last_unit, adm.has_icu & changed),
        (np.where(adm.has_icu, icu_out, ward2_at), np.where(adm.has_icu, ward, other_ward),
         np.where(adm.has_icu, icu_out < adm.disch - HOUR, rng.random(n) < 0.25)),
        (lounge_at, np.full(n, "Discharge Lounge", dtype=object), (rng.random(n) < 0.1) & ~adm.died),
    ]
    starts = np.stack([s[0] for s in segments], axis=1)
    units = np.stack([s[1] for s in segments], axis=1)
    keep = np.stack([s[2] for s in segments], axis=1)
    latest = np.full(n, np.iinfo(np.int64).min)
    for k in range(len(segments)):
        if k in (2, 3):  # the ICU stay itself: always kept; later segments start at or after its end
            ok = keep[:, k]
        else:
            end = np.minimum(adm.disch, icu_in) if k < 2 else adm.disch  # pre-ICU segments end at ICU
            ok = keep[:, k] & (starts[:, k] > latest) & (starts[:, k] < end)
        keep[:, k] = ok
        latest = np.where(ok, starts[:, k], latest)
        if k == 3:
            latest = np.where(adm.has_icu, icu_out - 1, latest)
    a, k = np.nonzero(keep)  # row-major: admission order, then course order
    intime = starts[a, k]
    nxt = np.r_[intime[1:], 0]
    same_next = np.r_[a[1:] == a[:-1], False]
    outtime = np.where(same_next, nxt, adm.disch[a])
    first_row = np.r_[True, a[1:] != a[:-1]]
    moves = pl.DataFrame({
        "subject_id": adm.subject_id[a],
        "hadm_id": adm.hadm_id[a],
        "eventtype": np.where(first_row, "admit", "transfer"),
        "careunit": pl.Series(units[a, k], dtype=pl.String),
        "intime": datetimes(intime),
        "outtime": datetimes(outtime),
    })
    discharges = pl.DataFrame({
        "subject_id": adm.subject_id,
        "hadm_id": adm.hadm_id,
        "eventtype": np.full(n, "discharge"),
        "careunit": nulls(n),
        "intime": datetimes(adm.disch),
        "outtime": datetimes(adm.disch, null=np.ones(n, dtype=bool)),
    })
    out = pl.concat([moves, discharges]).sort("hadm_id", "intime", maintain_order=True)
    return out.with_columns(transfer_id=pl.Series(chunk.ids.take("transfer_id", out.height)))


def services_table(chunk: Chunk, adm: Admissions) -> pl.DataFrame:
    """First service at admission; a quarter of longer admissions change service once."""
    rng, cat = chunk.rng, chunk.cat
    names = cat.services["service"]
    p = probabilities(cat.services["weight"])
    second = choice(rng, p, adm.n)
    change = (rng.random(adm.n) < 0.25) & (second != adm.service) & (adm.disch - adm.admit > DAY)
    at = adm.admit + ((adm.disch - adm.admit) * rng.uniform(0.2, 0.8, adm.n)).astype(np.int64)
    first = pl.DataFrame({"subject_id": adm.subject_id, "hadm_id": adm.hadm_id,
                          "transfertime": datetimes(adm.admit),
                          "prev_service": nulls(adm.n),
                          "curr_service": take(names, adm.service)})
    idx = np.flatnonzero(change)
    moved = pl.DataFrame({"subject_id": adm.subject_id[idx], "hadm_id": adm.hadm_id[idx],
                          "transfertime": datetimes(at[idx]), "prev_service": take(names, adm.service[idx]),
                          "curr_service": take(names, second[idx])})
    return pl.concat([first, moved])
