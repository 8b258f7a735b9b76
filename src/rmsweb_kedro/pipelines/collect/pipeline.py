"""Wiring of the collect pipeline: tasks -> collection_log -> raw_trajectories, collection_stats, plot."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.collect.nodes import (
    collect_trajectories,
    collection_stats,
    plot_collection,
    publish_raw_trajectories,
    select_collection_tasks,
)


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                select_collection_tasks,
                ["tasks", "params:collect"],
                "collection_tasks",
                name="select_collection_tasks",
            ),
            Node(
                collect_trajectories,
                inputs={
                    "tasks": "collection_tasks",
                    "params": "params:collect",
                    "rollouts": "params:rollouts",
                    "credentials": "endpoint_credentials",
                },
                outputs="collection_log",
                name="collect_trajectories",
            ),
            Node(
                publish_raw_trajectories,
                ["collection_log", "params:collect"],
                "raw_trajectories",
                name="publish_raw_trajectories",
            ),
            Node(
                collection_stats,
                ["collection_log", "params:collect"],
                "collection_stats",
                name="collection_stats",
            ),
            Node(plot_collection, "collection_stats", "collection_plot", name="plot_collection"),
        ]
    )
