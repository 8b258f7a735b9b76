"""Experiment tracking: :class:`MlflowTrackingHooks` runs kedro-mlflow's ``MlflowHook`` for a ``kedro run`` (its own
auto-registration is disabled in ``settings.py``) so that ``tracking.enabled: false``
(``conf/base/parameters_tracking.yml``, or ``--params tracking.enabled=false``) starts no MLflow at all: nothing
imported, nothing written under ``mlruns/``. With tracking on, kedro-mlflow opens one MLflow run per ``kedro run``
(unless ``conf/base/mlflow.yml``'s ``tracking.disable_tracking.pipelines`` lists every pipeline run) and logs every
node's ``params:`` inputs (secrets masked first); this hook adds

- tags: git commit (``mlflow.source.git.commit``), package versions, hardware, from the provenance hook's manifest,
  into which it writes the run's id and tracking URI;
- metrics: the numbers of the datasets named in ``tracking.metrics`` when they are saved (``runs/tracking.py``);
- artifacts: every saved file of the layers in ``tracking.artifact_layers`` (plots, tables, the report), under the
  same relative path as on disk, and ``run_manifest.json`` after the last node;
- checkpoints by reference: path and content hash of each checkpoint the manifest records, as tags.

The training loop's step metrics are logged live, by this path:

1. ``before_pipeline_run`` exports the run to the process environment, as MLflow's own ``MLFLOW_RUN_ID`` and
   ``MLFLOW_TRACKING_URI``, and ``before_node_run`` exports ``runs.tracking.STEP_PREFIX_ENV`` naming the node that
   runs (``runs.tracking.step_prefix``);
2. the training loop (``training/loop.py``) calls ``runs.tracking.log_step(row)`` for every history row; it reads
   only these variables, so it logs into this run whether it runs in the Kedro process or in the processes
   ``accelerate launch`` starts (which inherit the environment), as ``<node>/<key>`` at the row's step;
3. ``after_pipeline_run`` and ``on_pipeline_error`` restore the variables as they were, so with tracking off, or
   after the run, ``log_step`` is a no-op.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kedro.framework.hooks import hook_impl

from rmsweb_kedro.runs import tracking
from rmsweb_kedro.runs.hooks.catalog import (
    MANIFEST_DATASET,
    TrackingParams,
    catalog_dataset,
    dataset_layer,
    local_path,
)
from rmsweb_kedro.runs.hooks.provenance import ProvenanceHooks
from rmsweb_kedro.runs.provenance import mask_secrets

#: The environment this hook exports for the length of a tracked run (module docstring: the step-logging path).
EXPORTED_ENV = ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", tracking.STEP_PREFIX_ENV)


class MlflowTrackingHooks:
    """See the module docstring. ``provenance``: the provenance hook whose manifest this one reads and adds its run
    to (registered beside it, called after it: ``runs/hooks/__init__.py``). One instance serves one
    ``KedroSession`` at a time."""

    def __init__(self, provenance: ProvenanceHooks) -> None:
        self.provenance = provenance
        self._config = TrackingParams()
        self._mlflow: Any = None  # kedro-mlflow's MlflowHook while tracking is on
        self._catalog: Any = None
        self._project_path = Path.cwd()
        self._run_id: str | None = None
        self._uri: str | None = None
        self._saved_env: dict[str, str | None] = {}
        self._tagged: dict[str, str] = {}  # checkpoint name -> the tag value logged for it

    # ------------------------------------------------------------------ Kedro's lifecycle

    @hook_impl
    def after_context_created(self, context) -> None:
        self._project_path = Path(context.project_path)
        self._config = TrackingParams.model_validate(context.params.get("tracking") or {})
        self._mlflow = None
        if self._config.enabled:
            from kedro_mlflow.framework.hooks.mlflow_hook import MlflowHook

            # A new one per session: its run_id (below) is then that of this session's run, or None.
            self._mlflow = MlflowHook()
            self._mlflow.after_context_created(context)  # sets context.mlflow (`kedro mlflow ui` reads it)

    @hook_impl
    def after_catalog_created(
        self, catalog, conf_catalog, conf_creds, parameters, save_version, load_versions
    ) -> None:
        self._catalog = catalog
        if self._mlflow is not None:
            self._mlflow.after_catalog_created(
                catalog, conf_catalog, conf_creds, parameters, save_version, load_versions
            )

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        self._run_id, self._tagged = None, {}
        if self._mlflow is None:
            return
        # kedro-mlflow writes the run parameters as tags, runtime parameters included: mask secrets first.
        masked = {
            k: mask_secrets(v) if k in ("runtime_params", "extra_params") else v
            for k, v in run_params.items()
        }
        self._mlflow.before_pipeline_run(run_params=masked, pipeline=pipeline, catalog=catalog)
        # kedro-mlflow has no public "enabled" flag (only the private ``_is_mlflow_enabled``); its public
        # ``run_id`` is set exactly when it started or joined a run for these pipelines, i.e. when mlflow.yml's
        # ``tracking.disable_tracking.pipelines`` does not list them all (a fresh MlflowHook starts at None).
        if self._mlflow.run_id is not None:
            self._start_tracking()

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
    def after_dataset_loaded(self, dataset_name: str) -> None:
        self._tag_checkpoint(dataset_name)

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any) -> None:
        self._tag_checkpoint(dataset_name)
        if not self._run_id:
            return
        dataset = catalog_dataset(self._catalog, dataset_name)
        reporting = dataset is not None and dataset_layer(dataset) in self._config.artifact_layers
        if dataset_name.rsplit(".", 1)[-1] in self._config.metrics:
            tracking.log_metrics(self._run_id, self._uri, tracking.dataset_metrics(dataset_name, data))
        self._log_artifact(local_path(dataset) if reporting else None)

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        if self._run_id:  # the provenance hook, called before this one, has saved the manifest whole
            self._log_artifact(local_path(catalog_dataset(self._catalog, MANIFEST_DATASET)))
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
        """Tag the run from the manifest, write the run into the manifest, export the run to the environment."""
        import mlflow

        self._run_id, self._uri = self._mlflow.run_id, mlflow.get_tracking_uri()
        manifest = self.provenance.manifest
        manifest.mlflow_run_id, manifest.mlflow_tracking_uri = self._run_id, self._uri
        tags = {
            "mlflow.source.git.commit": manifest.git_commit or "none",
            "git_dirty": str(manifest.git_dirty),
            "hardware": str(manifest.hardware),
            "python": manifest.python,
        } | {f"version/{name}": version for name, version in manifest.packages.items()}
        mlflow.set_tags(tags)
        # Exported so the training loop (here or in `accelerate launch` children) logs into this run.
        self._saved_env = {name: os.environ.get(name) for name in EXPORTED_ENV}
        os.environ["MLFLOW_RUN_ID"], os.environ["MLFLOW_TRACKING_URI"] = self._run_id, self._uri

    def _finish(self) -> None:
        self._run_id = None
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env = {}

    def _tag_checkpoint(self, name: str) -> None:
        """Tag the run with the checkpoint the provenance hook (called just before) has recorded under ``name``,
        once per record."""
        manifest = self.provenance.manifest
        record = manifest.checkpoints.get(name) if manifest is not None else None
        if not self._run_id or record is None:
            return
        value = f"{record.path} sha256:{record.sha256}"
        if self._tagged.get(name) == value:
            return
        self._tagged[name] = value
        import mlflow

        mlflow.MlflowClient(self._uri).set_tag(self._run_id, f"checkpoint/{name}", value)

    def _log_artifact(self, path: Path | None) -> None:
        if path is None or not path.exists():
            return
        try:
            relative = path.resolve().relative_to(self._project_path.resolve())
        except ValueError:  # outside the project: keep only the file name
            relative = Path(path.name)
        client = tracking.client(self._uri)
        if path.is_dir():
            client.log_artifacts(self._run_id, str(path), relative.as_posix())
        else:
            parent = relative.parent.as_posix()
            client.log_artifact(self._run_id, str(path), None if parent == "." else parent)
