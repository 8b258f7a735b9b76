"""Wiring of the ``judge_agreement`` pipeline (not in ``__default__``: it needs an LLM judge endpoint):
collection_log -> a stratified sample of sandbox episodes -> the LLM judge's verdicts -> agreement table and plot."""

from kedro.pipeline import Node, Pipeline

from rmsweb_kedro.pipelines.judge_agreement import nodes


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                nodes.sample_episodes,
                inputs={"collection_log": "collection_log", "params": "params:judge_agreement"},
                outputs="judge_agreement_sample",
                name="sample_judge_agreement_episodes",
            ),
            Node(
                nodes.judge_episodes,
                inputs={
                    "sample": "judge_agreement_sample",
                    "sandbox_tasks": "sandbox_tasks",
                    "params": "params:judge_agreement",
                    "credentials": "endpoint_credentials",
                },
                outputs="judge_agreement_verdicts",
                name="judge_agreement_episodes",
            ),
            Node(
                nodes.summarize_agreement,
                inputs={"verdicts": "judge_agreement_verdicts", "params": "params:judge_agreement"},
                outputs=["judge_agreement_table", "judge_agreement_summary"],
                name="summarize_judge_agreement",
            ),
            Node(
                nodes.plot_agreement,
                inputs={"table": "judge_agreement_table", "summary": "judge_agreement_summary"},
                outputs="judge_agreement_plot",
                name="plot_judge_agreement",
            ),
        ]
    )
