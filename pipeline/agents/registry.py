"""Agents by name: `make_agent("oracle")`, for the CLI and the evaluation runner."""

from __future__ import annotations

from typing import Any

from pipeline.agents.abstain import AbstainAgent
from pipeline.agents.base import Agent
from pipeline.agents.heuristic import HeuristicAgent
from pipeline.agents.naive import NaiveAgent
from pipeline.agents.openai_agent import OpenAIAgent
from pipeline.agents.oracle import OracleAgent

AGENTS: dict[str, type[Agent]] = {
    "oracle": OracleAgent,
    "naive": NaiveAgent,
    "abstain": AbstainAgent,
    "heuristic": HeuristicAgent,
    "openai": OpenAIAgent,
}


def make_agent(name: str, **kwargs: Any) -> Agent:
    """A new agent of the registered `name`, built with `kwargs`."""
    try:
        cls = AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r}; valid names: {', '.join(sorted(AGENTS))}") from None
    return cls(**kwargs)
