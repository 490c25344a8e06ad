"""The dataset card (`README.md`): YAML metadata the Hub reads, then what a researcher needs to use the pairs."""

from __future__ import annotations

from typing import Any

import polars as pl
from datasets import DatasetInfo, Features, SplitDict, SplitInfo
from datasets.info import DatasetInfosDict
from huggingface_hub import DatasetCardData

from pipeline.publish.layout import SPLITS, shard_path

FIELDS = {
    "id": "`clean`: the task id; `noise`: the pair id.",
    "variant": "`clean` or `noise`: which half of a pair the question is.",
    "question": "What the agent is asked (the noisy phrasing for `noise`).",
    "intent / scope": "Clinical intent (demographics, vitals, medications, cost, labs, diagnoses); `patient` or "
                      "`population` question.",
    "template_id / task_id": "The YAML template and the clean task the question was sampled from.",
    "subject_ids": "Patients a patient-scope question is about.",
    "answer_type": "number, integer, string, boolean, datetime or list.",
    "answer / unit": "The expected answer as JSON (null for an abstention) and its unit.",
    "expected_status": "`answered`, or `abstained` when the robust behaviour is to decline.",
    "abstain_reason": "missing_evidence, conflicting_evidence, implausible_value, invalid_premise or unknown_entity.",
    "gold_sql": "Reference SQL (DuckDB dialect) that yields the expected outcome on the question's EHR.",
    "patch": "JSON list of row edits (delete/update/insert) that turn the base EHR into the noisy one; `[]` for "
             "clean questions.",
    "noise_level / noise_op / noise_params": "The perturbation: record-, value- or query-level operator and its "
                                             "parameters (JSON).",
    "recoverable": "Whether a careful agent can still answer (e.g. convert a unit back) rather than abstain.",
    "trap_sql": "What a careless agent would run on the noisy question; it gives a plausible wrong answer.",
    "pair_ids": "The pairs this question belongs to.",
    "grading": "JSON the verifier (`pipeline.verifier.grade`) takes: outcome, answer spec and tolerance, allowed unit "
               "conversions, the evidence tables and entity ids an abstention must have checked.",
    "pairs config": "One row per pair: the clean task's fields (question, slots, gold_sql, gold_sql_dialects, answer, "
                    "answer_spec, evidence, sql_components) and the noisy half's (noisy_question, noisy_gold_sql, "
                    "patch, expected, trap_sql, trap), with `grading_clean` and `grading_noise`.",
}

HOW = """\
1. **EHR** — a MIMIC-IV-shaped database (31 tables plus a derived `cost` table) is built from the
   source named above.
2. **Tasks** — YAML templates ({n_templates} of them feed these pairs) across six intents and two
   scopes are instantiated with values that exist in the data; each gold SQL program runs in
   Polars (and is cross-checked against DuckDB in the tests), and tied, empty or degenerate
   answers are rejected.
3. **Noise** — each pair perturbs the question or the database with one registered operator at the
   record (drop, orphan, duplicate, conflicting duplicate, shifted time), value (NULL, unit mismatch,
   implausible value, label typo, code format) or query level (misspelling, synonym, unknown entity,
   false premise, out-of-window). Database noise is stored as a `patch` over the clean EHR.
4. **Verification** — a pair is kept only if its noisy reference SQL yields the expected outcome on the
   patched EHR and the careless `trap_sql` does not; {n_sampled:,} candidates were sampled, {n_pairs:,}
   kept and {n_rejected:,} rejected. Before publishing, every kept pair is re-executed and the counts
   are checked against the configuration.
5. **Splits** — patient-disjoint: no patient's data is asked about in both train and test; the test
   split is balanced over scope x noise level.
"""


def _counts(frame: pl.DataFrame, keys: list[str]) -> list[dict[str, Any]]:
    return frame.group_by(keys).len("pairs").sort(keys).to_dicts()


def counts_tables(noise: pl.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """Pairs per split x scope x level x intent x operator, and the marginals a reader looks at first."""
    return {
        "split_scope_level": _counts(noise, ["split", "scope", "noise_level"]),
        "split_intent": _counts(noise, ["split", "intent"]),
        "split_level_operator": _counts(noise, ["split", "noise_level", "noise_op"]),
        "split_expected_status": _counts(noise, ["split", "expected_status"]),
        "split_scope_level_intent_operator": _counts(noise, ["split", "scope", "noise_level", "intent", "noise_op"]),
    }


def markdown_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)\n"
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(f"{r[k]:,}" if isinstance(r[k], int) else str(r[k]) for k in keys) + " |"
              for r in rows]
    return "\n".join(lines) + "\n"


