"""EHRGymEnv: one benchmark question per episode, answered with SQL and Python tools, graded on submit.

The Gymnasium shape without the dependency: `reset(seed, options) -> (obs, info)` and
`step(action) -> (obs, reward, terminated, truncated, info)`. Actions are OpenAI-style tool calls
(`{"id", "type": "function", "function": {"name", "arguments"}}`) or an assistant message carrying
one; `env.tools` are the OpenAI function schemas. Per episode the EHR is the clean base or base +
the pair's patch; the agent sees the question, the schema and the tools — never the variant, the
pairing, the reference SQL or the answer. `info["grade"]` carries the verifier's grade on submit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.ehr.access import EHR
from pipeline.ehr.schema import TABLES
from pipeline.gym.episodes import VARIANTS, Episode, load_episodes
from pipeline.gym.results import ToolResult
from pipeline.verifier import Submission, grade

SYSTEM_PROMPT = """\
You answer clinical questions about a hospital's electronic health record (a MIMIC-IV-shaped database).
Records can be wrong: missing, duplicated, mis-entered, in another unit, or the question can name
something that does not exist. Check the evidence with the tools before you answer.

Tools: execute_sql runs one read-only SQL query (DuckDB-style SQL run by Polars) over the tables below;
execute_python runs Python with `ehr` (table name -> polars LazyFrame, `ehr.sql(query)`), `pl` and `np`.
Finish with submit_answer: the answer (a number, text, true/false, a date-time or a list) with its unit,
status "answered"; or answer null with status "abstained" when the record does not support an answer
(no or conflicting evidence, an implausible value, a false premise, an unknown patient or admission).
"Now" for relative dates is {now}.

