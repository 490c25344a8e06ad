"""Synthetic MIMIC-IV v2.2-shaped EHR: all 31 tables, linked, realistic, seeded and chunked.

`generate(out_dir, n_patients=..., seed=...)` writes one Parquet file per table. Codes, units,
reference ranges and frequencies come from small catalogs derived from the public MIMIC-IV demo
(`catalog/`, ODbL); no credentialed data is used.
"""

from pipeline.ehr.synthetic.generator import generate

__all__ = ["generate"]
