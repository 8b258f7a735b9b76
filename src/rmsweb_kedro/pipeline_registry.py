"""Project pipelines, and the one module that knows them all (no pipeline package imports another).

The recipe's stages, in order, each a namespaced modular pipeline named after its package (its nodes are
``<stage>.<node>``, so kedro-viz collapses each stage into one box; dataset and parameter names are not prefixed, so
the catalog is unchanged); ``__default__`` is the whole recipe. ``live`` (benchmark tasks on the real web),
``judge_agreement`` and ``propose`` (tasks for a list of websites) run apart, and so do ``ablations`` and
``second_round`` (a second round of mining and Salvage-DS from the default run's ``rmsweb_model``), which reuse the
stages handed to them here.

Every pipeline is built on every call: ``find_pipelines`` would, under ``kedro run --pipelines ablations``, load the
ablations package alone, without the stages it reuses. Building them all takes well under a second (heavy imports
sit inside the node functions).
"""

from kedro.pipeline import Pipeline, pipeline

from rmsweb_kedro.pipelines import (
    ablations,
    collect,
    evaluate,
    judge_agreement,
    live,
    mining,
    propose,
    salvage_ds,
    sft,
    sft_data,
    tasks,
    trajectories,
)
from rmsweb_kedro.pipelines.ablations import Reused
from rmsweb_kedro.pipelines.evaluate.pipeline import model_evaluation, report_nodes

#: The recipe's stages in order.
RECIPE = {
    "tasks": tasks,
    "collect": collect,
    "trajectories": trajectories,
    "sft_data": sft_data,
    "sft": sft,
    "mining": mining,
    "salvage_ds": salvage_ds,
    "evaluate": evaluate,
}
#: Pipelines that run apart from the recipe, on what it left in data/ or on benchmark files.
APART = {"live": live, "judge_agreement": judge_agreement, "propose": propose}


def stage(name: str, nodes: Pipeline) -> Pipeline:
    """``nodes`` as the modular pipeline of stage ``name``: node names ``<name>.<node>``, datasets and parameters as
    they are."""
    return pipeline(nodes, namespace=name, prefix_datasets_with_namespace=False)


def register_pipelines() -> dict[str, Pipeline]:
    """Register the project's pipelines."""
    stages = {name: stage(name, package.create_pipeline()) for name, package in RECIPE.items()}
    reused = Reused(stages=stages, model_evaluation=model_evaluation, report_nodes=report_nodes)
    return {
        **stages,
        "__default__": sum(stages.values(), Pipeline([])),
        **{name: package.create_pipeline() for name, package in APART.items()},
        "ablations": ablations.create_pipeline(reused),
        "second_round": ablations.second_round(reused),
    }
