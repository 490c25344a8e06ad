"""The environment: Gymnasium-shaped episodes over the clean or patched EHR, hidden gold, graded submits,
trajectory rows and their SFT export."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from pipeline.ehr import EHR
from pipeline.ehr.patch import Patch
from pipeline.gym.env import EHRGymEnv
from pipeline.gym.episodes import Episode, load_episodes
from pipeline.gym.trajectories import export_sft, read_jsonl, to_sft, write_jsonl

RECORD_KEYS = {"episode_key", "task_id", "pair_id", "variant", "messages", "tools", "reward", "grade", "timings"}


def call(name: str, i: int = 1, **args: object) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


@pytest.fixture(scope="module")
def episodes(hub_workspace: Path) -> list[Episode]:
    return load_episodes(hub_workspace / "hub", "test")


@pytest.fixture(scope="module")
def env(episodes: list[Episode], synthetic_ehr: EHR):
    with EHRGymEnv(ehr_dir=synthetic_ehr.root, episodes=episodes, max_steps=4, sql_timeout=30) as env:
        yield env


def _answered(episodes: list[Episode], variant: str) -> Episode:
    return next(e for e in episodes if e.variant == variant and e.expected_status == "answered"
                and e.grading.spec.type == "number")


def test_the_agent_never_sees_the_variant_pairing_reference_or_answer(env: EHRGymEnv,
                                                                       episodes: list[Episode]) -> None:
    for episode in episodes:
        obs, info = env.reset(options={"episode": episode})
        visible = json.dumps([obs, info], default=str)
        assert episode.question in visible and set(info) == {"episode_key"}
        for secret in (episode.reference_sql, episode.careless_sql, episode.item_id, episode.task_id,
                       *episode.pair_ids, episode.patch_json if episode.patch_json != "[]" else None):
            assert secret is None or secret not in visible, (episode.key, secret)
        assert "noise_op" not in visible and "expected_status" not in visible
    assert [t["function"]["name"] for t in env.tools] == ["execute_sql", "execute_python", "submit_answer"]


def test_a_full_episode_is_graded_on_submit(env: EHRGymEnv, episodes: list[Episode]) -> None:
    episode = _answered(episodes, "clean")
    obs, _ = env.reset(options={"episode": episode})
    obs, reward, terminated, truncated, info = env.step(call("execute_sql", query=episode.reference_sql))
    result = obs["last_result"]
    assert result["ok"] and result["row_count"] >= 1 and "rows" in result["content"]
    assert (reward, terminated, truncated) == (0.0, False, False) and "grade" not in info
    value = result["rows"][0][result["columns"].index(episode.grading.spec.column)]
    obs, reward, terminated, truncated, info = env.step(call("submit_answer", 2, answer=value, status="answered"))
    assert (reward, terminated, truncated) == (1.0, True, False) and info["grade"]["correct"]
    record = env.record()
    assert set(record) >= RECORD_KEYS and record["variant"] == "clean" and record["steps"] == 2
    assert [m["role"] for m in record["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert len(record["timings"]["execute_sql"]) == 1
    with pytest.raises(RuntimeError, match="reset"):
        env.step(call("execute_sql", query="SELECT 1"))


def test_abstaining_on_a_clean_question_earns_nothing(env: EHRGymEnv, episodes: list[Episode]) -> None:
    env.reset(options={"episode": _answered(episodes, "clean")})
    _, reward, terminated, _, info = env.step(call("submit_answer", answer=None, status="abstained"))
    assert terminated and reward == 0.0 and info["grade"]["reason"] == "abstained_on_answerable"


def test_noisy_episodes_query_the_patched_ehr(env: EHRGymEnv, episodes: list[Episode], synthetic_ehr: EHR) -> None:
    def plain_delete(e: Episode):  # a delete addressed by ids and text, simple to write as SQL literals
        return next((d for d in Patch.from_json(e.patch_json).edits if d.op == "delete"
                     and all(isinstance(v, int | str) for v in d.where.values())), None)

    episode = next(e for e in episodes if e.variant == "noise" and plain_delete(e) is not None)
    deleted = plain_delete(episode)
    keys = " AND ".join(f"{k} = {v!r}" for k, v in deleted.where.items())
    query = f"SELECT COUNT(*) AS n FROM {deleted.table} WHERE {keys}"
    assert synthetic_ehr.sql(query)["n"][0] >= 1
    env.reset(options={"episode": episode})
    obs, *_ = env.step(call("execute_sql", query=query))
    assert obs["last_result"]["rows"] == [[0]]


def test_bad_actions_are_observations_and_the_step_limit_truncates(env: EHRGymEnv, episodes: list[Episode]) -> None:
    env.reset(options={"episode": episodes[0]})
    obs, *_ = env.step(call("drop_database"))
    assert obs["last_result"]["content"].startswith("ERROR: unknown tool")
    obs, *_ = env.step({"id": "c", "type": "function", "function": {"name": "execute_sql", "arguments": "{oops"}})
    assert "not valid JSON" in obs["last_result"]["content"]
    obs, *_ = env.step(call("execute_sql", query="DROP TABLE patients"))
    assert obs["last_result"]["content"].startswith("ERROR") and not obs["last_result"]["ok"]
    obs, reward, terminated, truncated, info = env.step({"role": "assistant", "content": "I think it is 5."})
    assert obs["messages"][-1]["role"] == "user" and "use a tool" in obs["messages"][-1]["content"]
    assert (reward, terminated, truncated) == (0.0, False, True) and info["grade"]["reason"] == "no_submission"
    assert env.record()["truncated"]


def test_reset_picks_by_key_index_or_seed(env: EHRGymEnv, episodes: list[Episode]) -> None:
    assert env.reset(options={"key": episodes[3].key})[1]["episode_key"] == episodes[3].key
    assert env.reset(options={"index": 5})[1]["episode_key"] == episodes[5].key
    assert env.reset(seed=7)[1] == env.reset(seed=7)[1]


def test_trajectories_round_trip_and_export_for_sft(env: EHRGymEnv, episodes: list[Episode],
                                                    tmp_path: Path) -> None:
    records = []
    for episode in [e for e in episodes if e.expected_status == "answered"][:3]:
        obs, _ = env.reset(options={"episode": episode})
        obs, *_ = env.step(call("execute_sql", query=episode.reference_sql))
        r = obs["last_result"]
        value = r["rows"][0][r["columns"].index(episode.grading.spec.column)] if r["rows"] else None
        env.step(call("submit_answer", 2, answer=value, status="answered"))
        records.append(env.record())
    path = tmp_path / "trajectories.jsonl"
    assert write_jsonl(records, path) == 3 and read_jsonl(path) == json.loads(json.dumps(records, default=str))
    sft = to_sft(records)
    assert sft and all(row["messages"][-1]["role"] == "assistant" for row in sft)
    assert all(isinstance(c["function"]["arguments"], dict) for row in sft for m in row["messages"]
               for c in (m["tool_calls"] or []))
    target = export_sft(path, tmp_path / "sft")
    loaded = datasets.load_dataset("json", data_files=str(target), split="train")
    assert loaded.num_rows == len(sft) and loaded[0]["messages"][0]["role"] == "system"


def test_python_sees_the_episode_and_abuse_does_not_stop_the_env(env: EHRGymEnv, episodes: list[Episode],
                                                                  hub_workspace: Path) -> None:
    episode = next(e for e in episodes if e.variant == "noise")
    env.reset(options={"episode": episode})
    gold = hub_workspace / "pairs" / "pairs.parquet"
    for code in (f"open({str(gold)!r}, 'rb').read(10)", f"pl.read_parquet({str(gold)!r})",
                 "import os; os.environ.get('HF_TOKEN') or 1/0"):
        obs, *_ = env.step(call("execute_python", code=code))
        assert obs["last_result"]["content"].startswith("ERROR"), (code, obs["last_result"]["content"])
    obs, *_ = env.step(call("execute_python", code='ehr["patients"].select(pl.len()).collect()'))
    assert obs["last_result"]["ok"] and obs["last_result"]["rows"][0][0] > 0
    env.reset(options={"episode": episodes[0]})
    obs, *_ = env.step(call("execute_python", code="sorted(ehr.tables)[:3]"))
    assert obs["last_result"]["ok"], obs["last_result"]["content"]
