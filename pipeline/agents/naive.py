"""The naive baseline: a careless analyst who trusts the first query.

It runs the episode's careless SQL (the clean reference on clean items; on noisy items the trap the
pair was built around: the misspelled name as written, no window filter, no dedup, no unit check)
and submits what comes back as the answer, WITHOUT a unit: the first row's answer column, or every
row for a list answer. Only when nothing comes back (no rows, NULL) does it abstain. It scores high
on clean items and low on noisy ones; the gap is what robustness costs an agent that never checks.
"""

from __future__ import annotations

from pipeline.agents.base import Observation, Script, ScriptedAgent, read_answer, result_of


class NaiveAgent(ScriptedAgent):
    name = "naive"
    privileged = True

    def script(self, obs: Observation) -> Script:
        assert self.episode is not None
        obs = yield self.sql(self.episode.careless_sql)
        answer, _unit = read_answer(result_of(obs), self.episode.grading.spec)
        yield self.abstain() if answer is None else self.submit(answer)
