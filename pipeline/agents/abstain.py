"""The always-abstain baseline: submits null/abstained at once, without a single tool call.

It shows the verifier cannot be gamed by abstaining: it fails every answerable item, and on the
unanswerable ones its abstention has no evidence behind it (no read of the evidence table), so it
fails those too. Its expected score is 0 everywhere.
"""

from __future__ import annotations

from pipeline.agents.base import Observation, Script, ScriptedAgent


class AbstainAgent(ScriptedAgent):
    name = "abstain"

    def script(self, obs: Observation) -> Script:
        yield self.abstain()
