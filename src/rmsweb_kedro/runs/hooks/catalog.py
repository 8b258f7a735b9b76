"""What the run's hooks share: ``params:tracking`` (:class:`TrackingParams`) and how they read a catalog dataset's
layer and local file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: The catalog name of the run manifest (conf/base/catalog_tracking.yml), written by the provenance hook.
MANIFEST_DATASET = "run_manifest"


class TrackingParams(BaseModel):
    """``params:tracking`` (conf/base/parameters_tracking.yml); server, experiment and parameter-logging options
    are kedro-mlflow's own, in ``conf/base/mlflow.yml``."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    #: Datasets (by name, or the last part of a namespaced name) whose numbers are logged as MLflow metrics.
    metrics: list[str] = Field(
        default_factory=lambda: ["collection_stats", "ingest_report", "sft_data_stats", "sft_metrics",
                                 "mining_report", "salvage_ds_report", "model_comparison", "ablation_comparison"]
    )  # fmt: skip
    #: Kedro-viz layers whose saved files are logged as MLflow artifacts (their Parquet tables stamped first).
    artifact_layers: list[str] = Field(default_factory=lambda: ["reporting"])


def catalog_dataset(catalog: Any, name: str) -> Any:
    """The dataset ``name`` of ``catalog``; None without a catalog or when it holds no such dataset."""
    if catalog is None or name not in catalog:
        return None
    return catalog.get(name)


def dataset_layer(dataset: Any) -> str | None:
    """The dataset's kedro-viz layer (``metadata: {kedro-viz: {layer: ...}}`` in the catalog), if any."""
    return ((getattr(dataset, "metadata", None) or {}).get("kedro-viz") or {}).get("layer")


def local_path(dataset: Any) -> Path | None:
    """The file or directory a file-backed dataset last wrote (its latest version when versioned); None for any
    other dataset. Kedro has no public accessor for a dataset's path: this reads the attributes its file datasets
    share (``_filepath``, ``_protocol``, and ``_get_load_path`` for a versioned one)."""
    from kedro.io.core import AbstractVersionedDataset

    if isinstance(dataset, AbstractVersionedDataset) and getattr(dataset, "_version", None) is not None:
        path = dataset._get_load_path()  # after a save, the version just written
    else:
        path = getattr(dataset, "_filepath", None)
    if path is None or getattr(dataset, "_protocol", "file") not in ("file", None):
        return None
    return Path(str(path))
