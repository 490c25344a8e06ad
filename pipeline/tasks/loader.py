"""Load every template under `templates/` into a registry keyed by id, failing loudly on bad input."""

from __future__ import annotations

from pathlib import Path

import yaml

from pipeline.tasks.template import INTENTS, Template, TemplateError, parse_template

TEMPLATES_DIR = "templates"


def load_file(path: Path) -> list[Template]:
    try:
        blocks = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise TemplateError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(blocks, list):
        raise TemplateError(f"{path}: expected a YAML list of templates, got {type(blocks).__name__}")
    templates = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise TemplateError(f"{path}: item {i + 1} is not a mapping")
        templates.append(parse_template(block, str(path)))
    return templates


def load_templates(directory: Path | str = TEMPLATES_DIR) -> dict[str, Template]:
    """All templates of all `*.yaml` files, in file then block order; duplicate ids are an error."""
    directory = Path(directory)
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise TemplateError(f"{directory}: no template files (*.yaml) found")
    registry: dict[str, Template] = {}
    for path in files:
        for template in load_file(path):
            if template.id in registry:
                raise TemplateError(f"{template.where}: duplicate id, already defined in "
                                    f"{registry[template.id].source_file}")
            if path.stem in INTENTS and template.intent != path.stem:
                raise TemplateError(f"{template.where}: intent {template.intent!r} in {path.name}; keep one "
                                    "file per intent")
            registry[template.id] = template
    return registry
