"""Dev script: derive the generator's small CSV catalogs from the MIMIC-IV demo's statistics.

    python -m pipeline.ehr.synthetic.build_catalog --demo /work/shared/mimic-iv-demo

The catalogs (committed under `catalog/`) hold codes, labels, units, reference ranges, value
percentiles and frequency weights, never patient rows, so the generator needs no credentials or
network. ICU vitals are hand-written here because the demo copy lacks `icu/chartevents`; their
labels and units still come from the demo's `icu/d_items`. Rerun only when the recipe changes.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import polars as pl

CATALOG_DIR = Path(__file__).with_name("catalog")
MAX_BYTES = 200_000

# Lab items drawn together on one specimen: panel name per MIMIC itemid.
LAB_PANELS: dict[int, str] = {
    **dict.fromkeys([50971, 50983, 50912, 50902, 51006, 50882, 50868, 50931, 50960, 50893, 50970], "BMP"),
    **dict.fromkeys([51221, 51265, 51222, 51249, 51279, 51301, 51248, 51277, 51250, 52172], "CBC"),
    **dict.fromkeys([51254, 51200, 51146, 51256, 51244], "DIFF"),
    **dict.fromkeys([51275, 51237, 51274], "COAG"),
    **dict.fromkeys([50878, 50885, 50861, 50863, 50862, 50954], "LFT"),
    **dict.fromkeys([50820, 50802, 50804, 50818, 50821, 50813, 50808], "BG"),
}
N_LAB_ITEMS = 42

# Hand-written ICU charting (chartevents is missing from the demo copy): real MIMIC-IV itemids,
# population mean, between-stay sd, within-stay sd, plausible bounds and decimals.
VITALS: list[tuple[int, str, float, float, float, float, float, int]] = [
    # itemid, group, mean, sd_between, sd_within, min, max, decimals
    (220045, "hr", 86.0, 14.0, 6.0, 35.0, 180.0, 0),
    (220179, "nibp_sys", 121.0, 16.0, 9.0, 60.0, 220.0, 0),
    (220180, "nibp_dia", 64.0, 0.0, 0.0, 30.0, 130.0, 0),
    (220181, "nibp_mean", 80.0, 0.0, 0.0, 40.0, 160.0, 0),
    (220050, "abp_sys", 118.0, 17.0, 10.0, 55.0, 230.0, 0),
    (220051, "abp_dia", 60.0, 0.0, 0.0, 25.0, 130.0, 0),
    (220052, "abp_mean", 78.0, 0.0, 0.0, 35.0, 160.0, 0),
    (220210, "rr", 19.0, 3.5, 2.5, 6.0, 45.0, 0),
    (220277, "spo2", 97.0, 1.5, 1.2, 75.0, 100.0, 0),
    (223761, "temp_f", 98.5, 0.6, 0.4, 93.0, 105.0, 1),
    (223762, "temp_c", 36.9, 0.35, 0.25, 34.0, 40.5, 1),
    (220739, "gcs_eye", 3.6, 0.6, 0.3, 1.0, 4.0, 0),
    (223900, "gcs_verbal", 4.2, 1.0, 0.4, 1.0, 5.0, 0),
    (223901, "gcs_motor", 5.6, 0.8, 0.3, 1.0, 6.0, 0),
    (226512, "weight", 80.0, 0.0, 0.0, 35.0, 250.0, 1),
    (226730, "height", 170.0, 0.0, 0.0, 140.0, 205.0, 0),
    (225664, "glucose_fs", 135.0, 30.0, 25.0, 40.0, 450.0, 0),
]
# Text values MIMIC-IV charts for the GCS components (valuenum -> value).
GCS_TEXT: dict[int, dict[int, str]] = {
    220739: {4: "Spontaneously", 3: "To Speech", 2: "To Pain", 1: "No Response"},
    223900: {5: "Oriented", 4: "Confused", 3: "Inappropriate Words", 2: "Incomprehensible sounds",
             1: "No Response-ETT"},
    223901: {6: "Obeys Commands", 5: "Localizes Pain", 4: "Flex-withdraws", 3: "Abnormal Flexion",
             2: "Abnormal extension", 1: "No response"},
}
# Organism "results" that are not organisms.
NOT_ORGANISMS = ("CANCELLED", "MIXED BACTERIAL FLORA", "NO GROWTH")
ED_UNITS = ("Emergency Department", "Emergency Department Observation", "Unknown")
# Units with a fixed role in a hospital course rather than a service's home ward.
SPECIAL_UNITS = {"Discharge Lounge": "lounge", "PACU": "pacu", "Observation": "observation"}
ADMISSION_FIELDS = ("admission_location", "discharge_location", "insurance", "language", "marital_status",
                    "race")


def read(demo: Path, table: str) -> pl.DataFrame:
    """Read one demo table with every column as text (codes keep their leading zeros)."""
    df = pl.read_csv(demo / f"{table}.csv.gz", infer_schema=False)
    return df.with_columns(pl.col(pl.String).replace("", None))


def num(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.Float64, strict=False)


def mode_of(df: pl.DataFrame, by: str | list[str], col: str, alias: str | None = None) -> pl.DataFrame:
    """Most frequent non-null value of `col` per group; ties broken by value so output is stable."""
    by = [by] if isinstance(by, str) else by
    counted = df.filter(pl.col(col).is_not_null()).group_by([*by, col]).len()
    best = counted.sort([*by, "len", col], descending=[*(False for _ in by), True, False])
    return best.group_by(by, maintain_order=True).first().select([*by, pl.col(col).alias(alias or col)])


def text_decimals(values: pl.Expr) -> pl.Expr:
    """Digits after the decimal point of a numeric string ("4.10" -> 2); null if not a number."""
    frac = values.str.extract(r"^-?\d+\.(\d+)$", 1)
    return pl.when(values.str.contains(r"^-?\d+(\.\d+)?$")).then(frac.str.len_chars().fill_null(0))


def number_decimals(values: pl.Expr) -> pl.Expr:
    """Fewest decimals (0-3) that represent each number exactly, e.g. 4.1 -> 1, 138.0 -> 0."""
    out = pl.lit(3)
    for d in (2, 1, 0):
        out = pl.when((values.round(d) - values).abs() < 1e-9).then(pl.lit(d)).otherwise(out)
    return out


def lab_items(demo: Path) -> pl.DataFrame:
    """Most frequent numeric lab items with units, reference ranges and value percentiles."""
    labs = read(demo, "hosp/labevents").filter(pl.col("itemid").cast(pl.Int64).is_in(list(LAB_PANELS)))
    labs = labs.with_columns(itemid=pl.col("itemid").cast(pl.Int64), valuenum=num("valuenum"),
                             lo=num("ref_range_lower"), hi=num("ref_range_upper"))
    stats = labs.group_by("itemid").agg(
        n=pl.len(),
        p5=pl.col("valuenum").quantile(0.05, "nearest"),
        p50=pl.col("valuenum").quantile(0.50, "nearest"),
        p95=pl.col("valuenum").quantile(0.95, "nearest"),
        decimals=pl.coalesce(  # printed values where not redacted ("___"), else the numbers themselves
            text_decimals(pl.col("value")).drop_nulls().mode().max(),
            number_decimals(pl.col("valuenum")).drop_nulls().mode().max()),
    )
    ranges = labs.filter(pl.col("lo").is_not_null()).group_by("itemid", "lo", "hi").len().sort(
        ["itemid", "len", "lo"], descending=[False, True, False]
    ).group_by("itemid", maintain_order=True).first()
    out_of_range = labs.join(ranges.select("itemid", rlo="lo", rhi="hi"), on="itemid").group_by("itemid").agg(
        low=(pl.col("valuenum") < pl.col("rlo")).sum(), high=(pl.col("valuenum") > pl.col("rhi")).sum())
    comments = labs.filter(pl.col("comments").is_not_null() & ~pl.col("comments").str.contains("___"))
    comment = mode_of(comments, "itemid", "comments", "comment").join(
        comments.group_by("itemid").len().rename({"len": "n_comment"}), on="itemid")
    d_lab = read(demo, "hosp/d_labitems").with_columns(itemid=pl.col("itemid").cast(pl.Int64))
    out = (stats.join(d_lab, on="itemid", how="left")
           .join(mode_of(labs, "itemid", "valueuom"), on="itemid", how="left")
           .join(ranges.select("itemid", ref_range_lower="lo", ref_range_upper="hi"), on="itemid", how="left")
           .join(out_of_range, on="itemid", how="left")
           .join(comment, on="itemid", how="left")
           .with_columns(panel=pl.col("itemid").replace_strict(LAB_PANELS, return_dtype=pl.String),
                         low_share=((pl.col("low") + 1) / (pl.col("low") + pl.col("high") + 2)).round(3),
                         comment=pl.when(pl.col("n_comment") >= 0.2 * pl.col("n")).then("comment")))
    return out.sort(["n", "itemid"], descending=[True, False]).head(N_LAB_ITEMS).select(
        "itemid", "panel", "label", "fluid", "category", "valueuom", "ref_range_lower", "ref_range_upper",
        "p5", "p50", "p95", pl.col("decimals").fill_null(1), "low_share", "comment", weight="n",
    ).sort("panel", "itemid")


def drugs(demo: Path) -> pl.DataFrame:
    """Most frequent MAIN drugs (60) and BASE diluents (8) with their modal product and dosing."""
    rx = read(demo, "hosp/prescriptions")
    ph = read(demo, "hosp/pharmacy").select("pharmacy_id", "frequency", "disp_sched", "proc_type",
                                             "infusion_type", "sliding_scale")
    rx = rx.join(ph, on="pharmacy_id", how="left")
    product = ["formulary_drug_cd", "gsn", "ndc", "prod_strength", "form_rx", "dose_val_rx", "dose_unit_rx",
               "form_val_disp", "form_unit_disp", "route"]
    counts = rx.group_by("drug_type", "drug").len().rename({"len": "weight"})
    ranked = counts.sort(["weight", "drug"], descending=[True, False])
    top = pl.concat([ranked.filter(pl.col("drug_type") == "MAIN").head(60),
                     ranked.filter(pl.col("drug_type") == "BASE").head(8)])
    tuples = (rx.group_by(["drug_type", "drug", *product]).len()
              .sort(["drug_type", "drug", "len", *product], descending=[False, False, True, *[False] * 10],
                    nulls_last=True)
              .group_by(["drug_type", "drug"], maintain_order=True).first().drop("len"))
    out = top.join(tuples, on=["drug_type", "drug"], how="left")
    for col in ("doses_per_24_hrs", "frequency", "disp_sched", "proc_type", "infusion_type", "sliding_scale"):
        out = out.join(mode_of(rx, ["drug_type", "drug"], col), on=["drug_type", "drug"], how="left")
    dose_num = (pl.col("dose_val_rx").str.replace_all(",", "").str.extract(r"^(\d+(?:\.\d+)?)", 1)
                .cast(pl.Float64))
    return out.with_columns(dose_val_num=dose_num).select(
        "drug_type", "drug", *product, "dose_val_num", "doses_per_24_hrs", "frequency", "disp_sched",
        "proc_type", "infusion_type", "sliding_scale", "weight",
    ).sort(["drug_type", "weight", "drug"], descending=[True, True, False])


def icd(demo: Path, kind: str, per_version: int) -> pl.DataFrame:
    """Most frequent ICD-9 and ICD-10 codes (`kind` = diagnoses or procedures) with titles."""
    events = read(demo, f"hosp/{kind}_icd")
    titles = read(demo, f"hosp/d_icd_{kind}")
    counts = events.group_by("icd_code", "icd_version").len().rename({"len": "weight"})
    top = counts.sort(["icd_version", "weight", "icd_code"], descending=[False, True, False]).group_by(
        "icd_version", maintain_order=True).head(per_version)
    return top.join(titles, on=["icd_code", "icd_version"], how="left").select(
        "icd_code", pl.col("icd_version").cast(pl.Int64), "long_title", "weight"
    ).sort("icd_version", "icd_code")


def hcpcs(demo: Path) -> pl.DataFrame:
    """HCPCS/CPT codes billed in the demo with their dictionary rows."""
    events = read(demo, "hosp/hcpcsevents")
    counts = events.group_by("hcpcs_cd").len().rename({"hcpcs_cd": "code", "len": "weight"})
    d = read(demo, "hosp/d_hcpcs")
    return counts.join(d, on="code", how="left").select(
        "code", pl.col("category").cast(pl.Int64), "long_description", "short_description", "weight"
    ).sort("code")


def drg(demo: Path) -> pl.DataFrame:
    """DRG codes (HCFA and APR, 60 each) with descriptions and frequency weights."""
    events = read(demo, "hosp/drgcodes")
    counts = events.group_by("drg_type", "drg_code").len().rename({"len": "weight"})
    top = counts.sort(["drg_type", "weight", "drg_code"], descending=[False, True, False]).group_by(
        "drg_type", maintain_order=True).head(60)
    keys = ["drg_type", "drg_code"]
    described = top.join(mode_of(events, keys, "description"), on=keys)
    return described.select("drg_type", "drg_code", "description", "weight").sort("drg_type", "drg_code")


def micro(demo: Path) -> dict[str, pl.DataFrame]:
    """Culture tests with positivity, the organisms each test grows, and per-organism antibiotic panels."""
    m = read(demo, "hosp/microbiologyevents").with_columns(pl.col("comments").str.strip_chars())
    real_org = pl.col("org_name").is_not_null() & ~pl.col("org_name").is_in(NOT_ORGANISMS)
    keys = ["spec_itemid", "spec_type_desc", "test_itemid", "test_name"]
    specimens = m.group_by([*keys, "micro_specimen_id"]).agg(positive=real_org.any())
    tests = specimens.group_by(keys).agg(weight=pl.len(), positive_rate=pl.col("positive").mean().round(3))
    usable = pl.col("org_name").is_null() & ~pl.col("comments").str.contains("___|CANCELLED|GRAM")
    negative = mode_of(m.filter(usable), keys, "comments", "negative_comment")
    tests = (tests.join(negative, on=keys, how="left")
             .filter(pl.col("negative_comment").is_not_null()
                     & ~pl.col("test_name").str.contains("(?i)gram stain"))
             .sort(["weight", "test_itemid"], descending=[True, False]).head(12)
             .with_columns(pl.col("spec_itemid", "test_itemid").cast(pl.Int64)))
    orgs = (m.filter(real_org).with_columns(pl.col("test_itemid", "org_itemid").cast(pl.Int64))
            .join(tests.select("test_itemid"), on="test_itemid")
            .group_by("test_itemid", "org_itemid", "org_name")
            .agg(weight=pl.col("micro_specimen_id").n_unique())
            .sort("test_itemid", "org_itemid"))
    ab = m.filter(pl.col("ab_itemid").is_not_null()).with_columns(
        pl.col("org_itemid", "ab_itemid").cast(pl.Int64))
    sus = ab.group_by("org_itemid", "ab_itemid", "ab_name").agg(
        n=pl.len(), resistant_rate=(pl.col("interpretation") == "R").mean().round(3),
        intermediate_rate=(pl.col("interpretation") == "I").mean().round(3))
    s_dil = mode_of(ab.filter(pl.col("interpretation") == "S"), "ab_itemid", "dilution_text", "s_dilution")
    r_dil = mode_of(ab.filter(pl.col("interpretation") == "R"), "ab_itemid", "dilution_text", "r_dilution")
    sus = (sus.filter(pl.col("n") >= 2).join(orgs.select("org_itemid").unique(), on="org_itemid")
           .join(s_dil, on="ab_itemid", how="left").join(r_dil, on="ab_itemid", how="left")
           .with_columns(pl.col("s_dilution").fill_null("<=1"), pl.col("r_dilution").fill_null("=>32"))
           .drop("n").sort("org_itemid", "ab_itemid"))
    return {"micro_tests": tests.sort("spec_itemid", "test_itemid"), "micro_organisms": orgs,
            "micro_susceptibility": sus}


def icu(demo: Path) -> dict[str, pl.DataFrame]:
    """ICU item catalogs (vitals hand-written, others from the demo) plus the d_items rows they use."""
    d_items = read(demo, "icu/d_items").with_columns(itemid=pl.col("itemid").cast(pl.Int64))
    vitals = pl.DataFrame(VITALS, schema=["itemid", "group", "mean", "sd_between", "sd_within", "min", "max",
                                          "decimals"], orient="row")
    vitals = vitals.join(d_items.select("itemid", "label", valueuom="unitname"), on="itemid", how="left")
    vitals = vitals.with_columns(valueuom=pl.when(pl.col("group").str.starts_with("gcs")).then(None)
                                 .when(pl.col("group") == "glucose_fs").then(pl.lit("mg/dL"))
                                 .otherwise("valueuom"))
    gcs = pl.DataFrame([(i, v, t) for i, m in GCS_TEXT.items() for v, t in m.items()],
                       schema=["itemid", "valuenum", "value"], orient="row")

    def top_items(table: str, n: int) -> pl.DataFrame:
        events = read(demo, f"icu/{table}").with_columns(itemid=pl.col("itemid").cast(pl.Int64))
        counts = events.group_by("itemid").len().rename({"len": "weight"})
        return events, counts.sort(["weight", "itemid"], descending=[True, False]).head(n)

    dt_events, dt = top_items("datetimeevents", 12)
    dt = dt.join(mode_of(dt_events, "itemid", "valueuom"), on="itemid", how="left")

    in_events, inputs = top_items("inputevents", 20)
    in_events = in_events.with_columns(amount=num("amount"), rate=num("rate"), minutes=(
        pl.col("endtime").str.to_datetime() - pl.col("starttime").str.to_datetime()).dt.total_minutes())
    inputs = inputs.join(in_events.group_by("itemid").agg(
        amount_p50=pl.col("amount").median().round(3), rate_p50=pl.col("rate").median().round(3),
        rate_share=pl.col("rate").is_not_null().mean().round(3), minutes_p50=pl.col("minutes").median()),
        on="itemid")
    for col in ("amountuom", "rateuom", "ordercategoryname", "secondaryordercategoryname",
                "ordercomponenttypedescription", "ordercategorydescription"):
        inputs = inputs.join(mode_of(in_events, "itemid", col), on="itemid", how="left")
    ing = read(demo, "icu/ingredientevents").select(
        "orderid", "starttime", ingredient_itemid=pl.col("itemid").cast(pl.Int64),
        ingredient_amount=num("amount"), ingredient_uom="amountuom")
    paired = in_events.join(ing, on=["orderid", "starttime"]).with_columns(
        ratio=pl.col("ingredient_amount") / pl.col("amount"))
    main_ing = mode_of(paired, "itemid", "ingredient_itemid")
    paired = paired.join(main_ing.rename({"ingredient_itemid": "main"}), on="itemid").filter(
        pl.col("ingredient_itemid") == pl.col("main"))
    inputs = inputs.join(paired.group_by("itemid").agg(
        ingredient_itemid=pl.col("ingredient_itemid").first(),
        ingredient_ratio=pl.col("ratio").median().round(4),
        ingredient_uom=pl.col("ingredient_uom").mode().sort().first()), on="itemid", how="left")

    out_events, outputs = top_items("outputevents", 10)
    outputs = outputs.join(out_events.with_columns(value=num("value")).group_by("itemid").agg(
        p5=pl.col("value").quantile(0.05, "nearest"), p50=pl.col("value").quantile(0.5, "nearest"),
        p95=pl.col("value").quantile(0.95, "nearest")), on="itemid").join(
        mode_of(out_events, "itemid", "valueuom"), on="itemid", how="left")

    pe_events, procs = top_items("procedureevents", 14)
    procs = procs.join(pe_events.with_columns(value=num("value")).group_by("itemid").agg(
        value_p50=pl.col("value").median(), location_share=pl.col("location").is_not_null().mean().round(3)),
        on="itemid")
    for col in ("valueuom", "ordercategoryname", "ordercategorydescription", "location", "locationcategory"):
        procs = procs.join(mode_of(pe_events, "itemid", col), on="itemid", how="left")
    procs = procs.with_columns(pl.col("valueuom").replace("None", None))

    used = pl.concat([vitals["itemid"], dt["itemid"], inputs["itemid"],
                      inputs["ingredient_itemid"].drop_nulls(), outputs["itemid"], procs["itemid"]]).unique()
    d_rows = d_items.filter(pl.col("itemid").is_in(used.implode())).with_columns(
        pl.col("lownormalvalue", "highnormalvalue").cast(pl.Float64)).sort("itemid")
    return {
        "d_items": d_rows,
        "vitals": vitals.select("itemid", "group", "label", "valueuom", "mean", "sd_between", "sd_within",
                                "min", "max", "decimals"),
        "gcs": gcs,
        "icu_datetime": dt.sort("itemid"),
        "icu_inputs": inputs.sort("itemid"),
        "icu_outputs": outputs.sort("itemid"),
        "icu_procedures": procs.sort("itemid"),
    }


def admin(demo: Path) -> dict[str, pl.DataFrame]:
    """Admission-level frequency tables: types (with ED share), categorical fields, units, services."""
    adm = read(demo, "hosp/admissions")
    types = adm.group_by("admission_type").agg(
        weight=pl.len(), ed_rate=pl.col("edregtime").is_not_null().mean().round(3)).sort("admission_type")
    fields = pl.concat([
        adm.group_by(field).len().select(field=pl.lit(field), value=pl.col(field), weight="len")
        for field in ADMISSION_FIELDS
    ]).filter(~((pl.col("field") == "discharge_location") & (pl.col("value") == "DIED")))
    transfers = read(demo, "hosp/transfers")
    stays = read(demo, "icu/icustays")
    icu_units = stays["first_careunit"].unique().to_list() + stays["last_careunit"].unique().to_list()
    units = (transfers.filter(pl.col("careunit").is_not_null() & ~pl.col("careunit").is_in(ED_UNITS))
             .group_by("careunit").len().rename({"len": "weight"})
             .with_columns(kind=pl.when(pl.col("careunit").is_in(icu_units)).then(pl.lit("icu"))
                           .otherwise(pl.col("careunit").replace_strict(SPECIAL_UNITS, default="ward")))
             .sort("kind", "careunit"))
    services = read(demo, "hosp/services")
    first = services.filter(pl.col("prev_service").is_null()).select("hadm_id", service="curr_service")
    ward_units = units.filter(pl.col("kind") == "ward").select("careunit")
    first_ward = (transfers.join(ward_units, on="careunit").sort("hadm_id", "intime")
                  .group_by("hadm_id", maintain_order=True).first())
    ward = mode_of(first.join(first_ward, on="hadm_id"), "service", "careunit", "ward_careunit")
    icu_unit = mode_of(first.join(stays, on="hadm_id"), "service", "first_careunit", "icu_careunit")
    svc = (services.group_by("curr_service").len().select(service="curr_service", weight="len")
           .join(ward, on="service", how="left").join(icu_unit, on="service", how="left")
           .with_columns(pl.col("ward_careunit").fill_null("Med/Surg"),
                         pl.col("icu_careunit").fill_null("Medical Intensive Care Unit (MICU)"))
           .sort("service"))
    return {"admission_types": types, "admission_fields": fields.sort("field", "value", nulls_last=True),
            "careunits": units, "services": svc}


def orders(demo: Path) -> dict[str, pl.DataFrame]:
    """Frequencies of order types, ADT order details and categorical event fields."""
    poe = read(demo, "hosp/poe")
    order_types = (poe.filter(pl.col("order_type") != "Medications")
                   .group_by("order_type", "order_subtype").len()
                   .sort(["len", "order_type", "order_subtype"], descending=[True, False, False],
                         nulls_last=True)
                   .head(30).rename({"len": "weight"}).sort("order_type", "order_subtype", nulls_last=True))
    detail = read(demo, "hosp/poe_detail")
    fields = ("Admit to", "Transfer to", "Code status", "Admit category", "Discharge Planning",
              "Discharge When")
    poe_fields = (detail.filter(pl.col("field_name").is_in(fields))
                  .group_by("field_name", "field_value").len()
                  .filter(pl.col("len") >= 2).rename({"len": "weight"}).sort("field_name", "field_value"))

    def freq(table: str, df: pl.DataFrame, field: str, min_count: int = 1) -> pl.DataFrame:
        return (df.group_by(field).len().filter(pl.col("len") >= min_count)
                .select(table=pl.lit(table), field=pl.lit(field), value=pl.col(field), weight="len"))

    labs = read(demo, "hosp/labevents").select("priority")
    emar = read(demo, "hosp/emar").select("event_txt")
    pharmacy = read(demo, "hosp/pharmacy")
    drgcodes = read(demo, "hosp/drgcodes").filter(pl.col("drg_type") == "APR")
    events = pl.concat([
        freq("labevents", labs, "priority"),
        freq("emar", emar.drop_nulls(), "event_txt", 100),
        freq("pharmacy", pharmacy.filter(pl.col("status") != "H"), "status"),
        freq("pharmacy", pharmacy.drop_nulls("dispensation"), "dispensation", 100),
        freq("drgcodes", drgcodes, "drg_severity"),
        freq("drgcodes", drgcodes, "drg_mortality"),
    ]).sort("table", "field", "value", nulls_last=True)
    return {"poe_orders": order_types, "poe_fields": poe_fields, "event_fields": events}


README = """# Synthetic EHR catalogs

