"""Write an evaluation run to `outputs/eval/<agent>/`: report.json, report.md, two PNG plots, trajectories.jsonl.

The folder is built in a staging directory and renamed into place only when every file is written
(`staged_output`), so a crash never leaves a report that disagrees with its trajectories. Plots use
matplotlib's object API (`Figure`, rendered by Agg) rather than pyplot: no global state, no display needed,
safe from worker threads.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.ehr.storage import staged_output

FILES = ("report.json", "report.md", "clean_vs_noise_by_intent.png", "pass_hat_k.png", "trajectories.jsonl")
SECRET = re.compile(r"(api_?key|token|secret|password|authorization)(?!_env)", re.IGNORECASE)
BREAKDOWN_TITLES = {"intent": "By intent", "scope": "By scope", "noise_level": "By noise level",
                    "noise_op": "By noise operator"}


def redact(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Agent kwargs fit for a report: secret values dropped (the *name* of the key's env variable is kept)."""
    return {k: v for k, v in kwargs.items() if not SECRET.search(str(k))}


def _json_ready(value: Any) -> Any:
    """NaN/inf as null (strict JSON), tuples as lists, everything else unchanged."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


# -- markdown

def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(row) + " |" for row in rows)]


def _breakdown(groups: Mapping[str, Mapping[str, Any]], label: str) -> list[str]:
    rows = [[name, str(g["n_clean"]), str(g["n_noise"]), _pct(g["clean"]), _pct(g["noise"]), _pct(g["pair"]),
             "–" if g["drop"] is None else f"{100 * g['drop']:+.1f} pt"] for name, g in groups.items()]
    return _table([label, "clean items", "noisy items", "Clean", "Noise", "Pair", "Clean − Noise"], rows)


def render_markdown(summary: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The human-readable report: headline table, pass^k / pass@k, reliability, abstention, breakdowns."""
    s, trials = summary, int(summary["trials"])
    ks = [str(k) for k in range(1, trials + 1)]
    lines = [f"# Evaluation: {meta.get('agent')}", ""]
    kwargs = meta.get("agent_kwargs") or {}
    lines += [f"Split `{meta.get('split')}`, {s['n_items']} episodes ({s['n_clean_items']} clean, "
              f"{s['n_noise_items']} noisy; {s['n_pairs']} pairs) x {trials} trials = {s['n_episodes']} runs; "
              f"seed {meta.get('seed')}" + (f"; agent {json.dumps(kwargs, sort_keys=True)}" if kwargs else "") + ".",
              ""]
    lines += ["## Overall", ""]
    lines += _table(["Clean", "Noise", "Pair", "All", f"pass^{trials}", "RS(10)", "mean steps"],
                    [[_pct(s["success_clean"]), _pct(s["success_noise"]), _pct(s["pair_success"]), _pct(s["success"]),
                      _pct(s["pass_hat_k"]["overall"][str(trials)]), _num(s["reliability"]["RS(10)"]),
                      _num(s["mean_steps"])]])
    lines += ["", "Pair: the noisy item and its clean twin both correct in the same trial.", ""]
    lines += ["## Consistency over trials", ""]
    rows = [[f"pass^k {name}", *(_pct(s["pass_hat_k"][name][k]) for k in ks)] for name in ("overall", "clean", "noise")]
    rows += [[f"pass@k {name}", *(_pct(s["pass_at_k"][name][k]) for k in ks)] for name in ("overall", "clean", "noise")]
    lines += _table(["k", *ks], rows)
    lines += ["", "pass^k: all k trials correct (tau-bench); pass@k: at least one of k correct.", ""]
    rel = s["reliability"]
    lines += ["## Reliability (EHRSQL 2024)", ""]
    lines += _table(["RS(0)", "RS(5)", "RS(10)", f"RS(N), N={rel['N']}"],
                    [[_num(rel["RS(0)"]), _num(rel["RS(5)"]), _num(rel["RS(10)"]), _num(rel["RS(N)"])]])
    ab = s["abstention"]
    lines += ["", "RS(c): +1 correct answer or abstention, 0 abstaining on an answerable question, −c wrong answer.",
              "", "## Abstention", ""]
    lines += _table(["precision", "recall", "recall with evidence", "abstention rate", "abstentions (runs)",
                     "expected (runs)"],
                    [[_pct(ab["precision"]), _pct(ab["recall"]), _pct(ab["correct_recall"]), _pct(ab["rate"]),
                      str(ab["n_abstained"]), str(ab["n_expected"])]])
    for key, title in BREAKDOWN_TITLES.items():
        groups = s[f"by_{key}"]
        if key in ("noise_level", "noise_op"):
            groups = {k: v for k, v in groups.items() if k != "None"}
        if groups:
            lines += ["", f"## {title}", "", *_breakdown(groups, key)]
    lines += ["", "## Grade reasons", ""]
    lines += _table(["reason", "runs"], [[k, str(v)] for k, v in s["reasons"].items()])
    lat = s["latency"]
    lines += ["", "## Latency", ""]
    lines += _table(["", "calls", "median s", "p95 s"],
                    [[tool, str(lat[tool]["calls"]), _num(lat[tool]["median_s"], 4), _num(lat[tool]["p95_s"], 4)]
                     for tool in ("execute_sql", "execute_python")]
                    + [["episode", str(s["n_episodes"]), _num(lat["episode"]["median_s"], 3),
                        _num(lat["episode"]["p95_s"], 3)]])
    lines += ["", f"Wall time {_num(lat['wall_seconds'], 1)} s with {meta.get('workers')} workers: "
              f"{_num(lat['episodes_per_second'], 2)} runs/s.", ""]
    return "\n".join(lines)


