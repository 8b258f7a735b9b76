"""Project settings: the config loader soft-merges parameters so ``--params a.b=1`` changes one key and resolves
``${merge:a, b, ...}`` (the ablation variants' parameters, conf/base/parameters_ablations.yml); the tracking hooks
(``hooks.py``) wrap kedro-mlflow, whose own auto-registered hook is disabled."""

import os
from typing import Any

from kedro.config import OmegaConfigLoader

from rmsweb_kedro.hooks import TrackingHooks

# MLflow 3 refuses its file store (mlruns/) unless this is set; conf/base/mlflow.yml says why we keep it.
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

HOOKS = (TrackingHooks(),)
# TrackingHooks calls kedro-mlflow's MlflowHook itself, only when tracking is on.
DISABLE_HOOKS_FOR_PLUGINS = ("kedro_mlflow",)


def merge_parameters(*blocks: Any) -> dict[str, Any]:
    """``${merge:a, b, ...}``: the parameter blocks deep-merged in order, later ones winning (a list is replaced,
    not concatenated); the blocks themselves are left as they are."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.merge(*blocks), resolve=True)


CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "merge_strategy": {"parameters": "soft", "catalog": "soft"},
    "custom_resolvers": {"merge": merge_parameters},
}
