"""ehr-robustgym: a benchmark generator and gym for clinical agents over noisy EHRs."""

__version__ = "0.1.0"
