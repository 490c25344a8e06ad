"""The shared shape of every stage's command line: Hydra overrides in, one summary line out.

`python -m pipeline.<stage> [--no-progress] [key=value ...]`; a known failure (bad config, bad
input) is one `error:` line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from omegaconf import DictConfig

from pipeline import config


def run_stage(doc: str | None, argv: list[str] | None, run: Callable[[DictConfig, bool], str],
              errors: tuple[type[Exception], ...] = ()) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(doc)
        return 0
    progress = "--no-progress" not in args
    overrides = [a for a in args if a != "--no-progress"]
    try:
        summary = run(config.load(overrides), progress)
    except (config.ConfigError, *errors) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(summary)
    return 0
