"""The ``trajectories`` pipeline: raw trajectory files -> validated tables + quarantine -> shortened tables."""

from rmsweb_kedro.pipelines.trajectories.pipeline import create_pipeline

__all__ = ["create_pipeline"]
