"""Project settings: the config loader soft-merges parameters so ``--params a.b=1`` changes one key."""

from kedro.config import OmegaConfigLoader

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "merge_strategy": {"parameters": "soft", "catalog": "soft"},
}

# kedro-mlflow registers its hook on install; it stays off until the project configures its tracking store.
DISABLE_HOOKS_FOR_PLUGINS = ("kedro_mlflow",)
