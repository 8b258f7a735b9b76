"""Project hooks: experiment tracking (kedro-mlflow) and provenance for every ``kedro run``, and the run's
shutdown on SIGTERM/SIGINT (:class:`ShutdownHooks`).

:class:`TrackingHooks` wraps kedro-mlflow's ``MlflowHook`` (its own auto-registration is disabled in
``settings.py``) so that ``tracking.enabled: false`` (``conf/base/parameters_tracking.yml``, or
``--params tracking.enabled=false``) starts no MLflow at all: nothing imported, nothing written under ``mlruns/``.
With tracking on, kedro-mlflow opens one MLflow run per ``kedro run`` and logs every node's ``params:`` inputs
(secrets masked first); this hook adds

- tags: git commit (``mlflow.source.git.commit``), package versions, hardware;
- metrics: the numbers of the datasets named in ``tracking.metrics`` when they are saved (``runs/tracking.py``), and
  the training loop's step metrics, live (``training/loop.py`` calls ``tracking.log_step``);
- artifacts: every saved file of the layers in ``tracking.artifact_layers`` (plots, tables, the report), under
  the same relative path as on disk, and ``run_manifest.json``; Parquet tables of those layers get the manifest
  in their file metadata first (``provenance.stamp_parquet``), with tracking on or off;
- checkpoints by reference: path and content hash of each checkpoint read or written, as tags and in the manifest.

Whether tracking is on or off, the hook writes the ``run_manifest`` dataset (``provenance.RunManifest``) before
the first node runs and again whenever a checkpoint or a judged table adds to it, so the report node reads it
whole. It also hands the nodes Kedro's credentials as ``endpoint_credentials`` (API keys as ``SecretStr``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from kedro.framework.hooks import hook_impl
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.models import processes
from rmsweb_kedro.runs import tracking
from rmsweb_kedro.runs.provenance import (
    RunManifest,
    checkpoint_record,
    mask_secrets,
    stamp_parquet,
    start_manifest,
)

logger = logging.getLogger(__name__)

#: The catalog names this hook writes.
MANIFEST_DATASET = "run_manifest"
CREDENTIALS_DATASET = "endpoint_credentials"
_ENV = ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", tracking.STEP_PREFIX_ENV)


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
    #: Kedro-viz layers whose saved files are logged as MLflow artifacts.
    artifact_layers: list[str] = Field(default_factory=lambda: ["reporting"])


def _layer(dataset: Any) -> str | None:
    return ((getattr(dataset, "metadata", None) or {}).get("kedro-viz") or {}).get("layer")


def _local_path(dataset: Any) -> Path | None:
    """The file or directory a file-backed dataset last wrote (its latest version when versioned)."""
    from kedro.io.core import AbstractVersionedDataset

    if isinstance(dataset, AbstractVersionedDataset) and getattr(dataset, "_version", None) is not None:
        path = dataset._get_load_path()  # after a save, the version just written
    else:
        path = getattr(dataset, "_filepath", None)
    if path is None or getattr(dataset, "_protocol", "file") not in ("file", None):
        return None
    return Path(str(path))


class ShutdownHooks:
    """For the length of a run, SIGTERM and SIGINT stop the servers and browsers the run started, then end it
    through its ``finally`` blocks (:func:`processes.handle_signals`): a scheduler's SIGTERM to ``kedro run``
    leaves no vLLM server holding a GPU."""

    def __init__(self) -> None:
        self._previous: dict[int, object] | None = None

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        previous = processes.handle_signals()
        if (
            previous is not None
        ):  # a run off the main thread installs nothing: keep what the main thread's saved
            self._previous = previous

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        processes.restore_signals(self._previous)
        self._previous = None

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any], pipeline, catalog) -> None:
        processes.restore_signals(self._previous)
        self._previous = None


class TrackingHooks:
    """See the module docstring. One instance serves one ``KedroSession`` at a time."""

    def __init__(self) -> None:
        self._config = TrackingParams()
        self._mlflow: Any = None  # kedro-mlflow's MlflowHook while tracking is on
        self._catalog: Any = None
        self._project_path = Path.cwd()
        self._env: str | None = None
        self._parameters: dict[str, Any] = {}
        self._manifest: RunManifest | None = None
        self._run_id: str | None = None
        self._uri: str | None = None
        self._saved_env: dict[str, str | None] = {}

    # ------------------------------------------------------------------ Kedro's lifecycle

    @hook_impl
    def after_context_created(self, context) -> None:
        self._project_path, self._env = Path(context.project_path), context.env
        self._parameters = context.params
        self._config = TrackingParams.model_validate(self._parameters.get("tracking") or {})
        self._mlflow = None
        if self._config.enabled:
            from kedro_mlflow.framework.hooks.mlflow_hook import MlflowHook

            self._mlflow = MlflowHook()
            self._mlflow.after_context_created(context)  # sets context.mlflow (`kedro mlflow ui` reads it)

    @hook_impl
    def after_catalog_created(
        self, catalog, conf_catalog, conf_creds, parameters, save_version, load_versions
    ) -> None:
        from kedro.io import MemoryDataset

        from rmsweb_kedro.models.endpoint import endpoint_credentials

        self._catalog = catalog
        credentials = endpoint_credentials(conf_creds or {})
        if CREDENTIALS_DATASET in catalog:  # declared (catalog_tracking.yml): fill it
            catalog.save(CREDENTIALS_DATASET, credentials)
        else:
            catalog[CREDENTIALS_DATASET] = MemoryDataset(credentials, copy_mode="assign")
        if self._mlflow is not None:
            self._mlflow.after_catalog_created(
                catalog, conf_catalog, conf_creds, parameters, save_version, load_versions
            )

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        pipelines = run_params.get("pipeline_names") or [run_params.get("pipeline_name") or "__default__"]
        self._manifest = start_manifest(
            self._project_path,
            self._parameters,
            _command(run_params, pipelines),
            list(pipelines),
            self._env,
            read_parameters=pipeline.inputs(),
        )
        self._run_id = None
        if self._mlflow is not None:
            # kedro-mlflow writes the run parameters as tags, runtime parameters included: mask secrets first.
            masked = {
                k: mask_secrets(v) if k in ("runtime_params", "extra_params") else v
                for k, v in run_params.items()
            }
            self._mlflow.before_pipeline_run(run_params=masked, pipeline=pipeline, catalog=catalog)
            if self._mlflow._is_mlflow_enabled:
                self._start_tracking()
        self._save_manifest()

    @hook_impl
    def before_node_run(self, node, catalog, inputs: dict[str, Any], is_async: bool) -> None:
        if self._mlflow is not None:
            # kedro-mlflow logs every params: input as it is: mask secrets before it sees them.
            masked = {
                k: mask_secrets(v) if k.startswith("params:") or k == "parameters" else v
                for k, v in inputs.items()
            }
            self._mlflow.before_node_run(node=node, catalog=catalog, inputs=masked, is_async=is_async)
        if self._run_id:
            os.environ[tracking.STEP_PREFIX_ENV] = tracking.step_prefix(node.name, node.namespace)

    @hook_impl
    def after_dataset_loaded(self, dataset_name: str, data: Any, node) -> None:
        self._record_checkpoint(dataset_name, "loaded")

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node) -> None:
        self._record_checkpoint(dataset_name, "saved")
        self._record_judges(data)
        dataset = self._dataset(dataset_name)
        reporting = dataset is not None and _layer(dataset) in self._config.artifact_layers
        path = _local_path(dataset) if reporting else None
        if path is not None and path.suffix == ".parquet" and path.is_file() and self._manifest is not None:
            # The results table carries the manifest of the run that made it.
            stamp_parquet(path, self._manifest)
        if not self._run_id:
            return
        if dataset_name.rsplit(".", 1)[-1] in self._config.metrics:
            tracking.log_metrics(self._run_id, self._uri, tracking.dataset_metrics(dataset_name, data))
        self._log_artifact(path)

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        self._save_manifest()
        if self._run_id:
            self._log_artifact(self._manifest_path())
        run_id = self._run_id
        self._finish()
        if self._mlflow is not None:
            self._mlflow.after_pipeline_run(run_params=run_params, pipeline=pipeline, catalog=catalog)
        if run_id:
            import mlflow

            # kedro-mlflow re-enters the run before every node and MLflow 3 stacks each re-entry (kedro-mlflow
            # expected an "already active" error): close them all, or the next session in this process (a
            # notebook, the tests) would log into this finished run.
            while (active := mlflow.active_run()) is not None and active.info.run_id == run_id:
                mlflow.end_run()

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any], pipeline, catalog) -> None:
        self._finish()
        if self._mlflow is not None:
            self._mlflow.on_pipeline_error(
                error=error, run_params=run_params, pipeline=pipeline, catalog=catalog
            )

    # ------------------------------------------------------------------ helpers

    def _start_tracking(self) -> None:
        import mlflow

        self._run_id, self._uri = self._mlflow.run_id, mlflow.get_tracking_uri()
        manifest = self._manifest
        manifest.mlflow_run_id, manifest.mlflow_tracking_uri = self._run_id, self._uri
        tags = {
            "mlflow.source.git.commit": manifest.git_commit or "none",
            "git_dirty": str(manifest.git_dirty),
            "hardware": str(manifest.hardware),
            "python": manifest.python,
        } | {f"version/{name}": version for name, version in manifest.packages.items()}
        mlflow.set_tags(tags)
        # Exported so the training loop (here or in `accelerate launch` children) logs into this run.
        self._saved_env = {name: os.environ.get(name) for name in _ENV}
        os.environ["MLFLOW_RUN_ID"], os.environ["MLFLOW_TRACKING_URI"] = self._run_id, self._uri

    def _finish(self) -> None:
        self._run_id = None
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env = {}

    def _dataset(self, name: str) -> Any:
        if self._catalog is None or name not in self._catalog:
            return None
        return self._catalog.get(name)

    def _manifest_path(self) -> Path | None:
        dataset = self._dataset(MANIFEST_DATASET)
        return _local_path(dataset) if dataset is not None else None

    def _save_manifest(self) -> None:
        if self._manifest is not None and self._dataset(MANIFEST_DATASET) is not None:
            self._catalog.save(MANIFEST_DATASET, self._manifest.model_dump(mode="json"))

    def _record_checkpoint(self, name: str, role: str) -> None:
        from rmsweb_kedro.datasets.checkpoint import CheckpointDataset

        dataset = self._dataset(name)
        if self._manifest is None or not isinstance(dataset, CheckpointDataset):
            return
        path = _local_path(dataset)
        known = self._manifest.checkpoints.get(name)
        if path is None or (known is not None and known.path == str(path)):
            return
        record = checkpoint_record(path, role)
        self._manifest.checkpoints[name] = record
        self._save_manifest()
        if self._run_id:
            import mlflow

            mlflow.MlflowClient(self._uri).set_tag(
                self._run_id, f"checkpoint/{name}", f"{record.path} sha256:{record.sha256}"
            )

    def _record_judges(self, data: Any) -> None:
        """The distinct judge specs of a saved table of verdicts (episodes, the collection log): its ``judged_by``
        column (``schema.JudgedBy`` as JSON), else its ``judge`` names."""
        import polars as pl

        if self._manifest is None or not isinstance(data, pl.DataFrame):
            return
        # A verdict table has judge_reason beside judge (a task table's judge column is the task's judge config).
        verdicts = "judged_by" in data.columns or {"judge", "judge_reason"} <= set(data.columns)
        column = "judged_by" if "judged_by" in data.columns else "judge"
        if not verdicts or data.schema[column] != pl.String:
            return
        found = {j for j in data[column].drop_nulls().unique().to_list() if j} - set(self._manifest.judges)
        if found:
            self._manifest.judges = sorted({*self._manifest.judges, *found})
            self._save_manifest()

    def _log_artifact(self, path: Path | None) -> None:
        if path is None or not path.exists():
            return
        try:
            relative = path.resolve().relative_to(self._project_path.resolve())
        except ValueError:  # outside the project: keep only the file name
            relative = Path(path.name)
        client = tracking._client(self._uri)
        if path.is_dir():
            client.log_artifacts(self._run_id, str(path), relative.as_posix())
        else:
            parent = relative.parent.as_posix()
            client.log_artifact(self._run_id, str(path), None if parent == "." else parent)


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
