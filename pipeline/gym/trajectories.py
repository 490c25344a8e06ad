"""Trajectories: one JSONL row per episode, and their export to a chat dataset for supervised fine-tuning.

A row is what `EHRGymEnv.record()` returns plus who ran it (`agent`, `trial`, `seed`): task_id,
pair_id, variant, the OpenAI-format `messages` with tool calls, the `tools`, `reward`, `grade` and
`timings`. The SFT export keeps successful episodes only and shapes them for TRL's `SFTTrainer`
(conversational language modelling with a `tools` column): every message has the same keys, tool
call arguments are objects (what chat templates render), and the conversation ends with the
assistant's `submit_answer` call.

    python -m pipeline.gym.trajectories outputs/eval/oracle/trajectories.jsonl --out outputs/sft/oracle
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def write_jsonl(records: Iterable[dict[str, Any]], path: Path) -> int:
    """Write records atomically (temporary file, then rename); return how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    n = 0
    try:
        with tmp.open("w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str) + "\n")
                n += 1
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as lines:
        for i, line in enumerate(lines, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{i}: not a JSON line ({err.msg}); is this a trajectories file?") from err
    return rows


def _message(msg: dict[str, Any]) -> dict[str, Any]:
    out = {k: msg.get(k) for k in MESSAGE_KEYS}
    if out["tool_calls"]:
        out["tool_calls"] = [{"id": c.get("id"), "type": "function", "function": {
            "name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))}}
            for c in out["tool_calls"]]
    if out["content"] is None:
        out["content"] = ""
    return out


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError):
        return {"raw": str(raw)}
    return value if isinstance(value, dict) else {"value": value}


def to_sft(records: Iterable[dict[str, Any]], only_successful: bool = True) -> list[dict[str, Any]]:
    """Rows `{"messages", "tools", "episode_key", "variant", "reward"}` for TRL's SFTTrainer."""
    rows = []
    for rec in records:
        if only_successful and not (rec.get("grade") or {}).get("correct"):
            continue
        messages = [_message(m) for m in rec["messages"]]
        while messages and messages[-1]["role"] != "assistant":  # end on the submit call, not its receipt
            messages.pop()
        if not messages:
            continue
        rows.append({"messages": messages, "tools": rec.get("tools", []), "episode_key": rec.get("episode_key"),
                     "variant": rec.get("variant"), "reward": rec.get("reward", 0.0)})
    return rows


def export_sft(trajectories: Path, out_dir: Path, only_successful: bool = True) -> Path:
    """`trajectories.jsonl` -> `<out_dir>/train.jsonl` (load with `load_dataset("json", data_files=...)`)."""
    rows = to_sft(read_jsonl(trajectories), only_successful)
    if not rows:
        raise ValueError(f"{trajectories} holds no {'successful ' if only_successful else ''}trajectories to export")
    target = out_dir / "train.jsonl"
    write_jsonl(rows, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Export trajectories to a chat-format SFT dataset (JSONL).")
    parser.add_argument("trajectories", type=Path, help="a trajectories.jsonl written by `python -m pipeline.evaluate`")
    parser.add_argument("--out", type=Path, default=Path("outputs/sft"), help="output folder (train.jsonl)")
    parser.add_argument("--all", action="store_true", help="keep failed episodes too")
    args = parser.parse_args(argv)
    try:
        target = export_sft(args.trajectories, args.out, only_successful=not args.all)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {target} ({sum(1 for _ in target.open())} conversations)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
