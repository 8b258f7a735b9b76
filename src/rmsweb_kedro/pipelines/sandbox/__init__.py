"""The sandbox pipeline: the task suite of the local websites (``sandbox_tasks``) and its summary."""

from rmsweb_kedro.pipelines.sandbox.pipeline import create_pipeline

__all__ = ["create_pipeline"]
