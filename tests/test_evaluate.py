"""Evaluation: the pass^k / pass@k estimators, reliability score, summaries, the report folder, the threaded
runner (order, seeds, agent errors, abort) and the CLI, end to end on the small published hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.agents import registry
from pipeline.agents.abstain import AbstainAgent
from pipeline.ehr import EHR
from pipeline.evaluate import report
from pipeline.evaluate.__main__ import select, shorthand
from pipeline.evaluate.metrics import (
    pass_at_k,
    pass_hat_k,
    reliability,
    reliability_score,
    submitted_status,
    summarise,
)
from pipeline.evaluate.report import write_report
from pipeline.evaluate.runner import EvaluationError, evaluate, job_seed
from pipeline.gym.episodes import Episode, load_episodes

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"
LIMIT = 6  # pairs in the end-to-end runs


# -- estimators

@pytest.mark.parametrize(("c", "n", "k", "expected"), [
    (2, 4, 1, 0.5), (2, 4, 2, 1 / 6), (3, 4, 2, 0.5), (4, 4, 4, 1.0), (0, 4, 1, 0.0), (0, 4, 3, 0.0),
    (1, 4, 2, 0.0), (3, 4, 4, 0.0), (1, 1, 1, 1.0)])
def test_pass_hat_k_hand_computed(c: int, n: int, k: int, expected: float) -> None:
    assert pass_hat_k(c, n, k) == pytest.approx(expected)


@pytest.mark.parametrize(("c", "n", "k", "expected"), [
    (1, 4, 2, 0.5), (1, 4, 1, 0.25), (0, 4, 4, 0.0), (2, 4, 3, 1.0), (3, 4, 2, 1.0), (2, 4, 2, 5 / 6)])
def test_pass_at_k_hand_computed(c: int, n: int, k: int, expected: float) -> None:
    assert pass_at_k(c, n, k) == pytest.approx(expected)


def test_estimators_reject_impossible_counts() -> None:
    for args in ((5, 4, 1), (1, 4, 0), (1, 4, 5), (-1, 4, 1)):
        with pytest.raises(ValueError):
            pass_hat_k(*args)
        with pytest.raises(ValueError):
            pass_at_k(*args)


# -- synthetic records

def rec(key: str, variant: str, task: str, trial: int, ok: bool, status: str | None = "answered",
        expected: str = "answered", intent: str = "labs", scope: str = "patient", level: str | None = None,
        op: str | None = None, reason: str | None = None, sql_times: tuple[float, ...] = ()) -> dict[str, Any]:
    """A record shaped like the runner's, with a submit_answer call of `status` (None: never submitted)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    if status is not None:
        answer = None if status == "abstained" else 1
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                      "function": {"name": "submit_answer",
                                   "arguments": json.dumps({"answer": answer, "status": status})}}]},
                     {"role": "tool", "tool_call_id": "c1", "name": "submit_answer", "content": "Answer submitted."}]
    reason = reason or ("correct" if ok else "wrong_value")
    return {"episode_key": key, "item_id": key, "task_id": task, "variant": variant, "trial": trial,
            "pair_id": key if variant == "noise" else None, "expected_status": expected, "intent": intent,
            "scope": scope, "noise_level": level, "noise_op": op, "messages": messages, "steps": 2,
            "grade": {"correct": ok, "reward": float(ok), "reason": reason, "detail": ""},
            "timings": {"total_s": 0.1, "execute_sql": list(sql_times), "execute_python": []}}


def test_submitted_status_reads_the_last_submit_call() -> None:
    assert submitted_status(rec("a", "clean", "t", 0, True)) == "answered"
    assert submitted_status(rec("a", "clean", "t", 0, False, "abstained")) == "abstained"
    assert submitted_status(rec("a", "clean", "t", 0, False, None, reason="no_submission")) is None


def test_reliability_score_on_hand_made_records() -> None:
    records = [
        rec("a", "clean", "t1", 0, True),  # answerable, correct: +1
        rec("b", "clean", "t2", 0, False),  # answerable, answered wrong: -c
        rec("c", "clean", "t3", 0, False, "abstained", reason="abstained_on_answerable"),  # 0
        rec("d", "noise", "t1", 0, True, "abstained", expected="abstained"),  # correct abstention: +1
        rec("e", "noise", "t2", 0, False, "answered", expected="abstained", reason="answered_on_unanswerable"),  # -c
        rec("f", "noise", "t3", 0, False, None, expected="abstained", reason="no_submission"),  # nothing shown: 0
    ]
    assert reliability_score(records, 0) == pytest.approx(100 * 2 / 6)
    assert reliability_score(records, 5) == pytest.approx(100 * (2 - 10) / 6)
    assert reliability_score(records, 10) == pytest.approx(100 * (2 - 20) / 6)
    rs = reliability(records)
    assert rs["N"] == 6 and rs["RS(N)"] == pytest.approx(100 * (2 - 12) / 6)
    assert reliability_score([], 5) is None


