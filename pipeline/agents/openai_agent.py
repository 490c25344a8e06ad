"""A model behind any OpenAI-compatible chat-completions server (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM ...).

Spoken over plain HTTP with the standard library, so the gym needs no SDK: POST `{base_url}/chat/completions`
with the env's transcript (`obs["messages"]`) and tool schemas (`obs["tools"]`). The env executes one tool
call per step, so when a reply carries several tool calls they are returned one per `act` (the first with
the assistant's text) and the rest are queued; a reply with text only is returned as an assistant message
(the env answers it with a nudge to use a tool). Rate limits (429), server errors (5xx), connection errors
and timeouts are retried with exponential backoff; anything else, or the last failure, raises `AgentError`
naming the URL and the status. Token usage is summed in `usage` across episodes.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections import deque
from typing import Any

import numpy as np

from pipeline.agents.base import Action, Agent, AgentError, Observation
from pipeline.gym.episodes import Episode

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


class OpenAIAgent(Agent):
    """See the module docstring. `api_key_env` names the environment variable holding the key (none is sent
    when it is unset, as local servers expect); `backoff` is the first retry delay in seconds, doubled after
    every failure (a server's Retry-After, when given and shorter than `max_backoff`, wins)."""

    name = "openai"

    def __init__(self, model: str, base_url: str = "https://api.openai.com/v1", api_key_env: str = "OPENAI_API_KEY",
                 temperature: float = 0.0, max_retries: int = 4, timeout: float = 60, max_tokens: int | None = None,
                 backoff: float = 0.5, max_backoff: float = 30.0, extra_body: dict[str, Any] | None = None):
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_retries = max_retries
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.extra_body = dict(extra_body or {})
        self.usage: dict[str, int] = {"requests": 0, **dict.fromkeys(USAGE_KEYS, 0)}
        self._queue: deque[Action] = deque()

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def reset(self, obs: Observation, info: dict[str, Any], episode: Episode | None,
              rng: np.random.Generator) -> None:
        super().reset(obs, info, episode, rng)
        self._queue.clear()

    def act(self, obs: Observation) -> Action:
        if self._queue:
            return self._queue.popleft()
        message = self.complete(obs["messages"], obs["tools"])
        content = message.get("content")
        calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        if not calls:
            return {"role": "assistant", "content": content if isinstance(content, str) else ""}
        calls = [self._normalise(c, i) for i, c in enumerate(calls)]
        self._queue.extend(calls[1:])
        return {"role": "assistant", "content": content, "tool_calls": [calls[0]]}

    @staticmethod
    def _normalise(call: dict[str, Any], index: int) -> Action:
        """A tool call as the env expects it: an id, type "function", and the function's name and arguments."""
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        return {"id": str(call.get("id") or f"call_{index}"), "type": "function",
                "function": {"name": fn.get("name", ""), "arguments": fn.get("arguments", "{}")}}

    # -- HTTP -------------------------------------------------------------------------------------
    def request_body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "tools": tools, "tool_choice": "auto",
                                "temperature": self.temperature}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return {**body, **self.extra_body}

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """`choices[0].message` of one chat completion, retried on transient failures."""
        data = json.dumps(self.request_body(messages, tools), default=str).encode()
        last, delay = "no attempt", 0.0
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(delay)
            delay = min(self.backoff * 2 ** attempt, self.max_backoff)
            request = urllib.request.Request(self.url, data=data, headers=self._headers(), method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    payload = response.read()
            except urllib.error.HTTPError as err:
                detail = err.read()[:300].decode(errors="replace")
                last = f"HTTP {err.code}: {detail}"
                if err.code not in RETRY_STATUS:
                    raise AgentError(f"{self.url} answered HTTP {err.code} (not retried): {detail}") from err
                delay = self._retry_after(err.headers.get("Retry-After"), delay)
                continue
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                last = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
                continue
            return self._message(payload)
        raise AgentError(f"{self.url} failed after {self.max_retries + 1} attempts; last error: {last}")

    def _retry_after(self, header: str | None, default: float) -> float:
        try:
            seconds = float(header) if header is not None else default
        except ValueError:
            return default
        return max(0.0, min(seconds, self.max_backoff))

    def _message(self, payload: bytes) -> dict[str, Any]:
        try:
            reply = json.loads(payload)
            message = reply["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise AgentError(f"{self.url} returned no chat completion message ({err!r}): {payload[:300]!r}") from err
        self.usage["requests"] += 1
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        for key in USAGE_KEYS:
            value = usage.get(key)
            if isinstance(value, int):
                self.usage[key] += value
        return message
