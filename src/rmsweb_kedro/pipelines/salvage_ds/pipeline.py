"""The ``salvage_ds`` pipeline: wiring only (nodes in ``nodes.py``, the maths in ``training/salvage_ds.py``)."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.salvage_ds import nodes


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                nodes.train_rmsweb_model,
                inputs=["sft_model", "critical_states", "sft_states_val", "params:salvage_ds"],
                outputs=["rmsweb_model", "salvage_ds_metrics", "salvage_ds_report"],
                name="train_salvage_ds",
            ),
            Node(
                nodes.plot_salvage_ds_metrics,
                inputs="salvage_ds_metrics",
                outputs="salvage_ds_plot",
                name="plot_salvage_ds_metrics",
            ),
        ]
    )
