"""Laboratory events: panels drawn on one specimen, values around the reference range.

Each blood draw orders panels (BMP, CBC, differential, coagulation, liver tests, blood gas) and
every panel is one specimen_id shared by its items. A value is inside the reference range unless
the draw is abnormal (about one in seven, more in sicker admissions), then it lies in the tail the
demo's abnormal values favour; `flag` is "abnormal" exactly when the printed value is out of range.
Some outpatient visits get labs too, with no hadm_id, as in MIMIC-IV.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.admissions import Admissions
from pipeline.ehr.synthetic.catalog import probabilities
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.omr import Visits
from pipeline.ehr.synthetic.patients import Patients
from pipeline.ehr.synthetic.sampling import (
    HOUR,
    MINUTE,
    between,
    choice,
    datetimes,
    expand,
    floor_to,
    nullable,
    number_text,
    round_to,
    take,
    text_where,
)

PANELS = ("BMP", "CBC", "DIFF", "COAG", "LFT", "BG")
# Probability a draw includes each panel: ward admission, ICU admission, outpatient visit.
PANEL_RATES = {
    "ward": (0.85, 0.7, 0.2, 0.25, 0.15, 0.03),
    "icu": (0.9, 0.85, 0.25, 0.4, 0.25, 0.35),
    "outpatient": (0.7, 0.6, 0.15, 0.1, 0.2, 0.0),
}
BASE_ABNORMAL = 0.14


def _draws(chunk: Chunk, adm: Admissions, pats: Patients, visits: Visits) -> pl.DataFrame:
    """One row per blood draw: who, which admission (or none), when, setting, abnormal rate."""
    rng = chunk.rng
    n_draw = np.minimum(1 + rng.poisson(0.35 * adm.los_days * np.where(adm.has_icu, 1.5, 1.0)), 10)
    a, nth = expand(n_draw)
    first = np.minimum(adm.admit[a] + 4 * HOUR, adm.disch[a])
    when = np.where(nth == 0, between(rng, adm.admit[a], first), between(rng, adm.admit[a], adm.disch[a]))
    when = floor_to(when, MINUTE)
    acuity = rng.lognormal(0.0, 0.4, adm.n) * np.where(adm.has_icu, 1.5, 1.0)
    out = rng.random(visits.pat.size) < 0.3
    v = np.flatnonzero(out)
    return pl.DataFrame({
        "subject_id": np.r_[adm.subject_id[a], pats.subject_id[visits.pat[v]]],
        "hadm_id": nullable(np.r_[adm.hadm_id[a], np.zeros(v.size, dtype=np.int64)],
                            np.r_[np.zeros(a.size, dtype=bool), np.ones(v.size, dtype=bool)],
                            "hadm_id", pl.Int64),
        "time": np.r_[when, visits.day[v] + floor_to(rng.integers(8 * HOUR, 16 * HOUR, v.size), MINUTE)],
        "setting": np.r_[np.where(adm.has_icu[a], 1, 0), np.full(v.size, 2)],
        "abnormal_rate": np.r_[np.minimum(BASE_ABNORMAL * acuity[a], 0.6), np.full(v.size, BASE_ABNORMAL)],
    })


def _values(rng: np.random.Generator, items: pl.DataFrame, item: np.ndarray,
            abnormal_rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numeric results and abnormal flags for rows of catalog items `item`."""
    col = {c: items[c].to_numpy()[item].astype(np.float64) for c in
           ("ref_range_lower", "ref_range_upper", "p5", "p50", "p95", "low_share")}
    lo, hi, p5, p50, p95 = col["ref_range_lower"], col["ref_range_upper"], col["p5"], col["p50"], col["p95"]
    decimals = items["decimals"].to_numpy()[item]
    n = item.size
    ranged = ~np.isnan(lo) & ~np.isnan(hi)
    width = np.where(ranged, hi - lo, 1.0)
    center = np.clip(p50, lo + 0.15 * width, hi - 0.15 * width)
    normal = np.clip(center + width / 5 * rng.standard_normal(n), lo, hi)
    can_go_low = lo - 0.05 * width > np.minimum(p5, 0.0) + 1e-9
    low = can_go_low & (rng.random(n) < np.nan_to_num(col["low_share"], nan=0.5))
    tail = np.abs(rng.standard_normal(n))
    below = lo - 0.05 * width - tail * np.maximum(lo - p5, 0.1 * width)
    above = hi + 0.05 * width + tail * np.maximum(p95 - hi, 0.1 * width)
    abnormal = rng.random(n) < abnormal_rate
    value = np.where(abnormal, np.where(low, below, above), normal)
    z = rng.standard_normal(n)
    free = np.where(z < 0, p50 + z * (p50 - p5) / 1.645, p50 + z * (p95 - p50) / 1.645)
    value = np.where(ranged, value, free)
    value = np.where(p5 >= 0, np.maximum(value, 0.0), value)
    value = round_to(value, decimals) + 0.0
    flag = ranged & ((value < lo) | (value > hi))
    return value, flag


