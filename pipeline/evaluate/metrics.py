"""Scores over evaluation records: success, pair success, pass^k / pass@k, reliability, abstention, latency.

A record is one (episode, trial) row as written by `pipeline.evaluate.runner` (the env's trajectory row plus
`agent`, `trial`, `seed`). Every figure here is computed from records alone, so a `trajectories.jsonl` from
any run can be re-scored offline.

- pass^k (tau-bench): the chance that k independent trials of an item are *all* correct, estimated without
  bias from c correct out of n trials as C(c,k)/C(n,k); it measures consistency and falls with k.
- pass@k (Codex): the chance that *at least one* of k trials is correct, 1 - C(n-c,k)/C(n,k); it rises with k.
- RS(c) (EHRSQL 2024 reliability score): +1 for a correct answer or a correct abstention, 0 for abstaining on
  an answerable question, -c for answering wrongly or answering an unanswerable one. RS(0) rewards coverage,
  RS(N) (N = the number of questions) makes a single wrong answer cancel every correct one.
- Pair success: a noisy item counts only if its clean twin is also solved in the same trial, so an agent that
  abstains on everything (right on unanswerable noise, wrong on the clean twin) gets no pair credit.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

Record = Mapping[str, Any]
PENALTIES = (0, 5, 10)
BREAKDOWNS = ("intent", "scope", "noise_level", "noise_op")
LATENCY_TOOLS = ("execute_sql", "execute_python")


# -- estimators

def pass_hat_k(c: int, n: int, k: int) -> float:
    """tau-bench pass^k: C(c,k)/C(n,k), the unbiased chance that k of the n trials drawn are all correct."""
    _check(c, n, k)
    return 0.0 if c < k else math.comb(c, k) / math.comb(n, k)


def pass_at_k(c: int, n: int, k: int) -> float:
    """Codex pass@k: 1 - C(n-c,k)/C(n,k), the unbiased chance that at least one of k trials drawn is correct."""
    _check(c, n, k)
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _check(c: int, n: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got c={c}, n={n}, k={k}")


def dataset_pass(counts: Iterable[tuple[int, int]], k: int,
                 estimator: Callable[[int, int, int], float]) -> float | None:
    """Mean of `estimator(c, n, k)` over items given as (correct, trials); None without items with n >= k."""
    values = [estimator(c, n, k) for c, n in counts if n >= k]
    return sum(values) / len(values) if values else None


# -- reading a record

def correct(record: Record) -> bool:
    return bool((record.get("grade") or {}).get("correct"))


def submitted_status(record: Record) -> str | None:
    """"answered" / "abstained" as the agent submitted it, or None if it never submitted (timeout, error).

    Read from the last submit_answer call in the transcript, because the grade alone cannot tell a wrong
    answer from, e.g., an abstention with an unparseable answer attached."""
    for message in reversed(record.get("messages") or []):
        if message.get("role") != "assistant":
            continue
        for call in reversed(message.get("tool_calls") or []):
            fn = call.get("function") or {}
            if fn.get("name") != "submit_answer":
                continue
            raw = fn.get("arguments")
            try:
                args = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
            except (TypeError, ValueError):
                return None
            status = args.get("status", "answered") if isinstance(args, dict) else None
            if not isinstance(status, str) and status is not None:
                return None
            text = (status or "answered").strip().casefold()
            return "abstained" if text.startswith("abst") else "answered" if text.startswith("answer") else None
    return None


def _mean(values: Sequence[float | bool]) -> float | None:
    return sum(values) / len(values) if values else None


# -- reliability and abstention

def rs_points(record: Record, penalty: float) -> float:
    """One record's contribution to RS(penalty): +1 correct, 0 abstained or no submission, -penalty answered wrong.

    A missing submission (step limit, agent error) shows the user nothing, so it scores like an abstention on
    answerable items, and earns nothing on unanswerable ones (only a graded-correct abstention does)."""
    if correct(record):
        return 1.0
    status = submitted_status(record)
    return -float(penalty) if status == "answered" else 0.0


def reliability_score(records: Sequence[Record], penalty: float) -> float | None:
    """EHRSQL-2024 RS(penalty): mean of `rs_points` x 100 (None without records)."""
    return None if not records else 100.0 * sum(rs_points(r, penalty) for r in records) / len(records)


def reliability(records: Sequence[Record]) -> dict[str, Any]:
    """RS(0), RS(5), RS(10) and RS(N), N = distinct episodes (one trial's test set, as in EHRSQL 2024)."""
    n = len({r["episode_key"] for r in records})
    out: dict[str, Any] = {f"RS({c})": reliability_score(records, c) for c in PENALTIES}
    out["RS(N)"] = reliability_score(records, n)
    out["N"] = n
    return out


def abstention(records: Sequence[Record]) -> dict[str, Any]:
    """Precision (of the abstentions made, the share on items that expect one) and recall (of the items that
    expect one, the share abstained on); `correct_*` also require the grade (evidence read) to pass."""
    expected = [r for r in records if r.get("expected_status") == "abstained"]
    made = [r for r in records if submitted_status(r) == "abstained"]
    hits = [r for r in made if r.get("expected_status") == "abstained"]
    return {"precision": len(hits) / len(made) if made else None,
            "recall": len(hits) / len(expected) if expected else None,
            "rate": len(made) / len(records) if records else None,
            "correct_recall": (sum(correct(r) for r in expected) / len(expected)) if expected else None,
            "n_abstained": len(made), "n_expected": len(expected)}


# -- pairs

def pair_outcomes(records: Sequence[Record]) -> list[tuple[Record, Record]]:
    """(noisy record, clean twin's record of the same trial) for every noisy record whose twin was run."""
    clean = {(r["task_id"], r.get("trial", 0)): r for r in records if r.get("variant") == "clean"}
    out = []
    for r in records:
        if r.get("variant") == "noise":
            twin = clean.get((r["task_id"], r.get("trial", 0)))
            if twin is not None:
                out.append((r, twin))
    return out


def _group(records: Sequence[Record], pairs: Sequence[tuple[Record, Record]], key: str) -> dict[str, dict[str, Any]]:
    """Clean / noise / pair success per value of `key`. Intent and scope are properties of every item; noise
    level and operator only of pairs, so there the clean figure is over the group's clean twins (per trial)."""
    per_pair = key in ("noise_level", "noise_op")
    groups: dict[str, dict[str, list]] = defaultdict(lambda: {"clean": [], "noise": [], "pairs": []})
    for r in records:
        if r.get("variant") == "noise" or not per_pair:
            groups[str(r.get(key))][str(r.get("variant"))].append(r)
    for noisy, twin in pairs:
        g = groups[str(noisy.get(key))]
        g["pairs"].append((noisy, twin))
        if per_pair:
            g["clean"].append(twin)
    out = {}
    for value in sorted(groups):
        g = groups[value]
        clean_rate, noise_rate = _mean([correct(r) for r in g["clean"]]), _mean([correct(r) for r in g["noise"]])
        n_clean = len({r["episode_key"] for r in g["clean"]})
        n_noise = len({r["episode_key"] for r in g["noise"]})
        out[value] = {
            "clean": clean_rate, "noise": noise_rate,
            "pair": _mean([correct(a) and correct(b) for a, b in g["pairs"]]),
            "drop": None if clean_rate is None or noise_rate is None else clean_rate - noise_rate,
            "n": n_clean + n_noise, "n_clean": n_clean, "n_noise": n_noise,
            "n_pairs": len({a["episode_key"] for a, _ in g["pairs"]}),
        }
    return out


# -- latency

def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency(records: Sequence[Record], wall_seconds: float | None = None) -> dict[str, Any]:
    """Median / p95 seconds per tool call and per episode, and episodes (x trials) per wall-clock second."""
    out: dict[str, Any] = {}
    for tool in LATENCY_TOOLS:
        times = [float(t) for r in records for t in (r.get("timings") or {}).get(tool, [])]
        out[tool] = {"calls": len(times), "median_s": _quantile(times, 0.5), "p95_s": _quantile(times, 0.95)}
    totals = [float((r.get("timings") or {}).get("total_s", 0.0)) for r in records]
    out["episode"] = {"median_s": _quantile(totals, 0.5), "p95_s": _quantile(totals, 0.95)}
    out["wall_seconds"] = wall_seconds
    out["episodes_per_second"] = (len(records) / wall_seconds) if wall_seconds else None
    return out


# -- everything

def summarise(records: Sequence[Record], trials: int, wall_seconds: float | None = None) -> dict[str, Any]:
    """Every headline figure of a run (see the module docstring); rates are fractions in [0, 1] or None."""
    by_variant = {v: [r for r in records if r.get("variant") == v] for v in ("clean", "noise")}
    pairs = pair_outcomes(records)
    tally: dict[str, list[int]] = {}
    order: list[str] = []
    variant_of: dict[str, str] = {}
    for r in records:
        key = r["episode_key"]
        if key not in tally:
            tally[key], variant_of[key] = [0, 0], str(r.get("variant"))
            order.append(key)
        tally[key][0] += correct(r)
        tally[key][1] += 1

    def counts(variant: str | None) -> list[tuple[int, int]]:
        return [(tally[k][0], tally[k][1]) for k in order if variant is None or variant_of[k] == variant]

    ks = list(range(1, max(1, trials) + 1))
    pass_hat = {name: {str(k): dataset_pass(counts(v), k, pass_hat_k) for k in ks}
                for name, v in (("overall", None), ("clean", "clean"), ("noise", "noise"))}
    pass_at = {name: {str(k): dataset_pass(counts(v), k, pass_at_k) for k in ks}
               for name, v in (("overall", None), ("clean", "clean"), ("noise", "noise"))}
    reasons = Counter(str((r.get("grade") or {}).get("reason")) for r in records)
    return {
        "trials": trials,
        "n_episodes": len(records),
        "n_items": len(order),
        "n_clean_items": len(counts("clean")), "n_noise_items": len(counts("noise")),
        "n_pairs": len({a["episode_key"] for a, _ in pairs}),
        "success": _mean([correct(r) for r in records]),
        "success_clean": _mean([correct(r) for r in by_variant["clean"]]),
        "success_noise": _mean([correct(r) for r in by_variant["noise"]]),
        "pair_success": _mean([correct(a) and correct(b) for a, b in pairs]),
        **{f"by_{key}": _group(records, pairs, key) for key in BREAKDOWNS},
        "pass_hat_k": pass_hat,
        "pass_at_k": pass_at,
        "reliability": reliability(records),
        "abstention": abstention(records),
        "reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "reasons_by_variant": {v: dict(sorted(Counter(str((r.get("grade") or {}).get("reason")) for r in rs).items()))
                               for v, rs in by_variant.items()},
        "latency": latency(records, wall_seconds),
        "mean_steps": _mean([float(r.get("steps", 0)) for r in records]),
        "median_steps": statistics.median([r.get("steps", 0) for r in records]) if records else None,
    }
