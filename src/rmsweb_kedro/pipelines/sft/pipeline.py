"""Wiring of the ``sft`` pipeline (see nodes.py)."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.sft.nodes import augment_train_states, build_base_model, train_sft


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
                augment_train_states,
                inputs=["sft_states_train", "params:sft"],
                outputs="sft_states_train_augmented",
                name="augment_sft_train_states",
            ),
            Node(
                train_sft,
                inputs=["base_model", "sft_states_train_augmented", "sft_states_val", "params:sft"],
                outputs=["sft_model", "sft_metrics", "sft_loss_curve"],
                name="train_sft",
            ),
        ]
    )
