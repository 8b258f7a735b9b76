"""Wiring of the tasks pipeline."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.tasks.nodes import (
    assemble_tasks,
    generate_sandbox_tasks,
    plot_sandbox_tasks,
    summarise_sandbox_tasks,
)


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                generate_sandbox_tasks,
                inputs="params:sandbox",
                outputs="sandbox_tasks",
                name="generate_sandbox_tasks",
            ),
            Node(
                summarise_sandbox_tasks,
                inputs="sandbox_tasks",
                outputs="sandbox_task_summary",
                name="summarise_sandbox_tasks",
            ),
            Node(
                plot_sandbox_tasks,
                inputs="sandbox_task_summary",
                outputs="sandbox_task_plot",
                name="plot_sandbox_tasks",
            ),
            Node(
                assemble_tasks,
                inputs=["sandbox_tasks", "params:tasks"],
                outputs=["tasks", "task_quarantine", "task_report"],
                name="assemble_tasks",
            ),
        ]
    )
