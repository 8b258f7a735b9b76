"""The run's provenance: :class:`ProvenanceHooks` keeps the run manifest (``runs.provenance.RunManifest``: code,
packages, seeds, checkpoints, judges, hardware, command, MLflow run) of every ``kedro run``, tracking on or off.

It begins the manifest before the first node (``start_manifest``), lets the other hooks add to it (the MLflow hook
writes its run id and URI), then saves it as the ``run_manifest`` dataset, and saves it again whenever a checkpoint
is read or written (its path and content hash, :class:`CheckpointRecord`) or a table of verdicts brings a judge
spec it did not hold, and once more after the last node, so the report node reads it whole. Parquet tables saved
by a dataset of the ``tracking.artifact_layers`` (the results tables) carry the manifest in their file metadata
(``provenance.stamp_parquet``), written before the MLflow hook logs the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.framework.hooks import hook_impl

from rmsweb_kedro.runs.hooks.catalog import (
    MANIFEST_DATASET,
    TrackingParams,
    catalog_dataset,
    dataset_layer,
    local_path,
)
from rmsweb_kedro.runs.provenance import (
    RunManifest,
    checkpoint_record,
    mask_secrets,
    stamp_parquet,
    start_manifest,
)


class ProvenanceHooks:
    """See the module docstring. ``checkpoint_types``: the dataset classes whose saved or loaded directories are
    checkpoints to record (``settings.py`` passes ``datasets.checkpoint.CheckpointDataset``: the ``runs`` wing
    imports no dataset). :attr:`manifest` is the run's manifest once ``before_pipeline_run`` has begun it. One
    instance serves one ``KedroSession`` at a time."""

    def __init__(self, checkpoint_types: tuple[type, ...] = ()) -> None:
        self.checkpoint_types = checkpoint_types
        self.manifest: RunManifest | None = None
        self._config = TrackingParams()
        self._catalog: Any = None
        self._project_path = Path.cwd()
        self._env: str | None = None
        self._parameters: dict[str, Any] = {}

    # ------------------------------------------------------------------ Kedro's lifecycle

    @hook_impl
    def after_context_created(self, context) -> None:
        self._project_path, self._env = Path(context.project_path), context.env
        self._parameters = context.params
        self._config = TrackingParams.model_validate(self._parameters.get("tracking") or {})

    @hook_impl
    def after_catalog_created(self, catalog) -> None:
        self._catalog = catalog

    @hook_impl(wrapper=True)
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline):
        """Begins the manifest before every other hook's ``before_pipeline_run`` and saves it after them all (the
        MLflow hook has written its run into it by then)."""
        pipelines = run_params.get("pipeline_names") or [run_params.get("pipeline_name") or "__default__"]
        self.manifest = start_manifest(
            self._project_path,
            self._parameters,
            _command(run_params, pipelines),
            list(pipelines),
            self._env,
            read_parameters=pipeline.inputs(),
        )
        result = yield
        self._save()
        return result

    @hook_impl
    def after_dataset_loaded(self, dataset_name: str) -> None:
        self._record_checkpoint(dataset_name, "loaded")

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any) -> None:
        self._record_checkpoint(dataset_name, "saved")
        self._record_judges(data)
        dataset = catalog_dataset(self._catalog, dataset_name)
        reporting = dataset is not None and dataset_layer(dataset) in self._config.artifact_layers
        path = local_path(dataset) if reporting else None
        if path is not None and path.suffix == ".parquet" and path.is_file() and self.manifest is not None:
            # The results table carries the manifest of the run that made it.
            stamp_parquet(path, self.manifest)

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._save()

    # ------------------------------------------------------------------ helpers

    def _save(self) -> None:
        if self.manifest is not None and catalog_dataset(self._catalog, MANIFEST_DATASET) is not None:
            self._catalog.save(MANIFEST_DATASET, self.manifest.model_dump(mode="json"))

    def _record_checkpoint(self, name: str, role: str) -> None:
        dataset = catalog_dataset(self._catalog, name)
        if self.manifest is None or not isinstance(dataset, self.checkpoint_types):
            return
        path = local_path(dataset)
        known = self.manifest.checkpoints.get(name)
        if path is None or (known is not None and known.path == str(path)):
            return
        self.manifest.checkpoints[name] = checkpoint_record(path, role)
        self._save()

    def _record_judges(self, data: Any) -> None:
        """The distinct judge specs of a saved table of verdicts (episodes, the collection log): its ``judged_by``
        column (``schema.JudgedBy`` as JSON), else its ``judge`` names."""
        import polars as pl

        if self.manifest is None or not isinstance(data, pl.DataFrame):
            return
        # A verdict table has judge_reason beside judge (a task table's judge column is the task's judge config).
        verdicts = "judged_by" in data.columns or {"judge", "judge_reason"} <= set(data.columns)
        column = "judged_by" if "judged_by" in data.columns else "judge"
        if not verdicts or data.schema[column] != pl.String:
            return
        found = {j for j in data[column].drop_nulls().unique().to_list() if j} - set(self.manifest.judges)
        if found:
            self.manifest.judges = sorted({*self.manifest.judges, *found})
            self._save()


def _command(run_params: dict[str, Any], pipelines: list[str]) -> str:
    """The ``kedro run`` command line this run amounts to (runtime parameters masked)."""
    parts = ["kedro run"]
    if list(pipelines) != ["__default__"]:
        parts.append("--pipelines " + ",".join(pipelines))
    if run_params.get("env"):
        parts.append(f"--env {run_params['env']}")
    for option in ("tags", "node_names", "from_nodes", "to_nodes", "from_inputs"):
        if run_params.get(option):
            parts.append(f"--{option.replace('_', '-')} " + ",".join(run_params[option]))
    if run_params.get("runtime_params") or run_params.get("extra_params"):
        parts.append(
            f"--params {mask_secrets(run_params.get('runtime_params') or run_params['extra_params'])}"
        )
    return " ".join(parts)
