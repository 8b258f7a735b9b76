"""Wiring of the ``sft`` pipeline (see nodes.py)."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.sft.nodes import build_base_model, train_sft


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                build_base_model,
                inputs=["sft_states_train", "params:sft"],
                outputs="base_model",
                name="build_base_model",
            ),
            Node(
                train_sft,
                inputs=["base_model", "sft_states_train", "sft_states_val", "params:sft"],
                outputs=["sft_model", "sft_metrics", "sft_loss_curve"],
                name="train_sft",
            ),
        ]
    )