def labevents_table(chunk: Chunk, adm: Admissions, pats: Patients, visits: Visits) -> pl.DataFrame:
    rng, cat = chunk.rng, chunk.cat
    items = cat.lab_items
    draws = _draws(chunk, adm, pats, visits)
    setting = draws["setting"].to_numpy()
    rates = np.array([PANEL_RATES[s] for s in ("ward", "icu", "outpatient")])[setting]
    ordered = rng.random(rates.shape) < rates
    ordered[:, 2] &= ordered[:, 1]  # a differential comes with a blood count
    ordered[~ordered.any(axis=1), 0] = True
    d, panel = np.nonzero(ordered)
    n_spec = d.size
    priority = cat.event_field("labevents", "priority")
    spec = pl.DataFrame({
        "specimen_id": chunk.ids.take("specimen_id", n_spec),
        "priority": take(priority["value"], choice(rng, probabilities(priority["weight"]), n_spec)),
        "order_provider_id": chunk.providers(n_spec, share=0.15, name="order_provider_id"),
        "store_delay": rng.integers(15, 240, n_spec) * MINUTE,
    })
    outpatient = setting[d] == 2
    spec = spec.with_columns(
        priority=pl.when(pl.Series(outpatient)).then(pl.lit("ROUTINE")).otherwise("priority"))
    panel_names = items["panel"].to_numpy()
    members = [np.flatnonzero(panel_names == p) for p in PANELS]
    sizes = np.array([m.size for m in members])
    s, within = expand(sizes[panel])
    offsets = np.cumsum(sizes) - sizes
    flat = np.concatenate(members)
    item = flat[offsets[panel[s]] + within]
    # Panels are not always resulted whole: rarer items are skipped more often (never a specimen's
    # first item), so item frequencies differ as in MIMIC-IV instead of tying within a panel.
    weight = items["weight"].to_numpy().astype(float)
    keep_rate = 0.6 + 0.38 * weight / weight.max()
    kept = (within == 0) | (rng.random(item.size) < keep_rate[item])
    s, item = s[kept], item[kept]
    draw = d[s]
    value, flag = _values(rng, items, item, draws["abnormal_rate"].to_numpy()[draw])
    comment = items["comment"].gather(item)
    comment = comment.scatter(np.flatnonzero(rng.random(item.size) < 0.5), None)
    charttime = draws["time"].to_numpy()[draw]
    storetime = charttime + spec["store_delay"].to_numpy()[s]
    labs = pl.DataFrame({
        "subject_id": draws["subject_id"].gather(draw),
        "hadm_id": draws["hadm_id"].gather(draw),
        "specimen_id": spec["specimen_id"].gather(s),
        "itemid": take(items["itemid"], item),
        "order_provider_id": spec["order_provider_id"].gather(s),
        "charttime": datetimes(charttime),
        "storetime": datetimes(storetime),
        "value": number_text(value, items["decimals"].to_numpy()[item]),
        "valuenum": value,
        "valueuom": take(items["valueuom"], item),
        "ref_range_lower": take(items["ref_range_lower"], item),
        "ref_range_upper": take(items["ref_range_upper"], item),
        "flag": text_where(flag, "abnormal"),
        "priority": spec["priority"].gather(s),
        "comments": comment,
    }).sort("subject_id", "charttime", maintain_order=True)
    return labs.with_columns(labevent_id=pl.Series(chunk.ids.take("labevent_id", labs.height)))
