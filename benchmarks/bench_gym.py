"""Latency of the environment's tools and the naive agent's throughput on the built default outputs.

    dvc repro && python benchmarks/bench_gym.py [--n 200]

Prints median and p95 of `execute_sql` (guarded, in the worker process) next to the same queries
run in-process with `EHR.sql` (the reference; the ratio is the price of the guard, the process
boundary and the timeout), of `execute_python` (a fresh sandboxed process per call), and the
episodes per second of the naive agent over the test split with 1 and 2 worker threads.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from pipeline.ehr import EHR
from pipeline.ehr.patch import Patch
from pipeline.gym.episodes import load_episodes
from pipeline.gym.sandbox import PythonSandbox
from pipeline.gym.sqlexec import SQLExecutor


def stats(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    return f"median {statistics.median(xs) * 1000:8.1f} ms   p95 {p95 * 1000:8.1f} ms   (n={len(xs)})"


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hub", type=Path, default=Path("outputs/hub"))
    parser.add_argument("--ehr", type=Path, default=Path("outputs/ehr"))
    parser.add_argument("--n", type=int, default=200, help="SQL calls per view")
    parser.add_argument("--python-calls", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=400, help="naive episodes per worker setting")
    args = parser.parse_args()

    episodes = load_episodes(args.hub, "test")
    samples = {v: [e for e in episodes if e.scope == "patient" and e.variant == v][: args.n]
               for v in ("clean", "noise")}
    sample = samples["noise"]
    ehr = EHR(args.ehr)
    print(f"EHR {args.ehr} ({ehr.manifest['source']}), {len(episodes)} test episodes")

    with SQLExecutor(args.ehr) as sql:
        sql.execute("SELECT 1 AS x")  # worker warm-up is not a query's latency
        for label, patched in (("clean view", False), ("noisy view", True)):
            got, ref = [], []
            for e in samples["noise" if patched else "clean"]:
                patch = e.patch_json if patched else "[]"
                view = ehr.with_patch(Patch.from_json(patch)) if patched else ehr
                got.append(timed(sql.execute, e.careless_sql, patch))
                ref.append(timed(view.sql, e.careless_sql))
            ratio = statistics.median(got) / statistics.median(ref)
            print(f"execute_sql  {label}: {stats(got)}   in-process EHR.sql {stats(ref)}   ratio {ratio:.2f}")

    with PythonSandbox(args.ehr) as sandbox:
        trivial = [timed(sandbox.run, "1 + 1", "[]") for _ in range(args.python_calls)]
        subject = sample[0].grading.entity_ids[0] if sample[0].grading.entity_ids else 10000032
        code = f'ehr["labevents"].filter(pl.col("subject_id") == {subject}).collect()'
        query = [timed(sandbox.run, code, e.patch_json) for e in sample[: args.python_calls]]
        print(f"execute_python trivial:      {stats(trivial)}")
        print(f"execute_python labs lookup:  {stats(query)}")

    from pipeline.evaluate.runner import evaluate

    for workers in (1, 2):
        start = time.perf_counter()
        records, wall = evaluate("naive", {}, episodes[: args.episodes], trials=1, workers=workers,
                                 env_kwargs={"ehr_dir": args.ehr}, seed=0, progress=False)
        print(f"naive agent, {workers} worker(s): {len(records) / wall:6.1f} episodes/s "
              f"({len(records)} episodes, {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
