"""Export gold SQL from the canonical dialect to the engines MIMIC-IV users query it with."""

from __future__ import annotations

from sqlglot import exp

from pipeline.ehr.schema import TABLES

EXPORT_DIALECTS = ("duckdb", "postgres", "sqlite", "bigquery")
BIGQUERY_PROJECT = "physionet-data"
# MIMIC-IV has no cost table; on BigQuery it lives in a dataset of the user's own (load cost.parquet).
BIGQUERY_DERIVED_DATASET = "ehr_robustgym"


def bigquery_table(name: str) -> exp.Table:
    module = TABLES[name].module
    if module == "derived":
        return exp.table_(name, db=BIGQUERY_DERIVED_DATASET, quoted=True)
    return exp.table_(name, db=f"mimiciv_{module}", catalog=BIGQUERY_PROJECT, quoted=True)


def _bigquery_names(tree: exp.Expression) -> exp.Expression:
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and node.name in TABLES and node.name not in ctes and not node.db:
            full = bigquery_table(node.name)
            full.set("alias", node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(node.name)))
            return full
        return node

    return tree.copy().transform(rename)


def export(tree: exp.Expression) -> dict[str, str]:
    """The query in every export dialect; BigQuery with MIMIC-IV's public table names."""
    out = {d: tree.sql(dialect=d) for d in EXPORT_DIALECTS if d != "bigquery"}
    out["bigquery"] = _bigquery_names(tree).sql(dialect="bigquery")
    return out
