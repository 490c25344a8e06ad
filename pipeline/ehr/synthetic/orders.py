"""Provider order entry (poe, poe_detail): medication, D/C, ADT and everyday orders.

poe_id is "<subject_id>-<poe_seq>" with poe_seq counting a patient's orders in time order, so ids
are only known once all of a patient's orders exist; this module numbers them and hands the
medication orders' ids back to the medication tables. A D/C order points at the order it stops
(discontinue_of_poe_id) and that order points back (discontinued_by_poe_id).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.admissions import Admissions
from pipeline.ehr.synthetic.catalog import probabilities
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.medications import MedPlan
from pipeline.ehr.synthetic.sampling import (
    HOUR,
    MINUTE,
    between,
    choice,
    datetimes,
    expand,
    group_rank,
    nulls,
    take,
)
from pipeline.ehr.synthetic.stays import Stays

KIND_MED, KIND_DC, KIND_ADT, KIND_OTHER = 0, 1, 2, 3


@dataclass
class OrderIds:
    """poe ids of the medication orders, aligned with the MedPlan."""

    poe_id: pl.Series
    poe_seq: np.ndarray


def _adt(chunk: Chunk, adm: Admissions, st: Stays) -> pl.DataFrame:
    """Admit, ICU transfer and discharge orders with their poe_detail fields."""
    rng = chunk.rng
    admit_at = np.minimum(adm.admit + rng.integers(0, 30 * MINUTE, adm.n), adm.disch)
    survivors = np.flatnonzero(~adm.died)
    disch_at = np.maximum(adm.disch[survivors] - rng.integers(30 * MINUTE, 6 * HOUR, survivors.size),
                          adm.admit[survivors])
    icu_at = np.maximum(st.intime - rng.integers(0, HOUR, st.n), adm.admit[st.adm])
    return pl.DataFrame({
        "a": np.r_[np.arange(adm.n), survivors, st.adm],
        "ordertime": np.r_[admit_at, disch_at, icu_at],
        "order_subtype": np.r_[np.full(adm.n, "Admit"), np.full(survivors.size, "Discharge"),
                               np.full(st.n, "Transfer")],
    }).with_columns(order_type=pl.lit("ADT orders"), kind=pl.lit(KIND_ADT))


def _details(chunk: Chunk, adt: pl.DataFrame) -> pl.DataFrame:
    """poe_detail rows of ADT orders (`adt` already carries poe_id, poe_seq, subject_id)."""
    rng, fields = chunk.rng, chunk.cat.poe_fields

    def pick(field: str, rows: pl.DataFrame, share: float = 1.0, like: str = "") -> pl.DataFrame:
        values = fields.filter((pl.col("field_name") == field) & pl.col("field_value").str.contains(like))
        rows = rows.filter(pl.Series(rng.random(rows.height) < share))
        idx = choice(rng, probabilities(values["weight"]), rows.height)
        return rows.select("poe_id", "poe_seq", "subject_id").with_columns(
            field_name=pl.lit(field), field_value=take(values["field_value"], idx))

    admits = adt.filter(pl.col("order_subtype") == "Admit")
    transfers = adt.filter(pl.col("order_subtype") == "Transfer")
    discharges = adt.filter(pl.col("order_subtype") == "Discharge")
    parts = [pick("Admit to", admits), pick("Admit category", admits), pick("Code status", admits, 0.6),
             pick("Transfer to", transfers, like="ICU"), pick("Discharge Planning", discharges),
             pick("Discharge When", discharges, 0.9)]
    return pl.concat(parts)


def orders_tables(chunk: Chunk, adm: Admissions, st: Stays, plan: MedPlan
                  ) -> tuple[dict[str, pl.DataFrame], OrderIds]:
    rng, cat = chunk.rng, chunk.cat
    dc = np.flatnonzero(plan.discontinued)
    meds = pl.DataFrame({
        "a": np.r_[plan.adm, plan.adm[dc]],
        "ordertime": np.r_[plan.ordertime, plan.stop[dc]],
        "kind": np.r_[np.full(plan.n, KIND_MED), np.full(dc.size, KIND_DC)],
        "provider": pl.concat([plan.provider, plan.provider.gather(dc)]),
    }).with_columns(order_type=pl.lit("Medications"), order_subtype=pl.lit(None, dtype=pl.String))
    kinds = cat.poe_orders.filter(pl.col("order_type") != "ADT orders")
    a, _ = expand(np.minimum(2 + rng.poisson(0.8 * adm.los_days), 20))
    pick = choice(rng, probabilities(kinds["weight"]), a.size)
    other = pl.DataFrame({
        "a": a, "ordertime": between(rng, adm.admit[a], adm.disch[a]), "kind": np.full(a.size, KIND_OTHER),
        "order_type": take(kinds["order_type"], pick), "order_subtype": take(kinds["order_subtype"], pick),
    })
    adt = _adt(chunk, adm, st)
    rest = pl.concat([other, adt], how="diagonal_relaxed").with_columns(
        provider=chunk.providers(other.height + adt.height, share=0.95, name="provider"))
    orders = pl.concat([meds, rest], how="diagonal_relaxed")
    a = orders["a"].to_numpy()
    subject = adm.subject_id[a]
    seq = group_rank(subject, orders["ordertime"].to_numpy())
    orders = orders.with_columns(subject_id=pl.Series(subject), hadm_id=pl.Series(adm.hadm_id[a]),
                                 poe_seq=pl.Series(seq)).with_columns(
        poe_id=pl.format("{}-{}", "subject_id", "poe_seq"))
    # Rows: plan.n medication orders, then their D/C orders (one per index in `dc`), then the rest.
    med_ids = orders.head(plan.n)["poe_id"]
    dc_ids = orders.slice(plan.n, dc.size)["poe_id"]
    n = orders.height
    stopped_by = nulls(plan.n).scatter(dc, dc_ids) if dc.size else nulls(plan.n)
    discontinued_by = pl.concat([stopped_by, nulls(n - plan.n)])
    discontinue_of = pl.concat([nulls(plan.n), med_ids.gather(dc), nulls(n - plan.n - dc.size)])
    kind = orders["kind"].to_numpy()
    poe = orders.select(
        "poe_id", "poe_seq", "subject_id", "hadm_id",
        ordertime=datetimes(orders["ordertime"].to_numpy()),
        order_type="order_type", order_subtype="order_subtype",
        transaction_type=pl.Series(np.where(kind == KIND_DC, "D/C", "New")),
        discontinue_of_poe_id=discontinue_of, discontinued_by_poe_id=discontinued_by,
        order_provider_id="provider", order_status=pl.lit("Inactive"),
    )
    detail = _details(chunk, orders.filter(pl.col("kind") == KIND_ADT))
    ids = OrderIds(poe_id=med_ids, poe_seq=orders.head(plan.n)["poe_seq"].to_numpy())
    return {"poe": poe, "poe_detail": detail}, ids
