"""The ``salvage_ds`` pipeline: wiring only (nodes in ``nodes.py``, the maths in ``training/salvage_ds/``)."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.salvage_ds import nodes


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                nodes.train_rmsweb_models,
                inputs=[
                    "sft_model",
                    "critical_states",
                    "sft_states_dev",
                    "sft_states_train",
                    "params:salvage_ds",
                ],
                outputs=["rmsweb_models", "salvage_ds_metrics", "salvage_ds_report"],
                name="train_salvage_ds",
            ),
            Node(
                nodes.gather_groups,
                inputs=["salvage_ds_report", "params:salvage_ds"],
                outputs="salvage_ds_groups",
                name="gather_salvage_ds_groups",
            ),
            Node(
                nodes.choose_rmsweb_model,
                inputs=["rmsweb_models", "salvage_ds_report"],
                outputs="rmsweb_model",
                name="choose_rmsweb_model",
            ),
            Node(
                nodes.plot_salvage_ds_metrics,
                inputs=["salvage_ds_metrics", "salvage_ds_report"],
                outputs="salvage_ds_plot",
                name="plot_salvage_ds_metrics",
            ),
            Node(
                nodes.plot_state_competence,
                inputs=["salvage_ds_groups", "params:salvage_ds"],
                outputs="salvage_ds_states_plot",
                name="plot_state_competence",
            ),
        ]
    )
