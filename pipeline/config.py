"""Hydra configuration shared by every stage, without `hydra.main`.

`hydra.main` changes the working directory and writes run folders; stages here must write only
their declared outputs, so they compose `conf/` with the compose API instead. Under
`dvc exp run`, DVC has already composed `conf/` plus the `-S` overrides into `params.yaml`, and
that file is the configuration to use.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

PARAMS_FILE = "params.yaml"


class ConfigError(ValueError):
    """A configuration that cannot be composed or is missing a required value."""


def project_root() -> Path:
    """The folder holding `conf/`: the working directory if it has one, else the source checkout."""
    cwd = Path.cwd()
    if (cwd / "conf").is_dir():
        return cwd
    return Path(__file__).resolve().parent.parent


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose `conf/config.yaml` with Hydra override strings (e.g. `ehr=mimic_iv`, `ehr.seed=3`)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    conf_dir = project_root() / "conf"
    try:
        with initialize_config_dir(str(conf_dir), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(f"cannot compose {conf_dir}/config.yaml with overrides {list(overrides)}: "
                          f"{err}") from err
    OmegaConf.resolve(cfg)
    return cfg


def load(overrides: Sequence[str] = ()) -> DictConfig:
    """The configuration a stage runs with (see the module docstring for `dvc exp run`)."""
    params = project_root() / PARAMS_FILE
    if os.environ.get("DVC_EXP_NAME") and params.is_file() and not overrides:
        return OmegaConf.load(params)  # type: ignore[return-value]
    return compose(overrides)


def write_params(path: Path | None = None) -> Path:
    """Write the default composition to params.yaml (what `dvc exp run` without -S would write)."""
    path = path or project_root() / PARAMS_FILE
    path.write_text(OmegaConf.to_yaml(compose()), encoding="utf-8")
    return path


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-params"]:
        print(f"wrote {write_params()}")
    else:
        print(OmegaConf.to_yaml(compose(sys.argv[1:])), end="")
