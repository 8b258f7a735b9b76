"""The tasks pipeline: the sandbox suite (``sandbox_tasks``) and its summary, and the ``tasks`` table of the
configured sources that every episode-running stage reads (docs/tasks.md)."""

from rmsweb_kedro.pipelines.tasks.pipeline import create_pipeline

__all__ = ["create_pipeline"]
