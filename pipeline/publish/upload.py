"""Uploading `outputs/hub/` to the Hugging Face Hub as a dataset repository.

Only with both a `publish.repo_id` and a token in the environment variable `publish.token_env`
(default HF_TOKEN); otherwise nothing leaves the machine and the stage says why. `HF_ENDPOINT`
points the client at another Hub (a mirror, or a local server in the tests).

    python -m pipeline.publish.upload publish.repo_id=my-org/ehr-robustgym   # upload the built folder
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline.publish.hub import PublishError


class UploadRefused(RuntimeError):
    """Nothing was uploaded because no repo id or no token was configured (not an error)."""


def upload(folder: Path, repo_id: str | None, token_env: str = "HF_TOKEN", private: bool = False) -> str:
    """Create (if needed) the dataset repo `repo_id` and upload `folder`; return the repo URL."""
    if not repo_id:
        raise UploadRefused("not uploading: publish.repo_id is not set (e.g. publish.repo_id=my-org/ehr-robustgym)")
    token = os.environ.get(token_env)
    if not token:
        raise UploadRefused(f"not uploading to {repo_id}: no Hugging Face token in ${token_env}")
    if not (folder / "README.md").is_file():
        raise PublishError(f"{folder} holds no dataset card: run `dvc repro` (the publish stage) first")
    from huggingface_hub import HfApi

    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    api = HfApi(endpoint=endpoint, token=token)
    try:
        url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        api.upload_folder(repo_id=repo_id, repo_type="dataset", folder_path=folder,
                          commit_message="Publish ehr-robustgym Clean-Noise pairs")
    except Exception as err:  # network, auth and server errors all mean "not uploaded": one clear line
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise PublishError(f"upload of {folder} to {endpoint} (dataset {repo_id}) failed: {reason}. Check the "
                           f"network, HF_ENDPOINT and that ${token_env} holds a write token") from err
    return str(url)


def main(argv: list[str] | None = None) -> int:
    from pipeline import config

    try:
        cfg = config.load(list(sys.argv[1:] if argv is None else argv)).publish
        print(f"uploaded {cfg.out_dir}/ to {upload(Path(cfg.out_dir), cfg.repo_id, cfg.token_env, cfg.private)}")
    except UploadRefused as why:
        print(why)
    except (PublishError, config.ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
