"""Wiring of the sandbox pipeline."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.sandbox.nodes import (
    generate_sandbox_tasks,
    plot_sandbox_tasks,
    summarise_sandbox_tasks,
)


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(generate_sandbox_tasks, "params:sandbox", "sandbox_tasks", name="generate_sandbox_tasks"),
            Node(
                summarise_sandbox_tasks,
                "sandbox_tasks",
                "sandbox_task_summary",
                name="summarise_sandbox_tasks",
            ),
            Node(plot_sandbox_tasks, "sandbox_task_summary", "sandbox_task_plot", name="plot_sandbox_tasks"),
        ]
    )
