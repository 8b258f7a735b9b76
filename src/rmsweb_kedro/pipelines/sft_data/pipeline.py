"""Wiring of the ``sft_data`` pipeline (see nodes.py)."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.sft_data.nodes import build_states, describe_states, split_by_task


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                build_states,
                inputs=["shortened_trajectories", "shortened_steps"],
                outputs="sft_states",
                name="build_sft_states",
            ),
            Node(
                split_by_task,
                inputs=["sft_states", "params:sft_data"],
                outputs=["sft_states_train", "sft_states_val", "sft_states_probe", "sft_states_dev"],
                name="split_sft_states_by_task",
            ),
            Node(
                describe_states,
                inputs=[
                    "sft_states_train",
                    "sft_states_val",
                    "sft_states_probe",
                    "sft_states_dev",
                    "params:sft_data",
                ],
                outputs="sft_data_stats",
                name="describe_sft_states",
            ),
        ]
    )
