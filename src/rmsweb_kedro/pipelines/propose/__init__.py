"""The propose pipeline: tasks for a list of websites, written by an LLM and filtered (docs/tasks.md)."""

from rmsweb_kedro.pipelines.propose.pipeline import create_pipeline

__all__ = ["create_pipeline"]
