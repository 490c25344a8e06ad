"""Write a synthetic MIMIC-IV-shaped EHR chunk by chunk with bounded memory.

Patients are generated in chunks of `chunk_size` with ascending subject_ids; each chunk has its own
random stream `default_rng([seed, chunk_index])`, is sorted by each table's `sort_by` and appended
to that table's Parquet file, so files stay sorted by subject_id and memory does not grow with
`n_patients`. Dictionary tables are written once. Same (n_patients, seed, chunk_size) gives
byte-identical files.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
from tqdm import tqdm

from pipeline.ehr import schema, storage
from pipeline.ehr.synthetic import (
    admissions,
    billing,
    chartevents,
    icu_events,
    labs,
    medications,
    microbiology,
    omr,
    orders,
    patients,
    stays,
)
from pipeline.ehr.synthetic.catalog import Catalog, load_catalog
from pipeline.ehr.synthetic.context import Chunk, Pools
from pipeline.ehr.synthetic.dictionaries import dictionary_tables, make_pools
from pipeline.ehr.synthetic.ids import IdAllocator


def chunk_tables(chunk: Chunk, first_index: int, n: int) -> dict[str, pl.DataFrame]:
    """All per-patient tables of one chunk of `n` patients (unsorted).

    Builders draw from the chunk's one random stream in the order written here, so reordering
    them changes the data (never its validity) and breaks byte-for-byte reproducibility.
    """
    pats = patients.draw_patients(chunk, first_index, n)
    adm, dod = admissions.draw_admissions(chunk, pats)
    st = stays.draw_stays(chunk, adm)
    visits = omr.draw_visits(chunk, pats, adm, dod)
    plan = medications.plan_medications(chunk, adm)
    order_tables, poe = orders.orders_tables(chunk, adm, st, plan)
    return {
        "patients": patients.patients_table(pats, dod),
        "admissions": admissions.admissions_table(chunk, pats, adm),
        "transfers": stays.transfers_table(chunk, adm, st),
        "services": stays.services_table(chunk, adm),
        "icustays": stays.icustays_table(adm, st),
        "diagnoses_icd": billing.diagnoses_table(chunk, adm),
        "procedures_icd": billing.procedures_table(chunk, adm),
        "drgcodes": billing.drgcodes_table(chunk, adm),
        "hcpcsevents": billing.hcpcs_table(chunk, adm),
        "omr": omr.omr_table(chunk, pats, visits),
        "labevents": labs.labevents_table(chunk, adm, pats, visits),
        "microbiologyevents": microbiology.microbiology_table(chunk, adm),
        **order_tables,
        "prescriptions": medications.prescriptions_table(chunk, adm, plan, poe.poe_id, poe.poe_seq),
        "pharmacy": medications.pharmacy_table(chunk, adm, plan, poe.poe_id),
        **medications.emar_tables(chunk, adm, plan, poe.poe_id),
        "chartevents": chartevents.chartevents_table(chunk, adm, pats, st),
        "datetimeevents": icu_events.datetimeevents_table(chunk, adm, st),
        "outputevents": icu_events.outputevents_table(chunk, adm, st),
        "procedureevents": icu_events.procedureevents_table(chunk, adm, pats, st),
        **icu_events.input_tables(chunk, adm, pats, st),
    }


def chunks(n_patients: int, seed: int, chunk_size: int, cat: Catalog, pools: Pools
           ) -> Iterator[dict[str, pl.DataFrame]]:
    """Per-patient tables chunk after chunk; ids continue across chunks."""
    ids = IdAllocator()
    for index, first in enumerate(range(0, n_patients, chunk_size)):
        chunk = Chunk(rng=np.random.default_rng([seed, index]), cat=cat, pools=pools, ids=ids)
        yield chunk_tables(chunk, first, min(chunk_size, n_patients - first))


def ordered(df: pl.DataFrame, table: schema.TableSchema) -> pl.DataFrame:
    """Schema columns and dtypes, sorted by the table's on-disk order (stable, nulls last)."""
    frame = storage.conform(df, table).collect()
    return frame.sort(list(table.sort_by), maintain_order=True, nulls_last=True)


def generate(out_dir: Path, *, n_patients: int = 1000, seed: int = 0, chunk_size: int = 5000,
             row_group_size: int = storage.DEFAULT_ROW_GROUP_SIZE, progress: bool = True) -> dict[str, int]:
    """Write `<table>.parquet` for the 31 MIMIC-IV tables into the existing folder `out_dir`.

    Returns rows written per table. The derived `cost` table is not written here.
    """
    if n_patients < 1 or chunk_size < 1:
        raise ValueError(f"n_patients ({n_patients}) and chunk_size ({chunk_size}) must be positive")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise FileNotFoundError(f"output folder {out_dir} does not exist")
    cat = load_catalog()
    pools = make_pools(seed, n_patients)
    rows: dict[str, int] = {}
    for name, df in dictionary_tables(cat, pools).items():
        with storage.TableWriter(out_dir / f"{name}.parquet", schema.table(name), row_group_size) as writer:
            writer.write(ordered(df, schema.table(name)))
        rows[name] = writer.rows
    per_patient = [t for t in schema.MIMIC_TABLES if t not in rows]
    writers = {t: storage.TableWriter(out_dir / f"{t}.parquet", schema.table(t), row_group_size)
               for t in per_patient}
    try:
        n_chunks = -(-n_patients // chunk_size)
        for tables in tqdm(chunks(n_patients, seed, chunk_size, cat, pools), total=n_chunks,
                           desc="synthetic EHR", unit="chunk", disable=not progress):
            missing = set(per_patient) - set(tables)
            if missing:
                raise RuntimeError(f"generator produced no frame for {sorted(missing)}")
            for name in per_patient:
                df = ordered(tables[name], schema.table(name))
                if df.height:
                    writers[name].write(df)
    finally:
        for writer in writers.values():
            writer.close()
    rows.update({name: writers[name].rows for name in per_patient})
    return {name: rows[name] for name in schema.MIMIC_TABLES}
