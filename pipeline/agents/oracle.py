"""The oracle: the upper bound of the benchmark, and the end-to-end check of the gym.

It runs the episode's reference SQL (which yields the expected outcome on this episode's EHR, clean or
patched) through the env's own execute_sql tool, reads the structured rows and submits them as the
gold answer (answer column, unit from `spec.unit_column` or `spec.unit`, every row in order for a
list). On an unanswerable episode it abstains after that call; when the reference SQL does not read
an evidence table with one of the question's ids as a literal (the verifier's evidence rule for
abstentions), it first runs a small evidence query so the abstention is earned, not assumed.
Anything but 100% means the env, the executor, the verifier or the dataset disagree.
"""

from __future__ import annotations

from pipeline.agents.base import Observation, Script, ScriptedAgent, read_answer, result_of
from pipeline.ehr.schema import TABLES
from pipeline.verifier.evidence import ToolCall, reads_evidence

ID_COLUMNS = ("subject_id", "hadm_id", "stay_id")


def evidence_query(tables: tuple[str, ...], entity_ids: tuple[int, ...]) -> str:
    """A small read of an evidence table for the first entity id, matched on whichever id columns the
    table has (the id's kind is not recorded, and subject/admission/stay ids do not collide)."""
    if not tables:
        return "SELECT 1 AS checked"
    wanted = entity_ids[0] if entity_ids else None
    for table in tables:
        columns = [c for c in ID_COLUMNS if table in TABLES and c in TABLES[table].columns]
        if wanted is not None and columns:
            where = " OR ".join(f"{c} = {wanted}" for c in columns)
            return f"SELECT * FROM {table} WHERE {where} LIMIT 5"
    if wanted is None:
        return f"SELECT * FROM {tables[0]} LIMIT 5"
    return f"SELECT *, {wanted} AS entity_id FROM {tables[0]} LIMIT 5"  # a dictionary table: no id column


def counts_as_evidence(query: str, tables: tuple[str, ...], entity_ids: tuple[int, ...]) -> bool:
    """Would a successful run of `query` satisfy the verifier's evidence rule?"""
    return reads_evidence(ToolCall("execute_sql", {"query": query}, ok=True), tables, entity_ids)


class OracleAgent(ScriptedAgent):
    name = "oracle"
    privileged = True

    def script(self, obs: Observation) -> Script:
        episode = self.episode
        assert episode is not None
        grading = episode.grading
        abstain = episode.expected_status == "abstained"
        evidence_done = False
        if abstain and not counts_as_evidence(episode.reference_sql, grading.evidence_tables, grading.entity_ids):
            check = evidence_query(grading.evidence_tables, grading.entity_ids)
            obs = yield self.sql(check)
            evidence_done = bool(result_of(obs).get("ok"))
        obs = yield self.sql(episode.reference_sql)
        result = result_of(obs)
        if abstain:
            if not evidence_done and not result.get("ok"):  # the reference failed: earn the abstention anyway
                yield self.sql(evidence_query(grading.evidence_tables, grading.entity_ids))
            yield self.abstain()
            return
        answer, unit = read_answer(result, grading.spec, keep_nulls=True)
        yield self.submit(answer, unit)