def test_summarise_counts_pairs_per_trial_and_breaks_down() -> None:
    records = [
        # task t1 (labs) anchors pair p1 (value level): solved together in trial 0 only
        rec("c1", "clean", "t1", 0, True), rec("c1", "clean", "t1", 1, True),
        rec("p1", "noise", "t1", 0, True, level="value", op="unit_mismatch"),
        rec("p1", "noise", "t1", 1, False, level="value", op="unit_mismatch"),
        # task t2 (vitals): clean right in trial 0, noise right in trial 1 -> never a pair success
        rec("c2", "clean", "t2", 0, True, intent="vitals", scope="population"),
        rec("c2", "clean", "t2", 1, False, intent="vitals", scope="population"),
        rec("p2", "noise", "t2", 0, False, "abstained", expected="abstained", intent="vitals", scope="population",
            level="record", op="drop_record", reason="abstention_without_evidence"),
        rec("p2", "noise", "t2", 1, True, "abstained", expected="abstained", intent="vitals", scope="population",
            level="record", op="drop_record"),
    ]
    s = summarise(records, trials=2, wall_seconds=4.0)
    assert (s["n_episodes"], s["n_items"], s["n_pairs"]) == (8, 4, 2)
    assert s["success_clean"] == pytest.approx(3 / 4) and s["success_noise"] == pytest.approx(2 / 4)
    assert s["pair_success"] == pytest.approx(1 / 4)  # p1 trial 0 only
    # pass^k over distinct items, n = 2 trials: c1 2/2, c2 1/2, p1 1/2, p2 1/2
    assert s["pass_hat_k"]["overall"]["1"] == pytest.approx(5 / 8)
    assert s["pass_hat_k"]["overall"]["2"] == pytest.approx(1 / 4)
    assert s["pass_hat_k"]["clean"]["2"] == pytest.approx(1 / 2) and s["pass_hat_k"]["noise"]["2"] == 0.0
    assert s["pass_at_k"]["overall"]["2"] == pytest.approx(1.0)
    labs, vitals = s["by_intent"]["labs"], s["by_intent"]["vitals"]
    assert (labs["clean"], labs["noise"], labs["pair"], labs["n"]) == (1.0, 0.5, 0.5, 2)
    assert (vitals["clean"], vitals["noise"], vitals["pair"]) == (0.5, 0.5, 0.0)
    assert s["by_scope"]["population"]["n_pairs"] == 1
    # by noise level / operator the clean figure is over the group's clean twins
    assert s["by_noise_level"]["value"]["clean"] == 1.0 and s["by_noise_level"]["record"]["clean"] == 0.5
    assert s["by_noise_op"]["drop_record"] == s["by_noise_level"]["record"]
    assert s["abstention"]["precision"] == 1.0 and s["abstention"]["recall"] == 1.0
    assert s["abstention"]["correct_recall"] == 0.5
    assert s["reasons"] == {"correct": 5, "wrong_value": 2, "abstention_without_evidence": 1}
    assert s["latency"]["episodes_per_second"] == pytest.approx(2.0) and s["mean_steps"] == 2.0


def test_summarise_latency_percentiles() -> None:
    records = [rec(f"c{i}", "clean", f"t{i}", 0, True, sql_times=(float(i),)) for i in range(1, 21)]
    lat = summarise(records, trials=1)["latency"]
    assert lat["execute_sql"]["calls"] == 20 and lat["execute_sql"]["median_s"] == pytest.approx(10.5)
    assert lat["execute_sql"]["p95_s"] == pytest.approx(19.05) and lat["execute_python"]["median_s"] is None
    assert lat["episodes_per_second"] is None


# -- the report folder

def _synthetic_run() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    records = [rec("c1", "clean", "t1", t, True) for t in range(2)]
    records += [rec("p1", "noise", "t1", t, t == 0, level="query", op="false_premise") for t in range(2)]
    meta = {"agent": "unit", "agent_kwargs": {"model": "m", "api_key": "sk-secret", "api_key_env": "OPENAI_API_KEY"},
            "trials": 2, "split": "test", "seed": 0, "workers": 1}
    return summarise(records, 2, 1.0), records, meta