def metadata(stats: dict[str, Any], features: dict[str, Features], source: dict[str, Any]) -> DatasetCardData:
    """The YAML header: licence, tags, `configs` (data files per split) and `dataset_info` (features, sizes)."""
    data = DatasetCardData(
        license=source["license"], language=["en"], pretty_name="ehr-robustgym Clean-Noise pairs",
        task_categories=["question-answering", "table-question-answering"],
        tags=["medical", "ehr", "mimic-iv", "text-to-sql", "robustness", "abstention", "agents"],
        size_categories=["1K<n<10K"] if stats["n_pairs"] < 10_000 else ["10K<n<100K"],
    )
    if source["license"] == "other":
        data["license_name"] = source["license_name"]
    data["configs"] = [{"config_name": c, **({"default": True} if c == "pairs" else {}),
                        "data_files": [{"split": s, "path": shard_path(c, s)} for s in SPLITS]}
                       for c in stats["configs"]]
    infos = DatasetInfosDict()
    for config, splits in stats["configs"].items():
        split_dict = SplitDict()
        for name, info in splits.items():
            split_dict.add(SplitInfo(name=name, num_bytes=info["num_bytes"], num_examples=info["num_examples"]))
        infos[config] = DatasetInfo(features=features[config], splits=split_dict)
    infos.to_dataset_card_data(data)
    return data


def render(stats: dict[str, Any], features: dict[str, Features], source: dict[str, Any]) -> str:
    """The whole README.md, deterministic for the same stats."""
    counts = stats["counts"]
    rows = "\n".join(f"| `{c}` | {s['train']['num_examples']:,} | {s['test']['num_examples']:,} |"
                     for c, s in stats["configs"].items())
    sql_only = stats["content"] == "sql_only"
    parts = [
        "---\n" + metadata(stats, features, source).to_yaml() + "\n---\n",
        "# ehr-robustgym: Clean-Noise pairs for robust clinical EHR agents\n",
        f"{stats['n_pairs']:,} pairs of questions over a MIMIC-IV-shaped EHR. In each pair the *clean* question "
        "has a verified answer; the *noisy* twin perturbs the question or the database (missing, duplicated, "
        "mis-entered or mis-coded records, misspellings, unknown entities, false premises) and says what a "
        "robust agent should do: answer correctly despite the noise, or abstain with a reason when the record "
        "does not support an answer. A careless agent's query (`trap_sql`) gives a plausible wrong answer on "
        "every noisy question.\n",
        f"**Source.** {source['notice']}\n",
        f"**Licence.** {source['license_name']}.\n",
    ]
    if sql_only:
        parts.append("**Content: questions and SQL only.** This export carries no row values from the source EHR "
                     "(answers, patches, evidence, trap results and operator parameters are null); rebuild the "
                     "pairs with ehr-robustgym inside your credentialed environment to obtain them.\n")
    parts += [
        "## Configs and splits\n",
        "| config | train | test |\n|---|---|---|\n" + rows + "\n",
        "- `pairs` (default): one row per pair, both halves side by side.\n"
        "- `clean`: one row per clean question (a clean task can anchor up to two pairs).\n"
        "- `noise`: one row per noisy question. `clean` and `noise` share one schema, so an agent harness can "
        "serve either.\n",
        "```python\nimport json\nfrom datasets import load_dataset\n\n"
        "pairs = load_dataset(\"<this repo or folder>\")                   # config `pairs`\n"
        "noise = load_dataset(\"<this repo or folder>\", \"noise\", split=\"test\")\n"
        "row = noise[0]\nprint(row[\"question\"], row[\"expected_status\"], json.loads(row[\"answer\"]))\n"
        "patch = json.loads(row[\"patch\"])                                # edits over the clean EHR\n```\n",
        "Complex fields are JSON text; datetimes inside them are tagged `{\"$datetime\": \"...\"}` "
        "(`pipeline.jsonvalues.loads` restores them). Grade a submission with "
        "`pipeline.verifier.grade(json.loads(row[\"grading\"]), {\"answer\": ..., \"status\": \"answered\"})`.\n",
        "## Counts\n",
        "### Pairs per split, scope and noise level\n\n" + markdown_table(counts["split_scope_level"]),
        "### Pairs per split and intent\n\n" + markdown_table(counts["split_intent"]),
        "### Pairs per split, level and operator\n\n" + markdown_table(counts["split_level_operator"]),
        "### Expected behaviour on the noisy question\n\n" + markdown_table(counts["split_expected_status"]),
        "<details><summary>Pairs per split x scope x level x intent x operator</summary>\n\n"
        + markdown_table(counts["split_scope_level_intent_operator"]) + "\n</details>\n",
        "## Fields\n",
        "| field | meaning |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in FIELDS.items()) + "\n",
        "## How the pairs were made\n",
        HOW.format(**stats),
        "## Citation\n",
        f"Source data:\n\n> {source['citation']}\n\n> {source['paper']}\n",
        "```bibtex\n@misc{ehr_robustgym,\n  title  = {ehr-robustgym: a benchmark generator and gym for clinical AI "
        "agents on noisy electronic health records},\n  year   = {2026},\n  note   = {Clean-Noise pairs built from "
        f"MIMIC-IV ({source['variant']})}}\n}}\n```\n",
    ]
    return "\n".join(parts)
