"""Billing tables: ICD diagnoses and procedures, DRG codes, HCPCS events.

Coding follows the calendar: admissions before October 2015 (real time) are coded in ICD-9,
later ones in ICD-10. Codes of one admission are distinct and drawn by their demo frequency;
seq_num 1 is the first draw (the frequent codes lead, as principal diagnoses tend to).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.admissions import Admissions
from pipeline.ehr.synthetic.catalog import probabilities
from pipeline.ehr.synthetic.context import Chunk
from pipeline.ehr.synthetic.sampling import (
    between,
    choice,
    choose_k,
    dates,
    ensure_any,
    expand,
    mask,
    nullable,
    take,
)

OBSERVATION_CODES = ("G0378", "99218", "99219")


def _coded(chunk: Chunk, adm: Admissions, codes: pl.DataFrame, k: np.ndarray) -> tuple[np.ndarray, ...]:
    """Distinct codes per admission in the admission's ICD version: (admission, code row, seq_num)."""
    rows: list[tuple[np.ndarray, np.ndarray]] = []
    for version, use in ((9, ~adm.icd10), (10, adm.icd10)):
        pool = np.flatnonzero(codes["icd_version"].to_numpy() == version)
        idx = np.flatnonzero(use & (k > 0))
        r, item = choose_k(chunk.rng, probabilities(codes["weight"].to_numpy()[pool]), k[idx])
        rows.append((idx[r], pool[item]))
    a = np.concatenate([r[0] for r in rows])
    code = np.concatenate([r[1] for r in rows])
    order = np.argsort(a, kind="stable")
    a, code = a[order], code[order]
    _, seq = expand(np.bincount(a, minlength=adm.n))
    return a, code, seq + 1


def diagnoses_table(chunk: Chunk, adm: Admissions) -> pl.DataFrame:
    k = np.minimum(3 + chunk.rng.poisson(7, adm.n), 30)
    a, code, seq = _coded(chunk, adm, chunk.cat.icd_diagnoses, k)
    codes = chunk.cat.icd_diagnoses
    return pl.DataFrame({"subject_id": adm.subject_id[a], "hadm_id": adm.hadm_id[a], "seq_num": seq,
                         "icd_code": take(codes["icd_code"], code),
                         "icd_version": take(codes["icd_version"], code)})


def procedures_table(chunk: Chunk, adm: Admissions) -> pl.DataFrame:
    rng = chunk.rng
    has = ensure_any(rng.random(adm.n) < np.where(adm.has_icu, 0.8, 0.35))
    k = np.where(has, np.minimum(1 + rng.poisson(1.2, adm.n), 8), 0)
    a, code, seq = _coded(chunk, adm, chunk.cat.icd_procedures, k)
    codes = chunk.cat.icd_procedures
    return pl.DataFrame({"subject_id": adm.subject_id[a], "hadm_id": adm.hadm_id[a], "seq_num": seq,
                         "chartdate": dates(between(rng, adm.admit[a], adm.disch[a])),
                         "icd_code": take(codes["icd_code"], code),
                         "icd_version": take(codes["icd_version"], code)})


def drgcodes_table(chunk: Chunk, adm: Admissions) -> pl.DataFrame:
    """HCFA (MS-DRG) for most admissions, APR-DRG with severity and mortality for many."""
    rng, cat = chunk.rng, chunk.cat
    hcfa = rng.random(adm.n) < 0.85
    apr = (rng.random(adm.n) < 0.8) | ~hcfa
    parts = []
    for drg_type, has in (("HCFA", hcfa), ("APR", apr)):
        table = cat.drg.filter(pl.col("drg_type") == drg_type)
        idx = np.flatnonzero(has)
        pick = choice(rng, probabilities(table["weight"]), idx.size)
        levels = {}
        for col in ("drg_severity", "drg_mortality"):
            freq = cat.event_field("drgcodes", col)
            level = choice(rng, probabilities(freq["weight"]), idx.size)
            values = freq["value"].cast(pl.Int64).to_numpy()[level]
            levels[col] = nullable(values, np.full(idx.size, drg_type == "HCFA"), col, pl.Int64)
        parts.append(pl.DataFrame({"subject_id": adm.subject_id[idx], "hadm_id": adm.hadm_id[idx],
                                   "drg_type": np.full(idx.size, drg_type),
                                   "drg_code": take(table["drg_code"], pick),
                                   "description": take(table["description"], pick), **levels}))
    return pl.concat(parts)


def hcpcs_table(chunk: Chunk, adm: Admissions) -> pl.DataFrame:
    """Observation stays bill hourly observation codes; a few other admissions bill a procedure."""
    rng, cat = chunk.rng, chunk.cat
    codes = cat.hcpcs
    is_obs_code = mask(codes["code"].is_in(OBSERVATION_CODES))
    obs_pool, proc_pool = np.flatnonzero(is_obs_code), np.flatnonzero(~is_obs_code)
    weights = codes["weight"].to_numpy()
    procedure = ensure_any(~adm.observation & (rng.random(adm.n) < 0.08))
    k = np.where(adm.observation, np.minimum(1 + rng.poisson(0.4, adm.n), obs_pool.size), 0)
    r1, c1 = choose_k(rng, probabilities(weights[obs_pool]), k)
    k = np.where(procedure, np.minimum(1 + rng.poisson(0.3, adm.n), 3), 0)
    r2, c2 = choose_k(rng, probabilities(weights[proc_pool]), k)
    a = np.concatenate([r1, r2])
    code = np.concatenate([obs_pool[c1], proc_pool[c2]])
    order = np.argsort(a, kind="stable")
    a, code = a[order], code[order]
    _, seq = expand(np.bincount(a, minlength=adm.n))
    day = np.where(np.isin(code, obs_pool), adm.admit[a], between(rng, adm.admit[a], adm.disch[a]))
    return pl.DataFrame({"subject_id": adm.subject_id[a], "hadm_id": adm.hadm_id[a], "chartdate": dates(day),
                         "hcpcs_cd": take(codes["code"], code), "seq_num": seq + 1,
                         "short_description": take(codes["short_description"], code)})
