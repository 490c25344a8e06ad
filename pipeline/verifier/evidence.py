"""Did the agent look before it abstained? Tool calls from a chat transcript, and the evidence rule.

An abstention earns credit only when the trajectory shows at least one successful read of the
item's evidence table for the entity the question names. Without this, "always abstain" would be a
free policy on unanswerable items. The rule is deterministic and syntactic: SQL is parsed with
sqlglot (tables anywhere in the query, CTE names excluded; integer literals, or digit-only string
literals, for the ids); Python code is searched for the table name and the id as whole words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

DIALECT = "duckdb"
READ_TOOLS = ("execute_sql", "execute_python")
MAX_CODE = 50_000  # longer code is not inspected (and does not count as evidence)


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an agent: its name, its arguments, and whether it ran without error."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    ok: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "ok": self.ok}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ToolCall:
        args = d.get("arguments")
        return cls(str(d.get("name", "")), dict(args) if isinstance(args, Mapping) else {}, d.get("ok") is True)


def _content_text(content: Any) -> str:
    """A tool message's content as text (a string, or OpenAI content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
    return "" if content is None else str(content)


def _arguments(raw: Any) -> dict[str, Any] | None:
    """Arguments as a dict, or None when they are malformed."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def tool_calls_from_messages(messages: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
    """The tool calls of an OpenAI-format transcript, in order. A call is ok iff a later tool message answers
    its id and that content does not start with "ERROR"; malformed argument JSON gives arguments {} and ok False."""
    calls: list[tuple[str, dict[str, Any] | None]] = []
    waiting: dict[str, list[int]] = {}  # call id -> indices of calls still without a result
    results: dict[int, str] = {}
    for message in messages if isinstance(messages, Iterable) else ():
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role == "assistant":
            tool_calls = message.get("tool_calls")
            for tc in tool_calls if isinstance(tool_calls, list) else ():
                if not isinstance(tc, Mapping):
                    continue
                fn = tc.get("function")
                fn = fn if isinstance(fn, Mapping) else {}
                calls.append((str(fn.get("name") or ""), _arguments(fn.get("arguments"))))
                call_id = tc.get("id")
                if isinstance(call_id, str | int):
                    waiting.setdefault(str(call_id), []).append(len(calls) - 1)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            pending = waiting.get(str(call_id)) if isinstance(call_id, str | int) else None
            if pending:
                results[pending.pop(0)] = _content_text(message.get("content"))
    return [ToolCall(name, args or {}, args is not None and i in results
                     and not results[i].lstrip().startswith("ERROR"))
            for i, (name, args) in enumerate(calls)]


def as_tool_calls(trajectory: Any) -> list[ToolCall]:
    """ToolCalls, ToolCall dicts or chat messages (mixed freely) -> ToolCalls; anything else is ignored."""
    if not isinstance(trajectory, Iterable) or isinstance(trajectory, str | bytes | Mapping):
        return []
    calls: list[ToolCall] = []
    messages: list[Mapping[str, Any]] = []
    for item in trajectory:
        if isinstance(item, ToolCall):
            calls.append(item)
        elif isinstance(item, Mapping) and "role" not in item and "name" in item and "ok" in item:
            calls.append(ToolCall.from_dict(item))
        elif isinstance(item, Mapping):
            messages.append(item)
    return calls + tool_calls_from_messages(messages)


# -- the evidence rule

@dataclass(frozen=True)
class _Reads:
    tables: frozenset[str]
    ids: frozenset[int]


def _sql_reads(query: str) -> _Reads | None:
    """Base tables (casefolded) and integer-like literals of a query; None when it does not parse."""
    try:
        statements = [s for s in sqlglot.parse(query, read=DIALECT) if s is not None]
    except Exception:  # sqlglot raises several error types on arbitrary text; any of them means "not evidence"
        return None
    tables: set[str] = set()
    ids: set[int] = set()
    for tree in statements:
        ctes = {c.alias_or_name.casefold() for c in tree.find_all(exp.CTE)}
        tables |= {t.name.casefold() for t in tree.find_all(exp.Table) if t.name} - ctes
        for lit in tree.find_all(exp.Literal):
            text = str(lit.this).strip()
            if text.isascii() and text.isdigit() and len(text) < 30:
                ids.add(int(text))
    return _Reads(frozenset(tables), frozenset(ids))


def _word(term: str, text: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(term)}(?![\w])", text, flags=re.IGNORECASE) is not None


def reads_evidence(call: ToolCall, tables: Sequence[str], entity_ids: Sequence[int]) -> bool:
    """One successful SQL/Python call that reads an evidence table (any table if none are named) and names
    one of the entity ids (when there are any)."""
    if not call.ok or call.name not in READ_TOOLS or not isinstance(call.arguments, Mapping):
        return False
    wanted = {t.casefold() for t in tables}
    if call.name == "execute_sql":
        query = call.arguments.get("query", call.arguments.get("sql"))
        if not isinstance(query, str) or len(query) > MAX_CODE:
            return False
        reads = _sql_reads(query)
        if reads is None:
            return False
        return (not wanted or bool(wanted & reads.tables)) and (not entity_ids or bool(reads.ids & set(entity_ids)))
    code = call.arguments.get("code")
    if not isinstance(code, str) or len(code) > MAX_CODE:
        return False
    return ((not wanted or any(_word(t, code) for t in wanted))
            and (not entity_ids or any(_word(str(i), code) for i in entity_ids)))


def has_evidence(calls: Iterable[ToolCall], tables: Sequence[str], entity_ids: Sequence[int]) -> bool:
    return any(reads_evidence(c, tables, entity_ids) for c in calls)
