"""The Kedro hooks of every ``kedro run``, one concern each, registered side by side in ``settings.py``:

- :class:`CredentialsHooks` (``credentials.py``): Kedro's credentials to the nodes, as ``endpoint_credentials``;
- :class:`ProvenanceHooks` (``provenance.py``): the run manifest (``runs.provenance.RunManifest``), saved as the
  ``run_manifest`` dataset, and stamped into the Parquet tables of ``tracking.artifact_layers``, tracking on or off;
- :class:`MlflowTrackingHooks` (``mlflow_tracking.py``): kedro-mlflow's run (only with ``tracking.enabled``),
  its tags, metrics and artifacts, and the environment through which the training loop logs its steps live;
- :class:`ShutdownHooks` (``shutdown.py``): SIGTERM and SIGINT stop what the run started.

Order. Kedro calls a hook's implementations last registered first (pluggy's LIFO order), so ``settings.HOOKS``
lists them in reverse: at every hook point credentials run first, then provenance, then MLflow, then shutdown. Two
of them depend on it. The MLflow hook is handed the provenance hook and reads its manifest: it tags the run with
the manifest's commit, versions and hardware, writes its run id into it, tags each checkpoint the manifest records,
and logs files after provenance has stamped them and the manifest after provenance has saved it. Provenance begins
the manifest before any other ``before_pipeline_run`` and saves it after all of them (a pluggy ``wrapper``), so
the first saved manifest already names the MLflow run.

``catalog.py`` holds what they share: ``params:tracking`` (:class:`TrackingParams`) and how a dataset's layer and
local file are read.
"""

from rmsweb_kedro.runs.hooks.credentials import CredentialsHooks
from rmsweb_kedro.runs.hooks.mlflow_tracking import MlflowTrackingHooks
from rmsweb_kedro.runs.hooks.provenance import ProvenanceHooks
from rmsweb_kedro.runs.hooks.shutdown import ShutdownHooks

__all__ = ["CredentialsHooks", "MlflowTrackingHooks", "ProvenanceHooks", "ShutdownHooks"]
