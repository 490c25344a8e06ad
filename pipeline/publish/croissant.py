"""Croissant (ML Commons) JSON-LD metadata for the dataset folder: files with checksums, one record set per config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datasets import Features, List, Value

from pipeline.ehr.storage import sha256_file
from pipeline.publish.layout import shard_path

CONTEXT = {
    "@language": "en", "@vocab": "https://schema.org/", "cr": "http://mlcommons.org/croissant/",
    "sc": "https://schema.org/", "dct": "http://purl.org/dc/terms/", "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"}, "field": "cr:field", "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet", "recordSet": "cr:recordSet", "source": "cr:source", "extract": "cr:extract",
    "column": "cr:column", "includes": "cr:includes", "conformsTo": "dct:conformsTo", "md5": "cr:md5",
    "repeated": "cr:repeated",
}
TYPES = {"string": "sc:Text", "bool": "sc:Boolean", "int64": "sc:Integer"}


def _field(config: str, name: str, feature: Any, file_id: str) -> dict[str, Any]:
    repeated = isinstance(feature, List)
    value = feature.feature if repeated else feature
    dtype = TYPES[value.dtype] if isinstance(value, Value) else "sc:Text"
    out = {"@type": "cr:Field", "@id": f"{config}/{name}", "name": name, "dataType": dtype,
           "source": {"fileSet": {"@id": file_id}, "extract": {"column": name}}}
    if repeated:
        out["repeated"] = True
    return out


def document(folder: Path, stats: dict[str, Any], features: dict[str, Features],
             source: dict[str, Any]) -> dict[str, Any]:
    """The croissant.json for a built hub folder (shards must already be written under `folder`)."""
    distribution, record_sets = [], []
    for config in stats["configs"]:
        file_id = f"parquet-{config}"
        distribution.append({"@type": "cr:FileSet", "@id": file_id, "name": file_id, "encodingFormat":
                             "application/x-parquet", "includes": f"data/{config}/*.parquet"})
        for split in stats["configs"][config]:
            path = shard_path(config, split)
            distribution.append({"@type": "cr:FileObject", "@id": path, "name": path, "contentUrl": path,
                                 "encodingFormat": "application/x-parquet",
                                 "sha256": sha256_file(folder / path)})
        record_sets.append({"@type": "cr:RecordSet", "@id": config, "name": config,
                            "field": [_field(config, n, f, file_id) for n, f in features[config].items()]})
    return {
        "@context": CONTEXT, "@type": "sc:Dataset", "conformsTo": "http://mlcommons.org/croissant/1.0",
        "name": "ehr-robustgym-pairs", "description": (
            f"{stats['n_pairs']} Clean-Noise question pairs over a MIMIC-IV-shaped EHR ({source['variant']}) "
            "for evaluating whether clinical agents stay right, or abstain, when the record is wrong."),
        "license": source["license_name"], "citeAs": source["citation"], "url": "https://huggingface.co/datasets",
        "distribution": distribution, "recordSet": record_sets,
    }