Small lookup tables the synthetic generator (`pipeline.ehr.synthetic`) samples from: codes, labels,
units, reference ranges, value percentiles and frequency weights. They contain no patient rows.

Derived from the **MIMIC-IV Clinical Database Demo v2.2** (PhysioNet), Johnson, A., Bulgarelli, L.,
Pollard, T., Horng, S., Celi, L. A., & Mark, R. (2023), https://doi.org/10.13026/07hj-2a80, made
available under the **Open Database License (ODbL) v1.0**. These derived tables are likewise
available under ODbL v1.0. Please cite PhysioNet and the MIMIC-IV papers when you use them.

ICU vital-sign parameters in `vitals.csv` and `gcs.csv` are hand-written (the demo copy used here
lacks `icu/chartevents`); their itemids, labels and units are those of MIMIC-IV `icu/d_items`.

Rebuild (dev only):

    python -m pipeline.ehr.synthetic.build_catalog --demo /path/to/mimic-iv-demo

| file | content |
|------|---------|
"""

DESCRIPTIONS = {
    "lab_items": "~40 frequent lab items: panel, label, fluid, category, unit, reference range, p5/p50/p95",
    "drugs": "60 frequent MAIN drugs and 8 BASE diluents: modal product, dose, unit, route, frequency",
    "icd_diagnoses": "75 most frequent ICD-9 and 75 ICD-10 diagnosis codes with titles",
    "icd_procedures": "30 most frequent ICD-9 and 30 ICD-10 procedure codes with titles",
    "hcpcs": "HCPCS/CPT codes billed in the demo with their d_hcpcs rows",
    "drg": "HCFA and APR DRG codes with descriptions",
    "micro_tests": "specimen type / test pairs with positivity rate and the usual negative comment",
    "micro_organisms": "organisms each culture test grew in the demo, with frequency weights",
    "micro_susceptibility": "antibiotics tested per organism with resistance rate and typical MICs",
    "d_items": "icu/d_items rows for every ICU item the generator uses",
    "vitals": "hand-written ICU charting parameters (heart rate, BP, RR, SpO2, temperature, GCS, ...)",
    "gcs": "hand-written GCS text values per score",
    "icu_datetime": "datetimeevents items",
    "icu_inputs": "inputevents items with amounts, rates, order categories and main ingredient",
    "icu_outputs": "outputevents items with value percentiles",
    "icu_procedures": "procedureevents items with typical duration and line locations",
    "admission_types": "admission types with the share that came through the ED",
    "admission_fields": "frequency tables of admission location, discharge location, insurance, ...",
    "careunits": "care units (ICU, ward, PACU, discharge lounge, observation) with frequency weights",
    "services": "services with their usual ward and ICU care units",
    "poe_orders": "non-medication order types and subtypes",
    "poe_fields": "values of ADT order details (admit to, code status, ...)",
    "event_fields": "frequency tables of lab priority, eMAR event text, pharmacy status, APR severity",
}


def build(demo: Path, out: Path) -> dict[str, int]:
    """Write every catalog CSV plus README.md into `out`; return the size of each file in bytes."""
    tables: dict[str, pl.DataFrame] = {
        "lab_items": lab_items(demo),
        "drugs": drugs(demo),
        "icd_diagnoses": icd(demo, "diagnoses", 75),
        "icd_procedures": icd(demo, "procedures", 30),
        "hcpcs": hcpcs(demo),
        "drg": drg(demo),
        **micro(demo),
        **icu(demo),
        **admin(demo),
        **orders(demo),
    }
    out.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, int] = {}
    for name, df in tables.items():
        path = out / f"{name}.csv"
        df.write_csv(path)
        sizes[name] = path.stat().st_size
        if sizes[name] > MAX_BYTES:
            raise ValueError(f"catalog {name}.csv is {sizes[name]} bytes (limit {MAX_BYTES})")
    lines = [f"| `{name}.csv` | {DESCRIPTIONS[name]} |" for name in tables]
    (out / "README.md").write_text(README + "\n".join(lines) + "\n")
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, required=True, help="folder with hosp/ and icu/ of the demo")
    parser.add_argument("--out", type=Path, default=CATALOG_DIR, help="catalog folder to (over)write")
    args = parser.parse_args(argv)
    if not re.search(r"\S", str(args.demo)) or not (args.demo / "hosp").is_dir():
        parser.error(f"{args.demo} has no hosp/ folder")
    sizes = build(args.demo, args.out)
    for name, size in sizes.items():
        print(f"{name + '.csv':<28} {size:>8,d} bytes")


if __name__ == "__main__":
    main()
