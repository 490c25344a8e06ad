"""The derived `cost` table: SYNTHETIC charges, because MIMIC-IV records no costs.

The Cost intent needs one (EHRSQL-2024 derived one the same way). Each billable event gets the
price of its code, and a code's price is a pure function of (seed, event type, code): a hash
mapped log-uniformly into the event type's price range. Real MIMIC-IV, the demo and the synthetic
EHR are priced by exactly the same rule, so a question about cost means the same thing on each.

| event_type     | source rows                        | event_id                   | chargetime        |
|----------------|------------------------------------|----------------------------|-------------------|
| diagnoses_icd  | diagnoses_icd                      | hadm_id * 1000 + seq_num   | admission dischtime |
| procedures_icd | procedures_icd                     | hadm_id * 1000 + seq_num   | chartdate (00:00) |
| labevents      | labevents with a hadm_id           | labevent_id                | charttime         |
| prescriptions  | prescriptions, one per pharmacy_id | pharmacy_id                | first starttime   |

A pharmacy order is billed once, at the sum of the prices of its drug lines. Events without an
admission (outpatient labs) are not charged.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import polars as pl

from pipeline.ehr.schema import TABLES
from pipeline.ehr.storage import DEFAULT_ROW_GROUP_SIZE, sink_table

PRICE_RANGES: dict[str, tuple[float, float]] = {
    "diagnoses_icd": (50.0, 1500.0),
    "procedures_icd": (200.0, 10000.0),
    "labevents": (5.0, 250.0),
    "prescriptions": (1.0, 500.0),
}
SEQ_NUM_BASE = 1000  # event_id of a diagnosis/procedure = hadm_id * 1000 + seq_num


def price(seed: int, event_type: str, code: str) -> float:
    """Deterministic price of one code: stable across runs, machines and library versions."""
    lo, hi = PRICE_RANGES[event_type]
    digest = hashlib.blake2b(f"{seed}|{event_type}|{code}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2**64
    return round(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))), 2)


def _price_table(codes: pl.LazyFrame, seed: int, event_type: str) -> pl.DataFrame:
    """Price the distinct codes of one event type (small: thousands, even on full MIMIC-IV)."""
    distinct = codes.select("code").unique().sort("code").collect()
    return distinct.with_columns(
        pl.Series("price", [price(seed, event_type, c) for c in distinct["code"]], dtype=pl.Float64)
    )


def _icd_charges(events: pl.LazyFrame, event_type: str, chargetime: pl.Expr, seed: int) -> pl.LazyFrame:
    coded = events.with_columns(code=pl.concat_str(pl.col("icd_version").cast(pl.String), pl.lit(":"),
                                                   pl.col("icd_code").str.strip_chars()))
    prices = _price_table(coded, seed, event_type).lazy()
    return coded.join(prices, on="code", how="left").select(
        event_type=pl.lit(event_type),
        event_id=pl.col("hadm_id") * SEQ_NUM_BASE + pl.col("seq_num"),
        subject_id="subject_id", hadm_id="hadm_id", chargetime=chargetime, cost="price",
    )


def cost_frame(tables: dict[str, pl.LazyFrame], seed: int) -> pl.LazyFrame:
    """Build the cost rows from whichever of the four billable tables are present."""
    parts: list[pl.LazyFrame] = []
    if "diagnoses_icd" in tables:
        dx = tables["diagnoses_icd"].join(
            tables["admissions"].select("hadm_id", "dischtime"), on="hadm_id", how="inner")
        parts.append(_icd_charges(dx, "diagnoses_icd", pl.col("dischtime"), seed))
    if "procedures_icd" in tables:
        parts.append(_icd_charges(tables["procedures_icd"], "procedures_icd",
                                  pl.col("chartdate").cast(pl.Datetime("us")), seed))
    if "labevents" in tables:
        labs = tables["labevents"].filter(pl.col("hadm_id").is_not_null()).with_columns(
            code=pl.col("itemid").cast(pl.String))
        prices = _price_table(labs, seed, "labevents").lazy()
        parts.append(labs.join(prices, on="code", how="left").select(
            event_type=pl.lit("labevents"), event_id="labevent_id", subject_id="subject_id",
            hadm_id="hadm_id", chargetime="charttime", cost="price"))
    if "prescriptions" in tables:
        rx = tables["prescriptions"].filter(pl.col("hadm_id").is_not_null()).with_columns(
            code=pl.col("drug").fill_null("").str.strip_chars().str.to_lowercase())
        prices = _price_table(rx, seed, "prescriptions").lazy()
        parts.append(
            rx.join(prices, on="code", how="left")
            .group_by("pharmacy_id", maintain_order=True)
            .agg(pl.col("subject_id").first(), pl.col("hadm_id").first(),
                 pl.col("starttime").min().alias("chargetime"), pl.col("price").sum().round(2).alias("cost"))
            .select(event_type=pl.lit("prescriptions"), event_id="pharmacy_id", subject_id="subject_id",
                    hadm_id="hadm_id", chargetime="chargetime", cost="cost"))
    schema = TABLES["cost"].polars_schema
    if not parts:
        return pl.LazyFrame(schema=schema)
    return pl.concat([p.cast(dict(schema)) for p in parts], how="vertical")


def derive_cost(ehr_dir: Path, seed: int, row_group_size: int = DEFAULT_ROW_GROUP_SIZE) -> int:
    """Write `cost.parquet` beside the other tables in `ehr_dir`; return its row count."""
    ehr_dir = Path(ehr_dir)
    tables = {p.stem: pl.scan_parquet(p) for p in sorted(ehr_dir.glob("*.parquet")) if p.stem != "cost"}
    out = ehr_dir / "cost.parquet"
    frame = cost_frame(tables, seed).sort(["event_type", "event_id"])  # total order before the stable sort
    sink_table(frame, out, TABLES["cost"], row_group_size)
    return pl.scan_parquet(out).select(pl.len()).collect().item()
