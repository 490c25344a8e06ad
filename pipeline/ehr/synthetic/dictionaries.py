"""Dictionary tables (d_*, provider, caregiver), written once per EHR rather than per chunk.

They list exactly the codes and items the generator can emit, so every event's itemid, ICD code
and HCPCS code resolves; provider and caregiver pools are sized to the population and seeded.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from faker import Faker

from pipeline.ehr.synthetic.catalog import Catalog
from pipeline.ehr.synthetic.context import Pools

POOL_STREAM = 2**32 - 1  # rng stream of the pools; chunk streams are [seed, chunk_index]
PROVIDER_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def pool_size(n_patients: int, per_patient: float, lo: int, hi: int) -> int:
    return int(min(max(round(n_patients * per_patient), lo), hi))


def make_pools(seed: int, n_patients: int) -> Pools:
    """Provider ids from a seeded Faker ("P" + 5 characters, as in MIMIC-IV) and caregiver ints."""
    fake = Faker()
    fake.seed_instance(seed)
    n_providers = pool_size(n_patients, 0.1, 50, 20_000)
    providers: set[str] = set()
    while len(providers) < n_providers:
        providers.add(fake.lexify("P?????", letters=PROVIDER_ALPHABET))
    rng = np.random.default_rng([seed, POOL_STREAM])
    n_caregivers = pool_size(n_patients, 0.05, 30, 50_000)
    caregivers = np.sort(rng.choice(np.arange(100, 100_000), size=n_caregivers, replace=False))
    return Pools(providers=pl.Series("provider_id", sorted(providers), dtype=pl.String),
                 caregivers=caregivers)


def dictionary_tables(cat: Catalog, pools: Pools) -> dict[str, pl.DataFrame]:
    """The seven dictionary tables, restricted to what the generator uses."""
    return {
        "d_hcpcs": cat.hcpcs.select("code", "category", "long_description", "short_description"),
        "d_icd_diagnoses": cat.icd_diagnoses.select("icd_code", "icd_version", "long_title"),
        "d_icd_procedures": cat.icd_procedures.select("icd_code", "icd_version", "long_title"),
        "d_labitems": cat.lab_items.select("itemid", "label", "fluid", "category"),
        "d_items": cat.d_items,
        "provider": pools.providers.to_frame(),
        "caregiver": pl.DataFrame({"caregiver_id": pools.caregivers}),
    }
