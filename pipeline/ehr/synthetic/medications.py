"""Medications: prescriptions, pharmacy orders, eMAR administrations and their details.

One medication order (a poe row, built in `orders.py`) becomes one pharmacy_id: a pharmacy row,
a MAIN prescription line and, for IV piggybacks, a BASE diluent line under the same pharmacy_id.
Scheduled drugs are given every 24/doses_per_24_hrs hours between start and stop (at most six
charted doses each), PRN drugs a few times; every administration is an eMAR row with a parent
detail row (dose due) and a product row (dose given, product code).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.admissions import Admissions
from pipeline.ehr.synthetic.catalog import probabilities
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.sampling import (
    HOUR,
    MINUTE,
    between,
    ceil_to,
    choice,
    choose_k,
    datetimes,
    expand,
    floor_to,
    group_rank,
    mask,
    nullable,
    nulls,
    take,
    text_where,
)

MAX_DOSES = 6
AT_DISCHARGE = "Discontinued via patient discharge"


@dataclass
class MedPlan:
    """Medication orders of one chunk (one per pharmacy_id), before poe ids are known."""

    adm: np.ndarray  # index into Admissions
    drug: np.ndarray  # row of the MAIN drug in the drugs catalog
    ordertime: np.ndarray
    start: np.ndarray
    stop: np.ndarray  # always set; `stop_null` hides it where MIMIC leaves stoptime empty
    stop_null: np.ndarray
    discontinued: np.ndarray  # stopped by a separate D/C order at `stop`
    base: np.ndarray  # row of the BASE diluent line, -1 if none
    pharmacy_id: np.ndarray
    provider: pl.Series

    @property
    def n(self) -> int:
        return int(self.adm.size)


def _drug_column(chunk: Chunk, name: str, idx: np.ndarray) -> np.ndarray:
    return chunk.cat.drugs[name].to_numpy()[idx]


def plan_medications(chunk: Chunk, adm: Admissions) -> MedPlan:
    rng, drugs = chunk.rng, chunk.cat.drugs
    main = np.flatnonzero(drugs["drug_type"].to_numpy() == "MAIN")
    base = np.flatnonzero(drugs["drug_type"].to_numpy() == "BASE")
    scale = np.where(adm.has_icu, 1.3, 1.0)
    k = np.minimum(2 + rng.poisson(np.minimum(1.0 * adm.los_days * scale, 15)), 25)
    weight = drugs["weight"].to_numpy()[main]
    drip = drugs["route"].to_numpy()[main] == "IV DRIP"  # pressors and sedation drips: ICU only
    rows, picks = [], []
    for icu in (False, True):
        idx = np.flatnonzero(adm.has_icu == icu)
        r, pick = choose_k(rng, probabilities(np.where(drip & ~icu, 0.0, weight)), k[idx])
        rows.append(idx[r])
        picks.append(pick)
    a, pick = np.concatenate(rows), np.concatenate(picks)
    order = np.argsort(a, kind="stable")
    a, drug = a[order], main[pick[order]]
    n = a.size
    admit, disch = adm.admit[a], adm.disch[a]
    span = disch - admit
    ordertime = admit + (span * rng.beta(1.0, 2.2, n)).astype(np.int64)
    start = ceil_to(ordertime, HOUR)
    start = np.where(start <= disch, start, floor_to(ordertime, MINUTE))
    frequency = _drug_column(chunk, "frequency", drug).astype(str)
    once = np.char.find(frequency, "ONCE") >= 0
    once |= np.char.find(frequency, "NOW") >= 0
    until_discharge = rng.random(n) < 0.3
    stop = start + ((disch - start) * rng.uniform(0.15, 1.0, n)).astype(np.int64)
    stop = np.where(until_discharge, disch, np.minimum(ceil_to(stop, HOUR), disch))
    stop = np.where(once, np.minimum(start + HOUR, disch), stop)
    discontinued = ~until_discharge & ~once & (stop < disch - HOUR) & (rng.random(n) < 0.3)
    piggyback = _drug_column(chunk, "proc_type", drug).astype(str) == "IV Piggyback"
    with_base = piggyback & (rng.random(n) < 0.8)
    base_row = np.where(with_base, base[choice(rng, probabilities(drugs["weight"].to_numpy()[base]), n)], -1)
    return MedPlan(adm=a, drug=drug, ordertime=ordertime, start=start, stop=stop,
                   stop_null=rng.random(n) < 0.02, discontinued=discontinued, base=base_row,
                   pharmacy_id=chunk.ids.take("pharmacy_id", n),
                   provider=chunk.providers(n, share=0.97, name="order_provider_id"))


def prescriptions_table(chunk: Chunk, adm: Admissions, plan: MedPlan, poe_id: pl.Series,
                        poe_seq: np.ndarray) -> pl.DataFrame:
    drugs = chunk.cat.drugs
    has_base = np.flatnonzero(plan.base >= 0)
    line = np.r_[np.arange(plan.n), has_base]  # MAIN lines, then BASE lines
    row = np.r_[plan.drug, plan.base[has_base]]
    product = drugs.select("drug_type", "drug", "formulary_drug_cd", "gsn", "ndc", "prod_strength", "form_rx",
                           "dose_val_rx", "dose_unit_rx", "form_val_disp", "form_unit_disp",
                           "doses_per_24_hrs", "route")[row]
    return pl.DataFrame({
        "subject_id": adm.subject_id[plan.adm[line]],
        "hadm_id": adm.hadm_id[plan.adm[line]],
        "pharmacy_id": plan.pharmacy_id[line],
        "poe_id": poe_id.gather(line),
        "poe_seq": poe_seq[line],
        "order_provider_id": plan.provider.gather(line),
        "starttime": datetimes(plan.start[line]),
        "stoptime": datetimes(plan.stop[line], null=plan.stop_null[line]),
    }).hstack(product)


def pharmacy_table(chunk: Chunk, adm: Admissions, plan: MedPlan, poe_id: pl.Series) -> pl.DataFrame:
    rng, cat = chunk.rng, chunk.cat
    n = plan.n
    status = cat.event_field("pharmacy", "status").filter(pl.col("value") != AT_DISCHARGE)
    dispensation = cat.event_field("pharmacy", "dispensation")
    at_discharge = plan.stop >= adm.disch[plan.adm]
    status_text = take(status["value"], choice(rng, probabilities(status["weight"]), n))
    status_text = pl.select(pl.when(pl.Series(at_discharge)).then(pl.lit(AT_DISCHARGE))
                            .otherwise(status_text)).to_series()
    drug = cat.drugs.select("drug", "proc_type", "route", "frequency", "disp_sched", "infusion_type",
                            "sliding_scale", "doses_per_24_hrs")[plan.drug].rename({"drug": "medication"})
    null_str = nulls(n)
    return pl.DataFrame({
        "subject_id": adm.subject_id[plan.adm],
        "hadm_id": adm.hadm_id[plan.adm],
        "pharmacy_id": plan.pharmacy_id,
        "poe_id": poe_id,
        "starttime": datetimes(plan.start),
        "stoptime": datetimes(plan.stop, null=plan.stop_null),
        "status": status_text,
        "entertime": datetimes(plan.ordertime),
        "verifiedtime": datetimes(plan.ordertime + rng.integers(0, 30 * MINUTE, n)),
        "lockout_interval": null_str, "basal_rate": nulls(n, pl.Float64),
        "one_hr_max": null_str, "duration": nulls(n, pl.Float64),
        "duration_interval": np.full(n, "Ongoing"),
        "expiration_value": np.full(n, 36, dtype=np.int64), "expiration_unit": np.full(n, "Hours"),
        "expirationdate": datetimes(plan.start, null=np.ones(n, dtype=bool)),
        "dispensation": take(dispensation["value"], choice(rng, probabilities(dispensation["weight"]), n)),
        "fill_quantity": null_str,
    }).hstack(drug)


@dataclass
class Doses:
    """eMAR administrations: which order, when charted, when scheduled."""

    order: np.ndarray
    charttime: np.ndarray
    scheduletime: np.ndarray


def _doses(chunk: Chunk, adm: Admissions, plan: MedPlan) -> Doses:
    rng = chunk.rng
    per_day = np.nan_to_num(_drug_column(chunk, "doses_per_24_hrs", plan.drug).astype(np.float64), nan=0.0)
    frequency = _drug_column(chunk, "frequency", plan.drug).astype(str)
    prn = (np.char.find(frequency, "PRN") >= 0) | (per_day <= 0)
    interval = np.where(prn, 0, 24 * HOUR / np.maximum(per_day, 1)).astype(np.int64)
    length = plan.stop - plan.start
    scheduled = np.minimum(length // np.maximum(interval, 1) + 1, MAX_DOSES)
    count = np.where(prn, np.minimum(rng.poisson(1.5, plan.n), 4), scheduled)
    order, k = expand(count)
    nominal = np.where(prn[order], between(rng, plan.start[order], plan.stop[order]),
                       plan.start[order] + k * interval[order])
    jitter = rng.integers(-20 * MINUTE, 60 * MINUTE, order.size)
    charttime = floor_to(np.clip(nominal + jitter, plan.start[order], plan.stop[order]), MINUTE)
    charttime = np.maximum(charttime, adm.admit[plan.adm[order]])
    return Doses(order=order, charttime=charttime, scheduletime=floor_to(nominal, MINUTE))


def emar_tables(chunk: Chunk, adm: Admissions, plan: MedPlan, poe_id: pl.Series) -> dict[str, pl.DataFrame]:
    rng, cat = chunk.rng, chunk.cat
    doses = _doses(chunk, adm, plan)
    o = doses.order
    n = o.size
    subject = adm.subject_id[plan.adm[o]]
    emar_seq = group_rank(subject, doses.charttime)
    emar_id = pl.DataFrame({"s": subject, "q": emar_seq}).select(pl.format("{}-{}", "s", "q")).to_series()
    drug = cat.drugs[plan.drug[o]]
    name = drug["drug"]
    flush = mask(name.str.contains("(?i)flush"))
    events = cat.event_field("emar", "event_txt").filter(~pl.col("value").str.contains("Flush"))
    event_txt = take(events["value"], choice(rng, probabilities(events["weight"]), n))
    flushed = pl.Series(np.where(rng.random(n) < 0.75, "Flushed", "Not Flushed"))
    event_txt = pl.select(pl.when(pl.Series(flush)).then(flushed).otherwise(event_txt)).to_series()
    pharmacy_id = nullable(plan.pharmacy_id[o], rng.random(n) < 0.03, "pharmacy_id", pl.Int64)
    emar = pl.DataFrame({
        "subject_id": subject,
        "hadm_id": adm.hadm_id[plan.adm[o]],
        "emar_id": emar_id,
        "emar_seq": emar_seq,
        "poe_id": poe_id.gather(o),
        "pharmacy_id": pharmacy_id,
        "enter_provider_id": chunk.providers(n, share=0.08, name="enter_provider_id"),
        "charttime": datetimes(doses.charttime),
        "medication": name,
        "event_txt": event_txt,
        "scheduletime": datetimes(doses.scheduletime),
        "storetime": datetimes(doses.charttime + rng.integers(0, 10, n) * MINUTE),
    })
    given = ~mask(event_txt.str.contains("Not|Hold"))
    return {"emar": emar, "emar_detail": _emar_detail(drug, emar, given, pharmacy_id)}


def _emar_detail(drug: pl.DataFrame, emar: pl.DataFrame, given: np.ndarray,
                 pharmacy_id: pl.Series) -> pl.DataFrame:
    """Two rows per administration: the parent (dose due) and the product given (ordinal 1.1)."""
    n = emar.height
    route = drug["route"]
    drip = mask(route == "IV DRIP")
    flush = mask(drug["drug"].str.contains("(?i)flush"))
    insulin = mask(drug["drug"].str.starts_with("Insulin"))
    admin_type = np.where(drip, "IV Infusion", np.where(flush, "IV Flush", np.where(
        insulin, "Insulin SC Sliding Scale", "Standard Maintenance Medication")))
    none_s = nulls(n)
    none_f = nulls(n, pl.Float64)
    not_given = ~given
    common = {"subject_id": emar["subject_id"], "emar_id": emar["emar_id"], "emar_seq": emar["emar_seq"]}
    empty = {c: none_s for c in (
        "reason_for_no_barcode", "product_description_other", "infusion_complete", "completion_interval",
        "new_iv_bag_hung", "continued_infusion_in_other_location", "restart_interval", "side", "site",
        "non_formulary_visual_verification")}
    parent = pl.DataFrame({
        **common, "parent_field_ordinal": none_f, "administration_type": admin_type, "pharmacy_id": pl.Series(
            [None] * n, dtype=pl.Int64), "barcode_type": none_s,
        "complete_dose_not_given": np.where(given, "No", "Yes"), "dose_due": drug["dose_val_rx"],
        "dose_due_unit": drug["dose_unit_rx"], "dose_given": none_s, "dose_given_unit": none_s,
        "will_remainder_of_dose_be_given": np.full(n, "No"), "product_amount_given": none_f,
        "product_unit": none_s, "product_code": none_s, "product_description": none_s,
        "prior_infusion_rate": none_f, "infusion_rate": none_f,
        "infusion_rate_adjustment": text_where(drip, "See Flowsheet for Titration"),
        "infusion_rate_adjustment_amount": none_f, "infusion_rate_unit": text_where(drip, "mL/hr"),
        "route": none_s, **empty,
    })
    amount = drug["form_val_disp"].cast(pl.Float64, strict=False)
    oral = mask(route.str.starts_with("PO"))
    product = pl.DataFrame({
        **common, "parent_field_ordinal": np.full(n, 1.1), "administration_type": none_s,
        "pharmacy_id": pharmacy_id, "barcode_type": np.full(n, "if"), "complete_dose_not_given": none_s,
        "dose_due": none_s, "dose_due_unit": none_s,
        "dose_given": drug["dose_val_rx"].scatter(np.flatnonzero(not_given), None) if not_given.any()
        else drug["dose_val_rx"],
        "dose_given_unit": drug["dose_unit_rx"], "will_remainder_of_dose_be_given": none_s,
        "product_amount_given": (amount.scatter(np.flatnonzero(not_given), None) if not_given.any()
                                 else amount),
        "product_unit": drug["form_unit_disp"], "product_code": drug["formulary_drug_cd"],
        "product_description": drug["prod_strength"], "prior_infusion_rate": none_f, "infusion_rate": none_f,
        "infusion_rate_adjustment": none_s, "infusion_rate_adjustment_amount": none_f,
        "infusion_rate_unit": none_s, "route": text_where(oral, "PO"), **empty,
    })
    return pl.concat([parent, product])
