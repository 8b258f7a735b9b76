"""The ``evaluate`` pipeline: wiring only (nodes in ``nodes.py``, or the library's own functions where a node takes
no parameters). ``model_evaluation`` and ``report_nodes`` are also handed to the ``ablations`` pipeline by the
registry, which reuses them namespaced."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.measures import evaluation, figures, reporting
from rmsweb_kedro.measures import report as evaluation_report
from rmsweb_kedro.pipelines import bind
from rmsweb_kedro.pipelines.evaluate import nodes

#: Model label -> the checkpoint dataset evaluated under it (``rmsweb_models``: one model a training seed, labelled
#: ``rmsweb_s<seed>``).
MODELS = {"base": "base_model", "sft": "sft_model", "rmsweb": "rmsweb_models"}


def model_evaluation(models: dict[str, str]) -> Pipeline:
    """Offline step metrics and online success of each model (label -> checkpoint dataset) on ``sft_states_val``
    and ``tasks``: ``offline_predictions``, ``online_episodes`` (and their steps, ``online_steps``), ``offline_metrics``,
    ``offline_by_step_kind``, ``online_breakdown`` and ``model_comparison`` (one row per label, in this order)."""
    per_model = []
    for label, dataset in models.items():
        per_model += [
            Node(
                bind(nodes.predict_offline, model_name=label),
                inputs=["sft_states_val", dataset, "params:evaluate"],
                outputs=f"offline_predictions_{label}",
                name=f"predict_offline_{label}",
            ),
            Node(
                bind(nodes.run_online, model_name=label),
                inputs={
                    "tasks": "tasks",
                    "model": dataset,
                    "params": "params:evaluate",
                    "rollouts": "params:rollouts",
                },
                outputs=[f"online_episodes_{label}", f"online_steps_{label}"],
                name=f"run_online_{label}",
            ),
        ]
    return Pipeline(
        per_model
        + [
            Node(
                reporting.concat_tables,
                inputs=[f"offline_predictions_{label}" for label in models],
                outputs="offline_predictions",
                name="gather_offline_predictions",
            ),
            Node(
                reporting.concat_tables,
                inputs=[f"online_episodes_{label}" for label in models],
                outputs="online_episodes",
                name="gather_online_episodes",
            ),
            Node(
                reporting.concat_tables,
                inputs=[f"online_steps_{label}" for label in models],
                outputs="online_steps",
                name="gather_online_steps",
            ),
            Node(
                evaluation.offline_metrics,
                inputs="offline_predictions",
                outputs="offline_metrics",
                name="offline_metrics",
            ),
            Node(
                nodes.offline_by_step_kind,
                inputs=["offline_predictions", "params:evaluate"],
                outputs="offline_by_step_kind",
                name="offline_by_step_kind",
            ),
            Node(
                nodes.online_breakdown,
                inputs=["online_episodes", "params:evaluate"],
                outputs="online_breakdown",
                name="online_breakdown",
            ),
            Node(
                nodes.compare_models,
                inputs=["offline_metrics", "online_episodes", "params:evaluate"],
                outputs="model_comparison",
                name="compare_models",
            ),
        ]
    )


def report_nodes(extra: dict[str, str] | None = None) -> Pipeline:
    """The claims table and the report (markdown and HTML). ``extra`` adds ``build_report`` keyword inputs
    (``ablations``: the section the ablations pipeline adds when it re-renders the report)."""
    return Pipeline(
        [
            Node(
                nodes.claims_table,
                inputs={
                    "episodes": "online_episodes",
                    "predictions": "offline_predictions",
                    "collection_log": "collection_log",
                    "params": "params:evaluate",
                },
                outputs="claims_vs_run",
                name="claims_vs_run",
            ),
            Node(
                nodes.build_report,
                inputs={
                    "comparison": "model_comparison",
                    "breakdown": "online_breakdown",
                    "kinds": "offline_by_step_kind",
                    "claims": "claims_vs_run",
                    "collection": "evaluation_collection_table",
                    "steps": "reflection_steps",
                    "modes": "evaluation_failure_modes",
                    "params": "params:evaluate",
                    "manifest": "run_manifest",
                    "salvage": "salvage_ds_report",
                }
                | (extra or {}),
                outputs="evaluation_report",
                name="build_report",
            ),
            Node(
                evaluation_report.report_html,
                inputs="evaluation_report",
                outputs="evaluation_report_html",
                name="build_report_html",
            ),
        ]
    )


def create_pipeline(**kwargs) -> Pipeline:
    return (
        model_evaluation(MODELS)
        + Pipeline(
            [
                Node(
                    evaluation_report.collection_table,
                    inputs="collection_stats",
                    outputs="evaluation_collection_table",
                    name="collection_table",
                ),
                Node(
                    reporting.reflection_steps,
                    inputs="collection_log",
                    outputs="reflection_steps",
                    name="reflection_steps",
                ),
                Node(
                    evaluation_report.failure_modes,
                    inputs=["offline_predictions", "online_episodes"],
                    outputs="evaluation_failure_modes",
                    name="evaluation_failure_modes",
                ),
                Node(
                    figures.plot_success_vs_cost,
                    inputs="model_comparison",
                    outputs="success_vs_cost_plot",
                    name="plot_success_vs_cost",
                ),
                Node(
                    figures.plot_steps_on_solved,
                    inputs="online_episodes",
                    outputs="steps_on_solved_plot",
                    name="plot_steps_on_solved",
                ),
                Node(
                    figures.plot_failure_modes,
                    inputs="evaluation_failure_modes",
                    outputs="failure_modes_by_model_plot",
                    name="plot_failure_modes_by_model",
                ),
                Node(
                    bind(figures.plot_flips, first="rmsweb", second="sft"),
                    inputs="offline_predictions",
                    outputs="flips_plot",
                    name="plot_flips",
                ),
                Node(
                    figures.plot_training_curves,
                    inputs=["sft_metrics", "salvage_ds_metrics"],
                    outputs="training_curves_plot",
                    name="plot_training_curves",
                ),
            ]
        )
        + report_nodes()
    )