# -- plots

def _figure(width: float = 7.0, height: float = 4.0) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def plot_by_intent(summary: Mapping[str, Any], path: Path) -> None:
    """Grouped bars: clean vs noisy success per intent (what the noise costs, where)."""
    groups = summary["by_intent"]
    names = list(groups)
    fig = _figure(max(6.0, 1.1 * len(names) + 2), 4.0)
    ax = fig.add_subplot()
    width = 0.38
    xs = list(range(len(names)))
    for offset, variant, colour in ((-width / 2, "clean", "#4C72B0"), (width / 2, "noise", "#DD8452")):
        values = [100 * (groups[n][variant] or 0.0) for n in names]
        bars = ax.bar([x + offset for x in xs], values, width, label=variant, color=colour)
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=1)
    ax.set_xticks(xs, names, rotation=20, ha="right")
    ax.set_ylim(0, 118)  # headroom for the legend above the bars
    ax.set_ylabel("success (%)")
    ax.set_title(f"Clean vs noisy success by intent — {summary.get('agent', '')}".rstrip(" —"))
    ax.legend(frameon=False, ncol=2, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, format="png")


def plot_pass_hat_k(summary: Mapping[str, Any], path: Path) -> None:
    """pass^k against k for all / clean / noisy items: how fast reliability decays with repeated trials."""
    fig = _figure(5.5, 4.0)
    ax = fig.add_subplot()
    for name, style in (("overall", "o-"), ("clean", "s--"), ("noise", "^--")):
        series = summary["pass_hat_k"][name]
        ks = [int(k) for k, v in series.items() if v is not None]
        ax.plot(ks, [100 * series[str(k)] for k in ks], style, label=name)
    ax.set_xlabel("k (trials)")
    ax.set_ylabel("pass^k (%)")
    ax.set_xticks(range(1, int(summary["trials"]) + 1))
    ax.set_ylim(0, 105)
    ax.set_title(f"pass^k — {summary.get('agent', '')}".rstrip(" —"))
    ax.legend(frameon=False)
    ax.grid(alpha=0.3)
    fig.savefig(path, format="png")


# -- the folder

def write_report(out_dir: str | Path, summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                 meta: Mapping[str, Any]) -> Path:
    """Write the report folder (see the module docstring) atomically; returns `out_dir`."""
    out_dir = Path(out_dir)
    meta = dict(meta)
    meta["agent_kwargs"] = redact(meta.get("agent_kwargs") or {})
    plotted = {**summary, "agent": meta.get("agent", "")}
    with staged_output(out_dir) as stage:
        (stage / "report.json").write_text(
            json.dumps(_json_ready({**summary, "meta": meta}), indent=2, sort_keys=True, allow_nan=False)
            + "\n", encoding="utf-8")
        (stage / "report.md").write_text(render_markdown(summary, meta), encoding="utf-8")
        plot_by_intent(plotted, stage / "clean_vs_noise_by_intent.png")
        plot_pass_hat_k(plotted, stage / "pass_hat_k.png")
        with (stage / "trajectories.jsonl").open("w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str) + "\n")
    return out_dir
