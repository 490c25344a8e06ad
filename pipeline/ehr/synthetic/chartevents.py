"""ICU charting (chartevents): vital signs on a regular cadence, GCS, weight and height.

Each stay charts every 1, 2 or 4 hours from the first full hour after ICU admission: heart rate,
respiratory rate, SpO2 and a blood pressure triple (arterial line in some stays, cuff otherwise;
diastolic below systolic, mean between). Temperature and GCS are charted every 4 hours, finger-
stick glucose every 6 hours in about 40% of stays, admission weight and height once. A stay has
its own baseline per vital, so values drift around a patient-specific level.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.admissions import Admissions
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.patients import Patients
from pipeline.ehr.synthetic.sampling import (
    HOUR,
    MINUTE,
    ceil_to,
    choice,
    datetimes,
    expand,
    number_text,
    round_to,
)
from pipeline.ehr.synthetic.stays import Stays

MAX_TIMES = 120  # charting times per stay; long stays chart less often
GCS_GROUPS = ("gcs_eye", "gcs_verbal", "gcs_motor")


class _Rows:
    """Accumulates chart rows as parallel arrays, one block per item group."""

    def __init__(self) -> None:
        self.blocks: list[tuple[np.ndarray, ...]] = []

    def add(self, stay: np.ndarray, time: np.ndarray, itemid: int, value: np.ndarray, decimals: int) -> None:
        n = stay.size
        self.blocks.append((stay, time, np.full(n, itemid), value, np.full(n, decimals)))

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate(col) for col in zip(*self.blocks, strict=True))


def _level(chunk: Chunk, group: str, stay: np.ndarray, n_stays: int) -> tuple[np.ndarray, dict]:
    """Values of one vital at rows belonging to `stay`: stay baseline + within-stay noise, clipped."""
    p = chunk.cat.vital(group)
    base = p["mean"] + p["sd_between"] * chunk.rng.standard_normal(n_stays)
    value = base[stay] + p["sd_within"] * chunk.rng.standard_normal(stay.size)
    return np.clip(value, p["min"], p["max"]), p


def chartevents_table(chunk: Chunk, adm: Admissions, pats: Patients, st: Stays) -> pl.DataFrame:
    rng, cat = chunk.rng, chunk.cat
    n = st.n
    cadence = np.array([1, 2, 4])[choice(rng, np.array([0.2, 0.5, 0.3]), n)]
    cadence = np.maximum(cadence, np.ceil(st.los_hours / MAX_TIMES)).astype(np.int64)
    t0 = ceil_to(st.intime, HOUR)
    t0 = np.where(t0 <= st.outtime, t0, st.intime)
    s, k = expand((st.outtime - t0) // (cadence * HOUR) + 1)
    hour = k * cadence[s]
    time = t0[s] + hour * HOUR
    rows = _Rows()
    for group in ("hr", "rr", "spo2"):
        value, p = _level(chunk, group, s, n)
        rows.add(s, time, p["itemid"], value, p["decimals"])
    arterial = rng.random(n) < 0.3
    for prefix, use in (("abp", arterial[s]), ("nibp", ~arterial[s])):
        sys_v, p_sys = _level(chunk, f"{prefix}_sys", s[use], n)
        p_dia, p_mean = cat.vital(f"{prefix}_dia"), cat.vital(f"{prefix}_mean")
        dia = np.clip(sys_v * rng.uniform(0.45, 0.62, sys_v.size), p_dia["min"], p_dia["max"])
        dia = np.maximum(np.minimum(np.rint(dia), np.rint(sys_v) - 10), 20)
        mean = np.clip((np.rint(sys_v) + 2 * dia) / 3, p_mean["min"], p_mean["max"])
        rows.add(s[use], time[use], p_sys["itemid"], sys_v, 0)
        rows.add(s[use], time[use], p_dia["itemid"], dia, 0)
        rows.add(s[use], time[use], p_mean["itemid"], mean, 0)
    every4 = hour % 4 == 0
    celsius = rng.random(n) < 0.1
    for group, use in (("temp_f", every4 & ~celsius[s]), ("temp_c", every4 & celsius[s])):
        value, p = _level(chunk, group, s[use], n)
        rows.add(s[use], time[use], p["itemid"], value, p["decimals"])
    for group in GCS_GROUPS:
        value, p = _level(chunk, group, s[every4], n)
        rows.add(s[every4], time[every4], p["itemid"], np.rint(value), 0)
    glucose = (hour % 6 == 0) & (rng.random(n) < 0.4)[s]
    value, p = _level(chunk, "glucose_fs", s[glucose], n)
    rows.add(s[glucose], time[glucose], p["itemid"], value, p["decimals"])
    first = k == 0
    pat = adm.pat[st.adm]
    weight = pats.weight_kg[pat] * (1 + 0.02 * rng.standard_normal(n))
    rows.add(s[first], time[first], cat.vital("weight")["itemid"], weight[s[first]], 1)
    tall = first & (rng.random(n) < 0.6)[s]
    rows.add(s[tall], time[tall], cat.vital("height")["itemid"], pats.height_cm[pat][s[tall]], 0)

    stay, charttime, itemid, value, decimals = rows.arrays()
    value = round_to(value, decimals) + 0.0
    frame = pl.DataFrame({
        "subject_id": adm.subject_id[st.adm][stay],
        "hadm_id": adm.hadm_id[st.adm][stay],
        "stay_id": st.stay_id[stay],
        "caregiver_id": chunk.caregivers(stay.size),
        "charttime": datetimes(charttime),
        "storetime": datetimes(charttime + rng.integers(0, 45, stay.size) * MINUTE),
        "itemid": itemid,
        "text": number_text(value, decimals),
        "valuenum": value,
        "warning": np.zeros(stay.size, dtype=np.int64),
    })
    uom = cat.vitals.select("itemid", "valueuom")
    gcs = cat.gcs.select("itemid", pl.col("valuenum").cast(pl.Float64), gcs_text="value")
    return (frame.join(uom, on="itemid", how="left", maintain_order="left")
            .join(gcs, on=["itemid", "valuenum"], how="left", maintain_order="left")
            .with_columns(value=pl.coalesce("gcs_text", "text")))
