"""The agent interface of the gym, and the scaffolding the scripted baselines share.

An agent is reset with the first observation of an episode and then asked for one action per step
(`act(obs)`), an OpenAI tool call or an assistant message, until the env reports the episode over.
Privileged baselines (oracle, naive, heuristic) also receive the `Episode` (its reference/careless
SQL and grading spec); every other agent gets None, exactly what a model under test sees.

Scripted baselines are written as generators (`ScriptedAgent.script`): `obs = yield action` reads
like the plan it is (run this query, look at the rows, submit) and keeps no hand-rolled state machine.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.gym.episodes import Episode
from pipeline.tasks.template import AnswerSpec

Action = dict[str, Any]
Observation = dict[str, Any]
Script = Generator[Action, Observation, None]


class AgentError(RuntimeError):
    """An agent cannot produce an action (a model server that keeps failing, a script that ran out)."""


class Agent:
    """Base class: `reset` once per episode, then `act` once per step."""

    name: str = "agent"
    privileged: bool = False  # True: reset() receives the Episode (baselines only)

    def reset(self, obs: Observation, info: dict[str, Any], episode: Episode | None,
              rng: np.random.Generator) -> None:
        """Start an episode. Privileged agents refuse to run blind rather than silently degrade."""
        if self.privileged and episode is None:
            raise AgentError(f"{self.name} is a privileged baseline: reset() needs the Episode")

    def act(self, obs: Observation) -> Action:
        """The next action for observation `obs`."""
        raise NotImplementedError

    @staticmethod
    def tool_call(name: str, args: Mapping[str, Any], call_id: str) -> Action:
        """An OpenAI-style tool call with JSON-text arguments, as a model would send it."""
        return {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": json.dumps(dict(args), default=str)}}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class ScriptedAgent(Agent):
    """An agent whose episode is a generator: it yields actions and is sent back each observation."""

    def reset(self, obs: Observation, info: dict[str, Any], episode: Episode | None,
              rng: np.random.Generator) -> None:
        super().reset(obs, info, episode, rng)
        self.episode = episode
        self.rng = rng
        self._calls = 0
        self._script: Script | None = None

    def script(self, obs: Observation) -> Script:
        """The plan of one episode, starting from the reset observation."""
        raise NotImplementedError

    def act(self, obs: Observation) -> Action:
        if not hasattr(self, "_calls"):
            raise AgentError(f"{self.name}: call reset() before act()")
        try:
            if self._script is None:
                self._script = self.script(obs)
                return next(self._script)
            return self._script.send(obs)
        except StopIteration:
            raise AgentError(f"{self.name}: the script ended without submitting an answer") from None

    # -- actions ----------------------------------------------------------------------------------
    def call(self, name: str, **args: Any) -> Action:
        self._calls += 1
        return self.tool_call(name, args, f"call_{self._calls}")

    def sql(self, query: str) -> Action:
        return self.call("execute_sql", query=query)

    def submit(self, answer: Any, unit: str | None = None) -> Action:
        return self.call("submit_answer", answer=answer, status="answered", unit=unit)

    def abstain(self) -> Action:
        return self.call("submit_answer", answer=None, status="abstained", unit=None)


def result_of(obs: Observation) -> dict[str, Any]:
    """The structured last tool result of an observation (an empty failed result when there is none)."""
    return obs.get("last_result") or {"ok": False, "content": "", "columns": [], "rows": [], "row_count": 0}


def column_values(result: Mapping[str, Any], column: str) -> list[Any] | None:
    """Every value of `column` in a tool result (None when the call failed or has no such column)."""
    columns: Sequence[str] = result.get("columns") or []
    if not result.get("ok") or column not in columns:
        return None
    i = list(columns).index(column)
    return [row[i] for row in result.get("rows") or []]


def read_answer(result: Mapping[str, Any], spec: AnswerSpec, keep_nulls: bool = False) -> tuple[Any, str | None]:
    """The answer a result holds under `spec`: the answer column of the first row (every row for a list,
    in order) and its unit (`spec.unit_column` of the first row, else `spec.unit`). The answer is None when
    nothing came back; list answers drop NULL items unless `keep_nulls`."""
    values = column_values(result, spec.column)
    if not values:
        return None, None
    if spec.type == "list":
        answer: Any = values if keep_nulls else [v for v in values if v is not None]
        answer = answer or None
    else:
        answer = values[0]
    unit = spec.unit
    if spec.unit_column:
        units = column_values(result, spec.unit_column)
        unit = units[0] if units else None
    return answer, unit
