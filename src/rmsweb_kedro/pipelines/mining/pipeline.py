"""The ``mining`` pipeline: wiring only (nodes in ``nodes.py``, rules in ``rmsweb_kedro.measures.mining``)."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.mining import nodes


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                nodes.prepare_corpus,
                inputs=["sft_states_train", "sft_states_probe", "params:mining"],
                outputs="mining_corpus",
                name="prepare_mining_corpus",
            ),
            Node(
                nodes.probe_offline,
                inputs=["mining_corpus", "sft_model", "params:mining"],
                outputs="mining_offline_probes",
                name="probe_offline",
            ),
            Node(
                nodes.probe_online,
                inputs={
                    "tasks": "tasks",
                    "sft_states_train": "sft_states_train",
                    "sft_states_probe": "sft_states_probe",
                    "sft_model": "sft_model",
                    "params": "params:mining",
                    "rollouts": "params:rollouts",
                },
                outputs=["mining_online_probes", "mining_online_rollouts", "mining_online_steps"],
                name="probe_online",
            ),
            Node(
                nodes.select_critical_states,
                inputs=["mining_offline_probes", "mining_online_probes", "params:mining"],
                outputs="critical_states",
                name="select_critical_states",
            ),
            Node(
                nodes.summarize_failure_modes,
                inputs=[
                    "mining_offline_probes",
                    "mining_online_probes",
                    "mining_online_rollouts",
                    "params:mining",
                ],
                outputs="failure_modes",
                name="summarize_failure_modes",
            ),
            Node(
                nodes.plot_failure_modes,
                inputs="failure_modes",
                outputs="failure_modes_plot",
                name="plot_failure_modes",
            ),
            Node(
                nodes.report_mining,
                inputs=[
                    "mining_offline_probes",
                    "mining_online_probes",
                    "critical_states",
                    "mining_online_rollouts",
                    "params:mining",
                ],
                outputs="mining_report",
                name="report_mining",
            ),
        ]
    )
