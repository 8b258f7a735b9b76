"""Wiring of the live pipeline: benchmark task files -> the RMSWeb policy on the live sites, judged by each
benchmark's LLM judge -> per-task results, a summary per benchmark, Online-Mind2Web's submission folder
(``live.output_dir``). Not part of ``__default__``: `kedro run --env production --pipelines live`."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.live.nodes import run_live_tasks, select_live_tasks, summarize_live


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                select_live_tasks,
                inputs={
                    "webvoyager": "webvoyager_tasks",
                    "online_mind2web": "online_mind2web_tasks",
                    "webtailbench": "webtailbench_tasks",
                    "params": "params:live",
                },
                outputs=["live_tasks", "live_task_load_report"],
                name="select_live_tasks",
            ),
            Node(
                run_live_tasks,
                inputs={
                    "live_tasks": "live_tasks",
                    "model": "rmsweb_model",
                    "params": "params:live",
                    "policy": "params:evaluate.policy",
                    "rollouts": "params:rollouts",
                    "credentials": "endpoint_credentials",
                },
                outputs=["live_results", "live_steps"],
                name="run_live_tasks",
            ),
            Node(
                summarize_live,
                inputs={"results": "live_results", "params": "params:live"},
                outputs="live_summary",
                name="summarize_live",
            ),
        ]
    )