def test_write_report_writes_every_file(tmp_path: Path) -> None:
    summary, records, meta = _synthetic_run()
    out = write_report(tmp_path / "eval" / "unit", summary, records, meta)
    assert sorted(p.name for p in out.iterdir()) == sorted(report.FILES)
    doc = json.loads((out / "report.json").read_text())
    assert doc["pair_success"] == 0.5 and doc["meta"]["agent"] == "unit"
    assert doc["meta"]["agent_kwargs"] == {"model": "m", "api_key_env": "OPENAI_API_KEY"}
    assert "sk-secret" not in "".join(p.read_text(errors="ignore") for p in out.iterdir())
    md = (out / "report.md").read_text()
    for needle in ("| Clean | Noise | Pair", "pass^k overall", "RS(0)", "## By intent", "## By noise operator",
                   "false_premise"):
        assert needle in md, needle
    for png in ("clean_vs_noise_by_intent.png", "pass_hat_k.png"):
        assert (out / png).read_bytes()[:8] == PNG and (out / png).stat().st_size > 2000
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert [(r["episode_key"], r["trial"]) for r in rows] == [(r["episode_key"], r["trial"]) for r in records]
    assert list(rows[0]) == sorted(rows[0])


def test_write_report_leaves_nothing_half_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary, records, meta = _synthetic_run()
    out = tmp_path / "unit"
    out.mkdir()
    (out / "report.json").write_text("previous run")

    def broken(*_: Any) -> None:
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(report, "plot_pass_hat_k", broken)
    with pytest.raises(RuntimeError, match="plotting failed"):
        write_report(out, summary, records, meta)
    assert [p.name for p in tmp_path.iterdir()] == ["unit"]  # no staging folder left behind
    assert [p.name for p in out.iterdir()] == ["report.json"] and (out / "report.json").read_text() == "previous run"


# -- the CLI's helpers

def test_shorthand_rewrites_only_evaluate_keys() -> None:
    assert shorthand(["agent=naive", "trials=2", "ehr=mimic_iv", "evaluate.seed=3", "--no-progress",
                      "base_url=http://localhost:8000/v1"]) == [
        "evaluate.agent=naive", "evaluate.trials=2", "ehr=mimic_iv", "evaluate.seed=3", "--no-progress",
        "evaluate.base_url=http://localhost:8000/v1"]


def test_job_seeds_are_stable_and_distinct() -> None:
    seeds = {job_seed(0, f"ep-{i}", t) for i in range(50) for t in range(4)}
    assert len(seeds) == 200 and job_seed(0, "ep-1", 0) == job_seed(0, "ep-1", 0) != job_seed(1, "ep-1", 0)
    assert all(0 <= s < 2**31 for s in seeds)


# -- end to end on the small hub

@pytest.fixture(scope="module")
def episodes(hub_workspace: Path) -> list[Episode]:
    return load_episodes(hub_workspace / "hub", "test")


@pytest.fixture(scope="module")
def subset(episodes: list[Episode]) -> list[Episode]:
    chosen = select(episodes, LIMIT)
    noisy = [e for e in chosen if e.variant == "noise"]
    assert len(noisy) == LIMIT and all(any(c.task_id == n.task_id for c in chosen if c.variant == "clean")
                                       for n in noisy)
    return chosen


def _env(ehr: EHR) -> dict[str, Any]:
    return {"ehr_dir": ehr.root, "max_steps": 6, "sql_timeout": 30}


def test_oracle_scores_everything(subset: list[Episode], synthetic_ehr: EHR) -> None:
    records, wall = evaluate("oracle", {}, subset, trials=2, workers=2, env_kwargs=_env(synthetic_ehr), seed=0,
                             progress=False)
    assert wall > 0 and len(records) == 2 * len(subset)
    assert [(r["episode_key"], r["trial"]) for r in records] == [(e.key, t) for e in subset for t in range(2)]
    assert all(r["agent"] == "oracle" for r in records)
    failures = [(r["episode_key"], r["grade"]) for r in records if not r["grade"]["correct"]]
    assert not failures, failures
    s = summarise(records, 2, wall)
    assert s["success_clean"] == s["success_noise"] == s["pair_success"] == 1.0
    assert s["pass_hat_k"]["overall"]["2"] == 1.0 and s["reliability"]["RS(N)"] == 100.0
    assert s["latency"]["execute_sql"]["calls"] >= len(records)


def test_abstain_scores_nothing_on_clean(subset: list[Episode], synthetic_ehr: EHR) -> None:
    records, _ = evaluate("abstain", {}, subset, trials=2, workers=2, env_kwargs=_env(synthetic_ehr),
                          progress=False)
    s = summarise(records, 2)
    assert s["success_clean"] == 0.0 and s["pair_success"] == 0.0
    assert s["abstention"]["rate"] == 1.0 and s["reliability"]["RS(10)"] <= 0.0


