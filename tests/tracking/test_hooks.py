"""The run's hooks (``runs/hooks/``) as Kedro registers them from ``settings.HOOKS``: one job each, called in the
order the MLflow hook relies on (credentials, then provenance, then MLflow, then shutdown; provenance's
``before_pipeline_run`` around all the others), and the MLflow hook reading the manifest of the provenance hook
registered beside it. What they record is checked through real runs in test_tracking.py."""

from __future__ import annotations

import pluggy
from kedro.framework.hooks import specs
from kedro.framework.hooks.markers import HOOK_NAMESPACE

from rmsweb_kedro import settings
from rmsweb_kedro.datasets.checkpoint import CheckpointDataset
from rmsweb_kedro.runs.hooks import CredentialsHooks, MlflowTrackingHooks, ProvenanceHooks, ShutdownHooks


def registered() -> pluggy.PluginManager:
    """A hook manager with Kedro's hook specifications and ``settings.HOOKS`` registered in order, as a
    ``KedroSession`` does."""
    manager = pluggy.PluginManager(HOOK_NAMESPACE)
    for spec in (specs.NodeSpecs, specs.PipelineSpecs, specs.DataCatalogSpecs, specs.DatasetSpecs,
                 specs.KedroContextSpecs):  # fmt: skip
        manager.add_hookspecs(spec)
    for hooks in settings.HOOKS:
        manager.register(hooks)
    return manager


def called(manager: pluggy.PluginManager, hook: str) -> list[str]:
    """The hook classes implementing ``hook`` in the order pluggy calls them: wrappers first, then the others,
    each last registered first."""
    implementations = getattr(manager.hook, hook).get_hookimpls()
    return [type(i.plugin).__name__ for i in reversed(implementations)]


def test_one_hook_class_per_concern_in_the_order_the_mlflow_hook_relies_on():
    assert [type(h) for h in settings.HOOKS] == [ShutdownHooks, MlflowTrackingHooks, ProvenanceHooks,
                                                 CredentialsHooks]  # fmt: skip
    manager = registered()
    assert called(manager, "after_catalog_created") == [
        "CredentialsHooks",
        "ProvenanceHooks",
        "MlflowTrackingHooks",
    ]
    # provenance begins the manifest before the MLflow run starts and saves it after it is written in
    assert called(manager, "before_pipeline_run") == [
        "ProvenanceHooks",
        "MlflowTrackingHooks",
        "ShutdownHooks",
    ]
    (wrapper,) = [i for i in manager.hook.before_pipeline_run.get_hookimpls() if i.wrapper]
    assert isinstance(wrapper.plugin, ProvenanceHooks)
    # a file is stamped before it is logged, a checkpoint recorded before it is tagged, the manifest saved whole
    # before it is logged
    for hook in ("after_dataset_saved", "after_dataset_loaded"):
        assert called(manager, hook) == ["ProvenanceHooks", "MlflowTrackingHooks"]
    assert called(manager, "after_pipeline_run") == [
        "ProvenanceHooks",
        "MlflowTrackingHooks",
        "ShutdownHooks",
    ]
    assert called(manager, "before_node_run") == ["MlflowTrackingHooks"]


def test_the_mlflow_hook_reads_the_registered_provenance_hook():
    _, mlflow_hooks, provenance, _ = settings.HOOKS
    assert mlflow_hooks.provenance is provenance
    assert provenance.checkpoint_types == (CheckpointDataset,)
