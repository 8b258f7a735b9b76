"""Project settings: the config loader soft-merges parameters so ``--params a.b=1`` or an environment's file changes
one key, and resolves ``${merge:a, b, ...}`` (the ablation variants' parameters, conf/base/parameters_ablations.yml)
and ``${scaled:value, factor}`` (a budget scaled for the RL rounds' variants) after base and the run's environment
are merged; the run's hooks (``runs/hooks/``: credentials, provenance, MLflow
through kedro-mlflow, whose own auto-registered hook is disabled, and shutdown on a signal) are registered side by
side."""

import os
from typing import Any

from kedro.config import OmegaConfigLoader

from rmsweb_kedro.datasets.checkpoint import CheckpointDataset
from rmsweb_kedro.runs.hooks import CredentialsHooks, MlflowTrackingHooks, ProvenanceHooks, ShutdownHooks

# MLflow 3 refuses its file store (mlruns/) unless this is set; conf/base/mlflow.yml says why we keep it.
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

_provenance = ProvenanceHooks(checkpoint_types=(CheckpointDataset,))
# Kedro calls hooks last registered first: at every hook point, credentials, then provenance, then MLflow (which
# reads provenance's manifest: runs/hooks/__init__.py), then shutdown.
HOOKS = (ShutdownHooks(), MlflowTrackingHooks(_provenance), _provenance, CredentialsHooks())
# MlflowTrackingHooks calls kedro-mlflow's MlflowHook itself, only when tracking is on.
DISABLE_HOOKS_FOR_PLUGINS = ("kedro_mlflow",)


def merge_parameters(*blocks: Any) -> dict[str, Any]:
    """``${merge:a, b, ...}``: the parameter blocks deep-merged in order, later ones winning (a list is replaced,
    not concatenated); the blocks themselves are left as they are."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.merge(*blocks), resolve=True)


def scale_parameter(value: int | float | None, factor: int | float) -> int | float | None:
    """``${scaled:value, factor}``: ``value`` times ``factor``, e.g. the one-round variant's updates and sampled
    actions, twice a round's (conf/base/parameters_ablations.yml, "RL rounds"). An int stays an int and must stay
    whole (a step count or a budget is not rounded silently); None (no cap) stays None."""
    if value is None:
        return None
    scaled = value * factor
    if isinstance(value, int):
        if scaled != int(scaled):
            raise ValueError(f"scaled: {value} x {factor} is not a whole number")
        return int(scaled)
    return scaled


class ProjectConfigLoader(OmegaConfigLoader):
    """Kedro's loader, but parameters are resolved once over base's files, then the run environment's, then
    ``--params`` (deep-merged in that order), where Kedro resolves each folder apart. So ``--env experiment`` or
    ``--env production`` changing ``collect`` or ``ablations.budget`` reaches every ``${merge:${collect}, ...}``
    built from them in base (the ablation variants), as a ``--params`` change does."""

    def _resolve_from_raw_config(self, key, base_configs, env_configs, *args, **kwargs):  # noqa: ANN001
        if key != "parameters":
            return super()._resolve_from_raw_config(key, base_configs, env_configs, *args, **kwargs)
        return self._merge_and_resolve(key, {**base_configs, **env_configs})


CONFIG_LOADER_CLASS = ProjectConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "merge_strategy": {"parameters": "soft", "catalog": "soft"},
    "custom_resolvers": {"merge": merge_parameters, "scaled": scale_parameter},
}
