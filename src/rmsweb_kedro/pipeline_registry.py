"""Project pipelines: every package under ``pipelines/`` is found; ``__default__`` is the whole recipe; ``live``
(benchmark tasks on the real web) and ``ablations`` run apart."""

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline

# The recipe's stages in order. `kedro run --pipelines <name>` makes find_pipelines load only <name>, so a stage can
# be absent here.
RECIPE = ["sandbox", "collect", "trajectories", "sft_data", "sft", "mining", "salvage_ds", "evaluate"]


def register_pipelines() -> dict[str, Pipeline]:
    """Register the project's pipelines."""
    pipelines = find_pipelines()
    pipelines["__default__"] = sum((pipelines[name] for name in RECIPE if name in pipelines), Pipeline([]))
    return pipelines
