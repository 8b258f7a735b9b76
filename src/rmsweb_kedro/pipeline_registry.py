"""Project pipelines: every package under ``pipelines/`` is found; ``__default__`` is the whole recipe; ``live``
(benchmark tasks on the real web) is evaluate's, registered by name; ``ablations`` runs apart, after the recipe."""

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline

from rmsweb_kedro.pipelines.evaluate.pipeline import create_live_pipeline

# The recipe's stages in order; stages not built yet are simply absent.
RECIPE = ["sandbox", "collect", "trajectories", "sft_data", "sft", "mining", "salvage_ds", "evaluate"]


def register_pipelines() -> dict[str, Pipeline]:
    """Register the project's pipelines."""
    pipelines = find_pipelines()
    pipelines["__default__"] = sum((pipelines[name] for name in RECIPE if name in pipelines), Pipeline([]))
    pipelines["live"] = create_live_pipeline()
    return pipelines
