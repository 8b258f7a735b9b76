"""Wiring of the ``trajectories`` pipeline (see nodes.py for what each step does)."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.trajectories.nodes import (
    plot_shortening,
    report_ingest,
    report_shortening,
    shorten_trajectories,
    validate_trajectories,
)


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                validate_trajectories,
                inputs=["raw_trajectories", "params:trajectories"],
                outputs=["trajectories", "steps", "quarantine", "ingest_counts"],
                name="validate_trajectories",
            ),
            Node(
                report_ingest,
                inputs=["trajectories", "steps", "quarantine", "ingest_counts"],
                outputs="ingest_report",
                name="report_ingest",
            ),
            Node(
                shorten_trajectories,
                inputs=["trajectories", "steps"],
                outputs=["shortened_trajectories", "shortened_steps"],
                name="shorten_trajectories",
            ),
            Node(
                report_shortening,
                inputs=["trajectories", "shortened_trajectories"],
                outputs="shortening_report",
                name="report_shortening",
            ),
            Node(
                plot_shortening, inputs="shortening_report", outputs="shortening_plot", name="plot_shortening"
            ),
        ]
    )