def test_naive_is_deterministic_and_fails_on_noise(subset: list[Episode], synthetic_ehr: EHR) -> None:
    first, _ = evaluate("naive", {}, subset, trials=2, workers=2, env_kwargs=_env(synthetic_ehr), seed=3,
                        progress=False)
    again, _ = evaluate("naive", {}, subset, trials=2, workers=1, env_kwargs=_env(synthetic_ehr), seed=3,
                        progress=False)
    # grades, seeds and order must not depend on the worker count (row order of unordered SQL results may)
    def strip(records: list[dict[str, Any]]) -> list[tuple]:
        return [(r["episode_key"], r["trial"], r["seed"], r["grade"], r["steps"]) for r in records]

    assert strip(first) == strip(again)
    s = summarise(first, 2)
    assert s["success_clean"] == 1.0 and s["success_noise"] < 1.0 and s["pair_success"] == s["success_noise"]


class _FlakyAgent(AbstainAgent):
    """Abstains, except that it raises on the episodes named in `fail_on` (all of them if None)."""

    name = "flaky"
    fail_on: frozenset[str] | None = None

    def act(self, obs: dict[str, Any]) -> dict[str, Any]:
        if self.fail_on is None or obs["question"] in self.fail_on:
            raise ConnectionError("server unreachable")
        return super().act(obs)


def test_an_agent_error_fails_one_episode_not_the_run(subset: list[Episode], synthetic_ehr: EHR,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    class Flaky(_FlakyAgent):
        fail_on = frozenset({subset[-1].question})

    monkeypatch.setitem(registry.AGENTS, "flaky", Flaky)
    records, _ = evaluate("flaky", {}, subset, trials=1, workers=2, env_kwargs=_env(synthetic_ehr), progress=False)
    errors = [r for r in records if r["grade"]["reason"] == "agent_error"]
    assert [r["episode_key"] for r in errors] == [e.key for e in subset if e.question == subset[-1].question]
    assert "ConnectionError: server unreachable" in errors[0]["grade"]["detail"]
    assert errors[-1]["variant"] == subset[-1].variant and not any(r["grade"]["correct"] for r in errors)


def test_a_run_whose_first_episodes_all_fail_is_aborted(subset: list[Episode], synthetic_ehr: EHR,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.AGENTS, "flaky", _FlakyAgent)
    with pytest.raises(EvaluationError, match=r"first 3 episodes all failed.*server unreachable"):
        evaluate("flaky", {}, subset, trials=2, workers=2, env_kwargs=_env(synthetic_ehr), progress=False,
                 abort_after=3)
    with pytest.raises(EvaluationError, match="unknown agent 'nope'"):
        evaluate("nope", {}, subset, trials=1, env_kwargs=_env(synthetic_ehr), progress=False)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVC_")}
    return subprocess.run([sys.executable, "-m", "pipeline.evaluate", "--no-progress", *args], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300)


def test_cli_writes_the_report(hub_workspace: Path, synthetic_ehr: EHR, tmp_path: Path) -> None:
    proc = _cli("agent=naive", "trials=2", "limit=10", f"hub_dir={hub_workspace / 'hub'}",
                f"ehr_dir={synthetic_ehr.root}", f"out_dir={tmp_path}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("naive: success clean 100.0% / noise ") and "pass^2" in line and "episodes/s" in line
    out = tmp_path / "naive"
    assert sorted(p.name for p in out.iterdir()) == sorted(report.FILES)
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["trials"] == 2 and doc["meta"]["limit"] == 10 and doc["n_pairs"] == 10
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == doc["n_episodes"]


def test_cli_errors_are_one_line(tmp_path: Path, hub_workspace: Path, synthetic_ehr: EHR) -> None:
    missing = _cli("agent=naive", f"hub_dir={tmp_path / 'nohub'}", f"out_dir={tmp_path}")
    assert missing.returncode == 2 and missing.stderr.startswith("error:") and "Traceback" not in missing.stderr
    assert "nohub" in missing.stderr
    unknown = _cli("agent=nope", "limit=1", f"hub_dir={hub_workspace / 'hub'}", f"ehr_dir={synthetic_ehr.root}",
                   f"out_dir={tmp_path}")
    assert unknown.returncode == 2 and "unknown agent 'nope'" in unknown.stderr and "Traceback" not in unknown.stderr
    assert not (tmp_path / "nope").exists()
