"""Other ICU event tables: datetimeevents, outputevents, procedureevents, inputevents, ingredientevents.

All of them happen inside the ICU stay. Inputs are continuous drips (amount = rate x duration,
weight-based where the rate unit says so) or pushes/boluses; each input with a known main
ingredient (water, calories, ...) gets one ingredientevents row under the same orderid.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.admissions import Admissions
from pipeline.ehr.synthetic.catalog import probabilities
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.patients import Patients
from pipeline.ehr.synthetic.sampling import (
    DAY,
    HOUR,
    MINUTE,
    ceil_to,
    choice,
    choose_k,
    datetimes,
    ensure_any,
    expand,
    floor_to,
    mask,
    minute_between,
    nullable,
    skewed,
    take,
    take_null,
)
from pipeline.ehr.synthetic.stays import Stays

URINE = (226559, 226560)  # Foley, Void
# Rate unit -> factor turning rate x minutes (x kg where weight-based) into the amount's unit.
RATE_TO_AMOUNT: dict[str, tuple[float, bool]] = {
    "mL/hour": (1 / 60, False), "units/hour": (1 / 60, False), "mg/hour": (1 / 60, False),
    "mcg/hour": (1 / 60 / 1000, False), "mcg/kg/min": (1 / 1000, True), "mcg/kg/hour": (1 / 60, True),
}


def _ids(adm: Admissions, st: Stays, s: np.ndarray, chunk: Chunk) -> dict[str, object]:
    """The key columns every ICU event row carries."""
    return {"subject_id": adm.subject_id[st.adm][s], "hadm_id": adm.hadm_id[st.adm][s],
            "stay_id": st.stay_id[s], "caregiver_id": chunk.caregivers(s.size)}


def datetimeevents_table(chunk: Chunk, adm: Admissions, st: Stays) -> pl.DataFrame:
    """Line insertion and dressing/tubing change dates charted during the stay."""
    rng, items = chunk.rng, chunk.cat.icu_datetime
    s, item = choose_k(rng, probabilities(items["weight"]), np.minimum(1 + rng.poisson(2, st.n), 6))
    charttime = minute_between(rng, st.intime[s], st.outtime[s])
    uom = take(items["valueuom"], item)
    date_only = mask(uom == "Date")
    before = rng.integers(0, 2 * DAY, s.size)
    value = np.where(date_only, floor_to(charttime - before, DAY), floor_to(charttime - before, MINUTE))
    return pl.DataFrame({
        **_ids(adm, st, s, chunk), "charttime": datetimes(charttime),
        "storetime": datetimes(charttime + rng.integers(0, 30, s.size) * MINUTE),
        "itemid": take(items["itemid"], item), "value": datetimes(value), "valueuom": uom,
        "warning": np.zeros(s.size, dtype=np.int64),
    })


def outputevents_table(chunk: Chunk, adm: Admissions, st: Stays) -> pl.DataFrame:
    """Urine every 2-4 hours in most stays; a drain charted every 8 hours in some."""
    rng, items = chunk.rng, chunk.cat.icu_outputs
    itemids = items["itemid"].to_numpy()
    urine_rows = np.flatnonzero(np.isin(itemids, URINE))
    drain_rows = np.flatnonzero(~np.isin(itemids, URINE))
    t0 = ceil_to(st.intime, HOUR)
    blocks = []
    plans = ((urine_rows, 0.9, rng.choice([2, 4], st.n)), (drain_rows, 0.25, np.full(st.n, 8)))
    for rows, share, every in plans:
        has = ensure_any(rng.random(st.n) < share)
        row = rows[choice(rng, probabilities(items["weight"].to_numpy()[rows]), st.n)]
        count = np.where(has & (t0 < st.outtime), np.minimum((st.outtime - t0) // (every * HOUR) + 1, 60), 0)
        s, k = expand(count)
        blocks.append((s, t0[s] + k * every[s] * HOUR, row[s]))
    s, charttime, item = (np.concatenate(c) for c in zip(*blocks, strict=True))
    p5, p50, p95 = (items[c].to_numpy()[item] for c in ("p5", "p50", "p95"))
    value = np.rint(np.maximum(skewed(rng, p5, p50, p95), 0))
    return pl.DataFrame({
        **_ids(adm, st, s, chunk), "charttime": datetimes(charttime),
        "storetime": datetimes(charttime + rng.integers(0, 60, s.size) * MINUTE),
        "itemid": itemids[item], "value": value, "valueuom": take(items["valueuom"], item),
    })


def procedureevents_table(chunk: Chunk, adm: Admissions, pats: Patients, st: Stays) -> pl.DataFrame:
    """Lines, ventilation (continuous, value = minutes) and one-off tasks (imaging, EKG)."""
    rng, items = chunk.rng, chunk.cat.icu_procedures
    s, item = choose_k(rng, probabilities(items["weight"]), np.minimum(1 + rng.poisson(1.5, st.n), 6))
    n = s.size
    continuous = mask(take(items["ordercategorydescription"], item) == "ContinuousProcess")
    start = minute_between(rng, st.intime[s], st.outtime[s] - MINUTE)
    minutes = np.maximum(items["value_p50"].to_numpy()[item] * rng.lognormal(0, 0.6, n), 30)
    end = np.minimum(start + np.where(continuous, minutes * MINUTE, MINUTE).astype(np.int64), st.outtime[s])
    end = np.maximum(floor_to(end, MINUTE), start)
    value = np.where(continuous, (end - start) / MINUTE, 1.0)
    no_location = ~(rng.random(n) < items["location_share"].to_numpy()[item])
    orderid = chunk.ids.take("orderid", n)
    return pl.DataFrame({
        **_ids(adm, st, s, chunk), "starttime": datetimes(start), "endtime": datetimes(end),
        "storetime": datetimes(end + rng.integers(0, 60, n) * MINUTE),
        "itemid": take(items["itemid"], item), "value": value, "valueuom": take(items["valueuom"], item),
        "location": take_null(items["location"], item, no_location),
        "locationcategory": take_null(items["locationcategory"], item, no_location),
        "orderid": orderid, "linkorderid": orderid,
        "ordercategoryname": take(items["ordercategoryname"], item),
        "ordercategorydescription": take(items["ordercategorydescription"], item),
        "patientweight": pats.weight_kg[adm.pat[st.adm[s]]],
        "isopenbag": continuous.astype(np.int64), "continueinnextdept": np.zeros(n, dtype=np.int64),
        "statusdescription": np.where(rng.random(n) < 0.97, "FinishedRunning", "Stopped"),
        "originalamount": value, "originalrate": continuous.astype(np.float64),
    })


def input_tables(chunk: Chunk, adm: Admissions, pats: Patients, st: Stays) -> dict[str, pl.DataFrame]:
    rng, items = chunk.rng, chunk.cat.icu_inputs
    s, _ = expand(1 + rng.poisson(np.minimum(2 * st.los_hours / 24, 15)))
    n = s.size
    item = choice(rng, probabilities(items["weight"]), n)
    col = {c: items[c].to_numpy()[item] for c in ("amount_p50", "rate_p50", "rate_share", "minutes_p50",
                                                  "ingredient_ratio")}
    continuous = mask(take(items["ordercategorydescription"], item).str.starts_with("Continuous"))
    start = minute_between(rng, st.intime[s], st.outtime[s] - MINUTE)
    minutes = np.where(continuous, np.clip(col["minutes_p50"] * rng.lognormal(0, 0.6, n), 5, 24 * 60), 1.0)
    end = floor_to(np.minimum(start + (minutes * MINUTE).astype(np.int64), st.outtime[s]), MINUTE)
    end = np.maximum(end, np.minimum(start + MINUTE, st.outtime[s]))
    minutes = np.maximum((end - start) / MINUTE, 1.0)
    weight = pats.weight_kg[adm.pat[st.adm[s]]]
    rateuom = take(items["rateuom"], item)
    factor = rateuom.replace_strict({k: v[0] for k, v in RATE_TO_AMOUNT.items()}, default=None,
                                    return_dtype=pl.Float64).to_numpy()
    per_kg = rateuom.replace_strict({k: v[1] for k, v in RATE_TO_AMOUNT.items()}, default=False,
                                    return_dtype=pl.Boolean).fill_null(False).to_numpy()
    has_rate = (col["rate_share"] >= 0.5) & ~np.isnan(factor)
    rate = np.round(np.nan_to_num(col["rate_p50"]) * rng.lognormal(0, 0.4, n), 4)
    from_rate = rate * minutes * np.nan_to_num(factor) * np.where(per_kg, weight, 1.0)
    amount = np.round(np.where(has_rate, from_rate, col["amount_p50"] * rng.lognormal(0, 0.4, n)), 4)
    amountuom = take(items["amountuom"], item)
    dose = mask(amountuom == "dose")
    amount = np.where(dose, 1.0, amount)
    bag = rng.choice([50.0, 100.0, 250.0, 500.0, 1000.0], n)
    ml = mask(amountuom == "ml")
    total = np.where(ml, np.maximum(bag, np.ceil(amount / 50) * 50), bag)
    status = np.where(continuous, rng.choice(["FinishedRunning", "ChangeDose/Rate", "Stopped", "Paused"], n,
                                             p=[0.7, 0.2, 0.07, 0.03]), "FinishedRunning")
    orderid = chunk.ids.take("orderid", n)
    inputs = pl.DataFrame({
        **_ids(adm, st, s, chunk), "starttime": datetimes(start), "endtime": datetimes(end),
        "storetime": datetimes(start + rng.integers(0, 90, n) * MINUTE),
        "itemid": take(items["itemid"], item), "amount": amount, "amountuom": amountuom,
        "rate": nullable(rate, ~has_rate, "rate", pl.Float64),
        "rateuom": rateuom.scatter(np.flatnonzero(~has_rate), None) if (~has_rate).any() else rateuom,
        "orderid": orderid, "linkorderid": orderid,
        "ordercategoryname": take(items["ordercategoryname"], item),
        "secondaryordercategoryname": take(items["secondaryordercategoryname"], item),
        "ordercomponenttypedescription": take(items["ordercomponenttypedescription"], item),
        "ordercategorydescription": take(items["ordercategorydescription"], item),
        "patientweight": weight, "totalamount": total, "totalamountuom": np.full(n, "ml"),
        "isopenbag": np.zeros(n, dtype=np.int64), "continueinnextdept": np.zeros(n, dtype=np.int64),
        "statusdescription": status, "originalamount": total,
        "originalrate": np.where(has_rate, rate, amount),
    })
    ing = np.flatnonzero(~np.isnan(col["ingredient_ratio"]))
    ratio = col["ingredient_ratio"][ing]
    ml_rate = has_rate[ing] & mask(rateuom.gather(ing) == "mL/hour")
    ingredients = inputs[ing].select(
        "subject_id", "hadm_id", "stay_id", "caregiver_id", "starttime", "endtime", "storetime", "orderid",
        "linkorderid", "statusdescription",
        itemid=take(items["ingredient_itemid"], item[ing]),
        amount=pl.Series(np.round(amount[ing] * ratio, 4)),
        amountuom=take(items["ingredient_uom"], item[ing]),
        rate=nullable(np.round(rate[ing] * ratio, 4), ~ml_rate, "rate", pl.Float64),
        rateuom=pl.select(pl.when(pl.Series(ml_rate)).then(pl.lit("mL/hour"))).to_series(),
        originalamount=pl.Series(np.round(amount[ing] * ratio, 4)),
        originalrate=nullable(np.round(rate[ing] * ratio, 4), ~ml_rate, "originalrate", pl.Float64),
    )
    return {"inputevents": inputs, "ingredientevents": ingredients}
