"""`python -m pipeline.publish [hydra overrides]` — write outputs/hub/ (DVC stage `publish`).

Examples:
  python -m pipeline.publish                                    # the dataset repo folder, no upload
  python -m pipeline.publish publish.repo_id=my-org/ehr-robustgym   # ... and upload it (needs $HF_TOKEN)
  python -m pipeline.publish publish.content=sql_only           # questions and SQL only (credentialed data)
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from pipeline.cli import run_stage
from pipeline.publish.guard import CredentialedDataError
from pipeline.publish.hub import PublishError, run_publish_stage


def run(cfg: DictConfig, progress: bool) -> str:
    s = run_publish_stage(cfg)
    sizes = ", ".join(f"{c} " + "/".join(f"{s['configs'][c][split]['num_examples']:,}" for split in ("train", "test"))
                      for c in s["configs"])
    upload = f"uploaded to {s['uploaded']}" if s["uploaded"] else s["upload_note"]
    return f"wrote {cfg.publish.out_dir}/ ({s['content']}; train/test rows: {sizes}); {upload}"


def main(argv: list[str] | None = None) -> int:
    return run_stage(__doc__, argv, run, (PublishError, CredentialedDataError))


if __name__ == "__main__":
    sys.exit(main())
