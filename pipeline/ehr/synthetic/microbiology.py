"""Microbiology: cultures per specimen, organisms for positive ones, antibiotic susceptibilities.

Rows follow MIMIC-IV's layout: a negative culture is one row carrying the test's usual comment
("NO GROWTH."); a positive one has a row per organism, expanded to one row per antibiotic tested
on that organism, with an MIC (dilution) and an S/I/R interpretation drawn at the demo's rates.
Organisms are drawn from those the demo grew in the same test (no C. difficile in urine).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.admissions import Admissions
from pipeline.ehr.synthetic.catalog import probabilities
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.sampling import (
    DAY,
    HOUR,
    MINUTE,
    between,
    choice,
    datetimes,
    ensure_any,
    expand,
    floor_to,
    nullable,
    nulls,
    take,
    take_null,
)


def _dilution(text: pl.Series) -> pl.DataFrame:
    """Split MIC texts like "<=1", "=>32", "4" into comparison and value."""
    frame = text.alias("t").to_frame()
    return frame.select(
        comparison=pl.when(pl.col("t").str.starts_with("<=")).then(pl.lit("<="))
        .when(pl.col("t").str.starts_with("=>")).then(pl.lit("=>")).otherwise(pl.lit("=")),
        value=pl.col("t").str.replace(r"^(<=|=>|=)", "").cast(pl.Float64, strict=False),
    )


def _organisms(chunk: Chunk, test: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(specimen, organism row) pairs: one or two distinct organisms per positive specimen."""
    rng, cat = chunk.rng, chunk.cat
    orgs = cat.micro_organisms
    test_ids = cat.micro_tests["test_itemid"].to_numpy()
    org_test = orgs["test_itemid"].to_numpy()
    weights = orgs["weight"].to_numpy()
    spec_parts, org_parts = [], []
    for t, test_id in enumerate(test_ids):
        pool = np.flatnonzero(org_test == test_id)
        idx = np.flatnonzero(positive & (test == t))
        if pool.size == 0 or idx.size == 0:
            continue
        p = probabilities(weights[pool])
        first = pool[choice(rng, p, idx.size)]
        second = pool[choice(rng, p, idx.size)]
        two = (rng.random(idx.size) < 0.15) & (second != first)
        spec_parts += [idx, idx[two]]
        org_parts += [first, second[two]]
    if not spec_parts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    spec, org = np.concatenate(spec_parts), np.concatenate(org_parts)
    order = np.argsort(spec, kind="stable")
    return spec[order], org[order]


def microbiology_table(chunk: Chunk, adm: Admissions) -> pl.DataFrame:
    rng, cat = chunk.rng, chunk.cat
    tests, orgs, sus = cat.micro_tests, cat.micro_organisms, cat.micro_susceptibility
    has = ensure_any(rng.random(adm.n) < np.where(adm.has_icu, 0.6, 0.22))
    a, _ = expand(np.where(has, np.minimum(1 + rng.poisson(0.6, adm.n), 5), 0))
    n = a.size
    test = choice(rng, probabilities(tests["weight"]), n)
    positive = rng.random(n) < tests["positive_rate"].to_numpy()[test]
    spec_org, org = _organisms(chunk, test, positive)
    positive &= np.isin(np.arange(n), spec_org)

    charttime = floor_to(between(rng, adm.admit[a], adm.disch[a]), MINUTE)
    no_time = rng.random(n) < 0.05
    stored = floor_to(charttime + rng.integers(DAY, 4 * DAY, n) + rng.integers(0, 12 * HOUR, n), MINUTE)
    spec = pl.DataFrame({
        "subject_id": adm.subject_id[a], "hadm_id": adm.hadm_id[a],
        "micro_specimen_id": chunk.ids.take("micro_specimen_id", n),
        "order_provider_id": chunk.providers(n, share=0.1, name="order_provider_id"),
        "chartdate": datetimes(floor_to(charttime, DAY)), "charttime": datetimes(charttime, null=no_time),
        "spec_itemid": take(tests["spec_itemid"], test),
        "spec_type_desc": take(tests["spec_type_desc"], test),
        "test_seq": np.ones(n, dtype=np.int64),
        "storedate": datetimes(floor_to(stored, DAY)), "storetime": datetimes(stored),
        "test_itemid": take(tests["test_itemid"], test), "test_name": take(tests["test_name"], test),
        "negative_comment": take(tests["negative_comment"], test),
    })

    # Organism rows, each expanded to its antibiotic panel (or kept alone when none is tested).
    sus_org = sus["org_itemid"].to_numpy()
    org_ids = orgs["org_itemid"].to_numpy()[org]
    panel_start = np.searchsorted(sus_org, org_ids, side="left")
    panel_size = np.searchsorted(sus_org, org_ids, side="right") - panel_start
    isolate = np.r_[1, np.where(spec_org[1:] == spec_org[:-1], 2, 1)] if org.size else org
    o, within = expand(np.maximum(panel_size, 1))
    tested = panel_size[o] > 0
    ab = np.where(tested, panel_start[o] + within, 0)
    u = rng.random(o.size)
    resistant = u < sus["resistant_rate"].to_numpy()[ab]
    intermediate = ~resistant & (u < (sus["resistant_rate"] + sus["intermediate_rate"]).to_numpy()[ab])
    interpretation = np.where(resistant, "R", np.where(intermediate, "I", "S"))
    text = pl.Series(np.where(resistant | intermediate, sus["r_dilution"].to_numpy()[ab],
                              sus["s_dilution"].to_numpy()[ab]), dtype=pl.String)
    mic = _dilution(text)
    untested = ~tested
    positive_rows = pl.DataFrame({
        "spec": spec_org[o],
        "org_itemid": org_ids[o], "org_name": take(orgs["org_name"], org[o]),
        "isolate_num": isolate[o],
        "ab_itemid": nullable(sus["ab_itemid"].to_numpy()[ab], untested, "ab_itemid", pl.Int64),
        "ab_name": take_null(sus["ab_name"], ab, untested),
        "dilution_text": text.scatter(np.flatnonzero(untested), None) if untested.any() else text,
        "dilution_comparison": take_null(mic["comparison"], np.arange(o.size), untested),
        "dilution_value": nullable(mic["value"].to_numpy(), untested, "v", pl.Float64),
        "interpretation": nullable(interpretation, untested, "i", pl.String),
        "comments": nulls(o.size),
    })
    neg = np.flatnonzero(~positive)
    negative_rows = pl.DataFrame({"spec": neg}).with_columns(comments=spec["negative_comment"].gather(neg))
    rows = pl.concat([positive_rows, negative_rows], how="diagonal_relaxed").sort("spec", maintain_order=True)
    s = rows["spec"].to_numpy()
    out = pl.concat([spec.drop("negative_comment")[s], rows.drop("spec")], how="horizontal").with_columns(
        quantity=pl.lit(None, dtype=pl.String))
    out = out.sort("subject_id", "chartdate", "charttime", maintain_order=True, nulls_last=True)
    return out.with_columns(microevent_id=pl.Series(chunk.ids.take("microevent_id", out.height)))
