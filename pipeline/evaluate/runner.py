"""Run an agent over episodes x trials on worker threads and collect one record per (episode, trial).

Each worker thread owns one EHRGymEnv and one agent (neither is shared between threads), pulls jobs from a
queue and reports finished records to the main thread, which drives the progress bar and the abort rule.
Results do not depend on scheduling: every job's seed is a hash of (run seed, episode key, trial), the
agent is reset per episode with an RNG from that seed, and records come back sorted by episode order then
trial. Tool calls spend their time in Polars (which releases the GIL) or waiting on an LLM server, so
threads give real parallelism without pickling envs across processes.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from pipeline.gym.env import EHRGymEnv
from pipeline.gym.episodes import Episode

ABORT_AFTER = 5  # if this many first-finished episodes all fail with errors, stop: the agent cannot work at all
ERROR_REASONS = ("agent_error", "env_error")


class EvaluationError(RuntimeError):
    """An evaluation that cannot run or cannot continue (no agent, no env, every episode failing)."""


def job_seed(seed: int, episode_key: str, trial: int) -> int:
    """A 31-bit seed per job, stable across runs, worker counts and Python versions."""
    digest = hashlib.blake2b(f"{seed}|{episode_key}|{trial}".encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def _error_text(err: BaseException) -> str:
    where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    at = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
    return f"{type(err).__name__}: {err}{at}"[:500]


def run_episode(env: EHRGymEnv, agent: Any, episode: Episode, seed: int, trial: int = 0) -> dict[str, Any]:
    """Play one episode to the end; the env's record plus `agent`, `trial`, `seed`.

    An exception raised by the agent (a bug, an unreachable LLM server) or by a tool becomes a failed record
    with grade reason `agent_error` / `env_error`, so one bad episode does not lose a whole run."""
    stage = "env"
    try:
        obs, info = env.reset(seed=seed, options={"episode": episode})
        stage = "agent"
        agent.reset(obs, info, episode if getattr(agent, "privileged", False) else None, np.random.default_rng(seed))
        done = False
        while not done:
            stage = "agent"
            action = agent.act(obs)
            stage = "env"
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        record = env.record()
    except Exception as err:  # any failure is this episode's, reported in its record
        record = env.fail(episode, f"{stage}_error", _error_text(err))
    record.update(agent=getattr(agent, "name", str(agent)), trial=trial, seed=seed)
    return record


class _Abort:
    """The abort rule: if the first `limit` episodes to finish all errored, the run is pointless."""

    def __init__(self, limit: int):
        self.limit = limit
        self.seen = 0
        self.errors: list[str] = []

    def check(self, record: Mapping[str, Any]) -> str | None:
        if self.seen >= self.limit:
            return None
        self.seen += 1
        grade = record.get("grade") or {}
        if grade.get("reason") not in ERROR_REASONS:
            self.seen = self.limit  # one episode ran: the agent works, never abort
            return None
        self.errors.append(str(grade.get("detail")))
        if len(self.errors) < self.limit:
            return None
        return (f"the first {self.limit} episodes all failed with errors, so the run was stopped; the last: "
                f"{self.errors[-1]} (is the model server reachable and the agent configured?)")


def _make(agent_name: str, agent_kwargs: Mapping[str, Any], episodes: list[Episode],
          env_kwargs: Mapping[str, Any]) -> tuple[EHRGymEnv, Any]:
    from pipeline.agents.registry import make_agent

    try:
        agent = make_agent(agent_name, **dict(agent_kwargs))
    except Exception as err:  # unknown name, bad kwargs, missing API key: a configuration error
        raise EvaluationError(f"cannot make agent {agent_name!r}: {err}") from err
    try:
        env = EHRGymEnv(episodes=episodes, **dict(env_kwargs))
    except Exception as err:  # missing or unreadable EHR folder
        raise EvaluationError(f"cannot open the environment: {err}") from err
    return env, agent


def evaluate(agent_name: str, agent_kwargs: Mapping[str, Any] | None, episodes: Sequence[Episode], trials: int,
             workers: int = 2, env_kwargs: Mapping[str, Any] | None = None, seed: int = 0, progress: bool = True,
             abort_after: int = ABORT_AFTER) -> tuple[list[dict[str, Any]], float]:
    """Run every (episode, trial) on `workers` threads; (records sorted by episode order then trial, wall s)."""
    if trials < 1:
        raise EvaluationError(f"trials must be at least 1, got {trials}")
    episodes = list(episodes)
    if not episodes:
        raise EvaluationError("no episodes to evaluate")
    jobs = [(i * trials + t, episode, t) for i, episode in enumerate(episodes) for t in range(trials)]
    n_workers = max(1, min(int(workers), len(jobs)))
    slots: list[tuple[EHRGymEnv, Any]] = []
    try:  # build every env and agent up front, so configuration errors surface before any work starts
        for _ in range(n_workers):
            slots.append(_make(agent_name, agent_kwargs or {}, episodes, env_kwargs or {}))
        return _run(jobs, slots, seed, progress, _Abort(min(abort_after, len(jobs))), agent_name)
    finally:
        for env, _ in slots:
            env.close()


def _run(jobs: list[tuple[int, Episode, int]], slots: list[tuple[EHRGymEnv, Any]], seed: int, progress: bool,
         abort: _Abort, agent_name: str) -> tuple[list[dict[str, Any]], float]:
    todo: queue.Queue[tuple[int, Episode, int]] = queue.Queue()
    for job in jobs:
        todo.put(job)
    done: queue.Queue[tuple[int, dict[str, Any] | BaseException]] = queue.Queue()
    stop = threading.Event()

    def work(env: EHRGymEnv, agent: Any) -> None:
        while not stop.is_set():
            try:
                index, episode, trial = todo.get_nowait()
            except queue.Empty:
                return
            try:
                done.put((index, run_episode(env, agent, episode, job_seed(seed, episode.key, trial), trial)))
            except BaseException as err:  # a bug in this module: hand it to the main thread to re-raise
                done.put((index, err))
                return

    threads = [threading.Thread(target=work, args=slot, name=f"evaluate-{i}", daemon=True)
               for i, slot in enumerate(slots)]
    results: dict[int, dict[str, Any]] = {}
    start = time.perf_counter()
    bar = tqdm(total=len(jobs), desc=f"evaluate {agent_name}", unit="ep", disable=not progress, dynamic_ncols=True)
    try:
        for thread in threads:
            thread.start()
        n_correct = 0
        while len(results) < len(jobs):
            try:
                index, outcome = done.get(timeout=0.5)
            except queue.Empty:
                if not any(t.is_alive() for t in threads) and done.empty():
                    raise EvaluationError(f"workers stopped after {len(results)} of {len(jobs)} episodes") from None
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            results[index] = outcome
            n_correct += bool(outcome["grade"]["correct"])
            bar.update(1)
            bar.set_postfix(success=f"{n_correct / len(results):.3f}", refresh=False)
            message = abort.check(outcome)
            if message:
                raise EvaluationError(message)
    finally:
        stop.set()
        bar.close()
        for thread in threads:
            thread.join()
    wall = time.perf_counter() - start
    return [results[i] for i in sorted(results)], wall