Tables (column: type):
{schema}"""

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "execute_sql",
        "description": "Run one read-only SQL SELECT over the EHR tables. Returns the row count and the first rows.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "One SQL query."}},
                       "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "execute_python",
        "description": ("Run Python in a sandbox with `ehr` (mapping of table name to polars LazyFrame; "
                        "`ehr.sql(query)`), `pl` (polars) and `np`. The value of the last expression is shown."),
        "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "Python code."}},
                       "required": ["code"]}}},
    {"type": "function", "function": {
        "name": "submit_answer",
        "description": ("Submit the final answer and end the episode. To abstain (the record does not support an "
                        "answer), submit answer null with status 'abstained'."),
        "parameters": {"type": "object", "properties": {
            "answer": {"description": "The answer: number, string, boolean, ISO date-time, list, or null."},
            "status": {"type": "string", "enum": ["answered", "abstained"]},
            "unit": {"type": ["string", "null"], "description": "Unit of a numeric answer, if any."}},
            "required": ["answer", "status"]}}},
]
NUDGE = "Please use a tool: execute_sql, execute_python, or submit_answer to finish."


def schema_text(ehr: EHR) -> str:
    """One line per table present in the EHR: `table(column type, ...)`."""
    lines = []
    for name in sorted(ehr):
        schema = TABLES[name].polars_schema if name in TABLES else ehr[name].collect_schema()
        lines.append(f"{name}(" + ", ".join(f"{c} {str(t).lower()}" for c, t in schema.items()) + ")")
    return "\n".join(lines)


class EHRGymEnv:
    """See the module docstring. One env serves episodes one after another; use one env per thread."""

    tools = TOOLS

    def __init__(self, hub_dir: str | Path = "outputs/hub", ehr_dir: str | Path = "outputs/ehr", split: str = "test",
                 variants: Sequence[str] = VARIANTS, max_steps: int = 12, sql_timeout: float = 10.0,
                 sql_row_cap: int = 10_000, show_rows: int = 20, python_limits: Any = None,
                 episodes: list[Episode] | None = None):
        self.ehr_dir = Path(ehr_dir)
        self.episodes = episodes if episodes is not None else load_episodes(hub_dir, split, tuple(variants))
        self._by_key = {e.key: e for e in self.episodes}
        ehr = EHR(self.ehr_dir)
        self.system_prompt = SYSTEM_PROMPT.format(now=ehr.now.isoformat(sep=" "), schema=schema_text(ehr))
        self.max_steps = max_steps
        self._sql_args = {"timeout_s": sql_timeout, "row_cap": sql_row_cap, "show_rows": show_rows}
        self._python_limits = python_limits
        self._sql: Any = None
        self._python: Any = None
        self._rng = np.random.default_rng()
        self.episode: Episode | None = None
        self.messages: list[dict[str, Any]] = []
        self._done = True
        self._record: dict[str, Any] = {}

    # -- tools ------------------------------------------------------------------------------------
    def _run_sql(self, query: str) -> ToolResult:
        if self._sql is None:
            from pipeline.gym.sqlexec import SQLExecutor

            self._sql = SQLExecutor(self.ehr_dir, **self._sql_args)
        return self._sql.execute(query, self.episode.patch_json)  # type: ignore[union-attr]

    def _run_python(self, code: str) -> ToolResult:
        if self._python is None:
            from pipeline.gym.sandbox import PythonSandbox, SandboxLimits

            self._python = PythonSandbox(self.ehr_dir, self._python_limits or SandboxLimits())
        return self._python.run(code, self.episode.patch_json)  # type: ignore[union-attr]

    # -- gym API ----------------------------------------------------------------------------------
    def pick(self, options: dict[str, Any] | None) -> Episode:
        options = options or {}
        if isinstance(options.get("episode"), Episode):
            return options["episode"]
        if "key" in options:
            return self._by_key[options["key"]]
        if "item_id" in options:
            variant = options.get("variant", "clean")
            for e in self.episodes:
                if e.item_id == options["item_id"] and e.variant == variant:
                    return e
            raise KeyError(f"no {variant} episode for item {options['item_id']!r}")
        if "index" in options:
            return self.episodes[int(options["index"])]
        return self.episodes[int(self._rng.integers(0, len(self.episodes)))]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.episode = self.pick(options)
        self.messages = [{"role": "system", "content": self.system_prompt},
                         {"role": "user", "content": self.episode.question}]
        self._done = False
        self._steps = 0
        self._timings: dict[str, list[float]] = {"execute_sql": [], "execute_python": []}
        self._start = time.perf_counter()
        self._record = {}
        return self._obs(None), {"episode_key": self.episode.key}

    def _obs(self, result: ToolResult | None) -> dict[str, Any]:
        assert self.episode is not None
        return {"question": self.episode.question, "messages": list(self.messages), "tools": self.tools,
                "last_result": None if result is None else result.to_dict(), "step": self._steps,
                "steps_left": self.max_steps - self._steps}

    @staticmethod
    def parse_action(action: Any) -> tuple[dict[str, Any] | None, str | None]:
        """(tool call, assistant text) from a tool call or an assistant message holding at most one."""
        if not isinstance(action, dict):
            return None, str(action)
        if action.get("role") == "assistant" or "tool_calls" in action:
            calls = action.get("tool_calls") or []
            return (calls[0] if calls else None), action.get("content")
        return action, None

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        if self._done or self.episode is None:
            raise RuntimeError("episode is over: call reset() first")
        self._steps += 1
        call, text = self.parse_action(action)
        reward, terminated, info = 0.0, False, {"episode_key": self.episode.key}
        if call is None:
            self.messages.append({"role": "assistant", "content": text or ""})
            self.messages.append({"role": "user", "content": NUDGE})
            result = ToolResult.error("no tool call in the action")
        else:
            call_id = str(call.get("id") or f"call_{self._steps}")
            fn = call.get("function") or {}
            name, raw = str(fn.get("name", "")), fn.get("arguments", "{}")
            self.messages.append({"role": "assistant", "content": text, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": raw if isinstance(raw, str) else json.dumps(raw)}}]})
            result, grade_ = self._call(name, raw)
            self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": result.content})
            if grade_ is not None:
                reward, terminated = grade_.reward, True
                info["grade"] = grade_.to_dict()
        truncated = not terminated and self._steps >= self.max_steps
        if truncated:
            info["grade"] = {"correct": False, "reward": 0.0, "reason": "no_submission",
                             "detail": f"no answer submitted within {self.max_steps} steps"}
        if terminated or truncated:
            self._finish(info["grade"], reward, terminated, truncated)
        return self._obs(result), reward, terminated, truncated, info

    def _call(self, name: str, raw: Any) -> tuple[ToolResult, Any]:
        try:
            args = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except (ValueError, TypeError) as err:
            return ToolResult.error(f"arguments of {name} are not valid JSON: {err}"), None
        start = time.perf_counter()
        if name == "execute_sql":
            result = self._run_sql(str(args.get("query", args.get("sql", ""))))
        elif name == "execute_python":
            result = self._run_python(str(args.get("code", "")))
        elif name == "submit_answer":
            assert self.episode is not None
            submission = Submission.coerce(args)
            g = grade(self.episode.grading, submission, trajectory=self.messages)
            return ToolResult(ok=True, content="Answer submitted."), g
        else:
            return ToolResult.error(f"unknown tool {name!r}; tools: execute_sql, execute_python, submit_answer"), None
        self._timings[name].append(time.perf_counter() - start)
        return result, None

    def _finish(self, grade_: dict[str, Any], reward: float, terminated: bool, truncated: bool) -> None:
        e = self.episode
        assert e is not None
        self._done = True
        self._record = {
            "episode_key": e.key, "item_id": e.item_id, "task_id": e.task_id,
            "pair_id": e.item_id if e.variant == "noise" else None, "pair_ids": list(e.pair_ids),
            "variant": e.variant, "split": e.split, "intent": e.intent, "scope": e.scope,
            "noise_level": e.noise_level, "noise_op": e.noise_op, "recoverable": e.recoverable,
            "expected_status": e.expected_status, "messages": list(self.messages), "tools": self.tools,
            "reward": reward, "grade": grade_, "steps": self._steps, "terminated": terminated, "truncated": truncated,
            "timings": {"total_s": round(time.perf_counter() - self._start, 4),
                        **{k: [round(v, 4) for v in vs] for k, vs in self._timings.items()}},
        }

    def fail(self, episode: Episode, reason: str, detail: str) -> dict[str, Any]:
        """End `episode` as a failure (an agent or tool crashed) and return its record, graded `reason`."""
        if self.episode is not episode or self._done:  # it failed before or during reset: an empty transcript
            self.episode, self.messages, self._steps, self._start = episode, [], 0, time.perf_counter()
            self._timings = {"execute_sql": [], "execute_python": []}
        self._finish({"correct": False, "reward": 0.0, "reason": reason, "detail": detail}, 0.0, False, True)
        return self.record()

    def record(self) -> dict[str, Any]:
        """The finished episode as one trajectory row (see `pipeline.gym.trajectories`)."""
        if not self._record:
            raise RuntimeError("no finished episode to record")
        return dict(self._record)

    def close(self) -> None:
        for tool in (self._sql, self._python):
            if tool is not None:
                tool.close()
        self._sql = self._python = None

    def __enter__(self) -> EHRGymEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
