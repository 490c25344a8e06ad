"""The EHR substrate: MIMIC-IV schema, ingest of a real release, synthetic generator, read access."""

from pipeline.ehr.access import EHR, EHRNotBuiltError
from pipeline.ehr.schema import MIMIC_TABLES, REQUIRED_TABLES, TABLES, TableSchema

__all__ = ["EHR", "MIMIC_TABLES", "REQUIRED_TABLES", "TABLES", "EHRNotBuiltError", "TableSchema"]
