"""The live pipeline: a trained policy on the public benchmarks' real websites, judged by LLM judges (docs/evaluate.md)."""

from rmsweb_kedro.pipelines.live.pipeline import create_pipeline

__all__ = ["create_pipeline"]
