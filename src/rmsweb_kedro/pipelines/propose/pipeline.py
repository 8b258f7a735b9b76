"""Wiring of the propose pipeline."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.propose.nodes import propose_tasks


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                propose_tasks,
                inputs={"params": "params:propose", "credentials": "endpoint_credentials"},
                outputs=["proposed_tasks", "proposal_report"],
                name="propose_tasks",
            )
        ]
    )
