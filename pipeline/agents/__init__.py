"""Agents for the gym: the scripted baselines (oracle, naive, abstain, heuristic) and a model behind any
OpenAI-compatible chat-completions server. `make_agent(name, **kwargs)` builds one by name."""

from pipeline.agents.base import Agent, AgentError, ScriptedAgent
from pipeline.agents.registry import AGENTS, make_agent

__all__ = ["AGENTS", "Agent", "AgentError", "ScriptedAgent", "make_agent"]
